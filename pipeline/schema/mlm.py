"""The `mlm` section: `make mlm`, masked-language-model training of the encoder on the competition's texts before
any fold fine-tunes it (pipeline.mlm)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.schema.base import FRACTION, NEVER, POSITIVE, at_least, setting


@dataclass(frozen=True)
class MlmConfig:
    steps: int = setting(
        1000, "optimizer steps of the run (the learning rate warms up, then falls linearly to 0 at the last)",
        within=at_least(1),
    )  # fmt: skip
    max_steps: int = setting(
        0,
        "a smoke run: stop after N optimizer steps, the schedule still planned for `mlm.steps`; its folder is one "
        "of its own fingerprint that a full run trains again (0: off)",
        within=at_least(0, " (0: off)"),
    )
    lr: float = setting(5e-5, "peak learning rate (AdamW, weight decay 0.01)", within=POSITIVE)
    warmup: float = setting(0.06, "fraction of `mlm.steps` the learning rate warms up over", within=FRACTION)
    mask_prob: float = setting(
        0.15,
        "share of a text's tokens (special tokens never) the loss is taken on: 80% of them masked, 10% a random "
        "token, 10% kept, as BERT and XLM-R were pretrained",
        within=((lambda v: 0 < v < 1), "a number in (0, 1)"),
    )
    micro_batch: int = setting(16, "texts per optimizer step", within=at_least(1))
    max_length: int = setting(
        128, "tokens a text is cut to (special tokens included), at most what the model's positions take (the tiny "
        "model's: `model.max_length`)",
        within=at_least(8),
    )  # fmt: skip
    save_every: int = setting(
        100,
        "save a resume state (`models/<name>/mlm.resume.pt`) every N optimizer steps: a killed run goes on from the "
        "last one, to the same weights (0: none, a killed run starts again from its first step)",
        within=at_least(0, " (0: no resume state)"),
        role=NEVER,
    )
