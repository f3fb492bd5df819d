"""A stand-in for kaggle's KaggleApi (no network), the errors requests raises, and a fresh interpreter with a
temporary HOME for the tests that run the real kaggle package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
SENTINEL = "SENTINEL-SECRET-7f3a9c1e"


def http_error(status: int, reason: str = "", url: str = "https://api.kaggle.com/v1/x") -> requests.HTTPError:
    """An HTTPError exactly as requests' raise_for_status() (used by kagglesdk) builds it."""
    response = requests.Response()
    response.status_code = status
    response.reason = reason
    response.url = url
    try:
        response.raise_for_status()
    except requests.HTTPError as exc:
        return exc
    raise AssertionError(f"status {status} did not raise")


def kernel_denied(kernel: str, status: int = 403) -> ValueError:
    """The ValueError kaggle 2.2.5's kernels_status raises for a 401 or 403 (inside `except HTTPError`: the HTTP
    error is its __context__)."""
    try:
        raise http_error(status, "Forbidden")
    except requests.HTTPError:
        try:
            raise ValueError(
                f"Cannot access kernel '{kernel}' (Permission 'kernels.get' was denied). "
                "The most likely cause is a wrong kernel slug."
            )  # noqa: B904 (as kaggle raises it: the HTTP error stays its __context__)
        except ValueError as exc:
            return exc
    raise AssertionError("unreachable")


class FakeKaggleApi:
    """Records calls; serves `archive` where the real KaggleApi writes its download.

    Method names and signatures copy kaggle 2.2.5 (checked by tests/kaggle/test_client.py's
    test_fake_matches_real_signatures).
    """

    def __init__(self, archive: Path | None = None, error: BaseException | None = None):
        self.archive = archive
        self.error = error
        self.calls: list[tuple[str, dict]] = []
        # uploads and kernels (see below): set these after construction
        self.username = "tester"  # what get_config_value("username") answers after authenticate()
        self.datasets: set[str] = set()  # dataset refs that exist
        self.dataset_states: list[str] = []  # statuses dataset_status serves in turn, then "ready"
        self.create_result: dict = {}  # overrides on the dataset create/version response
        self.push_result: dict = {}  # overrides on the kernels_push response
        self.kernel_state = "COMPLETE"  # a KernelWorkerStatus name
        self.failure_message = ""
        self.outputs: dict[str, bytes] = {}  # the kernel's output: name relative to /kaggle/working -> bytes
        self.fail: dict[str, BaseException] = {}  # method name -> exception it raises
        self.log = ""  # what kernels_logs answers
        self.dataset_listing: dict[str, list[str]] = {}  # dataset ref -> its file names
        self.competition_files: dict[str, bytes] = {}  # served by competition_download_file
        self.submit_result: dict = {"ref": 123, "message": ""}  # overrides on competition_submit's response
        self.submission_states: list[dict] = []  # get_submission answers these in turn, then the last again
        self.written: list[str] = []  # output files kernels_output (re)wrote, relative to its path
        self.dataset_version = 7  # dataset_status(format="json(current_version_number)") answers it
        # version queries after a new version that still answer the previous number; meanwhile dataset_status answers
        # for the previous version too: "ready" (dataset_states are the new version's, once its number shows)
        self.version_lag = 0
        self._lagging = 0
        self.log_events: list[dict] | None = None  # kernels_logs_stream yields these (None: as kernels_logs)
        # one list per connection of kernels_logs_stream, taken in turn (then log_events): its events, and an
        # exception where the connection drops
        self.log_connections: list[list] = []
        # earlier versions of the kernel: version -> {"state": ..., "failure": ..., "outputs": {...}}; the
        # unversioned kernel is the latest, kernel_state and outputs above
        self.kernel_versions: dict[int, dict] = {}
        self.current_version: int | None = None  # kernels_list's current_version_number (None: not listed)
        self.exists = True  # the kernel was pushed; else kernels_status answers missing_status, kernels_list nothing
        self.missing_status = 404  # what Kaggle answers for a kernel that does not exist: 404, or 403 (kernel_denied)

    def _serve(self, path: str | None, name: str) -> None:
        if self.error is not None:
            raise self.error
        assert path is not None and self.archive is not None
        Path(path).mkdir(parents=True, exist_ok=True)
        Path(path, name).write_bytes(self.archive.read_bytes())

    def competition_download_files(
        self,
        competition: str,
        path: str | None = None,
        force: bool = False,
        quiet: bool = True,
        unzip: bool = False,
    ) -> None:
        self.calls.append(
            (
                "competition_download_files",
                {"competition": competition, "path": path, "force": force, "quiet": quiet, "unzip": unzip},
            )
        )
        # Real: outfile = os.path.join(path, competition + "." + <extension of the served url>)
        self._serve(path, f"{competition}.zip")

    def dataset_download_files(
        self,
        dataset,
        path=None,
        force=False,
        quiet=True,
        unzip=False,
        licenses=[],  # noqa: B006 (as real)
    ):
        self.calls.append(
            (
                "dataset_download_files",
                {"dataset": dataset, "path": path, "force": force, "quiet": quiet, "unzip": unzip},
            )
        )
        # Real: outfile = os.path.join(path, dataset_slug + ".zip"), dataset being owner/slug[/version]
        self._serve(path, f"{dataset.split('/')[1]}.zip")

    # --- uploads and kernels (pipeline.kernel); configured by the attributes set in __init__

    def _record(self, name: str, **kwargs) -> None:
        self.calls.append((name, kwargs))
        failure = self.fail.get(name)
        if failure is not None:
            raise failure

    def add_bundle(self, ref: str) -> None:
        """Dataset `ref` exists and holds a code bundle, as an earlier `make kernel` uploaded it."""
        self.datasets.add(ref)
        self.dataset_listing[ref] = ["kernel-config.yaml", "pipeline/__init__.py"]

    def get_config_value(self, name: str):
        return self.username if name == "username" else None

    def dataset_status(self, dataset: str, format=None):
        self._record("dataset_status", dataset=dataset, format=format)
        if dataset not in self.datasets:
            raise http_error(404, "Not Found")
        if format is not None:  # Real: json of the projected fields, e.g. json(current_version_number)
            lagging, self._lagging = self._lagging > 0, max(0, self._lagging - 1)
            return json.dumps({"current_version_number": self.dataset_version - lagging})
        if self._lagging:  # the previous version's state
            return "ready"
        return self.dataset_states.pop(0) if self.dataset_states else "ready"

    def _uploaded(self, folder: str, dir_mode: str) -> list[str]:
        """What the real upload_files sends: top-level files, folders zipped only with dir_mode zip/tar."""
        sent = []
        for entry in sorted(Path(folder).iterdir()):
            if entry.name == "dataset-metadata.json":
                continue
            if entry.is_file():
                sent.append(entry.name)
            elif dir_mode in ("zip", "tar"):
                sent.append(f"{entry.name}.{dir_mode}")
        return sent

    def _create_response(self, ref: str):
        result = {"status": "ok", "error": None, "url": f"https://www.kaggle.com/datasets/{ref}", **self.create_result}
        return types.SimpleNamespace(invalidTags=[], **result)

    def dataset_create_new(
        self, folder, public=False, quiet=False, convert_to_csv=True, dir_mode="skip", ignore_patterns=None
    ):
        ref = json.loads(Path(folder, "dataset-metadata.json").read_text())["id"]
        self._record(
            "dataset_create_new", folder=folder, public=public, dir_mode=dir_mode, sent=self._uploaded(folder, dir_mode)
        )
        self.datasets.add(ref)
        # Real: the files as Kaggle lists them, a zipped folder unpacked
        self.dataset_listing[ref] = sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*")
                                           if p.is_file() and p.name != "dataset-metadata.json")  # fmt: skip
        return self._create_response(ref)

    def dataset_create_version(
        self,
        folder,
        version_notes,
        quiet=False,
        convert_to_csv=True,
        delete_old_versions=False,
        dir_mode="skip",
        ignore_patterns=None,
    ):
        ref = json.loads(Path(folder, "dataset-metadata.json").read_text())["id"]
        self.dataset_version += 1  # Real: a new version, numbered after the last
        self._lagging = self.version_lag
        self._record(
            "dataset_create_version",
            folder=folder,
            version_notes=version_notes,
            dir_mode=dir_mode,
            sent=self._uploaded(folder, dir_mode),
        )
        return self._create_response(ref)

    def kernels_push(self, folder, timeout=None, acc=None, no_run=False):
        meta = json.loads(Path(folder, "kernel-metadata.json").read_text())
        self._record("kernels_push", folder=folder, timeout=timeout, metadata=meta)
        result = {
            "ref": f"/code/{meta['id']}",
            "url": f"https://www.kaggle.com/code/{meta['id']}",
            "version_number": 1,
            "error": None,
            "invalid_dataset_sources": [],
            "invalid_competition_sources": [],
            "invalid_kernel_sources": [],
            "invalid_model_sources": [],
            **self.push_result,
        }
        return types.SimpleNamespace(**result)

    def _version(self, kernel: str) -> dict:
        """The state, failure and outputs of `kernel` (owner/slug[/version]): the latest unless a version is named."""
        parts = kernel.split("/")
        latest = {"state": self.kernel_state, "failure": self.failure_message, "outputs": self.outputs}
        if len(parts) == 3 and int(parts[2]) != self.current_version:
            if int(parts[2]) not in self.kernel_versions:
                raise http_error(404, "Not Found")
            return {**latest, "failure": "", "outputs": {}, **self.kernel_versions[int(parts[2])]}
        return latest

    def kernels_list(
        self,
        page=1,
        page_size=20,
        dataset=None,
        competition=None,
        parent_kernel=None,
        search=None,
        mine=False,
        user=None,
        language=None,
        kernel_type=None,
        output_type=None,
        sort_by=None,
    ):
        self._record("kernels_list", search=search, user=user, mine=mine)
        if self.current_version is None or not self.exists:
            return []
        return [types.SimpleNamespace(ref=f"{user}/{search}", current_version_number=self.current_version)]

    def kernels_status(self, kernel):
        self._record("kernels_status", kernel=kernel)
        if not self.exists:
            raise kernel_denied(kernel, 403) if self.missing_status == 403 else http_error(self.missing_status)
        version = self._version(kernel)
        return types.SimpleNamespace(
            status=types.SimpleNamespace(name=version["state"]), failure_message=version["failure"]
        )

    def kernels_output(self, kernel, path, file_pattern=None, force=False, quiet=True, page_token=None, page_size=20):
        import re

        self._record("kernels_output", kernel=kernel, path=path, file_pattern=file_pattern, force=force)
        files = []
        for name, data in self._version(kernel)["outputs"].items():
            if file_pattern is None or re.search(file_pattern, name):
                out = Path(path, name)
                files.append(str(out))
                # Real: download_needed() skips a file already there unless force, the remote one is larger
                # or newer; here an output that changed stands for a newer one
                if not force and out.is_file() and out.read_bytes() == data:
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
                self.written.append(name)
        Path(path).mkdir(parents=True, exist_ok=True)
        log = Path(path, kernel.split("/")[1] + ".log")
        log.write_text("[]")
        return [*files, str(log)], None

    def kernels_logs(self, kernel):
        self._record("kernels_logs", kernel=kernel)
        return self.log

    def kernels_logs_stream(self, kernel):
        """Real: {"data": ...} events as the session writes them (SSE), until it ends."""
        self._record("kernels_logs_stream", kernel=kernel)
        for event in self.log_connections.pop(0) if self.log_connections else self.log_events or []:
            if isinstance(event, BaseException):
                raise event  # the connection dropped
            yield event
        self.kernel_state = "COMPLETE"  # the stream ends with the session

    def dataset_list_files(self, dataset, page_token=None, page_size=20):
        self._record("dataset_list_files", dataset=dataset)
        files = [types.SimpleNamespace(name=n) for n in self.dataset_listing.get(dataset, [])]
        return types.SimpleNamespace(files=files, error_message="", next_page_token="")

    def competition_download_file(self, competition, file_name, path=None, force=False, quiet=False, unzip=False):
        self._record("competition_download_file", competition=competition, file_name=file_name, path=path)
        if self.error is not None:
            raise self.error
        Path(path).mkdir(parents=True, exist_ok=True)
        if file_name not in self.competition_files:  # else the member of the served archive
            with zipfile.ZipFile(self.archive) as zf:
                if file_name not in zf.namelist():
                    raise http_error(404, "Not Found")  # what the real data-file request answers
                self.competition_files[file_name] = zf.read(file_name)
        Path(path, file_name).write_bytes(self.competition_files[file_name])

    def competition_submit(self, file_name, message, competition, quiet=False, sandbox=False):
        self._record("competition_submit", file_name=file_name, message=message, competition=competition)
        return types.SimpleNamespace(**self.submit_result)

    def get_submission(self, submission_ref):
        self._record("get_submission", submission_ref=submission_ref)
        state = self.submission_states.pop(0) if len(self.submission_states) > 1 else self.submission_states[0]
        if isinstance(state, BaseException):
            raise state
        fields = {"public_score": "", "private_score": "", "error_description": "", **state}
        fields["status"] = types.SimpleNamespace(name=fields["status"])
        return types.SimpleNamespace(**fields)


def run_python(code: str, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter with HOME=`home`, no Kaggle variables but `env`, and `args`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_") and k != "XDG_CONFIG_HOME"}
    clean.update(HOME=str(home), PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        check=False,
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
