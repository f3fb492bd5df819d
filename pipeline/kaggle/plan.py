"""The plan of a Kaggle run: names, sources and kernel-metadata.json, checked before anything is sent.

Used by `make kernel` (pipeline/kernel.py) and by the notebook itself (pipeline/notebook.py). Every
rule here is one kaggle 2.2.5 applies on push, or one the real run would break on later: a refused
push costs a round trip, a broken run costs a GPU session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.schema import Config

DATASET_METADATA, KERNEL_METADATA = "dataset-metadata.json", "kernel-metadata.json"
PLACEHOLDER_USER = "your-kaggle-name"  # dry run with no user name known: the metadata still checks out

# The real competition's files (kaggle competitions files jigsaw-multilingual-toxic-comment-classification).
# The -processed-seqlen128 copies are the same rows tokenized for one model: the pipeline never reads them.
COMPETITION_FILES = (
    "jigsaw-toxic-comment-train.csv",
    "jigsaw-unintended-bias-train.csv",
    "validation.csv",
    "test.csv",
    "sample_submission.csv",
    "test_labels.csv",  # published after the competition: id, toxic
    "jigsaw-toxic-comment-train-processed-seqlen128.csv",
    "jigsaw-unintended-bias-train-processed-seqlen128.csv",
    "validation-processed-seqlen128.csv",
    "test-processed-seqlen128.csv",
)

KERNEL_FIELDS = {  # kernel-metadata.json as kaggle 2.2.5's kernels_push reads it
    "id",
    "id_no",
    "title",
    "code_file",
    "language",
    "kernel_type",
    "is_private",
    "enable_gpu",
    "enable_tpu",
    "enable_internet",
    "dataset_sources",
    "competition_sources",
    "kernel_sources",
    "model_sources",
    "keywords",
    "docker_image_pinning_type",
    "docker_image",
    "machine_shape",
}
KERNEL_REQUIRED = (
    "id",
    "title",
    "code_file",
    "language",
    "kernel_type",
    "is_private",
    "enable_gpu",
    "enable_internet",
    "competition_sources",
    "dataset_sources",
)
USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# kernels_push accepts any machine_shape and silently falls back for an unknown or retired one
# (NvidiaTeslaP100 now runs on T4s). The pipeline needs CUDA: NvidiaTeslaT4 is two T4s, the default GPU.
ACCELERATORS = ("NvidiaTeslaT4",)
PINNING_TYPES = ("original", "latest")  # KaggleApi.valid_push_pinning_types


class KernelError(PipelineError, ValueError):
    """A kernel or bundle that Kaggle would reject, or a notebook that cannot run; the message says why."""


# ---------------------------------------------------------------------------------------------
# The plan: names and sources


def slugify(text: str) -> str:
    """Kaggle's slug of a title (python-slugify's, for ASCII text): lower case, runs of others as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@dataclass(frozen=True)
class Plan:
    user: str
    kernel_slug: str
    title: str
    dataset_slug: str
    competition: str
    datasets: tuple[str, ...]  # dataset sources besides the code bundle: model weights, data.datasets
    models: tuple[str, ...]  # Kaggle Model sources (owner/model/framework/instance/version)
    model_mount: str  # where the weights are mounted below /kaggle/input ("" for model.name=tiny)
    kernel_type: str
    kernels: tuple[str, ...] = ()  # kernel sources: a stage-1 kernel whose output the notebook starts from
    continue_kernel: str = ""  # kaggle.continue_from as owner/slug: the earlier session whose output continues
    bundle_version: int | None = None  # the code bundle's version the kernel attaches (known once uploaded)
    # the version of continue_kernel whose output continues: given as owner/slug/<version>, or the one `make kernel`
    # found finished with folds (pipeline/kaggle/continuation.py); None: unversioned (a dry run)
    continue_version: int | None = None
    continue_session: str = ""  # the id in that version's kernel-session.json: the notebook checks the mount against it

    @property
    def kernel_sources(self) -> tuple[str, ...]:
        """kernel-metadata.json's kernel_sources: a stage-1 kernel, then the earlier session, at its version."""
        if not self.continue_kernel or self.continue_kernel in self.kernels:
            return self.kernels
        return (*self.kernels, self.continue_kernel + (f"/{self.continue_version}" if self.continue_version else ""))

    @property
    def kernel_ref(self) -> str:
        return f"{self.user}/{self.kernel_slug}"

    @property
    def dataset_ref(self) -> str:
        return f"{self.user}/{self.dataset_slug}"

    @property
    def bundle_source(self) -> str:
        """The code bundle as the kernel attaches it: the exact version uploaded (Kaggle mounts the latest of an
        unversioned source, which may still be the previous one while the new one processes)."""
        return self.dataset_ref + (f"/{self.bundle_version}" if self.bundle_version else "")

    @property
    def code_file(self) -> str:
        return f"{self.kernel_slug}.{'ipynb' if self.kernel_type == 'notebook' else 'py'}"


def model_mount(source: str) -> tuple[str, str]:
    """("dataset" | "model", the path below /kaggle/input) of kaggle.model_source."""
    parts = source.split("/")
    if len(parts) == 2 and all(parts):
        return "dataset", parts[1]
    if len(parts) == 5 and all(parts) and parts[4].isdigit():
        return "model", "/".join(parts[1:])
    raise KernelError(
        f"kaggle.model_source={source!r}: expected a dataset owner/slug "
        "or a Kaggle Model owner/model/framework/instance/version"
    )


def placeholder_model_source(cfg: Config) -> str:
    return f"{PLACEHOLDER_USER}/{slugify(Path(cfg.model.name).name)}"


def make_plan(cfg: Config, user: str) -> Plan:
    k = cfg.kaggle
    slug = k.kernel_slug or slugify(f"jigsaw-{cfg.name}")
    if not SLUG_RE.match(slug) or not 5 <= len(slug) <= 50:  # first: continue_from=self is built from it
        given = f"kaggle.kernel_slug={slug!r}" if k.kernel_slug else f"the kernel slug {slug!r} (from name={cfg.name})"
        raise KernelError(f"{given}: a kernel slug is 5-50 lower-case letters, digits and '-' (kaggle.kernel_slug)")
    title = k.title or slug.replace("-", " ").capitalize()
    datasets: list[str] = []
    models: list[str] = []
    mount = ""
    if cfg.model.name != "tiny":
        source = k.model_source
        if not source and k.dry_run:
            # A dry run still prints the whole plan; a push refuses below until the source is named.
            source = placeholder_model_source(cfg)
        if not source:
            raise KernelError(
                f"model.name={cfg.model.name}: the notebook has no internet, so the weights must be attached; "
                "set kaggle.model_source=<owner>/<dataset> (a dataset holding the model's folder, e.g. a public "
                "xlm-roberta-large one) or a Kaggle Model owner/model/framework/instance/version"
            )
        kind, mount = model_mount(source)
        (datasets if kind == "dataset" else models).append(source)
    elif k.model_source:
        raise KernelError("kaggle.model_source is set but model.name=tiny uses no weights; drop one of them")
    datasets += [checked_dataset(d) for d in cfg.data.datasets if d not in datasets]
    kernels = (stage1_kernel(cfg, user),) if k.init_kernel else ()
    earlier, version = "", None
    if k.continue_from:
        earlier, version = continue_ref(k.continue_from, user, slug)
    return Plan(
        user=user,
        kernel_slug=slug,
        title=title,
        dataset_slug=k.dataset_slug or f"{slug}-code",
        competition=cfg.data.competition,
        datasets=tuple(datasets),
        models=tuple(models),
        model_mount=mount + (f"/{k.model_subdir}" if mount and k.model_subdir else ""),
        kernel_type=k.kernel_type,
        kernels=kernels,
        continue_kernel=earlier,
        continue_version=version,
    )


def stage1_kernel(cfg: Config, user: str) -> str:
    """kaggle.init_kernel as owner/slug (a bare slug is the user's own kernel)."""
    ref = cfg.kaggle.init_kernel
    if not cfg.model.init_from:
        raise KernelError(f"kaggle.init_kernel={ref} is set but model.init_from is empty: name the stage-1 experiment")
    return kernel_ref(ref, user, "", "kaggle.init_kernel")


def kernel_ref(ref: str, user: str, own_slug: str, key: str) -> str:
    """A kernel named <owner>/<kernel>, <kernel> (the user's own) or `self` (this kernel), as owner/slug."""
    full = f"{user}/{own_slug}" if ref == "self" and own_slug else ref if "/" in ref else f"{user}/{ref}"
    owner, _, slug = full.partition("/")
    # `../x` is no owner: a path, refused here; kaggle refuses a kernel slug under 5 characters only when it is used
    if not (USER_RE.match(owner) and SLUG_RE.match(slug) and 5 <= len(slug) <= 50):
        raise KernelError(f"{key}={ref!r}: expected <owner>/<kernel> or <kernel>" + (" or self" if own_slug else ""))
    return full


def continue_ref(ref: str, user: str, own_slug: str) -> tuple[str, int | None]:
    """kaggle.continue_from as (owner/slug, the version named or None): self, <kernel>, <owner>/<kernel> or
    <owner>/<kernel>/<version> (kaggle 2.2.5 accepts a kernel source at a version)."""
    head, version = ref, None
    parts = ref.split("/")
    if any(part in ("", ".", "..") for part in parts):  # a path (`a/../b`, `./x`, `x/`), not a kernel: no version
        parts = []
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise KernelError(f"kaggle.continue_from={ref!r}: the version must be a number from 1 (<owner>/<kernel>/N)")
        head, version = "/".join(parts[:2]), int(parts[2])
    try:
        return kernel_ref(head, user, own_slug, "kaggle.continue_from"), version
    except KernelError:
        raise KernelError(
            f"kaggle.continue_from={ref!r}: expected self, <kernel>, <owner>/<kernel> or <owner>/<kernel>/<version>"
        ) from None


def checked_dataset(ref: str) -> str:
    """A dataset of data.datasets as kernel-metadata.json takes it: owner/slug, or owner/slug/version (that
    version, mounted under its slug); anything else is refused here, before the GPU session starts."""
    if not re.match(r"^[^/\s]+/[a-z0-9][a-z0-9-]*(/[1-9][0-9]*)?$", ref):
        raise KernelError(f"data.datasets: {ref!r} is not <owner>/<dataset> or <owner>/<dataset>/<version>")
    return ref


def resolve_user(cfg: Config, api=None) -> str:
    """kaggle.user, else the API's authenticated user, else the configured one; a dry run may use a placeholder."""
    from pipeline.kaggle import client

    user = cfg.kaggle.user or (client.authenticated_username(api) if api is not None else "")
    user = user or client.configured_username()
    if not user:
        if not cfg.kaggle.dry_run:
            raise KernelError("no Kaggle user name: set kaggle.user=<name> or KAGGLE_USERNAME")
        print(f"kernel: no Kaggle user name known (kaggle.user, KAGGLE_USERNAME); using {PLACEHOLDER_USER!r}")
        user = PLACEHOLDER_USER
    return user


# ---------------------------------------------------------------------------------------------
# Metadata, and the checks that run before anything is sent


def dataset_metadata(plan: Plan) -> dict:
    return {
        "title": f"{plan.dataset_slug.replace('-', ' ')}"[:50],
        "id": plan.dataset_ref,
        "licenses": [{"name": "CC0-1.0"}],
    }


def check_ref_and_title(meta: dict, where: str, shortest: int, hint: str) -> tuple[str, str]:
    """`id` as <user>/<slug> and `title`, by Kaggle's rules for datasets (shortest 6) and kernels (5)."""
    ref = meta["id"]
    if not isinstance(ref, str) or ref.count("/") != 1:
        raise KernelError(f"{where}: id {ref!r} is not <user>/<slug>{hint}")
    user, slug = ref.split("/")
    if not USER_RE.match(user):
        raise KernelError(f"{where}: id {ref!r}: {user!r} is not a Kaggle user name{hint}")
    if not SLUG_RE.match(slug) or not shortest <= len(slug) <= 50:
        raise KernelError(f"{where}: id {ref!r}: the slug must be {shortest}-50 lower-case letters, digits and '-'")
    title = meta["title"]
    if not isinstance(title, str) or not shortest <= len(title) <= 50:
        raise KernelError(f"{where}: title {title!r} must be {shortest}-50 characters")
    return slug, title


def check_dataset_metadata(meta: dict) -> None:
    """The rules kaggle's dataset_create_new applies, checked here so that a bad field never uploads."""
    where = DATASET_METADATA
    for key in ("title", "id", "licenses"):
        if key not in meta:
            raise KernelError(f"{where}: missing field {key!r}")
    check_ref_and_title(meta, where, shortest=6, hint="")
    licenses = meta["licenses"]
    if not (isinstance(licenses, list) and len(licenses) == 1 and isinstance(licenses[0], dict)):
        raise KernelError(f"{where}: licenses must list exactly one license, e.g. [{{'name': 'CC0-1.0'}}]")
    if not isinstance(licenses[0].get("name"), str) or not licenses[0]["name"]:
        raise KernelError(f"{where}: the license needs a name")


def kernel_metadata(cfg: Config, plan: Plan) -> dict:
    meta = {
        "id": plan.kernel_ref,
        "title": plan.title,
        "code_file": plan.code_file,
        "language": "python",
        "kernel_type": plan.kernel_type,
        "is_private": cfg.kaggle.is_private,
        "enable_gpu": cfg.kaggle.enable_gpu,
        "enable_tpu": False,
        "enable_internet": False,  # the notebook installs and downloads nothing
        "dataset_sources": [plan.bundle_source, *plan.datasets],
        "competition_sources": [plan.competition],
        "kernel_sources": list(plan.kernel_sources),
    }
    if plan.models:
        meta["model_sources"] = list(plan.models)
    if cfg.kaggle.accelerator and cfg.kaggle.enable_gpu:
        meta["machine_shape"] = cfg.kaggle.accelerator
    if cfg.kaggle.docker_image_pinning:
        meta["docker_image_pinning_type"] = cfg.kaggle.docker_image_pinning
    return meta


def _str_list(meta: dict, key: str, pattern: re.Pattern, form: str) -> list[str]:
    value = meta.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise KernelError(f"{KERNEL_METADATA}: {key} must be a list of strings")
    for v in value:
        if not pattern.match(v):
            raise KernelError(f"{KERNEL_METADATA}: {key}: {v!r} is not {form}")
    if len(set(value)) != len(value):
        raise KernelError(f"{KERNEL_METADATA}: {key} lists a source twice")
    return value


def check_kernel_metadata(meta: dict, folder: Path) -> None:
    """Every field kernels_push reads, checked here: a missing or malformed one is an error, not a rejected push."""
    where = KERNEL_METADATA
    unknown = sorted(set(meta) - KERNEL_FIELDS)
    if unknown:
        raise KernelError(f"{where}: unknown field {unknown[0]!r} (Kaggle would ignore it silently)")
    for key in KERNEL_REQUIRED:
        if key not in meta:
            raise KernelError(f"{where}: missing field {key!r}")
    slug, title = check_ref_and_title(meta, where, shortest=5, hint=" (kaggle.user, kaggle.kernel_slug)")
    if slugify(title) != slug:
        # Kaggle makes the URL from the title: another slug would push to a kernel we do not follow.
        raise KernelError(f"{where}: title {title!r} gives the slug {slugify(title)!r}, not {slug!r} (kaggle.title)")
    if meta["language"] != "python":
        raise KernelError(f"{where}: language must be 'python', not {meta['language']!r}")
    kernel_type = meta["kernel_type"]
    if kernel_type not in ("script", "notebook"):
        raise KernelError(f"{where}: kernel_type must be 'script' or 'notebook', not {kernel_type!r}")
    code = meta["code_file"]
    if not isinstance(code, str) or not code or Path(code).name != code:
        raise KernelError(f"{where}: code_file {code!r} must be a file name in the kernel folder")
    suffix = ".ipynb" if kernel_type == "notebook" else ".py"
    if Path(code).suffix != suffix:
        raise KernelError(f"{where}: code_file {code!r} must end in {suffix} for kernel_type {kernel_type}")
    if not (folder / code).is_file():
        raise KernelError(f"{where}: code_file {code!r} not found in {folder}")
    for key in ("is_private", "enable_gpu", "enable_tpu", "enable_internet"):
        if key in meta and not isinstance(meta[key], bool):
            raise KernelError(f"{where}: {key} must be true or false, not {meta[key]!r}")
    if meta["enable_internet"]:
        raise KernelError(f"{where}: enable_internet must be false: the notebook runs offline")
    competitions = _str_list(meta, "competition_sources", SLUG_RE, "a competition slug")
    if not competitions:
        raise KernelError(f"{where}: competition_sources is empty: the notebook reads the competition's files")
    _str_list(meta, "dataset_sources", re.compile(r"^[^/\s]+/[^/\s]+(/\d+)?$"), "<owner>/<dataset>[/<version>]")
    _str_list(meta, "kernel_sources", re.compile(r"^[^/\s]+/[^/\s]+(/\d+)?$"), "<owner>/<kernel>[/<version>]")
    shape = meta.get("machine_shape")
    if shape is not None and shape not in ACCELERATORS:
        raise KernelError(
            f"{where}: machine_shape {shape!r} is not one of {', '.join(ACCELERATORS)} (kaggle.accelerator)"
        )
    if shape is not None and not meta["enable_gpu"]:
        raise KernelError(f"{where}: machine_shape {shape!r} needs enable_gpu true (kaggle.enable_gpu)")
    pinning = meta.get("docker_image_pinning_type")
    if pinning is not None and pinning not in PINNING_TYPES:
        raise KernelError(
            f"{where}: docker_image_pinning_type {pinning!r} is not one of {', '.join(PINNING_TYPES)} "
            "(kaggle.docker_image_pinning)"
        )
    _str_list(
        meta,
        "model_sources",
        re.compile(r"^[^/\s]+/[^/\s]+/[^/\s]+/[^/\s]+/\d+$"),
        "<owner>/<model>/<framework>/<instance>/<version>",
    )


def check_extra_files(cfg: Config, listed: dict[str, list[str]] | None = None) -> None:
    """Refuse data.extra_files that no attached source provides, before anything is pushed.

    `listed` maps each of data.datasets to its file names (from the API); None when they are unknown
    (a dry run), in which case a file outside the competition only needs some dataset to be attached.
    """
    for name in cfg.data.extra_files:
        base = Path(name).name
        if base in COMPETITION_FILES:
            continue
        if not cfg.data.datasets:
            why = (
                f"data.extra_files: {base} is not a file of the competition {cfg.data.competition}; attach the "
                "dataset that provides it (data.datasets=[<owner>/<slug>]) or drop it (data.extra_files=[])"
            )
            if cfg.kaggle.dry_run:  # nothing is pushed: the folders are written to be read, and a push refuses
                print(f"kernel: {why}; a push is refused until then")
                continue
            raise KernelError(why)
        if listed is not None and not any(base in [Path(f).name for f in files] for files in listed.values()):
            raise KernelError(
                f"data.extra_files: {base} is in none of {', '.join(listed)} nor in the competition; "
                "name the dataset that provides it in data.datasets"
            )
