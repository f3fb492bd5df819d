"""The `model` section: the model every fold trains, its tiny architecture and LoRA."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import pooling as poolings
from pipeline.schema.base import FRACTION, LATER, NEVER, POSITIVE, Above, at_least, section, setting


@dataclass(frozen=True)
class TinyConfig:
    """The XLM-R architecture at toy size, built from a config (no download), used when `model.name=tiny`."""

    layers: int = setting(2, "transformer layers", within=at_least(1))
    hidden: int = setting(128, "hidden size, a multiple of `heads`", within=at_least(1))
    heads: int = setting(4, "attention heads", within=at_least(1))
    intermediate: int = setting(512, "feed-forward size", within=at_least(1))
    vocab: int = setting(
        4000, "the SentencePiece-style unigram vocabulary trained on the competition's texts", within=at_least(16)
    )


@dataclass(frozen=True)
class LoraConfig:
    """LoRA ([training.md](training.md#lora-one-size-up)): the encoder frozen, in half precision where the run
    computes in it, low-rank adapters on its projections trained in fp32 beside the head; the fold saves those
    alone. `r=0` trains every weight."""

    r: int = setting(
        0,
        "the adapters' rank: above 0 the encoder is frozen in half precision and adapters of this rank are trained "
        "beside the head, and a fold saves those alone; at 0 every weight is trained "
        "([training.md](training.md#lora-one-size-up))",
        within=at_least(0, " (0: off)"),
    )
    alpha: float = setting(16.0, "the adapters' scale is `alpha / r`", within=POSITIVE)
    dropout: float = setting(0.05, "dropout on the adapters' input", within=FRACTION)
    targets: str = setting("all", "the projections that get adapters: `qv` (query, value), `attention` (query, key, "
                           "value, output) or `all` (those and the feed-forward's two); ModernBERT (mmBERT) fuses "
                           "query, key and value in one projection and takes `attention` or `all`",
                           choices=("qv", "attention", "all"))  # fmt: skip
    quantize: str = setting("none", "the frozen base in `8bit` or `4bit` (NF4), bitsandbytes on a CUDA GPU, for a "
                            "pretrained `model.name`; `none`: half precision (fp32 in an fp32 run)",
                            choices=("none", "8bit", "4bit"))  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    # the model is named by fingerprint.model_identity, not by where it was read from
    name: str = setting("tiny", "`tiny`, a hub name (`xlm-roberta-large`) or a local folder", role=NEVER)
    path: str = setting("", "a folder holding `model.name`'s files (an attached Kaggle dataset, a local copy): "
                        "where they are read from, while `model.name` says what they are, so a fold trained from a "
                        "copy counts wherever the same name is used", role=NEVER)  # fmt: skip
    max_length: int = setting(128, "tokens per comment, no longer than a local model folder's position embeddings "
                              "(512 for XLM-R)", within=at_least(8))  # fmt: skip
    pooling: str = setting("mean", poolings.setting_doc(), choices=tuple(poolings.POOLINGS), role=LATER)
    dropout: float = setting(0.1, "the model's hidden and attention dropout", within=FRACTION)
    # exact attention whichever kernel computes it (rounding apart): pipeline.core.attention says why
    attn_implementation: str = setting("auto", "the encoder's attention kernel: `auto` (transformers' choice: `sdpa` "
                                       "where the family has it), `sdpa`, `eager`, or `flash_attention_2` (the "
                                       "flash_attn package, an Ampere or newer GPU); the same attention up to "
                                       "rounding, so no part of a fold's fingerprint",
                                       choices=("auto", "sdpa", "eager", "flash_attention_2"), role=NEVER)  # fmt: skip
    trim_vocab: bool = setting(
        False,
        "keep only the embedding rows of tokens the competition's texts use; the id map "
        "is saved beside each fold's weights",
    )
    init_from: str = setting("", "an experiment whose stage-1 model (its fold -1) every fold starts from")
    # LATER: left out of a fold's fingerprint while empty, so folds trained before it existed keep theirs
    init_folds: str = setting("", "an earlier experiment of the same folds and prepared tables whose fold k each fold "
                              "k starts from (its weights and head): a per-language specialist on a stage-2 "
                              "experiment ([recipes.md](recipes.md#per-language-specialists)); not with "
                              "`model.init_from`; under LoRA, fold k's adapters go over fold k merged",
                              role=LATER)  # fmt: skip
    # reach the fold through the stage-1 model's own fingerprint
    init_args: tuple[str, ...] = setting((), "how that stage-1 model is trained where the run makes it (`make stage1`, "
                                         "the Kaggle notebook): overrides of this config, e.g. `[train.epochs=1, "
                                         "train.lr=2e-5]`; `name`, `init_from` and `folds` are set for it",
                                         role=NEVER)  # fmt: skip
    tiny: TinyConfig = section(TinyConfig, "the tiny architecture")
    # in a fold's fingerprint only while on: folds trained before LoRA existed keep theirs
    lora: LoraConfig = section(LoraConfig, "LoRA fine-tuning", when=("model.lora.r", Above(0)))
