"""The `make data` stage (pipeline.data): sources (the sample, a folder, Kaggle), the real slice, bad input and bad
names stopped in one line, reruns, Ctrl-C, and the token caches it removes. The fold table itself is tested in
tests/inputs/test_tables.py, reading the competition's CSV files in tests/inputs/test_csvfile.py."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from pipeline import data, layout
from pipeline.errors import ConfigError, DataError, PipelineError
from pipeline.inputs import groups, sample, tables, tokenizer, tokens
from pipeline.kaggle import client
from tests.helpers import (
    SCALE,
    SHARED,
    digests,
    make_cfg,
    moved_copy,
    one_line_error,
    prepare_tiny,
    prepare_tokens,
    stage_args,
)
from tests.helpers.damage import damage_label_range, damage_label_text, damage_unterminated_quote
from tests.helpers.fake_kaggle import FakeKaggleApi, http_error

PIPELINE = Path(__file__).resolve().parents[1] / "pipeline"
LANGS_TEST = {"es", "fr", "it", "pt", "ru", "tr"}


def quiet(*_args) -> None:
    pass


# ---------------------------------------------------------------- reruns


def test_rerun_is_free_and_a_changed_file_rebuilds(tmp_path: Path, raw_sample: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    first = data.prepare(cfg, log=quiet)
    folds = layout.prepared_dir(cfg) / "folds.csv"
    stamp = folds.stat().st_mtime_ns
    said: list[str] = []
    assert data.prepare(cfg, log=said.append) == first
    assert folds.stat().st_mtime_ns == stamp and "up to date" in said[0]

    valid = pd.read_csv(raw_sample / "validation.csv", dtype=str, keep_default_na=False)
    valid.loc[0, "toxic"] = "1" if valid.loc[0, "toxic"] == "0" else "0"
    valid.to_csv(raw_sample / "validation.csv", index=False)
    second = data.prepare(cfg, log=quiet)
    assert second["table_digest"] != first["table_digest"]


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
    table, test, _ = tables.load_table(cfg)
    return cfg, meta, table, test, before


@pytest.mark.slow  # the real slice built once: seconds
def test_real_validation_rows_and_folds(real_built) -> None:
    _, meta, table, _, _ = real_built
    valid = table[table["source"] == "validation"]
    assert len(valid) == 8000
    sizes = valid["fold"].value_counts().sort_index()
    assert list(sizes.index) == list(range(5)) and (sizes - 1600).abs().max() <= 50, sizes.to_dict()
    # near-copies (Turkish welcome templates, comments pasted again) never straddle two folds
    links = groups.near_copy_links(valid["text"].tolist(), valid["lang"].to_numpy())
    links += groups.duplicate_links(valid["text"].tolist())
    folds = valid["fold"].to_numpy()
    assert len(links) > 100 and all(folds[i] == folds[j] for i, j in links)
    assert valid["lang"].value_counts().to_dict() == {"tr": 3000, "es": 2500, "it": 2500}
    assert valid["toxic"].mean() == pytest.approx(0.154, abs=0.001)
    for lang, rows in valid.groupby("lang"):
        rate = rows["toxic"].mean()
        for fold, part in rows.groupby("fold"):
            assert abs(part["toxic"].mean() - rate) < 0.01, (lang, fold)
    assert meta["summary"]["rows"] == len(table)


@pytest.mark.slow  # the real slice built once: seconds
def test_real_english_and_extra_rows(real_built) -> None:
    _, _, table, _, _ = real_built
    raw = pd.read_csv(SHARED / layout.TRAIN, dtype={"id": str})
    en = table[table["source"] == "jigsaw-toxic-comment-train"]
    assert set(en.loc[en["toxic"] == 1, "id"]) == set(raw.loc[raw["toxic"] == 1, "id"])
    assert int((en["toxic"] == 0).sum()) == 500
    extra = table[table["source"] == "translated-train"]
    assert len(extra) == 17368 and extra["id"].is_unique
    assert set(extra["lang"]) == LANGS_TEST | {"en"}
    assert (table["fold"][table["source"] != "validation"] == -1).all()


@pytest.mark.slow  # the real slice built once: seconds
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


@pytest.mark.slow  # the real slice built once: seconds
def test_real_raw_folder_untouched(real_built) -> None:
    cfg, _, _, _, before = real_built
    assert digests(SHARED) == before
    assert not (Path(cfg.input_dir) / "jigsaw-real").exists()  # a dir source is read in place, not copied


@pytest.mark.slow  # the real slice built once: seconds
def test_real_tiny_vocab_below_alphabet_is_one_clear_error(real_built) -> None:
    cfg, _, _, _, _ = real_built
    with pytest.raises(PipelineError, match=r"model\.tiny\.vocab=1000 is too small") as info:
        prepare_tokens(cfg, log=quiet)
    assert "\n" not in str(info.value)
    assert not (layout.prepared_dir(cfg) / "tokenizer").exists()


# ---------------------------------------------------------------- bad inputs (the damage: tests/helpers/damage.py)


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
    before = digests(layout.prepared_dir(cfg))
    damage_label_text(raw_sample)
    with pytest.raises(DataError):
        data.prepare(cfg, log=quiet)
    assert digests(layout.prepared_dir(cfg)) == before


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
    assert digests(raw) == {k: v for k, v in wanted.items() if k in layout.REQUIRED}  # those read, unchanged
    # one file at a time, only those the config reads (no bias rows: not the bias file)
    assert [(c[0], c[1]["file_name"]) for c in api.calls] == [("competition_download_file", f) for f in layout.REQUIRED]
    assert api.calls[0][1]["competition"] == cfg.data.competition
    assert (layout.prepared_dir(cfg) / "folds.csv").is_file()
    assert meta["summary"]["test_rows"] == len(sample.make_frames(0, SCALE)["test.csv"])
    data.prepare(cfg, api=api, log=quiet)
    assert len(api.calls) == len(layout.REQUIRED)  # files present: no second download


def test_kaggle_source_with_extra_dataset(tmp_path: Path, raw_sample: Path) -> None:
    competition_zip = zip_folder(raw_sample, tmp_path / "served" / "c.zip", layout.REQUIRED)
    dataset = zip_folder(raw_sample, tmp_path / "served" / "d.zip", ("translated-train.csv",))

    class Api(FakeKaggleApi):
        def dataset_download_files(self, dataset_ref, *args, **kwargs):
            self.archive = dataset
            return super().dataset_download_files(dataset_ref, *args, **kwargs)

    cfg = make_cfg(tmp_path, "data.source=kaggle", "data.datasets=[someone/translated]")
    data.prepare(cfg, api=Api(competition_zip), log=quiet)
    assert (Path(cfg.input_dir) / "translated" / "translated-train.csv").is_file()
    table, _, _ = tables.load_table(cfg)
    assert (table["source"] == "translated-train").sum() == len(sample.make_frames(0, SCALE)["translated-train.csv"])


def test_kaggle_403_says_accept_the_rules(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=kaggle")
    with pytest.raises(client.KaggleError) as info:
        data.prepare(cfg, api=FakeKaggleApi(error=http_error(403, "Forbidden")), log=quiet)
    assert "Accept the competition's rules" in str(info.value)
    assert cfg.data.competition in str(info.value)
    assert not (Path(cfg.input_dir) / cfg.data.competition).exists()
    assert not layout.prepared_dir(cfg).exists()


def test_kaggle_without_credentials_exits_2(tmp_path: Path, no_kaggle_env: Path, capsys) -> None:
    input_dir = tmp_path / "input"
    code = data.main([f"input_dir={input_dir}", "data.source=kaggle"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert client.credentials_hint() in err
    assert [p.name for p in input_dir.rglob("*")] in ([], ["locks", "sample.lock"])  # nothing but the lock
    assert not (no_kaggle_env / ".kaggle").exists() and not (no_kaggle_env / ".config").exists()


def test_kaggle_never_falls_back_to_the_sample(tmp_path: Path, served: Path) -> None:
    cfg = make_cfg(tmp_path, "data.source=kaggle")
    shutil.rmtree(served.parent)
    served.parent.mkdir()
    zip_folder(tmp_path / "raw", served, ("validation.csv", "test.csv", "sample_submission.csv"))
    with pytest.raises(PipelineError, match=layout.TRAIN):  # Kaggle has no such file (404)
        data.prepare(cfg, api=FakeKaggleApi(served), log=quiet)
    assert not (Path(cfg.input_dir) / "sample-x0.2").exists()
    assert set(os.listdir(cfg.input_dir)) <= {cfg.data.competition}  # no sample, no temporary folder


# ---------------------------------------------------------------- experiment names


def test_empty_name_cannot_delete_other_experiments(tmp_path: Path, capsys) -> None:
    other = tmp_path / "input" / "prepared" / "other"
    other.mkdir(parents=True)
    (other / "folds.csv").write_text("id\n1\n")
    for bad in ("name=", "name=.", "name=..", "name=../prepared"):
        assert data.main(stage_args(tmp_path, bad)) == 2
        assert one_line_error(capsys).startswith("error: name=")
        assert (other / "folds.csv").read_text() == "id\n1\n"
    # a Config made in code, past the loader, is refused where the folder is named
    cfg = make_cfg(tmp_path)
    with pytest.raises(ConfigError, match="name=''"):
        layout.prepared_dir(type(cfg)(**{**cfg.__dict__, "name": ""}))


# ---------------------------------------------------------------- no import cycles


def module_name(path: Path) -> str:
    """pipeline/inputs/tokens.py -> 'inputs.tokens'; a package's __init__.py -> the package's name."""
    parts = path.relative_to(PIPELINE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    folder = PIPELINE.joinpath(*name.split("."))
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    """Every pipeline module `path` imports, at module level or inside a function (dotted, below pipeline)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "pipeline" or node.module.startswith("pipeline."):
                package = node.module.removeprefix("pipeline").removeprefix(".")
                for a in node.names:  # a module of the package, or a name defined in the module
                    sub = f"{package}.{a.name}" if package else a.name
                    found.add(sub if is_module(sub) else package)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("pipeline.") for a in node.names if a.name.startswith("pipeline.")}
    return found - {module_name(path)}


def test_data_and_tokens_have_no_import_cycle() -> None:
    graph = {module_name(p): imports(p) for p in PIPELINE.rglob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert "data" not in graph["inputs.tokens"] and not reaches("inputs.tokens", "data", set())
    for module in ("data", "inputs.tokens", "inputs.tables", "files", "config", "errors", "progress"):
        assert not reaches(module, module, set()), module


# ---------------------------------------------------------------- max_length against the model


def test_max_length_longer_than_the_model_is_refused_in_make_data(tmp_path: Path, capsys) -> None:
    model = tmp_path / "xlmr"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "xlm-roberta", "max_position_embeddings": 514, "pad_token_id": 1}'
    )
    assert tokens.max_positions(make_cfg(tmp_path, f"model.name={model}")) == 512
    tokens.check_max_length(make_cfg(tmp_path, f"model.name={model}", "model.max_length=512"))
    assert data.main(stage_args(tmp_path, f"model.name={model}", "model.max_length=600")) == 2
    line = one_line_error(capsys)
    assert "model.max_length=600" in line and "model.max_length=512 or less" in line
    assert not (tmp_path / "input" / "prepared").exists()  # refused before any work


def test_a_folder_where_a_competition_file_belongs_is_not_called_missing(tmp_path: Path, raw_sample: Path,
                                                                           capsys) -> None:  # fmt: skip
    (raw_sample / layout.VALID).unlink()
    (raw_sample / layout.VALID).mkdir()
    assert data.main(stage_args(tmp_path, "data.source=dir", f"data.dir={raw_sample}")) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: {raw_sample / layout.VALID}: a folder where a file belongs"), line


def test_a_truncated_config_json_in_the_model_folder_is_one_line(tmp_path: Path, capsys) -> None:
    model = tmp_path / "xlmr"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "xlm-roberta", "max_position_embeddings": 5')  # cut short
    assert data.main(stage_args(tmp_path, f"model.name={model}")) == 2  # json's JSONDecodeError before
    line = one_line_error(capsys)
    assert line.startswith(f"error: {model / 'config.json'}: not a readable config.json"), line
    assert not (tmp_path / "input" / "prepared").exists()


# ---------------------------------------------------------------- Ctrl-C during make data


def slow_training(*_args, **_kwargs):
    """In the child process: deaf to Ctrl-C, as SentencePiece is for about 50 s; and Ctrl-C comes now."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.kill(os.getppid(), signal.SIGINT)  # the stage's process, while the tokenizer trains
    time.sleep(60)


def test_ctrl_c_stops_tokenizer_training_and_keeps_the_old_set(tmp_path: Path, monkeypatch) -> None:
    assert data.main(stage_args(tmp_path)) == 0
    cfg = make_cfg(tmp_path)
    prepared = layout.prepared_dir(cfg)
    before = digests(prepared)
    monkeypatch.setattr(tokenizer, "train_tokenizer", slow_training)
    # Ctrl-C as a terminal delivers it, even where the tests run in the background (`make test &` ignores it)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start = time.perf_counter()
        assert data.main(stage_args(tmp_path, "data.english_negatives=50")) == 130  # other texts: a new tokenizer
        assert time.perf_counter() - start < 6
    finally:
        signal.signal(signal.SIGINT, old_handler)
    assert digests(prepared) == before  # the old table, tokenizer and token pointer, together
    table, test, meta = tables.load_table(cfg)
    stamp = json.loads((prepared / "tokenizer" / "trained_on.json").read_text())
    assert stamp["table_digest"] == meta["table_digest"]  # the tokenizer belongs to this table
    assert tokens.load_cache(cfg, meta)[1]["table_digest"] == meta["table_digest"]
    assert not [p for p in prepared.parent.iterdir() if p.name.startswith(".")]


# ---------------------------------------------------------------- housekeeping


def test_make_data_removes_token_caches_no_table_uses(tmp_path: Path, capsys) -> None:
    assert data.main(stage_args(tmp_path, "model.max_length=32")) == 0
    cache = tmp_path / "input" / "cache"
    first = {p.name for p in cache.iterdir()}
    assert data.main(stage_args(tmp_path, "name=other", "model.max_length=32")) == 0  # same cache, two users
    assert {p.name for p in cache.iterdir()} == first
    assert data.main(stage_args(tmp_path, "model.max_length=48")) == 0
    out = capsys.readouterr().out
    assert {p.name for p in cache.iterdir()} > first  # `other` still uses the first one
    assert data.main(stage_args(tmp_path, "name=other", "model.max_length=48")) == 0
    assert "removed     1 token cache(s)" in capsys.readouterr().out
    assert len(list(cache.iterdir())) == 1 and not {p.name for p in cache.iterdir()} & first
    assert "tokens      cache" in out


def test_make_data_removes_only_token_caches_from_the_cache_folder(tmp_path: Path) -> None:
    """input_dir may name a folder of the user's: of its cache/, only what carries a token cache's marker (a key
    for a name and a meta.json naming it) goes when no table uses it; the user's folders stay, whatever their name."""
    cfg = make_cfg(tmp_path)
    cache = layout.cache_root(cfg)
    unused = "0123456789abcdef"
    theirs = {
        "photos": {"a.jpg": "x"},
        "fedcba9876543210": {"notes.txt": "x"},  # a key's shape, no meta.json
        "00000000000000aa": {"meta.json": json.dumps({"key": "something else"})},
        "00000000000000bb": {"meta.json": "[1, 2]"},
    }
    for name, files in {**theirs, unused: {"meta.json": json.dumps({"key": unused})}}.items():
        for file, text in files.items():
            (cache / name).mkdir(parents=True, exist_ok=True)
            (cache / name / file).write_text(text)
    assert data.prune_caches(cfg) == [cache / unused]
    assert sorted(p.name for p in cache.iterdir()) == sorted(theirs)


def built_files(folder: Path) -> dict[str, object]:
    """Every file under `folder`: a JSON record as read less a build's own timing (never alike), else its digest."""
    timing = ("seconds", "comments_per_second")
    out: dict[str, object] = dict(digests(folder))
    for path in folder.rglob("*.json"):
        record = json.loads(path.read_text())
        out[str(path.relative_to(folder))] = {k: v for k, v in record.items() if k not in timing}
    return out


def test_the_tests_copy_of_a_prepared_experiment_is_what_a_build_there_makes(tmp_path: Path) -> None:
    """tests/conftest.py's `prepared` copies one build a test process: the copy must be what a build in its own
    folder writes (the folder's paths in its records), file for file."""
    here = tmp_path / "here"
    prepare_tiny(tmp_path / "once")
    moved_copy(tmp_path / "once", here)
    copied = built_files(here)
    shutil.rmtree(here)
    prepare_tiny(here)
    assert copied == built_files(here)
    assert str(tmp_path / "once") not in (here / "input" / "prepared" / "sample" / "data.json").read_text()
