"""Experiments with hand-made predictions on a real prepared table, for the blend and board tests.

`Competition` writes a small competition with chosen validation labels (raw files in Kaggle's layout), runs
the data stage on it, and makes experiments whose folds count exactly as those `make train` or `make
baseline` leave: a pipeline.yaml, each fold's done.json with the fingerprint of the current inputs and
settings and the records of the files it vouches for, and the predictions a test chooses. Every reader
checks them as it checks a trained experiment's, so a test can damage one and see it refused.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import config, data, fingerprint, layout, validity
from pipeline.files import file_record, write_csv, write_json
from pipeline.inputs import tables
from pipeline.schema import Config
from pipeline.scoring import metrics

LANGS = np.array(["es", "it", "tr"])
TEST_LANGS = ("es", "fr", "it", "pt", "ru", "tr")


def validation(n: int = 600, folds: int = 5, seed: int = 0) -> pd.DataFrame:
    """id, lang, toxic, fold: n validation rows, a quarter toxic, folds and languages interleaved."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": [f"v{i:05d}" for i in range(n)],
            "lang": LANGS[np.arange(n) % 3],
            "toxic": (rng.random(n) < 0.25).astype(int),
            "fold": np.arange(n) % folds,
        }
    )


def ids_of_test(n: int = 90) -> pd.Series:
    return pd.Series([f"t{i:04d}" for i in range(n)])


def sample_submission(raw: Path, n: int = 90) -> Path:
    """The competition's sample_submission.csv for `ids_of_test`, in reversed order (the blend must follow it),
    and its test.csv."""
    write_csv(raw / layout.SAMPLE_SUBMISSION, pd.DataFrame({"id": ids_of_test(n)[::-1], "toxic": 0.5}))
    langs = np.resize(list(TEST_LANGS), n)
    write_csv(raw / layout.TEST, pd.DataFrame({"id": ids_of_test(n), "content": "x", "lang": langs}))
    return raw


def write_competition(raw: Path, n: int = 600, n_test: int = 90, seed: int = 0) -> pd.DataFrame:
    """Raw files in Kaggle's layout: `validation(n)`'s rows (their texts tell nothing), a few English training
    rows and `n_test` test rows; returns the validation rows written."""
    rows = validation(n, seed=seed)
    texts = [f"comment {i}" for i in range(n)]
    write_csv(raw / layout.VALID, pd.DataFrame({"id": rows["id"], "comment_text": texts, "lang": rows["lang"],
                                                  "toxic": rows["toxic"]}))  # fmt: skip
    en = pd.DataFrame({"id": [f"e{i}" for i in range(20)], "comment_text": "an english comment", "toxic": [0, 1] * 10})
    write_csv(raw / layout.TRAIN, en)
    sample_submission(raw, n_test)
    return rows


def write_lengths(prepared: Path, count: Callable[[str, pd.DataFrame], np.ndarray]) -> None:
    """A prepared folder's lengths.csv as `make data` writes it: a token count for every scored row (split train)
    and every test row, `count(split, rows)` giving those of each split's rows."""
    table = pd.read_csv(prepared / layout.TABLE, dtype={"id": str}, keep_default_na=False)
    table = table[table["fold"] >= 0]
    test = pd.read_csv(prepared / layout.TEST_TABLE, dtype={"id": str}, keep_default_na=False)
    frames = [pd.DataFrame({"split": split, "id": rows["id"], "source": source, "lang": rows["lang"],
                            "tokens": count(split, rows)})
              for split, rows, source in (("train", table, table["source"]), ("test", test, "test"))]  # fmt: skip
    write_csv(prepared / layout.LENGTHS, pd.concat(frames, ignore_index=True))


class Competition:
    """A small competition under `base`, its prepared tables (the data stage's own), and experiments on them."""

    def __init__(self, base: Path, n: int = 600, n_test: int = 90, seed: int = 0, overrides: tuple = ()) -> None:
        self.raw = base / "raw"
        write_competition(self.raw, n, n_test, seed)
        self.cfg = config.load(
            "sample",
            [
                f"input_dir={base / 'input'}",
                f"models_dir={base / 'models'}",
                f"submissions_dir={base / 'subs'}",
                "data.source=dir",
                f"data.dir={self.raw}",
                "data.extra_files=[]",
                *overrides,
            ],
        )
        data.prepare(self.cfg, log=lambda *_: None)  # the tables; no token cache is needed here
        table = tables.load_table(self.cfg)[0]
        valid = table[table["fold"] >= 0][["id", "lang", "toxic", "fold"]]
        self.rows = valid.sort_values("id", kind="stable").reset_index(drop=True)  # as a blend reads members
        self.models = layout.models_root(self.cfg)

    def config(self, *overrides: str) -> Config:
        return config.with_overrides(self.cfg, list(overrides))

    def experiment(
        self,
        name: str,
        pred: np.ndarray,
        tests: dict[int, np.ndarray] | None,
        kind: str = "model",
        overrides: tuple[str, ...] = (),
        folds: tuple[int, ...] | None = None,
        **done,
    ) -> Path:
        """models/<name>/ as `make train predict` (kind model) or `make baseline` (kind tfidf+lr) would leave it:
        `pred` for the rows of self.rows, `tests` each fold's test predictions (None: not predicted yet)."""
        cfg = config.with_overrides(self.cfg, [f"name={name}", *overrides])
        prepared = layout.prepared_dir(cfg)
        if not prepared.exists():  # the experiment's own prepared tables: a copy of the same ones
            shutil.copytree(layout.prepared_dir(self.cfg), prepared)
        exp = layout.experiment_dir(cfg)
        exp.mkdir(parents=True, exist_ok=True)
        config.save(cfg, exp / layout.RUN_CONFIG)
        meta = validity.current_meta(cfg)
        digest = (
            validity.current_tfidf_fingerprint(cfg, meta)
            if kind == fingerprint.TFIDF["model"]
            else validity.current_fingerprint(cfg, meta)
        )
        rows = self.rows.assign(pred=pred)
        for k in range(cfg.data.folds) if folds is None else folds:
            self.fold(cfg, k, rows[rows["fold"] == k], digest, kind, meta, None if tests is None else tests[k], done)
        return exp

    @staticmethod
    def fold(cfg: Config, k: int, rows: pd.DataFrame, digest: str, kind: str, meta: dict, test, done: dict) -> None:
        folder = layout.fold_dir(cfg, k)
        folder.mkdir(parents=True, exist_ok=True)
        record = {"fold": k, "digest": digest, "epochs": 1, "minutes": 1.5, "scale": layout.PROBABILITY}
        if kind == "model":
            record["head"] = fingerprint.HEAD  # as a fold trained under the pipeline's head records it
        if k != layout.STAGE1:
            write_csv(folder / layout.OOF, rows)
            record["auc"] = metrics.auc(rows["toxic"], rows["pred"])
        else:
            record["auc"] = None
        vouched = [layout.OOF] if k != layout.STAGE1 else []
        if test is not None:
            write_csv(folder / layout.TEST_PREDS, pd.DataFrame({"id": ids_of_test(len(test)), "toxic": test}))
            if kind == fingerprint.TFIDF["model"]:
                vouched.append(layout.TEST_PREDS)
            else:  # a trained fold's test predictions are predict's cache, with its own record
                key = {"weights": "-", "test": meta["test_digest"], "max_length": cfg.model.max_length}
                write_json(folder / layout.TEST_KEY, {"key": key, "file": file_record(folder / layout.TEST_PREDS)})
        if kind != "model":
            record["model"] = kind
        record["files"] = {name: file_record(folder / name) for name in vouched}
        write_json(folder / layout.DONE, {**record, **done})
