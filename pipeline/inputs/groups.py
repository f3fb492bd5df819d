"""Which rows are versions of one comment (its translations, its English original, its duplicates): the
groups data.held_out holds out together, and the folds they are held out in.

The translated training rows are the only labelled fr, pt and ru rows, so `data.held_out` makes a share of
them validation rows (pipeline.inputs.tables), and the OOF then covers every test language. A fold that
validates on a translation must not train on its English original or on another translation of it: the
versions of one comment form a group, and a group is held out whole, in one fold.

- The competition's translated files carry the id of the English comment each row translates: the group
  is that id, exactly.
- A file without ids (the real slice's combined file: runs of other comments in each language, most of
  whose English source is absent) is grouped by content with a multilingual sentence encoder
  (data.group_encoder): two rows are versions of one comment when each is the other's nearest row of its
  language (cosine at least TWIN_COSINE; SAME_LANGUAGE_COSINE within one language) and both carry the same
  label, or when their texts are equal once case, spaces and punctuation are set aside; a group is every
  row linked to another, through any chain of links. The English training rows (train.csv's, the bias
  file's) take part, so an original found by content is held out with its translations.
- Without ids and without an encoder, rows are matched to the English originals in the same files by what
  a translation keeps (numbers, Latin-script words, punctuation runs): a rough grouping that `make data`
  says is one, and that may leave a held-out row's original in training.

Held-out groups are spread over the folds so that each fold holds about as many rows of each language;
a group larger than MAX_GROUP rows (a chain of near-duplicates, a spammed phrase) is never held out, so
that one fold does not get it all, not even for a long comment it holds (held_out_folds' `forced` rows).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

TWIN_COSINE = 0.84  # translations of one comment: mutual nearest rows of their languages at least this close
SAME_LANGUAGE_COSINE = 0.95  # two rows of one language: a duplicate, only this close (similar insults are not)
MAX_GROUP = 50
MIN_DUPLICATE = 10  # a normalised text this long or longer is one comment wherever it recurs ("thanks" is not)

_NUMBER = re.compile(r"\d+")
_LATIN = re.compile(r"[A-Za-z][A-Za-z'\-]{2,}")
_MARKS = re.compile(r"[!?]{2,}|\.{3,}|={2,}|\[\[|\]\]|\{\{|\}\}|~{3,}|'{2,}|\*+|#+|:\)|:\(|;\)|<3")
_NOT_WORD = re.compile(r"\W+")
# Turkish writes ı/I and i/İ, str.lower() knows only i/I: 'ILIK'.lower() is 'ilik', not 'ılık', and 'İ'.lower() is
# i with a combining dot (U+0307). The four i's are one letter here, the combining dot dropped.
_ONE_I = str.maketrans({"İ": "i", "I": "i", "ı": "i", "\u0307": None})
SIGNATURE_FLOOR = 0.5  # rough matching: a translation less like any original than this is its own group
# validation rows of one language this alike in character 3-5-grams are copies of one comment (a template with
# another user's name in it, a comment pasted again with a word changed): one group, in one fold
NEAR_COPY_COSINE = 0.9


# ---------------------------------------------------------------- by content, with a sentence encoder


def normalised(text: str) -> str:
    """A text without case (Turkish's dotted and dotless i alike), spaces or punctuation: equal for duplicates
    that differ only in those."""
    return _NOT_WORD.sub(" ", str(text).translate(_ONE_I).casefold()).strip()


def duplicate_links(texts: list[str]) -> list[tuple[int, int]]:
    """(first, other) for every row whose normalised text (MIN_DUPLICATE characters or more) an earlier row has."""
    first: dict[str, int] = {}
    links = []
    for i, t in enumerate(map(normalised, texts)):
        if len(t) >= MIN_DUPLICATE:
            j = first.setdefault(t, i)
            if j != i:
                links.append((j, i))
    return links


def twin_links(vectors: np.ndarray, langs: np.ndarray, labels: np.ndarray) -> list[tuple[int, int]]:
    """(i, j) for rows of one label that are each other's nearest row of that label in the other's language,
    close enough for their languages (TWIN_COSINE, or SAME_LANGUAGE_COSINE within one): the bitext-mining
    rule (mutual nearest neighbours), which links a translation to one row a language, not to every row that
    says something alike. A translation keeps its label, so rows of the other label are never candidates."""
    links = []
    for label in np.unique(labels):
        order = sorted(set(langs[labels == label]))
        for a_i, a in enumerate(order):
            rows_a = np.flatnonzero((langs == a) & (labels == label))
            for b in order[a_i:]:
                rows_b = np.flatnonzero((langs == b) & (labels == label))
                links += mutual_nearest(vectors, rows_a, rows_b, SAME_LANGUAGE_COSINE if a == b else TWIN_COSINE)
    return links


def mutual_nearest(vectors: np.ndarray, rows_a: np.ndarray, rows_b: np.ndarray, floor: float) -> list[tuple[int, int]]:
    """(i, j) for i of rows_a and j of rows_b that are each other's nearest, at least `floor` apart in cosine
    (the same rows on both sides: one language with itself, each pair once)."""
    sim = vectors[rows_a] @ vectors[rows_b].T
    same = rows_a is rows_b or np.array_equal(rows_a, rows_b)
    if same:
        np.fill_diagonal(sim, -1.0)  # a row is not its own twin
    if sim.size == 0:
        return []
    best_b, best_a = sim.argmax(axis=1), sim.argmax(axis=0)
    return [(int(rows_a[x]), int(rows_b[y])) for x, y in enumerate(best_b)
            if best_a[y] == x and sim[x, y] >= floor and (not same or x < y)]  # fmt: skip


def components(n: int, links: list[tuple[int, int]]) -> np.ndarray:
    """The connected component of each of n rows under `links` (a number per row)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not links:
        return np.arange(n)
    i, j = np.array(links).T
    graph = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def content_groups(rows: pd.DataFrame, vectors: np.ndarray) -> np.ndarray:
    """A group key for each row (columns text, lang, toxic): the versions of one comment share one."""
    langs, labels = rows["lang"].to_numpy(), (rows["toxic"].to_numpy() >= 0.5)
    links = twin_links(vectors, langs, labels) + duplicate_links(rows["text"].tolist())
    return np.array([f"c{c}" for c in components(len(rows), links)], dtype=object)


def alike_pairs(texts: list[str], langs: np.ndarray, floor: float, **tfidf) -> list[tuple[int, int]]:
    """(i, j), i < j, for rows of one language whose TF-IDF vectors (TfidfVectorizer(**tfidf), fit on that
    language's rows) are at least `floor` alike in cosine."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    pairs = []
    for lang in sorted(set(langs)):
        rows = np.flatnonzero(langs == lang)
        if len(rows) < 2:
            continue
        try:  # rows of unit length: a product is a cosine
            vectors = TfidfVectorizer(sublinear_tf=True, **tfidf).fit_transform([texts[i] for i in rows])
        except ValueError:  # nothing to count in the language's rows (empty texts)
            continue
        for start in range(0, len(rows), 2048):  # a block of rows against all of them
            i, j = np.nonzero((vectors[start : start + 2048] @ vectors.T).toarray() >= floor)
            later = start + i < j
            pairs += [(int(rows[start + a]), int(rows[b])) for a, b in zip(i[later], j[later])]
    return pairs


def near_copy_links(texts: list[str], langs: np.ndarray) -> list[tuple[int, int]]:
    """(i, j), i < j, for rows of one language whose character 3-5-gram TF-IDF vectors are at least
    NEAR_COPY_COSINE alike: a Wikipedia welcome template with another user's name, a comment pasted twice."""
    return alike_pairs(texts, langs, NEAR_COPY_COSINE, analyzer="char", ngram_range=(3, 5))


def copy_groups(texts: list[str], langs: np.ndarray) -> np.ndarray:
    """A group key for each validation row: its near-copies of its language and its duplicates of any
    language (the same text once case, spaces and punctuation are set aside) share one, through any chain."""
    texts = [str(t) for t in texts]
    links = near_copy_links(texts, np.asarray(langs)) + duplicate_links(texts)
    return np.array([f"v{c}" for c in components(len(texts), links)], dtype=object)


# ---------------------------------------------------------------- rough: by what translation keeps


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
    """For each text, the position of the original (among `originals`) it most resembles, of the same label,
    or -1 where none resembles it at least SIGNATURE_FLOOR."""
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
        found = sim.argmax(axis=1)
        out[start : start + 2048] = np.where(sim.max(axis=1) >= SIGNATURE_FLOOR, found, -1)
    return out


def signature_groups(rows: pd.DataFrame) -> np.ndarray:
    """Each translation with the English original it most resembles (see match_originals), else alone."""
    keys = np.array([f"r{i}" for i in range(len(rows))], dtype=object)
    english = np.flatnonzero(rows["lang"].to_numpy() == "en")
    others = np.flatnonzero(rows["lang"].to_numpy() != "en")
    if len(english) == 0 or len(others) == 0:
        return keys
    texts, labels = rows["text"].tolist(), rows["toxic"].to_numpy() >= 0.5
    found = match_originals([texts[i] for i in others], labels[others], [texts[i] for i in english], labels[english])
    matched = found >= 0
    keys[others[matched]] = keys[english[found[matched]]]
    return keys


# ---------------------------------------------------------------- the groups and their folds


def source_groups(rows: pd.DataFrame, vectors: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """A group key for each row (columns source_id (may be empty), text, lang, toxic; the English training
    rows among them), and how the groups were found, in words. `vectors`: the rows' sentence vectors
    (data.group_encoder), where there is one."""
    given = rows["source_id"].astype(str)
    if (given != "").all():
        return ("id:" + given).to_numpy(), "by the English comment ids the files carry"
    if vectors is not None:
        keys = content_groups(rows, vectors)
        return keys, f"by content ({len(rows):,} rows: translations and duplicates found by the sentence encoder)"
    keys = signature_groups(rows)
    return keys, ("roughly, by matching translations to English originals by what translation keeps "
                  "(data.group_encoder finds translations by content)")  # fmt: skip


def held_out_folds(keys: np.ndarray, langs: np.ndarray, eligible: np.ndarray, share: float, k: int,
                   seed: int, forced: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Fold 0..k-1 for the rows of the groups that hold an `eligible` row and at most MAX_GROUP rows: every
    such group that holds a `forced` row (a long stand-in comment: pipeline.inputs.lengths), and a seeded
    `share` of the others; -1 for the rest. Each group is whole in one fold; the largest groups are placed
    first, each in the fold that holds the fewest rows of its languages so far."""
    frame = pd.DataFrame({"key": keys, "lang": langs, "eligible": eligible})
    sizes = frame.groupby("key").size()
    can = frame[frame["eligible"]].groupby("key").size().index
    can = [g for g in sorted(can) if sizes[g] <= MAX_GROUP]
    must = set(keys[forced & eligible]) if forced is not None else set()
    chosen = [g for g in can if g in must]
    rest = [g for g in can if g not in must]  # without forced rows: the very groups and draw as before
    rng = np.random.default_rng(seed)
    chosen += [rest[i] for i in rng.permutation(len(rest))[: int(round(share * len(rest)))]]
    order = sorted(set(langs))
    counts = frame[frame["key"].isin(chosen)].groupby(["key", "lang"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=order, fill_value=0)
    load = np.zeros((k, len(order)))
    fold_of = {}
    for g in sorted(chosen, key=lambda g: (-sizes[g], str(g))):
        vec = counts.loc[g].to_numpy()
        k_best = int(np.argmin((load * (vec > 0)).sum(axis=1) + 1e-6 * load.sum(axis=1)))
        load[k_best] += vec
        fold_of[g] = k_best
    return np.array([fold_of.get(g, -1) for g in keys], dtype=np.int64)
