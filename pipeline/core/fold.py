"""One fold, trained to the end: its model, optimizer and schedule, its evaluations and resume states.

A fold trains on the rows pipeline.inputs.tables.training_rows gives it and is evaluated each epoch on
its own validation rows; the best epoch's weights and OOF predictions are kept (train.eval_ensemble: the OOF and
test predictions are the mean of the last N evaluations', the weights still the best's). `FoldRun.run()` writes
fold<k>/ (see pipeline.train for the files) and, last, done.json: its presence means the fold is complete.
What it stands on, by concern: its time budget (pipeline.core.foldclock), its resume state
(pipeline.core.foldstate), its evaluations (pipeline.core.foldeval: when due, scored, judged and said; the
records, lines and OOF they write: pipeline.core.evaluation).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from pipeline import files, fingerprint, layout, validity
from pipeline.core import (
    average,
    batching,
    distributed,
    eta,
    evaluation,
    foldclock,
    foldstate,
    loop,
    memory,
    modeling,
    optim,
    precision,
    resume,
    steplog,
)
from pipeline.core.foldeval import FoldEvaluations
from pipeline.core.foldmodel import (
    auto_fit,
    banner,
    build_fold_model,
    checkpointing,
    ddp_headroom,
    padded_tokens,
    smoke_steps,
    with_plan,
    wrap,
)
from pipeline.core.resume import FoldState, Interrupted, StopFlag
from pipeline.errors import PipelineError
from pipeline.files import write_json
from pipeline.inputs.tables import fold_targets, scored_rows, training_rows
from pipeline.inputs.tokens import Ragged
from pipeline.schema import Config
from pipeline.scoring import metrics


@dataclasses.dataclass
class Ends:
    """How an epoch's steps ended: a stop was asked for (Ctrl-C, SIGTERM), or the deadline passed (expired)."""

    stopped: bool = False
    expired: bool = False


@dataclasses.dataclass(frozen=True)
class FoldInputs:
    """What a fold is trained from: the config, the table and its token ids, the tokenizer and the fingerprint."""

    cfg: Config
    fold: int
    table: pd.DataFrame
    data: Ragged  # the training table's token ids (remapped to the kept ids when the vocabulary is trimmed)
    tokenizer: object
    digest: str  # the fold fingerprint done.json will carry
    keep: np.ndarray | None = None  # the vocabulary ids kept (model.trim_vocab)
    folds_after: int = 0  # folds this run trains after this one: what the ETA counts beyond this fold
    made_from: dict | None = None  # what `digest` is the digest of (fingerprint.made_from): a resume state keeps it
    # called in the main process with (fold, metrics.jsonl's record) once an evaluation is written and judged; it may
    # raise to stop the fold at once (`make search` prunes a trial so), leaving what the evaluations wrote and no
    # done.json. Nothing here knows who listens: the core never imports the stage that passes it
    on_evaluation: Callable[[int, dict], None] | None = None
    test: evaluation.TestRows | None = None  # the test rows each evaluation predicts too, under train.eval_ensemble


class FoldRun(FoldEvaluations):
    """One fold's model, optimizer and schedule, with its resume states; `run()` trains it to the end."""

    def __init__(self, inputs: FoldInputs, d: distributed.Dist, stop: StopFlag) -> None:
        self.inputs, self.d, self.stop = inputs, d, stop
        self.fold, self.table, self.data, self.tokenizer = inputs.fold, inputs.table, inputs.data, inputs.tokenizer
        self.digest = inputs.digest
        self.fold_dir = layout.fold_dir(inputs.cfg, inputs.fold)
        if d.is_main:
            self.fold_dir.mkdir(parents=True, exist_ok=True)
            files.remove_dead_temporaries(self.fold_dir)  # of a run killed while it wrote one
        resume.set_seed(inputs.cfg.train.seed + inputs.fold)
        self.precision = precision.resolve_precision(inputs.cfg.train.precision, d.device)
        self.choose_rows()
        # nothing of the fold's folder is replaced before this: a setting that building refuses leaves it as it was
        self.build(resume.load_resume_everywhere(self.fold_dir / layout.RESUME, self.digest, d, inputs.made_from))
        if not self.fresh:  # a saved state continued: its run began before this one (a fresh fold: at its 1st step)
            self.begin()

    def choose_rows(self) -> None:
        """Which rows train this fold and which score it (none for a stage-1 model)."""
        cfg, table, fold = self.inputs.cfg, self.table, self.fold
        # which rows train this fold is decided in one place, so the leak tests check what training uses
        self.train_idx = training_rows(table, fold, cfg.train.training_only_rows, cfg.train.langs)
        stage1 = fold == layout.STAGE1  # a stage-1 model has no validation rows
        self.valid_idx = scored_rows(table, fold, cfg.train.langs)
        langs = list(cfg.train.langs)
        if langs and not (len(self.train_idx) and (stage1 or len(self.valid_idx))):  # a language the table lacks
            raise PipelineError(f"fold {fold}: train.langs={langs}: no training or validation rows of them "
                                "(fr, pt, ru have validation rows only with data.held_out)")  # fmt: skip
        if not stage1 and table["toxic"].iloc[self.valid_idx].nunique() < 2:
            raise PipelineError(f"fold {fold}: its validation rows hold one class, so no AUC; rebuild with `make data`")
        # the fold is scored as the board ranks: its rows weighted to the test's languages and toxic rates
        self.profile = None if stage1 else metrics.read_profile(cfg)
        self.first_half = evaluation.fold_halves(table.iloc[self.valid_idx], cfg.train.seed + fold)
        self.chosen: list[int] | None = None  # the steps of the held-out choice, once an evaluation made it
        self.labels = fold_targets(cfg, table, fold)  # data.relabel_from: the teacher's fold-k predictions mixed in
        self.pad_id = self.tokenizer.pad_token_id

    def build(self, state: dict | None) -> None:
        """Everything a fold trains with, in order: its model, its batch plan, its optimizer, the records and the
        estimates."""
        self.build_model(state)
        self.choose_precision(state)
        self.build_plan(state)
        self.build_training(state)
        self.build_estimates()

    def build_model(self, state: dict | None) -> None:
        """The model (with a resume state's weights) and DDP around it."""
        self.model = build_fold_model(self.inputs.cfg, self.tokenizer, self.inputs.keep, self.d, self.fold_dir,
                                      self.precision)  # fmt: skip
        if state is not None and "model" in state:  # before DDP, which copies rank 0's weights everywhere
            modeling.load_trained(self.model, state["model"], str(self.fold_dir / layout.RESUME))
        self.net = wrap(self.model, self.d)

    def choose_precision(self, state: dict | None) -> None:
        """train.precision=auto on a CPU with native bf16 (precision.measured_on): the faster of bf16 and fp32, by
        one training step in each, before the memory probes; a resume state's choice where it made one, since the
        weights trained so far were made in it. One process only (the ranks of a group would each measure)."""
        cfg, d, t = self.inputs.cfg, self.d, self.inputs.cfg.train
        self.precision_rates, self.precision_why = None, ""
        if not precision.measured_on(t.precision, d.device) or d.enabled or self.model.lora is not None:
            return
        reused = False
        if state is not None and state.get("precision_rates"):
            self.precision, self.precision_rates = state["precision"], state["precision_rates"]
        else:
            key = precision.choice_key(files.json_digest(dataclasses.asdict(cfg.model)), t.micro_batch,
                                       cfg.model.max_length, t.optimizer)  # fmt: skip
            self.precision_rates, reused = precision.shared_choice(
                layout.precision_choice(cfg), key,
                lambda: memory.step_rates(self.net, self.model, t.micro_batch, cfg.model.max_length, ("bf16", "fp32"),
                                          d.device, t))  # fmt: skip
            self.precision = precision.choose(self.precision_rates)
        self.precision_why = precision.choice_note(self.precision_rates, t.micro_batch, cfg.model.max_length, reused)

    def build_plan(self, state: dict | None) -> None:
        """The batch plan: a resume state's (its saved steps count in it), else auto-fit's, else the config's. The
        weight average (train.average) is made first: beside the weights it is memory the probes must hold."""
        self.average = average.make(self.model, self.inputs.cfg.train)
        cfg, self.checkpointing_why = checkpointing(self.inputs.cfg, self.model, self.net, self.precision, self.d)
        self.cfg = cfg
        if state is not None and "plan" in state:  # the batch plan the saved steps count in, not a new fit
            self.cfg = with_plan(cfg, *state["plan"])
        elif cfg.train.max_memory_gb > 0:
            self.cfg = auto_fit(cfg, self.model, self.net, self.precision, self.d)
        ddp_headroom(self.cfg, self.model, self.net, self.precision, self.d)  # the plan as it will train, before step 1
        self.windows = len(batching.accumulation_windows(len(self.epoch_plan(0)), self.cfg.train.accumulation))

    def build_training(self, state: dict | None) -> None:
        """Optimizer, schedule and scaler, a resume state's progress restored into them, and the step log."""
        t, d = self.cfg.train, self.d
        self.optimizer, self.scheduler = optim.make_training(self.model, t, d.device, self.total_steps)
        self.scaler = precision.make_scaler(self.precision, d.device)
        self.progress = FoldState()
        if state is not None:
            self.progress = foldstate.restore(state, self.optimizer, self.scheduler, self.scaler, d, self.fold,
                                              self.windows, self.average)  # fmt: skip
        smoke = bool(smoke_steps(self.inputs.cfg, self.total_steps))
        self.log = steplog.StepLog(self.inputs.cfg, self.fold, d, self.step_count(), self.progress.steplog, smoke)
        self.fresh = state is None  # a fold started from its first step (see unsaved_stop)

    def build_estimates(self) -> None:
        """What the time estimates count: the rates measured so far, an epoch's and an evaluation's tokens."""
        # what this run's earlier folds measured, and an earlier run's rate for the estimates until then
        self.measured, self.earlier = eta.read_rates(layout.experiment_dir(self.inputs.cfg))
        self.started = time.perf_counter()  # progress.seconds: what the processes before this one ran
        self.epoch_tokens = padded_tokens(self.epoch_plan(0), self.data)
        self.eval_tokens = float(self.data.lengths[self.valid_idx].sum())  # one evaluation
        if self.ensembling:  # which predicts the test rows too
            self.eval_tokens += float(self.inputs.test.data.lengths[self.inputs.test.rows].sum())
        evals = evaluation.per_epoch(0 if self.stage1 else self.cfg.train.eval_every_steps, self.windows)
        self.epoch_eval_tokens = evals * self.eval_tokens  # every evaluation of an epoch, for the estimates

    @property
    def stage1(self) -> bool:
        return self.fold == layout.STAGE1

    @property
    def rate(self) -> eta.Rate:
        """The rate every estimate uses: this run's own once it has measured, else an earlier run's."""
        return self.measured.over(self.earlier)

    @property
    def total_steps(self) -> int:
        """The fold's optimizer steps over every epoch: what the schedule, the average and the banner count."""
        return self.cfg.train.epochs * self.windows

    def step_count(self) -> int:
        """Optimizer steps done in this fold, over every epoch: the x axis of its records."""
        return self.progress.epoch * self.windows + self.progress.step.window

    def epoch_plan(self, epoch: int) -> list[list[np.ndarray]]:
        """The epoch's micro-steps as row indices of the table: micro-step k, rank r's batch."""
        t = self.cfg.train
        lengths = self.data.lengths[self.train_idx]
        multiple = batching.pad_multiple(self.precision)  # a token budget counts the widths collate pads to
        batches = batching.epoch_batches(lengths, t, multiple, t.seed + self.fold, epoch, self.d.world)
        return [[self.train_idx[b] for b in s] for s in batching.micro_steps(batches, self.d.world)]

    def checkpoint(self) -> None:
        """Save a resume state (every rank takes part: each one's random state and step sums are saved)."""
        rngs = distributed.gather_objects(self.d, resume.rng_state(self.d.device))  # its own GPU's
        carries = distributed.gather_objects(self.d, self.log.carry())
        if self.d.is_main:
            self.log.open()  # the records of an earlier run go before a state of this one replaces its state
            trained = {
                "digest": self.digest,
                "seconds": self.seconds(),  # the fold's time so far: done.json's minutes count it after a resume
                "world": self.d.world,
                "precision": self.precision,  # with precision_rates: as measured, kept for the rest of the fold
                "precision_rates": self.precision_rates,
                "plan": (self.cfg.train.micro_batch, self.cfg.train.accumulation),  # as auto-fit chose them
                "model": modeling.trained_state(self.model),  # a LoRA fold's: its adapters and head, not the base
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "average": self.average.state() if self.average else None,  # train.average's, in fp32
            }
            state = foldstate.resume_state(self.progress, trained, self.inputs.made_from, carries, rngs)
            foldstate.write_state(self.fold_dir / layout.RESUME, state, self.model)
        distributed.barrier(self.d)

    def seconds(self) -> float:
        """The seconds this fold has run, over every process that trained it (a resumed fold's included)."""
        return self.progress.seconds + time.perf_counter() - self.started

    def train_epoch(self, epoch: int) -> None:
        """Train the rest of the epoch, evaluating every train.eval_every_steps steps; a stop (Ctrl-C, SIGTERM)
        saves a resume state and raises Interrupted, the deadline (eta.deadline) the same and raises TimeUp;
        train.patience used up ends the epoch early (the fold is over)."""
        t, p, d = self.cfg.train, self.progress, self.d
        first, ends = p.step.window, Ends()
        if first and self.due_unevaluated(first):  # resumed where the schedule now evaluates: as it would have
            self.evaluate(epoch, 0)
            self.net.train()
            if self.exhausted():
                return
        self.mark = eta.now()

        def after_window(state: loop.StepState, window: loop.Window) -> bool:
            """The jobs of each optimizer step, always in this order; True ends the epoch. At a fold's first step
            the stop is asked before anything is written, so that a stop there writes nothing (unsaved_stop)."""
            p.step = state
            if self.average is not None and window.stepped:  # before any evaluation of this step
                self.average.update(self.step_count(), self.total_steps)
            self.time_window()
            opening = self.fresh and self.step_count() == 1
            if opening:
                self.ask_stop(ends)
                if ends.stopped and not ends.expired:
                    return True
                self.begin()
            self.log_window(epoch, window)
            self.evaluate_when_due(epoch, state.window, first)
            if not opening:
                self.ask_stop(ends)
            self.checkpoint_when_due(state.window, ends)
            self.mark = eta.now()  # what the steps above took is not a training step's time
            return ends.stopped or self.exhausted() or self.smoke_done()

        memory.reset_peak(d.device)
        job = loop.Job(self.net, self.data, self.labels, self.optimizer, self.scaler, t, self.precision, d.device,
                       self.pad_id, d.rank, d.world)  # fmt: skip
        p.step = loop.train_epoch(
            job, self.epoch_plan(epoch), self.scheduler, state=p.step, after_window=after_window, progress=d.is_main,
            desc=f"fold {self.fold} epoch {epoch + 1}/{t.epochs}", max_bad_steps=t.max_bad_steps,
        )  # fmt: skip
        where = f"fold {self.fold} stopped at epoch {epoch + 1}, step {p.step.window}"
        if ends.stopped and self.unsaved_stop(ends.expired):
            raise Interrupted(f"fold {self.fold} stopped at its first step; nothing was saved or replaced")
        if ends.expired:
            foldclock.time_up(self.cfg, d, self.fold, f"{where}: the session's time is up; the resume state is saved")
        if ends.stopped:
            raise Interrupted(f"{where}; `make train` again resumes from there")

    def time_window(self) -> None:
        """Timing: a simulated clock (tests) advances by a step's simulated time; the rate, step by step
        (evaluations and resume states apart), for the ETA of evaluations inside epochs."""
        if self.d.is_main:
            eta.spend_step()
        self.measured.train_tokens += self.epoch_tokens / self.windows
        self.measured.train_seconds += eta.now() - self.mark

    def log_window(self, epoch: int, window: loop.Window) -> None:
        """Logging: the step's line in steps.jsonl (and TensorBoard)."""
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        lr = optim.learning_rates(self.optimizer)  # every group's, named
        self.log.add(self.step_count(), epoch, window, lr, scale, memory.peak_memory_mb(self.d.device))

    def ask_stop(self, ends: Ends) -> None:
        """Whether the deadline passed or a stop was asked for, on any rank (both collective: once a step)."""
        ends.expired = foldclock.deadline_passed(self.d)
        ends.stopped = ends.expired or self.stop_requested()

    def begin(self) -> None:
        """The fold's run has begun (a fresh fold's first step trained, or a saved state continued): what an earlier
        run left goes now, never before (foldstate.drop_old), so that a run refused or stopped before it leaves the
        folder as it was."""
        if self.d.is_main:
            foldstate.drop_old(self.fold_dir, self.fresh, self.inputs.cfg, self.inputs.keep, self.tokenizer)

    def stop_requested(self) -> bool:
        """A stop request (Ctrl-C, SIGTERM) on any rank."""
        return distributed.any_rank(self.d, self.stop.raised)

    def checkpoint_when_due(self, done: int, ends: Ends) -> None:
        """The resume state: at a stop that is to resume, and every train.save_every_steps optimizer steps; the
        last window is saved by the stop only, since the epoch's own end saves after the evaluation."""
        every = self.cfg.train.save_every_steps
        if (ends.stopped and not self.unsaved_stop(ends.expired)) or (
            every and done % every == 0 and done < self.windows
        ):
            self.checkpoint()

    def unsaved_stop(self, expired: bool) -> bool:
        """A stop (Ctrl-C) at the first step of a fold started afresh saves nothing: a resume state this run could
        not continue (other settings: `make train` named it before the fold started) is left as it was."""
        return self.fresh and not expired and self.step_count() == 1

    def check_time(self, epoch: int) -> None:
        """The time guard before an epoch (foldclock.check_time), on this fold's rates and tokens."""
        tokens = (self.epoch_tokens, self.epoch_eval_tokens)
        verdict = functools.partial(foldclock.time_verdict, self.fold, epoch, self.rate, self.measured, *tokens)
        foldclock.check_time(self.d, epoch, verdict, functools.partial(foldclock.time_up, self.cfg, self.d, self.fold))

    def plan(self, epoch: int, window: int) -> eta.Plan:
        """What is left of the run from window `window` of epoch `epoch` (foldclock.plan)."""
        tokens = (self.epoch_tokens, self.epoch_eval_tokens)
        return foldclock.plan(self.cfg, self.windows, epoch, window, tokens, self.inputs.folds_after)

    def run(self) -> dict:
        t, p, d = self.cfg.train, self.progress, self.d
        if d.is_main:
            print(f"\n=== fold {self.fold} ===")
            prec = f"{self.precision} ({self.precision_why})" if self.precision_why else self.precision
            print(banner(self.cfg, d, prec, len(self.train_idx), len(self.valid_idx),
                         self.total_steps, self.model, self.checkpointing_why))  # fmt: skip
            seconds = self.plan(p.epoch, p.step.window).seconds(self.rate)  # from earlier folds, once measured
            if seconds is not None:
                print(f"ETA {eta.hours(seconds)} for the run ({self.inputs.folds_after} more folds after this one)")
        self.started = time.perf_counter()  # p.seconds: what the processes before this one ran
        if d.is_main and self.exhausted():  # resumed under a lower train.patience (or a shorter interval)
            print(evaluation.used_up_line(self.fold, p.history, p.best, t.patience))
        for epoch in range(p.epoch, t.epochs):
            if self.exhausted() or self.end_smoke(epoch, 0):
                break
            p.epoch, start_window = epoch, p.step.window
            if p.step.window == 0:
                self.check_time(epoch)
            if p.step.window < self.windows:
                self.train_epoch(epoch)
            if self.exhausted():  # stopped inside the epoch: its end would be evaluated for nothing
                break
            if self.end_smoke(epoch, p.step.window - start_window):
                break
            # trained, not yet evaluated (a resume may land here)
            if not evaluation.evaluated(p.history, epoch, self.windows):
                self.evaluate(epoch, p.step.window - start_window)
                p.step = loop.StepState(window=self.windows, halvings=p.step.halvings)
                self.checkpoint()
            # micro-batches halved after running out of memory stay halved
            p.epoch, p.step = epoch + 1, loop.StepState(halvings=p.step.halvings)
        return self.finish(self.seconds())

    def finish(self, seconds: float) -> dict:
        p, t = self.progress, self.cfg.train
        if not self.stage1 and p.best["epoch"] < 0:  # NaN at every evaluation: no weights and no OOF were kept
            raise PipelineError(
                f"fold {self.fold}: no evaluation scored a number ({len(p.history)} evaluations, AUC nan), so none "
                "was kept: its scored rows need both classes"
            )
        self.log.close()
        result = {
            "fold": self.fold,
            # the world size and a measured precision change the weights too
            "digest": fingerprint.as_trained(
                self.digest,
                {"world": self.d.world, "precision": self.precision, "precision_rates": self.precision_rates},
            ),
            "epochs": max((h["epoch"] for h in p.history), default=0),
            "best_epoch": p.best["epoch"],
            "best_step": p.best["step"],
            "held_out_steps": self.chosen,  # the steps oof.csv's two halves were taken at (evaluation.held_out_choice)
            "steps": max((h.get("step", 0) for h in p.history), default=0),
            "evaluations": len(p.history),
            "stopped_early": self.exhausted(),
            "auc": p.best["auc"],
            "metric": p.best.get("metric"),  # which of metrics.METRICS `auc` is
            "auc_per_lang": p.best.get("auc_per_lang", {}),
            "minutes": round(seconds / 60, 2),
            "precision": self.precision,
            "precision_rates": self.precision_rates,  # examples/s of one step each, where auto measured them
            "world": self.d.world,
            "effective_batch": t.micro_batch * t.accumulation * self.d.world,
            "scale": layout.PROBABILITY,  # of oof.csv's pred and test.csv's toxic
            "head": modeling.HEAD,  # the classification head the weights belong to
            "profile": self.profile,  # the test's languages and toxic rates the fold was scored by
        }
        if self.inputs.made_from is not None:  # what the digest is of: a later run names what made the fold stale
            result["made_from"] = self.inputs.made_from
        if self.ensembling:  # the fold's figure is its ensemble's, as oof.csv's (evaluation.write_ensemble_oof)
            ens = self.ensemble_figures()
            result.update(auc=ens["auc"], metric=ens["metric"], auc_per_lang=ens["auc_per_lang"],
                          eval_ensemble=t.eval_ensemble, ensemble_steps=ens["steps"])  # fmt: skip
        if self.d.is_main:
            result["files"] = validity.fold_records(self.fold_dir)
            if self.ensembling:  # before done.json: a complete fold has its test predictions
                self.write_ensemble_test(result["files"][layout.WEIGHTS]["sha256"])
            write_json(self.fold_dir / layout.DONE, result)  # last: its presence means the fold is complete
            (self.fold_dir / layout.RESUME).unlink(missing_ok=True)
        distributed.barrier(self.d)
        return result
