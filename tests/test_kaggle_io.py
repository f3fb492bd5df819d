"""Tests for pipeline.kaggle_io, the seam to Kaggle. No test ever reaches the network.

Most tests use `FakeKaggleApi`; the few that exercise the real kaggle 2.2.5 package run it in a
subprocess with a temporary HOME (importing kaggle authenticates and creates a config folder) and with
`requests.Session.send` replaced, so that the errors are the ones the real library raises.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path

import pytest
import requests

from pipeline import kaggle_api, kaggle_io
from pipeline.kaggle_io import KaggleError

REPO = Path(__file__).resolve().parents[1]
COMPETITION = "jigsaw-multilingual-toxic-comment-classification"
SENTINEL = "SENTINEL-SECRET-7f3a9c1e"

VALIDATION = "id,comment_text,lang,toxic\n0,Este usuario ni siquiera llega,es,0\n1,Il testo e ok,it,0\n"
TEST = "id,content,lang\n0,Doctor Who adlı viki başlığına,tr\n1,Вполне возможно,ru\n"
NESTED = "a,b\n1,2\n"


# ---------------------------------------------------------------------------------------------
# Helpers


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


def sdk_json_error(status: int, message: str) -> requests.HTTPError:
    """An HTTPError as kagglesdk raises it for a JSON error body: HTTPError(resp["message"], response=...)."""
    response = requests.Response()
    response.status_code = status
    response.headers["Content-Type"] = "application/json"
    response._content = json.dumps({"code": status, "message": message}).encode()
    return requests.HTTPError(message, response=response)


class FakeKaggleApi:
    """Records calls; serves `archive` where the real KaggleApi writes its download.

    Method names and signatures copy kaggle 2.2.5 (checked by test_fake_matches_real_signatures).
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

    def get_config_value(self, name: str):
        return self.username if name == "username" else None

    def dataset_status(self, dataset: str, format=None):
        self._record("dataset_status", dataset=dataset)
        if dataset not in self.datasets:
            raise http_error(404, "Not Found")
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

    def kernels_status(self, kernel):
        self._record("kernels_status", kernel=kernel)
        return types.SimpleNamespace(
            status=types.SimpleNamespace(name=self.kernel_state), failure_message=self.failure_message
        )

    def kernels_output(self, kernel, path, file_pattern=None, force=False, quiet=True, page_token=None, page_size=20):
        import re

        self._record("kernels_output", kernel=kernel, path=path, file_pattern=file_pattern, force=force)
        files = []
        for name, data in self.outputs.items():
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
        log = Path(path, kernel.split("/")[1] + ".log")
        log.write_text("[]")
        return [*files, str(log)], None

    def kernels_logs(self, kernel):
        self._record("kernels_logs", kernel=kernel)
        return self.log

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


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name]


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


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    (tmp_path / "served").mkdir()
    return build_zip(tmp_path / "served" / "bundle.zip")


# ---------------------------------------------------------------------------------------------
# The seam itself


def test_import_does_not_import_kaggle(tmp_path: Path) -> None:
    result = run_python("import pipeline.kaggle_io, sys; print('kaggle' in sys.modules)", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
    assert not (tmp_path / ".config").exists()  # kaggle's import-time side effect did not happen


def test_fake_matches_real_signatures(tmp_path: Path) -> None:
    result = run_python(
        """
        import inspect, json
        from kaggle.api.kaggle_api_extended import KaggleApi
        print(json.dumps({name: list(inspect.signature(getattr(KaggleApi, name)).parameters)
                          for name in ("competition_download_files", "dataset_download_files",
                                       "dataset_status", "dataset_create_new", "dataset_create_version",
                                       "kernels_push", "kernels_status", "kernels_output",
                                       "get_config_value", "kernels_logs", "dataset_list_files",
                                       "competition_download_file", "competition_submit",
                                       "get_submission")}))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    real = json.loads(result.stdout.strip().splitlines()[-1])
    for name, params in real.items():
        assert ["self", *inspect.signature(getattr(FakeKaggleApi(), name)).parameters] == params


# ---------------------------------------------------------------------------------------------
# Downloads


def test_download_competition_extracts_everything(tmp_path: Path, archive: Path) -> None:
    api = FakeKaggleApi(archive)
    dest = tmp_path / "input" / "jigsaw"
    files = kaggle_io.download_competition(COMPETITION, dest, api=api)

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
    files = kaggle_io.download_dataset("someone/jigsaw-translated", dest, api=api)

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
    files = kaggle_io.download_competition(COMPETITION, dest, api=FakeKaggleApi(archive))

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

    files = kaggle_io.download_competition(COMPETITION, dest, api=FakeKaggleApi(served))
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
    files = kaggle_io.download_competition(COMPETITION, dest, api=FakeKaggleApi(archive))
    assert len(files) == 3


def test_corrupt_zip_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    dest = tmp_path / "input" / "jigsaw"

    with pytest.raises(KaggleError, match=rf"{COMPETITION}\.zip") as info:
        kaggle_io.download_competition(COMPETITION, dest, api=FakeKaggleApi(bad))
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
        kaggle_io.download_competition(COMPETITION, dest, api=FakeKaggleApi(served))
    assert [p.name for p in dest.iterdir()] == ["validation.csv"]
    assert (dest / "validation.csv").read_text() == "mine\n"
    assert leftovers(tmp_path) == []


def test_api_error_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "jigsaw"
    with pytest.raises(KaggleError) as info:
        kaggle_io.download_competition(COMPETITION, dest, api=FakeKaggleApi(error=http_error(404, "Not Found")))
    assert isinstance(info.value.__cause__, requests.HTTPError)  # original kept for debugging
    assert not dest.exists()
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# Error messages


def download_error(tmp_path: Path, error: BaseException) -> str:
    with pytest.raises(KaggleError) as info:
        kaggle_io.download_competition(COMPETITION, tmp_path / "d", api=FakeKaggleApi(error=error))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "make",
    [
        lambda: http_error(403, "Forbidden"),
        lambda: sdk_json_error(403, "Permission 'competitions.get' was denied"),
    ],
)
def test_403_says_accept_rules(tmp_path: Path, make) -> None:
    message = download_error(tmp_path, make())
    assert "Accept the competition's rules" in message
    assert f"https://www.kaggle.com/competitions/{COMPETITION}/rules" in message
    assert "403" in message


def test_403_on_dataset_says_no_access(tmp_path: Path) -> None:
    with pytest.raises(KaggleError) as info:
        kaggle_io.download_dataset("someone/private", tmp_path / "d", api=FakeKaggleApi(error=http_error(403)))
    message = str(info.value)
    assert "dataset someone/private" in message and "access denied (403)" in message
    assert "rules" not in message


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, "(401)"),
        (404, "not found (404): check the name"),
        (409, "conflict (409): a version or slug already exists / is being processed"),
        (500, "500"),
    ],
)
def test_status_messages(tmp_path: Path, status: int, expected: str) -> None:
    message = download_error(tmp_path, http_error(status, "Whatever"))
    assert expected in message
    assert f"competition {COMPETITION}" in message
    if status == 401:
        assert kaggle_io.credentials_hint() in message


def test_network_error_message(tmp_path: Path) -> None:
    for error in (
        requests.ConnectionError("Max retries exceeded"),
        requests.Timeout("read timed out"),
        ConnectionError("reset"),
    ):
        assert "cannot reach Kaggle: check your internet connection" in download_error(tmp_path, error)


def test_explain_never_leaks_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_KEY", SENTINEL)
    for exc in (http_error(500, f"boom {SENTINEL}"), ValueError(f"odd key {SENTINEL}\nsecond line")):
        message = str(kaggle_io.explain(exc, f"kernel me/{COMPETITION}"))
        assert SENTINEL not in message and "\n" not in message


# ---------------------------------------------------------------------------------------------
# Credentials


def test_has_credentials_none(no_kaggle_env: Path) -> None:
    assert not kaggle_io.has_credentials()
    assert not kaggle_io.has_credentials(env={}, home=no_kaggle_env)


def test_has_credentials_api_token_env(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_API_TOKEN", "KGAT_abc")
    assert kaggle_io.has_credentials()


def test_has_credentials_access_token_file(no_kaggle_env: Path) -> None:
    (no_kaggle_env / ".kaggle").mkdir()
    token = no_kaggle_env / ".kaggle" / "access_token"
    token.write_text("  \n")
    assert not kaggle_io.has_credentials()  # kagglesdk ignores an empty token file
    token.write_text("KGAT_abc\n")
    assert kaggle_io.has_credentials()


def test_has_credentials_username_and_key_env(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_USERNAME", "me")
    assert not kaggle_io.has_credentials()
    monkeypatch.setenv("KAGGLE_KEY", "0123456789abcdef")
    assert kaggle_io.has_credentials()


def test_has_credentials_kaggle_json(no_kaggle_env: Path) -> None:
    (no_kaggle_env / ".kaggle").mkdir()
    (no_kaggle_env / ".kaggle" / "kaggle.json").write_text('{"username": "me", "key": "0123456789abcdef"}')
    assert kaggle_io.has_credentials()


def test_has_credentials_kaggle_json_other_places(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = '{"username": "me", "key": "0123456789abcdef"}'
    xdg = no_kaggle_env / ".config" / "kaggle"  # used by kaggle on Linux when ~/.kaggle is absent
    xdg.mkdir(parents=True)
    (xdg / "kaggle.json").write_text(creds)
    assert kaggle_io.has_credentials() == sys.platform.startswith("linux")

    other = no_kaggle_env / "elsewhere"
    other.mkdir()
    (other / "kaggle.json").write_text(creds)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(other))
    (xdg / "kaggle.json").unlink()
    assert kaggle_io.has_credentials()


def test_has_credentials_rejects_broken_kaggle_json(no_kaggle_env: Path) -> None:
    (no_kaggle_env / ".kaggle").mkdir()
    (no_kaggle_env / ".kaggle" / "kaggle.json").write_text('{"username": "me"')
    assert not kaggle_io.has_credentials()


def test_credentials_hint_lists_the_four_ways() -> None:
    hint = kaggle_io.credentials_hint()
    for part in (
        "KAGGLE_API_TOKEN",
        "~/.kaggle/access_token",
        "KAGGLE_USERNAME",
        "KAGGLE_KEY",
        "~/.kaggle/kaggle.json",
        "https://www.kaggle.com/settings",
        "API",
    ):
        assert part in hint
    assert "\n" not in hint


def test_get_api_without_credentials(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # If get_api tried to import kaggle, this import would fail and give another message.
    monkeypatch.setitem(sys.modules, "kaggle.api.kaggle_api_extended", None)
    with pytest.raises(KaggleError) as info:
        kaggle_io.get_api()
    assert kaggle_io.credentials_hint() in str(info.value)
    assert "No Kaggle credentials found" in str(info.value)


def fake_kaggle_module(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    class BrokenKaggleApi:
        def authenticate(self) -> None:
            raise failure

    module = types.ModuleType("kaggle.api.kaggle_api_extended")
    module.KaggleApi = BrokenKaggleApi  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kaggle.api.kaggle_api_extended", module)


@pytest.mark.parametrize(
    "failure",
    [
        SystemExit(1),
        ValueError(f"bad key {SENTINEL}"),
        OSError(f"cannot read {SENTINEL}"),
        http_error(401, f"Unauthorized {SENTINEL}"),
    ],
)
def test_get_api_auth_failure_hides_secret(
    no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    monkeypatch.setenv("KAGGLE_USERNAME", "me")
    monkeypatch.setenv("KAGGLE_KEY", SENTINEL)
    fake_kaggle_module(monkeypatch, failure)
    with pytest.raises(KaggleError) as info:
        kaggle_io.get_api()
    message = str(info.value)
    assert SENTINEL not in message
    assert "\n" not in message
    if isinstance(failure, (SystemExit, requests.HTTPError)):
        assert kaggle_io.credentials_hint() in message


def test_get_api_without_kaggle_package(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_API_TOKEN", SENTINEL)
    monkeypatch.setitem(sys.modules, "kaggle.api.kaggle_api_extended", None)
    with pytest.raises(KaggleError, match="pip install -r requirements.txt") as info:
        kaggle_io.get_api()
    assert SENTINEL not in str(info.value)


# ---------------------------------------------------------------------------------------------
# Against the real kaggle 2.2.5, offline: requests.Session.send is replaced in a subprocess.

REAL_SCRIPT = """
    import json, sys
    from pathlib import Path
    import requests
    from pipeline import kaggle_api, kaggle_io

    mode, dest, competition = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    def send(self, request, **kwargs):
        if mode == "offline":
            raise requests.ConnectionError("Failed to establish a new connection")
        response = requests.Response()
        response.status_code = int(mode)
        response.url = request.url
        response.headers["Content-Type"] = "application/json"
        response._content = json.dumps({"code": int(mode), "message": "denied"}).encode()
        response.request = request
        return response

    requests.Session.send = send
    try:
        kaggle_io.download_competition(competition, dest, api=kaggle_io.get_api())
    except kaggle_io.KaggleError as exc:
        print("KaggleError:", exc)
    tmp = [p.name for p in dest.parent.iterdir() if ".tmp-" in p.name] if dest.parent.exists() else []
    print("dest exists:", dest.exists(), "leftovers:", tmp)
"""


@pytest.mark.parametrize(
    ("mode", "env", "expected"),
    [
        ("403", {"KAGGLE_USERNAME": "me", "KAGGLE_KEY": SENTINEL}, "Accept the competition's rules"),
        ("401", {"KAGGLE_USERNAME": "me", "KAGGLE_KEY": SENTINEL}, "rejected the credentials (401)"),
        ("404", {"KAGGLE_USERNAME": "me", "KAGGLE_KEY": SENTINEL}, "not found (404)"),
        ("offline", {"KAGGLE_USERNAME": "me", "KAGGLE_KEY": SENTINEL}, "cannot reach Kaggle"),
        # A token is checked online at authenticate(); Kaggle answering 403 makes it invalid, and with
        # nothing else to try the library calls exit(1).
        ("403", {"KAGGLE_API_TOKEN": SENTINEL}, "did not accept the credentials"),
        ("offline", {"KAGGLE_API_TOKEN": SENTINEL}, "Kaggle authentication: cannot reach Kaggle"),
    ],
)
def test_real_library_errors(tmp_path: Path, mode: str, env: dict[str, str], expected: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = run_python(REAL_SCRIPT, home, mode, str(tmp_path / "input" / "jigsaw"), COMPETITION, **env)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("KaggleError:", "dest exists:"))]
    assert len(lines) == 2, result.stdout
    assert expected in lines[0]
    assert lines[1] == "dest exists: False leftovers: []"
    assert SENTINEL not in result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# Kernel and dataset errors mapped to what happened (kaggle 2.2.5 hides some of them)

REAL_KERNEL_SCRIPT = """
    import json, sys
    import requests
    from pipeline import kaggle_api, kaggle_io

    status, call = int(sys.argv[1]), sys.argv[2]

    def send(self, request, **kwargs):
        response = requests.Response()
        response.status_code = status
        response.url = request.url
        response.headers["Content-Type"] = "application/json"
        response._content = json.dumps({"code": status, "message": "denied"}).encode()
        response.request = request
        return response

    requests.Session.send = send
    api = kaggle_io.get_api()
    try:
        if call == "status":
            kaggle_api.kernel_status("me/jigsaw-sample", api)
        elif call == "logs":
            kaggle_api.kernel_log("me/jigsaw-sample", api)
        else:
            kaggle_api.download_kernel_output("me/jigsaw-sample", sys.argv[3], api)
    except kaggle_io.KaggleError as exc:
        print("KaggleError:", exc)
"""


@pytest.mark.parametrize("call", ["status", "output", "logs"])
@pytest.mark.parametrize(
    ("status", "expected"),
    [(401, "rejected the credentials (401)"), (403, "access denied (403): no such kernel visible to this account")],
)
def test_real_library_kernel_errors(tmp_path: Path, call: str, status: int, expected: str) -> None:
    """kaggle 2.2.5 turns 401 and 403 into one ValueError blaming the slug; the real status is still told apart."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"KAGGLE_USERNAME": "me", "KAGGLE_KEY": SENTINEL}
    result = run_python(REAL_KERNEL_SCRIPT, home, str(status), call, str(tmp_path / "out"), **env)
    assert result.returncode == 0, result.stderr
    line = next((x for x in result.stdout.splitlines() if x.startswith("KaggleError:")), result.stdout)
    assert expected in line
    assert SENTINEL not in result.stdout + result.stderr


def test_new_version_while_the_last_one_processes(tmp_path: Path) -> None:
    """A dataset version uploaded while the previous one still processes answers 403: say that, not 'no access'."""
    (tmp_path / "dataset-metadata.json").write_text(json.dumps({"id": "tester/code"}))
    api = FakeKaggleApi()
    api.datasets.add("tester/code")
    api.fail["dataset_create_version"] = http_error(403, "Forbidden")
    api.dataset_states = ["ready", "pending"]  # exists (ready), then: the version in flight is pending
    with pytest.raises(KaggleError, match=r"previous version is still pending on Kaggle \(403 until it is ready\)"):
        kaggle_api.upload_dataset(tmp_path, "tester/code", "notes", api)
    api.dataset_states = ["ready", "ready"]  # nothing in flight: a real access problem
    with pytest.raises(KaggleError, match=r"access denied \(403\)"):
        kaggle_api.upload_dataset(tmp_path, "tester/code", "notes", api)


def test_deleted_dataset_is_final() -> None:
    api = FakeKaggleApi()
    api.datasets.add("tester/code")
    api.dataset_states = ["deleted"] * 5
    sleeps: list[float] = []
    with pytest.raises(KaggleError, match="was deleted on Kaggle.*kaggle.dataset_slug"):
        kaggle_api.wait_dataset_ready("tester/code", api, sleep=sleeps.append)
    assert sleeps == []  # no waiting out the timeout


def test_brief_404_after_creating_is_waited_out() -> None:
    api = FakeKaggleApi()  # the dataset is not visible yet: dataset_status answers 404
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            api.datasets.add("tester/code")  # visible now

    assert kaggle_api.wait_dataset_ready("tester/code", api, poll_s=10, sleep=sleep) == "ready"
    api = FakeKaggleApi()  # still 404 after the grace period: it is really not there
    with pytest.raises(KaggleError, match=r"not found \(404\)"):
        kaggle_api.wait_dataset_ready("tester/code", api, poll_s=10, sleep=lambda s: None, grace_s=30)


# ---------------------------------------------------------------------------------------------
# Broken credentials: say which one, never its value


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ({"kaggle.json": '{"username": "me", "key": '}, "kaggle.json is not a JSON object"),
        ({"kaggle.json": '["me", "k"]'}, "kaggle.json is not a JSON object"),
        ({"kaggle.json": '{"username": "me"}'}, "kaggle.json has no 'key'"),
        ({"KAGGLE_USERNAME": "me"}, "KAGGLE_USERNAME is set but KAGGLE_KEY is not"),
        ({"KAGGLE_KEY": SENTINEL}, "KAGGLE_KEY is set but KAGGLE_USERNAME is not"),
        ({"token file": ""}, "KAGGLE_API_TOKEN names a file that is empty"),
    ],
)
def test_broken_credentials_are_named(
    no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch, setup: dict, expected: str
) -> None:
    for name, value in setup.items():
        if name == "kaggle.json":
            (no_kaggle_env / ".kaggle").mkdir(exist_ok=True)
            (no_kaggle_env / ".kaggle" / "kaggle.json").write_text(value.replace("KEY", SENTINEL))
        elif name == "token file":
            (no_kaggle_env / "token").write_text(value)
            monkeypatch.setenv("KAGGLE_API_TOKEN", str(no_kaggle_env / "token"))
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(KaggleError, match=expected) as info:
        kaggle_io.get_api()
    assert SENTINEL not in str(info.value) and "\n" not in str(info.value)


def test_complete_credentials_have_no_problems(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_USERNAME", "me")
    monkeypatch.setenv("KAGGLE_KEY", SENTINEL)
    assert kaggle_io.credential_problems() == []
    (no_kaggle_env / ".kaggle").mkdir(exist_ok=True)
    (no_kaggle_env / ".kaggle" / "kaggle.json").write_text('{"username": "me"}')  # key from the environment
    assert kaggle_io.credential_problems() == []


# ---------------------------------------------------------------------------------------------
# Only the files the pipeline reads


def test_per_file_download_fetches_only_what_is_missing(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.competition_files = {"test.csv": b"id,content,lang\n", "validation.csv": b"id\n"}
    dest = tmp_path / "jigsaw"
    dest.mkdir()
    (dest / "validation.csv").write_bytes(b"already here")
    files = kaggle_io.download_competition(COMPETITION, dest, api=api, files=("test.csv", "validation.csv"))
    assert [c[1]["file_name"] for c in api.calls] == ["test.csv"]
    assert sorted(p.name for p in files) == ["test.csv", "validation.csv"]
    assert (dest / "validation.csv").read_bytes() == b"already here"
    assert not [c for c in api.calls if c[0] == "competition_download_files"]  # not the whole archive
