"""Tests for pipeline.kaggle.downloads: competition and dataset files fetched, unzipped and moved in whole.

No test reaches the network: `FakeKaggleApi` (tests/helpers/fake_kaggle.py) serves the archives.

What Kaggle's refusals of a download say is in tests/kaggle/test_client.py.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import requests

from pipeline.kaggle import downloads
from pipeline.kaggle.client import KaggleError
from tests.helpers.fake_kaggle import FakeKaggleApi, http_error

COMPETITION = "jigsaw-multilingual-toxic-comment-classification"

VALIDATION = "id,comment_text,lang,toxic\n0,Este usuario ni siquiera llega,es,0\n1,Il testo e ok,it,0\n"
TEST = "id,content,lang\n0,Doctor Who adlı viki başlığına,tr\n1,Вполне возможно,ru\n"
NESTED = "a,b\n1,2\n"


def build_zip(path: Path) -> Path:
    """A zip like Kaggle serves: two csv files plus one nested `x.csv.zip`."""
    nested = path.with_name("x.csv.zip")
    with zipfile.ZipFile(nested, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.csv", NESTED)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("validation.csv", VALIDATION)
        zf.writestr("test.csv", TEST)
        zf.write(nested, "x.csv.zip")
    nested.unlink()
    return path


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    (tmp_path / "served").mkdir()
    return build_zip(tmp_path / "served" / "bundle.zip")


def test_download_competition_extracts_everything(tmp_path: Path, archive: Path) -> None:
    api = FakeKaggleApi(archive)
    dest = tmp_path / "input" / "jigsaw"
    files = downloads.download_competition(COMPETITION, dest, api=api)

    assert sorted(p.name for p in files) == ["test.csv", "validation.csv", "x.csv"]
    assert all(p.parent == dest for p in files)
    assert (dest / "validation.csv").read_text() == VALIDATION
    assert (dest / "test.csv").read_text() == TEST
    assert (dest / "x.csv").read_text() == NESTED
    assert not list(dest.rglob("*.zip"))
    assert leftovers(dest.parent) == []

    [(name, args)] = api.calls
    assert name == "competition_download_files"
    assert args["competition"] == COMPETITION
    assert args["quiet"] is False
    assert args["unzip"] is False  # we unzip ourselves, to catch corrupt and nested zips
    # Downloaded into a temporary folder beside dest (same filesystem, so the move is a rename).
    assert Path(args["path"]).is_relative_to(dest.parent / f".{dest.name}.tmp-{os.getpid()}")


def test_download_dataset_extracts_everything(tmp_path: Path, archive: Path) -> None:
    api = FakeKaggleApi(archive)
    dest = tmp_path / "input" / "translated"
    files = downloads.download_dataset("someone/jigsaw-translated", dest, api=api)

    assert sorted(p.name for p in files) == ["test.csv", "validation.csv", "x.csv"]
    [(name, args)] = api.calls
    assert (name, args["dataset"], args["quiet"]) == (
        "dataset_download_files",
        "someone/jigsaw-translated",
        False,
    )
    assert leftovers(dest.parent) == []


def test_download_into_existing_dest_only_adds_missing(tmp_path: Path, archive: Path) -> None:
    dest = tmp_path / "jigsaw"
    dest.mkdir()
    (dest / "validation.csv").write_text("mine\n")
    files = downloads.download_competition(COMPETITION, dest, api=FakeKaggleApi(archive))

    assert (dest / "validation.csv").read_text() == "mine\n"  # raw files are never edited
    assert (dest / "test.csv").read_text() == TEST
    assert sorted(p.name for p in files) == ["test.csv", "validation.csv", "x.csv"]
    assert leftovers(tmp_path) == []


def test_download_merges_subfolders_and_duplicate_zipped_copies(tmp_path: Path) -> None:
    served = tmp_path / "served.zip"
    inner = tmp_path / "train.csv.zip"
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("train.csv", VALIDATION)
    with zipfile.ZipFile(served, "w") as zf:
        zf.writestr("train.csv", VALIDATION)  # Kaggle bundles sometimes hold a file and its zip
        zf.write(inner, "train.csv.zip")
        zf.writestr("extra/more.csv", TEST)
    dest = tmp_path / "jigsaw"
    dest.mkdir()
    (dest / "validation.csv").write_text("mine\n")

    files = downloads.download_competition(COMPETITION, dest, api=FakeKaggleApi(served))
    assert [p.relative_to(dest).as_posix() for p in files] == [
        "extra/more.csv",
        "train.csv",
        "validation.csv",
    ]
    assert (dest / "extra" / "more.csv").read_text() == TEST
    assert (dest / "train.csv").read_text() == VALIDATION


def test_download_into_empty_existing_dest(tmp_path: Path, archive: Path) -> None:
    dest = tmp_path / "jigsaw"
    dest.mkdir()
    files = downloads.download_competition(COMPETITION, dest, api=FakeKaggleApi(archive))
    assert len(files) == 3


def test_corrupt_zip_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    dest = tmp_path / "input" / "jigsaw"

    with pytest.raises(KaggleError, match=rf"{COMPETITION}\.zip") as info:
        downloads.download_competition(COMPETITION, dest, api=FakeKaggleApi(bad))
    assert "not a valid zip" in str(info.value)
    assert not dest.exists()
    assert leftovers(dest.parent) == []


def test_corrupt_nested_zip_leaves_existing_dest_unchanged(tmp_path: Path) -> None:
    served = tmp_path / "served.zip"
    with zipfile.ZipFile(served, "w") as zf:
        zf.writestr("test.csv", TEST)
        zf.writestr("train.csv.zip", b"garbage, not a zip")
    dest = tmp_path / "jigsaw"
    dest.mkdir()
    (dest / "validation.csv").write_text("mine\n")

    with pytest.raises(KaggleError, match=r"train\.csv\.zip"):
        downloads.download_competition(COMPETITION, dest, api=FakeKaggleApi(served))
    assert [p.name for p in dest.iterdir()] == ["validation.csv"]
    assert (dest / "validation.csv").read_text() == "mine\n"
    assert leftovers(tmp_path) == []


def test_api_error_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "jigsaw"
    with pytest.raises(KaggleError) as info:
        downloads.download_competition(COMPETITION, dest, api=FakeKaggleApi(error=http_error(404, "Not Found")))
    assert isinstance(info.value.__cause__, requests.HTTPError)  # original kept for debugging
    assert not dest.exists()
    assert leftovers(tmp_path) == []


def test_per_file_download_fetches_only_what_is_missing(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.competition_files = {"test.csv": b"id,content,lang\n", "validation.csv": b"id\n"}
    dest = tmp_path / "jigsaw"
    dest.mkdir()
    (dest / "validation.csv").write_bytes(b"already here")
    files = downloads.download_competition(COMPETITION, dest, api=api, files=("test.csv", "validation.csv"))
    assert [c[1]["file_name"] for c in api.calls] == ["test.csv"]
    assert sorted(p.name for p in files) == ["test.csv", "validation.csv"]
    assert (dest / "validation.csv").read_bytes() == b"already here"
    assert not [c for c in api.calls if c[0] == "competition_download_files"]  # not the whole archive
