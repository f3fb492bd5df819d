"""Synthetic OOF and test rows with lengths like the real slice's (the e5 tokenizer's counts), from a model whose
separation falls for rows cut at 128 tokens: what the six-language estimate reads with and without length."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.scoring import metrics

BOUNDS = ((2, 32), (33, 64), (65, 96), (97, 128), (129, 600))  # the token counts of each length bucket
# each language's rows per bucket in the test, and in the held-out translated rows that stand for fr, pt, ru:
# over 128 tokens 16-28% of the test's rows and 2.4% of the stand-ins'; 32 tokens or fewer 5% and 33%
TEST = {
    "es": (0.05, 0.30, 0.30, 0.185, 0.165),
    "it": (0.05, 0.27, 0.27, 0.197, 0.213),
    "tr": (0.06, 0.25, 0.25, 0.184, 0.256),
    "fr": (0.05, 0.24, 0.24, 0.19, 0.28),
    "pt": (0.05, 0.25, 0.24, 0.191, 0.269),
    "ru": (0.05, 0.25, 0.24, 0.193, 0.267),
}
HELD = (0.33, 0.35, 0.20, 0.096, 0.024)
MIX = {"es": 0.14, "it": 0.13, "tr": 0.15, "fr": 0.17, "pt": 0.19, "ru": 0.17}
RATE = {"es": 0.15, "it": 0.20, "tr": 0.11}  # validation.csv's; the others: the prior (their mean), truly so here
SKILL = (1.9, 1.8, 1.7, 1.5, 0.8)  # the model's separation per bucket: it falls for the rows cut at 128 tokens
# the toxic rate per bucket over the language's, of real comments (validation.csv's es, it, tr over 128 tokens:
# 0.89, 0.94, 0.87) and of the held-out machine-translated rows (fr, pt, ru: 1.31, 1.22, 1.25)
REAL_LINK = (1.1, 1.0, 1.0, 1.0, 0.85)
TRANSLATED_LINK = (0.85, 0.95, 1.0, 1.05, 1.2)


def rows(rng, lang: str, n: int, rate: float, shares, link=None) -> pd.DataFrame:
    """n rows of one language: toxic at `rate`, lengths drawn by bucket `shares`, a prediction per row; with
    `link`, each bucket's toxic rate is `rate` times its link over the shares' mean link (rate and shares kept)."""
    shares = np.asarray(shares) / sum(shares)
    bucket = rng.choice(len(BOUNDS), n, p=shares)
    low, high = np.asarray(BOUNDS).T
    by_bucket = rate * (np.ones(len(BOUNDS)) if link is None else np.asarray(link) / np.dot(shares, link))
    y = (rng.random(n) < by_bucket[bucket]).astype(int)
    pred = 1 / (1 + np.exp(-(np.asarray(SKILL)[bucket] * y + rng.normal(size=n))))
    return pd.DataFrame({"lang": lang, "toxic": y, "tokens": rng.integers(low[bucket], high[bucket] + 1),
                         "pred": pred})  # fmt: skip


def oof_and_test(seed: int, test_rows: int = 200_000, linked: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(OOF rows: validation.csv's es 2,500, it 2,500, tr 3,000 with the test's lengths, held-out translated
    fr, pt, ru 2,000 each, half toxic, with HELD's lengths; test rows with labels, to score the truth). `linked`:
    class and length linked as in the real slice, the test's and validation.csv's rows by REAL_LINK, the
    translated rows by TRANSLATED_LINK; else class and length apart."""
    rng = np.random.default_rng(seed)
    prior = float(np.mean(list(RATE.values())))
    real, translated = (REAL_LINK, TRANSLATED_LINK) if linked else (None, None)
    frames = [rows(rng, g, n, RATE[g], TEST[g], real).assign(source="validation")
              for g, n in (("es", 2500), ("it", 2500), ("tr", 3000))]  # fmt: skip
    frames += [rows(rng, g, 2000, 0.5, HELD, translated).assign(source="translated-train") for g in ("fr", "pt", "ru")]
    oof = pd.concat(frames, ignore_index=True)
    oof = oof.assign(id=[f"r{i}" for i in range(len(oof))], fold=np.arange(len(oof)) % 5)
    test = pd.concat([rows(rng, g, int(test_rows * MIX[g]), RATE.get(g, prior), TEST[g], real) for g in MIX],
                     ignore_index=True)  # fmt: skip
    return oof, test


def errors(seed: int) -> tuple[float, float, float]:
    """(the true pooled AUC, the estimate's error without length, with length) of one draw."""
    oof, test = oof_and_test(seed)
    true = metrics.auc(test["toxic"], test["pred"])
    profile = metrics.test_profile(oof[oof["source"] == "validation"], test["lang"], test["tokens"])
    without = metrics.six_language(oof, metrics.without_lengths(profile))["auc"]
    return true, without - true, metrics.six_language(oof, profile)["auc"] - true


def seed_errors(seed: int) -> tuple[float, float]:
    """(the estimate's error with fr, pt, ru weighted from their own class x length link, from validation.csv's
    comments' link) of one draw of the linked world (oof_and_test's `linked`)."""
    oof, test = oof_and_test(seed, linked=True)
    true = metrics.auc(test["toxic"], test["pred"])
    valid = oof[oof["source"] == "validation"]
    profile = metrics.test_profile(valid, test["lang"], test["tokens"], valid["tokens"])
    own = {k: v for k, v in profile.items() if k != "valid_lengths"}  # a profile recorded before it was counted
    return metrics.six_language(oof, own)["auc"] - true, metrics.six_language(oof, profile)["auc"] - true
