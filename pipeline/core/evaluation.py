"""When a fold is evaluated, which evaluation is its best, and when it stops for want of a better one.

A fold is evaluated on its validation rows at every epoch's end and, with train.eval_every_steps = N, every N
optimizer steps counted over the whole fold. The best evaluation by AUC keeps its weights and OOF
predictions (a later, worse one leaves them); with train.patience = P the fold stops once P evaluation intervals
(train.eval_every_steps steps, else an epoch) have passed since its best evaluation without a better one:
counted in steps, so that an epoch's end evaluated a few steps after an evaluation inside it counts for those
few steps, not for a whole evaluation. A stage-1 model has no validation rows: its last evaluation is its model.
"""

from __future__ import annotations

import numpy as np

from pipeline.core import distributed, loop
from pipeline.inputs.tokens import Ragged
from pipeline.schema import Config


def predict_rows(model, d: distributed.Dist, data: Ragged, idx: np.ndarray, cfg: Config, prec: str, pad_id: int):
    """Each rank predicts a shard; gathered back so every fold row is scored exactly once."""
    pos = np.arange(len(idx))[d.rank :: d.world]
    preds = loop.predict(
        model, data, idx[pos], cfg.train.eval_batch, prec, d.device, pad_id, progress=d.is_main, desc="valid"
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


def exhausted(best: dict, last_step: int, patience: int, interval: int, stage1: bool) -> bool:
    """train.patience evaluation intervals (`interval` optimizer steps) from the best evaluation to the last one
    (at optimizer step `last_step`) without a better AUC: the fold stops (never a stage-1 model)."""
    return patience > 0 and not stage1 and best["since"] > 0 and last_step - best["step"] >= patience * interval
