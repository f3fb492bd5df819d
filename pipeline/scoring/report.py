"""The cross-validation report: AUC per fold, OOF overall and per language, as a table, JSON and a picture.

Writes  models/<name>/oof.csv     every validation row with its out-of-fold prediction
        models/<name>/cv.json     every metric (metrics.METRICS) of the OOF and of each fold, AUC per language,
                                  the pred scale (and test_auc from predict), the test profile the estimate was
                                  weighted by, with each language's toxic rate by EM once predict has run
        models/<name>/cv.png      ROC curves per language, AUC per fold (scoring/plots.py)
        models/<name>/curves.png  each fold's training loss, validation AUC and learning rate (scoring/plots.py)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout, validity
from pipeline.files import read_json, write_csv, write_json
from pipeline.inputs import tables
from pipeline.schema import Config
from pipeline.scoring import buckets, metrics, rates
from pipeline.scoring.metrics import FROM_PRIOR, read_profile
from pipeline.scoring.plots import plot_curves, plot_cv, read_jsonl

# where a translated language's class x length link came from, as cv.json's six.lengths.link records it
VALID_LINK, OWN_LINK = "validation.csv", "own rows"


def read_oof(dirs: list[Path], prepared: Path | None = None) -> pd.DataFrame:
    """The folds' OOF rows (their oof.csv files), with `source`: validation.csv's for files written before
    the table had held-out translated rows, which recorded none; with `prepared` (the experiment's prepared
    folder), `tokens`: each row's untruncated token count from its lengths.csv, which the six-language
    estimate weights by (none without the file)."""
    frames = []
    for d in dirs:
        frame = pd.read_csv(d / layout.OOF, dtype={"id": str, "lang": str, "source": str}, keep_default_na=False)
        if "source" not in frame:
            frame.insert(len(layout.OOF_COLUMNS) - 1, "source", layout.VALID_SOURCE)
        frames.append(frame)
    oof = pd.concat(frames, ignore_index=True)
    return tables.with_tokens(oof, tables.read_lengths(prepared)) if prepared is not None else oof


def cv_summary(oof: pd.DataFrame, done: dict[int, dict], profile: dict | None = None) -> dict:
    """Every metric of metrics.METRICS over the OOF and over each fold's rows, the AUC per language (of the
    rows that stand for each test language), and with the test's profile the details of the six-language
    AUC (its languages, rates, held-out rows). `scale`: what the folds' `pred` is (their done.json)."""
    scale = pred_scale(done)
    summary = {
        "scale": scale,
        "metrics": metrics.scores(oof, profile, scale),
        "per_lang": metrics.per_language(oof, profile),
        "folds": {int(k): metrics.figures(g, profile, scale) for k, g in oof.groupby("fold")},
        "rows": len(oof),
        "fold_details": done,
    }
    if profile:  # what the six-language AUC is made of (its value: in `metrics`, NaN where a language is missing)
        six = {k: v for k, v in metrics.six_language(oof, profile).items() if k != "auc"}
        summary["six"] = {**six, "profile": profile, "held_out_rows": int((~metrics.on_validation(oof)).sum())}
        corners = metrics.six_corners(oof, profile) if not six["missing"] else None
        if corners:  # the estimate under every plausible toxic rate of the languages (the validation-rate assumption)
            summary["six"].update(corners=corners, range=[min(corners), max(corners)])
        lengths = length_figures(oof, profile) if not six["missing"] else None
        if lengths:  # what weighting by length did, and the AUC per length bucket of validation.csv's rows
            summary["six"]["lengths"] = lengths
    if "best" in oof:  # each fold's best step, chosen on the rows it is scored on: the figure reads high
        summary["best_step"] = metrics.scores(oof.assign(pred=oof["best"]), profile, scale)
    return summary


def unmatched_lengths(oof: pd.DataFrame, profile: dict) -> dict[str, float]:
    """Each test language's share of its test rows whose length bucket its weighted stand-ins do not fill: the
    test's bucket shares less the weighted stand-ins', summed where these fall short. 0 where every bucket holds
    rows enough; else the share of buckets with no stand-in rows, or too few of a class, which buckets.merged_buckets
    gave to a neighbour whose rows, of other lengths, carry it (a stand-in without a token count fills none)."""
    weights, langs = metrics.row_weights(oof, profile), oof["lang"].to_numpy()
    tokens = pd.to_numeric(oof["tokens"], errors="coerce").to_numpy(np.float64)
    out = {}
    for lang, test in (profile.get("lengths") or {}).items():
        at = (langs == lang) & (weights > 0)
        if lang not in profile["mix"] or not at.any():
            continue
        known = at & ~np.isnan(tokens)
        filled = np.bincount(
            buckets.length_buckets(tokens[known]), weights=weights[known], minlength=len(buckets.LENGTH_EDGES) + 1
        )
        # the language's weight sums to its share of the test: as shares of it, comparable with the test's
        short = np.asarray(test, np.float64) - filled / weights[at].sum()
        out[lang] = round(float(np.clip(short, 0.0, None).sum()), 4)
    return out


def length_figures(oof: pd.DataFrame, profile: dict) -> dict | None:
    """What length does to the estimate (cv.json's six.lengths): the test's and the stand-ins' bucket shares
    per language, the share of each language's test rows whose length its stand-ins could not match
    (unmatched_lengths), the effective sample sizes with and without length, the estimate without length, and
    the AUC per length bucket of validation.csv's rows, where each translated language's class x length link came
    from (seed_figures) and the languages weighted without length, with why (metrics.length_gaps); None where the
    rows carry no token counts or the profile no test lengths."""
    if "tokens" not in oof or not profile.get("lengths"):
        return None
    at = metrics.stand_in_mask(oof, profile["mix"])
    tokens = pd.to_numeric(oof["tokens"], errors="coerce")
    rows = {g: buckets.bucket_shares(tokens[at & (oof["lang"] == g).to_numpy()].dropna()) for g in profile["mix"]}
    valid = metrics.on_validation(oof) & tokens.notna().to_numpy()
    bucket = buckets.length_buckets(tokens[valid])
    y, p = oof["toxic"].to_numpy()[valid], oof["pred"].to_numpy()[valid]
    by_bucket = {name: metrics.auc(y[bucket == b], p[bucket == b]) for b, name in enumerate(buckets.bucket_names())}
    return {
        "edges": list(buckets.LENGTH_EDGES),
        "test": profile["lengths"],
        "rows": rows,
        "unmatched": unmatched_lengths(oof, profile),
        "without": metrics.six_language(oof, metrics.without_lengths(profile))["auc"],
        "ess": metrics.effective_sizes(oof, profile),
        "ess_without": metrics.effective_sizes(oof, metrics.without_lengths(profile)),
        "valid_by_bucket": by_bucket,
        "valid_bucket_rows": np.bincount(bucket, minlength=len(buckets.LENGTH_EDGES) + 1).tolist(),
        "without_length": metrics.length_gaps(oof, profile),
        **seed_figures(oof, profile),
    }


def seed_figures(oof: pd.DataFrame, profile: dict) -> dict:
    """`translated`: the languages weighted by length whose stand-ins are translated rows, and `link`: where
    their class x length link came from: validation.csv's comments (the profile's `valid_lengths`), or their own
    rows (a profile recorded before validation.csv's rows were counted: the weighting of before)."""
    real, langs = metrics.on_validation(oof), oof["lang"].to_numpy()
    at = metrics.stand_in_mask(oof, profile["mix"])
    translated = [g for g in metrics.stand_in_buckets(oof, profile) if not (real & at & (langs == g)).any()]
    seeded = buckets.seed_table(profile.get("valid_lengths")) is not None
    return {"translated": translated, "link": VALID_LINK if seeded else OWN_LINK}


def pred_scale(done: dict[int, dict]) -> str:
    """The scale of the folds' `pred`: a rank if any fold's is (its done.json), else a probability."""
    scales = {(d or {}).get("scale", layout.PROBABILITY) for d in done.values()}
    return layout.RANK if layout.RANK in scales else layout.PROBABILITY


def fold_table(summary: dict) -> str:
    """The fold table `make train` and `make cv` print: a line per fold, then the OOF; a column per metric
    (metrics.METRICS) and per test language, each named as every other table names it."""
    langs = list(summary["per_lang"])
    head = figures_head(f"{'fold':>4}  {'epochs':>6}", langs)
    lines = [head, "-" * len(head)]
    for k, scores in summary["folds"].items():
        d = summary["fold_details"].get(k, {})
        lines.append(figures_line(f"{k:>4}  {d.get('epochs', 0):>6}", scores, langs, d.get("minutes")))
    lines.append("-" * len(head))
    minutes = sum(d.get("minutes", 0) for d in summary["fold_details"].values())
    lines.append(figures_line(f"{'OOF':>4}  {'':>6}", {**summary["metrics"], "per_lang": summary["per_lang"]},
                              langs, minutes))  # fmt: skip
    if "six" in summary:
        lines.append(six_line(summary["metrics"][metrics.SIX.key], summary["six"]))
        lines += [line for line in [em_line(summary)] if line]
    lines += [line for line in [best_step_line(summary)] if line]
    judged = judged_line(summary)
    lines += [judged] if judged else []
    return "\n".join(lines)


def em_line(summary: dict) -> str:
    """`  toxic rate by EM on the test predictions ...: es 0.141 (0.150) fr 0.090 (0.151) ...`: each language's
    rate by EM beside the rate the estimate assumes; that it needs `make predict` before there are predictions
    ('' for ranks: a blend's, which are no probabilities)."""
    if summary.get("scale") == layout.RANK:
        return ""
    profile = summary["six"]["profile"]
    em = profile.get("em") or {}
    if not em.get("rates") and not em.get("unusable"):
        return (
            "  toxic rate by EM on the test predictions: needs `make predict`, then `make cv` (no fold's test "
            "predictions yet)"
        )
    each = [" ".join(f"{g} {r:.3f} ({profile['rates'][g]:.3f})" for g, r in em["rates"].items())]
    off = ", ".join(em.get("unusable") or [])
    each += [f"none for {off}: a fold's EM answer at a boundary or not converged"] if off else []
    said = "; ".join(e for e in each if e)
    return (f"  toxic rate by EM on the test predictions (Saerens et al. 2002; mean of {em['folds']} folds, each "
            f"language's prior read on its stand-ins), beside the rate assumed: {said}")  # fmt: skip


def judged_line(summary: dict) -> str:
    """Which metric each fold's best step was chosen by, as its done.json records it (metrics.fold_score), with
    the test languages a fold judged by its valid AUC lacked; '' where every fold was judged by the 6-lang AUC."""
    six, by = metrics.SIX, {}
    mix = (summary.get("six") or {}).get("profile", {}).get("mix", {})
    for k, d in summary["fold_details"].items():
        if int(k) >= 0:
            by.setdefault(metrics.judged_by(d or {}), []).append(int(k))
    if not by or set(by) == {six.header}:
        return ""
    parts = []
    for name, folds in by.items():
        lacking = sorted({lg for k in folds for lg in mix if metrics.shown(fold_lang(summary, k, lg)) == "-"})
        valid = name == metrics.BY_KEY["valid_auc"].header
        why = f", no stand-in rows of both classes for {', '.join(lacking)}" if valid and lacking else ""
        parts.append(f"{name} (fold{'s' * (len(folds) > 1)} {', '.join(map(str, folds))}{why})")
    old = (
        "; AUC: made before folds named it (the estimate over the test languages their rows had)" if "AUC" in by else ""
    )
    return "best steps chosen by " + "; ".join(parts) + old


def fold_lang(summary: dict, k: int, lang: str):
    scores = summary["folds"].get(k) or summary["folds"].get(str(k)) or {}
    return (scores.get("per_lang") or {}).get(lang)


def figures_head(lead: str, langs: list[str], minutes: bool = True) -> str:
    """The head of a table of figures_line rows: the lead's columns, every metric, every language."""
    return (f"{lead}  " + "  ".join(f"{m.header:>10}" for m in metrics.METRICS) + "  "
            + "  ".join(f"{lg:>6}" for lg in langs) + (f"  {'minutes':>7}" if minutes else ""))  # fmt: skip


def figures_line(lead: str, scores: dict, langs: list[str], minutes=None) -> str:
    """One row: every metric of METRICS (`scores`: a cv.json's `metrics`, '-' for one it lacks), the AUC of
    every language of `langs` (scores["per_lang"]), and the minutes where given."""
    per = scores.get("per_lang", {})
    return (
        f"{lead}  " + "  ".join(f"{metrics.shown(scores.get(m.key), m.fmt):>10}" for m in metrics.METRICS)
        + "  " + "  ".join(f"{metrics.shown(per.get(lg), '.4f'):>6}" for lg in langs)
        + ("" if minutes is None else f"  {metrics.shown(minutes, '.1f'):>7}")
    )  # fmt: skip


def six_line(value: float, six: dict) -> str:
    """`6-lang AUC 0.8812 (es 0.87 fr 0.84 ...): the estimate of the test AUC, ...`: the OOF's languages
    and what they are weighted to; where a test language has no stand-in rows, why there is no figure."""
    per = " ".join(f"{lg} {metrics.shown(v, '.4f')}" for lg, v in six["per_lang"].items())
    profile = six["profile"]
    priors = [lg for lg, how in profile["rate_from"].items() if how == FROM_PRIOR]
    said = f"; {', '.join(priors)} at the prior {profile['rates'][priors[0]]:.3f}" if priors else ""
    if six["missing"]:
        return (f"{metrics.SIX.header} -: no OOF rows of both classes stand for {', '.join(six['missing'])} "
                f"(data.held_out holds translated rows of data.extra_files out for them) ({per})")  # fmt: skip
    lengths = six.get("lengths")
    mix = " and its length mix" if lengths else ""
    if lengths and unmatched(lengths):  # not claimed whole: the line below says which language lacks what
        mix = " and, in part, its length mix (not matched: below)"
    line = (f"{metrics.SIX.header} {value:.4f} ({per}): the estimate of the test AUC, each language "
            f"weighted to its share of the test, its toxic rate there{mix}{said}")  # fmt: skip
    span = metrics.prior_span(profile)
    if six.get("range") and span:
        low, high = six["range"]
        known = [g for g in (profile.get("rate_se") or {}) if g in profile["mix"] and g not in span[0]]
        also = (f", {', '.join(known)} within {metrics.RATE_SES:g} standard errors of their validation.csv rate"
                if known else "")  # fmt: skip
        also += ", each span taking in its EM rate (below)" if (profile.get("em") or {}).get("rates") else ""
        line += (f"\n  from {low:.4f} to {high:.4f}: the range under the validation-rate assumption "
                 f"({', '.join(span[0])} at any toxic rate from {span[1]:.3f} to {span[2]:.3f}{also}); the test's own "
                 "rates are not known")  # fmt: skip
    return "\n".join([line, *length_lines(lengths, value)]) if lengths else line


def length_lines(lengths: dict, value: float) -> list[str]:
    """What weighting by length did, under the six-language line: the figure without it, each language's
    bucket shares (test and stand-ins) and effective rows, and validation.csv's AUC per bucket."""
    names = buckets.bucket_names()
    out = [f"  without length {lengths['without']:.4f} ({value - lengths['without']:+.4f} by length); "
           f"share of rows per token bucket ({' '.join(names)}), test / stand-ins; effective rows toxic, clean "
           "with length (without):"]  # fmt: skip
    for lang, test in lengths["test"].items():
        rows = lengths["rows"].get(lang) or []
        ess, was = lengths["ess"].get(lang, {}), lengths["ess_without"].get(lang, {})
        out.append(f"    {lang} {' '.join(f'{v:.3f}' for v in test)} / {' '.join(f'{v:.3f}' for v in rows)}; "
                   f"{ess.get('toxic', 0):.0f}, {ess.get('clean', 0):.0f} ({was.get('toxic', 0):.0f}, "
                   f"{was.get('clean', 0):.0f})")  # fmt: skip
    short = unmatched(lengths)
    if short:
        which = ", ".join(f"{g} ({v:.3f} of its test rows)" for g, v in short.items())
        out.append(f"  length mix not matched for {which}: "
                   f"token buckets with no stand-in rows, or under {buckets.MIN_BUCKET_ROWS} of a class, merged into a "
                   "neighbour, whose rows of other lengths carry their share")  # fmt: skip
    out += seed_lines(lengths)
    by = " ".join(f"{n} {metrics.shown(lengths['valid_by_bucket'].get(n), '.4f')} (n={c})"
                  for n, c in zip(names, lengths["valid_bucket_rows"]))  # fmt: skip
    out.append(f"  valid AUC per token bucket (validation.csv's rows): {by}")
    return out


def seed_lines(lengths: dict) -> list[str]:
    """Where the translated languages' class x length link came from, and which languages were weighted without
    length and why (seed_figures, metrics.length_gaps); nothing of a cv.json written before they were recorded."""
    out, translated = [], ", ".join(lengths.get("translated") or [])
    if translated and lengths.get("link") == VALID_LINK:
        out.append(f"  {translated}: class x length link of validation.csv's comments, not their translated rows'")
    elif translated and lengths.get("link") == OWN_LINK:
        out.append(f"  {translated}: class x length link of their own translated rows, as before validation.csv's "
                   "rows were counted (the profile has no token counts of them: `make data` writes them)")  # fmt: skip
    gaps = lengths.get("without_length") or {}
    if gaps:
        out.append("  weighted without length (language and class only): "
                   + "; ".join(f"{g} ({why})" for g, why in gaps.items())
                   + " (lengths.csv counts every row the tables had when `make data` ran: run it again)")  # fmt: skip
    return out


def unmatched(lengths: dict) -> dict[str, float]:
    """The languages whose test length mix the stand-ins could not match (unmatched_lengths), by the share
    of their test rows left so; one that rounds to 0.000 as printed is matched. A cv.json written before it was
    recorded: none."""
    return {g: v for g, v in (lengths.get("unmatched") or {}).items() if round(v, 3) > 0}


def best_step_line(summary: dict) -> str:
    """What the figures would read with each fold's best step, chosen on the very rows it is scored on, beside
    the OOF's (each half's step chosen on the other half); '' for folds without both."""
    best, held = summary.get("best_step"), summary["metrics"]
    m = next((m for m in metrics.RANKED_BY if metrics.defined(held.get(m.key))), None)  # a cv.json's: null or NaN
    if not best or m is None or not metrics.defined(best.get(m.key)):
        return ""
    gap = best[m.key] - held[m.key]
    return (
        f"{m.header} {best[m.key]:.4f} with each fold's best step, chosen on the rows it is scored on "
        f"({gap:+.4f}); the folds and the OOF above take each half of a fold at the step its other half chose"
    )


def folds_summary(oof: pd.DataFrame, done: dict[int, dict], dirs: list[Path], prepared: Path | None,
                  profile: dict | None) -> dict:  # fmt: skip
    """cv_summary of a trained experiment's folds (`dirs`), its profile taking in the test's toxic rates by EM on
    their test predictions where there are any (em_figures: they widen the estimate's range)."""
    em = em_figures(oof, dirs, prepared, profile, pred_scale(done)) if prepared is not None else None
    return cv_summary(oof, done, {**profile, "em": em} if em else profile)


def em_figures(oof: pd.DataFrame, dirs: list[Path], prepared: Path, profile: dict | None, scale: str) -> dict | None:
    """Each test language's toxic rate by EM on the folds' test predictions (pipeline.scoring.rates), the prior
    of each read on its stand-ins' probabilities from the kept model (`best`, else `pred`: what predicted the
    test); None for ranks (a blend's), without a profile, or before `make predict` wrote a fold's predictions."""
    if scale != layout.PROBABILITY or not profile:
        return None
    try:
        test = pd.read_csv(prepared / layout.TEST_TABLE, usecols=["id", "lang"], dtype=str, keep_default_na=False)
    except (OSError, ValueError):
        return None
    rows = metrics.stand_ins(oof, profile["mix"])
    rows = rows.assign(pred=rows["best"] if "best" in rows else rows["pred"])
    found = rates.test_rates(rows, [f for f in map(fold_test, dirs) if f is not None], test)
    return found if found and (found["rates"] or found["unusable"]) else None


def fold_test(fold_dir: Path) -> pd.DataFrame | None:
    """A fold's test predictions (id, toxic) as `make predict` left them, where intact and made with the weights
    its done.json records (predict's test.json, or done.json itself for a baseline's); None otherwise."""
    done, stamp = validity.read_done(fold_dir) or {}, {}
    try:
        stamp = read_json(fold_dir / layout.TEST_KEY)
    except (OSError, ValueError):
        pass
    stamp = stamp if isinstance(stamp, dict) else {}
    record = stamp.get("file") or (done.get("files") or {}).get(layout.TEST_PREDS)
    weights = ((done.get("files") or {}).get(layout.WEIGHTS) or {}).get("sha256")
    made_with = (stamp.get("key") or {}).get("weights") if isinstance(stamp.get("key"), dict) else None
    if weights and made_with and made_with != weights:  # of other weights: the fold was trained again since
        return None
    if record is None or validity.file_problem(fold_dir, layout.TEST_PREDS, record):
        return None
    return pd.read_csv(fold_dir / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)


def read_cv(path: Path) -> dict:
    """A cv.json, or {} when it is missing or unreadable (it is rewritten from the folds)."""
    try:
        cv = read_json(path)
    except (OSError, ValueError):
        return {}
    return cv if isinstance(cv, dict) else {}


def profile_of(done: dict[int, dict]) -> dict | None:
    """The test profile the folds were scored by, as their done.json records it (None for folds that do not)."""
    return next((d["profile"] for d in done.values() if isinstance((d or {}).get("profile"), dict)), None)


def cv_report(cfg: Config, digest: str | None = None, prepared: Path | None = None) -> dict:
    """Gather the usable folds' OOF predictions; write oof.csv, cv.json and cv.png. `prepared`: the folder of
    the tables the folds were made from (default cfg's)."""
    exp = layout.experiment_dir(cfg)
    digest = digest or validity.current_fingerprint(cfg)
    dirs = validity.usable_folds(cfg, digest, "cv")  # the cv stage's table, which train and baseline print too
    prepared = prepared or layout.prepared_dir(cfg)
    oof = read_oof(dirs, prepared)
    done = {layout.fold_index(d): validity.read_done(d) for d in dirs}
    profile = metrics.with_test_lengths(profile_of(done) or read_profile(cfg), prepared)
    summary = folds_summary(oof, done, dirs, prepared, profile)
    old = exp / layout.CV_JSON
    if old.exists():  # what `make predict` recorded (test score, calibration) stays while of the same folds
        saved = read_cv(old)
        for key in ("test_auc", "calibration"):
            record = saved.get(key)
            if (
                record
                and record.get("folds") == [d.name for d in dirs]
                and record.get("digests") == validity.fold_digests(dirs)
            ):
                summary[key] = record
    write_csv(exp / layout.OOF, oof.drop(columns="tokens", errors="ignore"))  # an oof.csv's columns, as a fold's
    write_json(exp / layout.CV_JSON, summary)
    plot_cv(oof, summary, exp / layout.CV_PNG, cfg.name)
    if any(read_jsonl(d / layout.STEPS) or read_jsonl(d / layout.METRICS) for d in dirs):  # trained folds
        plot_curves(dirs, exp / layout.CURVES_PNG, cfg.name)
    return summary
