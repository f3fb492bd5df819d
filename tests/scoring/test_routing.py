"""`make blend` with blend.route: each language's OOF and test rows from the experiment named for it, the rest
from the fallback, scored on the routed OOF and ranked by `make board` beside the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import blend, board, layout
from pipeline.blend import BlendError
from pipeline.errors import ConfigError, PipelineError
from pipeline.files import read_json
from pipeline.scoring import metrics, routing
from tests.helpers import board_rows
from tests.helpers.experiments import Competition


def fallback_and_specialist(tmp_path: Path) -> tuple[Competition, dict]:
    """`base`, the label plus noise; `es`, a specialist right on every es row (its other rows noise)."""
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    rng = np.random.default_rng(5)
    preds = {"base": 1 / (1 + np.exp(-(2 * y - 1 + rng.normal(0, 1.3, len(y))))), "es": rng.random(len(y))}
    preds["es"][comp.rows["lang"].to_numpy() == "es"] = y[comp.rows["lang"].to_numpy() == "es"] * 0.8 + 0.1
    tests = {name: {k: rng.random(90) for k in range(5)} for name in preds}
    for name in preds:
        comp.experiment(name, preds[name], tests[name])
    return comp, {"pred": preds, "test": tests}


def test_route_takes_each_language_from_its_experiment(tmp_path: Path, capsys) -> None:
    comp, made = fallback_and_specialist(tmp_path)
    summary = blend.run(comp.config("blend.members=[base]", "blend.route=[es:es]", "blend.route_scale=own"))
    exp = comp.models / "base+es"
    es = (comp.rows["lang"] == "es").to_numpy()

    oof = pd.read_csv(exp / layout.OOF, dtype={"id": str}).set_index("id").loc[comp.rows["id"]]
    assert np.allclose(oof["pred"].to_numpy()[es], made["pred"]["es"][es])  # es rows: the specialist's
    assert np.allclose(oof["pred"].to_numpy()[~es], made["pred"]["base"][~es])  # the others: the fallback's
    routed = np.where(es, made["pred"]["es"], made["pred"]["base"])  # the routed OOF is what is scored
    assert summary["metrics"]["valid_auc"] == pytest.approx(metrics.auc(comp.rows["toxic"], routed))
    assert summary["per_lang"]["es"] == pytest.approx(1.0)

    test = pd.read_csv(tmp_path / "raw" / layout.TEST, dtype=str, keep_default_na=False)
    fold0 = pd.read_csv(exp / "fold0" / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)
    on_es = fold0["id"].map(test.set_index("id")["lang"]).eq("es").to_numpy()
    assert on_es.any() and np.allclose(fold0["toxic"][on_es], made["test"]["es"][0][on_es])
    assert np.allclose(fold0["toxic"][~on_es], made["test"]["base"][0][~on_es])
    assert layout.submission_path(comp.cfg, "base+es").exists()
    assert read_json(exp / "fold0" / layout.DONE)["route"] == {"es": "es", "fallback": "base", "scale": "own"}

    rows = {r["experiment"]: r for r in board_rows(board.run(comp.config()))}
    assert set(rows) >= {"base", "es", "base+es"} and rows["base+es"]["model"].startswith("route: es es; else base")
    capsys.readouterr()


def test_on_scale_of_keeps_the_order_and_gives_out_the_values() -> None:
    got = routing.on_scale_of([0.9, 0.1, 0.5, 0.1], [0.2, 0.4, 0.6, 0.8])
    np.testing.assert_allclose(got, [0.8, 0.3, 0.6, 0.3])  # the tied lowest two share 0.2 and 0.4


def test_a_route_on_the_fallbacks_scale_keeps_the_specialists_order_per_fold(tmp_path: Path, capsys) -> None:
    """The default: each fold's es rows take the fallback's values of those rows in the specialist's order, so
    the es AUC is the specialist's and the languages meet on the pooled AUC as the fallback had them."""
    comp, made = fallback_and_specialist(tmp_path)
    summary = blend.run(comp.config("blend.members=[base]", "blend.route=[es:es]"))
    exp = comp.models / "base+es"
    oof = pd.read_csv(exp / layout.OOF, dtype={"id": str}).set_index("id").loc[comp.rows["id"]]
    rows = comp.rows.assign(routed=oof["pred"].to_numpy(), base=made["pred"]["base"], es_pred=made["pred"]["es"])
    for _, fold in rows[rows["lang"] == "es"].groupby("fold"):
        assert fold["routed"].sum() == pytest.approx(fold["base"].sum())  # the fallback's values, given out again
        assert metrics.auc(fold["toxic"], fold["routed"]) == pytest.approx(1.0)  # in the specialist's order
        assert fold["routed"].rank().corr(fold["es_pred"].rank()) == pytest.approx(1.0)
    others = rows[rows["lang"] != "es"]
    np.testing.assert_allclose(others["routed"], others["base"])
    assert summary["per_lang"]["es"] == pytest.approx(1.0)
    assert summary["metrics"]["valid_auc"] == pytest.approx(metrics.auc(rows["toxic"], rows["routed"]))

    test = pd.read_csv(tmp_path / "raw" / layout.TEST, dtype=str, keep_default_na=False)
    fold0 = pd.read_csv(exp / "fold0" / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)
    on_es = fold0["id"].map(test.set_index("id")["lang"]).eq("es").to_numpy()
    np.testing.assert_allclose(np.sort(fold0["toxic"][on_es]), np.sort(made["test"]["base"][0][on_es]))
    ranks = [pd.Series(v).rank().to_numpy() for v in (fold0["toxic"][on_es].to_numpy(), made["test"]["es"][0][on_es])]
    np.testing.assert_array_equal(*ranks)  # in the specialist's order
    assert read_json(exp / "fold0" / layout.DONE)["route"]["scale"] == "fallback"
    capsys.readouterr()


def test_route_refusals(tmp_path: Path) -> None:
    comp, _ = fallback_and_specialist(tmp_path)
    with pytest.raises(BlendError, match="blend.route needs one member"):
        blend.run(comp.config("blend.members=[base,es]", "blend.route=[es:es]"))
    with pytest.raises(ConfigError, match="not `lang:experiment`"):
        comp.config("blend.members=[base]", "blend.route=[es]")
    with pytest.raises(ConfigError, match="a language routed twice"):
        comp.config("blend.members=[base]", "blend.route=[es:es,es:base]")
    # a specialist whose es rows are other rows (another fold table) is refused
    rows = comp.rows.copy()
    comp.rows = rows.assign(fold=(rows["fold"] + 1) % 5)
    comp.experiment("moved", rows["toxic"].to_numpy(float), {k: np.zeros(90) for k in range(5)})
    comp.rows = rows
    with pytest.raises(PipelineError, match=r"blend.route=es:moved: its es OOF rows .* are not the fallback's"):
        blend.run(comp.config("blend.members=[base]", "blend.route=[es:moved]"))


def test_route_applies_the_calibration(tmp_path: Path, capsys) -> None:
    """A route's predictions are probabilities: predict.calibration puts them on one scale, as an experiment's."""
    comp, _ = fallback_and_specialist(tmp_path)
    route = ("blend.members=[base]", "blend.route=[es:es]")
    blend.run(comp.config(*route, "blend.name=plain"))
    blend.run(comp.config(*route, "blend.name=scaled", "predict.calibration=lang"))
    plain, scaled = (pd.read_csv(layout.submission_path(comp.cfg, n)).sort_values("id") for n in ("plain", "scaled"))
    assert not np.allclose(plain["toxic"], scaled["toxic"])
    assert read_json(comp.models / "scaled" / layout.CV_JSON)["calibration"]["how"] == "lang"
    capsys.readouterr()


def test_a_route_teaches_pseudo_labels_fold_by_fold(tmp_path: Path, capsys) -> None:
    """A route's fold-k test predictions are probabilities from fold-k models only: a fold-safe teacher."""
    from pipeline import data
    from pipeline.inputs import tables

    comp, made = fallback_and_specialist(tmp_path)
    blend.run(comp.config("blend.members=[base]", "blend.route=[es:es]", "blend.route_scale=own"))
    student = comp.config("name=student", "data.pseudo_from=base+es")
    data.prepare(student, log=lambda *_: None)
    table = tables.load_table(student)[0]
    pseudo = table[table["pseudo_for"] == 0].set_index("id")
    test = pd.read_csv(tmp_path / "raw" / layout.TEST, dtype=str, keep_default_na=False).set_index("id")
    es = test.index[test["lang"] == "es"]
    expected = pd.Series(made["test"]["es"][0], index=[f"t{i:04d}" for i in range(90)])
    assert np.allclose(pseudo.loc[es, "toxic"].astype(float), expected.loc[es])  # es labels: the specialist's
    capsys.readouterr()


def test_a_specialist_alone_is_no_teacher(tmp_path: Path) -> None:
    from pipeline import data
    from pipeline.errors import DataError

    comp, made = fallback_and_specialist(tmp_path)
    # as `make predict` leaves a specialist's folds (train.langs): some test rows only
    comp.experiment("part", made["pred"]["es"], {k: np.full(30, 0.5) for k in range(5)})
    with pytest.raises(
        DataError, match=r"30 of the test's 90 rows \(a specialist's, train.langs\); teach from a route"
    ):
        data.prepare(comp.config("name=student", "data.pseudo_from=part"), log=lambda *_: None)


def test_a_route_of_one_fold_runs_where_a_blend_needs_two(tmp_path: Path) -> None:
    """A route fits no weights: specialists of fold 0 over their base's fold 0 are routed; a blend is refused."""
    import shutil

    comp, made = fallback_and_specialist(tmp_path)
    for name in ("base", "es"):
        for k in range(1, 5):
            shutil.rmtree(comp.models / name / f"fold{k}")
    with pytest.raises(BlendError, match="share 1 usable fold.*a blend needs two"):
        blend.run(comp.config("blend.members=[base,es]"))
    exp = comp.models / "base+es"
    with pytest.raises(PipelineError, match="predictions are of one fold: train another, or use predict.calibration"):
        blend.run(comp.config("blend.members=[base]", "blend.route=[es:es]", "predict.calibration=lang"))
    assert not exp.exists()  # refused before anything is written
    blend.run(comp.config("blend.members=[base]", "blend.route=[es:es]", "blend.route_scale=own"))
    assert sorted(p.name for p in exp.glob("fold*")) == ["fold0"]
    oof = pd.read_csv(exp / layout.OOF, dtype={"id": str}).set_index("id")
    rows = comp.rows.set_index("id").loc[oof.index]
    es = (rows["lang"] == "es").to_numpy()
    assert np.allclose(oof["pred"].to_numpy()[es], pd.Series(made["pred"]["es"], comp.rows["id"]).loc[oof.index][es])
