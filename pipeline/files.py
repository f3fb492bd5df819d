"""Files that survive a crash, digests of their content, and the checks and locks around them.

Every artifact is written to a temporary name, then renamed: a kill at any moment leaves either the old
file or the new one, never half of one. Which paths exist is pipeline.layout's business, not this module's.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import sys
from functools import lru_cache
from pathlib import Path

from pipeline.errors import DISK_FULL, PipelineError


class DiskFullError(PipelineError, OSError):
    """Not enough free disk space for what a stage is about to write; one line, exit status 2."""


def size_text(n: float) -> str:
    """`1.20 GiB`, `340.0 MiB`, `12.0 KiB`, `512 bytes`: a size as a person reads it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(n) >= 1 << shift:
            return f"{n / (1 << shift):.2f} {unit}" if unit == "GiB" else f"{n / (1 << shift):.1f} {unit}"
    return f"{int(n)} bytes"


def is_disk_full(e: BaseException) -> bool:
    """An error that says the disk (or the user's quota) is full: an OSError's errno, or the text other writers
    (safetensors) give it."""
    if isinstance(e, OSError) and e.errno in DISK_FULL:
        return True
    return any(words in str(e) for words in ("No space left on device", "Disk quota exceeded"))


def disk_full_error(path: Path | str, need: float | None = None) -> DiskFullError:
    """The one line a full disk becomes: what could not be written, where, the space it needs and what is free."""
    path = Path(path)
    name = path.name if not path.name.startswith(".") else _final_name(path.name)
    free = shutil.disk_usage(_existing(path.parent)).free
    needs = f"needs about {size_text(need)}, " if need else ""
    return DiskFullError(
        f"the disk is full: {name} could not be written in {path.parent} ({needs}{size_text(free)} free); free some "
        "space and run it again (nothing is damaged: a file is replaced only once it is complete)"
    )


@contextlib.contextmanager
def disk_full(path: Path | str, need: float | None = None):
    """A full disk while the block writes `path` becomes a DiskFullError (one line naming the folder and the space);
    every other error passes as it is."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as e:
        if is_disk_full(e):
            raise disk_full_error(path, need) from None
        raise


def _final_name(tmp_name: str) -> str:
    """`.resume.pt.tmp-123` -> `resume.pt`: the artifact a temporary name stands for."""
    match = _TEMPORARY.match(tmp_name)
    return match["name"] if match else tmp_name


def _umask() -> int:
    for line in Path("/proc/self/status").read_text().splitlines() if Path("/proc/self/status").exists() else ():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: read it by setting it, and put it back at once
    os.umask(mask)
    return mask


def default_modes(path: Path | str) -> None:
    """Give `path` (a file, or a folder and everything in it) the modes a plain `open` would: 0644 under
    umask 022. Writers that go through a private temporary file (safetensors writes 0600) otherwise leave
    one artifact readable by its owner only."""
    path = Path(path)
    mask = _umask()
    items = [path, *path.rglob("*")] if path.is_dir() else [path]
    for p in items:
        if p.is_symlink():
            continue
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~mask)


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


# what the writers here and in pipeline.core.foldstate name their temporaries: .<name>.tmp-<pid>, .<name>.old-<pid>,
# .save-<pid> (save_pretrained's folder)
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)$|^\.save-(?P<save>\d+)$")


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_temporaries(folder: Path | str) -> list[Path]:
    """Remove the temporaries in `folder` of processes that are gone (killed while they wrote them: never
    trusted, never renamed into place); a live process's are left alone. A dead atomic_dir's `.x.old-<pid>`
    whose `x` is missing is renamed back to `x`, not removed. Returns what went."""
    folder = Path(folder)
    gone = []
    for p in sorted(folder.glob(".*")) if folder.is_dir() else ():
        match = _TEMPORARY.match(p.name)
        if not match or alive(int(match["pid"] or match["save"])):
            continue
        was = match["name"] if p.name.endswith(f".old-{match['pid']}") else None  # an atomic_dir's old copy
        # atomic_dir renames `x` to .x.old-<pid> only once its block has succeeded, then .x.tmp-<pid> to `x`:
        # killed between the two renames, both are complete, and the old one is what the rest of the tree
        # still refers to (the writer's later steps, such as a pointer to the new folder, never ran). Back it
        # goes, as if the run had been killed a moment earlier; the tmp is removed below as any other.
        if was and not (folder / was).exists() and not (folder / was).is_symlink():
            os.replace(p, folder / was)
            continue
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        gone.append(p)
    return gone


@contextlib.contextmanager
def atomic_path(path: Path | str, need: float | None = None):
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds. A full disk on the
    way is one line (DiskFullError) naming the folder and `need`, the bytes it takes where the writer knows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    try:
        with disk_full(path, need):
            yield tmp
            if tmp.is_file():
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())  # the bytes reach the disk before the name does
            if tmp.exists():
                default_modes(tmp)
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: Path | str, need: float | None = None):
    """Yield a temporary folder; it replaces `path` (and any old copy of it) only if the block succeeds. A full disk
    that the writer inside did not name (np.save says no file) is one line naming `path` and `need`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        with disk_full(path, need):
            yield tmp
            default_modes(tmp)
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


def finite(obj):
    """`obj` with every NaN or infinite float (an AUC over one class) made None, in dicts, lists and tuples."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def write_json(path: Path | str, obj) -> None:
    """`obj` as JSON, a figure that is not a number as null: Python writes NaN bare, which is not JSON and which
    strict readers (JavaScript, jq, pandas' engine) refuse. allow_nan=False: one that slipped past is an error."""
    atomic_write_text(path, json.dumps(finite(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n")


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


def file_digest(path: Path | str) -> str:
    """sha256 of a file's bytes; read once per process while the file stays as it was."""
    st = os.stat(path)
    # the change time moves with any write, also one whose size and modification time were put back
    return _file_digest(str(Path(path).resolve()), (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))


@lru_cache(maxsize=256)
def _file_digest(path: str, stamp: tuple) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def file_record(path: Path | str) -> dict:
    """What done.json records of a file it vouches for: its size and sha256."""
    return {"bytes": os.stat(path).st_size, "sha256": file_digest(path)}


def json_digest(obj) -> str:
    """A short hash of a JSON-able value, the same for equal values whatever their key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def tree_digest(folder: Path | str, skip: tuple[str, ...] = ()) -> str:
    """The content of every file under `folder` (relative names and bytes), whatever the folder is called."""
    root = Path(folder)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in skip and not p.name.startswith("."))
    return json_digest({str(p.relative_to(root)): file_digest(p) for p in files})


def check_free_space(folder: Path | str, need_bytes: int, what: str) -> None:
    """Stop before writing `need_bytes` into `folder` if the disk cannot hold them (with a margin)."""
    folder = Path(folder)
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    want = need_bytes * 1.1 + (64 << 20)  # a margin: the estimate is rough, and a full disk stops everything else
    if free < want:
        raise DiskFullError(
            f"not enough disk space for {what} in {folder}: need about {size_text(want)} (a margin included), "
            f"{size_text(free)} free"
        )


# ---------------------------------------------------------------- files and folders, checked before work starts


class PathError(PipelineError, OSError):
    """A file or folder the stage needs is the wrong kind or lacks a permission; one line naming it."""


_access = os.access  # the seam tests use: root passes every os.access check


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_readable(path: Path | str, what: str) -> None:
    """`path` (a file, or a folder and the files in it) can be read."""
    path = Path(path)
    if not path.exists():
        return  # the stage itself says what is missing and how to make it
    items = [path, *[p for p in path.iterdir() if p.is_file()]] if path.is_dir() and _access(path, os.R_OK) else [path]
    for p in items:
        need = os.R_OK | os.X_OK if p.is_dir() else os.R_OK
        if not _access(p, need):
            raise PathError(f"{p}: {what} cannot be read (permission denied); fix its permissions (chmod u+r)")


def not_a_file(path: Path | str) -> str:
    """Why a file a stage reads is not there, in a DataError's words: `missing file`, or a folder (or a device,
    a socket) in its place, which is not what `missing` tells a user who sees it there."""
    path = Path(path)
    if path.is_dir():
        return "a folder where a file belongs; put the file there instead"
    return "not a regular file" if path.exists() else "missing file"


def check_writable_dir(path: Path | str, what: str) -> None:
    """`path` is a folder (or can be made one) that this user can write into."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise PathError(f"{p}: is a file, but {what} must be a folder there; move the file away")
    base = _existing(path)
    if not _access(base, os.W_OK | os.X_OK):
        raise PathError(f"{base}: {what} cannot be written (permission denied); fix its permissions or choose another")


def check_file_target(path: Path | str, what: str) -> None:
    """A file will be written at `path`: it is not a folder, and its folder is writable."""
    path = Path(path)
    if path.is_dir():
        raise PathError(f"{path}: is a folder, but {what} is written there as a file; remove or rename the folder")
    check_writable_dir(path.parent, f"the folder of {what}")


# ---------------------------------------------------------------- one run per experiment at a time


class LockError(PipelineError, RuntimeError):
    """Another process works on the same experiment."""


_held: dict[str, int] = {}  # lock path -> open descriptor, for the locks this process holds
_shared: set[str] = set()  # the ones of them held shared: another holder's note may be in the file


def _is_worker_rank() -> bool:
    # torchrun starts one process per device with RANK set: the ranks of one run must not refuse each
    # other, so only rank 0 (or a process outside torchrun) takes the experiment's lock for the group
    return os.environ.get("RANK", "0") != "0"


def acquire_lock(path: Path | str, what: str, stage: str = "", shared: bool = False) -> bool:
    """Take the lock at `path` for this process; False if this process holds it already.

    flock is released by the kernel when its holder dies, so the lock of a killed run is taken over at once;
    the file keeps the holder's pid and command only for the message. `shared`: other shared holders are let
    in beside this one (the trains of other folds of one experiment), an exclusive one is not.
    """
    path = Path(path)
    key = str(path.resolve())
    if key in _held or _is_worker_rank():
        return False
    with disk_full(path):  # creating the lock file needs an inode
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise LockError(f"{what} is in use by {holder}; wait for it to finish or stop it (lock: {path})") from None
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200]
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} ({stage + ': ' if stage else ''}{command})\n".encode())
    except OSError as e:  # a full disk: the lock holds all the same (flock needs no content), only unnamed
        if e.errno not in DISK_FULL:
            raise
    _held[key] = fd
    if shared:
        _shared.add(key)
    return True


@contextlib.contextmanager
def waiting_lock(path: Path | str):
    """An exclusive lock at `path` that waits for its holder: for a short piece of work that a second process must
    not do at the same time, and should find done once it gets in (a measurement)."""
    path = Path(path)
    with disk_full(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def release_lock(path: Path | str) -> None:
    key = str(Path(path).resolve())
    fd = _held.pop(key, None)
    if fd is not None:
        # the file stays: removing it would let a waiting process lock a stale inode. A shared holder leaves the
        # note as it is: another holder may still be there (the note names the latest one)
        if key not in _shared:
            os.ftruncate(fd, 0)
        _shared.discard(key)
        os.close(fd)  # closing the descriptor releases the flock
