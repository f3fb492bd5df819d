"""`make kernel-output` and `make kernel-status`: what a pushed kernel did, brought back.

Reads   the kernel's state, output files and log, through the kaggle API (pipeline/kaggle/client.py)
Writes  kernel/<slug>/output/       the kernel's output as downloaded (models, OOF, submission) and its log;
                                    kept between runs: kaggle fetches a file again only when the kernel's
                                    copy is larger or newer
        models/<name>/...           the kernel's models/<name>/ installed unchanged (fold folders, cv.json ...),
                                    and models/<init_from>/ when the kernel trained that stage-1 model
        submissions/<name>.csv, submissions/submission.csv

A kernel that failed gives back its log: the last lines, with Kaggle's failure message, are printed.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from pipeline import layout
from pipeline.config import Config
from pipeline.files import atomic_path, atomic_write_text
from pipeline.kaggle.plan import KernelError, make_plan, resolve_user
from pipeline.kaggle.session import RUN_CONFIG

FINAL = {"complete", "error", "cancel_acknowledged"}  # kernel states that do not change any more
TAIL = 20  # log lines shown


def folders(cfg: Config, kernel_slug: str) -> tuple[Path, Path, Path]:
    """kernel/<slug>/code, notebook and output."""
    root = Path(cfg.kaggle.dir) / kernel_slug
    return root / "code", root / "notebook", root / "output"


def experiments(cfg: Config) -> list[str]:
    """The experiments a kernel's output holds: the config's, and the stage-1 model it trained first."""
    return [cfg.name] + ([cfg.model.init_from] if cfg.model.init_from else [])


def output_pattern(cfg: Config) -> str:
    """The output files worth downloading: the experiments' models and the submissions, nothing else."""
    names = "|".join(re.escape(n) for n in experiments(cfg))
    return rf"^(models/({names})/|submission\.csv$|{re.escape(cfg.name)}\.csv$|{re.escape(RUN_CONFIG)}$)"


def log_lines(raw: str) -> list[str]:
    """The text lines of a kernel log: Kaggle's JSON list of {stream_name, time, data} entries, or plain text."""
    try:
        entries = json.loads(raw)
    except (json.JSONDecodeError, ValueError):
        return raw.splitlines()
    if not isinstance(entries, list):
        return raw.splitlines()
    text = "".join(str(e.get("data", "")) for e in entries if isinstance(e, dict))
    return text.splitlines()


def same_file(a: Path, b: Path) -> bool:
    """`b` is an installed copy of `a`: same size and time (copies keep the time). A rerun's weights have the
    same size as the old ones, but kaggle downloads them again (they are newer), so their time differs."""
    if not b.is_file():
        return False
    sa, sb = a.stat(), b.stat()
    return sa.st_size == sb.st_size and int(sa.st_mtime) == int(sb.st_mtime)


def install_output(cfg: Config, out: Path) -> tuple[list[Path], int]:
    """Copy the output into models/<name>/ and submissions/ unchanged; files already there with the same
    size and time are skipped. Returns (files copied, files skipped)."""
    pairs = []
    for name in experiments(cfg):
        exp = out / "models" / name
        if exp.is_dir():
            dest = layout.experiment_dir(cfg, name)
            pairs += [(p, dest / p.relative_to(exp)) for p in sorted(exp.rglob("*")) if p.is_file()]
    for dest in (layout.submission_csv(cfg), layout.submission_path(cfg)):
        if (out / dest.name).is_file():  # the notebook's submissions folder is /kaggle/working itself
            pairs.append((out / dest.name, dest))
    if not pairs:
        raise KernelError(f"{out}: the kernel's output holds neither models/{cfg.name}/ nor submission.csv")
    copied = []
    for src, dest in pairs:
        if same_file(src, dest):
            continue
        with atomic_path(dest) as tmp:  # never a half-copied weights file under its final name
            shutil.copy2(src, tmp)  # keeps the time that same_file compares
        copied.append(dest)
    return copied, len(pairs) - len(copied)


def show_log(ref: str, out: Path, api) -> list[str]:
    """Download the kernel's log into `out`/<slug>.log and return its lines."""
    from pipeline.kaggle import client

    lines = log_lines(client.kernel_log(ref, api))
    atomic_write_text(out / f"{ref.split('/')[-1]}.log", "\n".join(lines) + "\n")
    return lines


def fetch_output(cfg: Config, api=None) -> list[Path]:
    """`make kernel-output`: check the kernel finished, download its output, install it locally."""
    from pipeline.kaggle import client

    if cfg.kaggle.dry_run:
        plan = make_plan(cfg, resolve_user(cfg))
        print(f"kernel: dry run: would download {plan.kernel_ref}'s output matching {output_pattern(cfg)}")
        return []
    api = client.get_api() if api is None else api
    plan = make_plan(cfg, resolve_user(cfg, api))
    out = folders(cfg, plan.kernel_slug)[2]
    status, failure = client.kernel_status(plan.kernel_ref, api)
    if status == "error":
        tail = show_log(plan.kernel_ref, out, api)[-TAIL:]
        print(f"kernel: the last lines of its log ({out / (plan.kernel_slug + '.log')}):")
        print("\n".join(f"  | {line}" for line in tail))
        raise KernelError(f"kernel {plan.kernel_ref} failed: {failure or 'see the log lines above'}")
    if status != "complete":
        raise KernelError(
            f"kernel {plan.kernel_ref} is {status}, not complete; follow it with "
            f"`make kernel-status CONFIG={cfg.name}` and run this again when it is"
        )
    files = client.download_kernel_output(plan.kernel_ref, out, api, file_pattern=output_pattern(cfg))
    print(f"kernel: {len(files)} output files in {out}")
    copied, skipped = install_output(cfg, out)
    for p in copied:
        print(f"kernel: -> {p}")
    if skipped:
        print(f"kernel: {skipped} files already installed (same size and time); left as they are")
    return copied


def kernel_status(
    cfg: Config, api=None, follow: bool = False, poll_s: float = 60, sleep: Callable[[float], None] = time.sleep
) -> str:
    """`make kernel-status`: the kernel's state and its log's last lines; with `follow`, until it ends."""
    from pipeline.kaggle import client

    api = client.get_api() if api is None else api
    plan = make_plan(cfg, resolve_user(cfg, api))
    out = folders(cfg, plan.kernel_slug)[2]
    seen = 0
    while True:
        status, failure = client.kernel_status(plan.kernel_ref, api)
        lines = show_log(plan.kernel_ref, out, api)
        new = lines[seen:] if seen else lines[-TAIL:]  # the tail first, then only what was added
        if new:
            print("\n".join(f"  | {line}" for line in new))
        seen = len(lines)
        print(f"kernel {plan.kernel_ref}: {status}" + (f": {failure}" if failure else ""))
        if not follow or status in FINAL:
            return status
        sleep(poll_s)
