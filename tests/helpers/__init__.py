"""Shared test helpers: small configs and stage argv under a temporary folder, digests of folders, the token cache
as `make data` builds it, the real data slice, a free port. The fixtures are in tests/conftest.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

from pipeline import config
from pipeline.files import file_digest
from pipeline.schema import Config

ROOT = Path(__file__).resolve().parents[2]  # the repository
SHARED = ROOT.parent / "shared" / "jigsaw-real"
E5 = ROOT.parent / "shared" / "pretrained" / "multilingual-e5-small-jigsaw"  # a real tokenizer (XLM-R's, trimmed)
SCALE = 0.2  # the built-in sample at a fifth of its size: 690 training rows, 180 test rows


def make_cfg(tmp_path: Path, *overrides: str) -> Config:
    """The sample config, small and fast, reading and writing under tmp_path only; later overrides win."""
    return config.load("sample", stage_args(tmp_path, *overrides))


def strict_json(text: str):
    """JSON as the standard has it: a bare NaN or Infinity (Python's json writes them) is an error."""

    def refuse(word: str):
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def turkish_upper(text: str) -> str:
    """Upper case as Turkish writes it: i to İ, ı to I (str.upper makes both I)."""
    return text.replace("i", "İ").replace("ı", "I").upper()


def digests(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path) with its sha256: equal before and after means untouched."""
    return {str(p.relative_to(folder)): file_digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def prepare_tokens(cfg: Config, log=print) -> dict:
    """The tokenizer and token cache of the prepared tables, as `make data` builds them after the tables."""
    from pipeline import layout
    from pipeline.inputs import tables, tokens

    table, test, meta = tables.load_table(cfg)
    return tokens.build(cfg, layout.prepared_dir(cfg), table, test, meta, log=log)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_args(tmp_path: Path, *more: str) -> list[str]:
    """A stage's argv for the small sample, its input/, models/ and submissions/ under tmp_path (as `make data
    ARGS=...` gives it): never the checkout's own folders (tests/conftest.py fails a test that touches those)."""
    return [*under(tmp_path), f"data.sample_scale={SCALE}", "model.tiny.vocab=1000", *more]


def under(tmp_path: Path) -> list[str]:
    """The overrides that put a config's input/, models/ and submissions/ under tmp_path."""
    return [f"{key}={tmp_path / folder}" for key, folder in
            (("input_dir", "input"), ("models_dir", "models"), ("submissions_dir", "submissions"))]  # fmt: skip


def one_line_error(capsys) -> str:
    """The `error: ...` line a stage ended with, checked to be the last line it printed on stderr."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), err
    return lines[-1]


def board_rows(text: str) -> list[dict[str, str]]:
    """The rows of a printed board (a Markdown table, notes below it), each as {column name: cell}, in order."""
    lines = [line for line in text.split("\n\n")[0].splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].split("|")[1:-1]]
    return [dict(zip(head, [c.strip() for c in line.split("|")[1:-1]], strict=True)) for line in lines[2:]]


def tiny_cfg(tmp_path, *overrides: str) -> Config:
    """The tiny two-fold experiment's config under tmp_path (prepare_tiny builds its inputs)."""
    return make_cfg(tmp_path, f"models_dir={tmp_path / 'models'}", "data.folds=2", "train.epochs=1",
                    "train.precision=fp32", "model.tiny.hidden=32", "model.tiny.intermediate=64",
                    "model.max_length=32", *overrides)  # fmt: skip


def prepare_tiny(tmp_path, *overrides: str):
    """A tiny two-fold experiment with its tables, tokenizer and token cache built (FoldRun tests)."""
    from pipeline import data as data_mod

    cfg = tiny_cfg(tmp_path, *overrides)
    data_mod.prepare(cfg, log=lambda *a: None)
    prepare_tokens(cfg, log=lambda *a: None)
    return cfg


def moved_copy(src: Path, dst: Path) -> None:
    """`src`'s tree copied into `dst` as if it had been built there: the records that name their folder
    (data.json's raw folder, the token cache's tokenizer, config.yaml's paths) name `dst`, each file keeping its
    modification time (a stage compares them). A build of the same settings writes the same bytes anywhere but
    for those paths, so the copy is what `prepare_tiny(dst)` would have made, for the price of a copy."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
    old, new = str(src).encode(), str(dst).encode()
    for path in dst.rglob("*"):
        if path.is_file() and old in (body := path.read_bytes()):
            stat = path.stat()
            path.write_bytes(body.replace(old, new))
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
