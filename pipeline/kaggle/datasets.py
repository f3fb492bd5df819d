"""Datasets on Kaggle: the code bundle's upload, its version numbers and readiness (`make kernel`), and the files of
the datasets a kernel attaches.

kaggle 2.2.5 facts used below (read from kaggle_api_extended.py):

* `dataset_create_new(folder, public, quiet, convert_to_csv, dir_mode, ignore_patterns)` and
  `dataset_create_version(folder, version_notes, quiet, convert_to_csv, delete_old_versions, dir_mode,
  ignore_patterns)` read `<folder>/dataset-metadata.json` and upload every other entry of the folder;
  with dir_mode="zip" a subfolder is uploaded as `<name>.zip` holding the folder's contents (paths
  relative to the folder itself), otherwise subfolders are skipped. Both return an
  ApiCreateDatasetResponse whose `status` is "ok" or whose `error` says what went wrong (create_new
  returns such an error, not an exception, when the slug is taken).
* `dataset_status(ref)` returns "ready", "pending", ... and raises HTTPError 404 for no such dataset.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.kaggle.client import KaggleError, clean, explain, http_status

# the file at the top of every code bundle (pipeline/kaggle/bundle.py writes it): what tells a bundle from another
# dataset of the user's
BUNDLE_MARKER = "kernel-config.yaml"

if TYPE_CHECKING:  # only for type checkers: importing kaggle at run time authenticates
    from pipeline.kaggle.client import KaggleApi


def dataset_exists(ref: str, api: KaggleApi) -> bool:
    """Whether dataset `ref` (owner/slug) exists for this account; 404 means no, other failures raise."""
    try:
        api.dataset_status(ref)
    except Exception as exc:
        if http_status(exc) == 404:
            return False
        raise explain(exc, f"dataset {ref}") from exc
    return True


def wait_dataset_ready(
    ref: str,
    api: KaggleApi,
    timeout_s: float = 900,
    poll_s: float = 10,
    sleep: Callable[[float], None] | None = None,
    grace_s: float = 120,
) -> str:
    """Poll `dataset_status(ref)` until Kaggle has processed the upload; return the last status.

    A kernel pushed before its code dataset is ready would mount the previous version. A 404 in the
    first `grace_s` seconds is a dataset just created and not yet visible: keep polling. "deleted",
    "error" and "failed" are final: waiting would not change them.
    """
    import time

    sleep = time.sleep if sleep is None else sleep
    waited = 0.0
    while True:
        try:
            status = str(api.dataset_status(ref) or "").lower()
        except Exception as exc:
            if http_status(exc) != 404 or waited >= grace_s:
                raise explain(exc, f"dataset {ref}") from exc
            status = "not visible yet"
        if status == "ready":
            return status
        if status == "deleted":
            raise KaggleError(
                f"dataset {ref} was deleted on Kaggle; a deleted slug cannot be reused at once: set "
                "kaggle.dataset_slug=<new-slug> and run `make kernel` again"
            )
        if status in ("error", "failed"):
            raise KaggleError(f"dataset {ref}: Kaggle could not process the upload (status {status})")
        if waited >= timeout_s:
            raise KaggleError(
                f"dataset {ref}: still {status or 'processing'} after {waited:.0f} s; "
                "run `make kernel` again once https://www.kaggle.com/datasets/" + ref + " shows it ready"
            )
        sleep(poll_s)
        waited += poll_s


def dataset_version(ref: str, api: KaggleApi) -> int | None:
    """The current version number of dataset `ref` (kaggle 2.2.5: dataset_status with a json projection)."""
    try:
        answer = api.dataset_status(ref, format="json(current_version_number)")
    except TypeError:  # an older library without `format`: the kernel attaches the latest version
        return None
    except Exception as exc:
        raise explain(exc, f"dataset {ref}") from exc
    try:
        number = json.loads(answer).get("current_version_number")
    except (TypeError, ValueError, AttributeError):
        return None
    return int(number) if isinstance(number, int) or str(number).isdigit() else None


def version_before_upload(ref: str, api: KaggleApi) -> int | None:
    """Dataset `ref`'s version number before an upload: 0 when it does not exist yet, None when not told."""
    try:
        return dataset_version(ref, api)
    except KaggleError as exc:
        if http_status(exc.__cause__) == 404:
            return 0
        raise


def wait_new_version(
    ref: str,
    before: int | None,
    api: KaggleApi,
    timeout_s: float = 300,
    poll_s: float = 10,
    sleep: Callable[[float], None] | None = None,
) -> int | None:
    """The version number of dataset `ref` once it is past `before` (the number before the upload): right after an
    upload Kaggle may still answer the previous number, or 404 for a few seconds. None: the library tells no
    numbers (the kernel then attaches the unversioned latest, and the notebook's digest check guards it)."""
    import time

    sleep = time.sleep if sleep is None else sleep
    waited = 0.0
    while True:
        try:
            number = dataset_version(ref, api)
        except KaggleError as exc:
            if http_status(exc.__cause__) != 404 or waited >= timeout_s:
                raise
            number = before
        if number is None or before is None or number > before:
            return number
        if waited >= timeout_s:
            raise KaggleError(
                f"dataset {ref}: Kaggle still serves version {number} after {waited:.0f} s, the one before this "
                "upload; run `make kernel` again in a few minutes"
            )
        sleep(poll_s)
        waited += poll_s


def check_holds_a_bundle(ref: str, api: KaggleApi) -> None:
    """Refuse to add a version to dataset `ref` unless it holds a code bundle (BUNDLE_MARKER at its top): a version
    keeps the dataset's visibility, so kaggle.dataset_slug naming another dataset of the user's, a public one, would
    publish the code and the config in it, and bury what it held under a new version."""
    names = dataset_files(ref, api)
    if BUNDLE_MARKER not in names:
        raise KaggleError(
            f"dataset {ref} exists and is not a code bundle of `make kernel` (it has no {BUNDLE_MARKER}; "
            f"{len(names)} file(s)): a new version would put the code in it, as public as it is; set "
            "kaggle.dataset_slug to a new name, or to one an earlier `make kernel` created"
        )


def upload_dataset(folder: Path, ref: str, notes: str, api: KaggleApi) -> tuple[str, str]:
    """Create dataset `ref` from `folder` the first time, else add a new version to it: only where it holds a code
    bundle already (check_holds_a_bundle). Returns (action, url).

    Subfolders are uploaded zipped (dir_mode="zip"); Kaggle unpacks them on its side.
    """
    what = f"dataset {ref}"
    exists = dataset_exists(ref, api)
    if exists:
        check_holds_a_bundle(ref, api)
    error = _send_dataset(folder, notes, api, exists, what)
    if error and "already in use" in error and not exists:
        exists = True  # created meanwhile (create_new answers so instead of raising): add a version
        check_holds_a_bundle(ref, api)  # or a dataset this account could not see a moment ago: the same refusal
        error = _send_dataset(folder, notes, api, exists, what)
    if error:
        if "already in use" in error or "409" in error:
            raise KaggleError(f"{what}: conflict (409): {clean(error)}")
        raise KaggleError(f"{what}: upload refused: {clean(error)}")
    return ("new version" if exists else "created"), f"https://www.kaggle.com/datasets/{ref}"


def _version_refused(exc: BaseException, what: str, api: KaggleApi) -> KaggleError:
    """A 403 on a new version: Kaggle answers so while the previous version is still processing."""
    ref = what.partition(" ")[2]
    try:
        status = str(api.dataset_status(ref) or "").lower()
    except Exception:
        status = ""
    if status and status != "ready":
        return KaggleError(
            f"{what}: the previous version is still {status} on Kaggle (403 until it is ready); "
            "wait a few minutes and run `make kernel` again"
        )
    return explain(exc, what)


def dataset_files(ref: str, api: KaggleApi) -> list[str]:
    """The file names of dataset `ref` (owner/slug), every page."""
    names: list[str] = []
    token = None
    while True:
        try:
            result = api.dataset_list_files(ref, page_token=token, page_size=200)
        except Exception as exc:
            raise explain(exc, f"dataset {ref}") from exc
        error = str(getattr(result, "error_message", "") or "")
        if error:
            raise KaggleError(f"dataset {ref}: {clean(error)}")
        names += [str(getattr(f, "name", "")) for f in getattr(result, "files", None) or []]
        token = getattr(result, "next_page_token", None)
        if not token:
            return names


def _send_dataset(folder: Path, notes: str, api: KaggleApi, exists: bool, what: str) -> str:
    """One create/version call; returns Kaggle's error text, "" on success."""
    try:
        if exists:
            result = api.dataset_create_version(str(folder), notes, quiet=True, dir_mode="zip")
        else:
            result = api.dataset_create_new(str(folder), public=False, quiet=True, dir_mode="zip")
    except Exception as exc:
        if exists and http_status(exc) == 403:
            raise _version_refused(exc, what, api) from exc
        raise explain(exc, what) from exc
    if result is None:
        return "the upload returned nothing (see the output above)"
    status, error = str(getattr(result, "status", "") or ""), str(getattr(result, "error", "") or "")
    if status.lower() == "ok" and not error:
        return ""
    return error or f"status {status or 'unknown'}"
