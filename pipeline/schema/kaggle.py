"""The `kaggle` section: the Kaggle notebook, its time and disk plans, and `make submit`."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.schema.base import NON_NEGATIVE, POSITIVE, at_least, setting


@dataclass(frozen=True)
class KaggleConfig:
    """`make kernel`, `make kernel-status`, `make kernel-output` and `make submit` ([kaggle.md](kaggle.md))."""

    dry_run: bool = setting(
        False, "`true`: write both folders (the kernel folder and the code bundle) and print the plan, push nothing"
    )
    dir: str = setting(
        "kernel",
        "where the kernel folder, code bundle and downloaded output are written (ignored by git); a `<slug>/code` or "
        "`<slug>/notebook` there that `make kernel` did not write (no `dataset-metadata.json`, "
        "`kernel-metadata.json`) is refused, never replaced",
    )
    user: str = setting(
        "", "your Kaggle user name; empty means the authenticated one (`KAGGLE_USERNAME`, `kaggle.json`, token)"
    )
    kernel_slug: str = setting("", "empty means `jigsaw-<name>`")
    title: str = setting("", "empty means a title whose slug is `kernel_slug` (Kaggle derives the URL from the title)")
    dataset_slug: str = setting(
        "",
        "the code bundle's dataset; empty means `<kernel_slug>-code`; an existing dataset of yours that holds no "
        "bundle (no `kernel-config.yaml`) is refused",
    )
    kernel_type: str = setting(
        "script", "`script` or `notebook` (the same code as a one-cell `.ipynb`)", choices=("script", "notebook")
    )
    is_private: bool = setting(True, "the kernel is pushed private")
    enable_gpu: bool = setting(True, "the kernel runs with a GPU")
    model_source: str = setting(
        "",
        "the weights for `model.name`, since the notebook is offline: a dataset "
        "`owner/slug` holding a transformers folder (`config.json`, PyTorch or safetensors weights, tokenizer), or a "
        "Kaggle Model "
        "`owner/model/framework/instance/version`; needed unless `model.name=tiny`",
    )
    model_subdir: str = setting(
        "",
        "the folder inside `model_source` holding `config.json`; empty means found by "
        "search (needed when it holds several models, base and large: the notebook refuses to guess, and refuses "
        "TensorFlow / Keras / Flax weights)",
    )
    timeout: int = setting(
        0,
        "session limit in seconds passed to the push (0: Kaggle's default)",
        within=at_least(0, " (seconds; 0: Kaggle's default)"),
    )
    accelerator: str = setting("NvidiaTeslaT4", "`machine_shape`: two T4s; empty leaves Kaggle's default")
    # kaggle 2.2.5's valid_push_pinning_types
    docker_image_pinning: str = setting(
        "",
        "`original` (the image of the kernel's first run), `latest`, or empty: Kaggle's default",
        choices=("", "original", "latest"),
    )
    gpus: int = setting(
        0,
        "train processes in the notebook (torchrun, one per GPU); 0 means every visible GPU",
        within=at_least(0, " (0: every visible GPU)"),
    )
    keep_weights: bool = setting(
        True,
        "copy each fold's `model.safetensors` into `/kaggle/working` (the kept output); "
        "`false`: complete folds count by their test predictions (a cut-off fold and a "
        "stage-1 model keep theirs)",
    )
    init_kernel: str = setting(
        "",
        "with `model.init_from`: a kernel (`owner/slug`, or a slug of yours) whose output "
        "holds `models/<init_from>/fold-1/`, attached so that the notebook starts from that "
        "stage-1 model instead of training it in the same session",
    )
    working_gb: float = setting(
        20.0, "what `/kaggle/working` may keep; `make kernel` refuses a larger disk plan", within=POSITIVE
    )
    time_limit_h: float = setting(
        12.0,
        "a session's limit (`kaggle.timeout` when that is shorter): no fold or epoch "
        "starts that cannot end before the deadline",
        within=(POSITIVE[0], "a finite number of hours > 0"),
    )
    margin_minutes: float = setting(
        20.0,
        "minutes kept free at the session's end besides the measured costs of "
        "saving the resume state, copying into working and predicting a fold",
        within=(NON_NEGATIVE[0], "a finite number of minutes >= 0"),
    )
    weekly_quota_h: float = setting(
        30.0, "the weekly GPU hours the time plan compares with", within=(POSITIVE[0], "a finite number of hours > 0")
    )
    tokens_per_second: float = setting(0.0, "the throughput the time plan assumes, in padded tokens a second for the "
                                       "run; 0: measured by `make bench-gpu` on a T4, else estimated",
                                       within=(NON_NEGATIVE[0],
                                               "a finite number >= 0 (0: the estimate)"))  # fmt: skip
    continue_from: str = setting(
        "",
        "`self`, `<kernel>`, `<owner>/<kernel>` or `<owner>/<kernel>/<version>`: "
        "continue from that kernel's output (the newest version that finished with folds, "
        "checked at the push)",
    )
    keep_resume: bool = setting(
        True, "keep a cut-off fold's `resume.pt` (and its best weights) in `/kaggle/working` for the next session"
    )
    has_bitsandbytes: bool = setting(
        False, "the Kaggle image carries bitsandbytes: `train.optimizer=adamw8bit` may run there"
    )
    submit_file: str = setting("", "`make submit`: the file to submit; empty means `submissions/<name>.csv`")
    submit_timeout: int = setting(
        1800,
        "`make submit`: seconds to wait for the score (0: do not wait)",
        within=at_least(0, " (seconds; 0: do not wait)"),
    )
