"""End to end on the built-in sample: `make data`, `make train`, `make predict`, `make cv` in a temporary folder.

The stages run in-process through their `main(argv)` (as the Makefile calls them), once for the module;
each test then reads the files they wrote. The model is tiny and trains one epoch on a third-size sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pipeline import config, cv, fingerprint, layout, predict, train, validity
from pipeline import data as data_mod
from pipeline.inputs import tables
from pipeline.scoring import metrics, publish

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.usefixtures("torch_one_thread")]

ROOT = Path(__file__).resolve().parents[1]
FOLDS = 3
SETTINGS = [
    "data.sample_scale=0.3",
    f"data.folds={FOLDS}",
    "train.epochs=1",
    "train.micro_batch=8",  # more optimizer steps, so that one epoch learns something
    "train.lr=0.003",
    "model.tiny.hidden=64",
    "model.tiny.intermediate=128",
    "model.tiny.vocab=1000",
]
FOLD_FILES = ("model.safetensors", "config.json", "tokenizer.json", "pipeline.yaml", "metrics.jsonl", "oof.csv")
EPOCH_KEYS = {"loss", "auc", "auc_per_lang", "seconds", "samples_per_second", "peak_memory_mb"}


def overrides(root: Path, *more: str) -> list[str]:
    return [
        f"input_dir={root / 'input'}",
        f"models_dir={root / 'models'}",
        f"submissions_dir={root / 'submissions'}",
        *SETTINGS,
        *more,
    ]


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory, torch_one_thread) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("e2e")
    args = ["--config", "sample", *overrides(root)]
    codes = {}
    for name, stage in (("data", data_mod), ("train", train), ("predict", predict), ("metrics", cv)):  # make cv
        codes[name] = stage.main(args)
        if codes[name] != 0:
            break
    cfg = config.load("sample", overrides(root))
    return SimpleNamespace(
        root=root, args=args, codes=codes, cfg=cfg, exp=layout.experiment_dir(cfg), table=tables.load_table(cfg)[0]
    )


def test_every_stage_exits_zero(pipeline_run) -> None:
    assert pipeline_run.codes == {"data": 0, "train": 0, "predict": 0, "metrics": 0}


def test_submission_matches_sample_ids_and_order(pipeline_run) -> None:
    subs = pipeline_run.root / "submissions"
    sample = pd.read_csv(
        layout.raw_dir(pipeline_run.cfg) / "sample_submission.csv", dtype={"id": str}, keep_default_na=False
    )
    assert len(sample) > 0
    for name in ("submission.csv", "sample.csv"):
        sub = pd.read_csv(subs / name, dtype={"id": str}, keep_default_na=False)
        assert list(sub.columns) == ["id", "toxic"]
        assert sub["id"].tolist() == sample["id"].tolist()  # the same ids, in the sample's order
        values = pd.to_numeric(sub["toxic"], errors="coerce")
        assert not values.isna().any()
        assert values.between(0, 1).all()
        assert values.nunique() > len(values) // 2  # real scores, not a constant
    assert (subs / "submission.csv").read_bytes() == (subs / "sample.csv").read_bytes()


def test_fold_artifacts(pipeline_run) -> None:
    folds = pipeline_run.table["fold"].to_numpy()
    digest = validity.current_fingerprint(pipeline_run.cfg)
    for k in range(FOLDS):
        d = pipeline_run.exp / f"fold{k}"
        for name in FOLD_FILES:
            assert (d / name).is_file(), f"fold{k}/{name} missing"
        assert not (d / layout.RESUME).exists()  # a complete fold keeps no resume state
        lines = (d / "metrics.jsonl").read_text().splitlines()
        assert len(lines) == 1  # one line per epoch
        record = json.loads(lines[0])
        assert EPOCH_KEYS <= record.keys()
        assert set(record["auc_per_lang"]) == {"es", "it", "tr"}
        assert np.isfinite(record["loss"]) and record["samples_per_second"] > 0 and record["peak_memory_mb"] > 0
        oof = pd.read_csv(d / "oof.csv", dtype={"id": str}, keep_default_na=False)
        assert len(oof) == int((folds == k).sum()) and (oof["fold"] == k).all()
        assert oof["pred"].between(0, 1).all()
        done = json.loads((d / "done.json").read_text())
        # the fingerprint, with the precision `auto` chose where it measured (a CPU with bf16: training.md)
        assert done["digest"] == fingerprint.as_trained(digest, done) and done["fold"] == k and done["epochs"] == 1
        assert validity.is_complete(d, digest)
        assert config.load_file(d / "pipeline.yaml") == pipeline_run.cfg  # the config travels with the weights


def test_cv_report(pipeline_run) -> None:
    cv = json.loads((pipeline_run.exp / "cv.json").read_text())
    assert cv["metrics"]["valid_auc"] > 0.5
    assert set(cv["per_lang"]) == {"es", "it", "tr"}
    assert {int(k) for k in cv["folds"]} == set(range(FOLDS))
    assert cv["rows"] == int((pipeline_run.table["fold"] >= 0).sum())  # every validation row scored once
    assert (pipeline_run.exp / "cv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    oof = pd.read_csv(pipeline_run.exp / "oof.csv", dtype={"id": str}, keep_default_na=False)
    assert not oof["id"].duplicated().any() and len(oof) == cv["rows"]


def test_rerun_skips_complete_folds(pipeline_run, capsys: pytest.CaptureFixture) -> None:
    weights = [pipeline_run.exp / f"fold{k}" / "model.safetensors" for k in range(FOLDS)]
    before = [p.stat().st_mtime_ns for p in weights]
    assert train.main(pipeline_run.args) == 0
    out = capsys.readouterr().out
    for k in range(FOLDS):
        assert f"fold {k}: complete" in out and "skipped" in out.split(f"fold {k}: complete")[1].splitlines()[0]
    assert out.count("skipped") == FOLDS
    assert "=== fold" not in out  # nothing trained
    assert [p.stat().st_mtime_ns for p in weights] == before


def test_changed_setting_makes_folds_incomplete(pipeline_run) -> None:
    digest = validity.current_fingerprint(pipeline_run.cfg)
    changed = config.load("sample", overrides(pipeline_run.root, "train.lr=0.004"))
    assert validity.current_fingerprint(changed) != digest
    assert (
        validity.current_fingerprint(config.load("sample", overrides(pipeline_run.root, "train.folds=[0]"))) == digest
    )
    for k in range(FOLDS):
        d = pipeline_run.exp / f"fold{k}"
        assert validity.is_complete(d, digest)
        assert not validity.is_complete(d, validity.current_fingerprint(changed))


def test_predict_with_failing_check_writes_no_file(pipeline_run, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    subs = pipeline_run.root / "submissions-bad"
    monkeypatch.setattr(publish, "ensemble", lambda preds, how="mean": np.full(len(preds[0]), np.nan))
    args = ["--config", "sample", *overrides(pipeline_run.root, f"submissions_dir={subs}")]
    assert predict.main(args) == 2
    assert "NaN" in capsys.readouterr().err
    assert not subs.exists() or not list(subs.glob("*.csv"))


def test_metrics_cli_prints_table(pipeline_run) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.cv", "--config", "sample", *overrides(pipeline_run.root)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "OOF" in r.stdout and all(m.header in head for m in metrics.METRICS), head
    assert all(f"{k:>4}  " in r.stdout for k in range(FOLDS))
