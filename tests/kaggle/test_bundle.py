"""The code bundle and the notebook's code file (pipeline.kaggle.bundle): the pipeline and its configs only, never
data or a credential; a notebook kernel type writes an .ipynb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import config, kernel
from pipeline.kaggle import bundle
from pipeline.kaggle import plan as kaggle_plan
from pipeline.kaggle.plan import KernelError
from tests.helpers.fake_kaggle import SENTINEL
from tests.helpers.kernels import dry, make_cfg


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    """Every test starts with no Kaggle credentials and an empty HOME."""
    return no_kaggle_env


def test_notebook_kernel_type_writes_an_ipynb(tmp_path: Path) -> None:
    cfg = dry(tmp_path, "kaggle.kernel_type=notebook")
    meta = bundle.write_kernel(cfg, kaggle_plan.make_plan(cfg, "tester"), tmp_path / "k")
    nb = json.loads((tmp_path / "k" / meta["code_file"]).read_text())
    assert meta["code_file"] == "jigsaw-sample.ipynb" and nb["nbformat"] == 4
    assert "run(CODE_DATASET, CONFIG, CODE_DIGEST, CONTINUES)" in nb["cells"][0]["source"]


def test_bundle_holds_the_pipeline_and_configs_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_KEY", SENTINEL)
    monkeypatch.setenv("KAGGLE_USERNAME", "tester")
    cfg = make_cfg(tmp_path, "kaggle.dry_run=true")
    result = kernel.build_and_push(cfg)
    code = result["code_dir"]
    names = sorted(str(p.relative_to(code)) for p in code.rglob("*") if p.is_file())
    assert "dataset-metadata.json" in names and "kernel-config.yaml" in names
    assert "pipeline/__init__.py" in names and "pipeline/kernel.py" in names and "pipeline/configs/sample.yaml" in names
    for name in names:
        assert name in ("dataset-metadata.json", "kernel-config.yaml") or (
            name.startswith("pipeline/") and name.endswith((".py", ".yaml"))
        ), name
        assert not any(part in name.split("/") for part in ("input", "models", "submissions", ".venv", "__pycache__"))
    for p in code.rglob("*"):
        if p.is_file():
            assert SENTINEL.encode() not in p.read_bytes()
    assert result["bundle_bytes"] == sum(p.stat().st_size for p in code.rglob("*") if p.is_file())
    assert result["bundle_bytes"] < 2 << 20  # the code alone (1.0 MB today): a data file in it would pass this
    meta = json.loads((code / "dataset-metadata.json").read_text())
    assert meta["id"] == "tester/jigsaw-sample-code" and meta["licenses"] == [{"name": "CC0-1.0"}]
    assert config.load_file(code / "kernel-config.yaml") == bundle.pushed_config(cfg)  # its paths Kaggle's


@pytest.mark.parametrize("bad", ["kaggle.json", "input/x.csv", "models/m/model.safetensors", "notes.txt"])
def test_check_bundle_refuses_data_and_credentials(tmp_path: Path, bad: str) -> None:
    folder = tmp_path / "bundle"
    (folder / "pipeline").mkdir(parents=True)
    (folder / "pipeline" / "a.py").write_text("x = 1\n")
    bundle.check_bundle(folder)
    (folder / bad).parent.mkdir(parents=True, exist_ok=True)
    (folder / bad).write_text("{}")
    with pytest.raises(KernelError, match="code bundle"):
        bundle.check_bundle(folder)


def test_check_bundle_refuses_a_secret_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_KEY", SENTINEL)
    folder = tmp_path / "bundle"
    (folder / "pipeline").mkdir(parents=True)
    (folder / "pipeline" / "a.py").write_text(f"KEY = {SENTINEL!r}\n")
    with pytest.raises(KernelError, match="contains a Kaggle credential") as info:
        bundle.check_bundle(folder)
    assert SENTINEL not in str(info.value)


def test_a_folder_make_kernel_did_not_write_is_never_replaced(tmp_path: Path) -> None:
    """kaggle.dir may name a folder of the user's: its <slug>/code or /notebook is replaced whole only when it holds
    the metadata `make kernel` writes there (then again and again); else one line, and the folder as it was."""
    cfg = dry(tmp_path)
    plan = kaggle_plan.make_plan(cfg, "tester")
    for write, name in ((bundle.write_bundle, "code"), (bundle.write_kernel, "notebook")):
        theirs = tmp_path / "theirs" / name
        theirs.mkdir(parents=True)
        (theirs / "thesis.tex").write_text("x")
        with pytest.raises(KernelError, match=f"^{theirs}: not a folder `make kernel` wrote"):
            write(cfg, plan, theirs)
        assert [p.name for p in theirs.iterdir()] == ["thesis.tex"]
        ours = tmp_path / "ours" / name
        write(cfg, plan, ours)
        write(cfg, plan, ours)  # its own folder: replaced
        assert not (ours / "thesis.tex").exists()


def test_no_local_path_is_pushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path setting under a home like /home/alice/secret-project: none of it reaches a pushed file (the code
    bundle, the kernel's code file, the metadata), though the folders are written there."""
    from tests.helpers.fake_kaggle import FakeKaggleApi

    secret = tmp_path / "home" / "alice" / "secret-project"
    monkeypatch.setenv("HOME", str(secret.parent))
    competition = secret / "competition"
    competition.mkdir(parents=True)
    api = FakeKaggleApi()
    api.dataset_listing = {"someone/translations": ["translated-train.csv"]}
    cfg = config.load("sample", [
        f"kaggle.dir={secret / 'kernel'}", f"input_dir={secret / 'input'}", f"models_dir={secret / 'models'}",
        f"submissions_dir={secret / 'submissions'}", "data.source=dir", f"data.dir={competition}",
        f"kaggle.submit_file={secret / 'submissions' / 'mine.csv'}", "data.datasets=[someone/translations]",
        f"data.extra_files=[{secret / 'extra' / 'translated-train.csv'}]",
    ])  # fmt: skip
    result = kernel.build_and_push(cfg, api=api)
    sent = [p for d in (result["code_dir"], result["kernel_dir"]) for p in d.rglob("*") if p.is_file()]
    assert {p.name for p in sent} >= {"kernel-config.yaml", "jigsaw-sample.py", "kernel-metadata.json"}
    for p in sent:
        text = p.read_text(encoding="utf-8")
        assert "alice" not in text and "secret-project" not in text and str(tmp_path) not in text, p
    pushed = config.load_file(result["code_dir"] / "kernel-config.yaml")
    assert (pushed.input_dir, pushed.submissions_dir, pushed.data.dir) == ("/kaggle/temp/input", "/kaggle/working", "")
    assert list(pushed.data.extra_files) == ["translated-train.csv"]  # by name: the notebook finds it in the sources


def test_a_local_model_folder_is_refused_not_pushed(tmp_path: Path) -> None:
    cfg = dry(tmp_path, "model.name=/home/alice/secret-project/xlmr", "kaggle.model_source=someone/xlmr")
    with pytest.raises(KernelError, match="model.name=/home/alice/secret-project/xlmr: a path on this machine"):
        bundle.script_text(cfg, kaggle_plan.make_plan(cfg, "tester"))


def _package(root: Path) -> Path:
    """A small checkout at `root`: pipeline/ with a module, a config, a hidden local config and an untracked module."""
    files = {"__init__.py": "", "a.py": "x = 1\n", "configs/sample.yaml": "name: sample\n",
             "configs/.my-local.yaml": "token: other-service-token\n", "scratch.py": "y = 2\n"}  # fmt: skip
    for name, text in files.items():
        (root / "pipeline" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "pipeline" / name).write_text(text)
    return root


def test_a_checkout_bundles_only_what_git_tracks(tmp_path: Path) -> None:
    import subprocess

    root = _package(tmp_path / "checkout")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    tracked = ["pipeline/__init__.py", "pipeline/a.py", "pipeline/configs/sample.yaml"]
    subprocess.run(["git", "-C", str(root), "add", *tracked], check=True)
    assert [rel for _, rel in bundle.bundle_files(root)] == tracked  # no hidden, no untracked file


def test_a_plain_copy_refuses_a_hidden_file(tmp_path: Path) -> None:
    root = _package(tmp_path / "copy")
    with pytest.raises(KernelError, match=r"pipeline/configs/\.my-local\.yaml is a hidden file, and .* is not a git"):
        bundle.bundle_files(root)
    (root / "pipeline" / "configs" / ".my-local.yaml").unlink()
    assert "pipeline/scratch.py" in [rel for _, rel in bundle.bundle_files(root)]  # a copy sends what it holds


def test_the_dry_run_lists_the_bundle(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    kernel.build_and_push(dry(tmp_path))
    out = capsys.readouterr().out
    assert "kernel: the code bundle's files" in out
    assert (
        "\n  pipeline/kaggle/: " in out
        and "bundle.py, " in out
        and "\n  ./: dataset-metadata.json, kernel-config.yaml" in out
    )
