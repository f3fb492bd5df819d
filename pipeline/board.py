"""Stage `make board`: every experiment and blend under models/, side by side, best six-language AUC first.

Reads   models/*/fold<k>/oof.csv and done.json of the folds that count (every figure is computed from them,
        with the test profile their done.json records: each experiment is scored by its own inputs),
        models/*/cv.json for the test AUC and a blend's weights while they describe those very folds,
        models/*/pipeline.yaml for a trained experiment's settings,
        input/prepared/<its tables>/folds.csv for each row's group (a comment's copies and translations)
Writes  models/board.md   the table that is printed

Columns: every metric of metrics.METRICS, by its name (the six-language AUC, the estimate of the test AUC,
where the OOF covers every test language; the validation AUC; ...), the estimate without length (w/o length:
weighted by language and class only), the AUC per test language, folds done (of
data.folds), minutes (a blend: its members'), test AUC where the experiment's cv.json has `test_auc`
(written when the competition's test labels are known), and the settings that matter: model, max_length,
epochs, lr, effective batch. An experiment with folds still to train is marked (incomplete); one with
folds that no longer match their inputs, (stale); one made by a newer version of the pipeline (settings this
version does not know), (newer version), with one line that says so. One whose 6-lang AUC is without the test's
length mix (its prepared folder has no lengths.csv) where others have it, (no length): another estimate, ranked
apart below them, never a tie or a disagreement with them. Beside each row ranked by the 6-lang AUC, its
difference to the next comparable row below and the paired bootstrap interval of it (pipeline.scoring.paired:
the labelled rows drawn again, a comment's copies and translations together); (~) marks a tie where that
interval covers 0 or the two rows' order flips at a corner of the toxic-rate range (pipeline.scoring.ranking).
Where experiments have a test AUC, a line counts the pairs each estimate orders as the test does, far pairs
(interval clear of 0) apart from close ones.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline import experiments, fingerprint, layout, validity
from pipeline.errors import PipelineError, run_stage
from pipeline.files import atomic_write_text
from pipeline.schema import Config
from pipeline.scoring import calibration, metrics, paired, ranking, report, routing
from pipeline.scoring.metrics import shown as cell

# the column of each row's 6-lang AUC less the next comparable row's, with its paired interval (paired.interval)
NEXT = f"vs next ({paired.LEVEL:.0%})"
NOT_YET = ("not trained", "not made", "not complete")  # why a fold does not count yet, not why it no longer does


def counted_folds(cfg: Config, exp: Path) -> tuple[set[int], str, str, str]:
    """(the folds that count, by number, a stage-1 model's included; why others that are there no longer do:
    stale; which are still to make: incomplete; the line that says it, or a member, was made by a newer version
    of the pipeline, which this one cannot check: newer)."""
    try:
        use, left_out = experiments.experiment_check(cfg, exp.name, needs=(layout.OOF,))
    except validity.NewerVersion as e:  # not stale: this version cannot tell
        return set(), "", "", str(e)
    except PipelineError as e:  # its config or prepared data is gone or changed: nothing can be vouched for
        return set(), str(e), "", ""
    stale = validity.describe({f: why for f, why in left_out.items() if why not in NOT_YET})
    incomplete = validity.describe({f: why for f, why in left_out.items() if why in NOT_YET})
    counted = {layout.fold_index(d) for d in use}
    stage1 = layout.done_dirs(exp).get(layout.STAGE1)
    if stage1 is not None and not validity.fold_status(stage1):
        counted.add(layout.STAGE1)  # a stage-1 model: no OOF to score, only complete
        if not any(k >= 0 for k in layout.fold_dirs(exp)):
            incomplete = ""  # a stage-1 experiment: its one model is all it makes
    return counted, stale, incomplete, ""


def experiment_profile(cfg: Config, exp: Path) -> dict | None:
    """The test profile of an experiment whose folds do not record one (made by an older version): its own
    prepared tables', a blend's first member's; None where they cannot be read."""
    prepared = experiments.prepared_folder(cfg, exp)
    return metrics.folder_profile(prepared) if prepared is not None else None


def summary_of(exp: Path, counted: set[int], profile=None, prepared: Path | None = None) -> dict:
    """The CV summary of the folds that count, computed from their OOF files (never copied from a cv.json
    that may describe other folds) and scored by the test profile their done.json records (`profile`: a
    function giving one for folds made before it was recorded). cv.json adds the test score and a blend's
    weights only while it describes these very folds. Folds without OOF rows (a stage-1 model, fold -1)
    count as done, without AUC. `prepared`: the folder of the tables they were made from, whose lengths.csv
    the estimate weights by length with."""
    dirs = {k: d for k, d in layout.done_dirs(exp).items() if k in counted}
    done = {k: validity.read_done(d) for k, d in dirs.items()}
    scored = [dirs[k] for k in done if k >= 0]
    if not scored:
        nothing = {m.key: math.nan for m in metrics.METRICS}
        return {"metrics": nothing, "per_lang": {}, "folds": {}, "fold_details": done}
    recorded = report.profile_of(done) or (profile() if profile else None)
    if prepared is not None:
        recorded = metrics.with_test_lengths(recorded, prepared)
    oof = report.read_oof(scored, prepared)
    summary = report.folds_summary(oof, done, scored, prepared, recorded)  # ranged as `make cv` ranges it
    saved = report.read_cv(exp / layout.CV_JSON)
    details = saved.get("fold_details") if isinstance(saved.get("fold_details"), dict) else {}
    if {str(k): d["digest"] for k, d in done.items()} == {k: (v or {}).get("digest") for k, v in details.items()}:
        summary.update({key: saved[key] for key in ("blend",) if key in saved})  # the weights of these folds
    if of_these_folds(saved.get("test_auc"), done):  # predict's score of these very folds
        summary["test_auc"] = saved["test_auc"]
    summary["oof"] = oof  # the rows its figures are of: the board draws them again (paired intervals)
    calibrated = saved.get("calibration")
    if "six" in summary and of_these_folds(calibrated, done):  # the submission is calibrated: so is its OOF
        summary["six"]["calibrated"] = {k: calibrated.get(k) for k in ("how", "oof_before", "oof_after", "c_by_fold")}
        scaled = calibrated_oof(oof, summary["six"], calibrated)
        summary["six"]["calibrated"]["oof"] = scaled
        summary["six"]["calibrated"]["corners"] = calibrated_corners(scaled, summary["six"])
    return summary


def calibrated_oof(oof, six: dict, calibrated: dict):
    """The OOF of the figure a calibrated experiment is ranked by: scaled with each fold's recorded C
    (calibration.with_recorded_c); None without each fold's C."""
    if not calibrated.get("c_by_fold"):
        return None
    return calibration.with_recorded_c(oof, six["profile"], calibrated["c_by_fold"])


def calibrated_corners(scaled, six: dict) -> list[float] | None:
    """The range's corners of the figure a calibrated experiment is ranked by: its calibrated OOF (calibrated_oof)
    at every corner of its uncalibrated range, so that ties with it are marked as with any other row; None without
    that OOF or a range."""
    if scaled is None or not six.get("corners"):
        return None
    return metrics.six_corners(scaled, six["profile"])


def of_these_folds(record, done: dict[int, dict]) -> bool:
    """Whether a cv.json record (test_auc, calibration) names the folds it was made from and they are these."""
    record = record if isinstance(record, dict) else {}
    names = record.get("folds") if isinstance(record.get("folds"), list) else []
    used = [done.get(layout.fold_index(Path(str(n))), {}).get("digest") for n in names]
    return bool(names) and record.get("digests") == used


def folds_done(summary: dict, total) -> str:
    """`3 of 5` folds complete of data.folds; a run on the training-only rows alone (fold -1) is `stage 1`."""
    done = [int(k) for k in summary.get("fold_details", {}) or summary["folds"]]
    if done == [-1]:
        return "stage 1"
    return f"{sum(k >= 0 for k in done)} of {total}"


def scored_folds(summary: dict) -> list[int]:
    """The folds whose OOF rows an experiment's figures are of: figures compare only over the same folds."""
    return sorted(int(k) for k in summary.get("folds", {}) if int(k) >= 0)


def display_settings(exp: Path, summary: dict) -> dict:
    """model, max_length, epochs, lr, effective batch and the number of folds the experiment has."""
    details = list(summary.get("fold_details", {}).values())
    first = details[0] if details else {}
    kind = experiments.experiment_kind(exp)
    if kind == "blend":
        b = summary.get("blend")
        dones = [d for d in map(validity.read_done, layout.done_dirs(exp).values()) if d]
        names = b["members"] if b else (dones[0].get("members") or []) if dones else []
        members = " + ".join(f"{n} {b['weights'][n]:.2f}" for n in names) if b else " + ".join(map(str, names))
        # of its members' data.folds: a blend of two folds of five is "2 of 5", not "2/2"
        total = max([len(layout.done_dirs(exp)), *(member_folds(exp.parent / str(n)) for n in names)])
        route = summary.get("route") or (dones[0].get("route") if dones else None)
        if route:  # a route (blend.route): which experiment each language's rows come from
            said = ", ".join(f"{lang} {n}" for lang, n in routing.languages(route).items())
            scale = "" if route.get("scale", "own") == "own" else ", on its scale"  # routes made before `scale`: own
            return {"model": f"route: {said}; else {route.get('fallback', '?')}{scale}", "folds_total": total}
        return {"model": f"blend: {members or '?'}", "folds_total": total}
    if (exp / layout.RUN_CONFIG).exists() and kind != fingerprint.TFIDF["model"]:
        # read as plain YAML, not as a Config: an experiment from an older version still gets its row
        saved = yaml.safe_load((exp / layout.RUN_CONFIG).read_text()) or {}
        model, train = saved.get("model", {}), saved.get("train", {})
        batch = first.get("effective_batch", train.get("micro_batch", 0) * train.get("accumulation", 0) or None)
        lora = model.get("lora") or {}
        return {
            # a LoRA experiment is another model over the same base: the board tells them apart
            "model": str(model.get("name", "?")) + (f" + LoRA r={lora['r']}" if lora.get("r") else ""),
            "max_length": model.get("max_length"),
            "epochs": train.get("epochs"),
            "lr": train.get("lr"),
            "batch": batch,
            "folds_total": saved.get("data", {}).get("folds", len(summary["folds"])),
        }
    if kind == fingerprint.TFIDF["model"]:  # the TF-IDF baseline: what its done.json says
        return {"model": kind, "epochs": first.get("epochs"), "folds_total": len(layout.done_dirs(exp))}
    return {"model": "?", "folds_total": len(layout.done_dirs(exp))}  # folds, but no config: made by hand?


def member_folds(exp: Path) -> int:
    """The folds a blend member's config makes (data.folds), 0 where it cannot be read."""
    try:
        return int((yaml.safe_load((exp / layout.RUN_CONFIG).read_text()) or {}).get("data", {}).get("folds", 0))
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):
        return 0


def row(cfg: Config, exp: Path) -> dict | None:
    """The board's row of one experiment or blend folder (numbers from the folds that count only, scored by
    the experiment's own test profile); None for a folder with no folds."""
    if not layout.done_dirs(exp):
        return None
    counted, stale, incomplete, newer = counted_folds(cfg, exp)
    prepared = experiments.prepared_folder(cfg, exp)
    summary = summary_of(exp, counted, lambda: experiment_profile(cfg, exp), prepared)
    s = display_settings(exp, summary)
    six = summary.get("six") or {}
    figures = dict(summary["metrics"])
    calibrated = six.get("calibrated")  # the submission is calibrated, with or without a 6-lang AUC to show it
    scored = calibrated.pop("oof", None) if calibrated else None
    # judged by the calibrated OOF's (nested) estimate where the record has one (null in cv.json where it was not a
    # number); a record without each fold's C is of an older predict, whose after figure was the best of four
    # estimates, chosen on the rows it scores: not ranked by
    ranked = calibrated and calibrated.get("c_by_fold") and metrics.defined(calibrated.get("oof_after"))
    if ranked and not math.isnan(figures[metrics.SIX.key]):
        calibrated = {**calibrated, "ranked": True}
        figures[metrics.SIX.key] = calibrated["oof_after"]
    else:
        scored = summary.get("oof")
    return {
        "name": exp.name,
        "metrics": figures,
        "per_lang": summary["per_lang"],
        "folds": folds_done(summary, s.pop("folds_total")),
        "scored_folds": scored_folds(summary),  # the rows its figures are of: compared only with the same
        # the estimate at each plausible toxic rate (metrics.six_corners); a calibrated experiment's of the figure
        # it is ranked by, the calibrated OOF's
        "corners": calibrated.get("corners") if calibrated and calibrated.get("ranked") else six.get("corners"),
        "minutes": sum(d.get("minutes", 0) for d in summary.get("fold_details", {}).values()),
        "test": (summary.get("test_auc") or {}).get("auc"),  # {auc, per_lang, rows} from predict or blend
        # the estimate weighted by language and class only (the uncalibrated OOF's): what length changed
        "without": (six.get("lengths") or {}).get("without"),
        # whether its 6-lang AUC is weighted to the test's length mix: not where its rows have no token counts
        "length": bool(six.get("lengths")),
        "stale": stale,  # folds that are there but no longer count: left out of the numbers
        "incomplete": incomplete,  # folds still to train (or being trained)
        "newer": newer,  # made by a newer version (or a member was): this one cannot say whether its folds count
        "calibrated": calibrated,  # {how, oof_before, oof_after} where its submission is calibrated
        "test_of": json.dumps((six.get("profile") or {}).get("mix"), sort_keys=True),  # the test it was scored for
        # the OOF rows its 6-lang AUC is of (a calibrated one's: scaled), its profile and the rows' groups: what
        # the paired interval with another row draws again (paired.interval)
        "paired": {"oof": scored, "profile": six["profile"], "groups": paired.read_groups(prepared)}
        if scored is not None and "profile" in six and not math.isnan(figures[metrics.SIX.key])
        else None,
        **s,
    }


def rows(cfg: Config) -> list[dict]:
    """One row per experiment or blend folder, ranked (ranking.rank); a folder that cannot be read is named on
    stderr and left out."""
    out = []
    for exp in sorted(p for p in layout.models_root(cfg).iterdir() if p.is_dir()):
        try:
            found = row(cfg, exp)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as e:
            print(f"board: skipped {exp}: cannot read it ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        if found is not None:
            out.append(found)
    marked = ranking.mark_no_length(sorted(out, key=ranking.rank))
    return ranking.mark_ties(ranking.mark_disagreements(ranking.mark_intervals(marked)))


def board_table(board: list[dict]) -> str:
    """A Markdown table: readable printed, rendered on GitHub."""
    langs = sorted({lg for r in board for lg in r["per_lang"]})
    head = ["experiment", *(m.header for m in metrics.METRICS), NEXT, "w/o length", *langs, "folds", "minutes"]
    head += ["test AUC"]
    head += ["model", "max_len", "epochs", "lr", "batch"]
    body = []
    for r in board:
        values = [
            r["name"]
            + (" (stale)" if r.get("stale") else "")
            + (" (incomplete)" if r.get("incomplete") else "")
            + (" (newer version)" if r.get("newer") else "")
            + (" (calibrated)" if r.get("calibrated") else "")
            + (" (no length)" if r.get("no_length") else "")
            + (" (!)" if r.get("below") else "")
            + (" (~)" if r.get("tie") or r.get("close") else ""),
            *(cell(r["metrics"].get(m.key), m.fmt) for m in metrics.METRICS),
            r["next"]["interval"].shown() if r.get("next") else "-",
            cell(r.get("without"), ".4f"),
            *(cell(r["per_lang"].get(lg), ".4f") for lg in langs),
            r["folds"],
            cell(r["minutes"], ".1f"),
            cell(r["test"], ".4f"),
            r["model"],
            cell(r.get("max_length")),
            cell(r.get("epochs")),
            cell(r.get("lr"), "g"),
            cell(r.get("batch")),
        ]
        body.append([str(v) for v in values])
    # padded to the widest cell of each column, so that the printed table reads as well as the rendered one
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in [head, *body]]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def stale_notes(board: list[dict]) -> str:
    """Why each experiment marked stale or (!) is: its numbers describe folds that no longer match their
    inputs; its OOF and test AUC disagree with another experiment's."""
    agreement = ranking.order_agreement(board)
    notes = [agreement] if agreement else []
    notes += [f"- {r['name']} (stale): {r['stale']}" for r in board if r.get("stale")]
    notes += [f"- {r['name']} (incomplete): {r['incomplete']}" for r in board if r.get("incomplete")]
    notes += [f"- {r['name']} (newer version): {r['newer']}" for r in board if r.get("newer")]
    notes += [calibrated_note(r) for r in board if r.get("calibrated")]
    notes += [f"- {r['name']} (no length): its {metrics.SIX.header} is weighted by language and class only, not to "
              "the test's length mix (its rows have no token counts: its prepared folder has no lengths.csv, which "
              "`make data` writes); ranked apart, below those weighted by length, with which it does not compare"
              for r in board if r.get("no_length")]  # fmt: skip
    if any(r.get("next") for r in board):
        notes.append(tie_note())
    notes += [f"- {r['name']} (~): a tie with {r['tie']}: their order flips as the test's toxic rates move within "
              "the range under the validation-rate assumption (`make cv` shows it)" for r in board
              if r.get("tie")]  # fmt: skip
    notes += [f"- {r['name']} (~): a tie with {r['close']}: {r['next']['interval'].shown()}, the {paired.LEVEL:.0%} "
              "interval of the difference covers 0" for r in board if r.get("close")]  # fmt: skip
    sets = {tuple(r.get("scored_folds") or []) for r in board if r.get("scored_folds")}
    if len(sets) > 1:
        notes.append("- experiments are ranked among those scored on the same folds, the most folds first: "
                     "figures over other rows do not compare")  # fmt: skip
    for r in board:
        if r.get("below"):
            q = next(x for x in board if x["name"] == r["below"])
            m = ranking.compared_by(r, q)
            notes.append(f"- {r['name']} (!): {m.header} {r['metrics'][m.key]:.4f} above {q['name']}'s "
                         f"{q['metrics'][m.key]:.4f}, test AUC {r['test']:.4f} below its {q['test']:.4f}")  # fmt: skip
    return "\n".join(notes)


def tie_note() -> str:
    """What the `vs next` column and a tie (~) mean, for a reader new to the board."""
    return (f"- {NEXT}: the row's {metrics.SIX.header} less the next comparable row's below it, and the "
            f"{paired.LEVEL:.0%} interval of that difference over {paired.DRAWS} redraws of the labelled rows (a "
            "comment with its copies and translations drawn together, both experiments scored on the same draw). "
            "(~) marks a tie: the two cannot be told apart, because the interval covers 0 (another sample of rows "
            "could order them the other way), or because their order flips as the test's unknown toxic rates move "
            "within their range; a tie is no evidence that either is better")  # fmt: skip


def calibrated_note(r: dict) -> str:
    c, six = r["calibrated"], metrics.SIX.header
    if not c.get("ranked") and not c.get("c_by_fold") and not math.isnan(r["metrics"][metrics.SIX.key]):
        return (
            f"- {r['name']} (calibrated): its submission is calibrated ({c['how']}); its figures are of the "
            f"uncalibrated OOF: the calibration's record is older than the choice of C inside each fold, and its "
            f"{six} after calibration, {metrics.shown(c['oof_after'], '.4f')}, chose C on the rows it scores (rerun "
            "`make predict`)"
        )
    if not c.get("ranked") and not math.isnan(r["metrics"][metrics.SIX.key]):
        return (
            f"- {r['name']} (calibrated): its submission is calibrated ({c['how']}); its figures are of the "
            f"uncalibrated OOF: the calibration's record has no {six} after calibration to rank it by"
        )
    if not c.get("ranked"):  # its before and after are of the languages the OOF has: no 6-lang AUC to rank by
        return (f"- {r['name']} (calibrated): its submission is calibrated ({c['how']}); its figures are of the "
                f"uncalibrated OOF, which has no {six} to judge the calibration by")  # fmt: skip
    # the prior's move to the rates EM finds in the unlabelled test rows cannot be scored on the OOF
    after = "after (nested, each fold's C chosen on the others)"
    if c["how"] != "lang":
        after = "after lang (nested, each fold's C chosen on the others; the move to the test's rates: not scored)"
    before = metrics.shown(c.get("oof_before"), ".4f")
    return (f"- {r['name']} (calibrated): its submission is calibrated ({c['how']}): {six} {before} "
            f"before, {c['oof_after']:.4f} {after}, which it is ranked by; its other figures are of the "
            "uncalibrated OOF")  # fmt: skip


def run(cfg: Config) -> str:
    models = layout.models_root(cfg)
    experiments.preflight(cfg, "board")
    board = rows(cfg) if models.is_dir() else []
    if not board:
        raise PipelineError(f"nothing to list in {models}/: run `make train`, `make baseline` or `make blend` first")
    text = board_table(board)
    notes = stale_notes(board)
    text += f"\n\n{notes}" if notes else ""
    six, valid = metrics.RANKED_BY
    head = (f"Ranked by the {six.header} (the estimate of the test AUC) where an experiment's OOF covers every "
            f"test language, then by the {valid.header} (validation.csv's rows).")  # fmt: skip
    atomic_write_text(layout.board_path(cfg), f"# Board\n\n{head}\n\n{text}\n")
    print(text)
    print(f"\nwrote {layout.board_path(cfg)}")
    return text


def main(argv=None) -> int:
    p = config_mod.parser("List every experiment and blend under models/, best six-language AUC first.")
    args = p.parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
