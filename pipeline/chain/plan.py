"""A recipe's plan and its ETA: each step's minutes (a fold's by its experiment's folds done, else the recipe's
figure at this machine's pace), the longest chain after each step (the order ready steps start in) and the wall
minutes of the steps to do on the cores, as `make recipe` prints them first."""

from __future__ import annotations

from dataclasses import replace

from pipeline import layout, validity
from pipeline.chain.steps import Step, needs_of, step_config


def trains(step: Step) -> bool:
    """A step that trains a model: a fold of a train step, or a stage-1 model."""
    return step.fold is not None or (step.stage == "stage1" and step.train)


def fold_minutes(step: Step) -> float | None:
    """The minutes the done.json of a step that trains records (what training took), None without them."""
    fold = step.fold if step.fold is not None else layout.STAGE1
    record = validity.read_done(layout.fold_dir(step_config(step), fold)) or {}
    return float(record["minutes"]) if isinstance(record.get("minutes"), (int, float)) else None


def finished_minutes(step: Step, wall: float) -> float:
    """What a finished step took: a model's training by its done.json (a fold resumed from an earlier run took
    more than this run's `wall` minutes), else `wall`."""
    trained = fold_minutes(step) if trains(step) else None
    return wall if trained is None else trained


def sibling_minutes(step: Step, steps: list[Step], done: dict[str, str]) -> list[float]:
    """For a fold, the minutes of its experiment's folds already trained (their done.json); [] for other steps."""
    if step.fold is None:
        return []
    took = [fold_minutes(s) for s in steps if s.group == step.group and not done.get(s.id, "x")]
    return [t for t in took if t is not None]


def measured_minutes(step: Step, steps: list[Step], done: dict[str, str]) -> float:
    """A step's one-core minutes: for a fold, the mean of its experiment's folds already trained (done.json
    records their minutes), else the recipe's figure."""
    took = sibling_minutes(step, steps, done)
    return sum(took) / len(took) if took else step.minutes


def recorded(steps: list[Step], done: dict[str, str]) -> list[tuple[float, float]]:
    """(minutes, the recipe's figure) of every model trained already (a fold, a stage-1 model), by its done.json:
    this machine's pace."""
    pairs = [(fold_minutes(s), s.minutes) for s in steps if trains(s) and not done[s.id]]
    return [(t, f) for t, f in pairs if t is not None]


def step_minutes(todo: list[Step], steps: list[Step], done: dict[str, str], took: list) -> dict[str, float]:
    """Each step's minutes for the ETA: a fold's experiment's own folds' where some are done, else the recipe's
    figure at this machine's pace (`took`: what finished steps took against their figures)."""
    rate, out = pace(took), {}
    for s in todo:
        mine = sibling_minutes(s, steps, done)  # this machine's own minutes: not scaled again
        out[s.id] = sum(mine) / len(mine) if mine else s.minutes * rate
    return out


PACE_FROM = 2.0  # recipe minutes a finished step must have had to tell this machine's pace (data steps: noise)


def pace(finished: list[tuple[float, float]]) -> float:
    """This machine's minutes per minute of the recipe's figures: the sum of what the finished steps took over the
    sum of their figures (`finished`: (took, figure) of each step whose figure was at least PACE_FROM); 1 before
    one has finished. The figures were measured on one CPU: another kind (no AMX, say) runs them slower."""
    took = [(t, f) for t, f in finished if f >= PACE_FROM]
    return sum(t for t, _ in took) / sum(f for _, f in took) if took else 1.0


def longest_after(steps: list[Step]) -> dict[str, float]:
    """Each step's longest chain of the recipe's minutes to the end (itself and the dependents that wait on it),
    the order ready steps start in, longest first: a pseudo-labelled student's five folds wait on a 0.4-minute
    blend, which in file order would start only after every other fold and leave one core idle at the end. By
    the figures, fixed for a run, so that the chain and its ETA start steps in one order."""
    after: dict[str, list[str]] = {s.id: [] for s in steps}
    for s in steps:
        for n in needs_of(s, steps):
            after[n].append(s.id)
    minutes, longest = {s.id: s.minutes for s in steps}, {}

    def path(sid: str) -> float:
        if sid not in longest:
            longest[sid] = minutes[sid] + max((path(d) for d in after[sid]), default=0.0)
        return longest[sid]

    for s in steps:
        path(s.id)
    return longest


def wall_minutes(todo: list[Step], steps: list[Step], minutes: dict[str, float], jobs: int) -> float:
    """The chain's wall minutes with `jobs` steps at a time, each ready one started as a core frees (the longest
    chain first, as the recipe starts them)."""
    left, finish, running, now = list(todo), {}, [], 0.0
    ids, longest = {s.id for s in todo}, longest_after(steps)
    while left or running:
        ready = sorted((s for s in left if all(n not in ids or n in finish and finish[n] <= now
                                               for n in needs_of(s, steps))),
                       key=lambda s: -longest[s.id])  # fmt: skip
        while ready and len(running) < jobs:
            s = ready.pop(0)
            left.remove(s)
            running.append((now + minutes[s.id], s.id))
        if not running:
            break
        running.sort()
        now, sid = running.pop(0)
        finish[sid] = now
    return now


def waiting_on(step: Step, steps: list[Step], done: dict[str, str]) -> list[str]:
    """The needs of `step`, as the recipe names them, that are not done yet (a train step: any of its folds)."""
    return [n for n in step.needs if any(done[i] for i in needs_of(replace(step, needs=(n,)), steps))]


def pending(steps: list[Step], own: dict[str, str]) -> dict[str, str]:
    """Each step's state for the run: '' (done) where its own files count and no step it needs is to do, else
    why not. A step after one to do waits, to be asked again once that one has run: a blend whose members are
    retrained reads done by its files until then (the members' old folds still count)."""
    out: dict[str, str] = {}
    for s in steps:  # in file order: every need is above its step
        after = waiting_on(s, steps, out)
        out[s.id] = own[s.id] or (f"after {', '.join(after)}" if after else "")
    return out


def state_of(step: Step, steps: list[Step], done: dict[str, str]) -> str:
    """'done', 'after <the needs not done yet>', or 'to do: <why>' (the first clause of what the stage's files say)."""
    if not done[step.id]:
        return "done"
    after = waiting_on(step, steps, done)
    return f"after {', '.join(after)}" if after else f"to do: {done[step.id].split(';')[0]}"


def plan_text(name: str, steps: list[Step], done: dict[str, str], minutes: dict[str, float], jobs: int,
              rate: float = 1.0) -> str:  # fmt: skip
    """The plan as printed first: every step, its stage, what it waits for, done or why not, its minutes
    (`rate`: the pace they were scaled by)."""
    todo = [s for s in steps if done[s.id]]
    lines = [f"recipe {name}: {len(steps)} steps, {len(steps) - len(todo)} done, {jobs} at a time "
             "(one torch thread each)"]  # fmt: skip
    width = max(len(s.id) for s in steps)
    for s in steps:
        lines.append(f"  {s.id:<{width}}  {s.stage:<8}  {minutes[s.id]:6.1f} min  {state_of(s, steps, done)}")
    one_core = sum(minutes[s.id] for s in todo)
    wall = wall_minutes(todo, steps, minutes, jobs)
    at = f"; the recipe's minutes x {rate:.2f}, this machine's pace in the models trained" if rate != 1.0 else ""
    lines.append(f"ETA: {wall:.0f} min on {jobs} core(s) for the {len(todo)} steps to do "
                 f"({one_core:.0f} min on one core{at})")  # fmt: skip
    return "\n".join(lines)
