"""Competition and dataset files, downloaded and unzipped into the raw input folder (`make data`).

A download lands in a temporary folder beside its destination and moves in only once it is complete and
unzipped, so a crash leaves no half file; a file already in the destination is never overwritten.

Facts about kaggle 2.2.5 this module relies on (read from its source):

* `competition_download_files(competition, path, force, quiet, unzip)` writes
  `<path>/<competition>.zip`; `dataset_download_files(dataset, path, force, quiet, unzip, licenses)`
  writes `<path>/<dataset-slug>.zip`. Both default to `quiet=True`.
"""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.kaggle.client import KaggleError, explain, get_api, http_status

if TYPE_CHECKING:  # only for type checkers: importing kaggle at run time authenticates
    from pipeline.kaggle.client import KaggleApi

log = logging.getLogger(__name__)


def download_competition(
    competition: str, dest: Path, api: KaggleApi | None = None, files: tuple[str, ...] | list[str] = ()
) -> list[Path]:
    """Download and unzip the files of `competition` into `dest`; return the files in `dest`.

    With `files`, only those are fetched, one by one (competition_download_file), and only the ones
    `dest` lacks: the archive of every file holds large copies the pipeline never reads. Files already
    in `dest` are never overwritten; only missing ones are added.
    """
    api = get_api() if api is None else api
    dest = Path(dest)
    if not files:
        return _fetch(
            lambda path: api.competition_download_files(competition, path=path, quiet=False),
            f"competition {competition}",
            dest,
        )
    for name in files:
        if (dest / name).is_file():
            continue
        try:
            # the server wraps a large file in <name>.zip; _fetch unzips it beside the others
            _fetch(
                lambda path, name=name: api.competition_download_file(competition, name, path=path, quiet=False),
                f"competition {competition}",
                dest,
            )
        except KaggleError as exc:
            if http_status(exc.__cause__) == 404:
                raise KaggleError(f"competition {competition} has no file {name} (404)") from exc
            raise
    return files_under(dest)


def download_dataset(slug: str, dest: Path, api: KaggleApi | None = None) -> list[Path]:
    """Download and unzip all files of dataset `slug` ("owner/name") into `dest`; return the files.

    Files already in `dest` are never overwritten; only missing ones are added.
    """
    api = get_api() if api is None else api
    return _fetch(
        lambda path: api.dataset_download_files(slug, path=path, quiet=False),
        f"dataset {slug}",
        Path(dest),
    )


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _fetch(download: Callable[[str], object], what: str, dest: Path) -> list[Path]:
    """Run `download(folder)` in a temporary folder beside `dest`, unzip, then move into `dest`.

    The temporary folder is on the same filesystem as `dest`, so the final moves are renames: a crash
    leaves either no file or a complete one in `dest`, never half of one.
    """
    if dest.exists() and not dest.is_dir():
        raise KaggleError(f"{what}: {dest} exists and is not a folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of an earlier run that had this pid
    raw, files = tmp / "download", tmp / "files"
    raw.mkdir(parents=True)
    files.mkdir()
    try:
        try:
            download(str(raw))
        except Exception as exc:
            raise explain(exc, what) from exc
        for item in sorted(raw.iterdir()):
            if item.is_file() and item.suffix.lower() == ".zip":
                _unzip(item, files, what)
            else:
                os.replace(item, files / item.name)  # Kaggle may serve a lone file unzipped
        _unzip_nested(files, what)
        if not files_under(files):
            raise KaggleError(f"{what}: the download contained no files")
        _install(files, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files_under(dest)


def _unzip(archive: Path, into: Path, what: str) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                target = into / member.filename
                if not member.is_dir() and target.exists():
                    # Kaggle bundles sometimes hold both train.csv and train.csv.zip: same data twice.
                    if target.stat().st_size == member.file_size:
                        continue
                    raise KaggleError(f"{what}: {archive.name} holds a different {member.filename}")
                # extract() drops '..' and absolute prefixes from member names: nothing escapes `into`.
                zf.extract(member, into)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        # BadZipFile covers a truncated download and a CRC mismatch found while extracting.
        raise KaggleError(f"{what}: {archive.name} is not a valid zip ({exc}); download it again") from exc


def _unzip_nested(root: Path, what: str) -> None:
    """Extract every .zip under `root` next to itself and delete it, until none is left."""
    while zips := [p for p in files_under(root) if p.suffix.lower() == ".zip"]:
        for archive in zips:
            _unzip(archive, archive.parent, what)
            archive.unlink()


def _install(files: Path, dest: Path) -> None:
    """Move the tree `files` into `dest`: one rename when `dest` is new, else add missing files only."""
    if not dest.exists() or not any(dest.iterdir()):
        if dest.exists():
            dest.rmdir()  # rename() onto a folder needs it absent (or empty, on POSIX only)
        os.replace(files, dest)
        return
    added: list[Path] = []
    created: list[Path] = []
    try:
        for src in files_under(files):
            target = dest / src.relative_to(files)
            if target.exists():
                # Raw files are never edited: a file already there wins, even if it differs.
                log.info("%s already exists, kept as it is", target)
                continue
            for parent in reversed(target.relative_to(dest).parents[:-1]):
                if not (dest / parent).exists():
                    (dest / parent).mkdir()
                    created.append(dest / parent)
            os.replace(src, target)
            added.append(target)
    except BaseException:
        # Undo the moves so that `dest` is exactly as it was.
        for target in added:
            target.unlink(missing_ok=True)
        for folder in reversed(created):
            folder.rmdir()
        raise
