"""Nothing stale: a fold counts only for the inputs and settings that made it, wherever its files came from."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from pipeline import config, cv, fingerprint, layout, predict, schema, train, validity
from pipeline import data as data_mod
from pipeline.core.resume import Interrupted
from pipeline.errors import PipelineError
from pipeline.inputs import sample
from pipeline.scoring import report
from tests.helpers import SCALE
from tests.helpers.folds import StopAt, fold_run
from tests.helpers.tinyrun import stage_argv

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_one_thread")]


def cfg_of(argv: list[str]):
    return config.load("sample", argv[2:])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, torch_one_thread) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("fp")
    raw = root / "raw"
    sample.write(raw, seed=0, scale=SCALE)
    argv = stage_argv(root, raw)
    for stage in (data_mod, train, predict):
        assert stage.main(argv) == 0
    return SimpleNamespace(root=root, raw=raw, argv=argv, cfg=cfg_of(argv), exp=layout.experiment_dir(cfg_of(argv)))


def copy_run(trained, dest: Path) -> Path:
    """The trained run's raw files and models in a new place, so that a test may change them."""
    shutil.copytree(trained.raw, dest / "raw")
    shutil.copytree(trained.root / "models", dest / "models")
    return dest / "raw"


def test_settings_that_do_not_change_weights_keep_the_fingerprint(trained, tmp_path) -> None:
    digest = validity.current_fingerprint(trained.cfg)
    same = [
        "train.eval_batch=7",
        "train.save_every_steps=5",
        "train.max_bad_steps=3",
        "train.folds=[1]",
        "train.device=cpu",
        "train.deterministic=true",  # which kernels compute the same sums, not what the weights are
        "train.checkpointing=false",
        "train.checkpointing=auto",
        "train.layer_decay=1",  # off, as folds made before the setting were trained
        "model.init_args=[train.lr=0.5]",  # stage 1's settings reach a fold through its own fingerprint
        f"models_dir={tmp_path}",
    ]
    for item in same:
        assert validity.current_fingerprint(cfg_of(trained.argv + [item])) == digest, item


# weight-changing settings free text with no choices: no value can be made up for them here. model.init_from names a
# stage-1 experiment, whose own fingerprint reaches the fold's (tests/test_stage1.py); model.init_folds an experiment
# whose folds' fingerprints do, and train.langs languages of the table (both in tests/test_specialists.py)
FREE_TEXT = {"model.init_from", "model.init_folds", "train.langs"}


def other_value(value, meta: schema.Setting):
    """A valid value of a setting other than `value`: another choice, the other bool, twice, half (or 1, 0.5)."""
    if meta.choices:
        return next(c for c in meta.choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 or 1  # doubled: sizes stay multiples of one another (model.tiny.hidden of heads)
    if isinstance(value, float):
        return value / 2 if value else 0.5
    return None


def weight_settings(cfg, section, prefix: str):
    """(dotted key, value, Setting) of every setting in a config section, nested blocks' keys included, whose role
    says it changes a fold's weights (pipeline.schema: every role but NEVER) and which counts in `cfg` (its `when`)."""
    for f in dataclasses.fields(section):
        meta, value = f.metadata["setting"], getattr(section, f.name)
        if meta.role == schema.NEVER or not fingerprint.applies(cfg, meta):
            continue
        if dataclasses.is_dataclass(value):
            yield from weight_settings(cfg, value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value, meta


def test_every_setting_the_schema_says_changes_weights_changes_the_fingerprint(prepared) -> None:
    """Derived from the schema, not listed here: a new weight-changing setting is covered without editing this test.
    A block that counts only under a setting (model.lora while model.lora.r > 0) is varied with that setting on."""
    found = {}  # key: (the config it is varied in, the other value), each key in the first config where it counts
    for base in (prepared, config.with_overrides(prepared, ["model.lora.r=8"])):
        for sec in fingerprint.FOLD_SECTIONS:
            for key, value, meta in weight_settings(base, getattr(base, sec), f"{sec}."):
                if meta.choices and len(meta.choices) < 2:
                    continue  # one choice (train.loss today): no other value to train with
                found.setdefault(key, (base, key, other_value(value, meta)))
    found = list(found.values())
    assert {key for _, key, v in found if v is None} == FREE_TEXT  # a new free-text one: give it a value here
    checked = set()
    for base, key, value in [f for f in found if f[2] is not None]:
        digest = validity.current_fingerprint(base)
        changed = config.with_overrides(base, [f"{key}={json.dumps(value)}"])
        assert schema.value_of(changed, key) == value, key
        assert validity.current_fingerprint(changed) != digest, f"{key}={value} keeps the fingerprint"
        checked.add(key)
    assert {"train.lr", "train.precision", "model.lora.alpha", "model.tiny.hidden"} <= checked, checked


def test_a_copy_of_the_data_elsewhere_uses_the_same_folds(trained, tmp_path, capsys) -> None:
    """A Kaggle run reads /kaggle/input/...; its downloaded folds count locally for the same files."""
    raw = copy_run(trained, tmp_path)
    argv = stage_argv(tmp_path, raw)
    assert data_mod.main(argv) == 0
    assert validity.current_fingerprint(cfg_of(argv)) == validity.current_fingerprint(trained.cfg)
    assert train.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("complete with these settings") == 2 and "=== fold" not in out
    assert predict.main(argv) == 0


def test_changed_data_retrains_and_stale_folds_are_never_used(trained, tmp_path, capsys) -> None:
    raw = copy_run(trained, tmp_path)
    argv = stage_argv(tmp_path, raw)
    valid = pd.read_csv(raw / "validation.csv", dtype=str, keep_default_na=False)
    valid.loc[0, "comment_text"] = "an edited comment " + valid.loc[0, "comment_text"]
    valid.to_csv(raw / "validation.csv", index=False)
    assert data_mod.main(argv) == 0
    cfg = cfg_of(argv)
    assert validity.current_fingerprint(cfg) != validity.current_fingerprint(trained.cfg)
    # before retraining, predict and cv refuse the old folds, and say why
    with pytest.raises(PipelineError, match="trained on other data or settings"):
        predict.run(cfg)
    with pytest.raises(PipelineError, match="no trained folds for these inputs"):
        report.cv_report(cfg)
    capsys.readouterr()
    assert train.main(argv) == 0
    out = capsys.readouterr().out
    assert "skipped" not in out and out.count("=== fold") == 2


def test_fewer_folds_leave_the_old_ones_out(trained, tmp_path, capsys) -> None:
    copy_run(trained, tmp_path)
    exp = tmp_path / "models" / "sample"
    shutil.copytree(exp / "fold1", exp / "fold2")  # an old fold of a 3-fold run
    (exp / "fold0" / "done.json").unlink()  # and an unfinished one
    digest = validity.current_fingerprint(trained.cfg)
    use, left_out = validity.select_folds(exp, digest, 2)
    assert [p.name for p in use] == ["fold1"]
    assert left_out == {"fold0": "not complete", "fold2": "not a fold of data.folds=2"}
    cfg = cfg_of(stage_argv(tmp_path, trained.raw))
    cfg = config.from_dict({**cfg.to_dict(), "input_dir": str(trained.root / "input")})
    validity.usable_folds(cfg, digest, "predict")
    err = capsys.readouterr().err
    assert "predict: using fold1; left out fold0: not complete; fold2: not a fold of data.folds=2" in err


def test_a_retrain_removes_the_old_done_json_once_it_begins(trained, tmp_path) -> None:
    copy_run(trained, tmp_path)
    cfg = cfg_of(trained.argv + [f"models_dir={tmp_path / 'models'}", "train.lr=0.002"])
    fold_dir = tmp_path / "models" / "sample" / "fold0"
    assert (fold_dir / "done.json").exists() and (fold_dir / "test.csv").exists()
    run = fold_run(cfg, StopAt(2))
    assert (fold_dir / "done.json").exists()  # built, not begun: a refusal or a stop now would lose nothing
    with pytest.raises(Interrupted):
        run.run()  # stopped at the second step: the old done.json must not make it look complete
    assert not (fold_dir / "done.json").exists() and not (fold_dir / "test.csv").exists()
    assert not validity.is_complete(fold_dir, validity.current_fingerprint(cfg))
    assert not validity.is_complete(fold_dir, validity.current_fingerprint(trained.cfg))


def test_test_predictions_are_recomputed_when_what_they_depend_on_changes(trained, monkeypatch) -> None:
    calls = []
    real = predict.loop.predict
    monkeypatch.setattr(predict.loop, "predict", lambda *a, **k: calls.append(1) or real(*a, **k))
    stamp = trained.exp / "fold0" / "test.json"
    cached = json.loads(stamp.read_text())
    key = cached["key"]
    assert set(key) == {"weights", "test", "max_length", "precision"}
    assert set(cached["file"]) == {"bytes", "sha256"}  # and the predictions it describes, by content
    assert predict.main(trained.argv) == 0
    assert calls == []  # the cached predictions were used
    stamp.write_text(json.dumps({**cached, "key": {**key, "precision": "bf16"}}))  # made under another precision
    assert predict.main(trained.argv) == 0
    assert len(calls) == 1  # fold0 predicted again, fold1 still cached
    assert json.loads(stamp.read_text())["key"] == key


def test_model_path_is_where_not_what(tmp_path) -> None:
    base = ["model.name=xlm-roberta-large"]
    meta = {"table_digest": "t"}
    a = validity.current_fingerprint(config.load("sample", [*base, "model.path=/kaggle/input/x"]), meta)
    b = validity.current_fingerprint(config.load("sample", [*base, "model.path=/home/me/xlmr"]), meta)
    assert a == b
    for name in ("one", "two"):  # a folder given as model.name counts by its content
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")

    def of(folder: str) -> str:
        return validity.current_fingerprint(config.load("sample", [f"model.name={tmp_path / folder}"]), meta)

    assert of("one") == of("two")
    (tmp_path / "two" / "config.json").write_text('{"hidden_size": 8}')
    assert of("two") != of("one")


def test_test_labels_give_a_test_auc_kept_in_cv_json(trained, tmp_path, capsys) -> None:
    raw = copy_run(trained, tmp_path)
    argv = stage_argv(tmp_path, raw)
    sub = pd.read_csv(trained.root / "subs" / "submission.csv", dtype={"id": str})
    labels = sub.assign(toxic=(sub["toxic"] > sub["toxic"].median()).astype(int))  # ranks like the predictions
    labels.loc[labels.index[:5], "toxic"] = -1  # rows the competition did not score
    labels.to_csv(raw / layout.TEST_LABELS, index=False)
    assert data_mod.main(argv) == 0 and predict.main(argv) == 0
    assert "test AUC 1.0000 (" in capsys.readouterr().out
    cv_path = tmp_path / "models" / "sample" / "cv.json"
    score = json.loads(cv_path.read_text())["test_auc"]
    assert score["auc"] == 1.0 and score["rows"] == len(sub) - 5 and set(score["per_lang"]) == set(sub_langs(raw))
    assert cv.main(argv) == 0  # `make cv` rewrites cv.json and keeps the score of the same folds
    assert json.loads(cv_path.read_text())["test_auc"] == score


def test_make_cv_keeps_what_calibration_recorded_for_the_same_folds(trained, tmp_path, capsys) -> None:
    raw = copy_run(trained, tmp_path)
    argv = stage_argv(tmp_path, raw, "predict.calibration=lang")
    assert data_mod.main(argv) == 0 and predict.main(argv) == 0
    cv_path = tmp_path / "models" / "sample" / "cv.json"
    recorded = json.loads(cv_path.read_text())["calibration"]
    assert recorded["how"] == "lang" and recorded["folds"] == ["fold0", "fold1"]
    assert cv.main(argv) == 0  # the board ranks a calibrated submission by this record: it must stay
    assert json.loads(cv_path.read_text())["calibration"] == recorded
    # predicted again without calibration: the record no longer describes the submission, and goes
    assert predict.main(stage_argv(tmp_path, raw)) == 0
    assert "calibration" not in json.loads(cv_path.read_text())


def sub_langs(raw: Path) -> set[str]:
    return set(pd.read_csv(raw / "test.csv", dtype=str, keep_default_na=False)["lang"])


def test_a_stage_run_without_trains_args_names_the_settings_that_differ(trained) -> None:
    with pytest.raises(PipelineError, match=r"differ from .*pipeline.yaml in train.lr \(0.002 here, 0.001 there\)"):
        predict.run(cfg_of(trained.argv + ["train.lr=0.002"]))


def test_the_world_size_is_in_the_fingerprint_only_when_not_one() -> None:
    """A fold trained by one process keeps the fingerprint it had before the world size counted: these digests are
    what the code before this change computed for the same inputs (folds trained then still count)."""
    from pipeline import fingerprint

    sample_fp = fingerprint.fold_fingerprint(
        fingerprint.made_from(config.load("sample", []), "table-digest", {"tiny": True, "tokenizer": "tok"})
    )
    large_fp = fingerprint.fold_fingerprint(
        fingerprint.made_from(config.load("xlmr-large", []), "table-digest", {"name": "xlm-roberta-large"})
    )
    assert (sample_fp, large_fp) == ("a35c36509e19b726", "70656d0eb5d79449")
    assert fingerprint.with_world(sample_fp, 1) == sample_fp
    two, four = fingerprint.with_world(sample_fp, 2), fingerprint.with_world(sample_fp, 4)
    assert len({sample_fp, two, four}) == 3 and len(two) == len(sample_fp)


def test_a_fold_counts_with_the_world_size_that_trained_it_and_folds_never_mix_two(trained, tmp_path) -> None:
    """A fold trained by two processes (twice the effective batch) is another experiment than one trained by one:
    its done.json must carry the fingerprint of two, and a run of one process does not add folds beside it."""
    from pipeline import fingerprint

    copy_run(trained, tmp_path)
    cfg = config.load("sample", [*trained.argv[2:], f"models_dir={tmp_path / 'models'}"])
    digest = validity.current_fingerprint(cfg)
    fold0 = layout.experiment_dir(cfg) / "fold0"
    done = json.loads((fold0 / layout.DONE).read_text())
    assert done["world"] == 1 and done["digest"] == digest  # one process: the fingerprint as it always was
    assert validity.fold_status(fold0, digest) == ""
    (fold0 / layout.DONE).write_text(json.dumps({**done, "world": 2}))  # the same digest, said to be two processes
    assert validity.fold_status(fold0, digest) == "trained on other data or settings (retrain it with `make train`)"
    (fold0 / layout.DONE).write_text(json.dumps({**done, "world": 2, "digest": fingerprint.with_world(digest, 2)}))
    assert validity.fold_status(fold0, digest) == ""  # what a two-process run writes: it counts, here too
    (layout.experiment_dir(cfg) / "fold1" / layout.DONE).unlink()  # fold 1 left to train
    problem = train.world_problem(cfg, digest, [1], world=1)
    assert problem.startswith(f"fold0 of {layout.experiment_dir(cfg)} were trained by 2 process(es) (effective batch")
    assert "this run has 1" in problem and "run with GPUS=2" in problem
    assert train.world_problem(cfg, digest, [1], world=2) == "" and train.world_problem(cfg, digest, [], 1) == ""


def test_a_block_of_settings_that_differs_is_named_by_its_own_keys() -> None:
    """A LoRA fold trained again under another rank says `model.lora.r (8 here, 4 when trained)`, not both blocks."""
    from pipeline import fingerprint

    ours, theirs = (fingerprint.settings(config.load("sample", [f"model.lora.r={r}"], device=False)) for r in (8, 4))
    assert fingerprint.differ(ours, theirs, "when trained") == "model.lora.r (8 here, 4 when trained)"


def test_a_tfidf_specialists_languages_are_in_its_digest_and_the_default_as_it_was() -> None:
    from pipeline.files import json_digest

    before = json_digest({**fingerprint.TFIDF, "seed": 1, "table": "t", "test": "x"})  # the digest before train.langs
    assert fingerprint.tfidf_fingerprint("t", "x", 1) == before  # every baseline fold made so far still counts
    assert fingerprint.tfidf_fingerprint("t", "x", 1, ("es",)) not in (
        before,
        fingerprint.tfidf_fingerprint("t", "x", 1, ("it",)),
    )
