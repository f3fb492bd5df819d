"""A submission routed by language (`blend.route`): each routed language's OOF and test rows taken from the
experiment named for it, every other row from a fallback. Pure functions of the predictions; pipeline.blend
reads the experiments and writes the route's folds.

The routed rows must be the fallback's very rows (the same ids in the same folds, with the same labels): a
specialist made on the fallback's prepared tables (train.langs, model.init_folds) has them, so the routed
OOF is out-of-fold row by row and its estimate is as honest as each experiment's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.errors import PipelineError
from pipeline.files import file_record, json_digest, write_csv, write_json
from pipeline.scoring import metrics


def parse(entries: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`blend.route`'s `lang:experiment` entries as {lang: experiment} (pipeline.validation checked them)."""
    return dict(entry.split(":", 1) for entry in entries)


def read_by(members: tuple[str, ...] | list[str], entries: tuple[str, ...] | list[str]) -> list[str]:
    """Every experiment a blend or route reads, each once: its members (a route's one, the fallback), then the
    experiments `blend.route`'s entries name. A route's folder is named by them all (layout.blend_name)."""
    return list(dict.fromkeys([*members, *parse(entries).values()]))


def record(route: dict[str, str], fallback: str, scale: str) -> dict[str, str]:
    """What a route's folds and cv.json record: {lang: experiment, "fallback": ..., "scale": blend.route_scale}."""
    return {**route, "fallback": fallback, "scale": scale}


def languages(recorded: dict[str, str]) -> dict[str, str]:
    """A recorded route's {lang: experiment} (record's other keys left out)."""
    return {k: v for k, v in recorded.items() if k not in ("fallback", "scale")}


def specialist_line(stage: str, langs: tuple[str, ...], name: str, rows: int) -> str:
    """What `make predict` and `make baseline` say of a specialist (train.langs): its languages' test rows in each
    fold's test.csv and no submission of its own, and the route that makes it part of one."""
    said = ",".join(langs)
    return (
        f"{stage}: train.langs=[{said}]: {rows:,} test rows of {said} in each fold's {layout.TEST_PREDS}; no "
        f"submission: route them (blend.route={langs[0]}:{name}, recipes.md#per-language-specialists)"
    )


def on_scale_of(order_by: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` (the fallback's predictions of some rows) given out in the order of `order_by` (a specialist's of
    the same rows): the row the specialist ranks r-th gets the r-th smallest value, rows it ties share their values'
    mean. The rows' order is the specialist's, the distribution the fallback's: no label is read."""
    order_by, values = np.asarray(order_by, np.float64), np.sort(np.asarray(values, np.float64))
    order = np.argsort(order_by, kind="stable")
    block = np.r_[0, np.cumsum(np.diff(order_by[order]) != 0)]  # tied specialist values: one block
    means = np.bincount(block, weights=values) / np.bincount(block)
    out = np.empty_like(values)
    out[order] = means[block]
    return out


def routed_oof(base: pd.DataFrame, by_lang: dict[str, tuple[str, pd.DataFrame]], own: bool = False) -> pd.DataFrame:
    """`base`'s OOF rows (id, lang, toxic, fold, pred) with each routed language's `pred` from its experiment's
    OOF ({lang: (name, oof)}), put on the fallback's values of those rows fold by fold (on_scale_of) unless `own`;
    refused in one line where that experiment's rows of the language are not the base's."""
    out = base.drop(columns=["best"], errors="ignore").copy()  # `best`: one model's kept weights, not the route's
    for lang, (name, theirs) in by_lang.items():
        mine = (out["lang"] == lang).to_numpy()
        ours = out.loc[mine]
        rows = theirs[theirs["lang"] == lang].set_index("id")
        same = set(rows.index) == set(ours["id"]) and len(rows) == len(ours)
        same = same and (rows.loc[ours["id"], ["fold", "toxic"]].to_numpy() == ours[["fold", "toxic"]].to_numpy()).all()
        if not same:
            raise PipelineError(
                f"blend.route={lang}:{name}: its {lang} OOF rows ({len(rows)}) are not the fallback's ({len(ours)}) "
                "in the same folds with the same labels; make it on the fallback's data (train.langs, "
                "model.init_folds)"
            )
        theirs_pred = rows.loc[ours["id"], "pred"].to_numpy(np.float64)
        if not own:  # each fold's rows apart: a fold's predictions are one model's
            folds = ours["fold"].to_numpy()
            for k in np.unique(folds):
                at = folds == k
                theirs_pred[at] = on_scale_of(theirs_pred[at], ours["pred"].to_numpy(np.float64)[at])
        out.loc[mine, "pred"] = theirs_pred
    return out


def routed_test(base: pd.DataFrame, test: pd.DataFrame, by_lang: dict[str, tuple[str, pd.DataFrame]],
                own: bool = False) -> pd.DataFrame:  # fmt: skip
    """One fold's test predictions (id, toxic) of `base`, each routed language's rows (by `test`'s id, lang)
    from its experiment's predictions of the same fold ({lang: (name, predictions)}), on the fallback's values of
    those rows (on_scale_of) unless `own`."""
    out = base[["id", "toxic"]].copy()
    langs = out["id"].map(test.set_index("id")["lang"]).to_numpy()
    for lang, (name, theirs) in by_lang.items():
        mine = langs == lang
        got = theirs.set_index("id")["toxic"].reindex(out.loc[mine, "id"]).to_numpy(np.float64)
        if np.isnan(got).any():
            raise PipelineError(
                f"blend.route={lang}:{name}: its test predictions lack {int(np.isnan(got).sum())} of the "
                f"{int(mine.sum())} {lang} test rows (run `make predict` for it)"
            )
        out.loc[mine, "toxic"] = got if own else on_scale_of(got, out.loc[mine, "toxic"].to_numpy(np.float64))
    return out


def write_folds(out: Path, route: dict[str, str], oof: pd.DataFrame, tests: dict[int, pd.DataFrame], profile: dict,
                made: dict[str, tuple[dict, dict]]) -> dict[int, dict]:  # fmt: skip
    """Each fold's routed OOF rows, test predictions and done.json into `out`. `route`: {lang: experiment,
    "fallback": experiment}; `made`: {experiment: ({fold: done.json}, {fold: prediction record})}. done.json
    records the experiments' fold digests and files as a blend's does, so that the route counts only while they
    are as they were (pipeline.experiments.blend_fold_problem)."""
    done = {}
    for k, t in tests.items():
        rows = oof[oof["fold"] == k].drop(columns="tokens", errors="ignore")
        folder = out / layout.fold_name(k)
        write_csv(folder / layout.OOF, rows)
        write_csv(folder / layout.TEST_PREDS, t)
        by, score, per_lang = metrics.fold_score(rows, rows["pred"], profile)
        digests = {n: dones[k]["digest"] for n, (dones, _) in made.items()}
        done[k] = {
            "fold": k,
            "digest": json_digest({"route": route, "members": digests}),
            "model": "blend",  # read as a blend: no weights of its own, its members checked fold by fold
            "scale": layout.PROBABILITY,
            "members": list(made),
            "route": route,
            "auc": score,
            "metric": by,
            "auc_per_lang": per_lang,
            "profile": profile,
            "minutes": round(sum(dones[k].get("minutes", 0) for dones, _ in made.values()), 2),
            "member_digests": digests,
            "member_files": {n: files.get(k) for n, (_, files) in made.items()},
            "files": {name: file_record(folder / name) for name in (layout.OOF, layout.TEST_PREDS)},
        }
        write_json(folder / layout.DONE, done[k])
    return done
