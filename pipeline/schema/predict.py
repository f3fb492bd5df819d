"""The `predict` and `blend` sections: how the folds' test predictions, and experiments, become a submission."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.schema.base import setting


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
    training_rows: bool = setting(
        False,
        "`true`: each fold also predicts the training-only rows into `fold<k>/training.csv` (id, source, prob), "
        "batched by length like the test rows and cached likewise (`training.json`): what a student's "
        "`data.relabel_from` mixes into their targets ([recipes.md](recipes.md#relabelled-training-rows))",
    )
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
    route: tuple[str, ...] = setting((), "`lang:experiment` entries (`[es:rs-es,it:rs-it]`): a route, not a weighted "
                                     "blend: each language's OOF and test rows from the experiment named for it, the "
                                     "rest from the one member (the fallback), all probabilities, scored on the "
                                     "routed OOF ([recipes.md](recipes.md#per-language-specialists))")  # fmt: skip
    route_scale: str = setting(
        "fallback", "a route's routed rows on the fallback's scale: `fallback` (each routed language's rows keep the "
        "specialist's order on the fallback's values of those very rows, fold by fold: the pooled AUC compares "
        "languages as the fallback did) or `own` (the specialist's probabilities as they are)",
        choices=("fallback", "own"),
    )  # fmt: skip
    name: str = setting("", "the blend's folder and submission name; empty means the members joined by `+`")
    step: float = setting(
        0.05,
        "weight grid step of the coordinate search on the simplex",
        within=((lambda v: 0 < v <= 0.5), "a number in (0, 0.5], e.g. 0.05"),
    )
