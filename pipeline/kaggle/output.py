"""`make kernel-output` and `make kernel-status`: what a pushed kernel did, brought back.

Reads   the kernel's state, output files and log, through the kaggle API (pipeline/kaggle/kernels.py)
Writes  kernel/<slug>/output/       the kernel's output as downloaded (models, OOF, submission) and its log;
                                    kept between runs: kaggle fetches a file again only when the kernel's
                                    copy is larger or newer
        models/<name>/...           the kernel's models/<name>/ installed unchanged (fold folders, cv.json ...),
                                    and models/<init_from>/ when the kernel trained that stage-1 model; a file an
                                    earlier download installed that the latest output no longer holds is removed
                                    (unless changed here since), as it is from output/
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

from pipeline import layout, validity
from pipeline.errors import PipelineError
from pipeline.files import atomic_path, atomic_write_text
from pipeline.kaggle.client import printable
from pipeline.kaggle.plan import KernelError, make_plan, resolve_user
from pipeline.kaggle.session import RUN_CONFIG
from pipeline.schema import Config

FINAL = {"complete", "error", "cancel_acknowledged"}  # kernel states that do not change any more
# a version saved without running (pushed with no_run, or a Quick Save on the website): no session runs it, it has
# no output, and a push does not start a second session beside it
SAVED = "new_script"
IDLE = FINAL | {SAVED}  # no session runs: a push may start one
TAIL = 20  # log lines shown


def folders(cfg: Config, kernel_slug: str) -> tuple[Path, Path, Path]:
    """kernel/<slug>/code, notebook and output."""
    root = Path(cfg.kaggle.dir) / kernel_slug
    return root / "code", root / "notebook", root / "output"


def ended_state(ref: str, api, why: str = "", also: str = "") -> str | None:
    """The state of kernel `ref`'s latest version once no session runs it (one of IDLE: ended, or saved without
    running); None when it was never pushed. Refused in one line while it is queued or runs: a push then starts a
    second GPU session beside it, on the same weekly quota. `why` opens the line, `also` adds to what the push
    would do."""
    from pipeline.kaggle import client, kernels

    try:
        status, _ = kernels.kernel_status(ref, api)
    except client.KaggleError as exc:
        if not never_pushed(ref, api, exc.__cause__):
            raise
        return None
    if status not in IDLE:
        raise KernelError(
            f"{why}kernel {ref} is {status}: a push now would start a second GPU session beside it{also}; wait for "
            "it to end (make kernel-status), then push again"
        )
    return status


def never_pushed(ref: str, api, exc: BaseException | None) -> bool:
    """kernels_status failed with `exc` because kernel `ref` does not exist: a 404, or a 403 (Kaggle answers one for
    a kernel that does not exist as well: kaggle 2.2.5 blames "a wrong kernel slug") for a kernel of the user's own
    that their kernel list, searched by its slug, does not hold either (another owner's is denied access)."""
    from pipeline.kaggle import client, kernels

    status = kernels.access_status(exc) if exc is not None else None
    if status == 404:
        return True
    own = client.authenticated_username(api) in ("", ref.partition("/")[0])  # "": credentials without a name
    return status == 403 and own and kernels.listed_kernel(ref, api, mine=True) is None


def experiments(cfg: Config) -> list[str]:
    """The experiments a kernel's output holds: the config's, and the stage-1 model it trained first."""
    return [cfg.name] + ([cfg.model.init_from] if cfg.model.init_from else [])


def output_pattern(cfg: Config) -> str:
    """The output files worth downloading: the experiments' models and the submissions, nothing else."""
    names = "|".join(re.escape(n) for n in experiments(cfg))
    return rf"^(models/({names})/|submission\.csv$|{re.escape(cfg.name)}\.csv$|{re.escape(RUN_CONFIG)}$)"


def event_lines(event) -> list[str]:
    """The lines of one log event ({stream_name, time, data}), as kaggle 2.2.5's own follow prints it: its data, a
    newline added unless it ends with one (its parsers yield an event a line, most without one); no data, no line."""
    data = event.get("data") if isinstance(event, dict) else None
    if data is None:
        return []
    text = str(data)
    return (text[:-1] if text.endswith("\n") else text).split("\n")


def log_lines(raw: str) -> list[str]:
    """The text lines of a kernel log: Kaggle's JSON list of {stream_name, time, data} entries, or plain text."""
    try:
        entries = json.loads(raw)
    except (json.JSONDecodeError, ValueError):
        return raw.splitlines()
    if not isinstance(entries, list):
        return raw.splitlines()
    return [line for entry in entries for line in event_lines(entry)]


def framed(lines: list[str]) -> str:
    """Log lines as `make kernel-status` shows them: indented behind a bar, control characters written out (a
    kernel's log is whatever its code printed: an escape sequence in it must not reach the terminal)."""
    return "\n".join(f"  | {printable(line)}" for line in lines)


def follow_log(ref: str, api, shown: list[str], sleep: Callable[[float], None]):
    """The lines of the kernel's log as they are written, each event's as it comes, until the session ends, through
    dropped connections (kernels.stream_events). A stream that starts by replaying lines already `shown` (the stored
    log) has them left out: skipped while they match in order."""
    from pipeline.kaggle import kernels

    matched: int | None = 0
    for event in kernels.stream_events(ref, api, sleep):
        for line in event_lines(event):
            if matched is not None and matched < len(shown) and line == shown[matched]:
                matched += 1
                continue
            matched = None  # the first new line: everything from here on is shown
            yield line


def same_file(a: Path, b: Path) -> bool:
    """`b` is an installed copy of `a`: same size and time (copies keep the time). A rerun's weights have the
    same size as the old ones, but kaggle downloads them again (they are newer), so their time differs."""
    if not b.is_file():
        return False
    sa, sb = a.stat(), b.stat()
    return sa.st_size == sb.st_size and int(sa.st_mtime) == int(sb.st_mtime)


def drop_stale(cfg: Config, out: Path, listed: list[Path]) -> list[str]:
    """Files of an earlier download in `out` that the latest output no longer holds (a fold's resume.pt from the
    session that cut it, beside the fold a later session completed): removed, so that `out` is the latest output and
    nothing older is installed or counted; and their installed copies with them, where models/ or submissions/
    still hold them unchanged (a local `make train` would otherwise resume a fold Kaggle completed from that state,
    and retrain it over the Kaggle fold's done.json and predictions). Only names output_pattern matches: the rest
    is not an output's. Returns what was done, a line a file."""
    keep = {p.resolve() for p in listed}
    stale = [p for p in sorted(out.rglob("*")) if p.is_file() and p.suffix != ".log" and p.resolve() not in keep
             and re.search(output_pattern(cfg), p.relative_to(out).as_posix())]  # fmt: skip
    said = []
    for path in stale:
        copy = installed_path(cfg, out, path)
        line = f"kernel: {path.relative_to(out)}: of an earlier output, not in the latest: removed, not installed"
        if copy is not None and same_file(path, copy):  # the copy an earlier kernel-output installed, untouched
            copy.unlink()
            line += f"; its installed copy {copy} removed too"
        elif copy is not None and copy.is_file():
            line += f"; {copy} was changed here since it was installed: left as it is"
        path.unlink()
        said.append(line)
    return said


def installed_path(cfg: Config, out: Path, path: Path) -> Path | None:
    """Where install_output puts the output file `path` (under `out`): models/<name>/... or submissions/...; None
    for a file it does not install."""
    parts = path.relative_to(out).parts
    if len(parts) > 2 and parts[0] == "models" and parts[1] in experiments(cfg):
        return layout.experiment_dir(cfg, parts[1]).joinpath(*parts[2:])
    targets = {dest.name: dest for dest in (layout.submission_csv(cfg), layout.submission_path(cfg))}
    return targets.get(parts[0]) if len(parts) == 1 else None


def install_output(cfg: Config, out: Path) -> tuple[list[Path], int]:
    """Copy the output into models/<name>/ and submissions/ unchanged (where installed_path says); files already
    there with the same size and time are skipped. Returns (files copied, files skipped)."""
    pairs = [(p, installed_path(cfg, out, p)) for p in sorted(out.rglob("*")) if p.is_file()]
    pairs = [(src, dest) for src, dest in pairs if dest is not None]
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
    from pipeline.kaggle import kernels

    lines = log_lines(kernels.kernel_log(ref, api))
    keep_log(ref, out, lines)
    return lines


def keep_log(ref: str, out: Path, lines: list[str]) -> None:
    """The log as text in `out`/<slug>.log (kaggle's output download writes Kaggle's JSON form there)."""
    atomic_write_text(out / f"{ref.split('/')[-1]}.log", "\n".join(lines) + "\n")


def fetch_output(cfg: Config, api=None) -> list[Path]:
    """`make kernel-output`: download what the kernel left, finished or not, and install it locally.

    A kernel that failed or was stopped (a session that ran out of its 12 hours ends so) still has an output:
    its finished folds, a cut-off fold's resume state, a partial submission. They come back like a finished
    kernel's, and each fold is named complete or not."""
    from pipeline.kaggle import client, kernels

    if cfg.kaggle.dry_run:
        plan = make_plan(cfg, resolve_user(cfg))
        print(f"kernel: dry run: would download {plan.kernel_ref}'s output matching {output_pattern(cfg)}")
        return []
    api = client.get_api() if api is None else api
    plan = make_plan(cfg, resolve_user(cfg, api))
    out = folders(cfg, plan.kernel_slug)[2]
    status, failure = kernels.kernel_status(plan.kernel_ref, api)
    if status == SAVED:
        raise KernelError(
            f"kernel {plan.kernel_ref}'s latest version was saved without running ({SAVED}: pushed with no_run, or a "
            f"Quick Save): it has no output; run it (make kernel CONFIG={cfg.name}), then run this again when it ends"
        )
    if status not in FINAL:
        raise KernelError(
            f"kernel {plan.kernel_ref} is {status}, not finished; follow it with "
            f"`make kernel-status CONFIG={cfg.name}` and run this again when it is"
        )
    if status != "complete":
        log = show_log(plan.kernel_ref, out, api)
        print(f"kernel: {plan.kernel_ref} ended {status}{f': {failure}' if failure else ''}; the last lines of its "
              f"log ({out / (plan.kernel_slug + '.log')}):")  # fmt: skip
        print(framed(log[-TAIL:]))
    try:
        files = kernels.download_kernel_output(plan.kernel_ref, out, api, file_pattern=output_pattern(cfg))
    except KernelError:
        raise
    except PipelineError as e:
        if status == "complete":
            raise
        raise KernelError(f"kernel {plan.kernel_ref} failed and left no output: {failure or e}") from None
    finally:
        if status != "complete":
            keep_log(plan.kernel_ref, out, log)
    for line in drop_stale(cfg, out, files):
        print(line)
    print(f"kernel: {len(files)} output files in {out}")
    copied, skipped = install_output(cfg, out)
    for p in copied:
        print(f"kernel: -> {p}")
    if skipped:
        print(f"kernel: {skipped} files already installed (same size and time); left as they are")
    print(describe_folds(cfg, out))
    return copied


def describe_folds(cfg: Config, out: Path) -> str:
    """Which folds came back complete (done.json, and the files it vouches for) and which did not."""
    lines = []
    for name in experiments(cfg):
        folds = layout.fold_dirs(out / "models" / name)
        # every file done.json vouches for, test predictions standing for weights not kept (kaggle.keep_weights)
        usable = [(layout.ALL,), (layout.TESTED, layout.ALL)]
        complete = [k for k, d in folds.items() if any(not validity.fold_status(d, needs=n) for n in usable)]
        resumable = [k for k, d in folds.items() if k not in complete and (d / layout.RESUME).is_file()]
        other = [k for k in folds if k not in complete and k not in resumable]
        said = [f"complete: {', '.join(map(str, complete)) or 'none'}"]
        said += [f"cut off, with a resume state: {', '.join(map(str, resumable))}"] if resumable else []
        said += [f"not complete: {', '.join(map(str, other))}"] if other else []
        lines.append(f"kernel: {name} folds {'; '.join(said)}")
    if any("cut off" in line or "not complete" in line for line in lines):
        lines.append('kernel: continue in a new session: make kernel CONFIG=... ARGS="... kaggle.continue_from=self"')
    return "\n".join(lines)


def latest_eta(lines: list[str]) -> str:
    """The last estimate of the time left that the run printed (each evaluation line carries one)."""
    found = [m.group(1) for line in lines if (m := re.search(r"\bETA (\S+) for the run", line))]
    return f"; ETA {found[-1]} for the run" if found else ""


def kernel_status(
    cfg: Config, api=None, follow: bool = False, poll_s: float = 60, sleep: Callable[[float], None] = time.sleep
) -> str:
    """`make kernel-status`: the kernel's state, its log's last lines and the latest ETA; with `follow`, the log
    as it is written (kernels_logs_stream where the library has it, else polled every `poll_s` s) until it ends."""
    from pipeline.kaggle import client, kernels

    api = client.get_api() if api is None else api
    plan = make_plan(cfg, resolve_user(cfg, api))
    out = folders(cfg, plan.kernel_slug)[2]
    status, failure = kernels.kernel_status(plan.kernel_ref, api)
    lines = show_log(plan.kernel_ref, out, api)
    print(framed(lines[-TAIL:]))
    if follow and status not in IDLE and kernels.can_stream_logs(api):
        for line in follow_log(plan.kernel_ref, api, list(lines), sleep):
            print(framed([line]), flush=True)
            lines.append(line)
        status, failure = kernels.kernel_status(plan.kernel_ref, api)
    while follow and status not in IDLE:  # no stream: poll the stored log (a saved version never ends)
        sleep(poll_s)
        status, failure = kernels.kernel_status(plan.kernel_ref, api)
        new = show_log(plan.kernel_ref, out, api)
        print(framed(new[len(lines) :]))
        lines = new
    print(f"kernel {plan.kernel_ref}: {status}" + (f": {failure}" if failure else "") + latest_eta(lines))
    return status
