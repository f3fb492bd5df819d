"""When a fold is evaluated, which evaluation is its best, and when it stops for want of a better one.

A fold is evaluated on its validation rows at every epoch's end and, with train.eval_every_steps = N, every N
optimizer steps counted over the whole fold. The best evaluation by AUC keeps its weights and OOF
predictions (a later, worse one leaves them); with train.patience = P the fold stops once P evaluations have
followed its best one without a better one, an epoch's end evaluation among them, as the log's "no better (k of
P)" counts them. A stage-1 model has no validation rows: its last evaluation is its model.

The best evaluation is chosen on the very rows it is then scored on: of several equally good evaluations, the
one whose noise happens to favour these rows wins, so its figure reads high, the more so the more evaluations
there are. The fold's OOF (`pred` of oof.csv: what cv, blends, calibration and the board score) is therefore
held out from that choice: the fold's rows are split in two halves (groups whole, each language and label
evenly, a group that spans languages counted in each), and each half gets its predictions at the evaluation
that scores best on the other half, in that evaluation's order and on the kept weights' scale (on_kept_scale).
`best` beside it holds the best evaluation's predictions, those of the weights kept.

Checkpoint ensembling (train.eval_ensemble = N) replaces that choice: a fold's OOF and test predictions are the mean
of the probabilities of its last N evaluations, steps fixed by the schedule, none chosen by a score; `pred` and
`best` of oof.csv both hold that mean (what predicted the test), while the kept weights stay the best evaluation's.

Last, what a fold's evaluation leaves: its record in metrics.jsonl, oof.csv, and the lines it prints.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.core import distributed, loop, memory, optim
from pipeline.files import write_csv
from pipeline.inputs.tokens import Ragged
from pipeline.schema import Config, TrainConfig
from pipeline.scoring import metrics


@dataclasses.dataclass(frozen=True)
class TestRows:
    """The test rows a fold predicts at each evaluation under train.eval_ensemble: their ids, the token ids (read
    as the training ids are: trimmed alike), the rows of those predicted (tables.test_rows, in `ids`' order) and
    the test table's digest (data.json's test_digest)."""

    ids: np.ndarray
    data: Ragged
    rows: np.ndarray
    digest: str


def predict_rows(model, d: distributed.Dist, data: Ragged, idx: np.ndarray, cfg: Config, prec: str, pad_id: int,
                 desc: str = "valid"):  # fmt: skip
    """Each rank predicts a shard; gathered back so every row is scored exactly once, on every rank."""
    pos = np.arange(len(idx))[d.rank :: d.world]
    preds = loop.predict(
        model, data, idx[pos], cfg.train.eval_batch, prec, d.device, pad_id, progress=d.is_main, desc=desc
    )
    out = np.empty(len(idx))
    for p, v in distributed.gather_objects(d, (pos, preds)):
        out[p] = v
    return out


def due(every: int, step: int, window: int, windows: int) -> bool:
    """An evaluation inside the epoch after optimizer step `step` (window `window` of `windows`); the epoch's
    last window is evaluated by the epoch's end."""
    return every > 0 and window < windows and step % every == 0


def per_epoch(every: int, windows: int) -> float:
    """Evaluations an epoch, on average (for the time estimates): its end, and every `every` steps inside."""
    return 1 + ((windows - 1) / every if every > 0 else 0)


def judge(best: dict, record: dict, stage1: bool) -> tuple[dict, bool]:
    """(the best evaluation after `record`, whether `record` is it). Only a strictly better AUC counts as
    better: an equal one keeps the earlier weights, whose evaluation came first."""
    if stage1 or record["auc"] > best["auc"]:
        keys = ("auc", "auc_per_lang", "epoch", "step")
        return {**{k: record[k] for k in keys}, "metric": record.get("metric"), "since": 0}, True
    return {**best, "since": best["since"] + 1}, False


def exhausted(best: dict, patience: int, stage1: bool) -> bool:
    """train.patience evaluations after the best one without a better AUC: the fold stops (never a stage-1
    model). Evaluations, not step intervals: an epoch's last evaluation falls between two intervals, and the
    log's "no better (k of P)" counts it."""
    return patience > 0 and not stage1 and best["since"] >= patience


def halves(keys: np.ndarray, strata: np.ndarray, seed: int) -> np.ndarray:
    """True for the rows of a fold's first half, False for the second: each group (`keys`: versions and copies
    of one comment) whole on one side, every stratum (language x label) split as evenly as whole groups allow.
    A group may span strata (an English comment held out with its fr, pt and ru translations), so it goes to
    the side that leaves the rows of every stratum least apart, the largest groups first, in a seeded order."""
    frame = pd.DataFrame({"key": keys, "stratum": strata})
    counts = frame.groupby(["key", "stratum"]).size().unstack(fill_value=0)
    rows = counts.to_numpy(np.float64)
    order = np.random.default_rng(seed).permutation(len(rows))
    order = order[np.argsort(-rows[order].sum(axis=1), kind="stable")]  # large groups first, small ones even out
    held, first = np.zeros((2, rows.shape[1])), np.zeros(len(rows), dtype=bool)
    for i in order:
        apart = [np.abs(held[0] + rows[i] - held[1]).sum(), np.abs(held[0] - held[1] - rows[i]).sum()]
        # equally apart either way: the side with fewer rows, then the first
        side = 0 if (apart[0], held[0].sum()) <= (apart[1], held[1].sum()) else 1
        held[side] += rows[i]
        first[i] = side == 0
    return frame["key"].map(pd.Series(first, index=counts.index)).to_numpy(dtype=bool)


def fold_halves(valid: pd.DataFrame, seed: int) -> np.ndarray:
    """The two halves of a fold's rows whose evaluations choose each other's step (halves): groups of
    the table's `group` column whole (a row without one is its own), each language and label evenly."""
    given = valid["group"].astype(str).to_numpy() if "group" in valid else np.full(len(valid), "")
    keys = np.where(given != "", given, "row:" + valid["id"].astype(str).to_numpy())
    strata = (valid["lang"].astype(str) + "_" + valid["toxic"].astype(int).astype(str)).to_numpy()
    return halves(keys, strata, seed)


def on_kept_scale(held: np.ndarray, best: np.ndarray, first: np.ndarray) -> np.ndarray:
    """`held` with each half's values replaced, rank for rank, by the kept evaluation's values on that half: each
    half keeps the order of the step the other half chose, on the scale of the weights kept.

    Two steps of one fold score on two scales (the schedule decays, the probabilities drift), so a pooled AUC of
    halves taken at two steps compares the scales as well as the rows, and reads low: 0.004 on a stage-2 e5 fold
    whose halves chose steps 200 and 313, both halves higher alone. Put on the kept weights' values, the halves
    compare as the kept model compares them. A half at the kept step is unchanged, and so is `held` mapped twice.
    """
    out = np.asarray(held, dtype=np.float64).copy()
    for half in (first, ~first):
        n = int(half.sum())
        if n == 0:
            continue
        ranks = pd.Series(out[half]).rank(method="average").to_numpy() - 1  # ties stay ties
        out[half] = np.interp(ranks, np.arange(n), np.sort(np.asarray(best, dtype=np.float64)[half]))
    return out


def held_out_choice(
    valid: pd.DataFrame, predictions: dict[int, np.ndarray], profile: dict | None, first: np.ndarray
) -> tuple[np.ndarray, list[int]]:
    """The fold's OOF with no evaluation chosen on the rows it scores: each half's predictions at the evaluation
    (optimizer step, a key of `predictions`) that scores best on the other half, the earliest of equals; and the
    two steps chosen (the first half's, the second's). A half without both classes cannot choose: then both
    halves take the step the whole fold scores best."""
    steps = sorted(predictions)

    def best_on(rows: np.ndarray) -> int:
        scores = [metrics.fold_score(valid[rows], predictions[s][rows], profile)[1] for s in steps]
        return steps[int(np.argmax(np.nan_to_num(scores, nan=-np.inf)))]  # argmax: the first of equals

    labels = valid["toxic"].to_numpy()
    whole = np.ones(len(valid), dtype=bool)
    if min(len(np.unique(labels[first])), len(np.unique(labels[~first]))) < 2:
        chosen = [best_on(whole)] * 2
    else:
        chosen = [best_on(~first), best_on(first)]  # the first half by the second half's scores, and back
    out = np.where(first, predictions[chosen[0]], predictions[chosen[1]])
    return out, chosen


def ensemble_steps(steps, n: int) -> list[int]:
    """The steps of the last `n` evaluations (train.eval_ensemble) among `steps`, in order."""
    return sorted(steps)[-n:]


def ensemble_mean(predictions: dict[int, np.ndarray], steps: list[int]) -> np.ndarray:
    """The mean of the probabilities the evaluations at `steps` gave each row (probabilities, never ranks: the mean
    is one again, what calibration, blends and pseudo-labels read)."""
    return np.mean([np.asarray(predictions[s], dtype=np.float64) for s in steps], axis=0)


# ---------------------------------------------------------------- a fold's evaluation, recorded and said


def eval_record(epoch: int, steps: int, step: loop.StepState, score: tuple, seconds: float, steps_run: int,
                d: distributed.Dist, optimizer) -> dict:  # fmt: skip
    """metrics.jsonl's line for an evaluation: where (epoch, `steps`: optimizer steps over the fold), loss, AUC
    overall and per language (`score`: metrics.fold_score's, or (None, None, {}) for a stage-1 model), speed,
    memory, lr."""
    by, auc, per_lang = score
    return {
        "epoch": epoch + 1,
        "step": steps,  # optimizer steps over the whole fold
        "loss": step.loss_sum / max(step.examples, 1),  # the epoch's so far
        "auc": auc,
        "metric": by,  # which of metrics.METRICS `auc` is: what the best step is chosen by
        "auc_per_lang": per_lang,
        "seconds": round(step.seconds + seconds, 2),
        "samples_per_second": round(step.examples * d.world / max(step.seconds, 1e-9), 1),
        "peak_memory_mb": round(memory.peak_memory_mb(d.device), 1),
        "skipped_steps": step.skipped,
        "steps_run": steps_run,  # optimizer steps this process ran in the epoch (fewer after a resume)
        "lr": optim.learning_rates(optimizer),
    }


def write_oof(path: Path, valid: pd.DataFrame, predictions: dict[int, np.ndarray], profile: dict | None,
              first: np.ndarray, best: np.ndarray) -> list[int]:  # fmt: skip
    """oof.csv after an evaluation: `pred`, each half's predictions at the step the other half chose
    (held_out_choice: no step chosen on the rows it scores), and `best`, the best step's (the weights kept);
    returns the two steps chosen."""
    held, chosen = held_out_choice(valid, predictions, profile, first)
    held = on_kept_scale(held, best, first)  # two steps' scales never meet in one AUC
    write_csv(path, valid[layout.OOF_COLUMNS].assign(pred=held, best=best))
    return chosen


def write_ensemble_oof(path: Path, valid: pd.DataFrame, mean: np.ndarray) -> None:
    """oof.csv under train.eval_ensemble: `pred` and `best` both the mean of the last evaluations' predictions
    (ensemble_mean), the fold's predictions of the test as well."""
    write_csv(path, valid[layout.OOF_COLUMNS].assign(pred=mean, best=mean))


def eval_line(record: dict, mark: tuple[bool, int], fold: int, stage1: bool, t: TrainConfig, where: tuple[int, int],
              eta_line: str) -> str:  # fmt: skip
    """`fold 0 epoch 1: loss ... AUC ... (per language) ex/s, peak MB | ETA`, with the step when inside
    an epoch (`where`: the window and the epoch's windows) and, when evaluations are more than the epochs' ends or
    patience counts, best or not (`mark`: whether it improved, and the evaluations since the best)."""
    (window, windows), (improved, since) = where, mark
    at = f"epoch {record['epoch']}" + (f" step {window}/{windows}" if window < windows else "")
    per = " ".join(f"{k} {v:.4f}" for k, v in record["auc_per_lang"].items())
    auc = "stage 1" if stage1 else f"{metrics.judged_by(record)} {record['auc']:.4f} ({per})"
    ens = record.get("ensemble")
    if ens:  # train.eval_ensemble: what oof.csv holds now, the mean of the last evaluations
        n = len(ens["steps"])
        auc += f", mean of the last {n} evaluation{'s' * (n != 1)} {metrics.judged_by(ens)} {ens['auc']:.4f}"
    said = ""
    if not stage1 and (t.eval_every_steps or t.patience):
        said = " | best" if improved else f" | no better ({since}" + (f" of {t.patience})" if t.patience else ")")
    return (
        f"fold {fold} {at}: loss {record['loss']:.4f} {auc} {record['samples_per_second']:.0f} ex/s, "
        f"peak {record['peak_memory_mb']:.0f} MB{said}{eta_line}"
    )


def evaluated(history: list[dict], epoch: int, windows: int) -> bool:
    """The epoch's end has been evaluated (a resume state saved between its last step and that may not). An
    evaluation is at its epoch's end when its step is (records written before evaluations inside epochs have
    none)."""
    return any(h["epoch"] == epoch + 1 and h.get("step", h["epoch"] * windows) == h["epoch"] * windows for h in history)


def used_up_line(fold: int, history: list[dict], best: dict, patience: int) -> str:
    """What a fold resumed with its patience already used up says: it stops at once, keeping its best."""
    last, n, name = history[-1].get("step", 0), best["since"], metrics.judged_by(history[-1])
    return (
        f"fold {fold}: train.patience={patience} is already used up: no better {name} than step "
        f"{best['step']}'s ({best['auc']:.4f}) in the {n} evaluation{'s' * (n != 1)} up to step {last}; "
        f"stopping at once, keeping step {best['step']}"
    )
