"""The checkout's own input/, models/ and submissions/ hold a user's data, models and submissions: no test reads
or writes them. `Watch` sees both ways a test could: the file operations this process makes under those folders
(a Python audit hook: opens, listings, new folders, renames, removals, copies) and what changed in them on disk
between the start and the end of a test (which a child process's writes show too). tests/conftest.py fails a test
that did either, at its teardown, naming the paths."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.helpers import ROOT

CHECKOUT_ROOTS = tuple(ROOT / name for name in ("input", "models", "submissions"))

# the audit events that read or write a path (https://docs.python.org/3/library/audit_events.html); a path is one
# of the first two arguments (a rename's and a copy's both)
EVENTS = frozenset({
    "open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.truncate",
    "os.utime", "os.chmod", "os.link", "os.symlink", "shutil.copyfile", "shutil.copytree", "shutil.move",
    "shutil.rmtree",
})  # fmt: skip


def _as_path(arg) -> str | None:
    if isinstance(arg, bytes):
        return os.fsdecode(arg)
    if isinstance(arg, str | os.PathLike):
        path = os.fspath(arg)
        return path if isinstance(path, str) else os.fsdecode(path)
    return None  # a file descriptor, None


class Watch:
    """Records the touches of `roots` while active; `touched()` gives them with what changed on disk since `start`."""

    def __init__(self, roots: tuple[Path, ...] = CHECKOUT_ROOTS) -> None:
        self.roots = tuple(os.path.abspath(r) for r in roots)
        self.active = False
        self.seen: list[str] = []
        self.before: dict[str, tuple[int, int]] = {}
        sys.addaudithook(self.hook)  # for the life of the process: a hook cannot be removed, only made inactive

    def inside(self, path: str) -> bool:
        path = os.path.abspath(path)  # a relative path is the checkout's when the test runs from it
        return any(path == r or path.startswith(r + os.sep) for r in self.roots)

    def hook(self, event: str, args: tuple) -> None:
        if not self.active or event not in EVENTS:
            return
        if event in ("os.rmdir", "os.remove") and len(args) > 1 and args[1] is not None:
            return  # relative to an open folder (dir_fd, as shutil.rmtree walks): not a path from the checkout
        for arg in args[:2]:
            path = _as_path(arg)
            # a bare name is what rmtree opens relative to an open folder (the audit event does not say which)
            if path is not None and (os.sep in path or os.path.isabs(path)) and self.inside(path):
                self.seen.append(f"{event} {os.path.relpath(os.path.abspath(path), ROOT)}")

    def state(self) -> dict[str, tuple[int, int]]:
        """Every file and folder under the roots with its size and modification time (read while inactive)."""
        found = {}
        for root in self.roots:
            for folder, dirs, names in os.walk(root):
                for name in dirs + names:
                    path = os.path.join(folder, name)
                    with_stat = os.lstat(path)
                    found[os.path.relpath(path, ROOT)] = (with_stat.st_size, with_stat.st_mtime_ns)
        return found

    def start(self) -> None:
        self.seen, self.before, self.active = [], self.state(), True

    def stop(self) -> list[str]:
        """What the test did to the roots: its operations, then the paths that changed, appeared or went."""
        self.active = False
        after = self.state()
        changed = sorted(p for p in set(after) | set(self.before) if after.get(p) != self.before.get(p))
        return list(dict.fromkeys(self.seen)) + [f"changed on disk: {p}" for p in changed]
