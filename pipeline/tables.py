"""The prepared tables' contract: where `make data` puts them and how the later stages read them.

Reads   input/prepared/<name>/{folds.csv,test.csv,data.json}
Writes  nothing

Both pipeline.data (which writes the tables) and pipeline.tokens (which tokenizes them) stand on this
module, so neither has to import the other's stage.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.config import Config, check_name
from pipeline.errors import PipelineError
from pipeline.io import read_json


class DataError(PipelineError, ValueError):
    """A problem with the user's input files; the message is one line that names the file."""


def prepared_dir(cfg: Config) -> Path:
    # checked again here, not only when the config loads: `name=` made this input/prepared/ itself,
    # which `make data` replaces whole, with every other experiment's tables in it
    return Path(cfg.input_dir) / "prepared" / check_name(cfg.name)


def load_table(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The prepared tables and data.json, for the stages after `make data`."""
    out = prepared_dir(cfg)
    if not (out / "data.json").exists():
        raise DataError(f"{out}: no prepared data; run `make data CONFIG=...` with the same config first")
    meta = read_json(out / "data.json")
    if meta["signature"]["data"] != cfg.to_dict()["data"]:
        raise DataError(f"{out}: built with other data settings; rerun `make data` with this config")
    dtypes = {"id": str, "text": str, "lang": str, "source": str}
    table = pd.read_csv(out / "folds.csv", dtype=dtypes, keep_default_na=False)
    test = pd.read_csv(out / "test.csv", dtype=dtypes, keep_default_na=False)
    return table, test, meta
