"""Other experiments as one experiment reads them (blend members, pseudo-label teachers, the board's rows): what
made them, whether their folds count, in one line why not; and what guards a stage of the config's own
experiment: every path it reads or writes checked before any work (`preflight`), and its lock while it runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from pipeline import files, fingerprint, layout, stages, validity
from pipeline.errors import PipelineError
from pipeline.schema import Config


def pred_scale(done: dict) -> str:
    """The scale of a fold's predictions: what its done.json records, else what made it (a fold written before
    the scale was recorded: a blend's are ranks, every other one's probabilities)."""
    return done.get("scale") or (layout.RANK if done.get("model") == "blend" else layout.PROBABILITY)


def experiment_kind(exp: Path) -> str:
    """'blend', 'tfidf+lr' or 'model': what made an experiment's folds (their done.json says)."""
    for folder in layout.done_dirs(exp).values():
        model = (validity.read_done(folder) or {}).get("model")
        if model in ("blend", fingerprint.TFIDF["model"]):
            return model
    return "model"


def prepared_folder(cfg: Config, exp: Path, depth: int = 0) -> Path | None:
    """The prepared folder of the tables an experiment was made from, whose lengths.csv the six-language estimate
    weights by; a blend's or a route's: its first member's (a route's first is its fallback), followed through
    blends of blends. None where it cannot be read (the estimate is then made without length)."""
    try:
        if experiment_kind(exp) != "blend":
            return layout.prepared_dir(validity.experiment_as_prepared(cfg, exp.name))
        members = next((d.get("members") for d in map(validity.read_done, layout.done_dirs(exp).values()) if d), None)
        if not members or depth >= 8:  # 8: a damaged done.json naming its own blend is not followed forever
            return None
        return prepared_folder(cfg, layout.experiment_dir(cfg, members[0]), depth + 1)
    except (PipelineError, OSError, ValueError, KeyError, TypeError):
        return None


def blend_fold_problem(cfg: Config, folder: Path, needs: tuple[str, ...], chain: tuple[str, ...] = ()) -> str:
    """Why a blend's fold does not count ('' when it does): its own files, then each member's fold as
    current as when the blend was made (the digests its done.json records). `chain`: the blends that led
    here, so that a member naming one of them (a damaged done.json) is refused, not followed forever."""
    why = validity.fold_status(folder, None, needs)
    if why:
        return why
    done, k = validity.read_done(folder), layout.fold_index(folder)
    chain = (*chain, folder.parent.name)
    for member, digest in (done.get("member_digests") or {}).items():
        if member in chain:
            return f"names {member} among its own members ({' -> '.join([*chain, member])}); make the blend again"
        # only this fold of the member: a blend may be of some folds (the ones every member had). Its OOF is
        # what the blend's weights were fit on: a member fold that the board calls stale leaves this one out too
        use, left_out = experiment_check(cfg, member, needs=(layout.OOF,), chain=chain)
        folds = {layout.fold_index(d): d for d in use}
        if k not in folds and layout.fold_name(k) in left_out:
            return f"member {member}'s fold{k} no longer counts ({left_out[layout.fold_name(k)]})"
        if k not in folds or validity.read_done(folds[k])["digest"] != digest:
            return f"member {member}'s fold{k} changed since the blend was made (make the blend again)"
        # the same settings need not give the same predictions (a fold retrained on a GPU, predicted again):
        # the blend's weights and test rows were made from the files it recorded (older blends: not recorded)
        made = (done.get("member_files") or {}).get(member)
        if made and prediction_record(folds[k]) != made:
            return f"member {member}'s fold{k} predictions changed since the blend was made (make the blend again)"
    return "" if done.get("member_digests") else "made by an older version (make the blend again)"


def prediction_record(folder: Path) -> dict:
    """The sha256 of a fold's OOF and test predictions, as its done.json (or a trained fold's test.json) records
    them: what a blend of the fold was made from."""
    recorded = (validity.read_done(folder) or {}).get("files") or {}
    test = recorded.get(layout.TEST_PREDS)
    if test is None:  # a trained fold's test predictions: predict's cache, with a record of its own
        try:
            test = files.read_json(folder / layout.TEST_KEY).get("file")
        except (OSError, ValueError, AttributeError):
            test = None
    return {"oof": (recorded.get(layout.OOF) or {}).get("sha256"), "test": (test or {}).get("sha256")}


def experiment_check(
    cfg: Config, name: str, needs: tuple[str, ...] = (layout.OOF,), chain: tuple[str, ...] = ()
) -> tuple[list[Path], dict[str, str]]:
    """(the folds of models/<name>/ that count, {fold: why not} for the others of 0..data.folds-1): a trained
    experiment's or a baseline's checked against the fingerprint of its own config and prepared data as they
    are now, a blend's against its members as they were when it was made (`chain`: the blends that led here)."""
    exp = layout.experiment_dir(cfg, name)
    if not exp.is_dir():
        raise PipelineError(f"{name}: no experiment in {exp} (train it, make its baseline or blend it first)")
    kind = experiment_kind(exp)
    if kind != "blend":
        digest, k = validity.experiment_digest(cfg, name, kind)
        return validity.select_folds(exp, digest, k, needs)
    found = {f: p for f, p in layout.fold_dirs(exp).items() if f >= 0}
    why = {layout.fold_name(f): blend_fold_problem(cfg, found[f], needs, chain) if f in found else "not made"
           for f in range(max(found, default=-1) + 1)}  # fmt: skip
    return [found[f] for f in sorted(found) if not why[layout.fold_name(f)]], {f: w for f, w in why.items() if w}


def experiment_folds(
    cfg: Config,
    name: str,
    needs: tuple[str, ...] = (layout.OOF,),
    chain: tuple[str, ...] = (),
    folds: tuple[int, ...] = (),
) -> dict[int, Path]:
    """Every fold of models/<name>/ (a trained experiment, a TF-IDF baseline or a blend), each complete,
    intact and current (experiment_check), by fold number; else one line naming the experiment, the folds
    and why, and the command that makes them. With `folds` (a teacher of a student that trains those alone,
    train.folds) only those must count; the others that do are returned too."""
    use, left_out = experiment_check(cfg, name, needs, chain)
    if folds:
        left_out = validity.of_folds(left_out, folds)
    if left_out:
        raise refusal(cfg, name, left_out)
    return {layout.fold_index(d): d for d in use}


def refusal(cfg: Config, name: str, left_out: dict[str, str]) -> PipelineError:
    """The one line for folds of models/<name>/ that do not count: which, why, and the command that makes them."""
    kind = experiment_kind(layout.experiment_dir(cfg, name))
    make = {"blend": "blend", fingerprint.TFIDF["model"]: "baseline"}.get(kind, "train predict")
    return PipelineError(
        f"{name}: {validity.describe(left_out)}; make it again with `make {make}` and its CONFIG and ARGS"
    )


def check_raw(cfg: Config, name: str | None) -> None:
    if cfg.data.source == "dir" and cfg.data.dir:
        files.check_readable(Path(cfg.data.dir).expanduser(), "the competition folder (data.dir)")


def check_submission(cfg: Config, name: str | None) -> None:
    files.check_writable_dir(Path(cfg.submissions_dir), "the submissions folder (submissions_dir)")
    files.check_file_target(layout.submission_path(cfg, name), "the submission")


# how each of stages.CHECKS is made: f(cfg, the experiment folder a stage writes when not the config's own)
CHECKS = {
    "raw": check_raw,
    "input": lambda cfg, name: files.check_writable_dir(layout.input_dir(cfg), "the input folder (input_dir)"),
    "prepared": lambda cfg, name: files.check_readable(layout.prepared_dir(cfg), "the prepared data"),
    "models": lambda cfg, name: files.check_writable_dir(
        layout.experiment_dir(cfg, name), "the models folder (models_dir)"
    ),
    "submission": check_submission,
    "submission.csv": lambda cfg, name: files.check_file_target(layout.submission_csv(cfg), "the submission"),
    "board": lambda cfg, name: files.check_file_target(layout.board_path(cfg), "the board (models/board.md)"),
}


def preflight(cfg: Config, stage: str, name: str | None = None) -> None:
    """Every path `stage` reads or writes (its record's `checks`, pipeline/stages.py), checked before any work is
    done; `name` is the experiment folder a stage writes when it is not the config's own (a blend's, the
    baseline's)."""
    for check in stages.of(stage).checks:
        CHECKS[check](cfg, name)


@contextlib.contextmanager
def experiment_lock(cfg: Config, stage: str):
    """Hold the experiment's lock for the block (a lock this process already holds is left as it is)."""
    path = layout.lock_path(cfg)
    taken = files.acquire_lock(path, f"experiment {cfg.name!r}", stage)
    try:
        yield
    finally:
        if taken:
            files.release_lock(path)


def hold_experiment_lock(cfg: Config, stage: str) -> None:
    """Take the experiment's lock until this process exits (one line at the start of a stage)."""
    files.acquire_lock(layout.lock_path(cfg), f"experiment {cfg.name!r}", stage)


def hold_fold_locks(cfg: Config, folds: list[int], stage: str = "train") -> None:
    """Take the experiment's lock shared and each of `folds`' own until this process exits: a train of other
    folds of the experiment runs beside this one (each fold writes only its own folder, its report is made
    from the complete folds), while a second train of one of these folds, `make data` (which replaces the
    tables they read) and `make predict` (which takes the experiment's lock alone) stop at once, naming it."""
    paths = [layout.lock_path(cfg)]
    taken = [files.acquire_lock(paths[0], f"experiment {cfg.name!r}", stage, shared=True)]
    try:
        for fold in sorted(folds):  # in one order, so that two runs never each hold a fold the other waits on
            paths.append(layout.fold_lock_path(cfg, fold))
            taken.append(files.acquire_lock(paths[-1], f"fold {fold} of experiment {cfg.name!r}", stage))
    except files.LockError:  # refused: what this call took is let go (a stage in this process may take it next)
        for path, mine in zip(paths, taken):
            if mine:
                files.release_lock(path)
        raise
