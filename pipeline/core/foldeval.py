"""A fold's evaluations: when they are due, each one scored, judged, recorded and said, and a smoke run's end.

`FoldEvaluations` is the part of pipeline.core.fold.FoldRun that evaluates: it reads the fold's model, rows,
progress and estimates as FoldRun builds them, and keeps the best evaluation's weights and OOF predictions (what
is due, best and written: pipeline.core.evaluation).
"""

from __future__ import annotations

import json
import time

import pandas as pd

from pipeline import fingerprint, layout
from pipeline.core import average, distributed, eta, evaluation, foldclock
from pipeline.core.foldmodel import save_model
from pipeline.files import atomic_write_text, file_record, write_csv, write_json
from pipeline.scoring import metrics


class FoldEvaluations:
    """The evaluating half of a fold's run (mixed into pipeline.core.fold.FoldRun, which builds what it reads)."""

    def evaluate_when_due(self, epoch: int, done: int, first: int) -> None:
        """Evaluation: every train.eval_every_steps optimizer steps (a stage-1 model: at the epoch's end only)."""
        every = 0 if self.stage1 else self.cfg.train.eval_every_steps
        if evaluation.due(every, self.step_count(), done, self.windows):
            self.evaluate(epoch, done - first)
            self.net.train()  # evaluation left the model in eval mode: dropout and checkpointing are back on

    def due_unevaluated(self, window: int) -> bool:
        """A fold resumed at a step train.eval_every_steps evaluates but that was not evaluated: the state was saved
        under another train.eval_every_steps (a resumable setting). Under the same one a due step is evaluated
        before its state is saved, so this is never true then."""
        step, every = self.step_count(), 0 if self.stage1 else self.cfg.train.eval_every_steps
        due = evaluation.due(every, step, window, self.windows)
        return due and not any(h.get("step") == step for h in self.progress.history)

    def exhausted(self) -> bool:
        return evaluation.exhausted(self.progress.best, self.cfg.train.patience, self.stage1)

    def evaluate(self, epoch: int, steps_run: int) -> None:
        """Score the fold's rows where training is (progress.step); the best evaluation so far keeps its
        weights and OOF predictions, and patience counts the others."""
        p, d, t = self.progress, self.d, self.cfg.train
        start, clock = time.perf_counter(), eta.now()
        with average.applied(self.average):  # train.average: the averaged weights are what is scored
            preds = evaluation.predict_rows(self.model, d, self.data, self.valid_idx, self.cfg, self.precision,
                                            self.pad_id)  # fmt: skip
        self.measured.eval_tokens += self.eval_tokens
        self.measured.eval_seconds += eta.now() - clock
        valid = self.table.iloc[self.valid_idx]
        score = (None, None, {}) if self.stage1 else metrics.fold_score(valid, preds, self.profile)
        record = evaluation.eval_record(epoch, self.step_count(), p.step, score, time.perf_counter() - start,
                                        steps_run, d, self.optimizer)  # fmt: skip
        if not self.stage1:
            p.predictions[record["step"]] = preds
        if self.ensembling:  # before the record is kept: it carries the ensemble's figures
            self.ensemble(record)
        p.history.append(record)
        best, improved = evaluation.judge(p.best, record, self.stage1)
        if d.is_main:
            print(self.eval_line(record, improved, best["since"]))
            atomic_write_text(self.fold_dir / layout.METRICS, "".join(json.dumps(h) + "\n" for h in p.history))
            if improved:
                with average.applied(self.average):  # and what the best evaluation keeps
                    save_model(self.model, self.tokenizer, self.cfg, self.fold_dir)
            if self.ensembling:  # the mean of the last evaluations, no step chosen
                mean = evaluation.ensemble_mean(p.predictions, record["ensemble"]["steps"])
                evaluation.write_ensemble_oof(self.fold_dir / layout.OOF, valid, mean)
            elif best["step"] in p.predictions:  # not a stage-1 model's; nor a best a state saved before this kept
                self.chosen = evaluation.write_oof(self.fold_dir / layout.OOF, valid, p.predictions, self.profile,
                                                   self.first_half, p.predictions[best["step"]])  # fmt: skip
        p.best = distributed.gather_objects(d, best)[0]  # rank 0 decides, the others follow
        self.log.evaluation(record)
        if d.is_main and self.exhausted():
            name = metrics.judged_by(record)
            print(f"fold {self.fold}: no better {name} for {t.patience} evaluations (train.patience); "
                  f"stopping at step {record['step']}, keeping step {p.best['step']} "
                  f"({name} {p.best['auc']:.4f})")  # fmt: skip
        if d.is_main and not self.stage1 and self.inputs.on_evaluation is not None:
            self.inputs.on_evaluation(self.fold, record)  # last: what it stops has been written

    def eval_line(self, record: dict, improved: bool, since: int) -> str:
        """evaluation.eval_line, ending with the ETA (foldclock.eta_line, which writes eta.json)."""
        window, epoch = self.progress.step.window, record["epoch"] - 1
        left = self.plan(epoch, window)
        ends = foldclock.eta_line(self.cfg, self.d, f"fold {self.fold} epoch {epoch + 1}", left,
                                  (self.measured, self.earlier))  # fmt: skip
        return evaluation.eval_line(record, (improved, since), self.fold, self.stage1, self.cfg.train,
                                    (window, self.windows), ends)  # fmt: skip

    def smoke_done(self) -> bool:
        """train.max_steps optimizer steps trained: a smoke run's fold ends there."""
        return 0 < self.cfg.train.max_steps <= self.step_count()

    def end_smoke(self, epoch: int, steps_run: int) -> bool:
        """A smoke run's end (train.max_steps): its last step evaluated (and the model saved) unless it just was;
        True when the fold is over."""
        if not self.smoke_done():
            return False
        if not any(h.get("step") == self.step_count() for h in self.progress.history):
            self.evaluate(epoch, steps_run)
        if self.d.is_main:
            print(f"fold {self.fold}: train.max_steps={self.cfg.train.max_steps}: a smoke run, stopped at step "
                  f"{self.step_count()} of {self.total_steps}, evaluated and saved")  # fmt: skip
        return True

    @property
    def ensembling(self) -> bool:
        """train.eval_ensemble is on for this fold (a stage-1 model has no OOF, and predict never reads its test)."""
        return self.cfg.train.eval_ensemble > 0 and not self.stage1

    def ensemble(self, record: dict) -> None:
        """train.eval_ensemble = N: the test rows predicted by the weights just scored, the last N evaluations' test
        predictions kept (older ones dropped), and `record` given the figures of the last N evaluations' mean
        (`ensemble`: its steps and scores). Every rank predicts its shard and holds the whole, as evaluation does."""
        p, test, clock = self.progress, self.inputs.test, eta.now()
        with average.applied(self.average):  # the weights just scored, averaged where train.average says
            p.test_predictions[record["step"]] = evaluation.predict_rows(
                self.model, self.d, test.data, test.rows, self.cfg, self.precision, self.pad_id, desc="test"
            )
        self.measured.eval_seconds += eta.now() - clock  # its tokens are among eval_tokens (build_estimates)
        keep = evaluation.ensemble_steps(p.test_predictions, self.cfg.train.eval_ensemble)
        for step in set(p.test_predictions) - set(keep):  # only the last N are ever averaged
            del p.test_predictions[step]
        record["ensemble"] = self.ensemble_figures()

    def ensemble_figures(self) -> dict:
        """The steps of the evaluations the fold's ensemble averages (those whose test predictions are kept) and the
        scores of their validation predictions' mean, as metrics.fold_score gives them."""
        steps = sorted(self.progress.test_predictions)
        mean = evaluation.ensemble_mean(self.progress.predictions, steps)
        by, auc, per_lang = metrics.fold_score(self.table.iloc[self.valid_idx], mean, self.profile)
        return {"steps": steps, "auc": auc, "metric": by, "auc_per_lang": per_lang}

    def write_ensemble_test(self, weights: str) -> None:
        """The mean of the kept test predictions in fold<k>/test.csv, where `make predict` reads a fold's, and
        test.json naming what they were made from: the kept weights' sha256 (`weights`), the test table, the
        precision, train.eval_ensemble and the steps averaged (predict uses them, never predicting again)."""
        p, test = self.progress, self.inputs.test
        steps = sorted(p.test_predictions)
        out = self.fold_dir / layout.TEST_PREDS
        write_csv(out, pd.DataFrame({"id": test.ids, "toxic": evaluation.ensemble_mean(p.test_predictions, steps)}))
        key = fingerprint.test_cache_key(weights, test.digest, self.cfg, self.precision)
        key.update(eval_ensemble=self.cfg.train.eval_ensemble, steps=steps)
        write_json(self.fold_dir / layout.TEST_KEY, {"key": key, "file": file_record(out)})
