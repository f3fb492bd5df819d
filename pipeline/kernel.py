"""Stage `make kernel`: the same pipeline, packed for a Kaggle GPU notebook and pushed with the kaggle API.

Reads   the pipeline package and the resolved config; the files of data.datasets, through the kaggle API
Writes  kernel/<slug>/code/        the code bundle, uploaded as the private dataset <user>/<slug>-code
                                   (created the first time, a new version after); see pipeline/kaggle/bundle.py
        kernel/<slug>/notebook/    kernel-metadata.json and the code file, pushed as the kernel <user>/<slug>:
                                   two T4 GPUs (kaggle.accelerator), internet off, private, with the
                                   competition, the code bundle and the model's weights attached
`--output` (make kernel-output)    the finished kernel's output into kernel/<slug>/output/, models/<name>/
                                   and submissions/ (pipeline/kaggle/output.py)
`--status` (make kernel-status)    the kernel's state and the last lines of its log; `--follow` until it ends

Before anything is sent the plan is checked: the metadata as kaggle 2.2.5 reads it, the extra training
files against the attached sources, and the disk plan against the 20 GB Kaggle keeps in /kaggle/working
(pipeline/kaggle/disk.py). `kaggle.dry_run=true` writes both folders, prints the plan and pushes nothing.
<slug> is `kaggle.kernel_slug` (default jigsaw-<name>); `kaggle.dir` (default kernel/) moves the folders.
What runs inside the notebook is pipeline/notebook.py.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from pipeline import config as config_mod
from pipeline import optimizers
from pipeline.errors import run_stage
from pipeline.files import check_writable_dir
from pipeline.kaggle import continuation, hours
from pipeline.kaggle import disk as kaggle_disk
from pipeline.kaggle import memory as kaggle_memory
from pipeline.kaggle.bundle import describe_files, write_bundle, write_kernel
from pipeline.kaggle.clock import SessionClock
from pipeline.kaggle.launch import code_digest
from pipeline.kaggle.output import ended_state, fetch_output, folders, kernel_status
from pipeline.kaggle.plan import (
    KERNEL_METADATA,
    KernelError,
    check_extra_files,
    make_plan,
    placeholder_model_source,
    resolve_user,
)
from pipeline.schema import Config


def check_disk(cfg: Config) -> kaggle_disk.DiskPlan:
    """Print the disk plan; refuse one that keeps more than kaggle.working_gb in /kaggle/working."""
    folds = len(cfg.train.folds) or cfg.data.folds
    plan = kaggle_disk.plan_disk(cfg, folds)
    print(kaggle_disk.format_plan(plan, cfg.kaggle.working_gb))
    if plan.parameters:  # the tables' rows and tokens are counted: seconds on the real competition's files
        print("kernel: counting the rows and tokens of the competition's tables, for the time plan", flush=True)
    timed = hours.plan_time(cfg, folds) if plan.parameters else None
    clock = SessionClock.begin(cfg, 0.0)
    if hours.training_refusal(cfg, clock.reserve()):
        raise KernelError(hours.training_refusal(cfg, clock.reserve()))
    resumes = timed is not None and hours.must_resume(timed, cfg, clock.reserve())
    problem = kaggle_disk.over_quota(plan, cfg.kaggle.working_gb, resumes)
    if problem:
        raise KernelError(problem)
    if timed is None:
        print(f"kernel: the size of {cfg.model.name} is not known offline: weights are not in the plan above")
        return plan
    print(hours.format_time(timed, cfg, clock.reserve()))
    print(f"kernel: in the notebook, {clock.describe()}")
    gpu = kaggle_memory.plan_memory(cfg)
    print(kaggle_memory.format_memory(gpu))
    if kaggle_memory.over_memory(gpu, cfg):
        print(kaggle_memory.over_memory(gpu, cfg))
    host = kaggle_memory.host_memory(cfg, cfg.kaggle.gpus or hours.T4_GPUS)
    print(host[0])
    if kaggle_memory.over_host(host[1], cfg):
        print(kaggle_memory.over_host(host[1], cfg))
    problem = hours.resume_refusal(timed, cfg, clock.reserve())
    if problem:
        raise KernelError(problem)
    return plan


def listed_files(cfg: Config, api) -> dict[str, list[str]] | None:
    """The files of each of data.datasets (None in a dry run, where nothing is asked)."""
    from pipeline.kaggle import datasets

    if api is None or not cfg.data.datasets:
        return None
    return {ref: datasets.dataset_files(ref, api) for ref in cfg.data.datasets}


def write_and_describe(cfg: Config, plan, kernel_dir, digest: str) -> dict:
    """The kernel folder, written and checked; what it will run on, printed."""
    meta = write_kernel(cfg, plan, kernel_dir, digest)
    print(f"kernel: notebook {kernel_dir}/{plan.code_file} + {KERNEL_METADATA} (kernel {plan.kernel_ref})")
    print(
        f"kernel: {meta.get('machine_shape') or 'default accelerator'}, GPU {'on' if meta['enable_gpu'] else 'off'}, "
        f"internet off, {'private' if meta['is_private'] else 'public'}; competition {plan.competition}; "
        f"datasets {', '.join(meta['dataset_sources'])}"
        + (f"; models {', '.join(meta['model_sources'])}" if plan.models else "")
        + (f"; kernels {', '.join(meta['kernel_sources'])}" if meta.get("kernel_sources") else "")
    )
    return meta


def before_sending(plan, cfg: Config, api, continue_dir: Path):
    """With kaggle.continue_from, the version to continue from, asked of Kaggle before anything is sent (`api` None:
    a dry run, nothing asked); the push itself asks the kernel's own state (output.ended_state)."""
    if plan.continue_kernel and api is not None:  # refused while a version of it runs
        print(f"kernel: asking Kaggle for the newest version of {plan.continue_kernel} that finished", flush=True)
        return continuation.pick_version(cfg, plan, api, continue_dir)
    if plan.continue_kernel:
        print(f"kernel: kaggle.continue_from: a push asks Kaggle first for the newest version of "
              f"{plan.continue_kernel} that finished with folds (refused while one runs) and attaches it")  # fmt: skip
    elif api is None:
        print(f"kernel: a push asks Kaggle first whether {plan.kernel_ref} still runs, and is refused while it does")
    return plan


def check_image(cfg: Config) -> None:
    """What the settings need of the Kaggle notebook that it is not known to carry: bitsandbytes, a GPU flash
    attention runs on, and an earlier experiment's folds (model.init_folds)."""
    from pipeline.core import attention

    if cfg.model.init_folds:  # the notebook brings back a stage-1 model (kaggle.init_kernel), never another's folds
        raise KernelError(
            f"model.init_folds={cfg.model.init_folds}: a Kaggle notebook holds no folds of that experiment to start "
            "each fold from; train this experiment here (`make data train predict`)"
        )
    if cfg.model.attn_implementation == attention.FLASH:  # else refused at the first fold, the session started
        raise KernelError(
            f"model.attn_implementation={attention.FLASH} cannot run on Kaggle's GPUs (a T4 is compute capability "
            "7.5; flash attention needs 8.0 and the flash_attn package): use model.attn_implementation=sdpa (or auto)"
        )
    needs = optimizers.OPTIMIZERS[cfg.train.optimizer].needs
    if needs and not (needs == "bitsandbytes" and cfg.kaggle.has_bitsandbytes):
        raise KernelError(
            f"train.optimizer={cfg.train.optimizer} needs {needs} in the Kaggle image, which is not known to carry it: "
            "use train.optimizer=adamw, or set kaggle.has_bitsandbytes=true if you know it does (the notebook checks)"
        )
    if cfg.model.lora.r > 0 and cfg.model.lora.quantize != "none" and not cfg.kaggle.has_bitsandbytes:
        raise KernelError(
            f"model.lora.quantize={cfg.model.lora.quantize} needs bitsandbytes in the Kaggle image, which is not known "
            "to carry it: use model.lora.quantize=none (the base in fp16: XLM-R XL fits a T4), or set "
            "kaggle.has_bitsandbytes=true if you know it does (the notebook checks)"
        )


def build_and_push(cfg: Config, api=None) -> dict:
    """Write the bundle and kernel folders, check them, and (unless a dry run) upload and push."""
    from pipeline.kaggle import client, datasets, kernels

    how = "a dry run: nothing is sent" if cfg.kaggle.dry_run else "then the code bundle is uploaded and it is pushed"
    print(f"kernel: planning the notebook of {cfg.name}: settings, disk, time and memory ({how})", flush=True)
    make_plan(cfg, "owner")  # settings errors first: they need no credentials
    check_image(cfg)
    if cfg.model.name != "tiny" and not cfg.kaggle.model_source:
        print(f"kernel: kaggle.model_source not set; the plan assumes the weights in {placeholder_model_source(cfg)}")
    check_extra_files(cfg)
    disk = check_disk(cfg)
    if not cfg.kaggle.dry_run and api is None:
        api = client.get_api()
    check_extra_files(cfg, listed_files(cfg, api))
    plan = make_plan(cfg, resolve_user(cfg, api))
    code_dir, kernel_dir, out = folders(cfg, plan.kernel_slug)
    plan = before_sending(plan, cfg, api, code_dir.parent / "continue")
    print(f"kernel: writing the code bundle in {code_dir}", flush=True)
    files = write_bundle(cfg, plan, code_dir)
    digest = code_digest(code_dir / "pipeline")
    size = sum(p.stat().st_size for p in files)
    print(f"kernel: code bundle {code_dir}: {len(files)} files, {kaggle_disk.human(size)}, code {digest} "
          f"(dataset {plan.dataset_ref})")  # fmt: skip
    result = {"plan": plan, "code_dir": code_dir, "kernel_dir": kernel_dir, "bundle_bytes": size, "disk": disk}
    if cfg.kaggle.dry_run:
        result["metadata"] = write_and_describe(cfg, plan, kernel_dir, digest)
        print("kernel: the code bundle's files (what git tracks under pipeline/, and the config):")
        print("\n".join(describe_files(files, code_dir)))
        print("kernel: dry run (kaggle.dry_run=true): nothing sent; the two folders above are what would be")
        print(f"kernel: a push would upload {plan.dataset_ref}, then run https://www.kaggle.com/code/{plan.kernel_ref}")
    else:
        write_kernel(cfg, plan, kernel_dir, digest)  # checked before anything is sent; rewritten once versioned
        print(f"kernel: asking Kaggle whether {plan.kernel_ref} runs, then uploading {plan.dataset_ref}", flush=True)
        if plan.continue_kernel != plan.kernel_ref:  # kaggle.continue_from=self: asked a moment ago (pick_version)
            ended_state(plan.kernel_ref, api)  # refused while it runs: every push starts a GPU session; 404: the first
        before = datasets.version_before_upload(plan.dataset_ref, api)
        action, ds_url = datasets.upload_dataset(code_dir, plan.dataset_ref, f"make kernel CONFIG={cfg.name}", api)
        print(f"kernel: code dataset {action}: {ds_url}")
        # the kernel attaches the very version uploaded, once Kaggle tells a number past the one before the upload
        # (it may still serve the previous one as the latest for a while); only then is its state that version's
        plan = dataclasses.replace(plan, bundle_version=datasets.wait_new_version(plan.dataset_ref, before, api))
        print(f"kernel: code dataset {datasets.wait_dataset_ready(plan.dataset_ref, api)}")
        result["metadata"] = write_and_describe(cfg, plan, kernel_dir, digest)
        url, version = kernels.push_kernel(kernel_dir, plan.kernel_ref, api, cfg.kaggle.timeout)
        continuation.note_push(code_dir.parent, plan.kernel_ref, version)
        print(f"kernel: pushed{f' version {version}' if version else ''}: {url}")
        result.update(url=url, version=version, plan=plan)
    print(f"  follow it:      make kernel-status CONFIG={cfg.name} FOLLOW=1")
    print(f"  when complete:  make kernel-output CONFIG={cfg.name}   (into {out}, models/ and submissions/)")
    print(f"  then:           make submit CONFIG={cfg.name}")
    return result


def main(argv=None) -> int:
    p = config_mod.parser("Pack the pipeline into a Kaggle dataset and push a GPU notebook that runs it.")
    p.add_argument("--output", action="store_true", help="download a finished kernel's output instead")
    p.add_argument("--status", action="store_true", help="show the kernel's state and the end of its log")
    p.add_argument("--follow", action="store_true", help="with --status: poll until the kernel ends")
    args = p.parse_args(argv)

    def stage() -> None:
        cfg = config_mod.from_args(args)
        check_writable_dir(Path(cfg.kaggle.dir), "the kernel folder (kaggle.dir)")
        if args.output:
            fetch_output(cfg)
        elif args.status:
            kernel_status(cfg, follow=args.follow)
        else:
            build_and_push(cfg)

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
