"""Stage `make mlm`: the encoder trained further as a masked language model on the competition's own texts (domain
adaptation), before any fold fine-tunes it.

Reads   input/prepared/<name>/folds.csv and test.csv: their `text` column alone (training rows, validation rows
        and the test's comments; no label of any kind), and model.name's encoder and tokenizer (the tiny model:
        the tokenizer `make data` trained, the weights drawn from train.seed)
Writes  models/<name>/mlm/  the encoder's save_pretrained folder (config.json, model.safetensors; the
                            masked-language head is not kept), its tokenizer, and done.json (the fingerprint it
                            was made from, the steps, the loss at the start and the end);
                            `model.name=models/<name>/mlm` trains folds from it

The folder appears whole or not at all (files.atomic_dir). Every mlm.save_every steps the run saves a resume
state, models/<name>/mlm.resume.pt (weights, optimizer, schedule, scaler, losses, random states): a killed run
goes on from the last one and ends with the weights of an uninterrupted run; the state is removed once the
folder is written. A folder whose done.json holds the current fingerprint is kept and no work is
done. The fingerprint covers the `mlm` section, the model, train.seed and the texts' tables (their digests), so
new texts, or another model, train again. An encoder folder without a masked-language head (e5, a sentence
encoder) gets one initialised as transformers initialises a missing head, and says so in one line.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pandas as pd
import torch

from pipeline import config as config_mod
from pipeline import experiments, files, layout, progress, schema
from pipeline.core import modeling, optim, precision, resume
from pipeline.core.distributed import pick_device
from pipeline.errors import PipelineError, run_stage
from pipeline.inputs import tables, tokens
from pipeline.inputs.tokenizer import load_tokenizer
from pipeline.schema import Config

WEIGHT_DECAY = 0.01  # RoBERTa's pretraining value


def corpus(table: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """The texts the masked-language model reads: every row of the training table (its training and validation
    rows) and of the test, each distinct text once, the column `text` alone, so that no label reaches it."""
    texts = pd.concat([table["text"], test["text"]], ignore_index=True).astype(str)
    return pd.DataFrame({"text": texts.drop_duplicates().reset_index(drop=True)})


def mlm_fingerprint(cfg: Config, meta: dict, tokenizer) -> str:
    """What the folder is made from: the `mlm` section, the model, the seed, the tokenizer and the tables."""
    return files.json_digest({
        "mlm": {k: v for k, v in cfg.to_dict()["mlm"].items() if schema.roles("mlm")[k].role != schema.NEVER},
        "model": cfg.model.name,
        "tiny": cfg.to_dict()["model"]["tiny"] if cfg.model.name == "tiny" else None,
        "seed": cfg.train.seed,
        "tokenizer": tokens.tokenizer_identity(tokenizer),
        "table_digest": meta["table_digest"],
        "test_digest": meta["test_digest"],
    })  # fmt: skip


def is_current(dest: Path, digest: str) -> bool:
    """The folder holds a finished run of this fingerprint."""
    try:
        return files.read_json(dest / layout.DONE).get("fingerprint") == digest
    except (OSError, ValueError, AttributeError):
        return False


def text_length(cfg: Config) -> int:
    """mlm.max_length, cut to what the model's position embeddings take (the tiny model: model.max_length)."""
    limit = cfg.model.max_length if cfg.model.name == "tiny" else tokens.max_positions(cfg)
    return min(cfg.mlm.max_length, limit or cfg.mlm.max_length)


def mlm_model(cfg: Config, tokenizer, log=print) -> torch.nn.Module:
    """model.name's encoder under a masked-language head; the tiny XLM-R drawn from its config and train.seed."""
    from transformers import AutoModelForMaskedLM

    if cfg.model.name == "tiny":
        torch.manual_seed(cfg.train.seed)
        return AutoModelForMaskedLM.from_config(modeling.tiny_config(cfg, len(tokenizer), tokenizer.pad_token_id))
    name = str(cfg.model.path or cfg.model.name)
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(
            name, output_loading_info=True, trust_remote_code=False, dtype=torch.float32
        )
    except (OSError, ValueError) as e:
        raise PipelineError(f"mlm: cannot load {name!r} as a masked language model ({e})".splitlines()[0]) from None
    # an encoder saved without its pretraining head (a sentence encoder: e5) loads with the head drawn afresh
    new = [k for k in info["missing_keys"] if not k.startswith(model.base_model_prefix + ".")]
    if new:
        log(f"mlm: {name} has no masked-language head ({len(new)} weights); one is initialised as transformers does")
    return model


def prediction_head(model: torch.nn.Module):
    """The masked-language head as a function of hidden states (n, hidden) -> logits (n, vocab): BERT's `cls`,
    XLM-R's `lm_head`, ModernBERT's `head` then `decoder`."""
    for attr in ("cls", "lm_head"):
        if hasattr(model, attr):
            return getattr(model, attr)
    if hasattr(model, "head") and hasattr(model, "decoder"):
        return lambda h: model.decoder(model.head(h))
    raise PipelineError(f"mlm: {type(model).__name__}: its masked-language head is not known")


def masked_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's own MLM loss (the mean cross-entropy over the masked positions), with the head applied to
    those positions alone: a vocabulary of 70-250k makes the head over every position cost several times the
    encoder (146M logits for 16 x 128 tokens on e5's 71.5k), where a position without a label is thrown away."""
    labels = batch["labels"]
    hidden = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
    keep = labels != -100
    logits = prediction_head(model)(hidden[keep])
    return torch.nn.functional.cross_entropy(logits.float(), labels[keep])


def batches(rows: tokens.Ragged, micro_batch: int, steps: int, seed: int):
    """`steps` lists of `micro_batch` row indices, through the rows in a new random order each pass."""
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    for _ in range(steps):
        while len(order) < micro_batch:
            order += torch.randperm(len(rows), generator=gen).tolist()
        yield order[:micro_batch]
        order = order[micro_batch:]


def train_mlm(model, rows: tokens.Ragged, tokenizer, cfg: Config, device: torch.device,
              state_path: Path | None = None, digest: str = "", log=print) -> list[float]:  # fmt: skip
    """Masked-language training of `model` on `rows` (token ids): mlm.steps planned, mlm.max_steps run where
    set; the loss of every step. With `state_path`, a resume state of fingerprint `digest` there is gone on from,
    and one is saved every mlm.save_every steps."""
    from transformers import DataCollatorForLanguageModeling

    m = cfg.mlm
    run_steps = min(m.steps, m.max_steps or m.steps)
    # BERT's masking (80% <mask>, 10% a random token, 10% kept; special tokens never), padding to the batch's longest
    collate = DataCollatorForLanguageModeling(tokenizer, mlm_probability=m.mask_prob, return_tensors="pt")
    # on a CPU `auto` is fp32 (train measures bf16 against fp32 there; this stage does not): train.precision=bf16
    # asks for bf16 autocast, several times faster on a CPU with AMX
    auto_cpu = device.type == "cpu" and cfg.train.precision == "auto"
    prec = "fp32" if auto_cpu else precision.resolve_precision(cfg.train.precision, device)
    log(f"mlm: {prec} on {device.type}")
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=m.lr, weight_decay=WEIGHT_DECAY)
    sched = optim.make_scheduler(opt, m.warmup, m.steps)  # planned for mlm.steps: a capped run is its prefix
    scaler = precision.make_scaler(prec, device)
    torch.manual_seed(cfg.train.seed)  # the collator draws its masks from torch's global generator
    parts = {"model": model, "optimizer": opt, "schedule": sched, "scaler": scaler}
    losses = restore(state_path, digest, parts, device, log)
    # the same order of rows as an uninterrupted run: the batches already trained are drawn again and skipped
    todo = itertools.islice(batches(rows, m.micro_batch, run_steps, cfg.train.seed), len(losses), None)
    bar = progress.bar(todo, total=run_steps, initial=len(losses), desc="mlm", unit="step")
    for idx in bar:
        batch = collate([{"input_ids": rows[i].tolist()} for i in idx]).to(device)
        with precision.autocast(prec, device):
            loss = masked_loss(model, batch)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if state_path is not None and m.save_every and len(losses) % m.save_every == 0 and len(losses) < run_steps:
            save_state(state_path, digest, parts, losses, device)
    return losses


def save_state(path: Path, digest: str, parts: dict, losses: list[float], device: torch.device) -> None:
    """Where the run is: every part's state dict, the losses so far and the random states, replaced atomically."""
    state = {k: v.state_dict() for k, v in parts.items()}
    state |= {"fingerprint": digest, "losses": list(losses), "rng": resume.rng_state(device)}
    with files.atomic_path(path) as tmp:
        torch.save(resume.saved_form(state), tmp)


def restore(path: Path | None, digest: str, parts: dict, device: torch.device, log=print) -> list[float]:
    """The losses of the steps a resume state at `path` has trained, its parts loaded back; [] where there is no
    state of this fingerprint (one of other settings is left to be replaced)."""
    state = resume.read_state(path) if path is not None else None
    if not state or state.get("fingerprint") != digest:
        return []
    for name, part in parts.items():
        part.load_state_dict(state[name])
    resume.set_rng_state(state["rng"], device)
    log(f"mlm: resumed from {path} at step {len(state['losses'])}")
    return [float(x) for x in state["losses"]]


def save(model, tokenizer, dest: Path, record: dict) -> None:
    """The folder, whole or not at all: the encoder's weights and config, the tokenizer and done.json, in one
    rename. The encoder alone, without its masked-language head: a fold reads it as it reads any pretrained
    encoder, with no unused weights to report at every load."""
    with files.atomic_dir(dest) as tmp:
        model.base_model.cpu().save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        files.write_json(tmp / layout.DONE, record)


def run(cfg: Config, log=print) -> Path:
    experiments.preflight(cfg, "mlm")
    with experiments.experiment_lock(cfg, "mlm"):
        table, test, meta = tables.load_table(cfg)
        tokenizer = load_tokenizer(tokens.tokenizer_source(cfg))
        digest, dest = mlm_fingerprint(cfg, meta, tokenizer), layout.mlm_dir(cfg)
        if is_current(dest, digest):
            log(f"mlm: {dest} is current (fingerprint {digest}); nothing to do")
            return dest
        files.remove_dead_temporaries(dest.parent)  # a killed run's half-written folder
        texts = corpus(table, test)
        rows = tokens.tokenize(tokenizer, list(texts["text"]), text_length(cfg), desc="tokenize mlm")
        model = mlm_model(cfg, tokenizer, log)
        device = pick_device(cfg.train.device)
        run_steps = min(cfg.mlm.steps, cfg.mlm.max_steps or cfg.mlm.steps)
        log(f"mlm: {len(rows)} texts (training, validation and test; no labels), {cfg.mlm.micro_batch} a step, "
            f"{run_steps} of {cfg.mlm.steps} steps, on {device}")  # fmt: skip
        state_path = layout.mlm_resume(cfg)
        losses = train_mlm(model, rows, tokenizer, cfg, device, state_path, digest, log)
        record = {"fingerprint": digest, "steps": len(losses), "planned": cfg.mlm.steps, "texts": len(rows),
                  "loss_first": losses[0], "loss_last": losses[-1]}  # fmt: skip
        save(model, tokenizer, dest, record)
        state_path.unlink(missing_ok=True)  # the folder is written: nothing left to go on from
    log(f"mlm: {dest} (loss {losses[0]:.3f} -> {losses[-1]:.3f}); train from it with model.name={dest}")
    return dest


def main(argv=None) -> int:
    args = config_mod.parser("Train the encoder as a masked language model on the competition's texts.").parse_args(
        argv
    )
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
