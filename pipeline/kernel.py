"""Stage `make kernel`: the same pipeline, packed for a Kaggle GPU notebook and pushed with the kaggle API.

Writes  kernel/<slug>/code/        the code bundle, uploaded as the private dataset <user>/<slug>-code
                                   (created the first time, a new version after): dataset-metadata.json,
                                   pipeline/ (the package's .py files and configs/*.yaml, nothing else)
                                   and kernel-config.yaml (the resolved config)
        kernel/<slug>/notebook/    kernel-metadata.json and the notebook's code file <slug>.py (or .ipynb),
                                   pushed as the kernel <user>/<slug>: GPU on, internet off, private, with
                                   the competition, the code bundle and the model's weights attached
`--output` (make kernel-output)
        kernel/<slug>/output/      the finished kernel's output as downloaded (models, OOF, submission, log)
        models/<name>/...          the kernel's models/<name>/ (fold weights, oof.csv, cv.json ...)
        submissions/<name>.csv, submissions/submission.csv

`kaggle.dry_run=true` writes both folders and pushes nothing. <slug> is `kaggle.kernel_slug`
(default jigsaw-<name>); `kaggle.dir` (default kernel/) moves the folders.

Inside the notebook the code file installs nothing: it finds the code bundle under /kaggle/input, puts
it on sys.path and calls `notebook_main` below, which runs `pipeline.data`, `pipeline.train` and
`pipeline.predict` in-process. They read the competition in place (data.source=dir), load XLM-R from
the attached model folder (model.name=<that folder>) and write under /kaggle/working (input/, models/,
and the submission at /kaggle/working/submission.csv). The two roots come from `kaggle_paths`, which
honours KAGGLE_INPUT_ROOT / KAGGLE_WORKING_ROOT, so that tests run the notebook on temporary folders.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import atomic_dir, atomic_write_text, write_json

PACKAGE = Path(__file__).resolve().parent  # the pipeline package: the only code that travels
INPUT_ENV, WORKING_ENV = "KAGGLE_INPUT_ROOT", "KAGGLE_WORKING_ROOT"
INPUT_DEFAULT, WORKING_DEFAULT = "/kaggle/input", "/kaggle/working"
BUNDLE_CONFIG = "kernel-config.yaml"  # the resolved config, inside the code bundle
RUN_CONFIG = "kernel-run.yaml"  # the config the notebook ran with (Kaggle paths filled in), in /kaggle/working
DATASET_METADATA, KERNEL_METADATA = "dataset-metadata.json", "kernel-metadata.json"
PLACEHOLDER_USER = "your-kaggle-name"  # dry run with no user name known: the metadata still checks out

# What the bundle may hold: the package's source and its configs. Anything else is refused.
BUNDLE_SUFFIXES = {".py", ".yaml"}
# Names that must never travel, whatever a future change to the bundle does.
FORBIDDEN_NAMES = {"kaggle.json", "access_token", "access_token.txt", "credentials.json", ".env", ".netrc"}
FORBIDDEN_PARTS = {"input", "models", "submissions", ".venv", "__pycache__", ".git", ".cache", "kernel"}

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


class KernelError(PipelineError, ValueError):
    """A kernel or bundle that Kaggle would reject, or a notebook that cannot run; the message says why."""


# ---------------------------------------------------------------------------------------------
# Where things are (on Kaggle, or the folders standing for it)


@dataclass(frozen=True)
class KagglePaths:
    input: Path  # /kaggle/input: the competition and the attached datasets, read-only
    working: Path  # /kaggle/working: everything the notebook writes; kept as the kernel's output


def on_kaggle(env=None) -> bool:
    """Whether this process runs inside a Kaggle notebook."""
    env = os.environ if env is None else env
    return bool(env.get("KAGGLE_KERNEL_RUN_TYPE")) or Path(INPUT_DEFAULT).is_dir()


def kaggle_paths(env=None) -> KagglePaths:
    """The notebook's two roots: KAGGLE_INPUT_ROOT / KAGGLE_WORKING_ROOT, else Kaggle's /kaggle/... ."""
    env = os.environ if env is None else env
    return KagglePaths(Path(env.get(INPUT_ENV) or INPUT_DEFAULT), Path(env.get(WORKING_ENV) or WORKING_DEFAULT))


def find_mount(root: Path, name: str) -> Path | None:
    """The folder where `name` (a slug, or model/framework/instance/version) is mounted under `root`.

    Kaggle mounts a source at /kaggle/input/<slug>; newer images may add a level (e.g. datasets/<owner>/).
    """
    for pattern in (name, f"*/{name}", f"*/*/{name}"):
        found = sorted(p for p in root.glob(pattern) if p.is_dir())
        if found:
            return found[0]
    return None


def find_model_dir(folder: Path) -> Path:
    """The folder holding config.json: `folder` itself, else the shallowest one below it."""
    if (folder / "config.json").is_file():
        return folder
    found = sorted(folder.rglob("config.json"), key=lambda p: (len(p.parts), str(p)))
    if not found:
        raise KernelError(f"{folder}: no config.json in the attached model (set kaggle.model_subdir)")
    return found[0].parent


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

    @property
    def kernel_ref(self) -> str:
        return f"{self.user}/{self.kernel_slug}"

    @property
    def dataset_ref(self) -> str:
        return f"{self.user}/{self.dataset_slug}"

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


def make_plan(cfg: Config, user: str) -> Plan:
    k = cfg.kaggle
    slug = k.kernel_slug or slugify(f"jigsaw-{cfg.name}")
    title = k.title or slug.replace("-", " ").capitalize()
    datasets: list[str] = []
    models: list[str] = []
    mount = ""
    if cfg.model.name != "tiny":
        if not k.model_source:
            raise KernelError(
                f"model.name={cfg.model.name}: the notebook has no internet, so the weights must be attached; "
                "set kaggle.model_source=<owner>/<dataset> (a dataset holding the model's folder, e.g. a public "
                "xlm-roberta-large one) or a Kaggle Model owner/model/framework/instance/version"
            )
        kind, mount = model_mount(k.model_source)
        (datasets if kind == "dataset" else models).append(k.model_source)
    elif k.model_source:
        raise KernelError("kaggle.model_source is set but model.name=tiny uses no weights; drop one of them")
    datasets += [d for d in cfg.data.datasets if d not in datasets]
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
    )


def resolve_user(cfg: Config, api=None) -> str:
    """kaggle.user, else the API's authenticated user, else the configured one; a dry run may use a placeholder."""
    from pipeline import kaggle_io

    user = cfg.kaggle.user or (kaggle_io.authenticated_username(api) if api is not None else "")
    user = user or kaggle_io.configured_username()
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
        "dataset_sources": [plan.dataset_ref, *plan.datasets],
        "competition_sources": [plan.competition],
        "kernel_sources": [],
    }
    if plan.models:
        meta["model_sources"] = list(plan.models)
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
    _str_list(meta, "kernel_sources", re.compile(r"^[^/\s]+/[^/\s]+$"), "<owner>/<kernel>")
    _str_list(
        meta,
        "model_sources",
        re.compile(r"^[^/\s]+/[^/\s]+/[^/\s]+/[^/\s]+/\d+$"),
        "<owner>/<model>/<framework>/<instance>/<version>",
    )


# ---------------------------------------------------------------------------------------------
# The code bundle


def bundle_files() -> list[tuple[Path, str]]:
    """(source, path in the bundle) for every file that travels: the package's .py files and configs."""
    out = []
    for p in sorted(PACKAGE.rglob("*")):
        rel = p.relative_to(PACKAGE)
        if p.is_file() and p.suffix in BUNDLE_SUFFIXES and not (set(rel.parts[:-1]) & FORBIDDEN_PARTS):
            out.append((p, str(Path("pipeline") / rel)))
    return out


def check_bundle(folder: Path) -> list[Path]:
    """Refuse a bundle holding data, models, caches, a virtualenv, a credential file or a known secret."""
    from pipeline import kaggle_io

    files = sorted(p for p in folder.rglob("*") if p.is_file())
    secrets = [s for s in kaggle_io._secrets() if s]
    for p in files:
        rel = p.relative_to(folder)
        if rel.name in FORBIDDEN_NAMES or set(rel.parts[:-1]) & FORBIDDEN_PARTS:
            raise KernelError(f"code bundle: {rel} must not be uploaded")
        if rel.name != DATASET_METADATA and rel.name != BUNDLE_CONFIG and p.suffix not in BUNDLE_SUFFIXES:
            raise KernelError(f"code bundle: {rel} is not pipeline code or config")
        text = p.read_bytes()
        if any(s.encode() in text for s in secrets):
            raise KernelError(f"code bundle: {rel} contains a Kaggle credential")
    return files


def write_bundle(cfg: Config, plan: Plan, dest: Path) -> list[Path]:
    """The code bundle (a Kaggle dataset folder) at `dest`, replaced whole; returns its files."""
    meta = dataset_metadata(plan)
    check_dataset_metadata(meta)
    with atomic_dir(dest) as tmp:
        for src, rel in bundle_files():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp / rel)
        config_mod.save(cfg, tmp / BUNDLE_CONFIG)
        write_json(tmp / DATASET_METADATA, meta)
        check_bundle(tmp)
    return check_bundle(dest)


# ---------------------------------------------------------------------------------------------
# The notebook's code file

SCRIPT = '''\
# {title}: the Jigsaw multilingual pipeline on a Kaggle GPU. Written by `make kernel`; edit the repository instead.
# Internet is off: nothing is installed. The code comes from the attached dataset {dataset_ref}, the
# competition and the model are read in place under {input_default}, and everything is written under
# {working_default} (the submission at {working_default}/submission.csv).
import os
import sys
import tempfile
import zipfile
from pathlib import Path

CODE_DATASET = {dataset_slug!r}
# The resolved config `make kernel` was given; the notebook fills in Kaggle's paths (see kernel-run.yaml).
CONFIG = {config}


def find_code(input_root):
    """The folder holding pipeline/__init__.py, to put on sys.path.

    Kaggle unpacks the uploaded pipeline.zip into a pipeline/ folder; if it did not, unzip it ourselves
    (make_archive stores paths relative to the folder, so the files go into pipeline/).
    """
    for pattern in (CODE_DATASET, "*/" + CODE_DATASET, "*/*/" + CODE_DATASET):
        for mount in sorted(input_root.glob(pattern)):
            if (mount / "pipeline" / "__init__.py").is_file():
                return mount
            archive = mount / "pipeline.zip"
            if archive.is_file():
                out = Path(tempfile.mkdtemp(prefix="pipeline-code-"))
                with zipfile.ZipFile(archive) as zf:
                    nested = any(n.startswith("pipeline/") for n in zf.namelist())
                    zf.extractall(out if nested else out / "pipeline")
                return out
    raise RuntimeError(f"the code dataset {{CODE_DATASET}} is not attached under {{input_root}}")


if __name__ == "__main__":
    sys.path.insert(0, str(find_code(Path(os.environ.get({input_env!r}) or {input_default!r}))))
    from pipeline import kernel

    kernel.notebook_main(CONFIG)
'''


def _py_str(text: str) -> str:
    """A Python literal for `text`: a readable triple-quoted block when that is exact, else repr()."""
    if "'''" in text or "\\" in text or text.endswith("'"):
        return repr(text)
    return "'''\\\n" + text + "'''"


def script_text(cfg: Config, plan: Plan) -> str:
    return SCRIPT.format(
        title=plan.title,
        dataset_ref=plan.dataset_ref,
        dataset_slug=plan.dataset_slug,
        config=_py_str(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True)),
        input_env=INPUT_ENV,
        input_default=INPUT_DEFAULT,
        working_default=WORKING_DEFAULT,
    )


def notebook_json(source: str) -> str:
    """The script as a one-cell Jupyter notebook (kaggle.kernel_type=notebook)."""
    nb = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 4,
    }
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def write_kernel(cfg: Config, plan: Plan, dest: Path) -> dict:
    """The kernel folder (metadata + code file) at `dest`, replaced whole; returns the checked metadata."""
    meta = kernel_metadata(cfg, plan)
    source = script_text(cfg, plan)
    with atomic_dir(dest) as tmp:
        atomic_write_text(tmp / plan.code_file, notebook_json(source) if plan.kernel_type == "notebook" else source)
        write_json(tmp / KERNEL_METADATA, meta)
        check_kernel_metadata(meta, tmp)
    return meta


# ---------------------------------------------------------------------------------------------
# Inside the notebook


def _locate(root: Path, name: str, what: str) -> Path:
    found = find_mount(root, name)
    if found is None:
        raise KernelError(f"{what} {name!r} is not attached under {root} (add it to the notebook's inputs)")
    return found


def notebook_config(cfg: Config, paths: KagglePaths) -> Config:
    """`cfg` with Kaggle's paths: raw files read in place, weights from the attached folder, outputs in working."""
    tree = cfg.to_dict()
    competition = _locate(paths.input, cfg.data.competition, "the competition")
    tree.update(
        input_dir=str(paths.working / "input"),
        models_dir=str(paths.working / "models"),
        submissions_dir=str(paths.working),
    )
    tree["data"].update(source="dir", dir=str(competition))
    if cfg.model.name != "tiny":
        mount = make_plan(cfg, "owner").model_mount  # the owner is not part of the mount path
        tree["model"]["name"] = str(find_model_dir(_locate(paths.input, mount, "the model")))
    extras = []
    for name in cfg.data.extra_files:
        places = [competition] + [_locate(paths.input, d.split("/")[-1], "the dataset") for d in cfg.data.datasets]
        hits = [p / name for p in places if (p / name).is_file()]
        hits = hits or [h for p in places[1:] for h in sorted(p.rglob(name)) if h.is_file()]
        if not hits:
            raise KernelError(f"extra training file {name!r} not found in {', '.join(map(str, places))}")
        extras.append(str(hits[0]))
    tree["data"]["extra_files"] = extras
    return config_mod.from_dict(tree)


def notebook_main(config_text: str, env=None) -> Path:
    """Run data, train and predict in this process on Kaggle's folders; return the submission's path."""
    from pipeline import data, predict, train

    paths = kaggle_paths(env)
    if not paths.input.is_dir():
        raise KernelError(f"{paths.input} does not exist: not on Kaggle, and {INPUT_ENV} is not set")
    cfg = notebook_config(config_mod.from_dict(yaml.safe_load(config_text)), paths)
    run_cfg = paths.working / RUN_CONFIG
    config_mod.save(cfg, run_cfg)
    where = "Kaggle" if on_kaggle(env) else "a simulated Kaggle layout"
    print(f"kernel: on {where}; input {paths.input}, working {paths.working}; config {run_cfg}")
    print(f"kernel: code from {PACKAGE}; competition {cfg.data.dir}; model {cfg.model.name}")
    for stage in (data, train, predict):
        code = stage.main(["--config", str(run_cfg)])
        if code:
            raise RuntimeError(f"{stage.__name__} failed (exit status {code}); see the messages above")
    submission = paths.working / "submission.csv"
    if not submission.is_file():
        raise RuntimeError(f"{submission} was not written")
    print(f"kernel: done; submission at {submission}")
    return submission


# ---------------------------------------------------------------------------------------------
# The stage: build, check, push; or fetch the output


def folders(cfg: Config, plan: Plan) -> tuple[Path, Path, Path]:
    root = Path(cfg.kaggle.dir) / plan.kernel_slug
    return root / "code", root / "notebook", root / "output"


def human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def build_and_push(cfg: Config, api=None) -> dict:
    """Write the bundle and kernel folders, check them, and (unless a dry run) upload and push."""
    from pipeline import kaggle_io

    make_plan(cfg, "owner")  # settings errors first: they need no credentials
    if not cfg.kaggle.dry_run and api is None:
        api = kaggle_io.get_api()
    plan = make_plan(cfg, resolve_user(cfg, api))
    code_dir, kernel_dir, _ = folders(cfg, plan)
    files = write_bundle(cfg, plan, code_dir)
    size = sum(p.stat().st_size for p in files)
    print(f"kernel: code bundle {code_dir}: {len(files)} files, {human(size)} (dataset {plan.dataset_ref})")
    meta = write_kernel(cfg, plan, kernel_dir)
    print(f"kernel: notebook {kernel_dir}/{plan.code_file} + {KERNEL_METADATA} (kernel {plan.kernel_ref})")
    print(
        f"kernel: GPU {'on' if meta['enable_gpu'] else 'off'}, internet off, "
        f"{'private' if meta['is_private'] else 'public'}; competition {plan.competition}; "
        f"datasets {', '.join(meta['dataset_sources'])}"
        + (f"; models {', '.join(meta['model_sources'])}" if plan.models else "")
    )
    result = {"plan": plan, "code_dir": code_dir, "kernel_dir": kernel_dir, "bundle_bytes": size, "metadata": meta}
    url = f"https://www.kaggle.com/code/{plan.kernel_ref}"
    if cfg.kaggle.dry_run:
        print("kernel: dry run (kaggle.dry_run=true): nothing sent; the two folders above are what would be")
        print(f"kernel: a push would upload {plan.dataset_ref}, then run {url}")
    else:
        action, ds_url = kaggle_io.upload_dataset(code_dir, plan.dataset_ref, f"make kernel CONFIG={cfg.name}", api)
        print(f"kernel: code dataset {action}: {ds_url}")
        print(f"kernel: code dataset {kaggle_io.wait_dataset_ready(plan.dataset_ref, api)}")
        url, version = kaggle_io.push_kernel(kernel_dir, plan.kernel_ref, api, cfg.kaggle.timeout)
        print(f"kernel: pushed{f' version {version}' if version else ''}: {url}")
        result.update(url=url, version=version)
    out = folders(cfg, plan)[2]
    print(f"  follow it:      kaggle kernels status {plan.kernel_ref}")
    print(f"  when complete:  make kernel-output CONFIG={cfg.name}")
    print(f"            (or:  kaggle kernels output {plan.kernel_ref} -p {out})")
    return result


def output_pattern(cfg: Config) -> str:
    """The output files worth downloading: the experiment's models and the submissions, not the caches."""
    name = re.escape(cfg.name)
    return rf"^(models/{name}/|submission\.csv$|{name}\.csv$|{re.escape(RUN_CONFIG)}$)"


def install_output(cfg: Config, out: Path) -> list[Path]:
    """Copy the downloaded output into models/<name>/ (a fold folder replaced whole) and submissions/."""
    installed = []
    exp = out / "models" / cfg.name
    if exp.is_dir():
        dest = Path(cfg.models_dir) / cfg.name
        dest.mkdir(parents=True, exist_ok=True)
        for item in sorted(exp.iterdir()):
            if item.is_dir():
                with atomic_dir(dest / item.name) as tmp:
                    shutil.copytree(item, tmp, dirs_exist_ok=True)
            else:
                atomic_copy(item, dest / item.name)
            installed.append(dest / item.name)
    for name in ("submission.csv", f"{cfg.name}.csv"):
        if (out / name).is_file():
            atomic_copy(out / name, Path(cfg.submissions_dir) / name)
            installed.append(Path(cfg.submissions_dir) / name)
    if not installed:
        raise KernelError(f"{out}: the kernel's output holds neither models/{cfg.name}/ nor submission.csv")
    return installed


def atomic_copy(src: Path, dest: Path) -> None:
    from pipeline.io import atomic_path

    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)


def fetch_output(cfg: Config, api=None) -> list[Path]:
    """`make kernel-output`: check the kernel finished, download its output, install it locally."""
    from pipeline import kaggle_io

    if cfg.kaggle.dry_run:
        plan = make_plan(cfg, resolve_user(cfg))
        print(f"kernel: dry run: would download {plan.kernel_ref}'s output matching {output_pattern(cfg)}")
        return []
    api = kaggle_io.get_api() if api is None else api
    plan = make_plan(cfg, resolve_user(cfg, api))
    status, failure = kaggle_io.kernel_status(plan.kernel_ref, api)
    if status == "error":
        raise KernelError(f"kernel {plan.kernel_ref} failed: {failure or 'see its log on Kaggle'}")
    if status != "complete":
        raise KernelError(
            f"kernel {plan.kernel_ref} is {status}, not complete; follow it with "
            f"`kaggle kernels status {plan.kernel_ref}` and run this again when it is"
        )
    out = folders(cfg, plan)[2]
    files = kaggle_io.download_kernel_output(plan.kernel_ref, out, api, file_pattern=output_pattern(cfg))
    print(f"kernel: downloaded {len(files)} files into {out}")
    installed = install_output(cfg, out)
    for p in installed:
        print(f"kernel: -> {p}")
    return installed


def main(argv=None) -> int:
    p = config_mod.parser("Pack the pipeline into a Kaggle dataset and push a GPU notebook that runs it.")
    p.add_argument("--output", action="store_true", help="download a finished kernel's output instead")
    args = p.parse_args(argv)

    def stage() -> None:
        cfg = config_mod.from_args(args)
        if args.output:
            fetch_output(cfg)
        else:
            build_and_push(cfg)

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
