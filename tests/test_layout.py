"""The owners of paths and validity (pipeline.layout, pipeline.validity): fold folders, what done.json vouches for,
prepared tables checked against their inputs by content, and every reader asking it.

The property test damages one artifact at a time (truncates, overwrites, drops a field of a JSON file, copies
a fold's file over another's, swaps two, deletes) in a small trained tree (an experiment, its TF-IDF baseline and their
blend), then runs `make cv`, `make predict`, `make blend` and `make board`: none may exit 0 with a number
made from the damaged file. A stage either stops with one line, or leaves the damaged fold out (naming it),
or recomputes what was damaged; whatever it reports equals what the undamaged files give.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline import baseline, blend, board, config, cv, layout, predict, train, validity
from pipeline import data as data_mod
from pipeline.files import read_json, write_json
from pipeline.inputs import sample
from pipeline.scoring import metrics
from tests.helpers import SCALE, board_rows
from tests.helpers.tinyrun import stage_argv

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_one_thread")]


def argv(root: Path, *more: str) -> list[str]:
    return stage_argv(root, root / "raw", *more)


def copy_of(made: SimpleNamespace, root: Path) -> Path:
    """The made experiments' competition, tables, models and submissions copied under `root`, to damage."""
    for top in ("raw", "input", "models", "subs"):
        shutil.copytree(made.root / top, root / top)
    return root


def quiet(stage, args: list[str], capsys) -> tuple[int, str, str]:
    code = stage.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> SimpleNamespace:
    """x (trained, 2 folds, predicted), x-tfidf (its baseline) and x+x-tfidf (their blend), and what each
    stage reports on the undamaged files."""
    root = tmp_path_factory.mktemp("layout")
    sample.write(root / "raw", seed=0, scale=SCALE)
    args = argv(root, "name=x")
    for stage in (data_mod, train, predict, baseline):
        assert stage.main(args) == 0
    assert blend.main([*args, "blend.members=[x,x-tfidf]"]) == 0
    models = root / "models"
    clean = SimpleNamespace(
        cv=read_json(models / "x" / "cv.json"),
        oof={k: pd.read_csv(models / "x" / f"fold{k}" / "oof.csv", dtype={"id": str}) for k in (0, 1)},
        test={k: pd.read_csv(models / "x" / f"fold{k}" / "test.csv", dtype={"id": str}) for k in (0, 1)},
        blend=read_json(models / "x+x-tfidf" / "cv.json"),
        blend_sub=(root / "subs" / "x+x-tfidf.csv").read_bytes(),
    )
    files = sorted(
        str(p.relative_to(root))
        for top in ("models", "input/prepared", "input/cache")
        for p in (root / top).rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    return SimpleNamespace(root=root, clean=clean, files=files)


# ---------------------------------------------------------------- damage


def damage(root: Path, rel: str, how: str, files: list[str], draw) -> None:
    path = root / rel
    if how == "truncate":
        raw = path.read_bytes()
        path.write_bytes(raw[: draw(st.integers(0, max(len(raw) - 1, 0)))])
    elif how == "overwrite":  # the same size, other bytes
        raw = bytearray(path.read_bytes())
        if raw:
            at = draw(st.integers(0, len(raw) - 1))
            raw[at] = (raw[at] + draw(st.integers(1, 255))) % 256
        path.write_bytes(bytes(raw))
    elif how == "garbage":
        path.write_bytes(draw(st.sampled_from([b"", b"[1, 2]", b"{}", b"id,toxic\n1,x\n", b"\x00\xff"])))
    elif how == "delete":
        path.unlink()
    elif how == "drop":  # valid JSON without one of its fields (a field name overwritten)
        obj = read_json(path) if path.suffix == ".json" else None
        if isinstance(obj, dict) and obj:
            del obj[draw(st.sampled_from(sorted(obj)), label="field")]
            write_json(path, obj)
    else:  # copy or swap with the same-named file of another fold or experiment
        twins = [f for f in files if Path(f).name == path.name and f != rel]
        if not twins:
            return
        other = root / draw(st.sampled_from(twins))
        if how == "copy":
            shutil.copyfile(other, path)
        else:
            tmp = path.with_name(".swap")
            os.replace(path, tmp)
            os.replace(other, path)
            os.replace(tmp, other)


# ---------------------------------------------------------------- what a stage may report


def used_folds(text: str) -> list[int]:
    """The folds a stage says it used: `predict: 2 fold(s) (fold0, fold1)` or `cv: using fold0; left out ...`."""
    m = re.search(r"fold\(s\) \(([^)]*)\)", text) or re.search(r"using ([^;]*);", text)
    return [int(f[4:]) for f in m.group(1).split(", ")] if m else [0, 1]


def check_cv(made, root: Path, code: int, out: str, err: str) -> None:
    if code != 0:
        assert err.startswith("error: ") and err.count("\n") == 1, err
        return
    got = read_json(root / "models" / "x" / "cv.json")
    folds = sorted(int(k) for k in got["folds"])
    assert folds == used_folds(err) if "left out" in err else folds == [0, 1]
    oof = pd.concat([made.clean.oof[k] for k in folds])
    assert got["metrics"]["valid_auc"] == pytest.approx(metrics.auc(oof["toxic"], oof["pred"]), abs=1e-12)
    for k in folds:
        want = made.clean.cv["folds"][str(k)]
        assert got["folds"][str(k)]["per_lang"] == pytest.approx(want["per_lang"], abs=1e-12)
        assert {m: got["folds"][str(k)][m] for m in metrics.BY_KEY} == pytest.approx(
            {m: want[m] for m in metrics.BY_KEY}, abs=1e-12, nan_ok=True
        )


def check_predict(made, root: Path, code: int, out: str, err: str) -> None:
    if code != 0:
        assert err.startswith("error: ") and err.count("\n") == 1, err
        return
    folds = used_folds(out)
    sub = pd.read_csv(root / "subs" / "x.csv", dtype={"id": str}).set_index("id")["toxic"]
    want = np.mean([made.clean.test[k].set_index("id").loc[sub.index, "toxic"] for k in folds], axis=0)
    np.testing.assert_allclose(sub.to_numpy(), want, rtol=0, atol=1e-9)


def check_blend(made, root: Path, code: int, out: str, err: str) -> None:
    if code != 0:
        assert err.startswith("error: ") and err.count("\n") == 1, err
        return
    got = read_json(root / "models" / "x+x-tfidf" / "cv.json")
    assert got["metrics"] == pytest.approx(made.clean.blend["metrics"], nan_ok=True)
    assert (root / "subs" / "x+x-tfidf.csv").read_bytes() == made.clean.blend_sub


def check_board(made, text: str) -> int:
    """A row marked neither stale nor incomplete that counts both folds shows the undamaged OOF AUC; returns
    how many rows it checked."""
    checked = 0
    for row in board_rows(text.split("\nwrote ")[0]):
        name, *marks = row["experiment"].split(" (")  # (!) is a note on the test AUC, not on the folds
        want = {"x": made.clean.cv, "x+x-tfidf": made.clean.blend}.get(name)
        if want is not None and row["folds"] == "2 of 2" and not {"stale)", "incomplete)"} & set(marks):
            for m in metrics.METRICS:  # every figure, found by its column's name
                assert row[m.header] == metrics.shown(want["metrics"][m.key], m.fmt), (m.header, row)
            checked += 1
    return checked


def test_the_board_check_checks_the_undamaged_board(made, tmp_path: Path, capsys) -> None:
    root = copy_of(made, tmp_path)
    code, out, err = quiet(board, argv(root, "name=x"), capsys)
    assert code == 0, err
    assert check_board(made, out) == 2  # the experiment and its blend, both folds


class Scripted:
    """Stands for st.data() in an @example (hypothesis has no API for that): each draw gives the answer written
    for its label; from a sampled_from, the first choice that the answer matches as a glob (a cache's key)."""

    def __init__(self, **answers) -> None:
        self.answers = answers

    def draw(self, strategy, label: str | None = None):
        want = self.answers[label]
        choices = getattr(strategy, "elements", None)  # sampled_from's choices (hypothesis pinned in requirements)
        return want if choices is None else next(c for c in choices if fnmatch.fnmatchcase(c, want))

    def __repr__(self) -> str:
        return f"Scripted({self.answers})"


META = "input/cache/*/meta.json"


# the cases random draws found once in a while (no example database keeps them): checked on every run; ten new
# draws a run (each runs four stages: the suite's slowest test), other draws on the next run
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@example(pick=Scripted(artifact=META, damage="drop", field="table_digest"))
@example(pick=Scripted(artifact=META, damage="drop", field="max_length"))
@example(pick=Scripted(artifact="input/prepared/x/data.json", damage="drop", field="raw"))
@given(pick=st.data())
def test_no_stage_reports_a_number_made_from_a_damaged_artifact(made, tmp_path_factory, capsys, pick) -> None:
    rel = pick.draw(st.sampled_from(made.files), label="artifact")
    hows = ["truncate", "overwrite", "garbage", "delete", "drop", "copy", "swap"]
    how = pick.draw(st.sampled_from(hows), label="damage")
    root = copy_of(made, tmp_path_factory.mktemp("damaged"))
    damage(root, rel, how, made.files, pick.draw)
    capsys.readouterr()
    args = argv(root, "name=x")
    check_cv(made, root, *quiet(cv, args, capsys))
    check_predict(made, root, *quiet(predict, args, capsys))
    check_blend(made, root, *quiet(blend, [*args, "blend.members=[x,x-tfidf]"], capsys))
    code, out, err = quiet(board, args, capsys)
    assert code == 0, err
    check_board(made, out)


def test_a_done_json_that_makes_a_blend_its_own_member_is_refused(made, tmp_path: Path, capsys) -> None:
    """A blend's fold copied over one of its members' folds: followed, it would be a cycle of blends."""
    root = copy_of(made, tmp_path)
    shutil.rmtree(root / "models" / "x" / "fold0")
    shutil.copytree(root / "models" / "x+x-tfidf" / "fold0", root / "models" / "x" / "fold0")
    code, out, err = quiet(blend, [*argv(root, "name=x"), "blend.members=[x,x-tfidf]"], capsys)
    assert code == 2 and err.count("\n") == 1 and "names x among its own members (x -> x)" in err, err
    code, out, err = quiet(board, argv(root, "name=x"), capsys)
    assert code == 0, err


# ---------------------------------------------------------------- the rule, case by case


def test_fold_index_and_folders(tmp_path: Path) -> None:
    assert [layout.fold_index(Path(n)) for n in ("fold0", "fold12", "fold-1", "fold", "folds", "fold1x")] == [
        0, 12, -1, None, None, None,
    ]  # fmt: skip
    for name in ("fold1", "fold-1", "fold0", "foldx"):
        (tmp_path / name).mkdir()
    (tmp_path / "fold0" / "done.json").write_text("{}")
    assert list(layout.fold_dirs(tmp_path)) == [-1, 0, 1]
    assert list(layout.done_dirs(tmp_path)) == [0]


def test_done_json_vouches_for_its_fold_and_files(made, tmp_path: Path) -> None:
    fold = tmp_path / "fold1"
    shutil.copytree(made.root / "models" / "x" / "fold1", fold)
    done = read_json(fold / "done.json")
    assert validity.fold_status(fold, done["digest"], needs=(layout.ALL,)) == ""
    assert set(done["files"]) >= {"model.safetensors", "oof.csv", "config.json", "pipeline.yaml"}

    copied = tmp_path / "fold0"
    shutil.copytree(fold, copied)  # cp -a fold1 fold0
    assert "fold 1's (a copied folder?)" in validity.fold_status(copied, done["digest"])
    oof = (fold / "oof.csv").read_bytes()
    (fold / "oof.csv").write_bytes(oof.replace(b"0.", b"9.", 1))  # one prediction edited, the size kept
    assert "oof.csv differs from what done.json records" in validity.fold_status(fold, done["digest"], (layout.OOF,))
    (fold / "oof.csv").write_text("".join(oof.decode().splitlines(keepends=True)[:5]))  # cut to 4 rows
    assert "oof.csv has" in validity.fold_status(fold, done["digest"], needs=(layout.OOF,))
    weights = fold / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert "model.safetensors has" in validity.fold_status(fold, done["digest"], needs=(layout.WEIGHTS,))
    for garbage in ("[1, 2]", "{", '{"digest": 3}'):
        (fold / "done.json").write_text(garbage)
        assert validity.fold_status(fold, None) == "done.json is unreadable (retrain it)"


def test_prepared_tables_are_checked_against_their_inputs_by_content(made, tmp_path: Path, capsys) -> None:
    root = copy_of(made, tmp_path)
    args = argv(root, "name=x")
    valid = root / "raw" / layout.VALID
    before = valid.stat()
    text = valid.read_text()
    flipped = re.sub(r",(0|1)\n", lambda m: f",{1 - int(m.group(1))}\n", text)  # every label flipped
    valid.write_text(flipped)
    os.utime(valid, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and time as they were
    assert valid.stat().st_size == before.st_size and valid.stat().st_mtime_ns == before.st_mtime_ns
    for stage in (cv, predict, train):
        assert stage.main(args) == 2
        err = capsys.readouterr().err
        assert "its inputs changed since it was built (validation.csv changed); rerun `make data`" in err, err
    assert data_mod.main(args) == 0
    assert "building the tables" in capsys.readouterr().out  # not "up to date": the content decides

    test = root / "input" / "prepared" / "x" / "test.csv"
    test.write_text("".join(test.read_text().splitlines(keepends=True)[:40]))  # truncated
    assert predict.main(args) == 2
    assert "test.csv: differs from what data.json records" in capsys.readouterr().err
    assert data_mod.main(args) == 0
    assert "building the tables" in capsys.readouterr().out


def test_cv_refuses_data_settings_the_tables_were_not_built_with(made, capsys) -> None:
    assert cv.main(argv(made.root, "name=x", "data.english_negatives=10")) == 2
    assert "built with other data settings; rerun `make data`" in capsys.readouterr().err


def test_predict_recomputes_a_damaged_test_cache(made, tmp_path: Path, capsys) -> None:
    root = copy_of(made, tmp_path)
    cache = root / "models" / "x" / "fold0" / "test.csv"
    clean = pd.read_csv(cache, dtype={"id": str})
    cache.write_text(cache.read_text().splitlines()[0] + "\n" + "".join(f"{i},0.999\n" for i in clean["id"]))
    assert predict.main(argv(root, "name=x")) == 0
    out = capsys.readouterr().out
    assert "2 fold(s)" in out
    again = pd.read_csv(cache, dtype={"id": str})
    np.testing.assert_allclose(again["toxic"], clean["toxic"], atol=1e-9)  # predicted again, not read


def test_stage1_rerun_says_complete(tmp_path: Path, capsys) -> None:
    """The documented recipe run twice: the second run finds the stage-1 model complete (it has no AUC)."""
    sample.write(tmp_path / "raw", seed=0, scale=SCALE)
    args = argv(tmp_path, "name=s1", "train.folds=[-1]")
    assert data_mod.main(args) == 0 and train.main(args) == 0
    capsys.readouterr()
    assert train.main(args) == 0
    assert "fold -1: complete with these settings (a stage-1 model); skipped" in capsys.readouterr().out


def test_a_teacher_is_checked_like_a_blend_member(made, tmp_path: Path, capsys) -> None:
    root = copy_of(made, tmp_path)
    done = root / "models" / "x" / "fold1" / "done.json"
    write_json(done, {**read_json(done), "digest": "other"})  # fold 1 of the teacher: other settings
    assert data_mod.main(argv(root, "name=student", "data.pseudo_from=x")) == 2
    err = capsys.readouterr().err
    assert "data.pseudo_from=x: x: fold1: trained on other data or settings" in err, err
    assert config.load("sample", ["name=s", "data.pseudo_from=t"]).data.pseudo_from == "t"


def test_a_teacher_with_other_folds_is_refused(made, tmp_path: Path, capsys) -> None:
    """With data.seed=7 the student's folds are other than the teacher's: its fold-k test predictions would come
    from a model trained on some of the student's fold-k validation rows, so their labels would leak."""
    root = copy_of(made, tmp_path)
    assert data_mod.main(argv(root, "name=student", "data.pseudo_from=x", "data.seed=7")) == 2
    err = capsys.readouterr().err
    assert re.search(r"data.pseudo_from=x: only \d+% of the validation rows are in the same fold", err), err
    assert data_mod.main(argv(root, "name=student", "data.pseudo_from=x")) == 0  # the same folds: used
