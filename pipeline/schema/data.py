"""The `data` section: the competition's files and the tables made from them."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.schema.base import FRACTION, LATER, NEVER, POSITIVE, SEED, Above, Given, at_least, setting


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
    extra_files: tuple[str, ...] = setting((), "translated train CSVs added as training rows: paths, names in the "
                                           "competition or dataset folders, or glob patterns "
                                           "(`jigsaw-toxic-comment-train-google-*-cleaned.csv`). Each needs "
                                           "`comment_text, toxic`; the language is the one given per file "
                                           "(`file.csv:es`), else the `lang` column, else read from the file name "
                                           "(`...-google-es-cleaned.csv` is `es`)")  # fmt: skip
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
    hold_out_long: bool = setting(
        True,
        "with `data.held_out`: also every source comment whose translation in a test language without validation "
        "rows falls in the estimate's longest length bucket by the model's tokenizer, so that the estimate has long "
        "stand-in rows (the tiny model's tokenizer comes after the split: none)",
        role=LATER,
        when=("data.held_out", Above(0)),
    )
    normalise_text: bool = setting(
        False,
        "every source's texts on one line, whitespace collapsed and talk-page layout (line markers, `==` headings, "
        "`''` quotes, magic words) removed, as the test's come: a layout only the training files have is a cue to "
        "the source, not to toxicity (`pipeline/inputs/texts.py`)",
        role=LATER,
    )
    soft_labels: bool = setting(
        False,
        "training-only rows keep a fractional `toxic` as a soft target (the unintended-bias file's share of raters, a "
        "soft pseudo-label); rows that are scored (validation and held-out rows) are 0/1 whatever, as the AUC needs. "
        "`make data` says how many soft rows each source gave",
        role=LATER,
    )
    relabel_from: str = setting(
        "",
        "an experiment whose fold-k predictions of the training-only rows (`predict.training_rows=true`) are mixed "
        "into those rows' targets for this experiment's fold k; needs `data.soft_labels=true`, scored rows never "
        "change ([recipes.md](recipes.md#relabelled-training-rows))",
        role=LATER,
    )
    relabel_weight: float = setting(
        0.5,
        "with `data.relabel_from`: a training-only row's target is `(1 - w) * label + w * teacher's probability`",
        within=((lambda v: 0 < v <= 1), "a number in (0, 1]"),
        role=LATER,
        when=("data.relabel_from", Given()),
    )
    group_encoder: str = setting(
        "",
        "a sentence encoder folder (Hugging Face) that finds the translations of one "
        "comment in translated files without the English comment's id, for "
        "`data.held_out`; empty: matched by what translation keeps (rough)",
        role=LATER,
    )
