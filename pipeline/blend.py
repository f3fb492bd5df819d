"""Stage `make blend`: experiments combined by rank-averaging, with weights fit on their OOF predictions.

Reads   models/<member>/fold<k>/oof.csv, test.csv and done.json of every member (blend.members),
        and the competition's sample_submission.csv for the ids and their order
Writes  models/<blend>/fold<k>/oof.csv    fold k's rows, blended with weights fit on the other folds only
        models/<blend>/fold<k>/test.csv   the members' fold-k test predictions, blended with those weights
        models/<blend>/fold<k>/done.json  members, weights and a digest of the members' digests
        models/<blend>/oof.csv, cv.json, cv.png   the report of `make cv`, plus members and weights
        submissions/<blend>.csv           weights fit on all OOF, on each member's test predictions
                                          (its folds ensembled first, by predict.ensemble); checked like
                                          any submission

Each member's predictions are rank-normalised to [0, 1] (AUC only sees order, and members on other
scales then count alike); the blend is a weighted mean of those ranks, weights non-negative and summing
to one, chosen by a coordinate search on the simplex that maximises the OOF AUC.

Honest OOF: the weights applied to fold k's rows are fit on the other folds' OOF rows only (nested), so
the blend's OOF AUC is an out-of-fold estimate like a member's. The same fold-k weights blend the
members' fold-k test predictions in fold<k>/test.csv, so fold k's prediction never depends on fold k's
labels (a fold-safe teacher for pseudo-labels).

One set of weights for all languages, not one per language: the competition's metric is a single AUC
over all test rows together, and test holds languages (fr, pt, ru) that no validation fold has, so
per-language weights would have nothing to be fit on for them; per language, a fold also has few
positives, and weights fit on them overfit.

The blend's folder holds no model: its members and weights are in cv.json and each fold's done.json.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import metrics, predict
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import atomic_dir, json_digest, read_json, write_csv, write_json

OOF_COLUMNS = ["id", "lang", "toxic", "fold"]


class BlendError(PipelineError):
    pass


@dataclass
class Member:
    name: str
    oof: pd.DataFrame  # id, lang, toxic, fold, pred: every completed fold's validation rows
    tests: dict[int, pd.DataFrame]  # fold -> that fold's test predictions (id, toxic)
    done: dict[int, dict]  # fold -> done.json


# ---------------------------------------------------------------- weights (pure)


def rank01(p) -> np.ndarray:
    """Average ranks scaled to [0, 1]: the order of `p`, on a scale every member shares."""
    return predict.ensemble([np.asarray(p, dtype=np.float64)], "rank")


def fit_weights(ranks: np.ndarray, y: np.ndarray, step: float = 0.05) -> np.ndarray:
    """Non-negative weights summing to one that maximise AUC(y, ranks @ w): coordinate search on the simplex.

    From equal weights, each member's weight in turn is tried at 0, step, ..., 1 with the others keeping
    their proportions; a move is kept only if it raises the AUC, until a round moves nothing.
    """
    m = ranks.shape[1]
    w = np.full(m, 1.0 / m)
    if m == 1:
        return w
    grid = np.linspace(0.0, 1.0, int(round(1.0 / step)) + 1)
    best = metrics.auc(y, mix(ranks, w))
    for _ in range(50):  # a safety bound: a round that moves raises the AUC, so the search ends well before
        moved = False
        for j in range(m):
            rest = np.delete(w, j)
            share = rest / rest.sum() if rest.sum() > 0 else np.full(m - 1, 1.0 / (m - 1))
            for t in grid:
                cand = np.insert(share * (1.0 - t), j, t)
                a = metrics.auc(y, mix(ranks, cand))
                if a > best + 1e-12:  # strictly better only: ties keep the earlier, more even weights
                    best, w, moved = a, cand, True
        if not moved:
            break
    return w


def mix(ranks: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted mean of the members' ranks, rounded to 10 decimals: sums of ranks tie often, and
    float noise (1e-16) would break those ties differently once a CSV has rounded it, changing the AUC."""
    return np.round(ranks @ w, 10)


def nested_weights(ranks: np.ndarray, y: np.ndarray, folds: np.ndarray, step: float) -> dict[int, np.ndarray]:
    """Fold k's weights, fit on the rows of every other fold: fold k's own rows are never seen."""
    return {int(k): fit_weights(ranks[folds != k], y[folds != k], step) for k in np.unique(folds)}


def apply_weights(ranks: np.ndarray, folds: np.ndarray, fold_weights: dict[int, np.ndarray]) -> np.ndarray:
    """Each row blended with its own fold's weights."""
    out = np.empty(len(ranks))
    for k, w in fold_weights.items():
        out[folds == k] = mix(ranks[folds == k], w)
    return out


# ---------------------------------------------------------------- members


def member_names(cfg: Config) -> list[str]:
    names = list(cfg.blend.members)
    if len(names) < 2:
        raise BlendError('blend.members needs two or more experiments: make blend BLEND="exp1 exp2"')
    dup = [n for n in names if names.count(n) > 1]
    if dup:
        raise BlendError(f"blend.members names {dup[0]!r} twice")
    if not 0 < cfg.blend.step <= 0.5:
        raise BlendError(f"blend.step={cfg.blend.step:g}: the weight grid step must be in (0, 0.5], e.g. 0.05")
    return names


def blend_name(cfg: Config, names: list[str]) -> str:
    name = cfg.blend.name or "+".join(names)
    if name in names:
        raise BlendError(f"blend.name={name!r} is a member's name; choose another so the member is kept")
    return name


def check_replaceable(exp: Path) -> None:
    """The blend rewrites its whole folder: refuse a folder that holds an experiment, not an earlier blend."""
    if (exp / "pipeline.yaml").exists() or any(
        "members" not in read_json(d / "done.json") for d in metrics.fold_dirs(exp)
    ):
        raise BlendError(f"{exp} holds an experiment, not a blend; choose another blend.name")


def maker(name: str, done: dict) -> str:
    """The command that writes a member's test predictions."""
    if "members" in done:
        return f'`make blend BLEND="{" ".join(done["members"])}"`'
    if done.get("model") == "tfidf+lr":
        return f"`make baseline CONFIG=...` (its experiment name plus -tfidf is {name!r})"
    return f"`make predict CONFIG=...` with the config named {name!r}"


def load_member(models: Path, name: str) -> Member:
    exp = models / name
    dirs = metrics.fold_dirs(exp)
    if not dirs:
        raise BlendError(f"blend member {name!r}: no completed folds in {exp}; train it first (`make train`)")
    done = {int(d.name[4:]): read_json(d / "done.json") for d in dirs}
    tests = {}
    for d in dirs:
        if not (d / "test.csv").exists():
            raise BlendError(
                f"blend member {name!r}: no test predictions in {d}/test.csv; run {maker(name, done[int(d.name[4:])])}"
            )
        tests[int(d.name[4:])] = pd.read_csv(d / "test.csv", dtype={"id": str}, keep_default_na=False)
    read = [pd.read_csv(d / "oof.csv", dtype={"id": str, "lang": str}, keep_default_na=False) for d in dirs]
    oof = pd.concat(read, ignore_index=True)
    if oof["id"].duplicated().any() or oof["pred"].isna().any():
        raise BlendError(f"blend member {name!r}: its OOF rows in {exp}/fold*/oof.csv repeat an id or hold NaN")
    return Member(name, oof.sort_values("id", kind="stable").reset_index(drop=True), tests, done)


def check_aligned(members: list[Member]) -> pd.Series:
    """Every member has the same OOF rows in the same folds (the same folds table) and every fold the same
    test ids; returns those test ids, in the first member's order."""
    ref = members[0]
    ids = next(iter(ref.tests.values()))["id"]
    for m in members:
        same = len(m.oof) == len(ref.oof) and (m.oof[["id", "fold"]].values == ref.oof[["id", "fold"]].values).all()
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


def fold_test(m: Member, k: int, ids: pd.Series) -> np.ndarray:
    return m.tests[k].set_index("id").loc[ids, "toxic"].to_numpy()


def member_test(m: Member, ids: pd.Series, how: str) -> np.ndarray:
    """A member's fold test predictions ensembled (predict.ensemble), in the order of `ids`."""
    return predict.ensemble([fold_test(m, k, ids) for k in sorted(m.tests)], how)


# ---------------------------------------------------------------- the stage


def digest(members: list[Member], weights, step: float) -> str:
    """What a blended fold depends on: the members' fold digests, the weights and the search step."""
    blob = {
        "members": {m.name: {k: d.get("digest") for k, d in m.done.items()} for m in members},
        "weights": [round(float(w), 6) for w in weights],
        "step": step,
    }
    return json_digest(blob)


def per_lang_table(rows: list[tuple[str, str, pd.Series]], oof: pd.DataFrame) -> str:
    """Name, weight and OOF AUC overall and per language for each (name, weight, predictions)."""
    langs = sorted(oof["lang"].unique())
    head = f"{'':<28} {'weight':>6} {'OOF AUC':>8} " + " ".join(f"{lg:>6}" for lg in langs)
    lines = [head, "-" * len(head)]
    for name, weight, p in rows:
        per = metrics.auc_by_lang(oof["toxic"], p, oof["lang"])
        lines.append(
            f"{name:<28} {weight:>6} {metrics.auc(oof['toxic'], p):>8.4f} "
            + " ".join(f"{per[lg]:>6.4f}" for lg in langs)
        )
    return "\n".join(lines)


def run(cfg: Config) -> dict:
    start = time.perf_counter()
    names = member_names(cfg)
    name = blend_name(cfg, names)
    models = Path(cfg.models_dir)
    check_replaceable(models / name)
    members = [load_member(models, n) for n in names]
    ids = check_aligned(members)
    sample_path = data_mod.raw_dir(cfg) / data_mod.SUBMISSION
    if not sample_path.exists():
        raise BlendError(f"{sample_path} is missing: the blend's submission is checked against it (CONFIG, data.dir)")
    sample = pd.read_csv(sample_path, dtype={"id": str}, keep_default_na=False)

    oof = members[0].oof[OOF_COLUMNS].copy()
    y, folds = oof["toxic"].to_numpy(), oof["fold"].to_numpy()
    ranks = np.column_stack([rank01(m.oof["pred"]) for m in members])
    fold_weights = nested_weights(ranks, y, folds, cfg.blend.step)
    weights = fit_weights(ranks, y, cfg.blend.step)  # all OOF: for the submission only, never for the OOF
    oof["pred"] = apply_weights(ranks, folds, fold_weights)

    on_test = np.column_stack([rank01(member_test(m, ids, cfg.predict.ensemble)) for m in members])
    sub = predict.check_submission(pd.DataFrame({"id": ids, "toxic": mix(on_test, weights)}), sample)

    exp = models / name
    minutes = round(sum(d.get("minutes", 0) for m in members for d in m.done.values()), 2)
    with atomic_dir(exp) as tmp:
        done = write_folds(tmp, members, oof, fold_weights, ids, cfg.blend.step)
        summary = metrics.cv_summary(oof, done)
        summary["blend"] = {
            "members": names,
            "weights": dict(zip(names, [round(float(w), 4) for w in weights])),
            "fold_weights": {k: dict(zip(names, [round(float(x), 4) for x in w])) for k, w in fold_weights.items()},
            "member_oof_auc": {m.name: metrics.auc(m.oof["toxic"], m.oof["pred"]) for m in members},
            "member_digests": {m.name: {k: d.get("digest") for k, d in m.done.items()} for m in members},
            "oof_auc_in_sample": metrics.auc(y, mix(ranks, weights)),  # optimistic: weights fit on the rows scored
            "step": cfg.blend.step,
            "members_minutes": minutes,
        }
        raw = data_mod.raw_dir(cfg)
        if (raw / predict.TEST_LABELS).exists():  # the same test score `make predict` gives an experiment
            test = pd.read_csv(raw / data_mod.TEST, usecols=["id", "lang"], dtype=str, keep_default_na=False)
            summary["test_auc"] = predict.test_score(raw, test, sub)
        write_csv(tmp / "oof.csv", oof)
        write_json(tmp / "cv.json", summary)
        metrics.plot(oof, summary, tmp / "cv.png")
    write_csv(Path(cfg.submissions_dir) / f"{name}.csv", sub)

    rows = [(m.name, f"{w:.2f}", m.oof["pred"]) for m, w in zip(members, weights)]
    rows += [
        ("blend, nested (honest)", "", oof["pred"]),
        ("blend, all-OOF weights", "", pd.Series(mix(ranks, weights))),
    ]
    print(per_lang_table(rows, oof))
    per_fold = "; ".join(f"{k}: " + " ".join(f"{x:.2f}" for x in w) for k, w in fold_weights.items())
    print(f"weights fit without each fold (fold: {' '.join(names)}): {per_fold}")
    print(
        f"blend {name}: OOF AUC {summary['oof_auc']:.4f} (best member "
        f"{max(summary['blend']['member_oof_auc'].values()):.4f})"
        + (f", test AUC {summary['test_auc']['auc']:.4f}" if "test_auc" in summary else "")
        + f", {time.perf_counter() - start:.1f} s -> "
        f"{exp}/cv.json, cv.png, {Path(cfg.submissions_dir) / (name + '.csv')}"
    )
    return summary


def write_folds(
    out: Path, members: list[Member], oof: pd.DataFrame, fold_weights: dict, ids: pd.Series, step: float
) -> dict[int, dict]:
    """Each fold's blended OOF rows, blended test predictions (the fold-k weights) and done.json."""
    done = {}
    for k, w in fold_weights.items():
        rows = oof[oof["fold"] == k]
        on_test = np.column_stack([rank01(fold_test(m, k, ids)) for m in members])
        write_csv(out / f"fold{k}" / "oof.csv", rows)
        write_csv(out / f"fold{k}" / "test.csv", pd.DataFrame({"id": ids, "toxic": mix(on_test, w)}))
        done[k] = {
            "fold": k,
            "digest": digest(members, w, step),
            "model": "blend",
            "members": [m.name for m in members],
            "weights": [round(float(x), 4) for x in w],
            "auc": metrics.auc(rows["toxic"], rows["pred"]),
            "auc_per_lang": metrics.auc_by_lang(rows["toxic"], rows["pred"], rows["lang"]),
            "minutes": round(sum(m.done[k].get("minutes", 0) for m in members), 2),
        }
        write_json(out / f"fold{k}" / "done.json", done[k])
    return done


def main(argv=None) -> int:
    args = config_mod.parser("Blend experiments with rank-average weights fit on their OOF predictions.").parse_args(
        argv
    )
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
