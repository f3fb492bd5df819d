"""Every pooling, declared once: what the head reads of the encoder's last hidden states, and how wide it is.

A pooling is one record: its name (`model.pooling`'s choices and doc are made from POOLINGS, in pipeline.schema),
its function (pipeline.core.modeling's Classifier pools with it), its width (the head's linear layer reads
`width` x hidden_size values) and the same function in plain torch, as docs/export.md's loader holds it (a fold
exported by `make export` loads without the pipeline). `python -m pipeline.pooling docs/export.md` rewrites the
loader's POOL table from the records; tests/test_pooling.py checks the page and that each loader's expression
pools as the record's function does.

Standard library only at import: the functions use tensors' own methods, so pipeline.schema can read the names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.docpage import between, rewrite


def masked_mean(hidden, mask):
    # padding never counts: a row's mean is over its own tokens, whatever the batch's width
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def first_token(hidden, mask):
    return hidden[:, 0]


@dataclass(frozen=True)
class Pooling:
    name: str  # model.pooling's value, head.json's and export.json's "pooling"
    doc: str  # what it reads, in a few words: model.pooling's doc
    pool: Callable  # (hidden [batch, seq, hidden], attention mask [batch, seq]) -> [batch, width x hidden]
    # docs/export.md's loader: a lambda of `hidden` and `mask` ([batch, seq, 1], float) in plain torch
    loader: str
    width: int = 1  # the pooled vector's width in hidden sizes: what the head's linear layer reads


POOLINGS = {
    p.name: p
    for p in (
        Pooling(
            "mean",
            "over the attention mask",
            masked_mean,
            "lambda hidden, mask: (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)",
        ),
        Pooling("cls", "the first token", first_token, "lambda hidden, mask: hidden[:, 0]"),
    )
}
LOADER_BEGIN, LOADER_END = "POOL = {  # export.json's pooling: from pipeline/pooling.py\n", "}\n"


def setting_doc() -> str:
    """model.pooling's doc: every pooling with what it reads."""
    each = [f"`{p.name}` ({p.doc})" for p in POOLINGS.values()]
    return "what the head reads of the encoder's last hidden states: " + " or ".join(
        [", ".join(each[:-1]), each[-1]] if len(each) > 1 else each
    )


def loader_rows() -> str:
    """The rows of docs/export.md's loader's POOL table, between its first and last lines."""
    return "".join(f'    "{p.name}": {p.loader},\n' for p in POOLINGS.values())


def with_loader_table(text: str) -> str:
    """docs/export.md with its loader's POOL table made from POOLINGS."""
    return between(text, LOADER_BEGIN, LOADER_END, loader_rows())


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.pooling PAGE`: rewrite PAGE's loader table (docs/export.md)."""
    return rewrite(argv, "python -m pipeline.pooling docs/export.md", with_loader_table)


if __name__ == "__main__":
    raise SystemExit(main())
