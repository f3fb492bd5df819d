"""Bad settings, paths, concurrency and interruptions stop early with one line and leave no damage."""

from __future__ import annotations

import ast
import fcntl
import json
import os
import signal
import stat
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import SCALE, digests, make_cfg

from pipeline import data, io, modeling, predict, tables, tokens, train
from pipeline.config import ConfigError

PIPELINE = Path(__file__).resolve().parents[1] / "pipeline"


def quiet(*_args) -> None:
    pass


def args(tmp_path: Path, *more: str) -> list[str]:
    return [f"input_dir={tmp_path / 'input'}", f"data.sample_scale={SCALE}", "model.tiny.vocab=1000", *more]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), err
    return lines[-1]


# ---------------------------------------------------------------- experiment names


def test_empty_name_cannot_delete_other_experiments(tmp_path: Path, capsys) -> None:
    other = tmp_path / "input" / "prepared" / "other"
    other.mkdir(parents=True)
    (other / "folds.csv").write_text("id\n1\n")
    for bad in ("name=", "name=.", "name=..", "name=../prepared"):
        assert data.main(args(tmp_path, bad)) == 2
        assert one_line_error(capsys).startswith("error: name=")
        assert (other / "folds.csv").read_text() == "id\n1\n"
    # a Config made in code, past the loader, is refused where the folder is named
    cfg = make_cfg(tmp_path)
    with pytest.raises(ConfigError, match="name=''"):
        tables.prepared_dir(type(cfg)(**{**cfg.__dict__, "name": ""}))


# ---------------------------------------------------------------- no import cycles


def imports(path: Path) -> set[str]:
    """Every pipeline module `path` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "pipeline":
                found |= {a.name for a in node.names}
            elif node.module.startswith("pipeline."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("pipeline.")}
    return found - {path.stem}


def test_data_and_tokens_have_no_import_cycle() -> None:
    graph = {p.stem: imports(p) for p in PIPELINE.glob("*.py")}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert "data" not in graph["tokens"] and not reaches("tokens", "data", set())
    for module in ("data", "tokens", "tables", "io", "config", "errors", "progress"):
        assert not reaches(module, module, set()), module


# ---------------------------------------------------------------- fold tables


def test_fold_with_one_class_is_refused(tmp_path: Path, raw_sample: Path) -> None:
    valid = pd.read_csv(raw_sample / data.VALID, dtype=str, keep_default_na=False)
    toxic = valid.index[valid["toxic"] == "1"]
    valid.loc[toxic[3:], "toxic"] = "0"  # 3 toxic rows cannot reach 5 folds
    valid.to_csv(raw_sample / data.VALID, index=False)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    with pytest.raises(data.DataError) as info:
        data.prepare(cfg, log=quiet)
    message = str(info.value)
    assert message.startswith(str(raw_sample / data.VALID)) and "\n" not in message
    assert "all non-toxic" in message and "3 of 180 validation rows are toxic" in message
    assert "data.folds=3 or fewer" in message
    assert not data.prepared_dir(cfg).exists()
    data.prepare(make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", "data.folds=3"), log=quiet)


# ---------------------------------------------------------------- max_length against the model


def test_max_length_longer_than_the_model_is_refused_in_make_data(tmp_path: Path, capsys) -> None:
    model = tmp_path / "xlmr"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "xlm-roberta", "max_position_embeddings": 514, "pad_token_id": 1}'
    )
    assert tokens.max_positions(make_cfg(tmp_path, f"model.name={model}")) == 512
    tokens.check_max_length(make_cfg(tmp_path, f"model.name={model}", "model.max_length=512"))
    assert data.main(args(tmp_path, f"model.name={model}", "model.max_length=600")) == 2
    line = one_line_error(capsys)
    assert "model.max_length=600" in line and "model.max_length=512 or less" in line
    assert not (tmp_path / "input" / "prepared").exists()  # refused before any work


# ---------------------------------------------------------------- paths and permissions


def test_models_being_a_file_stops_train_in_one_line(tmp_path: Path, capsys) -> None:
    models = tmp_path / "models"
    models.write_text("not a folder")
    assert train.main(args(tmp_path, f"models_dir={models}")) == 2
    assert one_line_error(capsys) == (
        f"error: {models}: is a file, but the models folder (models_dir) must be a folder there; move the file away"
    )


def test_submission_csv_being_a_folder_stops_predict(tmp_path: Path, capsys) -> None:
    subs = tmp_path / "subs"
    (subs / "submission.csv").mkdir(parents=True)
    assert predict.main(args(tmp_path, f"submissions_dir={subs}", f"models_dir={tmp_path / 'models'}")) == 2
    assert one_line_error(capsys).startswith(f"error: {subs / 'submission.csv'}: is a folder")


def test_unwritable_and_unreadable_paths(tmp_path: Path, raw_sample: Path, monkeypatch, capsys) -> None:
    denied = {tmp_path / "models", raw_sample / data.VALID}
    # the seam: this suite may run as root, whom os.access never refuses
    monkeypatch.setattr(io, "_access", lambda p, mode: Path(p) not in denied)
    (tmp_path / "models").mkdir()
    assert train.main(args(tmp_path, f"models_dir={tmp_path / 'models'}")) == 2
    assert "the models folder (models_dir) cannot be written (permission denied)" in one_line_error(capsys)
    assert data.main(args(tmp_path, "data.source=dir", f"data.dir={raw_sample}")) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: {raw_sample / data.VALID}: the competition folder (data.dir) cannot be read")
    (tmp_path / "input").mkdir()
    denied.add(tmp_path / "input")
    assert data.main(args(tmp_path)) == 2
    assert one_line_error(capsys).startswith(f"error: {tmp_path / 'input'}: the input folder (input_dir) cannot be")


# ---------------------------------------------------------------- one run per experiment


def hold_from_elsewhere(path: Path, text: str) -> int:
    """A lock held through another open file, as another process would hold it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, text.encode())
    return fd


def test_second_run_on_the_same_experiment_stops_at_once(tmp_path: Path, capsys, monkeypatch) -> None:
    cfg = make_cfg(tmp_path)
    fd = hold_from_elsewhere(io.lock_path(cfg), "pid 4242 (train: python -m pipeline.train)\n")
    try:
        start = time.perf_counter()
        assert data.main(args(tmp_path)) == 2
        line = one_line_error(capsys)
        assert line == (
            "error: experiment 'sample' is in use by pid 4242 (train: python -m pipeline.train); "
            f"wait for it to finish or stop it (lock: {io.lock_path(cfg)})"
        )
        assert time.perf_counter() - start < 5
        assert not (tmp_path / "input" / "prepared").exists()
        assert train.main(args(tmp_path)) == 2
        assert "is in use by pid 4242" in one_line_error(capsys)
        # the ranks of one torchrun group do not refuse each other: only rank 0 locks
        monkeypatch.setenv("RANK", "1")
        assert io.acquire_lock(io.lock_path(cfg), "experiment") is False
        monkeypatch.delenv("RANK")
        with io.experiment_lock(make_cfg(tmp_path, "name=another"), "data"):  # other experiments are free
            pass
    finally:
        os.close(fd)


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path)
    path = io.lock_path(cfg)
    path.parent.mkdir(parents=True)
    path.write_text("pid 999999 (data: killed with -9)\n")  # its holder died: the kernel released the flock
    with io.experiment_lock(cfg, "data"):
        assert path.read_text().startswith(f"pid {os.getpid()} (data: ")
        with io.experiment_lock(cfg, "train"):  # the same process again: no self-refusal
            pass
    assert path.read_text() == ""


# ---------------------------------------------------------------- Ctrl-C during make data


def slow_training(*_args, **_kwargs):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as SentencePiece: deaf to Ctrl-C for about 50 s
    time.sleep(60)


def test_ctrl_c_stops_tokenizer_training_and_keeps_the_old_set(tmp_path: Path, monkeypatch) -> None:
    assert data.main(args(tmp_path)) == 0
    cfg = make_cfg(tmp_path)
    prepared = data.prepared_dir(cfg)
    before = digests(prepared)
    monkeypatch.setattr(modeling, "train_tokenizer", slow_training)
    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C, while the tokenizer trains
    start = time.perf_counter()
    assert data.main(args(tmp_path, "data.english_negatives=50")) == 130  # other texts: a new tokenizer
    assert time.perf_counter() - start < 6
    assert digests(prepared) == before  # the old table, tokenizer and token pointer, together
    table, test, meta = data.load_table(cfg)
    stamp = json.loads((prepared / "tokenizer" / "trained_on.json").read_text())
    assert stamp["table_digest"] == meta["table_digest"]  # the tokenizer belongs to this table
    assert tokens.load(cfg, meta)[1]["table_digest"] == meta["table_digest"]
    assert not [p for p in prepared.parent.iterdir() if p.name.startswith(".")]


def test_tokenizer_child_errors_come_back(tmp_path: Path) -> None:
    from pipeline import progress

    with pytest.raises(ValueError, match="boom"):
        progress.run_in_child(_raise_boom, desc="x")
    assert progress.run_in_child(divmod, 7, 2, desc="x") == (3, 1)


def _raise_boom():
    raise ValueError("boom")


# ---------------------------------------------------------------- housekeeping


def test_make_data_removes_token_caches_no_table_uses(tmp_path: Path, capsys) -> None:
    assert data.main(args(tmp_path, "model.max_length=32")) == 0
    cache = tmp_path / "input" / "cache"
    first = {p.name for p in cache.iterdir()}
    assert data.main(args(tmp_path, "name=other", "model.max_length=32")) == 0  # same cache, two users
    assert {p.name for p in cache.iterdir()} == first
    assert data.main(args(tmp_path, "model.max_length=48")) == 0
    out = capsys.readouterr().out
    assert {p.name for p in cache.iterdir()} > first  # `other` still uses the first one
    assert data.main(args(tmp_path, "name=other", "model.max_length=48")) == 0
    assert "removed     1 token cache(s)" in capsys.readouterr().out
    assert len(list(cache.iterdir())) == 1 and not {p.name for p in cache.iterdir()} & first
    assert "tokens      cache" in out


def test_every_artifact_gets_the_same_file_mode(tmp_path: Path) -> None:
    from tinymodel import tiny_classifier

    old = os.umask(0o022)
    try:
        cfg = make_cfg(tmp_path)
        fold = tmp_path / "fold0"
        fold.mkdir()
        model = tiny_classifier()

        class NoTokenizer:
            def save_pretrained(self, folder):
                Path(folder, "tokenizer.json").write_text("{}")

        train.save_model(model, NoTokenizer(), cfg, fold)
        with io.atomic_path(tmp_path / "private.bin") as tmp:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600))  # as mkstemp would make it
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [*fold.iterdir(), tmp_path / "private.bin"]}
        assert "model.safetensors" in modes
        assert set(modes.values()) == {0o644}, modes
    finally:
        os.umask(old)


# ---------------------------------------------------------------- translated files without a lang column


def write_translated(path: Path, texts: list[str], toxic: list[int]) -> None:
    # as the popular translated-train datasets: id, comment_text, the six labels; no lang column
    pd.DataFrame(
        {"id": [f"t{i}" for i in range(len(texts))], "comment_text": texts, "toxic": toxic, "obscene": 0}
    ).to_csv(path, index=False)


def test_translated_files_by_pattern_with_language_from_the_name(tmp_path: Path, raw_sample: Path) -> None:
    extra = tmp_path / "translated"
    extra.mkdir()
    write_translated(extra / "jigsaw-toxic-comment-train-google-es-cleaned.csv", ["hola", "idiota"], [0, 1])
    write_translated(extra / "jigsaw-toxic-comment-train-google-fr-cleaned.csv", ["bonjour"], [0])
    write_translated(extra / "mixed.csv", ["ciao", "stupido"], [0, 1])
    cfg = make_cfg(
        tmp_path,
        "data.source=dir",
        f"data.dir={raw_sample}",
        f"data.extra_files=[{extra}/jigsaw-toxic-comment-train-google-*-cleaned.csv,{extra}/mixed.csv:it]",
    )
    data.prepare(cfg, log=quiet)
    table, _, _ = data.load_table(cfg)
    got = {s: sorted(zip(t["text"], t["lang"], t["toxic"])) for s, t in table[table["fold"] == -1].groupby("source")}
    assert got["jigsaw-toxic-comment-train-google-es-cleaned"] == [("hola", "es", 0), ("idiota", "es", 1)]
    assert got["jigsaw-toxic-comment-train-google-fr-cleaned"] == [("bonjour", "fr", 0)]
    assert got["mixed"] == [("ciao", "it", 0), ("stupido", "it", 1)]
    # a new file matching the pattern rebuilds the table
    write_translated(extra / "jigsaw-toxic-comment-train-google-pt-cleaned.csv", ["obrigado"], [0])
    data.prepare(cfg, log=quiet)
    assert "pt" in set(data.load_table(cfg)[0]["lang"])


def test_translated_file_without_a_language_is_one_line(tmp_path: Path, raw_sample: Path) -> None:
    write_translated(tmp_path / "translated-train-es-fr.csv", ["x"], [0])
    write_translated(tmp_path / "plain.csv", ["x"], [0])
    for name, says in (("translated-train-es-fr.csv", "(it names es, fr)"), ("plain.csv", "plain.csv:es")):
        cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{tmp_path / name}]")
        with pytest.raises(data.DataError) as info:
            data.prepare(cfg, log=quiet)
        assert str(info.value).startswith(str(tmp_path / name)) and says in str(info.value)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", "data.extra_files=[nothing-*.csv]")
    with pytest.raises(data.DataError, match=r"^nothing-\*\.csv: extra training file not found"):
        data.prepare(cfg, log=quiet)


def test_cache_of_an_older_tokenizer_is_refused(tmp_path: Path, capsys) -> None:
    assert data.main(args(tmp_path)) == 0
    cfg = make_cfg(tmp_path)
    _, _, meta = data.load_table(cfg)
    tokens.load(cfg, meta)
    # as if `make data` had retrained the tokenizer in place and stopped before it rewrote tokens.json
    vocab = tokens.tokenizer_source(cfg) / "tokenizer.json"
    vocab.write_text(vocab.read_text().replace('"<mask>"', '"<MASK>"'))
    with pytest.raises(tokens.PipelineError, match="token cache is for other tables or settings"):
        tokens.load(cfg, meta)
