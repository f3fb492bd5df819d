"""Files that survive a crash: every artifact is written to a temporary name, then renamed.

A kill at any moment leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
from pathlib import Path

from pipeline.errors import PipelineError


class DiskFullError(PipelineError, OSError):
    """Not enough free disk space for what a stage is about to write; one line, exit status 2."""


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_path(path: Path | str):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    try:
        yield tmp
        if tmp.is_file():
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())  # the bytes reach the disk before the name does
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: Path | str):
    """Yield a temporary folder; it replaces `path` (and any old copy of it) only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        if path.exists():
            os.replace(path, old)  # a folder cannot be renamed over a non-empty one
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path | str, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_json(path: Path | str):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_csv(path: Path | str, frame) -> None:
    """A pandas frame as UTF-8 CSV, atomically (quotes and newlines in text survive a round trip)."""
    # Python's minimal quoting quotes only the terminator's characters: a lone "\r" in a text would be left
    # bare and split the row for every reader, so such a frame is written with every text quoted
    texts = frame.select_dtypes(include=["object", "string"])
    bare_cr = any("\r" in str(c) for c in frame.columns) or any(
        texts[c].astype(str).str.contains("\r", regex=False).any() for c in texts.columns
    )
    with atomic_path(path) as tmp:
        frame.to_csv(
            tmp, index=False, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC if bare_cr else csv.QUOTE_MINIMAL
        )


def file_digest(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def check_free_space(folder: Path | str, need_bytes: int, what: str) -> None:
    """Stop before writing `need_bytes` into `folder` if the disk cannot hold them (with a margin)."""
    folder = Path(folder)
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need_bytes * 1.1 + (64 << 20):
        raise DiskFullError(
            f"not enough disk space for {what} in {folder}: need about {need_bytes / 2**30:.2f} GiB, "
            f"{free / 2**30:.2f} GiB free"
        )
