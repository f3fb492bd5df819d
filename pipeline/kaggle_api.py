"""Kaggle calls of `make kernel`, `make kernel-output`, `make kernel-status` and `make submit`.

Part of the seam with pipeline/kaggle_io.py (credentials, errors in plain words, downloads): every
function takes the authenticated `api` from `kaggle_io.get_api()` (a fake in tests), turns each
failure into a one-line `KaggleError`, and nothing else in the pipeline calls the kaggle API.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.kaggle_io import KaggleError, _clean, _files, _kaggle_json, _status, explain

if TYPE_CHECKING:  # only for type checkers: importing kaggle at run time authenticates
    from kaggle.api.kaggle_api_extended import KaggleApi

# ---------------------------------------------------------------------------------------------
# Uploads and kernels (`make kernel`, `make kernel-output`)
#
# kaggle 2.2.5 facts used below (read from kaggle_api_extended.py):
#
# * `dataset_create_new(folder, public, quiet, convert_to_csv, dir_mode, ignore_patterns)` and
#   `dataset_create_version(folder, version_notes, quiet, convert_to_csv, delete_old_versions, dir_mode,
#   ignore_patterns)` read `<folder>/dataset-metadata.json` and upload every other entry of the folder;
#   with dir_mode="zip" a subfolder is uploaded as `<name>.zip` holding the folder's contents (paths
#   relative to the folder itself), otherwise subfolders are skipped. Both return an
#   ApiCreateDatasetResponse whose `status` is "ok" or whose `error` says what went wrong (create_new
#   returns such an error, not an exception, when the slug is taken).
# * `dataset_status(ref)` returns "ready", "pending", ... and raises HTTPError 404 for no such dataset.
# * `kernels_push(folder, timeout=None, acc=None, no_run=False)` reads `<folder>/kernel-metadata.json`
#   and returns an ApiSaveKernelResponse: `url`, `version_number`, `error`, `invalid_dataset_sources`,
#   `invalid_competition_sources`, `invalid_kernel_sources`, `invalid_model_sources`.
# * `kernels_status(ref)` returns `.status` (a KernelWorkerStatus enum: QUEUED, RUNNING, COMPLETE, ERROR,
#   CANCEL_REQUESTED, CANCEL_ACKNOWLEDGED, NEW_SCRIPT) and `.failure_message`.
# * `kernels_output(ref, path, file_pattern=None, force=False, quiet=True, ...)` writes each output file
#   at `<path>/<its name relative to /kaggle/working>` (`file_pattern` is a regex searched in that name)
#   plus `<path>/<slug>.log`, and returns (files, next_page_token). Both kernel calls turn a 401/403
#   into a ValueError "Cannot access kernel ... (Permission 'kernels.get' was denied) ...".

CONFIG_NAME_USER = "username"  # KaggleApi.CONFIG_NAME_USER


def configured_username(env: Mapping[str, str] | None = None, home: Path | None = None) -> str:
    """The Kaggle user name known without importing kaggle: KAGGLE_USERNAME, else kaggle.json's; or ""."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    return str(env.get("KAGGLE_USERNAME") or _kaggle_json(env, home).get("username") or "")


def authenticated_username(api: KaggleApi) -> str:
    """The user name the API authenticated as ("" when the credentials do not carry one)."""
    try:
        return str(api.get_config_value(CONFIG_NAME_USER) or "")
    except Exception:  # get_config_value only reads a dict, but a stranger api object may differ
        return ""


def _kernel_access(exc: BaseException, what: str) -> KaggleError:
    """kernels_status / kernels_output / kernels_logs replace a 401 or 403 by a ValueError that blames the slug.

    The ValueError is raised inside `except HTTPError`, so its __context__ still holds the real status.
    """
    if isinstance(exc, ValueError) and "was denied" in str(exc):
        status = _status(exc.__context__) if exc.__context__ is not None else None
        if status == 401:
            return explain(exc.__context__, what)  # credentials rejected: the slug is not the problem
        return KaggleError(
            f"{what}: access denied (403): no such kernel visible to this account; check kaggle.user / "
            "kaggle.kernel_slug, and that it was pushed with the credentials in use"
        )
    return explain(exc, what)


def dataset_exists(ref: str, api: KaggleApi) -> bool:
    """Whether dataset `ref` (owner/slug) exists for this account; 404 means no, other failures raise."""
    try:
        api.dataset_status(ref)
    except Exception as exc:
        if _status(exc) == 404:
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
            if _status(exc) != 404 or waited >= grace_s:
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


def upload_dataset(folder: Path, ref: str, notes: str, api: KaggleApi) -> tuple[str, str]:
    """Create dataset `ref` from `folder` the first time, else add a new version. Returns (action, url).

    Subfolders are uploaded zipped (dir_mode="zip"); Kaggle unpacks them on its side.
    """
    what = f"dataset {ref}"
    exists = dataset_exists(ref, api)
    error = _send_dataset(folder, notes, api, exists, what)
    if error and "already in use" in error and not exists:
        exists = True  # created meanwhile (create_new answers so instead of raising): add a version
        error = _send_dataset(folder, notes, api, exists, what)
    if error:
        if "already in use" in error or "409" in error:
            raise KaggleError(f"{what}: conflict (409): {_clean(error)}")
        raise KaggleError(f"{what}: upload refused: {_clean(error)}")
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
            raise KaggleError(f"dataset {ref}: {_clean(error)}")
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
        if exists and _status(exc) == 403:
            raise _version_refused(exc, what, api) from exc
        raise explain(exc, what) from exc
    if result is None:
        return "the upload returned nothing (see the output above)"
    status, error = str(getattr(result, "status", "") or ""), str(getattr(result, "error", "") or "")
    if status.lower() == "ok" and not error:
        return ""
    return error or f"status {status or 'unknown'}"


def push_kernel(folder: Path, ref: str, api: KaggleApi, timeout_s: int = 0) -> tuple[str, int | None]:
    """Push the kernel folder (kernel-metadata.json + code file) and start a run. Returns (url, version)."""
    what = f"kernel {ref}"
    try:
        result = api.kernels_push(str(folder), timeout=str(timeout_s) if timeout_s else None)
    except Exception as exc:
        raise explain(exc, what) from exc
    if result is None:
        raise KaggleError(f"{what}: the push returned nothing (see the output above)")
    error = str(getattr(result, "error", "") or "")
    if error:
        hint = " (another version may still be saving: wait for it, then push again)" if "409" in error else ""
        raise KaggleError(f"{what}: push refused: {_clean(error)}{hint}")
    invalid = []
    for kind in ("dataset", "competition", "kernel", "model"):
        bad = list(getattr(result, f"invalid_{kind}_sources", None) or [])
        if bad:
            invalid.append(f"{kind} sources {', '.join(map(str, bad))}")
    if invalid:
        raise KaggleError(
            f"{what}: pushed, but Kaggle could not attach {'; '.join(invalid)} "
            "(check the names, that the competition's rules are accepted and that you can see the datasets)"
        )
    url = str(getattr(result, "url", "") or f"https://www.kaggle.com/code/{ref}")
    version = getattr(result, "version_number", None)
    return url, version if isinstance(version, int) else None


def kernel_status(ref: str, api: KaggleApi) -> tuple[str, str]:
    """(status, failure message) of the kernel's latest run; status is lower case: complete, running, ..."""
    try:
        result = api.kernels_status(ref)
    except Exception as exc:
        raise _kernel_access(exc, f"kernel {ref}") from exc
    status = getattr(result, "status", "")
    name = getattr(status, "name", status)  # a KernelWorkerStatus enum in kagglesdk
    return str(name).lower(), str(getattr(result, "failure_message", "") or "")


def download_kernel_output(ref: str, dest: Path, api: KaggleApi, file_pattern: str | None = None) -> list[Path]:
    """Download the kernel's output files (those matching `file_pattern`) and log into `dest`.

    `dest` is kept between calls and force=False: kaggle skips a file already there with the same size
    and date, so fetching again after an interrupted download only gets what is missing.
    """
    what = f"kernel {ref}"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        api.kernels_output(ref, str(dest), file_pattern=file_pattern, force=False, quiet=True)
    except Exception as exc:
        raise _kernel_access(exc, what) from exc
    files = _files(dest)
    if not [p for p in files if p.suffix != ".log"]:
        raise KaggleError(f"{what}: the kernel has no output (has it run to the end?)")
    return files


def kernel_log(ref: str, api: KaggleApi) -> str:
    """The log of the kernel's latest session, as Kaggle stores it ("" when there is none yet)."""
    try:
        return str(api.kernels_logs(ref) or "")
    except Exception as exc:
        raise _kernel_access(exc, f"kernel {ref}") from exc


# ---------------------------------------------------------------------------------------------
# Submissions (`make submit`)
#
# kaggle 2.2.5: `competition_submit(file_name, message, competition, quiet=False, sandbox=False)` uploads
# and returns an ApiCreateSubmissionResponse (`ref`, `message`; ref 0 and message "Could not submit to
# competition" when the upload failed). `get_submission(submission_ref)` returns an ApiSubmission:
# `status` (SubmissionStatus PENDING / COMPLETE / ERROR), `public_score`, `private_score` (strings,
# "" until published), `error_description`. Right after submitting, get_submission may answer 404.

LIMIT_WORDS = ("limit", "maximum number", "too many")


def submit(competition: str, path: Path, message: str, api: KaggleApi) -> int:
    """Submit `path` to `competition`; return the submission's ref."""
    what = f"competition {competition}"
    try:
        result = api.competition_submit(str(path), message, competition, quiet=True)
    except Exception as exc:
        raise _submit_refused(exc, what) from exc
    ref = getattr(result, "ref", 0)
    if not ref:
        said = _clean(str(getattr(result, "message", "") or "no answer"))
        if any(w in said.lower() for w in LIMIT_WORDS):
            raise KaggleError(f"{what}: daily submission limit reached ({said}); submit again tomorrow (UTC)")
        raise KaggleError(f"{what}: the submission was not accepted: {said}")
    return int(ref)


def _submit_refused(exc: BaseException, what: str) -> KaggleError:
    text = str(exc) + " " + str(getattr(getattr(exc, "response", None), "text", "") or "")
    if _status(exc) in (400, 429) and any(w in text.lower() for w in LIMIT_WORDS):
        return KaggleError(f"{what}: daily submission limit reached; submit again tomorrow (UTC)")
    return explain(exc, what)  # 403: the competition's rules are not accepted


def submission_state(ref: int, api: KaggleApi) -> dict:
    """{"status": pending | complete | error, "public": str, "private": str, "error": str} of submission `ref`."""
    try:
        sub = api.get_submission(ref)
    except Exception as exc:
        if _status(exc) == 404:  # not readable yet, right after submitting
            return {"status": "pending", "public": "", "private": "", "error": ""}
        raise explain(exc, f"submission {ref}") from exc
    status = getattr(sub, "status", "")
    return {
        "status": str(getattr(status, "name", status) or "pending").lower(),
        "public": str(getattr(sub, "public_score", "") or ""),
        "private": str(getattr(sub, "private_score", "") or ""),
        "error": str(getattr(sub, "error_description", "") or ""),
    }
