"""What `make kernel` uploads: the code bundle (a private dataset) and the kernel folder (metadata + code file).

Writes  kernel/<slug>/code/      dataset-metadata.json, pipeline/ (the package's .py files and configs/*.yaml
                                 that git tracks, nothing else) and kernel-config.yaml (the resolved config)
        kernel/<slug>/notebook/  kernel-metadata.json and the code file <slug>.py (or .ipynb): the text of
                                 pipeline/kaggle/launch.py, then the code dataset's name and the config
Both configs hold Kaggle's paths, never this machine's (pushed_config): a public kernel publishes its code file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline.files import atomic_dir, atomic_write_text, write_json
from pipeline.kaggle.datasets import BUNDLE_MARKER
from pipeline.kaggle.plan import (
    DATASET_METADATA,
    KERNEL_METADATA,
    KernelError,
    Plan,
    check_dataset_metadata,
    check_kernel_metadata,
    dataset_metadata,
    kernel_metadata,
)
from pipeline.kaggle.session import TEMP_DEFAULT, WORKING_DEFAULT
from pipeline.schema import Config

PACKAGE = Path(__file__).resolve().parents[1]  # the pipeline package: the only code that travels
LAUNCH = Path(__file__).resolve().parent / "launch.py"  # the notebook's code file, before its last lines
BUNDLE_CONFIG = BUNDLE_MARKER  # the resolved config, inside the code bundle: what marks a dataset as a bundle
# What the bundle may hold: the package's source and its configs. Anything else is refused.
BUNDLE_SUFFIXES = {".py", ".yaml"}
# Names that must never travel, whatever a future change to the bundle does.
FORBIDDEN_NAMES = {"kaggle.json", "access_token", "access_token.txt", "credentials.json", ".env", ".netrc"}
FORBIDDEN_PARTS = {"input", "models", "submissions", ".venv", "__pycache__", ".git", ".cache", "kernel"}
# The path settings as the pushed config holds them: what the notebook uses on Kaggle (session.notebook_config fills
# in the mounts: "" here), or nothing for those only this machine reads. The local values would tell the notebook
# nothing, and a public kernel would publish this machine's folders: its home, its user name.
PUSHED_PATHS = {
    ("input_dir",): f"{TEMP_DEFAULT}/input",
    ("models_dir",): f"{TEMP_DEFAULT}/models",
    ("submissions_dir",): WORKING_DEFAULT,
    ("data", "dir"): "",  # the competition's mount, found under /kaggle/input by the notebook
    ("model", "path"): "",  # the weights' mount (kaggle.model_source), found by the notebook
    ("kaggle", "dir"): "kernel",  # the local kernel folder: `make kernel` and `make kernel-output` only
    ("kaggle", "submit_file"): "",  # `make submit` only
}


# ---------------------------------------------------------------------------------------------
# The config that travels


def _is_local_path(value: object) -> bool:
    """An absolute path or one under a home (~): a folder of this machine, not one of Kaggle's (/kaggle/...)."""
    text = str(value)
    return text.startswith("~") or (text.startswith("/") and not text.startswith("/kaggle/"))


def _settings(tree: dict, prefix: str = ""):
    """(dotted key, value) of every setting in `tree`, a list's items one by one."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _settings(value, f"{prefix}{key}.")
        else:
            yield from ((f"{prefix}{key}", v) for v in (value if isinstance(value, list) else [value]))


def pushed_config(cfg: Config) -> Config:
    """`cfg` as it travels in the code bundle and the kernel's code file: path settings as the notebook has them
    (PUSHED_PATHS); an extra training file given by path by its name, which the notebook looks up in the attached
    sources. Any other setting holding a path of this machine is refused: it would be published with the code."""
    tree = cfg.to_dict()
    for keys, value in PUSHED_PATHS.items():
        *sections, last = keys
        node = tree
        for section in sections:
            node = node[section]
        node[last] = value
    tree["data"]["extra_files"] = [Path(n).name if _is_local_path(n) else n for n in tree["data"]["extra_files"]]
    local = [f"{key}={value}" for key, value in _settings(tree) if isinstance(value, str) and _is_local_path(value)]
    if local:
        raise KernelError(
            f"{local[0]}: a path on this machine would be pushed with the kernel's code, and the notebook cannot "
            "read it; name the model or file instead and attach it (kaggle.model_source, data.datasets)"
        )
    return config_mod.from_dict(tree)


# ---------------------------------------------------------------------------------------------
# The code bundle


def tracked_files(root: Path) -> list[str] | None:
    """The files git tracks under `root`/pipeline (paths relative to `root`); None where `root` is not the top of a
    git checkout (an unpacked copy), or git is not installed."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=False)  # fmt: skip
    except OSError:
        return None
    # a copy unpacked inside some other repository (a home kept in git) is not this checkout: its index lists nothing
    if top.returncode or Path(top.stdout.strip()).resolve() != root.resolve():
        return None
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", "pipeline"], capture_output=True,
                            check=True)  # fmt: skip
    return [name for name in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def bundle_files(root: Path = PACKAGE.parent) -> list[tuple[Path, str]]:
    """(source, path in the bundle) for every file that travels: the package's .py files and configs that git tracks
    (an untracked or ignored file, a local config with another service's token, stays here). In a copy that is not a
    git checkout every .py and .yaml file travels, and a hidden one is refused: nothing tells it is meant to."""
    package = root / "pipeline"
    tracked = tracked_files(root)
    if tracked is None:
        found = sorted(p.relative_to(package) for p in package.rglob("*") if p.is_file())
        hidden = [rel for rel in found if any(part.startswith(".") for part in rel.parts)]
        if hidden:
            raise KernelError(
                f"code bundle: pipeline/{hidden[0].as_posix()} is a hidden file, and {root} is not a git checkout "
                "(where only tracked files travel): move it out of pipeline/, or make kernel from a git checkout"
            )
    else:  # a tracked file deleted in the work tree is not there to send
        found = sorted(Path(name).relative_to("pipeline") for name in tracked if (root / name).is_file())
    return [(package / rel, str(Path("pipeline") / rel)) for rel in found
            if rel.suffix in BUNDLE_SUFFIXES and not set(rel.parts[:-1]) & FORBIDDEN_PARTS]  # fmt: skip


def describe_files(files: list[Path], folder: Path) -> list[str]:
    """The bundle's files as lines, one a folder: `  pipeline/kaggle/: a.py, b.py`."""
    by_folder: dict[str, list[str]] = {}
    for p in files:
        rel = p.relative_to(folder)
        by_folder.setdefault(f"{rel.parent.as_posix()}/" if rel.parent != Path() else "", []).append(rel.name)
    return [f"  {name or './'}: {', '.join(names)}" for name, names in sorted(by_folder.items())]


def check_bundle(folder: Path) -> list[Path]:
    """Refuse a bundle holding data, models, caches, a virtualenv, a credential file or a known secret."""
    from pipeline.kaggle import client

    files = sorted(p for p in folder.rglob("*") if p.is_file())
    secrets = [s for s in client.known_secrets() if s]
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


def check_replaceable(dest: Path, marker: str) -> None:
    """`dest`, about to be replaced whole, is absent or a folder `make kernel` wrote (it holds `marker`); else one
    line: kaggle.dir may name a folder of the user's, whose <slug>/code or /notebook would go with no word."""
    if (dest.exists() or dest.is_symlink()) and not (dest / marker).is_file():
        raise KernelError(
            f"{dest}: not a folder `make kernel` wrote (no {marker}), and it would replace it whole; "
            "move it, or set kaggle.dir to another folder"
        )


def write_bundle(cfg: Config, plan: Plan, dest: Path) -> list[Path]:
    """The code bundle (a Kaggle dataset folder) at `dest`, replaced whole; returns its files."""
    meta = dataset_metadata(plan)
    check_dataset_metadata(meta)
    check_replaceable(dest, DATASET_METADATA)
    with atomic_dir(dest) as tmp:
        for src, rel in bundle_files():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp / rel)
        config_mod.save(pushed_config(cfg), tmp / BUNDLE_CONFIG)
        write_json(tmp / DATASET_METADATA, meta)
        check_bundle(tmp)
    return check_bundle(dest)


# ---------------------------------------------------------------------------------------------
# The notebook's code file


def _py_str(text: str) -> str:
    """A Python literal for `text`: a readable triple-quoted block when that is exact, else repr()."""
    if "'''" in text or "\\" in text or text.endswith("'"):
        return repr(text)
    return "'''\\\n" + text + "'''"


def script_text(cfg: Config, plan: Plan, digest: str = "") -> str:
    """pipeline/kaggle/launch.py's text, then the lines that run it with this code dataset and config."""
    config_text = yaml.safe_dump(pushed_config(cfg).to_dict(), sort_keys=False, allow_unicode=True)
    return (
        f"# {plan.title}: the Jigsaw multilingual pipeline on a Kaggle GPU, written by `make kernel`\n"
        f"# (edit the repository instead). The code comes from the attached dataset {plan.dataset_ref}.\n"
        + LAUNCH.read_text(encoding="utf-8")
        + "\n\n# The resolved config `make kernel` was given, its paths Kaggle's: the notebook fills in the mounts"
        + " (kernel-run.yaml).\n"
        + f"CODE_DATASET = {plan.dataset_slug!r}\n"
        + f"CODE_DIGEST = {digest!r}  # the notebook stops at once when the attached bundle's code differs\n"
        + f"CONTINUES = {plan.continue_session!r}  # kaggle.continue_from: the earlier session the output must be\n"
        + f"CONFIG = {_py_str(config_text)}\n\n"
        + 'if __name__ == "__main__":\n    run(CODE_DATASET, CONFIG, CODE_DIGEST, CONTINUES)\n'
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


def write_kernel(cfg: Config, plan: Plan, dest: Path, digest: str = "") -> dict:
    """The kernel folder (metadata + code file) at `dest`, replaced whole; returns the checked metadata. `digest`:
    the code bundle's (launch.code_digest), which the notebook checks the attached bundle against."""
    meta = kernel_metadata(cfg, plan)
    source = script_text(cfg, plan, digest)
    check_replaceable(dest, KERNEL_METADATA)
    with atomic_dir(dest) as tmp:
        atomic_write_text(tmp / plan.code_file, notebook_json(source) if plan.kernel_type == "notebook" else source)
        write_json(tmp / KERNEL_METADATA, meta)
        check_kernel_metadata(meta, tmp)
    return meta
