"""A recipe's steps: read from its YAML file and checked, a train step as one step a fold, and whether each is done,
asked of its own files (pipeline.validity), never of a record of the chain's (pipeline/recipe.py runs them)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline import config as config_mod
from pipeline import experiments, fingerprint, layout, validity
from pipeline.errors import ConfigError, PipelineError
from pipeline.files import read_json
from pipeline.schema import Config
from pipeline.scoring import routing

STEP_STAGES = ("data", "stage1", "train", "cv", "predict", "baseline", "blend")  # the stages a step may run
STEP_KEYS = {"id", "stage", "config", "args", "needs", "members", "route", "train", "folds", "minutes"}
FOLD_STAGES = ("train", "cv", "predict")  # the stages a step's `folds:` may narrow
# a step's id names its log file (input/recipes/<recipe>/<id>.log): a plain name, never a path
RECIPE_SHAPE = "a recipe is a mapping of keys (config: ..., steps: [...])"
PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Step:
    id: str  # unique in the recipe; a train step's folds are <id>.fold<k>
    stage: str  # one of STAGES
    config: str  # a config name of pipeline/configs/ (the recipe's own by default)
    args: tuple[str, ...] = ()  # key=value overrides, as ARGS gives them
    needs: tuple[str, ...] = ()  # the ids of the steps that must be done first
    members: tuple[str, ...] = ()  # a blend's members (BLEND); a route's one, its fallback
    route: tuple[str, ...] = ()  # a route's `lang:experiment` entries (blend.route), from its `route:`
    train: bool = False  # stage1: train the stage-1 model (`make stage1`'s second command), else its data
    fold: int | None = None  # a train step's one fold (train.folds=[fold])
    folds: tuple[int, ...] = ()  # the folds a train, cv or predict step is of (`folds: [0]`); () every fold
    minutes: float = 0.0  # the recipe's figure: one-core minutes (a train step's: all its folds together)
    group: str = ""  # a fold's train step: the id its folds stand for together
    extra: tuple[str, ...] = field(default=(), compare=False)  # the run's own ARGS, applied after the step's

    @property
    def overrides(self) -> list[str]:
        fold = [f"train.folds=[{self.fold}]"] if self.fold is not None else []
        route = [f"blend.route=[{','.join(self.route)}]"] if self.route else []
        return [*self.args, *route, *fold, *self.extra]


def _flat(items) -> list[str]:
    """A step's args: strings, or lists of them (a YAML anchor of shared overrides, `*s2`), flattened."""
    out: list[str] = []
    for item in items if isinstance(items, list) else [items]:
        out.extend(_flat(item) if isinstance(item, list) else [str(item)])
    return out


def parse_step(raw: dict, default_config: str, extra: tuple[str, ...]) -> Step:
    """One step of the recipe's list, checked: known keys, a known stage, a plain id, minutes, a blend's members."""
    if not isinstance(raw, dict) or not raw.get("id") or raw.get("stage") not in STEP_STAGES:
        raise ConfigError(f"recipe step {raw!r}: needs an id and a stage of {', '.join(STEP_STAGES)}")
    unknown = sorted(set(raw) - STEP_KEYS)
    if unknown:
        known = ", ".join(sorted(STEP_KEYS))
        raise ConfigError(f"recipe step {raw['id']}: unknown key {unknown[0]!r} (known: {known})")
    sid = str(raw["id"])
    if not PLAIN_ID.fullmatch(sid):
        raise ConfigError(f"recipe step id {sid!r}: a plain name of letters, digits, '.', '_' and '-' (it names a log)")
    step = Step(
        id=sid, stage=raw["stage"], config=str(raw.get("config", default_config)),
        args=tuple(_flat(raw.get("args", []))), needs=tuple(_flat(raw.get("needs", []))),
        members=tuple(_flat(raw.get("members", []))), route=step_route(raw), train=bool(raw.get("train", False)),
        folds=step_folds(raw), minutes=step_minutes(raw), extra=extra,
    )  # fmt: skip
    check_step(step)
    return step


def step_minutes(raw: dict) -> float:
    """A step's `minutes:`, checked: a number of minutes, 0 or more (the plan adds and schedules them)."""
    value = raw.get("minutes", 0)
    try:
        minutes = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        minutes = math.nan
    if not math.isfinite(minutes) or minutes < 0:
        raise ConfigError(f"recipe step {raw['id']}: minutes={value!r}: a number of minutes, 0 or more, e.g. 12.5")
    return minutes


def step_route(raw: dict) -> tuple[str, ...]:
    """A blend step's `route:`, a mapping of languages to experiments (`{es: rs-es, it: rs-it}`) or blend.route's
    own entries (`[es:rs-es]`), as those entries; the config's checks of blend.route apply to them."""
    route = raw.get("route")
    if route is None:
        return ()
    if raw["stage"] != "blend":
        raise ConfigError(f"recipe step {raw['id']}: route is for a blend step (its one member, the fallback)")
    entries = [f"{k}:{v}" for k, v in route.items()] if isinstance(route, dict) else route
    if not entries or not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigError(f"recipe step {raw['id']}: route={route!r}: languages to experiments, e.g. {{es: rs-es}}")
    return tuple(entries)


def check_step(step: Step) -> None:
    """What a step's stage needs of it: a blend its two or more members (a route its one, the fallback), a stage-1
    model its stage; a step of folds its folds from `folds:`, which a train.folds in its args would undo (every
    fold's process training one fold; the run's ARGS are checked in read_recipe)."""
    if any(str(a).split("=", 1)[0].strip() == "blend.route" for a in step.args):  # route: owns it, so done_why reads it
        raise ConfigError(f"recipe step {step.id}: blend.route in its args: a route step names it with "
                          "`route: {es: rs-es}` and its fallback under members:")  # fmt: skip
    if step.route and len(step.members) != 1:
        raise ConfigError(f"recipe step {step.id}: a route step names one member, the fallback of the languages it "
                          f"does not route (it has {list(step.members)})")  # fmt: skip
    if step.stage == "blend" and not step.route and len(set(step.members)) < max(len(step.members), 2):
        raise ConfigError(f"recipe step {step.id}: a blend step names two or more distinct experiments under "
                          f"members: (it has {list(step.members)})")  # fmt: skip
    if step.members and step.stage != "blend":
        raise ConfigError(f"recipe step {step.id}: members is for a blend step")
    if step.train and step.stage != "stage1":
        raise ConfigError(f"recipe step {step.id}: train: true is for a stage1 step (it trains the stage-1 model)")
    if step.stage in FOLD_STAGES and sets_folds(step.args):
        raise ConfigError(f"recipe step {step.id}: train.folds in its args: a recipe's step names its folds with "
                          "`folds: [0, 1]`, one process a fold")  # fmt: skip


def sets_folds(args) -> bool:
    """Whether key=value overrides set train.folds."""
    return any(str(a).split("=", 1)[0].strip() == "train.folds" for a in args)


def step_folds(raw: dict) -> tuple[int, ...]:
    """A step's `folds:` (a probe on fold 0 before all five), checked: whole numbers, on a step that reads folds."""
    folds = raw.get("folds")
    if folds is None or folds == []:
        return ()
    if raw["stage"] not in FOLD_STAGES:
        raise ConfigError(f"recipe step {raw['id']}: folds is for a {', '.join(FOLD_STAGES)} step")
    whole = isinstance(folds, list) and all(isinstance(f, int) and not isinstance(f, bool) and f >= 0 for f in folds)
    if not whole or len(set(folds)) < len(folds):
        raise ConfigError(f"recipe step {raw['id']}: folds={folds!r}: a list of distinct fold numbers, e.g. [0]")
    return tuple(sorted(folds))


def fold_numbers(step: Step, k: int) -> list[int]:
    """The folds a step is of: its `folds:`, else every fold of data.folds=k."""
    bad = [f for f in step.folds if f >= k]
    if bad:
        raise ConfigError(f"recipe step {step.id}: fold {bad[0]} does not exist (data.folds={k})")
    return list(step.folds) or list(range(k))


def expand(step: Step) -> list[Step]:
    """A train step as one step a fold (each its own process), or as it is; other steps as they are."""
    if step.stage != "train":
        return [step]
    folds = fold_numbers(step, step_config(step).data.folds)
    return [
        replace(step, id=f"{step.id}.{layout.fold_name(f)}", fold=f, minutes=step.minutes / len(folds), group=step.id)
        for f in folds
    ]


def read_recipe(path: Path, extra: tuple[str, ...] = ()) -> list[Step]:
    """The recipe's steps, train steps one a fold, in the file's order; each need a step above it, each id and
    each experiment folder a step writes its own."""
    raw = config_mod.read_yaml(path, RECIPE_SHAPE)
    if not isinstance(raw.get("steps"), list) or not raw["steps"]:
        raise ConfigError(f"{path}: a recipe lists its steps under `steps:`")
    unknown = sorted(set(raw) - {"config", "shared", "steps", "jobs"})
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (a recipe has config, shared, steps, jobs)")
    if sets_folds(extra):  # applied after each fold's own train.folds=[k]: every fold would train one fold
        raise ConfigError("train.folds in a recipe's ARGS: each train step names its folds with `folds: [0, 1]` "
                          "in the recipe, one process a fold")  # fmt: skip
    steps: list[Step] = []
    for item in raw["steps"]:
        step = parse_step(item, str(raw.get("config", "sample")), extra)
        known = {s.id for s in steps} | {s.group for s in steps}
        missing = [n for n in step.needs if n not in known]
        if missing:  # so the chain is in an order it can run in, with no cycle
            raise ConfigError(f"{path}: step {step.id} needs {missing[0]}, which no step above it is")
        for new in [step, *expand(step)]:  # a fold's id too: `t.fold0` above a train step `t` would share its log
            if new.id in known:
                raise ConfigError(f"{path}: step {new.id} is named twice")
        steps.extend(expand(step))
    check_writers(path, steps)
    check_readers(path, steps)
    check_routes(path, steps)
    return steps


def check_routes(path: Path, steps: list[Step]) -> None:
    """A route step's experiments are made by steps above it: a name no step makes is a typo, or a specialist
    the recipe forgot, found when the recipe is read rather than after hours of the steps before it."""
    for i, step in enumerate(steps):
        if not step.route:
            continue
        made = {key[0] for key in map(writes, steps[:i]) if key}
        for lang, name in routing.parse(step_config(step).blend.route).items():
            if name not in made:
                raise ConfigError(f"{path}: step {step.id} routes {lang} to {name}, which no step above it makes "
                                  f"(a train step with name={name}, or a baseline's)")  # fmt: skip


def check_readers(path: Path, steps: list[Step]) -> None:
    """A cv or predict step reads the folds a train step of its experiment makes: with other weight-changing
    settings (a train.lr= in the train step's args alone) it would find none and fail after the training."""
    trained: dict[str, tuple[str, Config]] = {}
    for step in (s for s in steps if s.stage in FOLD_STAGES):
        cfg = step_config(step)
        if step.stage == "train":
            trained.setdefault(cfg.name, (step.group, cfg))
        elif cfg.name in trained:
            group, made = trained[cfg.name]
            differ = fingerprint.settings_differ(cfg, made)
            if differ:
                raise ConfigError(f"{path}: step {step.id} reads the folds step {group} trains, with other settings: "
                                  f"{differ.replace('there', f'in {group}')}; give both the same args")  # fmt: skip


def writes(step: Step) -> tuple[str, str] | None:
    """(the experiment folder a step writes, its fold or '*' for the whole folder), for the steps that make one:
    a train fold, a stage-1 model, a baseline, a blend; None for the others (they read or report)."""
    if step.stage == "train":
        return step_config(step).name, layout.fold_name(step.fold)
    if step.stage == "stage1" and step.train:
        return step_config(step).name, layout.fold_name(layout.STAGE1)
    if step.stage == "baseline":
        return layout.baseline_name(step_config(step)), "*"
    if step.stage == "blend":
        cfg = step_config(step)
        name = blend_name(cfg, step)
        if name in routing.read_by(step.members, cfg.blend.route):  # it would replace its own member's folder
            raise ConfigError(f"recipe step {step.id}: blend.name={name!r} is one of its members; choose another")
        return name, "*"
    return None


def check_writers(path: Path, steps: list[Step]) -> None:
    """No two steps make one folder: the second would replace the first, and both read as done."""
    made: dict[tuple[str, str], str] = {}
    for step in steps:
        key = writes(step)
        if key is None:
            continue
        exp, part = key
        clash = [sid for (e, p), sid in made.items() if e == exp and (p == part or "*" in (p, part))]
        if clash:
            where = f"models/{exp}/{'' if part == '*' else part}"
            raise ConfigError(f"{path}: steps {clash[0]} and {step.id} both write {where}: the second would replace "
                              "the first; give one another name (name=... in a train step's args, blend.name=... in "
                              "a blend's)")  # fmt: skip
        made[key] = step.id


def needs_of(step: Step, steps: list[Step]) -> list[str]:
    """The step ids `step` waits for: a train step's id stands for all its folds."""
    return [s.id for n in step.needs for s in steps if n in (s.id, s.group)]


# ---------------------------------------------------------------- is a step done: asked of its own files


def step_config(step: Step) -> Config:
    cfg = config_mod.load(step.config, step.overrides, device=False)
    if step.stage == "stage1":
        s1 = config_mod.stage1_config(cfg, device=False)
        if s1 is None:
            raise ConfigError(f"recipe step {step.id}: stage1 needs model.init_from in its args")
        return s1
    return cfg


def newer(path: Path, than: list[Path]) -> bool:
    """`path` exists and was written after every one of `than` (a report made from these very files)."""
    return path.is_file() and all(path.stat().st_mtime >= p.stat().st_mtime for p in than if p.exists())


def folds_problem(cfg: Config, name: str, needs: tuple[str, ...]) -> str:
    """Why not every fold of models/<name>/ counts ('' when they all do), as the stages that read them ask it."""
    use, left_out = experiments.experiment_check(cfg, name, needs)
    return validity.describe(left_out) if left_out else ""


def done_why(step: Step) -> str:
    """'' when the step's stage would find nothing to do (its files count now), else why not, in a few words."""
    try:
        cfg = step_config(step)
        if step.stage in ("data", "stage1") and not step.train:
            validity.current_meta(cfg)  # the prepared tables, made from the inputs as they are now
            return ""
        if step.stage in ("train", "stage1"):
            return validity.fold_status(
                layout.fold_dir(cfg, step.fold if step.stage == "train" else layout.STAGE1),
                validity.current_fingerprint(cfg), needs=(layout.WEIGHTS,))  # fmt: skip
        return report_why(step, cfg)
    except ConfigError:  # a step that cannot run at all: said before any step starts
        raise
    except PipelineError as e:  # its inputs are not there yet, or changed: it has to run
        return str(e).split(": ", 1)[-1][:100]


def report_why(step: Step, cfg: Config) -> str:
    """done_why of the steps that read trained folds: cv, predict, baseline, blend."""
    exp = layout.experiment_dir(cfg)
    if step.stage in ("cv", "predict"):
        digest = validity.current_fingerprint(cfg)
        needs = (layout.OOF,) if step.stage == "cv" else (layout.OOF, layout.TEST_PREDS)
        use, left_out = validity.select_folds(exp, digest, cfg.data.folds, needs)
        folds = fold_numbers(step, cfg.data.folds)  # a step of some folds waits for those alone
        names = {layout.fold_name(n) for n in folds}
        left_out = {f: why for f, why in left_out.items() if f in names}
        if left_out:
            return validity.describe(left_out)
        if step.stage == "predict" and cfg.train.langs:  # a specialist's: its folds' test.csv, no submission
            return ""
        if step.stage == "predict":
            out, made = layout.submission_path(cfg), [d / layout.TEST_KEY for d in use]
        else:  # written after every fold and of every fold: a fold's train may report before another's ends
            out, made = exp / layout.CV_JSON, [d / layout.DONE for d in use]
            if newer(out, made) and not set(folds) <= set(reported_folds(out)):
                return f"{out.name} not made from every fold"
        return "" if newer(out, made) else f"{out.name} not made from these folds yet"
    name = layout.baseline_name(cfg) if step.stage == "baseline" else blend_name(cfg, step)
    if not layout.experiment_dir(cfg, name).is_dir():
        return "not made"
    if step.stage == "baseline":  # by the step's own settings: the folder's pipeline.yaml is the last run's
        digest = validity.current_tfidf_fingerprint(cfg)
        needs = (layout.OOF, layout.TEST_PREDS)
        why = validity.describe(
            validity.select_folds(layout.experiment_dir(cfg, name), digest, cfg.data.folds, needs)[1]
        )
    else:
        why = folds_problem(cfg, name, (layout.OOF, layout.TEST_PREDS))
    if not why and step.stage == "blend":
        why = blend_differs(layout.experiment_dir(cfg, name), step.members, cfg.blend.step, route_of(cfg, step))
    if why or step.stage == "baseline" and cfg.train.langs:  # a specialist makes no submission of its own
        return why
    return "" if layout.submission_path(cfg, name).is_file() else "no submission"


def route_of(cfg: Config, step: Step) -> dict | None:
    """What a route step's folds record as their route (routing.record); None for a blend."""
    if not step.route:
        return None
    return routing.record(routing.parse(cfg.blend.route), step.members[0], cfg.blend.route_scale)


def blend_differs(exp: Path, members: tuple[str, ...], step: float, route: dict | None = None) -> str:
    """Why a blend's folds are not the step's ('' when every fold is): each fold records its members and the
    weight search's grid step (blend.step); a route's, its route (`route`: route_of's)."""
    for folder in layout.done_dirs(exp).values():
        done = validity.read_done(folder) or {}
        if route is not None or "route" in done:  # a route has no weights: its languages and fallback say it all
            if done.get("route") != route:
                return f"routed {done.get('route') or 'not at all'}, not as the step routes {route or 'nothing'}"
            continue
        made = done.get("members") or []
        if sorted(made) != sorted(members):
            return f"blended from {' '.join(made) or 'no members'}, not the step's {' '.join(members)}"
        if done.get("step") != step:
            return f"blended with blend.step={done.get('step')}, not the step's {step}"
    return ""


def reported_folds(cv_json: Path) -> list[int]:
    """The folds a cv.json reports."""
    try:
        return sorted(int(k) for k in read_json(cv_json).get("folds", {}))
    except (OSError, ValueError, AttributeError):
        return []


def blend_name(cfg: Config, step: Step) -> str:
    return layout.blend_name(cfg, routing.read_by(step.members, cfg.blend.route))  # as pipeline.blend names it


def experiment_of(step: Step) -> str:
    """The experiment a step writes: a blend's name, else its config's."""
    cfg = step_config(step)
    return blend_name(cfg, step) if step.stage == "blend" else cfg.name
