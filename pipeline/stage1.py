"""Stage `make stage1`: the stage-1 model of a two-stage experiment, the one `model.init_from` names.

Reads   the config's competition files and model, as `make data` and `make train` do
Writes  input/prepared/<init_from>/      its fold table, tokenizer and token cache (without --train)
        models/<init_from>/fold-1/       one model trained on the training-only rows (with --train): no
                                         validation row, no OOF; every fold of the config starts from it

The stage-1 run is this config with `model.init_args` applied (e.g. [train.epochs=1, train.lr=2e-5]), named
after `model.init_from`, on fold -1. `make stage1` runs the data part, then the train part (under torchrun
with GPUS=N), and afterwards `make data train predict` with the same CONFIG and ARGS runs stage 2.
"""

from __future__ import annotations

from pipeline import config as config_mod
from pipeline.core import distributed
from pipeline.errors import ConfigError, run_stage
from pipeline.schema import Config


def stage1_of(cfg: Config) -> Config:
    s1 = config_mod.stage1_config(cfg)
    if s1 is None:
        raise ConfigError(
            "model.init_from is empty: a stage-1 model is made for a config that starts from one "
            "(model.init_from=<name>, with model.init_args for how it trains)"
        )
    return s1


def main(argv=None) -> int:
    parser = config_mod.parser("Data (or with --train, training) for the stage-1 model model.init_from names.")
    parser.add_argument("--train", action="store_true", help="train it (the data part must have run)")
    args = parser.parse_args(argv)

    def stage() -> None:
        from pipeline import data, train

        cfg = config_mod.from_args(args)
        s1 = stage1_of(cfg)
        how = ", ".join(cfg.model.init_args) or f"the settings of {cfg.name}"
        print(f"stage1: {s1.name}, one model on the training-only rows (fold -1), with {how}")
        if args.train:
            train.run(s1)
        else:
            data.run(s1)

    return run_stage(stage)


if __name__ == "__main__":
    distributed.exit_process(main())  # under torchrun with --train: see distributed.exit_process
