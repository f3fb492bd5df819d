"""`make blend`: rank-average weights fit on OOF, nested so that fold k's weights never see fold k, written like
an experiment. The weights themselves (pipeline.scoring.blending) are tested in tests/scoring/test_blending.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import baseline, blend, data, experiments, layout, validity
from pipeline.blend import BlendError
from pipeline.errors import ConfigError, PipelineError
from pipeline.files import read_json
from pipeline.inputs import tables
from pipeline.scoring import blending, metrics
from pipeline.scoring.submission import ensemble
from tests.helpers import SCALE, digests, make_cfg
from tests.helpers.experiments import Competition, ids_of_test

ROOT = Path(__file__).resolve().parents[1]


def two_members(tmp_path: Path, n: int = 600) -> tuple[Competition, dict]:
    """Members a and b on one competition: the label plus independent noise each (so their blend beats both),
    90 test rows."""
    comp = Competition(tmp_path, n)
    y = comp.rows["toxic"].to_numpy()
    rng = np.random.default_rng(3)
    preds, tests = {}, {}
    for name in ("a", "b"):
        preds[name] = 1 / (1 + np.exp(-(2 * y - 1 + rng.normal(0, 1.3, n))))
        tests[name] = {k: rng.random(90) for k in range(5)}
        comp.experiment(name, preds[name], tests[name])
    return comp, {"pred": preds, "test": tests}


# ---------------------------------------------------------------- the stage


def test_blend_of_two_experiments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    comp, made = two_members(tmp_path)
    rows = comp.rows
    cfg = comp.config("blend.members=[a,b]")
    labels = pd.DataFrame({"id": ids_of_test(), "toxic": np.arange(90) % 3 - 1})  # -1: not scored
    labels.to_csv(tmp_path / "raw" / "test_labels.csv", index=False)
    summary = blend.run(cfg)
    out = capsys.readouterr().out
    exp = tmp_path / "models" / "a+b"
    cv = read_json(exp / "cv.json")
    y, folds = rows["toxic"].to_numpy(), rows["fold"].to_numpy()

    # the reported OOF is the nested one, recomputed here from the members' files and cv.json's fold weights
    ranks = np.column_stack([blending.rank01(made["pred"][n]) for n in ("a", "b")])
    fold_w = {int(k): np.array([w["a"], w["b"]]) for k, w in cv["blend"]["fold_weights"].items()}
    assert sorted(fold_w) == [0, 1, 2, 3, 4]
    expect = blending.apply_weights(ranks, folds, fold_w)
    got = cv["metrics"]["valid_auc"]
    assert got == pytest.approx(metrics.auc(y, expect), abs=1e-3)  # weights are stored rounded
    assert got == summary["metrics"]["valid_auc"] > max(m["valid_auc"] for m in cv["blend"]["member_metrics"].values())
    assert got <= cv["blend"]["metrics_in_sample"]["valid_auc"]
    # the members' OOF are probabilities (a Brier score), the blend's ranks (none)
    assert all(m["brier"] > 0 for m in cv["blend"]["member_metrics"].values()) and cv["metrics"]["brier"] is None
    assert cv["scale"] == "rank"
    assert set(cv["per_lang"]) == {"es", "it", "tr"} and cv["rows"] == len(rows)
    assert cv["blend"]["members"] == ["a", "b"]
    assert sum(cv["blend"]["weights"].values()) == pytest.approx(1.0)
    a0 = read_json(tmp_path / "models" / "a" / "fold0" / "done.json")
    assert cv["blend"]["member_digests"]["a"]["0"] == a0["digest"]
    assert (exp / "cv.png").stat().st_size > 0

    # per fold: the blended OOF rows, the fold-k weights on the members' fold-k test predictions, done.json
    for k in range(5):
        done = read_json(exp / f"fold{k}" / "done.json")
        assert done["members"] == ["a", "b"] and done["weights"] == pytest.approx(fold_w[k].tolist())
        fold_test = pd.read_csv(exp / f"fold{k}" / "test.csv", dtype={"id": str})
        want = fold_w[k] @ np.vstack([blending.rank01(made["test"][n][k]) for n in ("a", "b")])
        np.testing.assert_allclose(fold_test["toxic"], want, atol=1e-4)
        assert len(pd.read_csv(exp / f"fold{k}" / "oof.csv")) == int((folds == k).sum())

    # the submission: all-OOF weights on each member's fold-ensembled test predictions, sample's order
    sub = pd.read_csv(tmp_path / "subs" / "a+b.csv", dtype={"id": str})
    assert list(sub["id"]) == list(ids_of_test()[::-1])
    w = np.array([cv["blend"]["weights"]["a"], cv["blend"]["weights"]["b"]])
    tests = [blending.rank01(ensemble(list(made["test"][n].values()))) for n in ("a", "b")]
    np.testing.assert_allclose(sub.set_index("id").loc[ids_of_test(), "toxic"], w @ np.vstack(tests), atol=1e-4)
    scored = labels[labels["toxic"] >= 0].merge(sub, on="id")
    assert cv["test_auc"]["auc"] == pytest.approx(metrics.auc(scored["toxic_x"], scored["toxic_y"]))

    # printed: each member beside the blend, per language
    assert all(m.header in out for m in metrics.METRICS) and all(f" {lg}" in out for lg in ("es", "it", "tr"))
    assert "\na " in out and "\nb " in out and "blend, nested (honest)" in out
    # no stand-in rows for fr, pt, ru: no 6-lang AUC, which the summary line shows as '-' like every table
    (line,) = [line for line in out.splitlines() if line.startswith("blend a+b:")]
    assert f"{metrics.SIX.header} -, " in line and "best member" not in line and "nan" not in line


@pytest.mark.slow  # blends five folds of two members: seconds
def test_the_blend_is_judged_against_its_best_member_with_a_paired_interval(tmp_path: Path, capsys) -> None:
    """Where the members have a 6-lang AUC, the blend's line names the best member and the blend's difference to it
    with its paired interval (paired.interval), the difference that of the two figures printed."""
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    rng = np.random.default_rng(3)
    for name, noise in (("a", 1.0), ("b", 1.3)):
        pred = 1 / (1 + np.exp(-(2 * y - 1 + rng.normal(0, noise, len(y)))))
        comp.experiment(name, pred, {k: rng.random(90) for k in range(5)}, profile=three)
    summary = blend.run(comp.config("blend.members=[a,b]"))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("blend a+b:")]
    best = summary["blend"]["member_metrics"]["a"][metrics.SIX.key]
    assert f"(best member a {best:.4f}; the blend less it " in line and "the 95% paired interval)" in line, line
    diff, low, high = map(float, line.split("the blend less it ")[1].split(", the")[0].replace(" [", ", ")
                          .rstrip("]").split(", "))  # fmt: skip
    assert low <= diff <= high and diff == pytest.approx(summary["metrics"][metrics.SIX.key] - best, abs=1e-4)


def test_a_blend_refuses_a_calibration_before_any_work(tmp_path: Path) -> None:
    """A blend's predictions are ranks: a calibration fit on probabilities cannot map them, so it is refused
    in one line and nothing is written."""
    comp, _ = two_members(tmp_path)
    with pytest.raises(BlendError, match="predict.calibration=lang\\+prior: a blend's predictions are ranks"):
        blend.run(comp.config("blend.members=[a,b]", "blend.name=cal", "predict.calibration=lang+prior"))
    assert not (tmp_path / "models" / "cal").exists() and not (tmp_path / "subs" / "cal.csv").exists()


def test_blend_name_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    comp, _ = two_members(tmp_path)
    rng = np.random.default_rng(0)
    blend.run(comp.config("blend.members=[a,b]", "blend.name=mine"))
    assert (tmp_path / "models" / "mine" / "cv.json").exists() and (tmp_path / "subs" / "mine.csv").exists()

    with pytest.raises(BlendError, match="two or more"):
        blend.run(comp.config("blend.members=[a]"))
    with pytest.raises(ConfigError, match=r"blend.step=0.0 is out of range"):
        comp.config("blend.members=[a,b]", "blend.step=0")
    with pytest.raises(BlendError, match="member's name"):
        blend.run(comp.config("blend.members=[a,b]", "blend.name=a"))
    comp.experiment("other", comp.rows["toxic"].to_numpy(), None)
    with pytest.raises(BlendError, match="holds an experiment"):  # its folder would be replaced
        blend.run(comp.config("blend.members=[a,b]", "blend.name=other"))
    assert (tmp_path / "models" / "other" / "fold0" / "oof.csv").exists()
    with pytest.raises(BlendError, match="blend member nope: no experiment in"):
        blend.run(comp.config("blend.members=[a,nope]"))

    # a member with a fold missing: the blend is of the folds both have, and says so
    tests = {k: rng.random(90) for k in range(5)}
    comp.experiment("c", rng.random(len(comp.rows)), tests, folds=(0, 1, 2, 3))
    capsys.readouterr()
    part = blend.run(comp.config("blend.members=[a,c]"))
    err = capsys.readouterr().err
    assert "c leaves out fold4: not trained" in err and "a blended on folds [0, 1, 2, 3] only" in err
    assert sorted(part["blend"]["fold_weights"]) == [0, 1, 2, 3]
    assert not (tmp_path / "models" / "a+c" / "fold4").exists()
    part_cfg = comp.config("blend.members=[a,c]")
    assert sorted(experiments.experiment_folds(part_cfg, "a+c")) == [0, 1, 2, 3]  # counts, as the board reads it
    assert sorted(read_json(tmp_path / "models" / "a+c" / "cv.json")["folds"]) == ["0", "1", "2", "3"]
    # one fold in common: nothing to fit fold k's weights on without it
    comp.experiment("one", rng.random(len(comp.rows)), tests, folds=(0,))
    with pytest.raises(BlendError, match=r"the members share 1 usable fold\(s\) \(a \[0, 1, 2, 3, 4\], one \[0\]\)"):
        blend.run(comp.config("blend.members=[a,one]"))
    # a member without test predictions
    comp.experiment("d", rng.random(len(comp.rows)), None)
    with pytest.raises(BlendError, match=r"blend member d: fold0, .*: no test predictions \(run `make predict`\)"):
        blend.run(comp.config("blend.members=[a,d]"))
    comp.experiment("e", rng.random(len(comp.rows)), None, kind="tfidf+lr")
    with pytest.raises(BlendError, match=r"blend member e: .*make it again with `make baseline`"):
        blend.run(comp.config("blend.members=[e,a]"))


def test_blend_uses_members_through_predicts_rule(tmp_path: Path) -> None:
    """A member counts only as predict would count it: complete, current folds of one setting, intact files."""
    comp, _ = two_members(tmp_path)
    cfg = comp.config("blend.members=[a,b]")
    blend.run(cfg)
    # fold 1 of b trained with another learning rate than the rest of b: b mixes settings
    rng = np.random.default_rng(1)
    comp.experiment("b", rng.random(len(comp.rows)), {k: rng.random(90) for k in range(5)}, folds=(1,),
                    overrides=("train.lr=5e-4",))  # fmt: skip
    with pytest.raises(BlendError, match=r"blend member b: fold0, fold2, fold3, fold4: trained on other data"):
        blend.run(cfg)
    comp.experiment("b", rng.random(len(comp.rows)), {k: rng.random(90) for k in range(5)})
    blend.run(cfg)

    # a member's OOF cut short, or its test predictions edited: refused, not blended
    oof = tmp_path / "models" / "a" / "fold2" / "oof.csv"
    oof.write_text("".join(oof.read_text().splitlines(keepends=True)[:20]))
    with pytest.raises(BlendError, match=r"blend member a: fold2: oof.csv has .* bytes, done.json records"):
        blend.run(cfg)
    comp.experiment("a", rng.random(len(comp.rows)), {k: rng.random(90) for k in range(5)})
    test = tmp_path / "models" / "a" / "fold3" / "test.csv"
    test.write_text(test.read_text().replace("0.", "0.9", 1))
    with pytest.raises(BlendError, match=r"blend member a: fold3: test.csv has .* bytes"):
        blend.run(cfg)

    # the competition's labels changed since the members were made: their tables are stale, say `make data`
    comp.experiment("a", rng.random(len(comp.rows)), {k: rng.random(90) for k in range(5)})
    valid = comp.raw / layout.VALID
    stat = valid.stat()
    valid.write_text(valid.read_text().replace(",0\n", ",9\n").replace(",1\n", ",0\n").replace(",9\n", ",1\n"))
    os.utime(valid, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same size and time: only the content changed
    assert valid.stat().st_size == stat.st_size
    with pytest.raises(BlendError, match=r"blend member a: .*validation.csv changed\); rerun `make data`"):
        blend.run(cfg)


def test_blend_names_never_reach_outside_models(tmp_path: Path) -> None:
    comp, _ = two_members(tmp_path)
    before = digests(tmp_path / "models")
    names = [".", "..", "../victim", "/abs", "a/b", ".hidden", "x" * 300]
    for key, value in [("blend.name", n) for n in names] + [("blend.members", "[a,../models/b]")]:
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}="):
            blend.run(comp.config("blend.members=[a,b]", f"{key}={value}"))
    assert digests(tmp_path / "models") == before


def test_main_reports_a_refusal_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    comp, _ = two_members(tmp_path)
    args = [f"input_dir={comp.cfg.input_dir}", f"models_dir={tmp_path / 'models'}", "data.source=dir",
            f"data.dir={tmp_path / 'raw'}", "data.extra_files=[]"]  # fmt: skip
    assert blend.main([*args, "blend.members=a,missing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: blend member missing: no experiment") and err.count("\n") == 1


@pytest.mark.e2e
def test_make_blend_passes_the_members(tmp_path: Path) -> None:
    """BLEND reaches the stage as one word, which the stage splits: the shell never runs what it holds."""
    comp, _ = two_members(tmp_path)
    args = f"input_dir={comp.cfg.input_dir} models_dir={tmp_path / 'models'} submissions_dir={tmp_path / 'subs'} "
    args += f"data.source=dir data.dir={tmp_path / 'raw'} data.extra_files=[] blend.step=0.1"
    out = subprocess.run(["make", "blend", "BLEND= a  b ", f"ARGS={args}"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert read_json(tmp_path / "models" / "a+b" / "cv.json")["blend"]["step"] == 0.1
    assert (tmp_path / "subs" / "a+b.csv").exists()


@pytest.mark.slow  # trains or reports several folds: seconds
def test_blend_of_two_baselines_on_the_sample(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """End to end on the stages' own files: two TF-IDF experiments on the sample, blended through main()."""
    common = [f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path / 'subs'}"]
    for name, negatives in (("wide", 300), ("narrow", 30)):
        cfg = make_cfg(tmp_path, f"name={name}", f"data.english_negatives={negatives}", *common)
        data.prepare(cfg, log=lambda *_: None)
        baseline.run(cfg)
    capsys.readouterr()
    args = [f"input_dir={tmp_path / 'input'}", f"data.sample_scale={SCALE}"]
    assert blend.main([*args, *common, "blend.members=wide-tfidf,narrow-tfidf"]) == 0
    out = capsys.readouterr().out
    assert "wide-tfidf" in out and "narrow-tfidf" in out and "blend, nested (honest)" in out
    block = out[out.index("== blend: wide-tfidf+narrow-tfidf ==") :].splitlines()  # the run's end-of-run block
    assert re.match(r"OOF         \d folds: 6-lang AUC", block[1]) and "curves" not in out[out.index("== blend") :]
    assert block[-1] == f"submission  {tmp_path / 'subs' / 'wide-tfidf+narrow-tfidf.csv'}"
    sub = pd.read_csv(tmp_path / "subs" / "wide-tfidf+narrow-tfidf.csv", dtype={"id": str}, keep_default_na=False)
    sample = pd.read_csv(layout.raw_dir(cfg) / layout.SAMPLE_SUBMISSION, dtype={"id": str}, keep_default_na=False)
    assert list(sub["id"]) == list(sample["id"]) and sub["toxic"].between(0, 1).all()
    cv = read_json(tmp_path / "models" / "wide-tfidf+narrow-tfidf" / "cv.json")
    assert cv["rows"] == len(tables.load_table(cfg)[0].query("fold >= 0"))


def test_a_blend_teaches_with_its_members_probabilities_not_its_ranks(tmp_path: Path) -> None:
    """A blend as a pseudo-labelling teacher: its fold-k `prob` (the fold-k weights on the members'
    probabilities) is what labels the test rows, never its ranks, whose mean is 0.5 whatever the rate."""
    from pipeline.inputs import pseudo

    comp = Competition(tmp_path, 600)
    y, rng = comp.rows["toxic"].to_numpy(), np.random.default_rng(3)
    for name in ("a", "b"):  # members whose test probabilities say about 10% toxic
        pred = 1 / (1 + np.exp(-(2 * y - 1 + rng.normal(0, 1.3, len(y)))))
        comp.experiment(name, pred, {k: rng.random(90) * 0.2 for k in range(5)})
    blend.run(comp.config("blend.members=[a,b]"))
    exp = tmp_path / "models" / "a+b"
    cfg = comp.config("data.pseudo_from=a+b")
    test = pd.DataFrame({"id": ids_of_test(), "text": "x", "lang": "es"})
    folds = pseudo.teacher_folds(cfg)
    rows = pseudo.pseudo_rows(cfg, test, folds)
    for k in range(5):
        fold_test = pd.read_csv(exp / f"fold{k}" / "test.csv", dtype={"id": str}).set_index("id")
        w = read_json(exp / f"fold{k}" / "done.json")["weights"]
        members = [pd.read_csv(tmp_path / "models" / n / f"fold{k}" / "test.csv", dtype={"id": str}).set_index("id")
                   for n in ("a", "b")]  # fmt: skip
        want = w[0] * members[0]["toxic"] + w[1] * members[1]["toxic"]
        np.testing.assert_allclose(fold_test.loc[test["id"], "prob"], want.loc[test["id"]], atol=1e-4)
        got = rows[rows["pseudo_for"] == k]["toxic"].to_numpy()
        np.testing.assert_allclose(got, fold_test.loc[test["id"], "prob"].to_numpy())
    assert rows["toxic"].mean() < 0.15  # the members' rate, not the ranks' 0.5
    assert validity.read_done(exp / "fold0")["scale"] == "rank"

    fold0 = exp / "fold0" / "test.csv"  # a blend made before blends wrote probabilities: ranks only
    pd.read_csv(fold0, dtype={"id": str})[["id", "toxic"]].to_csv(fold0, index=False)
    with pytest.raises(PipelineError, match="holds ranks, not probabilities"):
        pseudo.pseudo_rows(cfg, test, folds)


def test_the_blend_weights_maximise_the_estimate_it_reports() -> None:
    """Held-out English originals stand for no test language: they weigh nothing in the estimate, so the
    weights must not be chosen on them. Member a ranks the es rows, member b the English ones."""
    rng = np.random.default_rng(0)
    n = 400
    y = (np.arange(2 * n) % 3 == 0).astype(int)
    lang = np.array(["es"] * n + ["en"] * n)
    source = np.array(["validation"] * n + ["translated-train"] * n)
    good, noise = y + rng.normal(0, 0.8, 2 * n), rng.random(2 * n)
    a = np.where(lang == "es", good, noise)
    b = np.where(lang == "en", y + rng.normal(0, 0.3, 2 * n), noise * 0.5 + good * 0.5)
    oof = pd.DataFrame({"id": [f"r{i}" for i in range(2 * n)], "lang": lang, "toxic": y, "fold": np.arange(2 * n) % 5,
                        "source": source})  # fmt: skip
    members = [blend.Member(m, oof.assign(pred=p), {}, {}) for m, p in (("a", a), ("b", b))]
    profile = {"mix": {"es": 1.0}, "rates": {"es": float(y[:n].mean())}, "rate_from": {"es": "validation.csv"}}
    f = blend.fit(members, 0.05, profile)
    ranks = np.column_stack([blending.rank01(a), blending.rank01(b)])
    weighted = blending.fit_weights(ranks, y, 0.05, metrics.row_weights(oof, profile))
    plain = blending.fit_weights(ranks, y, 0.05)
    np.testing.assert_allclose(f.weights, weighted)
    assert f.weights[0] > plain[0] + 0.2  # on every row, b's English rows would pull the weights its way
    est = metrics.six_language(oof.assign(pred=blending.mix(ranks, f.weights)), profile)["auc"]
    assert est >= metrics.six_language(oof.assign(pred=blending.mix(ranks, plain)), profile)["auc"]


def test_a_blend_whose_member_predicts_otherwise_with_the_same_settings_no_longer_counts(tmp_path: Path) -> None:
    """A member fold made again with the same settings (its digest unchanged) but other predictions, as a GPU run
    gives: the blend was fit on the old ones, so it is made again rather than shown as current."""
    comp, made = two_members(tmp_path)
    cfg = comp.config("blend.members=[a,b]")
    blend.run(cfg)
    assert experiments.experiment_check(cfg, "a+b")[1] == {}
    comp.experiment("a", made["pred"]["a"][::-1].copy(), made["test"]["a"])  # same digest, other predictions
    left_out = experiments.experiment_check(cfg, "a+b")[1]
    assert left_out["fold0"] == "member a's fold0 predictions changed since the blend was made (make the blend again)"
