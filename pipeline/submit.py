"""Stage `make submit` (and `make submissions`): send a submission to the competition and record its score.

Reads   submissions/<name>.csv (or kaggle.submit_file; after `make kernel-output` the kernel's own file),
        models/<name>/cv.json for the figure it is ranked by (its six-language AUC, else its validation AUC),
        the competition's sample_submission.csv when present
Writes  models/<name>/submissions.jsonl   one line per submission: time, file, message, ref, status,
                                          public and private score

Before anything is sent the file is checked like `make predict` checks it (the ids of
sample_submission.csv, no NaN, values in [0, 1]): a failed check submits nothing. The message names
the experiment, its OOF figure and the git commit. The score is polled until Kaggle has it or
`kaggle.submit_timeout` seconds have passed, asking again through transient failures (a 5xx, a
dropped connection). `--list` (make submissions) prints every recorded submission beside its
experiment's OOF figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from pipeline import config as config_mod
from pipeline import layout
from pipeline.errors import PipelineError, run_stage
from pipeline.files import atomic_write_text, read_json
from pipeline.schema import Config
from pipeline.scoring import metrics
from pipeline.scoring.submission import check_submission


class SubmitError(PipelineError):
    pass


def submission_file(cfg: Config) -> Path:
    return Path(cfg.kaggle.submit_file) if cfg.kaggle.submit_file else layout.submission_path(cfg)


def oof_figure(exp: Path) -> tuple[str, float] | None:
    """(the name, the value) of the figure the experiment is ranked by, from its cv.json
    (metrics.headline); None when there is none (or it cannot be read)."""
    try:
        found = metrics.headline(metrics.saved_figures(read_json(exp / layout.CV_JSON)))
    except (OSError, ValueError):
        return None
    return (found[0].header, found[1]) if found else None


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def message(name: str, figure: tuple[str, float] | None, commit: str) -> str:
    parts = [name, f"{figure[0]} {figure[1]:.4f}" if figure else "OOF figure unknown"]
    return "; ".join(parts + ([f"commit {commit}"] if commit else []))


def check_file(path: Path, sample: Path | None) -> pd.DataFrame:
    """The checks `make predict` applies; with no sample_submission.csv at hand, columns and values only."""
    if not path.is_file():
        raise SubmitError(f"{path}: no such file; run `make predict` (or `make kernel-output`) first")
    try:
        sub = pd.read_csv(path, dtype={"id": str})
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise SubmitError(f"{path}: not a readable CSV ({exc})") from exc
    if list(sub.columns) != ["id", "toxic"]:
        raise SubmitError(f"{path}: columns {list(sub.columns)}, expected id,toxic")
    if sample is not None and sample.is_file():
        try:
            check_submission(sub, pd.read_csv(sample, dtype={"id": str}))
        except PipelineError as exc:
            raise SubmitError(f"{path}: {exc}") from exc
    elif sub["toxic"].isna().any() or not sub["toxic"].between(0, 1).all():
        raise SubmitError(f"{path}: toxic must be a number in [0, 1] on every row")
    return sub


def sample_submission_path(cfg: Config) -> Path | None:
    try:
        return layout.raw_dir(cfg) / layout.SAMPLE_SUBMISSION
    except PipelineError:
        return None


def wait_for_score(
    ref: int, api, timeout_s: float, poll_s: float = 15, sleep: Callable = time.sleep, clock: Callable = time.monotonic
) -> dict:
    """The submission's state once Kaggle has scored it, or the last one after `timeout_s` seconds: the sleeps and
    the time the calls took both count (`clock` times the calls). A transient failure (5xx, 429, a dropped
    connection) is said and asked again; any other ends the wait with its one-line error."""
    from pipeline.kaggle import submissions
    from pipeline.kaggle.client import KaggleError

    waited, state = 0.0, {"status": "pending", "public": "", "private": "", "error": ""}
    while True:
        begin = clock()
        try:
            state = submissions.submission_state(ref, api)
        except KaggleError as exc:
            if not submissions.transient(exc.__cause__):
                raise
            print(f"submit: {exc}; asking again")
        waited += clock() - begin
        if state["status"] != "pending" or waited >= timeout_s:
            return state
        sleep(poll_s)
        waited += poll_s


def record(exp: Path, entry: dict) -> None:
    """Append `entry` to models/<name>/submissions.jsonl (rewritten whole: never a half line)."""
    path = exp / layout.SUBMIT_RECORD
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    atomic_write_text(path, old + json.dumps(entry) + "\n")


def submit(cfg: Config, api=None, sleep: Callable = time.sleep, clock: Callable = time.monotonic) -> dict:
    from pipeline.kaggle import client, submissions

    path = submission_file(cfg)
    check_file(path, sample_submission_path(cfg))
    exp = layout.experiment_dir(cfg)
    text = message(cfg.name, oof_figure(exp), git_commit())
    api = client.get_api() if api is None else api
    ref = submissions.submit(cfg.data.competition, path, text, api)
    print(f"submit: {path} sent to {cfg.data.competition} as submission {ref} ({text})")
    entry = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "file": str(path),
        "message": text,
        "ref": ref,
        "status": "pending",
        "public": "",
        "private": "",
    }
    try:
        if cfg.kaggle.submit_timeout > 0:
            print(f"submit: waiting for the score (at most {cfg.kaggle.submit_timeout} s)")
            state = wait_for_score(ref, api, cfg.kaggle.submit_timeout, sleep=sleep, clock=clock)
            entry.update(status=state["status"], public=state["public"], private=state["private"])
            if state["error"]:
                entry["error"] = state["error"]
    finally:
        record(exp, entry)  # submitted is submitted: the record is kept even if polling fails
    if entry["status"] == "error":
        raise SubmitError(f"submission {ref} failed to score: {entry.get('error') or 'no reason given'}")
    if entry["status"] == "complete":
        print(f"submit: public score {entry['public'] or '(not published)'}, private {entry['private'] or '(hidden)'}")
    else:
        print(f"submit: not scored yet; see https://www.kaggle.com/competitions/{cfg.data.competition}/submissions")
    return entry


def recorded(models_dir: Path) -> list[dict]:
    """Every recorded submission of every experiment, with the experiment's OOF figure, oldest first; a line
    that cannot be read is named on stderr and left out."""
    rows = []
    for path in sorted(Path(models_dir).glob(f"*/{layout.SUBMIT_RECORD}")):
        figure = oof_figure(path.parent)
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            entry = parse_entry(line)
            if entry is None and line.strip():
                print(f"submissions: {path}:{number} is not a submission record; left out", file=sys.stderr)
            elif entry is not None:
                rows.append({"experiment": path.parent.name, "oof": figure, **entry})
    return sorted(rows, key=lambda r: r["time"])


def parse_entry(line: str) -> dict | None:
    """One line of submissions.jsonl as `record` wrote it, or None."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("time", "status")):
        return None
    return {"public": "", "private": "", **{k: "" if v is None else v for k, v in entry.items()}}


def submissions_table(rows: list[dict]) -> str:
    if not rows:
        return "no submissions recorded yet (make submit)"
    head = f"{'time':<26} {'experiment':<16} {'OOF':>17} {'public':>8} {'private':>8}  status"
    lines = [head, "-" * len(head)]
    for r in rows:
        oof = f"{r['oof'][0]} {r['oof'][1]:.4f}" if r["oof"] else "-"
        lines.append(
            f"{r['time']:<26} {r['experiment']:<16} {oof:>17} {r['public'] or '-':>8} {r['private'] or '-':>8}  "
            f"{r['status']}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = config_mod.parser("Submit submissions/<name>.csv to the competition and wait for its score.")
    p.add_argument("--list", action="store_true", help="list every recorded submission with its OOF figure")
    args = p.parse_args(argv)

    def stage() -> None:
        cfg = config_mod.from_args(args)
        if args.list:
            print(submissions_table(recorded(layout.models_root(cfg))))
        else:
            submit(cfg)

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
