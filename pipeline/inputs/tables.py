"""The prepared tables: built from the competition's files by `make data`, read by every later stage.

The training table has one row per comment: id, text, lang, toxic, source, fold (and pseudo_for with
data.pseudo_from: see pipeline.inputs.pseudo). Validation rows get folds 0..k-1, stratified on
language x label; rows used only for training (English, translated, pseudo-labelled) get fold -1, but
for data.held_out of the translated rows, held out by source comment (pipeline.inputs.groups), and with
data.hold_out_long every source comment with a long stand-in translation (pipeline.inputs.lengths). With
data.normalise_text every source's texts are made alike first (pipeline.inputs.texts). The
test table is id, text, lang. The same config and files give the same tables, byte for byte.

`training_rows` decides which rows a fold trains on, in one place, so that the leak tests check what
training uses: a stage-1 model never sees a validation row, and fold k never its own; `fold_targets` what it
trains them towards (data.relabel_from mixes a teacher's fold-k predictions into the training-only rows').
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold

from pipeline import layout, validity
from pipeline.errors import DataError
from pipeline.inputs import encoder, groups, lengths, pseudo, relabel, texts
from pipeline.inputs.csvfile import check_lang, check_unique, read_csv
from pipeline.schema import Config

# group: the rows that are versions or copies of one comment share it (validation rows and held-out rows; '' for
# the others), so that whatever splits a fold's rows again keeps each group whole
TABLE_COLUMNS = ["id", "text", "lang", "toxic", "source", "fold", "group"]


# ---------------------------------------------------------------- the extra translated training files


LANGS = ("ar", "de", "en", "es", "fr", "hi", "it", "ja", "nl", "pl", "pt", "ru", "tr", "zh")  # read from file names


def lang_from_name(path: Path) -> str:
    """The language a translated file's name states: jigsaw-toxic-comment-train-google-es-cleaned.csv -> es."""
    words = {w.lower() for w in re.split(r"[-_.\s]+", path.stem)}
    found = sorted(words & set(LANGS))
    if len(found) != 1:
        seen = f" (it names {', '.join(found)})" if found else ""
        raise DataError(
            f"{path}: no lang column and no single language in its name{seen}; "
            f"give it per file in data.extra_files, e.g. {path.name}:es"
        )
    return found[0]


def read_extra(path: Path, lang: str, notes: list[str]) -> pd.DataFrame:
    """comment_text, lang, toxic of an extra file; lang as given for it, else its lang column, else its name."""
    frame = read_csv(path, ["comment_text", "toxic"], labels=("toxic",), usecols=False)
    if lang:  # given for the file: it wins over a lang column
        frame["lang"] = lang
    elif "lang" not in frame.columns:
        frame["lang"] = lang_from_name(path)
    check_lang(frame, path, notes)
    # the competition's translated files carry the id of the English comment each row translates
    frame["source_id"] = frame["id"].astype(str) if "id" in frame.columns else ""
    return frame[["comment_text", "lang", "toxic", "source_id"]]


# ---------------------------------------------------------------- build


def assign_folds(strata: pd.Series, k: int, seed: int, keys: np.ndarray | None = None) -> np.ndarray:
    """Fold 0..k-1 for each row, from a seeded StratifiedKFold on the given strata; with group `keys`, each group
    goes where its first row does, the first rows of the groups split as single rows are (so that a table without
    copies gets the very folds it would without keys)."""
    if keys is not None:
        _, first, back = np.unique(keys, return_index=True, return_inverse=True)
        order = np.sort(first)  # the groups in the order of their first rows
        fold_of = assign_folds(strata.iloc[order].reset_index(drop=True), k, seed)
        at = np.empty(len(first), dtype=np.int64)
        at[np.argsort(first)] = np.arange(len(first))  # a group's position in `order`
        return fold_of[at[back.ravel()]]
    folds = np.full(len(strata), -1, dtype=np.int64)
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for fold, (_, idx) in enumerate(splitter.split(np.zeros(len(strata)), strata.to_numpy())):
        folds[idx] = fold
    return folds


def english_rows(frame: pd.DataFrame, negatives: int, seed: int) -> pd.DataFrame:
    """All toxic rows plus a seeded sample of `negatives` clean ones, in file order."""
    toxic = frame["toxic"] >= 0.5
    clean = np.flatnonzero(~toxic.to_numpy())
    rng = np.random.default_rng(seed)
    keep = rng.choice(clean, size=min(negatives, len(clean)), replace=False)
    mask = toxic.to_numpy().copy()
    mask[keep] = True
    return frame[mask]


def source_rows(ids, texts, langs, toxic, source: str, fold) -> pd.DataFrame:
    """One source's rows in the table's columns (lang and fold may be one value for every row)."""
    return pd.DataFrame({"id": ids, "text": texts, "lang": langs, "toxic": toxic, "source": source, "fold": fold})


def english_part(cfg: Config, path, notes: list[str]) -> pd.DataFrame:
    en = read_csv(path, ["id", "comment_text", "toxic"], labels=("toxic",))
    say_if_empty(en, path, notes)
    en = english_rows(en, cfg.data.english_negatives, cfg.data.seed)
    return source_rows(en["id"], en["comment_text"], "en", en["toxic"], path.stem, -1)


def bias_part(cfg: Config, path, notes: list[str]) -> pd.DataFrame:
    """A seeded sample of data.bias_rows unintended-bias rows, in file order."""
    bias = read_csv(path, ["id", "comment_text", "toxic"], labels=("toxic",))
    say_if_empty(bias, path, notes)
    bias = bias.sample(n=min(cfg.data.bias_rows, len(bias)), random_state=cfg.data.seed).sort_index()
    return source_rows(bias["id"], bias["comment_text"], "en", bias["toxic"], path.stem, -1)


def say_if_empty(frame: pd.DataFrame, path, notes: list[str]) -> None:
    """A training file of no rows (a header only) is read, and `make data` says that it adds nothing."""
    if frame.empty:
        notes.append(f"{path}: no rows (a header only): it adds no training rows")


def extra_part(path, lang: str, notes: list[str]) -> pd.DataFrame:
    """A translated training file; its rows are named <file>-<row> (a source id is not unique across files)."""
    extra = read_extra(path, lang, notes)
    say_if_empty(extra, path, notes)
    ids = [f"{path.stem}-{i}" for i in range(len(extra))]
    part = source_rows(ids, extra["comment_text"].to_numpy(), extra["lang"].to_numpy(), extra["toxic"].to_numpy(),
                       path.stem, -1)  # fmt: skip
    return part.assign(source_id=extra["source_id"].to_numpy())


def hold_out(cfg: Config, extra: pd.DataFrame, english: list[pd.DataFrame], standin: list[str],
             count=None) -> tuple[pd.DataFrame, list, list[str]]:  # fmt: skip
    """data.held_out of the groups that hold a translated row made validation rows, each group whole in one
    fold (pipeline.inputs.groups), and with data.hold_out_long every group with a `standin` translation over
    lengths.LONG tokens (`count`: texts -> untruncated token counts; None: not counted): the translated rows and
    the English training rows (`english`: train.csv's, the bias file's) of those groups. Returns both, with their
    folds, and what `make data` says of them ([] when none are held out)."""
    if cfg.data.held_out <= 0:
        return extra, english, []
    cols = ["source_id", "text", "lang", "toxic"]
    # an English training row's id is the source id its translations carry
    rows = pd.concat([extra[cols], *[part.assign(source_id=part["id"].astype(str))[cols] for part in english]],
                     ignore_index=True)  # fmt: skip
    vectors = None
    if cfg.data.group_encoder and not (rows["source_id"].astype(str) != "").all():
        vectors = encoder.vectors(cfg, rows["text"].astype(str).tolist())
    keys, how = groups.source_groups(rows, vectors)
    eligible = np.zeros(len(rows), dtype=bool)
    eligible[: len(extra)] = extra["lang"].to_numpy() != "en"  # a group is held out for its translations
    tokens = standin_tokens(rows, eligible, standin, count)
    forced = tokens > lengths.LONG if cfg.data.hold_out_long else None
    folds = groups.held_out_folds(keys, rows["lang"].to_numpy(), eligible, cfg.data.held_out, cfg.data.folds,
                                  cfg.data.seed, forced)  # fmt: skip
    held = folds >= 0
    n_extra, n_english = int(held[: len(extra)].sum()), int(held[len(extra) :].sum())
    words = [f"{n_extra:,} translated and {n_english:,} English training rows of {len(np.unique(keys[held])):,} "
             f"source comments held out for validation, grouped {how}"]  # fmt: skip
    if count is None and cfg.data.hold_out_long:
        words.append(f"data.hold_out_long: model.name={cfg.model.name}'s tokenizer is made from these tables, so it "
                     "cannot count them before the split: no comment is held out for its length")  # fmt: skip
    elif count is not None:
        words += lengths.long_lines(rows["lang"].to_numpy(), tokens, rows["toxic"].to_numpy(), held, standin)
    group = np.where(held, keys.astype(str), "")
    out, at = [], len(extra)
    for part in english:
        out.append(part.assign(fold=folds[at : at + len(part)], group=group[at : at + len(part)]))
        at += len(part)
    return extra.assign(fold=folds[: len(extra)], group=group[: len(extra)]), out, words


def standin_tokens(rows: pd.DataFrame, eligible: np.ndarray, standin: list[str], count) -> np.ndarray:
    """The untruncated token count of each `eligible` row in a `standin` language, -1 for the others and for all
    without `count`: only the rows the long rule and its report look at are tokenized."""
    tokens = np.full(len(rows), -1, dtype=np.int64)
    at = np.flatnonzero(eligible & rows["lang"].isin(standin).to_numpy())
    if count is not None and len(at):
        tokens[at] = count(rows["text"].iloc[at].astype(str).tolist())
    return tokens


def validation_part(cfg: Config, path, notes: list[str]) -> pd.DataFrame:
    """The validation rows, each in one of data.folds folds."""
    k = cfg.data.folds
    valid = read_csv(path, ["id", "comment_text", "lang", "toxic"], labels=("toxic",))
    if cfg.data.normalise_text:  # before its copies are grouped, as every source's before it is compared
        valid = tidy(valid.assign(source=path.stem), "comment_text", notes).drop(columns="source")
    check_unique(valid, "id", path)
    check_lang(valid, path, notes)
    soft = ~valid["toxic"].isin([0, 1])
    if soft.any():  # the AUC's targets: 0 or 1
        first = valid[soft].iloc[0]
        notes.append(f"{path}: {int(soft.sum()):,} labels are neither 0 nor 1 (the first: {first['toxic']:g} at id "
                     f"{first['id']}): rounded at 0.5, as the AUC scores 0 or 1")  # fmt: skip
    # near-copies (templates, comments pasted again) in one fold: a fold never trains on a copy of a row it scores
    keys = groups.copy_groups(valid["comment_text"].tolist(), valid["lang"].to_numpy())
    copies = pd.Series(keys).duplicated(keep=False).to_numpy()
    if copies.any():
        notes.append(f"{path}: {int(copies.sum()):,} rows are near-copies of another of their language (character "
                     f"3-5-gram cosine at least {groups.NEAR_COPY_COSINE:g}) or the same text: "
                     f"{len(set(keys[copies])):,} groups, each kept in one fold")  # fmt: skip
    firsts = ~pd.Series(keys).duplicated().to_numpy()  # a group is placed as its first row is
    folds = assign_folds(fold_strata(valid, k, path, firsts), k, cfg.data.seed, keys)
    part = source_rows(valid["id"], valid["comment_text"], valid["lang"], valid["toxic"], path.stem, folds)
    return part.assign(group=keys)


def fold_strata(valid: pd.DataFrame, k: int, path, firsts: np.ndarray) -> pd.Series:
    """What the validation rows are stratified on for k folds: language × label, else the label alone (each
    fold keeps both classes), else the language alone; too few rows for any is one line naming the most folds.
    `firsts`: the first row of each group of copies, which places the group (assign_folds)."""
    label = (valid["toxic"] >= 0.5).astype(int).astype(str)
    # a stratum smaller than k cannot be spread over k folds (scikit-learn would stop with its own traceback)
    for strata in (valid["lang"] + "_" + label, label, valid["lang"]):
        if firsts.any() and strata[firsts].value_counts().min() >= k:
            return strata
    positives = int((label == "1").sum())
    placed = int((label[firsts] == "1").sum())  # groups of copies are placed whole: count them once
    most = min(placed, int(firsts.sum()) - placed)  # label strata: each fold gets a row of the rarer class
    fix = f"set data.folds={most} or fewer" if most >= 2 else "add validation rows of both classes"
    raise DataError(f"{path}: {len(valid)} validation rows ({positives} toxic) cannot make data.folds={k} folds "
                    f"with both classes in each: {fix}")  # fmt: skip


def test_table(raw, notes: list[str]) -> pd.DataFrame:
    """id, text, lang of test.csv, whose ids must be sample_submission.csv's."""
    path, sub_path = raw / layout.TEST, raw / layout.SAMPLE_SUBMISSION
    test = read_csv(path, ["id", "content", "lang"])
    check_rows(test, path, "put the competition's rows back")
    check_unique(test, "id", path)
    check_lang(test, path, notes)
    sub = read_csv(sub_path, ["id", "toxic"], usecols=False)
    check_unique(sub, "id", sub_path)
    if set(sub["id"]) != set(test["id"]):
        n = len(set(sub["id"]) ^ set(test["id"]))
        raise DataError(f"{sub_path}: ids differ from {path.name}'s ({n} id(s) in only one of them)")
    return pd.DataFrame({"id": test["id"], "text": test["content"], "lang": test["lang"]})


def build_tables(cfg: Config, raw, count=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training table, test table) from the raw files; `table.attrs["notes"]`: what `make data` says about them.
    `count`: texts -> untruncated token counts by the model's tokenizer (tokens.length_counter), for the long
    comments held out (hold_out); None where there is none before the tables (the tiny model's)."""
    notes: list[str] = []
    parts = [english_part(cfg, raw / layout.TRAIN, notes)]
    if cfg.data.bias_rows > 0:
        parts.append(bias_part(cfg, raw / layout.BIAS, notes))
    extras = [extra_part(path, lang, notes) for path, lang in layout.extra_files(cfg, raw)]
    valid = validation_part(cfg, raw / layout.VALID, notes)
    test = test_table(raw, notes)
    if cfg.data.normalise_text:  # before anything compares, groups or counts the texts (validation_part: its own)
        parts, extras = [tidy(p, "text", notes) for p in parts], [tidy(p, "text", notes) for p in extras]
        test = tidy(test.assign(source=Path(layout.TEST).stem), "text", notes).drop(columns="source")
    # before the held-out split: a held-out copy of a validation text in another fold would train the fold
    # that scores its twin, so every non-validation row holding one goes, held out or not
    parts, extras = drop_validation_copies(valid, parts, extras, notes)
    if extras:
        standin = lengths.standin_langs(test["lang"], valid["lang"])
        extra, parts, held = hold_out(cfg, pd.concat(extras, ignore_index=True), parts, standin, count)
        parts = [*parts, extra]
        notes += held
    table = pd.concat([*parts, valid], ignore_index=True)
    table["group"] = table["group"].fillna("") if "group" in table else ""
    table["fold"] = table["fold"].astype(np.int64)
    table["toxic"], soft = targets(table, cfg.data.soft_labels)
    notes += soft
    check_fold_classes(table, cfg.data.folds, raw / layout.VALID)
    if cfg.data.held_out > 0 and not extras:
        notes.append(nothing_held_out(cfg, table, test))
    table = pseudo.add(cfg, table[TABLE_COLUMNS], test)
    notes += [table.attrs["pseudo"]] if table.attrs.get("pseudo") else []
    notes += relabel.check(cfg, table, np.flatnonzero(training_only(table)))
    table.attrs["notes"] = notes  # said by `make data`
    return table, test


def targets(table: pd.DataFrame, soft: bool) -> tuple[pd.Series, list[str]]:
    """(each row's `toxic`, what `make data` says of the soft ones). A scored row (a validation or held-out row,
    fold >= 0) is 0/1: the AUC scores 0 or 1. A training-only row's fractional label (the unintended-bias file's
    share of raters) is rounded at 0.5 too, unless `soft` (data.soft_labels): then it is the row's soft target."""
    toxic = table["toxic"].astype(np.float64)
    fractional = ~toxic.isin([0.0, 1.0]) & (table["fold"] < 0)
    if not soft or not fractional.any():
        return (toxic >= 0.5).astype(np.int64), []
    kept = toxic.where(fractional, (toxic >= 0.5).astype(np.float64))
    counts = table[fractional].groupby("source").size()
    said = ", ".join(f"{source} {n:,}" for source, n in counts.items())
    return kept, [f"soft labels kept on training-only rows (data.soft_labels): {said}"]


def tidy(frame: pd.DataFrame, column: str, notes: list[str]) -> pd.DataFrame:
    """`frame` (one source's rows) with `column` normalised (pipeline.inputs.texts), and what that changed in
    `notes`: the share of rows with a newline and with talk-page layout, before and after."""
    if frame.empty:
        return frame
    out = frame.assign(**{column: texts.normalise_all(frame[column])})
    (nl, mark), (nl_after, mark_after) = texts.layout_shares(frame[column]), texts.layout_shares(out[column])
    notes.append(f"{frame['source'].iloc[0]}: texts normalised (data.normalise_text): rows with a newline "
                 f"{nl:.1%} -> {nl_after:.1%}, with talk-page layout {mark:.1%} -> {mark_after:.1%}")  # fmt: skip
    return out


def drop_validation_copies(
    valid: pd.DataFrame, parts: list[pd.DataFrame], extras: list[pd.DataFrame], notes: list[str]
) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """`parts` (English) and `extras` (translated files) without the rows whose text is a validation row's (case,
    spaces and punctuation set aside), dropped before any is held out: a held-out copy sits in a fold of its
    own, so it would train the fold that scores its twin, and a training-only copy trains every fold on it."""
    seen = {t for t in map(groups.normalised, valid["text"]) if len(t) >= groups.MIN_DUPLICATE}
    dropped: dict[str, int] = {}

    def without(part: pd.DataFrame) -> pd.DataFrame:
        copy = part["text"].astype(str).map(lambda t: groups.normalised(t) in seen).to_numpy(bool)
        if not copy.any():  # an empty file's frame cannot be grouped
            return part
        for source, n in part[copy].groupby("source").size().items():
            dropped[source] = dropped.get(source, 0) + int(n)
        return part[~copy].reset_index(drop=True)

    parts, extras = [without(p) for p in parts], [without(p) for p in extras]
    if dropped:
        by = ", ".join(f"{n:,} of {s}" for s, n in sorted(dropped.items()))
        notes.append(f"{sum(dropped.values()):,} training rows hold the text of a validation row ({by}): dropped "
                     f"before any row is held out, so that no fold trains on a comment it scores")  # fmt: skip
    return parts, extras


def nothing_held_out(cfg: Config, table: pd.DataFrame, test: pd.DataFrame) -> str:
    """What data.held_out without translated files means, in words: nothing is held out."""
    lacking = sorted(set(test["lang"]) - set(table.loc[table["fold"] >= 0, "lang"]))
    gone = f": the test's {', '.join(lacking)} get no OOF rows" if lacking else ""
    return f"data.held_out={cfg.data.held_out:g} holds out nothing, as data.extra_files names no translated file{gone}"


def check_fold_classes(table: pd.DataFrame, k: int, valid_path) -> None:
    """Each fold's validation rows hold both classes: a fold of one class has no AUC and picks no best epoch."""
    valid = table[table["fold"] >= 0]
    positives, total = int(valid["toxic"].sum()), len(valid)
    most = min(positives, total - positives)  # the most folds that can each get a row of the rarer class
    for fold in range(k):
        found = valid[valid["fold"] == fold]
        if found["toxic"].nunique() < 2:
            cls = "toxic" if int(found["toxic"].iloc[0]) == 1 else "non-toxic"
            fix = f"set data.folds={most} or fewer" if most >= 2 else "add validation rows of both classes"
            raise DataError(
                f"{valid_path}: fold {fold} of {k} would hold {len(found)} validation rows, all {cls} "
                f"({positives} of {total} validation rows are toxic); each fold needs both classes: {fix}"
            )


def table_summary(table: pd.DataFrame, test: pd.DataFrame) -> dict:
    by = table.groupby(["source", "lang"]).agg(rows=("toxic", "size"), toxic=("toxic", "mean"))
    return {
        "rows": len(table),
        "test_rows": len(test),
        "toxic_rate": round(float(table["toxic"].mean()), 4),
        "by_source_lang": [
            {"source": s, "lang": lang, "rows": int(r.rows), "toxic_rate": round(float(r.toxic), 4)}
            for (s, lang), r in by.iterrows()
        ],
        # keys as text: data.json gives them back so, and a rerun returns what a build returned
        "folds": {str(int(k)): int(v) for k, v in table["fold"].value_counts().sort_index().items()},
        "test_langs": {str(k): int(v) for k, v in test["lang"].value_counts().sort_index().items()},
    }


def folds_digest(table: pd.DataFrame) -> str:
    """The table's own rows and their folds, by content, its pseudo-labelled test rows left out: what two
    experiments must share for fold k to hold the same rows in both (model.init_folds), whatever teacher
    labels each one's test rows."""
    own = table[table["pseudo_for"] == -1] if "pseudo_for" in table else table
    labels = own["toxic"].astype(np.float64)
    if (labels % 1 == 0).all():  # the pseudo rows' probabilities made the column float: 0/1 as the rows alone hold them
        own = own.assign(toxic=labels.astype(np.int64))
    hashed = pd.util.hash_pandas_object(own[TABLE_COLUMNS].astype(str), index=False).to_numpy()
    return hashlib.sha256(hashed.tobytes()).hexdigest()[:16]


# ---------------------------------------------------------------- read


def load_table(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The prepared tables and data.json, for the stages after `make data`: checked to be made from the
    inputs as they are now (validity.current_meta), else one line that says `make data`."""
    out = layout.prepared_dir(cfg)
    meta = validity.current_meta(cfg)
    dtypes = {"id": str, "text": str, "lang": str, "source": str, "group": str}
    table = pd.read_csv(out / layout.TABLE, dtype=dtypes, keep_default_na=False)
    test = pd.read_csv(out / layout.TEST_TABLE, dtype=dtypes, keep_default_na=False)
    # tables built before `make data` refused an empty test set
    check_rows(
        test, out / layout.TEST_TABLE, "the competition's test.csv had none; put them back and rerun `make data`"
    )
    return table, test, meta


def read_lengths(folder: Path) -> pd.DataFrame | None:
    """A prepared folder's lengths.csv (split, id, source, lang, tokens: pipeline.inputs.tokens.write_lengths);
    None where it is missing or unreadable (tables prepared before it existed: the estimate without length)."""
    try:
        frame = pd.read_csv(Path(folder) / layout.LENGTHS, dtype={"split": str, "id": str, "source": str, "lang": str},
                            keep_default_na=False)  # fmt: skip
    except (OSError, ValueError):
        return None
    need = {"split", "id", "source", "lang", "tokens"}
    return frame if need <= set(frame.columns) else None


def with_tokens(oof: pd.DataFrame, lengths: pd.DataFrame | None) -> pd.DataFrame:
    """The OOF rows with `tokens`, each row's untruncated token count (NaN for a row lengths.csv lacks); the
    rows as they are without lengths."""
    if lengths is None or "source" not in oof:
        return oof
    counts = lengths.loc[lengths["split"] == "train", ["source", "id", "tokens"]].drop_duplicates(["source", "id"])
    return oof.drop(columns="tokens", errors="ignore").merge(counts, on=["source", "id"], how="left")


def check_rows(test: pd.DataFrame, path: Path, fix: str) -> None:
    """A test set with no rows has nothing to predict or submit: one line, before any stage works on it."""
    if test.empty:
        raise DataError(f"{path}: no rows (a header only): a test set needs its rows; {fix}")


def of_langs(frame: pd.DataFrame, langs: tuple[str, ...] | list[str]) -> np.ndarray:
    """Whether each row is of `langs` (train.langs, a specialist's); every row where `langs` is empty."""
    return frame["lang"].isin(list(langs)).to_numpy() if langs else np.ones(len(frame), dtype=bool)


def test_rows(test: pd.DataFrame, langs: tuple[str, ...] | list[str]) -> np.ndarray:
    """Row positions of the test table a fold predicts: every row, or a specialist's languages' (train.langs)."""
    return np.flatnonzero(of_langs(test, langs))


def scored_rows(table: pd.DataFrame, fold: int, langs: tuple[str, ...] = ()) -> np.ndarray:
    """Row positions that score fold `fold` (its OOF): its validation rows, of `langs` where given; none for a
    stage-1 model."""
    if fold == layout.STAGE1:
        return np.flatnonzero(np.zeros(len(table), dtype=bool))
    return np.flatnonzero((table["fold"].to_numpy() == fold) & of_langs(table, langs))


def training_only(table: pd.DataFrame) -> np.ndarray:
    """Whether each row is a training-only row of the table's own (English, translated, bias: fold -1, never scored),
    the pseudo-labelled test rows left out."""
    plain = table["pseudo_for"].to_numpy() == -1 if "pseudo_for" in table else np.ones(len(table), dtype=bool)
    return (table["fold"].to_numpy() == layout.STAGE1) & plain


def fold_targets(cfg: Config, table: pd.DataFrame, fold: int) -> np.ndarray:
    """Each row's target as fold `fold` trains on it (float32): its `toxic`, the training-only rows' mixed with
    the teacher's fold-`fold` predictions under data.relabel_from (pipeline.inputs.relabel); a scored row's never
    changes."""
    return relabel.fold_targets(cfg, table, fold, np.flatnonzero(training_only(table)))


def training_rows(
    table: pd.DataFrame, fold: int, training_only_rows: bool = True, langs: tuple[str, ...] = ()
) -> np.ndarray:
    """Row positions fold `fold` trains on; for a stage-1 model the training-only rows and nothing else; of
    `langs` only where given (a specialist: its language's rows of each kind below).

    Pseudo-labelled test rows carry the fold they were made for in `pseudo_for`: fold k trains only on the
    labels of the teacher's fold-k model, which never saw fold k.
    """
    folds = table["fold"].to_numpy()
    pseudo_for = table["pseudo_for"].to_numpy() if "pseudo_for" in table else np.full(len(table), -1)
    ours = of_langs(table, langs)
    if fold == layout.STAGE1:
        return np.flatnonzero(training_only(table) & ours)
    chosen = (folds >= 0) & (folds != fold)  # the other folds' validation rows (held-out stand-ins among them)
    if training_only_rows:
        chosen |= training_only(table)
    if (pseudo_for >= 0).any() and not (pseudo_for == fold).any():
        # a teacher of some folds: this fold would train without the pseudo-labels the experiment is named for
        raise DataError(
            f"fold {fold} has no pseudo-labelled rows: data.pseudo_from's teacher has no fold {fold}; train that "
            "fold of the teacher and run `make data` again, or leave this fold out of train.folds"
        )
    chosen |= pseudo_for == fold  # test rows labelled by the teacher's model of this very fold
    return np.flatnonzero(chosen & ours)
