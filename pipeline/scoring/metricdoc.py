"""docs/recipes.md's table of the figures every report shows, made from METRICS (pipeline.scoring.metrics):
`python -m pipeline.scoring.metricdoc docs/recipes.md` rewrites it, and tests/scoring/test_metricdoc.py checks
that the page holds what the records say, so a metric added to METRICS is documented by its own record."""

from __future__ import annotations

from pipeline.docpage import between, rewrite
from pipeline.scoring.metrics import METRICS, Metric

BEGIN, END = "<!-- metrics: from pipeline/scoring/metrics.py -->", "<!-- /metrics -->"
# the reports' columns after METRICS': one a test language, metrics.per_language's figures
PER_LANGUAGE = (
    "| `es` ... `tr` | the AUC of each test language on the rows that stand for it: validation.csv's where it has "
    "them, else its held-out translated rows |"
)


def row(metric: Metric) -> str:
    # a blend's OOF holds ranks: a figure of probabilities is not computed there (metrics.scores)
    ranks = "; `-` for a blend, whose OOF holds ranks" if metric.probabilities else ""
    return f"| `{metric.header}` | {metric.doc}{ranks} |"


def table() -> str:
    """The table: a row a metric, in METRICS' order (the reports' order), then the per-language columns."""
    return "\n".join(["| name | what it is |", "|---|---|", *map(row, METRICS), PER_LANGUAGE]) + "\n"


def with_table(text: str) -> str:
    """A docs page's text with the part between BEGIN and END made table()."""
    return between(text, BEGIN, END, f"\n{table()}")


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.scoring.metricdoc PAGE`: rewrite PAGE's table of the figures (docs/recipes.md)."""
    return rewrite(argv, "python -m pipeline.scoring.metricdoc docs/recipes.md", with_table)


if __name__ == "__main__":
    raise SystemExit(main())
