"""`make leaks`: validation rows (validation.csv's and held-out translated ones) with a twin among their fold's
training rows, found by tests that do not share the grouping's rule."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline import leaks
from tests.helpers import make_cfg

TEMPLATE = (
    "Vikipedi ye hoş geldiniz {name}. Katkılarınız için teşekkür ederiz. Yeni başlayanlar için rehber "
    "sayfasına göz atabilir, sorularınızı yardım masasına sorabilir, tartışma sayfalarında imzanızı dört "
    "tilde ile atabilirsiniz. İyi çalışmalar dileriz."
)


def table(folds: list[int]) -> pd.DataFrame:
    """Two validation.csv rows that are one template with another name, in `folds`, and unrelated rows."""
    rows = [(f"v{i}", TEMPLATE.format(name=n), "tr", 0, "validation", f) for i, (n, f) in
            enumerate(zip(["Ahmet", "Mehmet"], folds))]  # fmt: skip
    others = [
        "bu makale kaynak göstermiyor",
        "film çok güzeldi bence",
        "şehir nüfusu yanlış yazılmış",
        "takım geçen sezon şampiyon oldu",
        "müzik albümü hangi yıl çıktı",
        "kitabın yazarı kimdir",
    ]
    rows += [(f"o{i}", t, "tr", i % 2, "validation", i % 3) for i, t in enumerate(others)]
    return pd.DataFrame(rows, columns=["id", "text", "lang", "toxic", "source", "fold"])


def test_copies_of_a_validation_row_in_another_fold_are_found(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "data.group_encoder=")
    twins, bad = leaks.audit(cfg, table([0, 1]))["same words"]
    assert (twins, bad) == (2, 2)  # each copy trains the fold that scores the other
    assert leaks.audit(cfg, table([0, 0]))["same words"] == (2, 0)  # grouped into one fold: no leak


def test_word_pairs_are_within_one_language() -> None:
    texts = [TEMPLATE.format(name="Ahmet"), TEMPLATE.format(name="Mehmet"), TEMPLATE.format(name="Ayşe")]
    assert leaks.word_pairs(texts, pd.Series(["tr", "tr", "es"]).to_numpy()) == [(0, 1)]
