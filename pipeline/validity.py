"""Whether what lies on disk counts for a config: the one answer every stage gets.

A fold counts for a config when its done.json exists, is its folder's own, carries the config's fingerprint
(pipeline.fingerprint, over the inputs as they are now) and the files the reader needs are there as done.json
recorded them: `fold_status` is that rule, and `usable_folds` applies it to an experiment's folders. The
prepared tables count while data.json's signature is that of the inputs now (`current_meta`); another
experiment's folds are checked against its own config and prepared data (`experiment_digest`), which is also
how a stage-1 model a fold starts from is checked (`init_dir`). Paths come from pipeline.layout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline import config as config_mod
from pipeline import files, fingerprint, layout, schema, stages
from pipeline.errors import ConfigError, DataError, PipelineError
from pipeline.files import file_digest, read_json
from pipeline.schema import Config

# why a fold whose fingerprint is not the current one does not count, and what makes a trained one again
OTHER_INPUTS, RETRAIN = "trained on other data or settings", " (retrain it with `make train`)"


def data_settings(cfg: Config) -> dict:
    """The data settings that decide what the tables hold: all but where the files are read from (data.source,
    data.dir), which the files' digests make irrelevant."""
    return fingerprint.later_left_out("data", cfg.to_dict()["data"], fingerprint.NOT_TABLES, cfg)


def input_signature(cfg: Config, raw: Path | None = None) -> dict:
    """What the prepared tables are made from, by content: the data settings, the sha256 of every file the
    table reads (the competition's and the extra ones, in order) and of the teacher's test predictions. A
    file edited in place, its size and time kept, changes it; the same files in another folder do not."""
    raw = layout.raw_dir(cfg) if raw is None else raw
    read = [raw / name for name in layout.needed_files(cfg)] + [p for p, _ in layout.extra_files(cfg, raw)]
    missing = [p for p in read if not p.is_file()]
    if missing:
        needs = ", ".join(layout.needed_files(cfg))
        raise DataError(f"{missing[0]}: {files.not_a_file(missing[0])} (the folder needs {needs})")
    teacher = layout.teacher_files(cfg) if cfg.data.pseudo_from else {}
    relabel = layout.relabel_files(cfg) if cfg.data.relabel_from else {}
    signature = {
        "data": data_settings(cfg),
        "files": [[p.name, file_digest(p)] for p in read],
        # a retrained teacher relabels the test rows
        "pseudo": {str(k): file_digest(p) for k, p in teacher.items() if p.is_file()},
    }
    if relabel:  # a teacher that predicts its training-only rows again changes this experiment's targets
        signature["relabel"] = {str(k): file_digest(p) for k, p in relabel.items() if p.is_file()}
    if cfg.data.held_out > 0:  # tables held out by an earlier way of grouping are built again
        signature["grouping"] = layout.HELD_OUT_GROUPING
    if cfg.data.held_out > 0 and cfg.data.hold_out_long and cfg.model.name != "tiny":
        # the model's tokenizer counts the long comments held out (tokens.length_counter): another one splits otherwise
        source = Path(cfg.model.path or cfg.model.name).expanduser()
        signature["length_tokenizer"] = files.tree_digest(source) if source.is_dir() else str(source)
    signature["validation_grouping"] = layout.VALIDATION_GROUPING  # so are tables whose folds split near-copies
    return signature


def read_data_json(cfg: Config) -> dict:
    """input/prepared/<name>/data.json as it was written, or the error that says `make data`."""
    path = layout.prepared_dir(cfg) / layout.DATA_JSON
    try:
        meta = read_json(path)
    except FileNotFoundError:
        why = "no prepared data; run `make data CONFIG=...` with the same config first"
        raise DataError(f"{path.parent}: {why}") from None
    except (OSError, ValueError):
        meta = None
    # `raw` too: predict and the baseline read sample_submission.csv there (a KeyError after every fold otherwise)
    if not isinstance(meta, dict) or not {"signature", "table_digest", "test_digest", "raw"} <= set(meta):
        raise DataError(f"{path}: unreadable or not written by `make data`; run `make data` again")
    return meta


def changed_inputs(recorded: dict, now: dict) -> str:
    """What differs between two input signatures, in words."""
    if recorded.get("data") != now["data"]:
        return "other data settings"
    was = {name: digest for name, digest in recorded.get("files", [])}
    changed = [name for name, digest in now["files"] if was.get(name) != digest]
    if changed or len(was) != len(now["files"]):
        return f"{', '.join(changed) or 'the list of files'} changed"
    if any(recorded.get(k) != now.get(k) for k in ("grouping", "validation_grouping")):
        return "an earlier version grouped the rows into folds otherwise"
    if recorded.get("length_tokenizer") != now.get("length_tokenizer"):
        return "the model's tokenizer, which counts the long comments held out (data.hold_out_long), changed"
    if recorded.get("relabel") != now.get("relabel"):
        return "the teacher's training-row predictions (data.relabel_from) changed"
    return "the teacher's test predictions (data.pseudo_from) changed"


def current_meta(cfg: Config) -> dict:
    """data.json of the prepared tables, checked to be made from the inputs as they are now: the same data
    settings, the same raw files (by content) and the same teacher predictions; else one line that says
    `make data`. Every stage that reads prepared tables gets them through this."""
    meta = read_data_json(cfg)
    out = layout.prepared_dir(cfg)
    if meta["signature"].get("data") != data_settings(cfg):
        raise DataError(f"{out}: built with other data settings; rerun `make data` with this config")
    now = input_signature(cfg)
    if meta["signature"] != now:
        why = changed_inputs(meta["signature"], now)
        raise DataError(f"{out}: its inputs changed since it was built ({why}); rerun `make data` with this config")
    for name, key in ((layout.TABLE, "table_digest"), (layout.TEST_TABLE, "test_digest")):
        path = out / name
        if not path.is_file() or file_digest(path) != meta[key]:
            raise DataError(f"{path}: differs from what data.json records (damaged?); rerun `make data`")
    return meta


def current_fingerprint(cfg: Config, meta: dict | None = None) -> str:
    """The fingerprint a fold of this config must carry, for the prepared data `meta` describes (by default
    current_meta's, checked against the inputs), the tiny model's tokenizer and the stage-1 model's own."""
    return fingerprint.fold_fingerprint(current_made_from(cfg, meta))


def current_tfidf_fingerprint(cfg: Config, meta: dict | None = None) -> str:
    """The fingerprint a TF-IDF baseline's fold of this config must carry, for the prepared data `meta` describes
    (by default current_meta's): its tables, its test, its seed and its languages (train.langs)."""
    meta = current_meta(cfg) if meta is None else meta
    return fingerprint.tfidf_fingerprint(meta["table_digest"], meta["test_digest"], cfg.train.seed, cfg.train.langs)


def current_made_from(cfg: Config, meta: dict | None = None) -> dict:
    """What a fold of this config is made from (fingerprint.made_from): its fingerprint is this one's digest."""
    meta = current_meta(cfg) if meta is None else meta
    tokenizer = layout.prepared_dir(cfg) / layout.TOKENIZER
    model = fingerprint.model_identity(cfg, tokenizer, init_digest(cfg))
    relabel = meta["signature"].get("relabel") if cfg.data.relabel_from else None
    return fingerprint.made_from(cfg, meta["table_digest"], model, relabel)


def init_setting(cfg: Config) -> str:
    """The setting that names the model a fold starts from, as a refusal names it ('' when none does)."""
    if cfg.model.init_folds:
        return f"model.init_folds={cfg.model.init_folds}"
    return f"model.init_from={cfg.model.init_from}" if cfg.model.init_from else ""


def init_dir(cfg: Config, fold: int | None = None) -> Path | None:
    """The model fold `fold` starts from, checked complete and intact: the stage-1 fold `model.init_from` names
    (every fold's), or fold `fold` of the experiment `model.init_folds` names (init_folds_dirs); None without
    either. Where only the architecture matters (pooling, tokenizer, size: `fold` None) its first fold stands for
    every fold: one of some folds may lack fold 0."""
    if cfg.model.init_folds:
        dirs = init_folds_dirs(cfg)
        fold = min(dirs, default=0) if fold is None else fold
        if fold not in dirs:
            raise PipelineError(f"model.init_folds={cfg.model.init_folds}: {layout.fold_name(fold)} not trained")
        return dirs[fold]
    name = cfg.model.init_from
    if not name:
        return None
    if name == cfg.name:
        raise PipelineError(f"model.init_from={name}: an experiment cannot start from itself; name it differently")
    folder = layout.fold_dir(cfg, layout.STAGE1, name)
    # current for its own config and prepared data; a stage-1 model made elsewhere (an attached Kaggle kernel's
    # output) has no prepared data here, and is checked complete and intact only
    here = (layout.prepared_dir(cfg, name) / layout.DATA_JSON).exists() and (
        layout.experiment_dir(cfg, name) / layout.RUN_CONFIG
    ).exists()
    digest = experiment_digest(cfg, name, "model")[0] if here else None
    why = fold_status(folder, digest, needs=(layout.WEIGHTS,))
    if why:
        state = "is not complete" if why == "not complete" else f"is not usable ({why})"
        raise PipelineError(
            f"model.init_from={name}: {folder} {state}; make it first with `make stage1` (this run's CONFIG and ARGS)"
        )
    return folder


def same_folds(ours: dict, theirs: dict) -> bool:
    """Whether two data.json describe tables whose folds hold the same rows: their folds_digest (pseudo-labelled
    test rows apart), or, where either was written before it was recorded, their whole table's digest."""
    if "folds_digest" in ours and "folds_digest" in theirs:
        return ours["folds_digest"] == theirs["folds_digest"]
    return ours["table_digest"] == theirs["table_digest"]


def init_folds_dirs(cfg: Config) -> dict[int, Path]:
    """The complete folds of the experiment `model.init_folds` names, by fold number, each current for its own
    config and prepared data; refused in one line where it has other folds than this experiment (data.folds or the
    rows in them) or lacks one this experiment trains (train.folds; every fold by default): fold k of this
    experiment starts from fold k of that one, which never saw fold k's rows, only while both folds k are the same
    rows."""
    name, key = cfg.model.init_folds, init_setting(cfg)
    try:
        digest, k = experiment_digest(cfg, name, "model")
        theirs = read_data_json(experiment_as_prepared(cfg, name))
    except PipelineError as e:
        raise PipelineError(f"{key}: {e}") from None
    if k != cfg.data.folds:
        raise PipelineError(f"{key}: its data.folds={k}, this experiment's {cfg.data.folds}; fold k starts from fold "
                            "k only where both have the same folds")  # fmt: skip
    if not same_folds(current_meta(cfg), theirs):
        raise PipelineError(
            f"{key}: its prepared tables hold other rows or folds (other data settings or files); fold k would "
            "start from a model that saw fold k's rows: give both the same data"
        )
    use, left_out = select_folds(layout.experiment_dir(cfg, name), digest, k, needs=(layout.WEIGHTS,))
    # a fold this experiment trains (train.folds: all by default) needs its own; one it never trains need not exist
    left_out = of_folds(left_out, cfg.train.folds or range(k))
    if left_out:
        raise PipelineError(f"{key}: {describe(left_out)}; train those folds of {name} first (its CONFIG and ARGS)")
    return {layout.fold_index(d): d for d in use}


def init_digest(cfg: Config) -> str | None:
    """The fingerprint of what a fold starts from: the stage-1 model's own, or, with model.init_folds, one over
    every fold's own (each stage checks an experiment's folds against one fingerprint: a retrained fold of that
    experiment makes every fold of this one stale); None without either."""
    if cfg.model.init_folds:
        own = [read_done(d)["digest"] for _, d in sorted(init_folds_dirs(cfg).items())]
        return files.json_digest({"init_folds": own})
    folder = init_dir(cfg)
    return None if folder is None else read_done(folder)["digest"]


def read_done(folder: Path) -> dict | None:
    """A fold's done.json, or None when it is missing or not a record of a complete fold."""
    try:
        done = read_json(folder / layout.DONE)
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and isinstance(done.get("digest"), str) else None


def file_problem(folder: Path, name: str, record: dict | None, deep: bool = True) -> str:
    """Why `name` in a fold cannot be used as done.json (or test.json) vouches for it; '' when it can.

    Size always; the sha256 too where `deep` (the weights' digest is checked when they are loaded)."""
    path = folder / name
    if not path.is_file():
        return f"{name} is missing"
    if record is None:  # written before done.json recorded its files: present is all that can be said
        return ""
    if path.stat().st_size != record.get("bytes"):
        return f"{name} has {path.stat().st_size:,} bytes, done.json records {record.get('bytes')} (damaged?)"
    if deep and file_digest(path) != record.get("sha256"):
        return f"{name} differs from what done.json records (edited or damaged?)"
    return ""


def fold_records(folder: Path) -> dict:
    """What a trained fold's done.json vouches for: every file training left (weights, config, tokenizer,
    OOF, vocabulary map), by size and sha256. Test predictions come later and have their own record."""
    found = sorted(
        p for p in folder.iterdir() if p.is_file() and p.name not in layout.NOT_RECORDED and p.name[0] != "."
    )
    return {p.name: files.file_record(p) for p in found}


def fold_status(folder: Path, digest: str | None = None, needs: tuple[str, ...] = ()) -> str:
    """'' when the fold at `folder` counts: its done.json is readable, is this folder's (a copied folder is
    not), carries `digest` (when given), and the files in `needs` are there as done.json recorded them
    (the weights by size; their digest is checked where they are loaded). Else why it does not count."""
    done = read_done(folder)
    if done is None:
        return "not complete" if not (folder / layout.DONE).exists() else "done.json is unreadable (retrain it)"
    if done.get("fold", layout.fold_index(folder)) != layout.fold_index(folder):
        return f"its done.json is fold {done.get('fold')}'s (a copied folder?); retrain it"
    # a fold trained by several processes carries the world size in its fingerprint (done.json says how many)
    # and a precision measured at its start (train.precision=auto on a CPU with bf16), which its done.json says
    if digest is not None and done["digest"] != fingerprint.as_trained(digest, done):
        if done.get("model") == fingerprint.TFIDF["model"]:
            return f"{OTHER_INPUTS} (make it again with `make baseline`)"
        if done.get("head") != fingerprint.HEAD:  # a trained fold records the head its weights belong to
            return f"made by an older version, whose model had another head{RETRAIN}"
        return OTHER_INPUTS + RETRAIN
    recorded = done.get("files") or {}
    if layout.ALL in needs:  # every recorded file, the weights first
        needs = tuple(
            dict.fromkeys([n for n in needs if n != layout.ALL] + sorted(recorded, key=lambda n: n != layout.WEIGHTS))
        )
    if layout.TESTED in needs:
        weightless = (
            not (folder / layout.WEIGHTS).is_file() and layout.WEIGHTS in recorded
        )  # else: the weights, which are missing
        needs = tuple(n for n in needs if n != layout.TESTED and not (weightless and n == layout.WEIGHTS))
        needs = (layout.TEST_PREDS if weightless else layout.WEIGHTS, *needs)
    for name in needs:
        if name in layout.CACHE_KEYS and name not in recorded:  # a trained fold's predictions: a cache of predict
            why = test_preds_problem(folder, done, name=name)
        else:
            why = file_problem(folder, name, recorded.get(name), deep=name != layout.WEIGHTS)
        if why:
            return why
    return ""


def test_preds_problem(folder: Path, done: dict, test_digest: str | None = None, name: str = layout.TEST_PREDS) -> str:
    """Why a trained fold's cached test predictions (or, `name`, its predictions of the training-only rows) cannot
    be used ('' when they can): their stamp (test.json, training.json) must record them and the weights they were
    made with (and, given, the test table)."""
    what, make = {layout.TEST_PREDS: ("test", "`make predict`")}.get(
        name, ("training-row", '`make predict ARGS="predict.training_rows=true"`')
    )
    try:
        stamp = read_json(folder / layout.CACHE_KEYS[name])
    except (OSError, ValueError):
        return f"no {what} predictions (run {make})"
    if not isinstance(stamp, dict) or not isinstance(stamp.get("key"), dict):
        return f"no {what} predictions (run {make})"
    weights = (done.get("files") or {}).get(layout.WEIGHTS, {}).get("sha256")
    if weights is not None and stamp["key"].get("weights") != weights:
        return f"{what} predictions of other weights (run {make})"
    if test_digest is not None and stamp["key"].get("test") != test_digest:
        return "test predictions of another test table (run `make predict`)"
    return file_problem(folder, name, stamp.get("file"))


def is_complete(folder: Path, digest: str, needs: tuple[str, ...] = (layout.WEIGHTS,)) -> bool:
    return not fold_status(folder, digest, needs)


def select_folds(exp: Path, digest: str, k: int, needs: tuple[str, ...] = ()) -> tuple[list[Path], dict[str, str]]:
    """(folds that count, in fold order; {fold name: why it is left out}), missing folds included."""
    # fold-1, a stage-1 model, has no OOF and no test predictions: it is not one of the k folds
    found = {fold: p for fold, p in layout.fold_dirs(exp).items() if fold >= 0}
    use, left_out = [], {}
    for fold in sorted(set(found) | set(range(k))):
        if fold not in found:
            why = "not trained"
        elif fold >= k:
            why = f"not a fold of data.folds={k}"
        else:
            why = fold_status(found[fold], digest, needs)
        if why:
            left_out[layout.fold_name(fold)] = why
        else:
            use.append(found[fold])
    return use, left_out


def of_folds(left_out: dict[str, str], folds) -> dict[str, str]:
    """select_folds' {fold: why not} kept to `folds` (numbers): what a run of those folds alone needs."""
    wanted = {layout.fold_name(f) for f in folds}
    return {f: why for f, why in left_out.items() if f in wanted}


def describe(left_out: dict[str, str]) -> str:
    """One line per reason: 'fold3, fold4: not a fold of data.folds=3'."""
    by_reason: dict[str, list[str]] = {}
    for fold, why in left_out.items():
        by_reason.setdefault(why, []).append(fold)
    return "; ".join(f"{', '.join(folds)}: {why}" for why, folds in by_reason.items())


def trained_settings_differ(cfg: Config, name: str | None = None) -> str:
    """How the weight-changing settings differ from those models/<name>/pipeline.yaml was trained with."""
    saved = layout.experiment_dir(cfg, name) / layout.RUN_CONFIG
    try:
        return fingerprint.settings_differ(cfg, config_mod.load_file(saved)) if saved.exists() else ""
    except ConfigError:
        return ""


# the stages that ensemble or export every complete fold: train.folds does not narrow them, and they say so
NOT_NARROWED = ("predict", "export")


def usable_folds(cfg: Config, digest: str, stage: str) -> list[Path]:
    """The complete folds made from the current inputs and settings, with the files `stage` reads of a fold (its
    record's `reads`, pipeline/stages.py); says which others it leaves out."""
    exp = layout.experiment_dir(cfg)
    needs = tuple(layout.FOLD_NEEDS[r] for r in stages.of(stage).reads)
    dirs, left_out = select_folds(exp, digest, cfg.data.folds, needs)
    why = describe(left_out)
    if not dirs:
        hint = f" ({why})" if left_out else ""
        differ = trained_settings_differ(cfg)
        if differ:  # most often: this stage was run without the ARGS `make train` had
            hint += f"; the settings differ from {exp}/{layout.RUN_CONFIG} in {differ}: give the same CONFIG and ARGS"
        raise PipelineError(f"no trained folds for these inputs and settings in {exp}{hint}; run `make train` first")
    if left_out:
        print(f"{stage}: using {', '.join(d.name for d in dirs)}; left out {why}", file=sys.stderr)
    if cfg.train.folds and stage in NOT_NARROWED:  # the same ARGS as `make train` would otherwise seem to narrow it
        chosen = ",".join(map(str, cfg.train.folds))
        print(f"{stage}: uses every complete fold ({', '.join(d.name for d in dirs)}); train.folds=[{chosen}] "
              "chooses only the folds `make train` trains", file=sys.stderr)  # fmt: skip
    return dirs


def fold_digests(dirs: list[Path]) -> list[str]:
    return [(read_done(d) or {}).get("digest", "") for d in dirs]


class NewerVersion(PipelineError):
    """An experiment made by a newer version of the pipeline: its config holds settings this version does not
    know, so what its folds are made from cannot be told here (they are not stale: this version is old)."""


def experiment_config(cfg: Config, name: str) -> Config:
    """The resolved config models/<name>/ was made with (its pipeline.yaml), or one line saying why not."""
    path = layout.experiment_dir(cfg, name) / layout.RUN_CONFIG
    if not path.is_file():
        raise PipelineError(
            f"{path.parent}: no {layout.RUN_CONFIG}; it was not made by `make train` or `make baseline`"
        )
    try:
        return config_mod.load_file(path)
    except ConfigError as e:
        newer = schema.unknown_keys(config_mod.read_yaml(path))
        if newer:
            raise NewerVersion(
                f"made by a newer version of the pipeline ({path} sets {', '.join(newer)}, which this version does "
                "not know); read it with that version, or update this checkout"
            ) from None
        raise PipelineError(f"{path}: not a config this version reads ({e}); make the experiment again") from None


def experiment_as_prepared(cfg: Config, name: str) -> Config:
    """models/<name>/'s config, read where this run reads its inputs, with the data settings its prepared
    tables were built with here (a Kaggle notebook's config names Kaggle's folders; `make data` here did not)."""
    saved = experiment_config(cfg, name).to_dict()
    saved.update(input_dir=cfg.input_dir, models_dir=cfg.models_dir, submissions_dir=cfg.submissions_dir)
    meta = read_data_json(config_mod.from_dict(saved))
    # the settings its tables were built with, from the raw folder `make data` read here
    saved["data"].update(meta["signature"].get("data", {}), source="dir", dir=meta.get("raw", ""))
    return config_mod.from_dict(saved)


def experiment_digest(cfg: Config, name: str, kind: str) -> tuple[str, int]:
    """(the fingerprint the folds of models/<name>/ must carry now, its data.folds)."""
    try:
        saved = experiment_as_prepared(cfg, name)
        meta = current_meta(saved)
    except NewerVersion as e:  # not stale: this version cannot tell
        raise NewerVersion(f"{name}: {e}") from None
    except (DataError, PipelineError) as e:  # its own inputs are gone or changed: it cannot count now
        raise PipelineError(f"{name}: {e}") from None
    if kind == fingerprint.TFIDF["model"]:
        digest = current_tfidf_fingerprint(saved, meta)
    else:
        digest = current_fingerprint(saved, meta)
    return digest, saved.data.folds
