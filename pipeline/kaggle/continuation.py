"""A run continued in a new Kaggle session: what an earlier session left, checked before the push and again
when the notebook starts.

Each session writes `kernel-session.json` (its record) into /kaggle/working after every fold it keeps: a random
id, how many processes trained, and which folds are complete or cut off with a resume state. `make kernel` with
`kaggle.continue_from` asks Kaggle (before anything is sent) for the newest version of that kernel that has
finished and whose record lists folds, refuses while a version still runs (a push would start a second GPU
session beside it), and attaches that version's output with the record's id in the code file. The notebook
stops in its first minute when the mounted output is another one, or holds no folds to continue from, or was
trained by a number of processes this session cannot run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from pipeline import layout, validity
from pipeline.files import atomic_write_text
from pipeline.kaggle.output import IDLE, ended_state, experiments
from pipeline.kaggle.plan import KernelError, Plan
from pipeline.schema import Config

RECORD = "kernel-session.json"  # in /kaggle/working: the session's id, processes and folds
VERSIONS_BACK = 10  # versions looked at, newest first, for one that finished with folds
LINKED = {layout.WEIGHTS, layout.RESUME}  # read in place from the mounted output: gigabytes, never copied


# ---------------------------------------------------------------- the record a session leaves


def new_session_id() -> str:
    return os.urandom(8).hex()


def write_record(working: Path, session: str, processes: int, folds: dict[str, dict[str, list[int]]]) -> None:
    """kernel-session.json: this session's id, its processes, and per experiment its complete and cut folds."""
    record = {"session": session, "processes": processes, "experiments": folds}
    atomic_write_text(working / RECORD, json.dumps(record, indent=1) + "\n")


def read_record(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def record_folds(record: dict | None, names: list[str]) -> list[str]:
    """What a record says each experiment has: `sample: 0 complete, 1 cut off` ([] when it lists no folds)."""
    said = []
    for name in names:
        entry = ((record or {}).get("experiments") or {}).get(name) or {}
        words = {"complete": "complete", "cut": "cut off"}
        parts = [f"{', '.join(map(str, entry[k]))} {word}" for k, word in words.items() if entry.get(k)]
        said += [f"{name}: {'; '.join(parts)}"] if parts else []
    return said


# ---------------------------------------------------------------- before the push: which version to continue


def done_pattern(cfg: Config) -> str:
    """The files that say what a version's output holds: its record, and each fold's done.json (older outputs)."""
    names = "|".join(re.escape(n) for n in experiments(cfg))
    return rf"^({re.escape(RECORD)}|models/({names})/fold-?\d+/{re.escape(layout.DONE)})$"


def version_holds(folder: Path, cfg: Config) -> list[str]:
    """The folds a downloaded version's output lists (its record, else the done.json files there), in words."""
    said = record_folds(read_record(folder), experiments(cfg))
    if said or read_record(folder) is not None:
        return said
    found = []
    for name in experiments(cfg):
        done = sorted(layout.done_dirs(folder / "models" / name))
        found += [f"{name}: {', '.join(map(str, done))} complete"] if done else []
    return found


def pick_version(cfg: Config, plan: Plan, api, dest: Path) -> Plan:
    """`plan` with the earlier kernel's version to continue from and that session's id, checked through the API:
    refused while a version runs, and refused when no version of the last VERSIONS_BACK finished with folds."""
    import dataclasses

    from pipeline.kaggle import kernels

    ref = plan.continue_kernel
    status = ended_state(ref, api, "kaggle.continue_from: ", " and attach an output that is not written yet")
    if status is None:
        raise KernelError(
            f"kaggle.continue_from: kernel {ref} does not exist: nothing to continue from; push it once "
            "without kaggle.continue_from"
        )
    newest = plan.continue_version or kernels.kernel_version(ref, api) or last_pushed(dest.parent, ref)
    versions = [plan.continue_version] if plan.continue_version else list(range(newest, 0, -1))[:VERSIONS_BACK]
    for version in versions or [None]:
        source = f"{ref}/{version}" if version else ref
        state, failure = kernels.kernel_status(source, api) if version else (status, "")
        if state not in IDLE:  # a version saved without running runs nothing: it has no output, the older are looked at
            raise KernelError(f"kaggle.continue_from: kernel {source} is {state}; wait for it to end, then push again")
        folder = dest / (f"v{version}" if version else "latest")
        shutil.rmtree(folder, ignore_errors=True)
        kernels.download_output_files(source, folder, done_pattern(cfg), api)
        held = version_holds(folder, cfg)
        if held:
            session = (read_record(folder) or {}).get("session", "")
            print(f"kernel: continuing from {source} (ended {state}): {'; '.join(held)}")
            return dataclasses.replace(plan, continue_version=version, continue_session=str(session))
        print(f"kernel: {source} (ended {state}{f': {failure}' if failure else ''}) left no folds of "
              f"{', '.join(experiments(cfg))}")  # fmt: skip
    looked = f"versions {versions[-1]}-{versions[0]}" if len(versions) > 1 else "the version looked at"
    raise KernelError(
        f"kaggle.continue_from: {looked} of {ref} left no folds of {cfg.name} in their output; nothing to continue "
        "from: push without kaggle.continue_from to start afresh"
    )


PUSHES = "pushes.jsonl"  # beside the kernel's folders: each version `make kernel` pushed


def note_push(root: Path, ref: str, version: int | None) -> None:
    """Append the pushed version to kernel/<slug>/pushes.jsonl: where the API gives no version number, the last
    one pushed from here is where the search for a finished version starts."""
    if version:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / PUSHES, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kernel": ref, "version": version}) + "\n")


def last_pushed(root: Path, ref: str) -> int:
    try:
        lines = (root / PUSHES).read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut short by a kill: the others still count
            continue
        if isinstance(entry, dict) and entry.get("kernel") == ref and isinstance(entry.get("version"), int):
            found.append(entry["version"])
    return max(found, default=0)


# ---------------------------------------------------------------- in the notebook: the mounted output


def mounted_folds(mount: Path, cfg: Config) -> dict[str, dict[int, Path]]:
    """The fold folders of each experiment in the mounted earlier output."""
    return {name: layout.fold_dirs(mount / "models" / name) for name in experiments(cfg)}


def check_mounted(cfg: Config, mount: Path, expected: str) -> dict:
    """The mounted earlier output's record, after checking it is the one `make kernel` chose (`expected`: that
    session's id, "" in a dry run) and that it holds folds; stops with one line when not."""
    ref = cfg.kaggle.continue_from
    record = read_record(mount) or {}
    if expected and record.get("session") != expected:
        raise KernelError(
            f"kaggle.continue_from={ref}: the output attached at {mount} is not the version `make kernel` checked "
            f"(session {record.get('session') or 'unknown'}, expected {expected}): Kaggle mounted another version; "
            "run make kernel again"
        )
    if not any(mounted_folds(mount, cfg).values()):
        raise KernelError(
            f"kaggle.continue_from={ref}: the attached output {mount} holds no folds of {cfg.name} "
            f"(models/{cfg.name}/fold<k>/): nothing to continue from, and starting over would not be what was asked; "
            "push without kaggle.continue_from to start afresh"
        )
    return record


def earlier_world(mount: Path, cfg: Config, record: dict) -> int | None:
    """How many processes trained the earlier folds (the batch plan and effective batch depend on it): the
    complete folds' done.json, and the record (or the resume state itself) for a cut one; None when unknown."""
    worlds = set()
    for folds in mounted_folds(mount, cfg).values():
        for folder in folds.values():
            done = validity.read_done(folder)
            if done is not None:
                worlds.add(int(done.get("world", 1)))
            elif (folder / layout.RESUME).is_file():
                worlds.add(int(record.get("processes") or resume_world(folder / layout.RESUME)))
    if len(worlds) > 1:
        raise KernelError(
            f"the earlier output {mount} holds folds trained by {' and '.join(map(str, sorted(worlds)))} processes: "
            "they are not one experiment (the effective batch differs); start afresh under another name="
        )
    return worlds.pop() if worlds else None


def resume_world(path: Path) -> int:
    """The processes a resume state was saved by, read without loading its tensors (mmap). Read with
    weights_only=True: the state comes from a kernel's output, maybe another user's, and plain pickle runs code."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # one unreadable, or unsafe, is refused where it is loaded (core.resume); here it says nothing
        return 1
    return int(state.get("world", 1)) if isinstance(state, dict) else 1


def link_folds(mount: Path, cfg: Config) -> list[str]:
    """The earlier folds where this session trains: weights and resume states linked (read in place: gigabytes),
    the small files copied (a resumed fold rewrites them). Returns what it found, in words."""
    said = []
    for name, folds in mounted_folds(mount, cfg).items():
        for fold, src in folds.items():
            dest = layout.fold_dir(cfg, fold, name)
            for item in sorted(p for p in src.rglob("*") if p.is_file()):
                target = dest / item.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.unlink(missing_ok=True)
                if item.name in LINKED:
                    target.symlink_to(item)  # replaced by a file of its own when this session saves a new one
                else:
                    shutil.copy2(item, target)
            state = "complete" if (src / layout.DONE).is_file() else "with a resume state" if (
                src / layout.RESUME).is_file() else "incomplete"  # fmt: skip
            said.append(f"{name} fold {fold} from the earlier session ({state})")
    return said
