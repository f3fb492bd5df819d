"""The `make data` stage (pipeline.data, pipeline.sample): sources, checks, the fold table, reruns."""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SCALE, SHARED, digests, make_cfg
from test_kaggle_io import FakeKaggleApi, http_error

from pipeline import data, kaggle_io, sample
from pipeline.data import DataError
from pipeline.errors import PipelineError

LANGS_VALID = {"es", "it", "tr"}
LANGS_TEST = {"es", "fr", "it", "pt", "ru", "tr"}


def quiet(*_args) -> None:
    pass


def build(tmp_path: Path, *overrides: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    cfg = make_cfg(tmp_path, *overrides)
    data.prepare(cfg, log=quiet)
    return data.load_table(cfg)


def fold_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Rows per (fold) x (lang, toxic) among the validation rows."""
    valid = table[table["fold"] >= 0]
    return valid.groupby(["fold", "lang", "toxic"]).size().unstack(["lang", "toxic"], fill_value=0)


# ---------------------------------------------------------------- folds


def test_assign_folds_disjoint_covering_balanced() -> None:
    strata = pd.Series(["es_0"] * 50 + ["es_1"] * 11 + ["it_0"] * 43 + ["it_1"] * 17 + ["tr_0"] * 29)
    folds = data.assign_folds(strata, 5, seed=3)
    assert folds.shape == (len(strata),)
    assert set(folds.tolist()) == set(range(5))  # every row in exactly one fold, none left at -1
    members = [set(np.flatnonzero(folds == k)) for k in range(5)]
    assert sum(len(m) for m in members) == len(strata)
    assert set().union(*members) == set(range(len(strata)))
    for s in strata.unique():  # stratified: each stratum spread evenly, to within one row
        per_fold = np.bincount(folds[(strata == s).to_numpy()], minlength=5)
        assert per_fold.max() - per_fold.min() <= 1, s


def test_assign_folds_seeded() -> None:
    strata = pd.Series(["a"] * 40 + ["b"] * 20)
    first = data.assign_folds(strata, 4, seed=1)
    assert np.array_equal(first, data.assign_folds(strata, 4, seed=1))
    assert not np.array_equal(first, data.assign_folds(strata, 4, seed=2))


def test_table_folds_stratified_on_language_and_label(tmp_path: Path) -> None:
    table, _, meta = build(tmp_path)
    valid = table[table["source"] == "validation"]
    assert (table.loc[table["source"] != "validation", "fold"] == -1).all()  # training-only rows
    assert set(valid["fold"]) == set(range(5))
    counts = fold_counts(table)
    assert counts.shape[1] == 6  # es/it/tr x 0/1
    assert ((counts.max() - counts.min()) <= 1).all(), counts
    assert meta["summary"]["folds"] == {str(k): int(v) for k, v in table["fold"].value_counts().items()}  # JSON keys


def test_folds_csv_identical_across_fresh_builds(tmp_path: Path) -> None:
    paths = []
    for sub in ("a", "b"):
        cfg = make_cfg(tmp_path / sub, "data.english_negatives=60")
        data.prepare(cfg, log=quiet)
        paths.append(data.prepared_dir(cfg))
    for name in ("folds.csv", "test.csv"):
        assert (paths[0] / name).read_bytes() == (paths[1] / name).read_bytes(), name
    other = make_cfg(tmp_path / "c", "data.english_negatives=60", "data.seed=7")
    data.prepare(other, log=quiet)
    assert (data.prepared_dir(other) / "folds.csv").read_bytes() != (paths[0] / "folds.csv").read_bytes()


def test_english_negatives_seeded(tmp_path: Path) -> None:
    raw = pd.DataFrame(sample.make_frames(0, SCALE)[data.TRAIN])
    n_toxic = int((raw["toxic"] == 1).sum())
    assert len(raw) - n_toxic > 60  # more clean rows than we keep

    def english(sub: str, *overrides: str) -> pd.DataFrame:
        table, _, _ = build(tmp_path / sub, "data.english_negatives=60", *overrides)
        return table[table["source"] == "jigsaw-toxic-comment-train"]

    a, b, c = english("a"), english("b"), english("c", "data.seed=7")
    assert int(a["toxic"].sum()) == n_toxic  # every toxic row is kept
    assert int((a["toxic"] == 0).sum()) == 60
    assert list(a["id"]) == list(b["id"])  # same seed, same sample
    assert set(a.loc[a["toxic"] == 0, "id"]) != set(c.loc[c["toxic"] == 0, "id"])
    assert set(a.loc[a["toxic"] == 1, "id"]) == set(c.loc[c["toxic"] == 1, "id"])
    assert (a["lang"] == "en").all()


def test_english_rows_keeps_file_order() -> None:
    frame = pd.DataFrame({"id": list("abcdefgh"), "toxic": [0.0, 1, 0, 0, 1, 0, 0, 0]})
    rows = data.english_rows(frame, negatives=2, seed=0)
    assert list(rows.index) == sorted(rows.index)
    assert {"b", "e"} <= set(rows["id"]) and len(rows) == 4
    assert len(data.english_rows(frame, negatives=100, seed=0)) == 8  # more than available: all of them


def test_bias_rows_become_hard_labels(tmp_path: Path) -> None:
    table, _, _ = build(tmp_path, "data.bias_rows=50")
    bias = table[table["source"] == "jigsaw-unintended-bias-train"]
    assert len(bias) == 50
    assert set(bias["toxic"]) <= {0, 1} and bias["toxic"].sum() > 0


# ---------------------------------------------------------------- the built-in sample


def test_sample_is_deterministic(tmp_path: Path) -> None:
    sample.write(tmp_path / "a", seed=0, scale=SCALE)
    sample.write(tmp_path / "b", seed=0, scale=SCALE)
    a, b = digests(tmp_path / "a"), digests(tmp_path / "b")
    assert sorted(a) == sorted(sample.FILES)
    assert a == b
    sample.write(tmp_path / "c", seed=1, scale=SCALE)
    assert digests(tmp_path / "c") != a


def test_sample_has_kaggles_columns_and_every_language() -> None:
    frames = sample.make_frames(0, SCALE)
    assert list(frames["validation.csv"].columns) == ["id", "comment_text", "lang", "toxic"]
    assert list(frames["test.csv"].columns) == ["id", "content", "lang"]
    assert list(frames["sample_submission.csv"].columns) == ["id", "toxic"]
    assert list(frames[data.TRAIN].columns) == ["id", "comment_text", *sample.LABELS]
    assert set(frames["validation.csv"]["lang"]) == LANGS_VALID
    assert set(frames["test.csv"]["lang"]) == LANGS_TEST
    assert set(frames["translated-train.csv"]["lang"]) == LANGS_TEST | {"en"}
    for name in ("validation.csv", data.TRAIN):
        rate = frames[name]["toxic"].mean()
        assert 0.03 < rate < 0.3, name  # both classes present, toxic the minority as in the real data


def test_sample_texts_survive_the_table(tmp_path: Path) -> None:
    table, test, meta = build(tmp_path)
    frames = sample.make_frames(0, SCALE)
    valid = table[table["source"] == "validation"].set_index("id")
    raw = frames["validation.csv"].set_index(frames["validation.csv"]["id"].astype(str))
    assert valid["text"].to_dict() == raw["comment_text"].to_dict()  # quotes and newlines included
    assert any("\n" in t for t in valid["text"]) and any('"' in t for t in valid["text"])
    assert list(test["text"]) == list(frames["test.csv"]["content"])
    assert set(test["lang"]) == LANGS_TEST and len(test) == meta["summary"]["test_rows"]


# ---------------------------------------------------------------- reruns


def test_rerun_is_free_and_a_changed_file_rebuilds(tmp_path: Path, raw_sample: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    first = data.prepare(cfg, log=quiet)
    folds = data.prepared_dir(cfg) / "folds.csv"
    stamp = folds.stat().st_mtime_ns
    said: list[str] = []
    assert data.prepare(cfg, log=said.append) == first
    assert folds.stat().st_mtime_ns == stamp and "up to date" in said[0]

    valid = pd.read_csv(raw_sample / "validation.csv", dtype=str, keep_default_na=False)
    valid.loc[0, "toxic"] = "1" if valid.loc[0, "toxic"] == "0" else "0"
    valid.to_csv(raw_sample / "validation.csv", index=False)
    second = data.prepare(cfg, log=quiet)
    assert second["table_digest"] != first["table_digest"]


def test_load_table_refuses_other_data_settings(tmp_path: Path) -> None:
    data.prepare(make_cfg(tmp_path), log=quiet)
    with pytest.raises(DataError, match="other data settings"):
        data.load_table(make_cfg(tmp_path, "data.seed=5"))
    with pytest.raises(DataError, match="no prepared data"):
        data.load_table(make_cfg(tmp_path, "name=never-built"))


def test_main_builds_table_and_cache(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = [f"input_dir={tmp_path / 'input'}", f"data.sample_scale={SCALE}", "model.tiny.vocab=1000"]
    assert data.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("data: ") and "tokens      cache" in out and "(built," in out
    summary = out[out.index("for training and validation") :].splitlines()
    assert len(summary) >= 6 and max(map(len, summary)) <= 120  # a readable block, not one long line
    assert data.main(args) == 0
    assert "(hit," in capsys.readouterr().out


# ---------------------------------------------------------------- the real slice


@pytest.fixture(scope="module")
def real_built(tmp_path_factory: pytest.TempPathFactory):
    if not SHARED.is_dir():
        pytest.skip("../shared/jigsaw-real is absent (a user's clone has no ../shared)")
    before = digests(SHARED)
    tmp = tmp_path_factory.mktemp("real")
    cfg = make_cfg(tmp, "data.source=dir", f"data.dir={SHARED}", "data.english_negatives=500")
    meta = data.prepare(cfg, log=quiet)
    table, test, _ = data.load_table(cfg)
    return cfg, meta, table, test, before


def test_real_validation_rows_and_folds(real_built) -> None:
    _, meta, table, _, _ = real_built
    valid = table[table["source"] == "validation"]
    assert len(valid) == 8000
    assert valid["fold"].value_counts().sort_index().to_dict() == {k: 1600 for k in range(5)}
    assert valid["lang"].value_counts().to_dict() == {"tr": 3000, "es": 2500, "it": 2500}
    assert valid["toxic"].mean() == pytest.approx(0.154, abs=0.001)
    for lang, rows in valid.groupby("lang"):
        rate = rows["toxic"].mean()
        for fold, part in rows.groupby("fold"):
            assert abs(part["toxic"].mean() - rate) < 0.01, (lang, fold)
    assert meta["summary"]["rows"] == len(table)


def test_real_english_and_extra_rows(real_built) -> None:
    _, _, table, _, _ = real_built
    raw = pd.read_csv(SHARED / data.TRAIN, dtype={"id": str})
    en = table[table["source"] == "jigsaw-toxic-comment-train"]
    assert set(en.loc[en["toxic"] == 1, "id"]) == set(raw.loc[raw["toxic"] == 1, "id"])
    assert int((en["toxic"] == 0).sum()) == 500
    extra = table[table["source"] == "translated-train"]
    assert len(extra) == 17368 and extra["id"].is_unique
    assert set(extra["lang"]) == LANGS_TEST | {"en"}
    assert (table["fold"][table["source"] != "validation"] == -1).all()


def test_real_texts_and_test_table(real_built) -> None:
    _, _, table, test, _ = real_built
    raw = pd.read_csv(SHARED / "validation.csv", dtype={"id": str}, keep_default_na=False)
    valid = table[table["source"] == "validation"]
    assert list(valid["id"]) == list(raw["id"])
    assert list(valid["text"]) == list(raw["comment_text"])  # embedded newlines, quotes, any script
    assert len(test) == 6000 and test["id"].is_unique
    assert set(test["lang"]) == LANGS_TEST
    raw_test = pd.read_csv(SHARED / "test.csv", dtype={"id": str}, keep_default_na=False)
    assert list(test["text"]) == list(raw_test["content"])


def test_real_raw_folder_untouched(real_built) -> None:
    cfg, _, _, _, before = real_built
    assert digests(SHARED) == before
    assert not (Path(cfg.input_dir) / "jigsaw-real").exists()  # a dir source is read in place, not copied


def test_real_tiny_vocab_below_alphabet_is_one_clear_error(real_built) -> None:
    from pipeline import tokens

    cfg, _, _, _, _ = real_built
    with pytest.raises(PipelineError, match=r"model\.tiny\.vocab=1000 is too small") as info:
        tokens.prepare(cfg, log=quiet)
    assert "\n" not in str(info.value)
    assert not (data.prepared_dir(cfg) / "tokenizer").exists()


# ---------------------------------------------------------------- bad inputs


def rewrite(path: Path, edit: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    edit(frame).to_csv(path, index=False)


def set_cell(col: str, row: int, value: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[row, col] = value
        return frame

    return edit


def damage_missing(raw: Path) -> str:
    (raw / "validation.csv").unlink()
    return "validation.csv"


def damage_column(raw: Path) -> str:
    rewrite(raw / "validation.csv", lambda f: f.drop(columns=["lang"]))
    return "validation.csv"


def damage_label_range(raw: Path) -> str:
    rewrite(raw / "validation.csv", set_cell("toxic", 5, "2"))
    return "validation.csv"


def damage_label_text(raw: Path) -> str:
    rewrite(raw / data.TRAIN, set_cell("toxic", 3, "yes"))
    return data.TRAIN


def damage_extra_label(raw: Path) -> str:
    rewrite(raw / "translated-train.csv", set_cell("toxic", 7, "-1"))
    return "translated-train.csv"


def damage_duplicate_test_id(raw: Path) -> str:
    rewrite(raw / "test.csv", set_cell("id", 1, "0"))
    return "test.csv"


def damage_submission_ids(raw: Path) -> str:
    rewrite(raw / "sample_submission.csv", set_cell("id", 0, "999999"))
    return "sample_submission.csv"


def damage_encoding(raw: Path) -> str:
    path = raw / "validation.csv"
    text = path.read_text(encoding="utf-8")
    assert "í" in text  # Spanish comments have accents
    path.write_bytes(text.encode("latin-1", errors="replace"))
    return "validation.csv"


def damage_empty(raw: Path) -> str:
    (raw / "test.csv").write_bytes(b"")
    return "test.csv"


def damage_unterminated_quote(raw: Path) -> str:
    with open(raw / "validation.csv", "a", encoding="utf-8") as f:
        f.write('99999,"a comment cut off in the middle of its')  # a download stopped mid-row
    return "validation.csv"


def damage_empty_lang(raw: Path) -> str:
    rewrite(raw / "test.csv", set_cell("lang", 2, ""))
    return "test.csv"


def damage_missing_extra(raw: Path) -> str:
    (raw / "translated-train.csv").unlink()
    return "translated-train.csv"


def damage_too_few_rows(raw: Path) -> str:
    rewrite(raw / "validation.csv", lambda f: f.head(3))
    return "validation.csv"


# each damage, and the words that say what is wrong
DAMAGES = [
    (damage_missing, "missing file"),
    (damage_column, "missing column lang"),
    (damage_label_range, "not numbers in [0, 1] (first at data row 6: '2')"),
    (damage_label_text, "not numbers in [0, 1] (first at data row 4: 'yes')"),
    (damage_extra_label, "not numbers in [0, 1]"),
    (damage_duplicate_test_id, "1 duplicate id(s), e.g. '0'"),
    (damage_submission_ids, "ids differ from test.csv's"),
    (damage_encoding, "not UTF-8 text"),
    (damage_empty, "empty file"),
    (damage_unterminated_quote, "not a readable CSV"),
    (damage_empty_lang, "empty lang at data row 3"),
    (damage_missing_extra, "extra training file not found"),
    (damage_too_few_rows, "3 rows cannot make 5 folds"),
]


@pytest.mark.parametrize(("damage", "words"), DAMAGES, ids=[d.__name__.removeprefix("damage_") for d, _ in DAMAGES])
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, raw_sample: Path, damage, words: str) -> None:
    name = damage(raw_sample)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    with pytest.raises(DataError) as info:
        data.prepare(cfg, log=quiet)
    message = str(info.value)
    where = raw_sample / name if damage is not damage_missing_extra else Path(name)
    assert message.startswith(f"{where}: ")  # the file at fault, first
    assert words in message
    assert "\n" not in message
    assert not data.prepared_dir(cfg).exists()  # nothing half-written
    prepared = Path(cfg.input_dir) / "prepared"
    assert not prepared.exists() or not any(prepared.iterdir())


@pytest.mark.parametrize("damage", [damage_label_range, damage_unterminated_quote], ids=["label", "quote"])
def test_main_reports_bad_input_in_one_line(tmp_path: Path, raw_sample: Path, damage, capsys) -> None:
    name = damage(raw_sample)
    code = data.main([f"input_dir={tmp_path / 'input'}", "data.source=dir", f"data.dir={raw_sample}"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and name in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_failed_rebuild_keeps_the_previous_table(tmp_path: Path, raw_sample: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    data.prepare(cfg, log=quiet)
    before = digests(data.prepared_dir(cfg))
    damage_label_text(raw_sample)
    with pytest.raises(DataError):
        data.prepare(cfg, log=quiet)
    assert digests(data.prepared_dir(cfg)) == before


def test_dir_source_needs_a_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="data.dir=PATH"):
        data.prepare(make_cfg(tmp_path, "data.source=dir"), log=quiet)
    with pytest.raises(DataError, match="no such folder"):
        data.prepare(make_cfg(tmp_path, "data.source=dir", f"data.dir={tmp_path / 'nowhere'}"), log=quiet)


# ---------------------------------------------------------------- the kaggle source


def zip_folder(folder: Path, archive: Path, names: tuple[str, ...]) -> Path:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in names:
            zf.write(folder / name, name)
    return archive


@pytest.fixture
def served(tmp_path: Path, raw_sample: Path) -> Path:
    """The sample competition zipped as Kaggle serves a competition's files."""
    return zip_folder(raw_sample, tmp_path / "served" / "competition.zip", sample.FILES)


def test_kaggle_source_downloads_then_builds(tmp_path: Path, raw_sample: Path, served: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=kaggle", "data.extra_files=[]")
    api = FakeKaggleApi(served)
    meta = data.prepare(cfg, api=api, log=quiet)
    raw = Path(cfg.input_dir) / cfg.data.competition
    wanted = digests(raw_sample)
    assert digests(raw) == {k: v for k, v in wanted.items() if k in data.REQUIRED}  # those read, unchanged
    # one file at a time, only those the config reads (no bias rows: not the bias file)
    assert [(c[0], c[1]["file_name"]) for c in api.calls] == [("competition_download_file", f) for f in data.REQUIRED]
    assert api.calls[0][1]["competition"] == cfg.data.competition
    assert (data.prepared_dir(cfg) / "folds.csv").is_file()
    assert meta["summary"]["test_rows"] == len(sample.make_frames(0, SCALE)["test.csv"])
    data.prepare(cfg, api=api, log=quiet)
    assert len(api.calls) == len(data.REQUIRED)  # files present: no second download


def test_kaggle_source_with_extra_dataset(tmp_path: Path, raw_sample: Path) -> None:
    competition = zip_folder(raw_sample, tmp_path / "served" / "c.zip", data.REQUIRED)
    dataset = zip_folder(raw_sample, tmp_path / "served" / "d.zip", ("translated-train.csv",))

    class Api(FakeKaggleApi):
        def dataset_download_files(self, dataset_ref, *args, **kwargs):
            self.archive = dataset
            return super().dataset_download_files(dataset_ref, *args, **kwargs)

    cfg = make_cfg(tmp_path, "data.source=kaggle", "data.datasets=[someone/translated]")
    data.prepare(cfg, api=Api(competition), log=quiet)
    assert (Path(cfg.input_dir) / "translated" / "translated-train.csv").is_file()
    table, _, _ = data.load_table(cfg)
    assert (table["source"] == "translated-train").sum() == len(sample.make_frames(0, SCALE)["translated-train.csv"])


def test_kaggle_403_says_accept_the_rules(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=kaggle")
    with pytest.raises(kaggle_io.KaggleError) as info:
        data.prepare(cfg, api=FakeKaggleApi(error=http_error(403, "Forbidden")), log=quiet)
    assert "Accept the competition's rules" in str(info.value)
    assert cfg.data.competition in str(info.value)
    assert not (Path(cfg.input_dir) / cfg.data.competition).exists()
    assert not data.prepared_dir(cfg).exists()


def test_kaggle_without_credentials_exits_2(tmp_path: Path, no_kaggle_env: Path, capsys) -> None:
    input_dir = tmp_path / "input"
    code = data.main([f"input_dir={input_dir}", "data.source=kaggle"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert kaggle_io.credentials_hint() in err
    assert [p.name for p in input_dir.rglob("*")] in ([], ["locks", "sample.lock"])  # nothing but the lock
    assert not (no_kaggle_env / ".kaggle").exists() and not (no_kaggle_env / ".config").exists()


def test_kaggle_never_falls_back_to_the_sample(tmp_path: Path, served: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=kaggle")
    shutil.rmtree(served.parent)
    served.parent.mkdir()
    zip_folder(tmp_path / "raw", served, ("validation.csv", "test.csv", "sample_submission.csv"))
    with pytest.raises(PipelineError, match=data.TRAIN):  # Kaggle has no such file (404)
        data.prepare(cfg, api=FakeKaggleApi(served), log=quiet)
    assert not (Path(cfg.input_dir) / "sample-x0.2").exists()
    assert set(os.listdir(cfg.input_dir)) <= {cfg.data.competition}  # no sample, no temporary folder


def test_not_utf8_gives_the_offset_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "validation.csv"
    head = "id,comment_text,lang,toxic\n" + "0,çok güzel ılık,tr,0\n" * 60000  # past pandas' first buffer
    body = head.encode() + b"1,caf\xe9,es,0\n"
    path.write_bytes(body)
    with pytest.raises(DataError) as info:
        data.read_csv(path, ["id", "comment_text", "lang", "toxic"])
    assert str(info.value).startswith(f"{path}: not UTF-8 text (byte 0xe9 at offset {len(head.encode()) + 5})")
