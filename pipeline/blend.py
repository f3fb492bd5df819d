"""Stage `make blend`: experiments combined by rank-averaging, with weights fit on their OOF predictions.

Reads   models/<member>/fold<k>/oof.csv, test.csv and done.json of every member (blend.members),
        and the competition's sample_submission.csv for the ids and their order
Writes  models/<blend>/fold<k>/oof.csv    fold k's rows, blended with weights fit on the other folds only
        models/<blend>/fold<k>/test.csv   the members' fold-k test predictions, blended with those weights:
                                          `toxic` their ranks' weighted mean, `prob` their probabilities'
                                          (what a pseudo-labelling student reads)
        models/<blend>/fold<k>/done.json  members, weights, blend.step and a digest of the members' digests
        models/<blend>/oof.csv, cv.json, cv.png   the report of `make cv`, plus members and weights
        submissions/<blend>.csv           weights fit on all OOF, on each member's test predictions
                                          (its folds ensembled first, by predict.ensemble); checked like
                                          any submission

Each member's predictions are rank-normalised to [0, 1] (AUC only sees order, and members on other
scales then count alike); the blend is a weighted mean of those ranks, weights non-negative and summing
to one, chosen by a coordinate search on the simplex that maximises the estimate of the test AUC on the
OOF (metrics.six_language: the rows that stand for the test's languages, weighted to its languages and
toxic rates), the figure `make board` ranks by.

Honest OOF: the weights applied to fold k's rows are fit on the other folds' OOF rows only (nested), so
the blend's OOF AUC is an out-of-fold estimate like a member's. The same fold-k weights blend the
members' fold-k test predictions in fold<k>/test.csv, so fold k's prediction never depends on fold k's
labels (a fold-safe teacher for pseudo-labels).

One set of weights for all languages, not one per language: the competition's metric is a single AUC
over all test rows together, and test holds languages (fr, pt, ru) that no validation fold has, so
per-language weights would have nothing to be fit on for them; per language, a fold also has few
positives, and weights fit on them overfit.

With blend.route (`lang:experiment` entries) and one member, the fallback, it routes instead of weighting:
each routed language's OOF and test rows from its experiment, fold by fold (pipeline.scoring.routing).

A blend is of the folds every member has (predict's rule: complete and current), two at least; the others
are named on stderr. The blend's folder holds no model: its members and weights are in cv.json and each
fold's done.json.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import config as config_mod
from pipeline import experiments, layout, validity
from pipeline.errors import PipelineError, run_stage
from pipeline.files import atomic_dir, file_record, json_digest, write_csv, write_json
from pipeline.schema import Config
from pipeline.scoring import metrics, paired, report, routing
from pipeline.scoring import summary as run_summary
from pipeline.scoring.blending import apply_weights, fit_weights, mix, nested_weights, rank01
from pipeline.scoring.publish import publish, refuse_one_fold
from pipeline.scoring.submission import check_submission, ensemble
from pipeline.validation import check_name


class BlendError(PipelineError):
    pass


@dataclass
class Member:
    name: str
    oof: pd.DataFrame  # id, lang, toxic, fold, pred: every completed fold's validation rows
    tests: dict[int, pd.DataFrame]  # fold -> that fold's test predictions (id, toxic)
    done: dict[int, dict]  # fold -> done.json
    left_out: dict[str, str] = field(default_factory=dict)  # fold name -> why: the folds not made yet
    made: dict[int, dict] = field(default_factory=dict)  # fold -> its predictions' sha256 (prediction_record)
    prepared: Path | None = None  # its tables' folder (a blend's or route's: its first member's); None: unread


# ---------------------------------------------------------------- members


def member_names(cfg: Config) -> list[str]:
    names = list(cfg.blend.members)
    if cfg.blend.route and len(names) != 1:  # the route's other experiments are named in blend.route
        raise BlendError(f"blend.route needs one member, the fallback of the languages it does not route; it has "
                         f"{len(names)}: make blend BLEND=<fallback> ARGS=blend.route=[..]")  # fmt: skip
    if len(names) < 2 and not cfg.blend.route:
        raise BlendError('blend.members needs two or more experiments: make blend BLEND="exp1 exp2"')
    dup = [n for n in names if names.count(n) > 1]
    if dup:
        raise BlendError(f"blend.members names {dup[0]!r} twice")
    return names


def blend_name(cfg: Config, names: list[str]) -> str:
    name = check_name(layout.blend_name(cfg, names), "blend.name")  # the members' names are checked at load
    if name in names:
        raise BlendError(f"blend.name={name!r} is a member's name; choose another so the member is kept")
    return name


def check_replaceable(exp: Path) -> None:
    """The blend rewrites its whole folder: refuse a folder that holds an experiment, not an earlier blend."""
    if (exp / layout.RUN_CONFIG).exists() or any(
        "members" not in (validity.read_done(d) or {}) for d in layout.done_dirs(exp).values()
    ):
        raise BlendError(f"{exp} holds an experiment, not a blend; choose another blend.name")


def load_member(cfg: Config, name: str) -> Member:
    """A member's folds through the same rule as predict's: complete, intact and current for the member's own
    inputs and settings, with their test predictions. A fold not made yet is left out and named on stderr; a
    finished fold that does not count (stale, damaged, without test predictions) refuses the member."""
    exp = layout.experiment_dir(cfg, name)
    needs = (layout.OOF, layout.TEST_PREDS)
    try:
        use, left_out = experiments.experiment_check(cfg, name, needs)
        finished = {layout.fold_name(k) for k in layout.done_dirs(exp)}
        if not use or finished & set(left_out):
            raise experiments.refusal(cfg, name, left_out)
    except PipelineError as e:
        raise BlendError(f"blend member {e}") from None
    dirs = {layout.fold_index(d): d for d in use}
    done = {k: validity.read_done(d) for k, d in dirs.items()}
    tests = {k: pd.read_csv(d / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False) for k, d in dirs.items()}
    prepared = experiments.prepared_folder(cfg, exp)  # its lengths.csv: the OOF rows' tokens the estimate weighs
    oof = report.read_oof(list(dirs.values()), prepared)
    if oof["id"].duplicated().any() or oof["pred"].isna().any():
        raise BlendError(f"blend member {name!r}: its OOF rows in {exp}/fold*/oof.csv repeat an id or hold NaN")
    made = {k: experiments.prediction_record(d) for k, d in dirs.items()}
    return Member(name, oof.sort_values("id", kind="stable").reset_index(drop=True), tests, done, left_out, made,
                  prepared)  # fmt: skip


def shared_folds(members: list[Member], at_least: int = 2) -> list[Member]:
    """The members cut to the folds every one of them has: a blend of some folds, as predict ensembles the
    folds there are. Two at least for a blend: fold k's weights are fit on the other folds' rows (a route fits
    none: one is enough)."""
    shared = sorted(set.intersection(*(set(m.done) for m in members)))
    if len(shared) < at_least:
        have = ", ".join(f"{m.name} {sorted(m.done)}" for m in members)
        raise BlendError(
            f"the members share {len(shared)} usable fold(s) ({have}); a blend needs two, since each fold's "
            "weights are fit on the others: train the missing folds (`make train` with its CONFIG and ARGS)"
        )
    cut = []
    for m in members:
        if m.left_out:  # said once the blend can be made, so that a refusal stays one line
            print(f"blend: {m.name} leaves out {validity.describe(m.left_out)}", file=sys.stderr)
        if len(shared) < len(m.done):
            print(f"blend: {m.name} blended on folds {shared} only, the folds every member has", file=sys.stderr)
        oof = m.oof[m.oof["fold"].isin(shared)].reset_index(drop=True)
        cut.append(replace(m, oof=oof, tests={k: m.tests[k] for k in shared}, done={k: m.done[k] for k in shared},
                           made={k: m.made[k] for k in shared if k in m.made}))  # fmt: skip
    return cut


def check_aligned(members: list[Member]) -> pd.Series:
    """Every member has the same OOF rows in the same folds with the same labels (the same folds table, made
    from the same files) and every fold the same test ids; returns those test ids, in the first member's order."""
    ref = members[0]
    ids = next(iter(ref.tests.values()))["id"]
    for m in members:
        same = len(m.oof) == len(ref.oof) and (m.oof[["id", "fold"]].values == ref.oof[["id", "fold"]].values).all()
        if same and not (m.oof["toxic"].to_numpy() == ref.oof["toxic"].to_numpy()).all():
            raise BlendError(
                f"blend member {m.name!r}: its OOF labels differ from {ref.name!r}'s on "
                f"{int((m.oof['toxic'] != ref.oof['toxic']).sum())} rows (made from other validation files); "
                "make both from the same data"
            )
        if not same:
            raise BlendError(
                f"blend member {m.name!r}: its OOF rows differ from {ref.name!r}'s "
                f"({len(m.oof)} rows in folds {sorted(m.done)} against {len(ref.oof)} in {sorted(ref.done)}); "
                "members need every fold trained on the same folds table (same data settings)"
            )
        for k, t in m.tests.items():
            if t["id"].duplicated().any() or set(t["id"]) != set(ids):
                raise BlendError(f"blend member {m.name!r}: fold{k}/test.csv holds other test ids than {ref.name!r}")
    return ids


def fold_test(m: Member, k: int, ids: pd.Series, column: str = "toxic") -> np.ndarray:
    return m.tests[k].set_index("id").loc[ids, column].to_numpy()


def fold_prob(m: Member, k: int, ids: pd.Series) -> np.ndarray | None:
    """A member's fold-k test probabilities: a model's predictions, a blend's `prob`; None where it has none."""
    if experiments.pred_scale(m.done[k]) == layout.PROBABILITY:
        return fold_test(m, k, ids)
    return fold_test(m, k, ids, "prob") if "prob" in m.tests[k] else None


def member_test(m: Member, ids: pd.Series, how: str) -> np.ndarray:
    """A member's fold test predictions ensembled (predict.ensemble), in the order of `ids`."""
    return ensemble([fold_test(m, k, ids) for k in sorted(m.tests)], how)


# ---------------------------------------------------------------- the stage


def digest(members: list[Member], weights, step: float) -> str:
    """What a blended fold depends on: the members' fold digests, the weights and the search step."""
    blob = {
        "members": {m.name: {k: d.get("digest") for k, d in m.done.items()} for m in members},
        "weights": [round(float(w), 6) for w in weights],
        "step": step,
    }
    return json_digest(blob)


def members_table(rows: list[tuple[str, str, pd.DataFrame, str]], oof: pd.DataFrame, profile: dict) -> str:
    """Name, weight, every metric (metrics.METRICS; the six-language AUC is what the weights maximise) and
    the AUC per test language, for each (name, weight, predictions: `pred` and, of a trained member, `best`,
    the kept weights' that its Brier is of, their scale)."""
    figures = [(name, weight, metrics.figures(oof.assign(**{c: p[c].to_numpy() for c in p}), profile, scale))
               for name, weight, p, scale in rows]  # fmt: skip
    langs = list(figures[0][2]["per_lang"]) if figures else []
    head = report.figures_head(f"{'':<28} {'weight':>6}", langs, minutes=False)
    lines = [head, "-" * len(head)]
    lines += [report.figures_line(f"{name:<28} {weight:>6}", f, langs) for name, weight, f in figures]
    return "\n".join(lines)


@dataclass
class Fit:
    """The members' OOF ranks and the weights fit on them: nested per fold (the honest OOF) and on all rows."""

    oof: pd.DataFrame  # id, lang, toxic, fold, pred: each fold's rows blended with the weights fit without it
    ranks: np.ndarray  # rows x members
    weights: np.ndarray  # fit on all OOF: for the submission only, never for the OOF
    fold_weights: dict[int, np.ndarray]


def fit(members: list[Member], step: float, profile: dict) -> Fit:
    """The weights that maximise the estimate of the test AUC (metrics.six_language, a weighted AUC) on the
    OOF, each fold's fit without its rows."""
    # with each row's token count where the member has them: the estimate weights by length
    oof = members[0].oof[[c for c in (*layout.OOF_COLUMNS, "tokens") if c in members[0].oof]].copy()
    y, folds = oof["toxic"].to_numpy(), oof["fold"].to_numpy()
    ranks = np.column_stack([rank01(m.oof["pred"]) for m in members])
    fold_weights = nested_weights(ranks, y, folds, step, lambda rows: metrics.row_weights(oof[rows], profile))
    oof["pred"] = apply_weights(ranks, folds, fold_weights)
    return Fit(oof, ranks, fit_weights(ranks, y, step, metrics.row_weights(oof, profile)), fold_weights)


def blend_profile(members: list[Member], test: pd.DataFrame) -> dict:
    """The test profile the members' folds were scored by (their done.json), else the one of their OOF's
    validation rows and the test's languages (every fold is there: every validation row); with the test's
    length mix of the first member's tables where it has none."""
    first = members[0]
    profile = report.profile_of(first.done) or metrics.test_profile(first.oof[metrics.on_validation(first.oof)],
                                                                    test["lang"])  # fmt: skip
    return metrics.with_test_lengths(profile, first.prepared) if first.prepared is not None else profile


def read_sample_submission(cfg: Config) -> pd.DataFrame:
    path = layout.raw_dir(cfg) / layout.SAMPLE_SUBMISSION
    if not path.exists():
        raise BlendError(f"{path} is missing: the blend's submission is checked against it (CONFIG, data.dir)")
    return pd.read_csv(path, dtype={"id": str}, keep_default_na=False)


def blend_summary(cfg: Config, members: list[Member], f: Fit, done: dict, profile: dict) -> dict:
    """The CV report of the blended OOF, with members and weights (publish adds the test score)."""
    names = [m.name for m in members]
    summary = report.cv_summary(f.oof, done, profile)
    in_sample = f.oof.assign(pred=mix(f.ranks, f.weights))
    summary["blend"] = {
        "members": names,
        "weights": dict(zip(names, [round(float(w), 4) for w in f.weights])),
        "fold_weights": {k: dict(zip(names, [round(float(x), 4) for x in w])) for k, w in f.fold_weights.items()},
        # every metric of each member's own OOF, as the blend's own `metrics`
        "member_metrics": {m.name: metrics.scores(m.oof, profile, member_scale(m)) for m in members},
        "objective": metrics.SIX.key,  # what the weights maximise: the estimate the board ranks by
        "member_digests": {m.name: {k: d.get("digest") for k, d in m.done.items()} for m in members},
        # optimistic: the weights fit on the rows scored
        "metrics_in_sample": metrics.scores(in_sample, profile, layout.RANK),
        "step": cfg.blend.step,
        "members_minutes": round(sum(d.get("minutes", 0) for m in members for d in m.done.values()), 2),
    }
    return summary


def member_scale(m: Member) -> str:
    return report.pred_scale(m.done)


def print_report(name: str, members: list[Member], f: Fit, summary: dict, seconds: float, paths: str,
                 profile: dict, groups: pd.DataFrame | None = None) -> None:  # fmt: skip
    rows = [(m.name, f"{w:.2f}", m.oof[[c for c in ("pred", "best") if c in m.oof]], member_scale(m))
            for m, w in zip(members, f.weights)]  # fmt: skip
    rows += [
        ("blend, nested (honest)", "", f.oof[["pred"]], layout.RANK),
        ("blend, all-OOF weights", "", pd.DataFrame({"pred": mix(f.ranks, f.weights)}), layout.RANK),
    ]
    print(members_table(rows, f.oof, profile))
    per_fold = "; ".join(f"{k}: " + " ".join(f"{x:.2f}" for x in w) for k, w in f.fold_weights.items())
    print(f"weights fit without each fold (fold: {' '.join(m.name for m in members)}): {per_fold}")
    six, valid = metrics.SIX, metrics.BY_KEY["valid_auc"]
    best = against_best(members, f, summary, profile, groups)
    print(
        f"blend {name}: {six.header} {metrics.shown(summary['metrics'][six.key], six.fmt)}"
        + (f" (best member {best})" if best != "-" else "")  # no member with the figure: nothing to compare
        + f", {valid.header} {metrics.shown(summary['metrics'][valid.key], valid.fmt)}"
        + (f", test AUC {summary['test_auc']['auc']:.4f}" if "test_auc" in summary else "")
        + f", {seconds:.1f} s -> {paths}"
    )


def against_best(members: list[Member], f: Fit, summary: dict, profile: dict, groups: pd.DataFrame | None) -> str:
    """The best member by the 6-lang AUC, its figure, and the blend's (nested OOF) difference to it with its paired
    interval (paired.interval: whether the blend is better beyond the rows' noise); '-' where no member has the
    figure, as every table shows one that is not there."""
    six, theirs = metrics.SIX.key, summary["blend"]["member_metrics"]
    scored = [m for m in members if not math.isnan(theirs[m.name][six])]
    if not scored:
        return "-"
    best = max(scored, key=lambda m: theirs[m.name][six])
    said = f"{best.name} {theirs[best.name][six]:{metrics.SIX.fmt}}"
    iv = paired.interval(f.oof, best.oof, profile, groups) if not math.isnan(summary["metrics"][six]) else None
    return said + (f"; the blend less it {iv.shown()}, the {paired.LEVEL:.0%} paired interval" if iv else "")


def run(cfg: Config) -> dict:
    start = time.perf_counter()
    names = member_names(cfg)
    name = blend_name(cfg, routing.read_by(names, cfg.blend.route))  # a route's: by every experiment it reads
    exp = layout.experiment_dir(cfg, name)
    experiments.preflight(cfg, "blend", name)
    if cfg.blend.route:
        return run_route(cfg, start, name)
    if cfg.predict.calibration != "none":  # before any work: publish would refuse it at the end
        raise BlendError(
            f"predict.calibration={cfg.predict.calibration}: a blend's predictions are ranks, which a calibration "
            "fit on probabilities cannot map; blend with predict.calibration=none"
        )
    check_replaceable(exp)
    members = shared_folds([load_member(cfg, n) for n in names])
    ids = check_aligned(members)
    sample = read_sample_submission(cfg)
    raw = layout.raw_dir(cfg)
    test = pd.read_csv(raw / layout.TEST, usecols=["id", "lang"], dtype=str, keep_default_na=False)
    profile = blend_profile(members, test)
    f = fit(members, cfg.blend.step, profile)
    on_test = np.column_stack([rank01(member_test(m, ids, cfg.predict.ensemble)) for m in members])
    preds = mix(on_test, f.weights)
    check_submission(pd.DataFrame({"id": ids, "toxic": preds}), sample)  # before anything is written
    with atomic_dir(exp) as tmp:
        done = write_folds(tmp, members, f, ids, cfg.blend.step, profile)
        summary = blend_summary(cfg, members, f, done, profile)
        write_csv(tmp / layout.OOF, f.oof.drop(columns="tokens", errors="ignore"))
        write_json(tmp / layout.CV_JSON, summary)
        report.plot_cv(f.oof, summary, tmp / layout.CV_PNG, name)
    dirs = [layout.fold_dir(cfg, k, name) for k in sorted(done)]
    path, score = publish(cfg, raw, name, ids, [preds], test, dirs, profile, scale=layout.RANK)
    if score is not None:
        summary["test_auc"] = score
    paths = f"{exp}/cv.json, cv.png, {path}"
    groups = paired.read_groups(members[0].prepared)
    print_report(name, members, f, summary, time.perf_counter() - start, paths, profile, groups)
    print()
    print(run_summary.block(cfg, "blend", time.perf_counter() - start, name=name))
    return summary


def fold_files(members: list[Member], k: int, w: np.ndarray, ids: pd.Series) -> pd.DataFrame:
    """Fold k's blended test predictions: `toxic`, the weighted mean of the members' ranks; `prob`, of their
    probabilities, where every member has them (a teacher's labels must be probabilities, not ranks)."""
    frame = pd.DataFrame({"id": ids, "toxic": mix(np.column_stack([rank01(fold_test(m, k, ids)) for m in members]), w)})
    probs = [fold_prob(m, k, ids) for m in members]
    if all(p is not None for p in probs):
        frame["prob"] = np.column_stack(probs) @ w
    return frame


def write_folds(
    out: Path, members: list[Member], f: Fit, ids: pd.Series, step: float, profile: dict
) -> dict[int, dict]:
    """Each fold's blended OOF rows, blended test predictions (the fold-k weights) and done.json."""
    done = {}
    for k, w in f.fold_weights.items():
        # an oof.csv's columns; a fold's own figure weighted as a trained fold's is, without length
        rows = f.oof[f.oof["fold"] == k].drop(columns="tokens", errors="ignore")
        folder = out / layout.fold_name(k)
        write_csv(folder / layout.OOF, rows)
        write_csv(folder / layout.TEST_PREDS, fold_files(members, k, w, ids))
        by, score, per_lang = metrics.fold_score(rows, rows["pred"], profile)  # as a trained fold's
        done[k] = {
            "fold": k,
            "digest": digest(members, w, step),
            "model": "blend",
            "scale": layout.RANK,  # of oof.csv's pred and test.csv's toxic; test.csv's prob is a probability
            "members": [m.name for m in members],
            "weights": [round(float(x), 4) for x in w],
            "step": step,  # the weight search's grid step: a recipe's blend step is made again when it changes
            "auc": score,
            "metric": by,
            "auc_per_lang": per_lang,
            "profile": profile,
            "minutes": round(sum(m.done[k].get("minutes", 0) for m in members), 2),
            # what the fold was blended from: checked again whenever the blend is read (experiments.experiment_folds)
            "member_digests": {m.name: m.done[k]["digest"] for m in members},
            "member_files": {m.name: m.made.get(k) for m in members},  # and the very predictions it blended
            "files": {name: file_record(folder / name) for name in (layout.OOF, layout.TEST_PREDS)},
        }
        write_json(folder / layout.DONE, done[k])
    return done


def run_route(cfg: Config, start: float, name: str) -> dict:
    """A route (blend.route): each routed language's OOF and test rows from its experiment, the rest from the one
    member, fold by fold; probabilities, so that predict.calibration applies; scored on the routed OOF."""
    (fallback,) = member_names(cfg)
    route = routing.parse(cfg.blend.route)
    names = routing.read_by([fallback], cfg.blend.route)
    exp = layout.experiment_dir(cfg, name)
    check_replaceable(exp)
    members = {m.name: m for m in shared_folds([load_member(cfg, n) for n in names], at_least=1)}
    refuse_one_fold(cfg.predict.calibration, len(members[fallback].tests))  # before anything is written
    ranks = [
        n for n, m in members.items() if any(experiments.pred_scale(d) != layout.PROBABILITY for d in m.done.values())
    ]
    if ranks:  # a blend's ranks and a model's probabilities are on no common scale
        raise BlendError(f"blend.route: {ranks[0]}'s predictions are ranks (a blend's); a route joins trained "
                         "experiments' probabilities: name experiments")  # fmt: skip
    raw = layout.raw_dir(cfg)
    test = pd.read_csv(raw / layout.TEST, usecols=["id", "lang"], dtype=str, keep_default_na=False)
    base = members[fallback]
    own = cfg.blend.route_scale == "own"  # else each routed language on the fallback's scale (routing.on_scale_of)
    oof = routing.routed_oof(base.oof, {lang: (n, members[n].oof) for lang, n in route.items()}, own)
    tests = {k: routing.routed_test(t, test, {lang: (n, members[n].tests[k]) for lang, n in route.items()}, own)
             for k, t in base.tests.items()}  # fmt: skip
    profile = blend_profile([base], test)
    with atomic_dir(exp) as tmp:
        made = {n: (m.done, m.made) for n, m in members.items()}  # what each fold is routed from
        routed = routing.record(route, fallback, cfg.blend.route_scale)
        done = routing.write_folds(tmp, routed, oof, tests, profile, made)
        summary = report.cv_summary(oof, done, profile)
        summary["route"] = routed
        write_csv(tmp / layout.OOF, oof.drop(columns="tokens", errors="ignore"))
        write_json(tmp / layout.CV_JSON, summary)
        report.plot_cv(oof, summary, tmp / layout.CV_PNG, name)
    ids = tests[min(tests)]["id"]
    preds = [tests[k].set_index("id").loc[ids, "toxic"].to_numpy() for k in sorted(tests)]
    dirs = [layout.fold_dir(cfg, k, name) for k in sorted(done)]
    path, score = publish(cfg, raw, name, ids, preds, test, dirs, profile)
    if score is not None:
        summary["test_auc"] = score
    print(report.fold_table(summary))
    print(f"route {name}: {', '.join(f'{lang} from {n}' for lang, n in route.items())}, the rest from {fallback} "
          f"-> {exp}/cv.json, cv.png, {path}")  # fmt: skip
    print(run_summary.block(cfg, "blend", time.perf_counter() - start, name=name))
    return summary


def with_members(cfg: Config, members: str) -> Config:
    """cfg with blend.members from BLEND="a b c" (names apart by spaces or commas), when BLEND is given."""
    names = tuple(n for n in members.replace(",", " ").split() if n)
    return config_mod.validate(replace(cfg, blend=replace(cfg.blend, members=names))) if names else cfg


def main(argv=None) -> int:
    p = config_mod.parser("Blend experiments with rank-average weights fit on their OOF predictions.")
    p.add_argument("--members", default="", help='the experiments to blend, e.g. --members "a b" (make: BLEND)')
    args = p.parse_args(argv)
    return run_stage(lambda: run(with_members(config_mod.from_args(args), args.members)))


if __name__ == "__main__":
    sys.exit(main())
