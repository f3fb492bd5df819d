"""The notebook's code file: this module's source, then the code dataset's name and the config.

`make kernel` writes this file's text, followed by three lines that call `run`, as the kernel's code
file (pipeline/kaggle/bundle.py). It uses the standard library only: it runs before the pipeline is
importable, and its one job is to find the attached code bundle, put it on sys.path and hand over to
`pipeline.notebook.notebook_main`. Internet is off on Kaggle and nothing is installed.
"""

import hashlib
import importlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path


def find_code(input_root: Path, slug: str) -> Path:
    """The folder holding pipeline/__init__.py, to put on sys.path.

    Kaggle unpacks the uploaded pipeline.zip into a pipeline/ folder; if it did not, unzip it here
    (the archive stores paths relative to the package folder, so the files go into pipeline/).
    """
    for pattern in (slug, "*/" + slug, "*/*/" + slug):
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
    raise RuntimeError(f"the code dataset {slug} is not attached under {input_root}")


def code_digest(folder: Path) -> str:
    """The pipeline package's source by content: every .py and .yaml file under `folder`, by relative path."""
    found = sorted((p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.suffix in (".py", ".yaml"))
    listing = "".join(f"{rel} {hashlib.sha256(p.read_bytes()).hexdigest()}\n" for rel, p in found if p.is_file())
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def unbuffered() -> None:
    """Every line of output reaches the log as it is printed: Kaggle writes it to a file, where Python buffers
    blocks of 8 kB, and a session killed at its limit would lose the last evaluation and ETA lines. The child
    processes (torchrun's workers) inherit PYTHONUNBUFFERED."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    os.environ["PYTHONUNBUFFERED"] = "1"


def run(slug: str, config_text: str, digest: str = "", continues: str = "") -> None:
    """`continues`: the earlier session's id `make kernel` checked (kaggle.continue_from), "" for none."""
    unbuffered()
    input_root = Path(os.environ.get("KAGGLE_INPUT_ROOT") or "/kaggle/input")
    code = find_code(input_root, slug)
    found = code_digest(code / "pipeline")
    if digest and found != digest:  # Kaggle mounted another version of the bundle than `make kernel` uploaded
        sys.exit(
            f"error: the attached code bundle {slug} is not the one this kernel was pushed with (code {found}, "
            f"expected {digest}); wait until the dataset shows the new version, then make kernel again"
        )
    print(f"kernel: code bundle {slug}, code {found}", flush=True)
    sys.path.insert(0, str(code))
    # imported by name once the bundle is on sys.path: this file runs as the kernel's code file, before
    # the package can be imported, and as a module of the Kaggle seam it imports no stage
    notebook = importlib.import_module("pipeline.notebook")
    errors = importlib.import_module("pipeline.errors")
    try:
        notebook.notebook_main(config_text, continues=continues)
    except errors.PipelineError as e:  # a stop the user can act on: one line, as every stage says it
        sys.exit(f"error: {e}")
