"""Stage `make export`: each trained fold as a folder that loads outside the pipeline, with transformers and torch.

Reads   models/<name>/fold<k>/ of the complete folds made from the current inputs and settings, every file as their
        done.json records it: the weights, config.json, head.json, the tokenizer and a trimmed model's vocab_map.npy
Writes  models/<name>/export/fold<k>/  the encoder's save_pretrained folder (config.json, model.safetensors) with
                                       the fold's tokenizer beside it; head.pt, the head's weight and bias (a dict of
                                       tensors); export.json: pooling, max_length, and the scale of a prediction.
                                       export/ holds exactly the folds exported: an earlier export's others go

A trimmed model's embedding is given back the tokenizer's whole vocabulary (trim.untrim), so the exported tokenizer
is the fold's own and every id reads the row it read in training. A LoRA fold is exported with its adapters merged
into its base's weights (W + alpha / r B A, in fp32): the folder loads the same way, transformers alone; a fold
trained on a quantized base is refused in one line (its adapters fit the 4 or 8-bit weights, not plain ones).
The loading function, a few lines, is in docs/export.md; tests/test_export.py runs it in a process that never
imports `pipeline` and checks it against the fold's own predictions. Several folds are the ensemble: the mean of
their probabilities. train.folds does not narrow the folds exported; export says so in one line when it is set.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

from pipeline import config as config_mod
from pipeline import experiments, files, layout, validity
from pipeline.core import lora, modeling, trim
from pipeline.errors import run_stage
from pipeline.files import atomic_dir
from pipeline.inputs import tables
from pipeline.inputs.tokenizer import load_tokenizer
from pipeline.schema import Config


def export_fold(cfg: Config, fold_dir: Path, dest: Path) -> None:
    """One fold's folder: encoder and tokenizer (save_pretrained), head.pt and export.json."""
    lora.check_mergeable(modeling.read_head(fold_dir).get("lora"))  # before its base is read
    tokenizer = load_tokenizer(fold_dir)
    model = modeling.build_model(cfg, tokenizer, source=fold_dir).eval()  # fp32; a LoRA fold's base too
    lora.merge(model)  # a LoRA fold: one plain encoder
    vmap = trim.load_map(fold_dir, model)
    if vmap is not None:  # the tokenizer's ids index the whole vocabulary, the trimmed embedding only the kept rows
        trim.untrim(model, vmap)
    spec = {
        "pooling": model.pooling,  # a name of pipeline.pooling's: docs/export.md's loader has each one (POOL)
        "max_length": cfg.model.max_length,  # texts are cut to it, special tokens included, as in training
        "scale": "probability",  # sigmoid(head(pooled)): the probability the fold's test.csv holds
        "fold": layout.fold_index(fold_dir),
    }
    with atomic_dir(dest) as tmp:
        model.encoder.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        head = {k: v.detach().cpu().contiguous() for k, v in model.head.state_dict().items()}
        torch.save(head, tmp / layout.EXPORT_HEAD)
        (tmp / layout.EXPORT_SPEC).write_text(json.dumps(spec, indent=1) + "\n")


def run(cfg: Config) -> list[Path]:
    experiments.preflight(cfg, "export")
    _, _, meta = tables.load_table(cfg)
    digest = validity.current_fingerprint(cfg, meta)
    dirs = validity.usable_folds(cfg, digest, "export")
    out = []
    for fold_dir in dirs:
        dest = layout.export_dir(cfg, layout.fold_index(fold_dir))
        export_fold(cfg, fold_dir, dest)
        out.append(dest)
        print(f"export: {fold_dir.name} -> {dest}")
    for stale in remove_others(out[0].parent, out):
        print(f"export: removed {stale} (its fold is not among the ones exported now)")
    print("load one with the function in docs/export.md; several folds ensemble as the mean of their probabilities")
    return out


def remove_others(root: Path, kept: list[Path]) -> list[Path]:
    """Every fold folder under export/ but `kept`, removed (an earlier export's, of a fold retrained, removed or no
    longer current, would sit beside the new ones and be ensembled with them), and a killed export's temporaries;
    returns the fold folders removed."""
    files.remove_dead_temporaries(root)
    stale = [p for p in layout.fold_dirs(root).values() if p not in kept]
    for p in stale:
        shutil.rmtree(p)
    return stale


def main(argv=None) -> int:
    args = config_mod.parser("Export trained folds as folders transformers and torch load.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
