"""Kernels on Kaggle: a push that starts a run, its state and version, its output files and its log (`make kernel`,
`make kernel-status`, `make kernel-output`).

kaggle 2.2.5 facts used below (read from kaggle_api_extended.py):

* `kernels_push(folder, timeout=None, acc=None, no_run=False)` reads `<folder>/kernel-metadata.json`
  and returns an ApiSaveKernelResponse: `url`, `version_number`, `error`, `invalid_dataset_sources`,
  `invalid_competition_sources`, `invalid_kernel_sources`, `invalid_model_sources`.
* `kernels_status(ref)` returns `.status` (a KernelWorkerStatus enum: QUEUED, RUNNING, COMPLETE, ERROR,
  CANCEL_REQUESTED, CANCEL_ACKNOWLEDGED, NEW_SCRIPT) and `.failure_message`.
* `kernels_output(ref, path, file_pattern=None, force=False, quiet=True, ...)` writes each output file
  at `<path>/<its name relative to /kaggle/working>` (`file_pattern` is a regex searched in that name)
  plus `<path>/<slug>.log`, and returns (files, next_page_token). Both kernel calls turn a 401/403
  into a ValueError "Cannot access kernel ... (Permission 'kernels.get' was denied) ...".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.kaggle.client import KaggleError, authenticated_username, clean, explain, http_status, printable
from pipeline.kaggle.downloads import files_under

if TYPE_CHECKING:  # only for type checkers: importing kaggle at run time authenticates
    from pipeline.kaggle.client import KaggleApi


def access_status(exc: BaseException) -> int | None:
    """The HTTP status behind a kernel call's failure. kernels_status / kernels_output / kernels_logs replace a 401
    or 403 by a ValueError that blames the slug, raised inside `except HTTPError`: its __context__ still holds the
    real status (403 when it is gone)."""
    if isinstance(exc, ValueError) and "was denied" in str(exc):
        status = http_status(exc.__context__) if exc.__context__ is not None else None
        return 401 if status == 401 else 403
    return http_status(exc)


def _kernel_access(exc: BaseException, what: str) -> KaggleError:
    """A kernel call's failure in plain words; kaggle's 401/403 ValueError read for the status it stands for."""
    if isinstance(exc, ValueError) and "was denied" in str(exc):
        if access_status(exc) == 401:
            return explain(exc.__context__, what)  # credentials rejected: the slug is not the problem
        return KaggleError(
            f"{what}: access denied (403): no such kernel visible to this account; check kaggle.user / "
            "kaggle.kernel_slug, and that it was pushed with the credentials in use"
        )
    return explain(exc, what)


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
        raise KaggleError(f"{what}: push refused: {clean(error)}{hint}")
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
    return str(name).lower(), printable(str(getattr(result, "failure_message", "") or ""))  # printed as it is


def download_kernel_output(ref: str, dest: Path, api: KaggleApi, file_pattern: str | None = None) -> list[Path]:
    """Download the kernel's output files (those matching `file_pattern`) and log into `dest`; return the files the
    output holds now (what kaggle listed: `dest` may hold older files the output no longer has).

    `dest` is kept between calls and force=False: kaggle skips a file already there with the same size
    and date, so fetching again after an interrupted download only gets what is missing.
    """
    what = f"kernel {ref}"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        listed, _ = api.kernels_output(ref, str(dest), file_pattern=file_pattern, force=False, quiet=True)
    except Exception as exc:
        raise _kernel_access(exc, what) from exc
    files = sorted(inside(dest, listed or [], what))
    if not [p for p in files if p.suffix != ".log"]:
        raise KaggleError(f"{what}: the kernel has no output (has it run to the end?)")
    return files


def inside(dest: Path, listed, what: str) -> list[Path]:
    """The files kaggle listed for `dest`, each checked to lie under it: a name in another user's output such as
    `../x` or `/x` is refused in one line before anything reads it (kaggle 2.2.5 refuses `..` itself; this does
    not rest on it)."""
    root = dest.resolve()
    files = [Path(p) for p in listed]
    for path in files:
        # kaggle lists <dest>/<name> as written (relative to here); resolved, `a/../../x` and a link out count
        if not path.resolve().is_relative_to(root):
            raise KaggleError(
                f"{what}: the output lists {path}, outside {dest}: refused (an output file names a path "
                "that escapes the folder it is downloaded into)"
            )
    return files


def listed_kernel(ref: str, api: KaggleApi, mine: bool | None = None):
    """Kernel `ref` (owner/slug) as kernels_list shows it, searched by its slug among its owner's (the user's own
    list, private ones included, when `mine` or when the owner is the authenticated user); None when not there."""
    owner, _, slug = ref.partition("/")
    mine = owner == authenticated_username(api) if mine is None else mine
    try:
        found = api.kernels_list(search=slug, user=owner, mine=mine, page_size=100) or []
    except Exception as exc:
        raise _kernel_access(exc, f"kernel {ref}") from exc
    wanted = (ref.lower(), f"/code/{ref.lower()}")
    return next((k for k in found if str(getattr(k, "ref", "")).lower() in wanted), None)


def kernel_version(ref: str, api: KaggleApi) -> int | None:
    """The newest version number of kernel `ref` (owner/slug): kernels_list's current_version_number (kaggle 2.2.5
    has no call that lists a kernel's versions); None when the listing does not show it."""
    number = getattr(listed_kernel(ref, api), "current_version_number", None)
    return int(number) if isinstance(number, int) and number > 0 else None


def download_output_files(ref: str, dest: Path, pattern: str, api: KaggleApi) -> list[Path]:
    """The output files of kernel `ref` (owner/slug or owner/slug/version) whose names match `pattern`, into
    `dest` (none is fine: a version that failed early has no output); the log kaggle writes beside them is left
    out."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        listed, _ = api.kernels_output(ref, str(dest), file_pattern=pattern, force=True, quiet=True)
    except Exception as exc:
        if http_status(exc) == 404:  # no output (yet): nothing matches
            return []
        raise _kernel_access(exc, f"kernel {ref}") from exc
    inside(dest, listed or [], f"kernel {ref}")
    return [p for p in files_under(dest) if p.suffix != ".log"]


def can_stream_logs(api) -> bool:
    """Whether the library follows a running kernel's log as it is written (kaggle 2.2.5: kernels_logs_stream)."""
    return callable(getattr(api, "kernels_logs_stream", None))


STREAM_FAILURES = 5  # kaggle 2.2.5's own follow gives up after five dropped connections in a row without news
STREAM_RETRY_S = 1.0


def dropped_connection(exc: BaseException) -> bool:
    """A connection that broke mid-stream (the load balancer cuts idle ones): reconnecting helps."""
    import requests

    broken = (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)
    return isinstance(exc, broken) or type(exc).__name__ == "ProtocolError"  # urllib3's, unwrapped


def stream_events(ref: str, api: KaggleApi, sleep: Callable[[float], None] | None = None):
    """The log stream's events, reconnecting after a dropped connection as kaggle 2.2.5's follow does: the
    server replays the stream from its start, so the events already yielded are skipped by count."""
    import time

    sleep = time.sleep if sleep is None else sleep
    seen = failures = 0
    while True:
        before = seen
        try:
            for index, event in enumerate(api.kernels_logs_stream(ref)):
                if index >= seen:
                    seen = index + 1
                    yield event
            return
        except Exception as exc:
            if not dropped_connection(exc):
                raise _kernel_access(exc, f"kernel {ref}") from exc
            failures = 0 if seen > before else failures + 1
            if failures >= STREAM_FAILURES:
                raise KaggleError(
                    f"kernel {ref}: the log stream dropped {STREAM_FAILURES} times with nothing new; "
                    "run make kernel-status again"
                ) from exc
            sleep(STREAM_RETRY_S)


def kernel_log(ref: str, api: KaggleApi) -> str:
    """The log of the kernel's latest session, as Kaggle stores it ("" when there is none yet)."""
    try:
        return str(api.kernels_logs(ref) or "")
    except Exception as exc:
        raise _kernel_access(exc, f"kernel {ref}") from exc
