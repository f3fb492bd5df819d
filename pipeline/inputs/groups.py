"""Which English comment a translated training row is a translation of: the groups held out together.

The translated training rows are the only labelled fr, pt and ru rows, so `data.held_out` makes a share of
them validation rows (pipeline.inputs.tables), and the OOF then covers every test language. A fold that
validates on a translation must not train on the English original or on another translation of it: the
rows of one source comment form a group, and a group is held out whole.

The competition's translated files carry the id of the English comment each row translates: the group is
that id. A file without ids (the real slice's combined file) is grouped by matching each translation to
the English originals in the same files, by what a translation keeps: numbers, Latin-script words (names,
wiki markup, URLs), runs of punctuation, line breaks, length and the share of capitals, weighted TF-IDF
style and compared by cosine, a row matching only an original of its own label. Measured on the real slice
against rows whose IPs or URLs tie them to exactly one original: 89% of translations go to the right one.
The rest may leave a translation's original in training: the six-language OOF is then slightly
optimistic for those rows, never wrong by construction.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

_NUMBER = re.compile(r"\d+")
_LATIN = re.compile(r"[A-Za-z][A-Za-z'\-]{2,}")
_MARKS = re.compile(r"[!?]{2,}|\.{3,}|={2,}|\[\[|\]\]|\{\{|\}\}|~{3,}|'{2,}|\*+|#+|:\)|:\(|;\)|<3")


def signature(text: str) -> str:
    """What survives machine translation, as words: N<number>, W<latin word>, P<punctuation run>, and
    buckets of line breaks, length (log2) and the share of capital letters."""
    words = ["N" + n for n in _NUMBER.findall(text)]
    words += ["W" + w.lower() for w in _LATIN.findall(text)]
    words += ["P" + p for p in _MARKS.findall(text)]
    letters = sum(c.isalpha() for c in text)
    caps = sum(c.isupper() for c in text) / max(1, letters)
    words += [f"NL{min(text.count(chr(10)), 20)}", f"LEN{int(np.log2(len(text) + 1))}", f"CAPS{int(caps * 5)}"]
    return " ".join(words)


def match_originals(texts: list[str], labels: np.ndarray, originals: list[str], original_labels: np.ndarray):
    """For each text, the position of the original (among `originals`) it most resembles, of the same label."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    vec = TfidfVectorizer(token_pattern=r"\S+", sublinear_tf=True)
    originals_m = normalize(vec.fit_transform([signature(t) for t in originals]))
    texts_m = normalize(vec.transform([signature(t) for t in texts]))
    out = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), 2048):  # a block at a time: rows x originals of floats
        sim = (texts_m[start : start + 2048] @ originals_m.T).toarray()
        other = labels[start : start + 2048, None] != original_labels[None, :]
        sim[other] -= 2.0  # never an original of the other label
        out[start : start + 2048] = sim.argmax(axis=1)
    return out


def source_groups(extra: pd.DataFrame) -> tuple[np.ndarray, str]:
    """A group key for each extra row (columns id, source_id (may be empty), text, lang, toxic), and how the
    groups were found, in words."""
    given = extra["source_id"].astype(str)
    if (given != "").all():
        return ("id:" + given).to_numpy(), "by the English comment ids the files carry"
    english = np.flatnonzero(extra["lang"].to_numpy() == "en")
    keys = extra["id"].astype(str).to_numpy().copy()  # an English original is its own group
    if len(english) == 0:
        return keys, "one row a group (no ids, no English originals to match): a held-out row's original may train"
    others = np.flatnonzero(extra["lang"].to_numpy() != "en")
    texts, labels = extra["text"].tolist(), extra["toxic"].to_numpy()
    found = match_originals([texts[i] for i in others], labels[others], [texts[i] for i in english], labels[english])
    keys[others] = keys[english[found]]
    return keys, f"by matching {len(others):,} translations to {len(english):,} English originals"


def held_out_folds(keys: np.ndarray, share: float, k: int, seed: int) -> np.ndarray:
    """Fold 0..k-1 for the rows of a seeded `share` of the groups (each group whole, the folds as even as
    whole groups allow), -1 for the others."""
    groups = np.unique(keys)
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(groups)[: int(round(share * len(groups)))]
    fold_of = {g: i % k for i, g in enumerate(chosen)}
    return np.array([fold_of.get(g, -1) for g in keys], dtype=np.int64)
