"""The Trainer side of `make bench`: the TrainingArguments a user would write for a row's job, read back.

Trainer gets the job's settings (precision, micro-batch, accumulation, checkpointing, lr, weight
decay, clipping, schedule, warm-up, seed), each read from the row's config where Trainer has a counterpart
(`from_config`), and its own defaults for everything else, its default optimizer included; `trainer_settings`
reads back what it actually ran with, for the table's notes and the tests.
"""

from __future__ import annotations

import dataclasses

from pipeline.optimizers import OPTIMIZERS


def from_config(tcfg, max_steps: int) -> dict:
    """Every TrainingArguments field with a counterpart among the train settings, read from them: a new setting
    (a schedule's choice) reaches Trainer here, or the two rows would train unlike jobs."""
    from pipeline.core import optim  # torch: where a row runs, not in `make bench`'s own process

    return {
        "per_device_train_batch_size": tcfg.micro_batch,
        "gradient_accumulation_steps": tcfg.accumulation,
        "learning_rate": tcfg.lr,
        "weight_decay": tcfg.weight_decay,
        "max_grad_norm": tcfg.max_grad_norm,
        "lr_scheduler_type": optim.trainer_schedule(tcfg),
        "warmup_steps": optim.warmup_steps(tcfg.warmup, max_steps),  # as make_scheduler counts them
        "seed": tcfg.seed,
    }


def trainer_arguments(tcfg, precision: str, device, max_steps: int, output_dir: str):
    """The TrainingArguments of a Trainer row: the job's settings, and Trainer's own defaults for the rest.

    The optimizer is left at Trainer's default (adamw_torch_fused on torch >= 2.8, what a user gets) unless the
    optimizer's record names Trainer's own (pipeline.optimizers: the 8-bit row's bitsandbytes AdamW).
    """
    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing (the old name is an alias)
    ckpt = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    named = OPTIMIZERS[tcfg.optimizer].trainer_optim
    optim = {"optim": named} if named else {}
    return TrainingArguments(
        output_dir=output_dir,
        **from_config(tcfg, max_steps),
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        **{ckpt: tcfg.checkpointing, f"{ckpt}_kwargs": {"use_reentrant": False}},
        **optim,
        max_steps=max_steps,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_cpu=device.type == "cpu",
        label_names=["labels"],  # the pipeline's head takes no labels: Trainer must keep them for the loss
    )


TRAINER_KEYS = (
    "optim",
    "bf16",
    "fp16",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "activation_checkpointing",
    "gradient_checkpointing",
    "activation_checkpointing_kwargs",
    "gradient_checkpointing_kwargs",
    "learning_rate",
    "weight_decay",
    "max_grad_norm",
    "lr_scheduler_type",
    "warmup_steps",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
)


def trainer_settings(args) -> dict:
    """What the table's notes name: the settings Trainer actually ran with, read back from its arguments."""
    import transformers

    out = {"transformers": transformers.__version__}
    # transformers 5 keeps gradient_checkpointing* as aliases of activation_checkpointing*: name one pair
    alias = "gradient_checkpointing" if hasattr(args, "activation_checkpointing") else "activation_checkpointing"
    for key in TRAINER_KEYS:
        if hasattr(args, key) and not key.startswith(alias):
            v = getattr(args, key)
            out[key] = getattr(v, "value", v)  # OptimizerNames and scheduler types are enums
    return out
