"""`make recipe`: a chain of stages read as data, its plan, and the chain run, stopped and continued on the sample."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import config, layout, recipe
from pipeline.chain import plan as chain_plan
from pipeline.chain import steps as chain_steps
from pipeline.errors import ConfigError
from pipeline.files import write_json
from tests.helpers import digests
from tests.helpers.tinyrun import TINY, overrides

ROOT = Path(__file__).resolve().parents[1]


def write_recipe(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "chain.yaml"
    path.write_text(body)
    return path


def test_a_train_step_is_one_step_a_fold_and_its_id_stands_for_them_all(tmp_path: Path) -> None:
    path = write_recipe(
        tmp_path,
        """
config: sample
steps:
  - {id: d, stage: data, minutes: 1}
  - {id: t, stage: train, needs: [d], args: [data.folds=3], minutes: 9}
  - {id: c, stage: cv, needs: [t], args: [data.folds=3]}
""",
    )
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    assert [s.id for s in steps] == ["d", "t.fold0", "t.fold1", "t.fold2", "c"]
    assert [s.minutes for s in steps[1:4]] == [3, 3, 3]  # the train step's minutes shared among its folds
    assert chain_steps.needs_of(steps[-1], steps) == ["t.fold0", "t.fold1", "t.fold2"]
    fold1 = recipe.command(steps[2])
    assert fold1[2:6] == ["pipeline", "train", "--config", "sample"]
    words = config.split_args(fold1[-1])  # as the stage reads its --args
    assert "train.folds=[1]" in words and f"models_dir={tmp_path / 'models'}" in words


def test_a_step_of_some_folds_trains_and_waits_for_those_alone(tmp_path: Path, monkeypatch) -> None:
    """A probe on fold 0 before all five: `folds: [0]` trains fold 0 alone, with the step's minutes, and its cv step
    is done once fold 0 is reported, the folds it is not of untrained."""
    path = write_recipe(
        tmp_path,
        """
config: sample
steps:
  - {id: t, stage: train, args: [data.folds=3], folds: [1], minutes: 9}
  - {id: c, stage: cv, needs: [t], args: [data.folds=3], folds: [1]}
  - {id: every, stage: cv, needs: [t], args: [data.folds=3]}
""",
    )
    train, cv, every = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    assert (train.id, train.fold, train.minutes) == ("t.fold1", 1, 9)
    assert "train.folds=[1]" in config.split_args(recipe.command(train)[-1])
    exp = layout.experiment_dir(chain_steps.step_config(cv))
    write_json(exp / "fold1" / "done.json", {"digest": "d"})
    write_json(exp / "cv.json", {"folds": {"1": {}}})  # written after fold 1's done.json
    monkeypatch.setattr(chain_steps.validity, "current_fingerprint", lambda cfg: "d")
    monkeypatch.setattr(
        chain_steps.validity,
        "select_folds",
        lambda *a: ([exp / "fold1"], {"fold0": "not trained", "fold2": "not trained"}),
    )
    assert chain_steps.done_why(cv) == ""
    assert chain_steps.done_why(every) == "fold0, fold2: not trained"


@pytest.mark.parametrize(
    "step, says",
    [
        ("{id: t, stage: train, args: [data.folds=3], folds: [3]}", "step t: fold 3 does not exist \\(data.folds=3\\)"),
        ("{id: t, stage: train, folds: [0, 0]}", "a list of distinct fold numbers"),
        ("{id: t, stage: train, folds: 0}", "a list of distinct fold numbers"),
        ("{id: d, stage: data, folds: [0]}", "step d: folds is for a train, cv, predict step"),
    ],
)
def test_a_steps_folds_are_fold_numbers_of_a_step_that_reads_folds(tmp_path: Path, step: str, says: str) -> None:
    path = write_recipe(tmp_path, f"config: sample\nsteps:\n  - {step}\n")
    with pytest.raises(ConfigError, match=says):
        chain_steps.read_recipe(path, tuple(overrides(tmp_path)))


@pytest.mark.parametrize(
    "steps, says",
    [
        ("  - {id: a, stage: data}\n  - {id: b, stage: train, needs: [c]}", "step b needs c, which no step above"),
        ("  - {id: a, stage: data}\n  - {id: a, stage: cv}", "step a is named twice"),
        ("  - {id: a, stage: dance}", "needs an id and a stage of data, stage1"),
        ("  - {id: a, stage: data, flags: [x]}", "unknown key 'flags'"),
    ],
)
def test_a_recipe_that_cannot_run_is_one_line(tmp_path: Path, steps: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        chain_steps.read_recipe(write_recipe(tmp_path, f"config: sample\nsteps:\n{steps}\n"))


def test_the_eta_schedules_the_steps_on_the_cores(tmp_path: Path) -> None:
    """Two folds of 10 min side by side after 1 min of data, then 1 min of report: 12 min on two cores, 22 on one."""
    path = write_recipe(
        tmp_path,
        """
steps:
  - {id: d, stage: data}
  - {id: t, stage: train, needs: [d], args: [data.folds=2]}
  - {id: c, stage: cv, needs: [t], args: [data.folds=2]}
""",
    )
    steps = chain_steps.read_recipe(path)
    minutes = {"d": 1.0, "t.fold0": 10.0, "t.fold1": 10.0, "c": 1.0}
    assert chain_plan.wall_minutes(steps, steps, minutes, 2) == 12
    assert chain_plan.wall_minutes(steps, steps, minutes, 1) == 22
    assert chain_plan.wall_minutes(steps[1:], steps, minutes, 2) == 11  # the data done: the folds start at once


def test_a_step_that_a_long_chain_waits_on_starts_before_the_folds_in_file_order(tmp_path: Path) -> None:
    """The real chain's shape: two folds of a 256-token student (10 min each) and a 1-minute teacher blend whose
    pseudo-labelled student trains three 12-minute folds. In file order the teacher starts after both folds and
    the student's third fold runs alone at the end (10 + 1 + 12 + 12 = 35 min on two cores); the longest chain
    first starts the teacher at once and a 10-minute fold fills the gap instead (32)."""
    path = write_recipe(
        tmp_path,
        """
steps:
  - {id: l256, stage: train, args: [data.folds=2, name=l256], minutes: 20}
  - {id: teacher, stage: data, minutes: 1}
  - {id: pl, stage: train, needs: [teacher], args: [data.folds=3, name=pl], minutes: 36}
""",
    )
    steps = chain_steps.read_recipe(path)
    minutes = {s.id: s.minutes for s in steps}
    longest = chain_plan.longest_after(steps)
    assert longest["teacher"] == 1 + 12 > longest["l256.fold0"] == 10
    assert chain_plan.wall_minutes(steps, steps, minutes, 2) == 32
    chain = recipe.Chain("r", chain_steps.step_config(steps[0]), steps, {s.id: "to do" for s in steps}, 2)
    assert chain.ready()[0].id == "teacher"  # the chain starts them in the order the ETA counts


def quoted_plan(page: str) -> str:
    block = page.split("<!-- recipe plan -->", 1)[1].split("<!-- /recipe plan -->", 1)[0]
    return block.split("```text\n", 1)[1].split("```", 1)[0]


def test_the_eta_left_runs_the_recipes_figures_at_this_machines_pace() -> None:
    """Stage 1 in 23 minutes where the recipe says 13, the first data step in 15.7 for 9: the steps not measured
    yet are counted 1.77x; a step of a minute or so (its minutes mostly start-up) tells nothing."""
    assert chain_plan.pace([(23.0, 13.0), (15.7, 9.0), (0.9, 1.0)]) == pytest.approx(38.7 / 22.0)
    assert chain_plan.pace([]) == 1.0 and chain_plan.pace([(3.0, 1.0)]) == 1.0


def test_a_resumed_fold_counts_its_whole_training_in_the_pace(tmp_path: Path) -> None:
    """A fold stopped after 13 minutes and finished in 11.6 more took 24.6: its done.json says so, the run's own
    clock does not."""
    path = write_recipe(
        tmp_path, "config: sample\nsteps:\n  - {id: t, stage: train, args: [data.folds=2], minutes: 20}\n"
    )
    fold0, data = (
        chain_steps.read_recipe(path, tuple(overrides(tmp_path)))[0],
        chain_steps.Step(id="d", stage="data", config="sample"),
    )
    write_json(layout.fold_dir(chain_steps.step_config(fold0), 0) / "done.json", {"digest": "x", "minutes": 24.6})
    assert chain_plan.finished_minutes(fold0, 11.6) == 24.6
    assert chain_plan.finished_minutes(data, 1.5) == 1.5  # no model: the wall minutes


def test_the_plan_counts_the_steps_not_measured_at_the_pace_of_the_folds_done(tmp_path: Path) -> None:
    path = write_recipe(
        tmp_path,
        """
config: sample
steps:
  - {id: d, stage: data, minutes: 1}
  - {id: t, stage: train, needs: [d], args: [data.folds=2], minutes: 10}
""",
    )
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    todo = {s.id: "to do" for s in steps}
    took = [(10.0, 5.0), (11.0, 5.0)]  # folds of another experiment, done at 2.1x their figures
    assert chain_plan.step_minutes(steps, steps, todo, took) == pytest.approx(
        {"d": 2.1, "t.fold0": 10.5, "t.fold1": 10.5}
    )
    plan = chain_plan.plan_text(
        "chain", steps, todo, chain_plan.step_minutes(steps, steps, todo, took), 2, chain_plan.pace(took)
    )
    assert plan.endswith("(23 min on one core; the recipe's minutes x 2.10, this machine's pace in the models trained)")


def test_the_plan_docs_recipes_md_quotes_is_what_make_recipe_prints_first(tmp_path: Path) -> None:
    """The real-slice recipe from a fresh clone: every step to do, the docs' minutes scheduled on two cores."""
    steps = chain_steps.read_recipe(config.recipe_path("real-slice-e5"), tuple(overrides(tmp_path)))
    done = {s.id: chain_steps.done_why(s) for s in steps}
    minutes = {s.id: chain_plan.measured_minutes(s, steps, done) for s in steps}
    plan = chain_plan.plan_text("real-slice-e5", steps, done, minutes, 2)
    assert plan + "\n" == quoted_plan((ROOT / "docs" / "recipes.md").read_text())
    assert steps[-1].id == "rs-e5-all-mix" and len(steps[-1].members) == 5


# ---------------------------------------------------------------- the chain run, stopped, continued


def chain(tmp_path: Path) -> list[str]:
    settings = [*overrides(tmp_path), *TINY, "train.epochs=2"]
    return [sys.executable, "-m", "pipeline", "recipe", "--config", "sample", "--jobs", "2", "--args",
            " ".join(settings)]  # fmt: skip


def run_chain(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(chain(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=600)


STEPS = ("data", "tfidf", "sample.fold0", "sample.fold1", "cv", "predict", "mix")  # recipes/sample.yaml, expanded


def finished(out: str) -> list[str]:
    """The steps a run finished: run to their end (`done`), or found current once their needs had run (`current`:
    the train of a fold that ends last writes cv.json of every fold, so the cv step after it has nothing to do)."""
    return [line.split()[1] for line in out.splitlines() if line.startswith(("done ", "current "))]


def ran(out: str) -> list[str]:
    """The steps a run started and ran to their end (a `current` step was never started)."""
    return [line.split()[1] for line in out.splitlines() if line.startswith("done ")]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_stopped_chain_continues_where_it_stopped_and_never_redoes_a_step(tmp_path: Path) -> None:
    """The sample recipe (data, baseline, two folds side by side, cv, predict, blend) stopped by SIGTERM once a
    fold is done: run again, it does only the rest, then prints the board; a third run does nothing."""
    proc = subprocess.Popen(chain(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = []
    for line in proc.stdout:
        first.append(line)
        if line.startswith("done     sample.fold"):
            proc.send_signal(signal.SIGTERM)  # as a Ctrl-C: the running fold saves its progress and stops
    assert proc.wait(timeout=300) == 130, "".join(first)
    first_text = "".join(first)
    assert "stopped: the recipe sample stopped; `make recipe` again continues where it stopped" in first_text
    assert "failed " not in first_text and "mix" not in finished(first_text)  # stopped before its end
    started = [line.split()[1] for line in first if line.startswith("started  ")]  # a line as each step begins
    assert started[0] == "data" and set(ran(first_text)) <= set(started), first_text
    folds_done = [s for s in finished(first_text) if s.startswith("sample.fold")]
    if len(folds_done) == 1:  # the other fold still trained at the stop (the two may end within one poll of each other)
        assert "stopped  sample.fold" in first_text  # stopped while it trained, its progress saved
    cfg = config.load("sample", [*overrides(tmp_path), *TINY], device=False)
    kept = {s: digests(layout.experiment_dir(cfg, "sample") / s.split(".")[1]) for s in finished(first_text)
            if s.startswith("sample.")}  # fmt: skip
    again = run_chain(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    plan = again.stdout.split("\nETA: ", 1)[0]
    for step in finished(first_text):
        assert f"{step} " in plan and plan.split(f"  {step} ", 1)[1].split("\n", 1)[0].endswith("done")
        assert step not in finished(again.stdout)  # never run twice
    # a step the stop reached as it ended (its files complete, its line "stopped") counts as done in the plan
    done_in_plan = {s for s in STEPS if plan.split(f"  {s} ", 1)[1].split("\n", 1)[0].endswith("done")}
    assert set(finished(first_text)) | set(finished(again.stdout)) | done_in_plan == set(STEPS)
    assert not set(finished(again.stdout)) & done_in_plan  # what the plan says is done is not run
    for step, files in kept.items():  # a finished fold's files as they were (predict adds its test predictions)
        now = digests(layout.experiment_dir(cfg, "sample") / step.split(".")[1])
        assert {k: now.get(k) for k in files} == files
    assert "recipe sample: every step done" in again.stdout and "| sample-mix " in again.stdout  # the board
    assert "\n== recipe: sample-mix ==\nOOF " in again.stdout  # the end-of-run block of the step it ends on
    models = layout.models_root(cfg)
    before = {k: v for k, v in digests(models).items() if k != "board.md"}
    third = run_chain(tmp_path)
    assert third.returncode == 0 and finished(third.stdout) == [] and "7 steps, 7 done" in third.stdout
    assert {k: v for k, v in digests(models).items() if k != "board.md"} == before


@pytest.mark.e2e
@pytest.mark.slow
def test_a_chain_killed_by_sigkill_stops_its_steps_too(tmp_path: Path) -> None:
    """SIGKILL leaves the chain no time to stop its steps: they stop themselves (SIGTERM when their parent dies),
    saving their progress, rather than train on holding their locks."""
    proc = subprocess.Popen(chain(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if line.startswith("done     data"):
            break
    time.sleep(3)  # the folds have started
    proc.kill()
    proc.wait(timeout=30)
    cfg = config.load("sample", [*overrides(tmp_path), *TINY], device=False)
    locks = [layout.fold_lock_path(cfg, k) for k in range(2)]
    deadline = time.time() + 60
    while time.time() < deadline and any(held(p) for p in locks):
        time.sleep(0.5)
    assert not any(held(p) for p in locks)  # the folds' processes are gone
    again = run_chain(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "data" not in finished(again.stdout)


def held(path: Path) -> bool:
    """Whether a process holds the lock at `path`."""
    import fcntl

    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.mark.e2e
@pytest.mark.slow
def test_the_folds_of_one_experiment_train_side_by_side_in_one_checkout(tmp_path: Path) -> None:
    """Data, then the two folds at once (each its own process, the experiment's lock shared), then the report."""
    path = write_recipe(
        tmp_path,
        """
config: sample
steps:
  - {id: data, stage: data}
  - {id: sample, stage: train, needs: [data]}
  - {id: cv, stage: cv, needs: [sample]}
""",
    )
    cmd = [*chain(tmp_path)]
    cmd[cmd.index("sample")] = str(path)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert finished(out.stdout) in (["data", "sample.fold0", "sample.fold1", "cv"],
                                    ["data", "sample.fold1", "sample.fold0", "cv"])  # fmt: skip
    cfg = config.load("sample", [*overrides(tmp_path), *TINY], device=False)
    logs = [layout.recipe_log(cfg, "chain", f"sample.fold{k}").read_text() for k in range(2)]
    assert all("=== fold" in log for log in logs)  # each fold's process trained its own fold


class Exited:
    """A step's process that has already ended with `code`."""

    def __init__(self, code: int) -> None:
        self.returncode = code

    def poll(self) -> int:
        return self.returncode


def test_a_step_stopped_by_a_signal_of_its_own_is_stopped_not_failed(tmp_path: Path, monkeypatch, capsys) -> None:
    """A fold interrupted alone (SIGINT or SIGTERM to its process, not to the chain) saved its progress as after
    Ctrl-C: the chain says so, starts nothing more, and ends as a stopped chain does, to be continued."""
    path = write_recipe(
        tmp_path, "config: sample\nsteps:\n  - {id: d, stage: data}\n  - {id: c, stage: cv, needs: [d]}\n"
    )
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    cfg = config.load("sample", overrides(tmp_path), device=False)
    started = []

    def start(step, log):
        started.append(step.id)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("train: stopped; its progress is saved\n")
        return Exited(130)

    monkeypatch.setattr(recipe, "start", start)
    chain = recipe.Chain("chain", cfg, steps, {s.id: "to do" for s in steps}, jobs=2)
    with pytest.raises(recipe.Interrupted, match="chain stopped: d stopped by a signal; `make recipe` again"):
        chain.run()
    assert started == ["d"] and chain.failed == []
    assert "stopped  d (data)" in capsys.readouterr().out


def test_a_step_whose_settings_cannot_load_stops_the_chain_before_any_step(tmp_path: Path, capsys) -> None:
    path = write_recipe(tmp_path, "steps:\n  - {id: d, stage: data}\n  - {id: c, stage: cv, args: [train.lr=-1]}\n")
    assert recipe.main(["--config", str(path), "--args", " ".join(overrides(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: train.lr") and err.count("\n") == 1, err
    assert not (tmp_path / "input").exists()  # nothing ran


RECIPES = sorted((ROOT / "pipeline" / "configs" / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_in_the_folder_reads_and_plans(path: Path, tmp_path: Path) -> None:
    """A recipe a user runs by name: its steps load, their needs are steps of the file, and the plan prints."""
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    ids = {s.id for s in steps} | {s.group for s in steps if s.group}
    assert all(n in ids for s in steps for n in s.needs), [(s.id, s.needs) for s in steps]
    done = {s.id: chain_steps.done_why(s) for s in steps}
    minutes = {s.id: chain_plan.measured_minutes(s, steps, done) for s in steps}
    assert chain_plan.plan_text(path.stem, steps, done, minutes, 2).startswith(
        f"recipe {path.stem}: {len(steps)} steps"
    )


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_a_recipes_students_train_from_the_stage1_model_its_stage1_step_makes(path: Path, tmp_path: Path) -> None:
    """A student's stage-1 settings are its own with `model.init_args` over them: a setting a student alone should
    have (a second seed) would otherwise ask for another stage-1 model than the one the recipe trains."""
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    stage1 = [chain_steps.step_config(s) for s in steps if s.stage == "stage1" and s.train]
    made = {cfg.name: cfg.to_dict() for cfg in stage1}
    for s in steps:
        cfg = chain_steps.step_config(s)
        if s.stage == "train" and cfg.model.init_from:
            wanted = config.stage1_config(cfg, device=False)
            assert wanted.to_dict() == made[wanted.name], f"{s.id}: another stage-1 model than {wanted.name}'s step"


# ---------------------------------------------------------------- a chain that never reports a stale result


def test_a_step_after_one_to_do_waits_and_is_asked_again_when_its_needs_have_run(tmp_path: Path, capsys) -> None:
    """A blend whose member is retrained reads done by its own files (the member's old folds still count) until
    the member has run: it waits as a step to do, and is asked again once its needs are done."""
    path = write_recipe(
        tmp_path,
        """
config: sample
steps:
  - {id: d, stage: data}
  - {id: t, stage: train, needs: [d], args: [data.folds=2]}
  - {id: c, stage: cv, needs: [t], args: [data.folds=2]}
  - {id: b, stage: baseline, needs: [d]}
""",
    )
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    own = {"d": "", "t.fold0": "", "t.fold1": "trained with other settings", "c": "", "b": ""}
    assert chain_plan.pending(steps, own) == {**own, "c": "after t"}
    assert chain_plan.pending(steps, {**own, "d": "changed"}) == {
        "d": "changed", "t.fold0": "after d", "t.fold1": "trained with other settings", "c": "after t", "b": "after d"
    }  # fmt: skip
    started = []
    asked = {"t.fold1": "trained with other settings", "c": ""}  # c's own files: current once t.fold1 has run

    def start(step, log):
        started.append(step.id)
        return Exited(0)

    chain = recipe.Chain("chain", chain_steps.step_config(steps[0]), steps, chain_plan.pending(steps, own), jobs=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(recipe, "start", start)
        mp.setattr(recipe, "done_why", lambda step: asked.pop(step.id, ""))
        chain.run()
    assert started == ["t.fold1"]  # c asked again after it: its files count, so it does not run
    assert "current  c (cv)" in capsys.readouterr().out


@pytest.mark.e2e
@pytest.mark.slow
def test_a_blend_whose_member_was_made_again_is_blended_again(tmp_path: Path) -> None:
    """A chain run to its end, then the first member's settings changed in the recipe: the member is made again
    and so is the blend, whose end block and board then describe the new member, not the old one."""
    body = """
config: sample
steps:
  - {{id: d, stage: data}}
  - {{id: d2, stage: data, args: [name=other]}}
  - {{id: one, stage: baseline, needs: [d], args: [train.seed={seed}]}}
  - {{id: two, stage: baseline, needs: [d2], args: [name=other]}}
  - {{id: mix, stage: blend, needs: [one, two], members: [sample-tfidf, other-tfidf], args: [blend.name=mix]}}
"""
    path = write_recipe(tmp_path, body.format(seed=1))
    cmd = [*chain(tmp_path)]
    cmd[cmd.index("sample")] = str(path)
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0 and sorted(finished(first.stdout)) == ["d", "d2", "mix", "one", "two"], (
        first.stdout + first.stderr
    )
    path.write_text(body.format(seed=2))
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "  mix  " in again.stdout and "after one" in again.stdout.split("\nETA", 1)[0]
    assert finished(again.stdout) == ["one", "mix"], again.stdout
    cfg = config.load("sample", overrides(tmp_path), device=False)
    assert "(stale)" not in layout.board_path(cfg).read_text()


def test_a_blend_step_is_done_only_when_its_folds_are_of_the_steps_members_and_step(tmp_path: Path) -> None:
    exp = tmp_path / "mix"
    for k in range(2):
        members = ["a", "b"] if k == 0 else ["a", "b", "c"]
        write_json(exp / f"fold{k}" / "done.json", {"digest": "x", "members": members, "step": 0.05})
    assert chain_steps.blend_differs(exp, ("b", "a"), 0.05).startswith("blended from a b c, not the step's b a")
    write_json(exp / "fold1" / "done.json", {"digest": "x", "members": ["b", "a"], "step": 0.05})
    assert chain_steps.blend_differs(exp, ("a", "b"), 0.05) == ""
    assert chain_steps.blend_differs(exp, ("a", "b", "c"), 0.05) == "blended from a b, not the step's a b c"
    assert chain_steps.blend_differs(exp, ("a", "b"), 0.1) == "blended with blend.step=0.05, not the step's 0.1"


ROUTE = """
config: sample
steps:
  - {id: d, stage: data}
  - {id: every, stage: baseline, needs: [d]}
  - {id: es, stage: baseline, needs: [d], args: ['train.langs=[es]']}
  - {id: routed, stage: blend, members: [sample-tfidf], route: {es: sample-tfidf-es}, needs: [every, es]}
"""


def test_a_route_step_runs_the_routed_blend_of_its_fallback(tmp_path: Path) -> None:
    """`route:` on a blend step: its one member the fallback, its languages' experiments made by steps above it;
    run as `make blend BLEND=<fallback> ARGS=blend.route=[..]`, its folder named as the blend stage names it."""
    *_, routed = chain_steps.read_recipe(write_recipe(tmp_path, ROUTE), tuple(overrides(tmp_path)))
    cmd = recipe.command(routed)
    assert cmd[2:4] == ["pipeline", "blend"] and cmd[cmd.index("--members") + 1] == "sample-tfidf"
    assert "blend.route=[es:sample-tfidf-es]" in config.split_args(cmd[cmd.index("--args") + 1])
    assert chain_steps.experiment_of(routed) == "sample-tfidf+sample-tfidf-es"
    cfg = chain_steps.step_config(routed)
    exp = tmp_path / "mix"
    write_json(
        exp / "fold0" / "done.json",
        {"digest": "x", "route": {"es": "sample-tfidf-es", "fallback": "sample-tfidf", "scale": "fallback"}},
    )
    assert chain_steps.blend_differs(exp, routed.members, 0.05, chain_steps.route_of(cfg, routed)) == ""
    assert chain_steps.blend_differs(exp, routed.members, 0.05, {"it": "x", "fallback": "sample-tfidf"}).startswith(
        "routed {'es': 'sample-tfidf-es', 'fallback': 'sample-tfidf', 'scale': 'fallback'}, not as the step routes "
        "{'it': 'x'"
    )
    assert chain_steps.blend_differs(exp, routed.members, 0.05).startswith("routed {'es'")  # a blend step's folder


@pytest.mark.parametrize(
    "route, says",
    [
        ("route: {es: sample-tfidf-xx}", "step routed routes es to sample-tfidf-xx, which no step above it makes"),
        ("route: {es: sample-tfidf-es}, members: [a, b]", "step routed: a route step names one member, the fallback"),
        ("route: 3", "step routed: route=3: languages to experiments"),
        ("route: [es]", "blend.route: 'es' is not `lang:experiment`"),
        ("args: ['blend.route=[es:sample-tfidf-es]']", "blend.route in its args: a route step names it with `route:"),
    ],
)
def test_a_route_step_naming_what_no_step_makes_is_one_line(tmp_path: Path, route: str, says: str) -> None:
    body = ROUTE.replace("members: [sample-tfidf], route: {es: sample-tfidf-es}", f"members: [sample-tfidf], {route}")
    body = body.replace("members: [sample-tfidf], members:", "members:")
    with pytest.raises(ConfigError, match=says):
        chain_steps.read_recipe(write_recipe(tmp_path, body), tuple(overrides(tmp_path)))
    with pytest.raises(ConfigError, match="step d: route is for a blend step"):
        chain_steps.read_recipe(write_recipe(tmp_path, "steps:\n  - {id: d, stage: data, route: {es: a}}\n"))


def test_a_specialists_predict_step_is_done_with_its_folds_test_predictions(tmp_path: Path, monkeypatch) -> None:
    """train.langs: `make predict` writes each fold's test.csv of its languages and no submission, so the step is
    done once every fold has them, where another predict step waits for its submission."""
    body = "steps:\n  - {id: p, stage: predict, args: [%s]}\n"
    spec, every = (
        chain_steps.read_recipe(write_recipe(tmp_path, body % a), tuple(overrides(tmp_path)))[0]
        for a in ("'train.langs=[es]'", "")
    )
    exp = layout.experiment_dir(chain_steps.step_config(spec))
    monkeypatch.setattr(chain_steps.validity, "current_fingerprint", lambda cfg: "d")
    monkeypatch.setattr(chain_steps.validity, "select_folds", lambda *a: ([exp / "fold0", exp / "fold1"], {}))
    assert chain_steps.done_why(spec) == ""
    assert chain_steps.done_why(every).endswith("not made from these folds yet")


@pytest.mark.e2e
@pytest.mark.slow
def test_a_recipe_routes_a_tfidf_specialist_and_is_done_when_run_again(tmp_path: Path) -> None:
    """The chain to a route: the baseline of every language, its es specialist, the route of the two; run again,
    nothing runs, since the route's own files say it is of the step's languages and fallback."""
    path = write_recipe(tmp_path, ROUTE)
    cmd = [*chain(tmp_path)]
    cmd[cmd.index("sample")] = str(path)
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0 and sorted(finished(first.stdout)) == ["d", "es", "every", "routed"], (
        first.stdout + first.stderr
    )
    cfg = config.load("sample", overrides(tmp_path), device=False)
    exp = layout.experiment_dir(cfg, "sample-tfidf+sample-tfidf-es")
    assert (exp / "fold0" / "done.json").is_file() and layout.submission_path(cfg, exp.name).is_file()
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and finished(again.stdout) == [], again.stdout + again.stderr


@pytest.mark.parametrize(
    "steps, says",
    [
        ("  - {id: m, stage: blend, members: [a]}", "step m: a blend step names two or more distinct experiments"),
        ("  - {id: m, stage: blend}", "step m: a blend step names two or more distinct experiments"),
        ("  - {id: m, stage: blend, members: [a, a]}", "step m: a blend step names two or more distinct"),
        ("  - {id: m, stage: cv, members: [a, b]}", "step m: members is for a blend step"),
        ("  - {id: t.fold0, stage: cv}\n  - {id: t, stage: train, folds: [0]}", "step t.fold0 is named twice"),
        ("  - {id: t, stage: train, folds: [0]}\n  - {id: t.fold0, stage: cv}", "step t.fold0 is named twice"),
        (
            "  - {id: t, stage: train}\n  - {id: u, stage: train, folds: [1]}",
            "steps t.fold1 and u.fold1 both write models/sample/fold1",
        ),
        (
            "  - {id: m, stage: blend, members: [a, b]}\n"
            "  - {id: n, stage: blend, members: [c, d], args: [blend.name=a+b]}",
            "steps m and n both write models/a\\+b/: the second would replace the first",
        ),
        (
            "  - {id: t, stage: train, args: ['train.folds=[1]']}",
            "step t: train.folds in its args: .* `folds: \\[0, 1\\]`",
        ),
        ("  - {id: '../../../models/evil', stage: data}", "step id '../../../models/evil': a plain name"),
        ("  - {id: d, stage: data, minutes: abc}", "step d: minutes='abc': a number of minutes, 0 or more"),
        ("  - {id: d, stage: data, minutes: -5}", "step d: minutes=-5: a number of minutes"),
        ("  - {id: d, stage: data, minutes: .nan}", "step d: minutes=nan: a number of minutes"),
    ],
)
def test_a_recipe_whose_steps_would_collide_or_mislead_is_one_line(tmp_path: Path, steps: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        chain_steps.read_recipe(
            write_recipe(tmp_path, f"config: sample\nsteps:\n{steps}\n"), tuple(overrides(tmp_path))
        )


def test_two_blend_steps_made_one_by_the_runs_args_are_refused(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "steps:\n  - {id: m, stage: blend, members: [a, b]}\n"
                                  "  - {id: n, stage: blend, members: [c, d]}\n")  # fmt: skip
    assert len(chain_steps.read_recipe(path, tuple(overrides(tmp_path)))) == 2
    with pytest.raises(ConfigError, match="steps m and n both write models/foo/"):
        chain_steps.read_recipe(path, (*overrides(tmp_path), "blend.name=foo"))


@pytest.mark.parametrize(
    "recipe_body, argv, says",
    [
        ("jobs: two\n", [], "jobs='two': the steps to run at a time, a whole number from 1"),
        ("jobs: -1\n", [], "jobs=-1: the steps to run at a time"),
        ("", ["--jobs", "-3"], "--jobs=-3: the steps to run at a time"),
        ("", ["--jobs", "0"], "--jobs=0: the steps to run at a time"),
        ("", ["--args", "train.folds=[0]"], "train.folds in a recipe's ARGS: each train step names its folds"),
    ],
)
def test_a_recipes_values_are_checked_when_read_in_one_line(tmp_path: Path, capsys, recipe_body, argv, says) -> None:
    path = write_recipe(tmp_path, recipe_body + "steps:\n  - {id: d, stage: data}\n")
    args = ["--args", " ".join([*overrides(tmp_path), *argv[1:]])] if argv[:1] == ["--args"] else argv
    if argv[:1] != ["--args"]:
        args += ["--args", " ".join(overrides(tmp_path))]
    assert recipe.main(["--config", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and err.startswith("error: "), err
    assert not (tmp_path / "input").exists()  # nothing ran, no file written


def test_a_second_run_of_a_recipe_names_the_run_that_holds_it(tmp_path: Path, capsys) -> None:
    path = write_recipe(tmp_path, "config: sample\nsteps:\n  - {id: d, stage: data}\n")
    lock = layout.recipe_lock(config.load("sample", overrides(tmp_path), device=False), "chain")
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pipeline import files; files.acquire_lock(sys.argv[1], 'r', "
         "'recipe'); print('held', flush=True); time.sleep(60)", str(lock)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        assert recipe.main(["--config", str(path), "--args", " ".join(overrides(tmp_path))]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert f"the recipe chain is in use by pid {holder.pid}" in err and err.count("\n") == 1, err
    assert not (tmp_path / "input" / "prepared").exists()


def test_a_steps_last_line_is_this_runs_own(tmp_path: Path) -> None:
    """A step's log holds every run of it, each after its `$` line: what the chain quotes is the last run's."""
    log = tmp_path / "t.log"
    log.write_text("$ python -m pipeline train\ntrain: epoch 1\nerror: an old failure\n$ python -m pipeline train\n")
    assert recipe.last_line(log) == "(no output)"
    log.write_text(log.read_text() + "train: stopped; its progress is saved\n")
    assert recipe.last_line(log) == "train: stopped; its progress is saved"


def test_a_ctrl_c_during_the_closing_board_stops_the_recipe_with_130(tmp_path: Path, monkeypatch, capsys) -> None:
    """The board's process gets the terminal's Ctrl-C too: the chain stops as every stage does, with no end block,
    and the handler the chain ran its steps under is gone."""
    path = write_recipe(tmp_path, "config: sample\nsteps:\n  - {id: d, stage: data}\n")
    steps = chain_steps.read_recipe(path, tuple(overrides(tmp_path)))
    monkeypatch.setattr(recipe, "command", lambda step: [sys.executable, "-c", "raise SystemExit(130)"])
    chain = recipe.Chain("chain", chain_steps.step_config(steps[0]), steps, {"d": ""}, jobs=1)
    chain.run()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    cv = chain_steps.Step(id="c", stage="cv", config="sample")
    assert recipe.run_stage(lambda: recipe.end_of_run("sample", tuple(overrides(tmp_path)), [cv], 1.0)) == 130
    assert "== recipe" not in capsys.readouterr().out


def test_a_report_step_of_other_settings_than_its_train_step_is_refused_when_read(tmp_path: Path) -> None:
    """A train.lr= in the train step's args alone: the cv step would find no folds of its settings, after training."""
    body = "config: sample\nsteps:\n  - {id: t, stage: train, args: [%s]}\n  - {id: c, stage: cv, needs: [t]}\n"
    with pytest.raises(ConfigError, match=r"step c reads the folds step t trains, with other settings: train.lr "):
        chain_steps.read_recipe(write_recipe(tmp_path, body % "train.lr=2e-3"), tuple(overrides(tmp_path)))
    quiet = chain_steps.read_recipe(
        write_recipe(tmp_path, body % "train.log_every_steps=5"), tuple(overrides(tmp_path))
    )
    assert quiet[-1].id == "c"  # a setting that does not change the weights: the same folds


@pytest.mark.parametrize("where, says", [("input/recipes/chain/d.log/", "step d's log"), ("models", "models")])
def test_a_folder_that_cannot_be_written_is_one_line_before_any_step(tmp_path: Path, capsys, where, says) -> None:
    """A step's log that is a folder, a models folder that is a file: said before the first step, not an hour in."""
    path = write_recipe(tmp_path, "config: sample\nsteps:\n  - {id: d, stage: data}\n")
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).mkdir() if where.endswith("/") else (tmp_path / where).write_text("x")
    assert recipe.main(["--config", str(path), "--args", " ".join(overrides(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not (tmp_path / "input" / "prepared").exists()


def test_a_board_that_fails_after_the_steps_is_not_a_finished_recipe(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(recipe, "command", lambda step: [sys.executable, "-c", "raise SystemExit(2)"])
    step = chain_steps.Step(id="c", stage="cv", config="sample")
    assert recipe.run_stage(lambda: recipe.end_of_run("sample", tuple(overrides(tmp_path)), [step], 1.0)) == 2
    captured = capsys.readouterr()
    assert "the board could not be made" in captured.err and "== recipe" not in captured.out


def test_a_recipe_of_data_steps_alone_ends_without_a_board(tmp_path: Path, monkeypatch, capsys) -> None:
    """No experiment to list: the board would fail with nothing to list, which is no failure of the recipe."""
    monkeypatch.setattr(recipe, "command", lambda step: [sys.executable, "-c", "raise SystemExit(2)"])
    step = chain_steps.Step(id="d", stage="data", config="sample", extra=tuple(overrides(tmp_path)))
    assert recipe.run_stage(lambda: recipe.end_of_run("sample", tuple(overrides(tmp_path)), [step], 1.0)) == 0
    assert "== recipe: sample ==" in capsys.readouterr().out


@pytest.mark.parametrize(("users", "steps"), [(None, "expandable_segments:True"), ("max_split_size_mb:64", None)])
def test_a_steps_allocator_has_expandable_segments_unless_the_user_set_one(tmp_path, monkeypatch, users, steps):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "restored after the test")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    if users:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", users)
    envs = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, env, **kw: envs.append(env))
    recipe.start(chain_steps.Step("a", "data", "sample"), tmp_path / "a.log")
    assert envs[0]["PYTORCH_CUDA_ALLOC_CONF"] == (steps or users) and envs[0]["OMP_NUM_THREADS"] == "1"
