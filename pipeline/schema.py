"""Every setting, declared once: its type and default (the frozen dataclass field), its one-line doc, its
allowed values (choices, or a range the loader checks) and its role in what a result is made from.

The role is read for the sections a fold is made from: `model` and `train` (the fold's fingerprint, in
pipeline.fingerprint) and `data` (the signature of the prepared tables, in pipeline.validity). A setting
there either changes the result (WEIGHTS), never does (NEVER: where files are read from, the device, log
cadence), counts only away from its default (LATER: added after folds were trained with that default, so
adding it left them current), or counts only while another setting has a given value (`when`: a setting
that means nothing without the other). CHOICES and RANGES below, fingerprint.NOT_WEIGHTS and
fingerprint.LATER, and the key tables of docs/configs.md (`python -m pipeline.configdoc docs/configs.md`) are
all read from these fields; nothing repeats them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import pooling as poolings

WEIGHTS, NEVER, LATER = "weights", "never", "later"  # a setting's role in what a result is made from


@dataclass(frozen=True)
class Setting:
    """What a field's metadata holds (see `setting`)."""

    doc: str
    choices: tuple = ()
    check: Callable[[typing.Any], bool] | None = None
    allowed: str = ""  # the range as the error states it
    role: str = WEIGHTS
    # (dotted key, value): counts only while that key has that value (or, an Above, is above it)
    when: tuple[str, typing.Any] | None = None
    resumable: bool = False  # decides only when a fold is evaluated and stops: a resume state continues under another


def setting(default, doc: str, *, choices: tuple = (), within: tuple | None = None, role: str = WEIGHTS,
            when: tuple[str, typing.Any] | None = None, resumable: bool = False):  # fmt: skip
    """A config field: its default and everything else about it (`within`: (test, the range in words))."""
    check, allowed = within if within else (None, "")
    meta = Setting(doc, choices, check, allowed, role, when, resumable)
    return field(default=default, metadata={"setting": meta})


def section(cls, doc: str, *, when: tuple[str, typing.Any] | None = None):
    """A nested section of the config (its keys are `<name>.<key>`), in a fingerprint as one value."""
    return field(default_factory=cls, metadata={"setting": Setting(doc, when=when)})


@dataclass(frozen=True)
class Above:
    """A `when` value that is a bound: the setting counts while the other one is above it (LoRA while r > 0)."""

    bound: float

    def holds(self, value) -> bool:
        return value > self.bound

    def __str__(self) -> str:
        return f"> {self.bound:g}"


def _finite(x: float) -> bool:
    return math.isfinite(x)


def at_least(n: int, note: str = "") -> tuple:
    return (lambda v: v >= n), f"an integer >= {n}{note}"


POSITIVE = (lambda v: _finite(v) and v > 0), "a finite number > 0"
NON_NEGATIVE = (lambda v: _finite(v) and v >= 0), "a finite number >= 0"
FRACTION = (lambda v: 0 <= v < 1), "a number in [0, 1)"
# numpy's and scikit-learn's seeds are 32-bit unsigned: -1 or 2**32 would stop the stage with their traceback
SEED = (lambda v: 0 <= v < 2**32), "an integer in [0, 4294967295]"


@dataclass(frozen=True)
class DataConfig:
    source: str = setting("sample", "`sample` (the built-in sample competition), `dir` (a folder you have) or "
                          "`kaggle` (downloaded)", choices=("sample", "dir", "kaggle"), role=NEVER)  # fmt: skip
    dir: str = setting("", "for `source=dir`: a folder holding the competition's files, read in place", role=NEVER)
    competition: str = setting(
        "jigsaw-multilingual-toxic-comment-classification",
        "the Kaggle competition (downloads, the notebook's attached competition, `make submit`)",
    )
    datasets: tuple[str, ...] = setting((), "extra Kaggle datasets (`owner/slug`): downloaded with `source=kaggle`, "
                                        "attached to the Kaggle notebook; a `data.extra_files` file the competition "
                                        "lacks must come from one of them")  # fmt: skip
    extra_files: tuple[str, ...] = setting((), "translated train CSVs added as training rows (see the table above: "
                                           "paths, names, glob patterns; `comment_text, toxic`; the language as "
                                           "`file.csv:es`, else a `lang` column, else the file name's)")  # fmt: skip
    bias_rows: int = setting(
        0, "rows of `jigsaw-unintended-bias-train.csv` to add (0: none), `toxic >= 0.5` as 1", within=at_least(0)
    )
    english_negatives: int = setting(
        20000, "non-toxic English train rows kept (all toxic rows are kept)", within=at_least(0)
    )
    folds: int = setting(
        5, "validation folds (stratified on language × label), no more than the data allows", within=at_least(2)
    )
    seed: int = setting(42, "seed of the fold assignment and of the sampled English and bias rows", within=SEED)
    sample_scale: float = setting(1.0, "size of the built-in sample competition", within=(POSITIVE[0], "a number > 0"))
    pseudo_from: str = setting(
        "",
        "an experiment or blend whose fold-k test predictions label the test rows for this "
        "experiment's fold k ([recipes.md](recipes.md#pseudo-labels))",
    )
    pseudo_labels: str = setting(
        "soft", "`soft`: the teacher's probability; `hard`: 0/1 at the confident ends only", choices=("soft", "hard")
    )
    pseudo_low: float = setting(0.1, "hard labels: at most this is 0 ...")
    pseudo_high: float = setting(
        0.9, "... at least this is 1; the middle is dropped. `0 <= pseudo_low < pseudo_high <= 1`"
    )
    held_out: float = setting(0.0, "a share of the translated rows' English source comments whose rows (every "
                              "translation, and the original) become validation rows, a group in one fold: the OOF "
                              "then covers fr, pt and ru ([recipes.md](recipes.md#six-languages-a-validation-that-"
                              "looks-like-the-test))", within=(FRACTION[0], "a number in [0, 1) (0: no translated "
                              "row held out)"), role=LATER)  # fmt: skip
    group_encoder: str = setting(
        "",
        "a sentence encoder folder (Hugging Face) that finds the translations of one "
        "comment in translated files without the English comment's id, for "
        "`data.held_out`; empty: matched by what translation keeps (rough)",
        role=LATER,
    )


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

    r: int = setting(0, "the adapters' rank; at 0 every weight is trained", within=at_least(0, " (0: off)"))
    alpha: float = setting(16.0, "the adapters' scale is `alpha / r`", within=POSITIVE)
    dropout: float = setting(0.05, "dropout on the adapters' input", within=FRACTION)
    targets: str = setting("all", "the projections that get adapters: `qv` (query, value), `attention` (query, key, "
                           "value, output) or `all` (those and the feed-forward's two)",
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
    trim_vocab: bool = setting(
        False,
        "keep only the embedding rows of tokens the competition's texts use; the id map "
        "is saved beside each fold's weights",
    )
    init_from: str = setting("", "an experiment whose stage-1 model (its fold -1) every fold starts from")
    # reach the fold through the stage-1 model's own fingerprint
    init_args: tuple[str, ...] = setting((), "how that stage-1 model is trained where the run makes it (`make stage1`, "
                                         "the Kaggle notebook): overrides of this config, e.g. `[train.epochs=1, "
                                         "train.lr=2e-5]`; `name`, `init_from` and `folds` are set for it",
                                         role=NEVER)  # fmt: skip
    tiny: TinyConfig = section(TinyConfig, "the tiny architecture")
    # in a fold's fingerprint only while on: folds trained before LoRA existed keep theirs
    lora: LoraConfig = section(LoraConfig, "LoRA fine-tuning", when=("model.lora.r", Above(0)))


@dataclass(frozen=True)
class TrainConfig:
    folds: tuple[int, ...] = setting((), "the folds to train, e.g. `[0,2]`; empty means every fold; `[-1]` a stage-1 "
                                     "model on the training-only rows", role=NEVER,
                                     within=(lambda v: all(f >= -1 for f in v),
                                             "a list of fold numbers >= 0, or -1 (a stage-1 model)"))  # fmt: skip
    epochs: int = setting(2, "the best epoch's weights are kept", within=at_least(1))
    micro_batch: int = setting(16, "examples per forward/backward on one device", within=at_least(1))
    accumulation: int = setting(
        2, "micro-batches per optimizer step; effective batch = micro × accumulation × world (GPUs)", within=at_least(1)
    )
    lr: float = setting(5e-4, "learning rate (of the head and, without layer_decay, of every layer)", within=POSITIVE)
    layer_decay: float = setting(
        1.0,
        "layer-wise learning-rate decay: each encoder layer's rate is this times the rate of the layer above it, the "
        "head's is `lr`, the embeddings' the lowest (1: off, every parameter at `lr`)",
        within=((lambda v: 0 < v <= 1), "a number in (0, 1] (1: off)"),
        role=LATER,
    )
    weight_decay: float = setting(0.01, "AdamW weight decay", within=NON_NEGATIVE)
    warmup: float = setting(
        0.1,
        "fraction of optimizer steps spent warming up (the schedule counts optimizer steps, not micro-batches)",
        within=FRACTION,
    )
    max_grad_norm: float = setting(1.0, "gradient clipping norm", within=POSITIVE)
    precision: str = setting(
        "auto",
        "`fp32`, `fp16`, `bf16` or `auto` (see the table above and [training.md](training.md#mixed-precision))",
        choices=("fp32", "fp16", "bf16", "auto"),
    )
    checkpointing: bool | str = setting(
        "auto",
        "gradient checkpointing (the same gradients, about 1.5x the time); `auto`: on only where the micro-batch "
        "would not fit without it (measured at the fold's start; on a CPU without `max_memory_gb`: off)",
        within=((lambda v: v in (True, False, "auto")), "true, false or auto"),
        role=NEVER,
    )
    optimizer: str = setting(
        "adamw", "`adamw` (fused) or `adamw8bit` (bitsandbytes, CUDA only)", choices=("adamw", "adamw8bit")
    )
    device: str = setting(
        "auto", "`auto`, `cpu`, `cuda` or `cuda:N`; one this machine does not have is refused", role=NEVER
    )
    eval_batch: int = setting(
        64, "rows per batch when scoring the validation rows and predicting test", within=at_least(1), role=NEVER
    )
    seed: int = setting(
        42,
        "seed of training (each fold's run), of the TF-IDF baseline and of `make bench`'s random data",
        within=SEED,
    )
    save_every_steps: int = setting(
        0,
        "also save a resume state every N optimizer steps (0: at epoch ends only)",
        within=at_least(0, " (0: at epoch ends only)"),
        role=NEVER,
    )
    max_bad_steps: int = setting(
        20, "consecutive non-finite optimizer steps before the fold stops", within=at_least(1), role=NEVER
    )
    max_memory_gb: float = setting(
        0.0,
        "> 0: auto-fit, the largest micro-batch that fits (same effective batch); 0: "
        "off ([training.md](training.md#auto-fit))",
        within=(NON_NEGATIVE[0], "a finite number >= 0 (0: off)"),
    )
    training_only_rows: bool = setting(
        True, "fold -1 rows (English and translated) train every fold; `false`: only the other folds' validation rows"
    )
    eval_every_steps: int = setting(
        0,
        "also evaluate every N optimizer steps (0: at epoch ends only); the best is kept",
        within=at_least(0, " (0: at epoch ends only)"),
        role=LATER,
        resumable=True,
    )
    patience: int = setting(
        0,
        "evaluations without a better AUC before the fold stops (0: never)",
        within=at_least(0, " (0: never stop early)"),
        role=LATER,
        resumable=True,
    )
    max_steps: int = setting(
        0,
        "a smoke run: each fold (and a stage-1 model) stops after N optimizer steps, evaluated and saved, a complete "
        "fold of its own fingerprint that a full run trains again (0: off)",
        within=at_least(0, " (0: off)"),
        role=LATER,
        resumable=True,
    )
    log_every_steps: int = setting(
        10,
        "a line in `fold<k>/steps.jsonl` every N optimizer steps (0: none; a smoke run, `train.max_steps`: every step)",
        within=at_least(0, " (0: no step records)"),
        role=NEVER,
    )
    tensorboard: bool = setting(
        False, "the same records as TensorBoard scalars in `models/<name>/tb/fold<k>/`", role=NEVER
    )


@dataclass(frozen=True)
class PredictConfig:
    ensemble: str = setting(
        "mean", "how the folds' test predictions are combined: `mean` or `rank`", choices=("mean", "rank")
    )
    calibration: str = setting("none", "the test predictions put on one scale across languages before they are "
                               "written (predict, baseline, blend): `none`, the default, leaves them as the folds "
                               "made them; `lang` a Platt scaling per language fit on the "
                               "OOF; `lang+prior` and each language moved to its toxic rate in the test, estimated "
                               "from the unlabelled predictions ([recipes.md](recipes.md#six-languages-a-validation-"
                               "that-looks-like-the-test))", choices=("none", "lang", "lang+prior"))  # fmt: skip
    allow_fewer_folds: bool = setting(
        False,
        "`true`: `submissions/submission.csv` is replaced even by an ensemble of fewer folds of the same experiment "
        "than it holds (by default it is kept, with a warning; `submissions/<name>.csv` is always written)",
    )


@dataclass(frozen=True)
class BlendConfig:
    """`make blend`: experiments combined with rank-average weights fit on their OOF
    ([recipes.md](recipes.md#blends))."""

    members: tuple[str, ...] = setting((), 'experiment names under `models/` (`make blend BLEND="a b"` sets this)')
    name: str = setting("", "the blend's folder and submission name; empty means the members joined by `+`")
    step: float = setting(
        0.05,
        "weight grid step of the coordinate search on the simplex",
        within=((lambda v: 0 < v <= 0.5), "a number in (0, 0.5], e.g. 0.05"),
    )


@dataclass(frozen=True)
class KaggleConfig:
    """`make kernel`, `make kernel-status`, `make kernel-output` and `make submit` ([kaggle.md](kaggle.md))."""

    dry_run: bool = setting(
        False, "`true`: write both folders (the kernel folder and the code bundle) and print the plan, push nothing"
    )
    dir: str = setting(
        "kernel", "where the kernel folder, code bundle and downloaded output are written (ignored by git)"
    )
    user: str = setting(
        "", "your Kaggle user name; empty means the authenticated one (`KAGGLE_USERNAME`, `kaggle.json`, token)"
    )
    kernel_slug: str = setting("", "empty means `jigsaw-<name>`")
    title: str = setting("", "empty means a title whose slug is `kernel_slug` (Kaggle derives the URL from the title)")
    dataset_slug: str = setting("", "the code bundle's dataset; empty means `<kernel_slug>-code`")
    kernel_type: str = setting(
        "script", "`script` or `notebook` (the same code as a one-cell `.ipynb`)", choices=("script", "notebook")
    )
    is_private: bool = setting(True, "the kernel is pushed private")
    enable_gpu: bool = setting(True, "the kernel runs with a GPU")
    model_source: str = setting(
        "",
        "the weights for `model.name`, since the notebook is offline: a dataset "
        "`owner/slug` holding a transformers folder, or a Kaggle Model "
        "`owner/model/framework/instance/version`; needed unless `model.name=tiny`",
    )
    model_subdir: str = setting(
        "",
        "the folder inside `model_source` holding `config.json`; empty means found by "
        "search (needed when it holds several models)",
    )
    timeout: int = setting(
        0,
        "session limit in seconds passed to the push (0: Kaggle's default)",
        within=at_least(0, " (seconds; 0: Kaggle's default)"),
    )
    accelerator: str = setting("NvidiaTeslaT4", "`machine_shape`: two T4s; empty leaves Kaggle's default")
    # kaggle 2.2.5's valid_push_pinning_types
    docker_image_pinning: str = setting(
        "",
        "`original` (the image of the kernel's first run), `latest`, or empty: Kaggle's default",
        choices=("", "original", "latest"),
    )
    gpus: int = setting(
        0,
        "train processes in the notebook (torchrun, one per GPU); 0 means every visible GPU",
        within=at_least(0, " (0: every visible GPU)"),
    )
    keep_weights: bool = setting(
        True,
        "copy each fold's `model.safetensors` into `/kaggle/working` (the kept output); "
        "`false`: complete folds count by their test predictions (a cut-off fold and a "
        "stage-1 model keep theirs)",
    )
    init_kernel: str = setting(
        "",
        "with `model.init_from`: a kernel (`owner/slug`, or a slug of yours) whose output "
        "holds `models/<init_from>/fold-1/`, attached so that the notebook starts from that "
        "stage-1 model instead of training it in the same session",
    )
    working_gb: float = setting(
        20.0, "what `/kaggle/working` may keep; `make kernel` refuses a larger disk plan", within=POSITIVE
    )
    time_limit_h: float = setting(
        12.0,
        "a session's limit (`kaggle.timeout` when that is shorter): no fold or epoch "
        "starts that cannot end before the deadline",
        within=(POSITIVE[0], "a finite number of hours > 0"),
    )
    margin_minutes: float = setting(
        20.0,
        "minutes kept free at the session's end besides the measured costs of "
        "saving the resume state, copying into working and predicting a fold",
        within=(NON_NEGATIVE[0], "a finite number of minutes >= 0"),
    )
    weekly_quota_h: float = setting(
        30.0, "the weekly GPU hours the time plan compares with", within=(POSITIVE[0], "a finite number of hours > 0")
    )
    tokens_per_second: float = setting(0.0, "the throughput the time plan assumes, in padded tokens a second for the "
                                       "run; 0: measured by `make bench-gpu` on a T4, else estimated",
                                       within=(NON_NEGATIVE[0],
                                               "a finite number >= 0 (0: the estimate)"))  # fmt: skip
    continue_from: str = setting(
        "",
        "`self`, `<kernel>`, `<owner>/<kernel>` or `<owner>/<kernel>/<version>`: "
        "continue from that kernel's output (the newest version that finished with folds, "
        "checked at the push)",
    )
    keep_resume: bool = setting(
        True, "keep a cut-off fold's `resume.pt` (and its best weights) in `/kaggle/working` for the next session"
    )
    has_bitsandbytes: bool = setting(
        False, "the Kaggle image carries bitsandbytes: `train.optimizer=adamw8bit` may run there"
    )
    submit_file: str = setting("", "`make submit`: the file to submit; empty means `submissions/<name>.csv`")
    submit_timeout: int = setting(
        1800,
        "`make submit`: seconds to wait for the score (0: do not wait)",
        within=at_least(0, " (seconds; 0: do not wait)"),
    )


BENCH_MODELS = ("xlm-roberta-base", "xlm-roberta-large", "xlm-roberta-xl", "tiny")  # benchmark.runner's architectures
BENCH_ROWS = ("fp32", "mp", "mp_acc", "mp_ckpt", "all3", "trim", "adamw8bit", "autofit", "lora", "lora_trim")


def _bench_model(v: str) -> bool:
    # a path that is not here yet passes: make bench refuses it before its first row, and a config packed for
    # another machine (the Kaggle notebook) still loads there
    return v in BENCH_MODELS or "/" in v or Path(v).expanduser().is_dir()


@dataclass(frozen=True)
class BenchConfig:
    """`make bench`: the memory and speed table (random weights and token ids, no download; [bench.md](bench.md))."""

    model: str = setting("xlm-roberta-base", "`xlm-roberta-base`, `xlm-roberta-large` or `xlm-roberta-xl` (the "
                         "architecture only, random weights), `tiny` (the sample's tiny XLM-R, `model.tiny`) or a "
                         "model folder (its own weights)",
                         within=(_bench_model, f"one of {', '.join(BENCH_MODELS)} or a model folder"))  # fmt: skip
    seq_len: int = setting(256, "sequence length of the random token ids", within=at_least(8))
    effective_batch: int = setting(32, "the effective batch of every row", within=at_least(1))
    micro_batch: int = setting(
        4,
        "the accumulation rows: micro_batch × (effective_batch / micro_batch); it divides `effective_batch`",
        within=at_least(1),
    )
    steps: int = setting(
        3,
        "timed optimizer steps per row, after an untimed warm-up: the median and spread of these",
        within=at_least(3, " (a median and a spread)"),
    )
    trainer: bool = setting(True, "also run each row with Hugging Face Trainer")
    vocab_used: int = setting(
        60000,
        "distinct token ids in the data (what the trimming row keeps), more than the 4 special ones",
        within=at_least(5),
    )
    max_memory_gb: float = setting(11.0, "the cap of the auto-fit row", within=POSITIVE)
    rows: tuple[str, ...] = setting(
        (),
        f"only these rows (`{' '.join(BENCH_ROWS)}`); empty: all",
        within=((lambda v: set(v) <= set(BENCH_ROWS)), f"a list of {', '.join(BENCH_ROWS)}"),
    )
    baseline: bool = setting(
        True,
        "the fp32 baseline row runs beside whatever `rows` chooses; `false` skips it (it runs only if `rows` names "
        "it; empty `rows`: every row but it), for a model whose fp32 baseline the machine cannot hold; the ratios "
        "to it then read `-`",
    )
    profile: bool = setting(
        False, "`torch.profiler` over the timed steps: top ops per row in `<model>.profile.md` (slower)"
    )
    sparse: bool = setting(
        True, "ours with sparse word-embedding gradients (as `make train`); `false`: dense, as Trainer's"
    )
    lora_r: int = setting(
        8, "the adapters' rank in the LoRA rows (their other settings are `model.lora`'s)", within=at_least(1)
    )


@dataclass(frozen=True)
class Config:
    name: str = setting(
        "sample",
        "the experiment's name: `input/prepared/<name>/`, `models/<name>/`, "
        "`submissions/<name>.csv`; a plain folder name (not empty, `.`, `..` or a path)",
    )
    input_dir: str = setting("input", "the input folder (raw files, prepared tables, token caches, locks)")
    models_dir: str = setting("models", "the models folder")
    submissions_dir: str = setting("submissions", "the submissions folder")
    data: DataConfig = section(DataConfig, "the competition's files and the tables made from them")
    model: ModelConfig = section(ModelConfig, "the model every fold trains")
    train: TrainConfig = section(TrainConfig, "how a fold trains")
    predict: PredictConfig = section(PredictConfig, "how the folds' test predictions become a submission")
    bench: BenchConfig = section(BenchConfig, "`make bench`")
    blend: BlendConfig = section(BlendConfig, "`make blend`")
    kaggle: KaggleConfig = section(KaggleConfig, "the Kaggle notebook and `make submit`")

    def to_dict(self) -> dict:
        return plain(dataclasses.asdict(self))

    def digest(self, *sections: str) -> str:
        """A short hash of the whole config, or of the named sections only."""
        d = self.to_dict()
        if sections:
            d = {s: d[s] for s in sections}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def plain(x):
    """Tuples as lists, so that the dict is plain JSON/YAML."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def value_of(cfg, dotted: str):
    """The value of a dotted key (`train.lr`) in a config."""
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


# ---------------------------------------------------------------- read from the fields


def is_section(f: dataclasses.Field) -> bool:
    return f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)


def walk(cls=Config, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Setting]]:
    """Every setting under `cls` as (dotted key, its field, its Setting), in declaration order, sections inline."""
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if is_section(f):
            yield from walk(f.default_factory, f"{key}.")
        else:
            yield key, f, f.metadata["setting"]


def unknown_keys(tree: dict, cls=Config, prefix: str = "") -> list[str]:
    """The dotted keys of a config tree (a saved pipeline.yaml) that no field declares: a newer version's settings."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    found = []
    for name, value in tree.items():
        f = fields.get(name)
        if f is None:
            found.append(f"{prefix}{name}")
        elif is_section(f) and isinstance(value, dict):
            found += unknown_keys(value, f.default_factory, f"{prefix}{name}.")
    return found


def of(key: str) -> Setting:
    """The Setting of a dotted key."""
    return next(meta for k, _, meta in walk() if k == key)


CHOICES: dict[str, tuple] = {key: meta.choices for key, _, meta in walk() if meta.choices}
# checked when a config loads, so a setting that would train nothing (micro_batch=-4 runs zero steps) or crash
# after an epoch stops before any work
RANGES: tuple[tuple[str, Callable[[typing.Any], bool], str], ...] = tuple(
    (key, meta.check, meta.allowed) for key, _, meta in walk() if meta.check is not None
)


def fields_of(section_name: str) -> dict[str, dataclasses.Field]:
    """The fields directly in a section of Config (`data`, `model`, `train`), by key."""
    return {f.name: f for f in dataclasses.fields(typing.get_type_hints(Config)[section_name])}


def roles(section_name: str) -> dict[str, Setting]:
    """The settings directly in a section, by key, with their roles."""
    return {k: f.metadata["setting"] for k, f in fields_of(section_name).items()}
