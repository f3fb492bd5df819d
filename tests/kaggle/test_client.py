"""Tests for pipeline.kaggle.client, the seam to Kaggle: credentials, the API object, and Kaggle's errors in
plain words (told through a download, the first call a user makes). No test ever reaches the network.

Most tests use `FakeKaggleApi` (tests/helpers/fake_kaggle.py); the few that exercise the real kaggle 2.2.5
package run it in a subprocess with a temporary HOME (importing kaggle authenticates and creates a config
folder) and with `requests.Session.send` replaced, so that the errors are the ones the real library raises.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
from pathlib import Path

import pytest
import requests

from pipeline.kaggle import bundle, client, downloads
from pipeline.kaggle.client import KaggleError
from pipeline.kaggle.plan import KernelError
from tests.helpers.fake_kaggle import SENTINEL, FakeKaggleApi, http_error, run_python

pytestmark = pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)

COMPETITION = "jigsaw-multilingual-toxic-comment-classification"


# ---------------------------------------------------------------------------------------------
# Helpers


def sdk_json_error(status: int, message: str) -> requests.HTTPError:
    """An HTTPError as kagglesdk raises it for a JSON error body: HTTPError(resp["message"], response=...)."""
    response = requests.Response()
    response.status_code = status
    response.headers["Content-Type"] = "application/json"
    response._content = json.dumps({"code": status, "message": message}).encode()
    return requests.HTTPError(message, response=response)


# ---------------------------------------------------------------------------------------------
# The seam itself


def test_import_does_not_import_kaggle(tmp_path: Path) -> None:
    seam = "client, downloads, datasets, kernels, submissions"
    result = run_python(f"import sys; from pipeline.kaggle import {seam}; print('kaggle' in sys.modules)", tmp_path)
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
                                       "get_submission", "kernels_list")}))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    real = json.loads(result.stdout.strip().splitlines()[-1])
    for name, params in real.items():
        assert ["self", *inspect.signature(getattr(FakeKaggleApi(), name)).parameters] == params


# ---------------------------------------------------------------------------------------------
# Error messages


def download_error(tmp_path: Path, error: BaseException) -> str:
    with pytest.raises(KaggleError) as info:
        downloads.download_competition(COMPETITION, tmp_path / "d", api=FakeKaggleApi(error=error))
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
        downloads.download_dataset("someone/private", tmp_path / "d", api=FakeKaggleApi(error=http_error(403)))
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
        assert client.credentials_hint() in message


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
        message = str(client.explain(exc, f"kernel me/{COMPETITION}"))
        assert SENTINEL not in message and "\n" not in message


def test_oauth_tokens_are_scrubbed(no_kaggle_env: Path, tmp_path: Path) -> None:
    """Credentials from `kaggle auth login` alone: its tokens are known secrets, scrubbed from a message and refused in
    the code bundle."""
    refresh, access = "REFRESH-" + SENTINEL, "ACCESS-" + SENTINEL[::-1]
    (no_kaggle_env / ".kaggle").mkdir()
    (no_kaggle_env / ".kaggle" / "credentials.json").write_text(
        json.dumps({"refresh_token": refresh, "access_token": access, "username": "tester", "scopes": []})
    )
    assert client.has_credentials()
    message = str(client.explain(http_error(500, f"boom {refresh} and {access}"), "kernel tester/x"))
    assert refresh not in message and access not in message and "***" in message
    folder = tmp_path / "bundle"
    (folder / "pipeline").mkdir(parents=True)
    (folder / "pipeline" / "a.py").write_text(f"TOKEN = {access!r}\n")
    with pytest.raises(KernelError, match="contains a Kaggle credential"):
        bundle.check_bundle(folder)


# ---------------------------------------------------------------------------------------------
# Credentials


def test_has_credentials_none(no_kaggle_env: Path) -> None:
    assert not client.has_credentials()
    assert not client.has_credentials(env={}, home=no_kaggle_env)


def test_has_credentials_api_token_env(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_API_TOKEN", "KGAT_abc")
    assert client.has_credentials()


def test_has_credentials_access_token_file(no_kaggle_env: Path) -> None:
    (no_kaggle_env / ".kaggle").mkdir()
    token = no_kaggle_env / ".kaggle" / "access_token"
    token.write_text("  \n")
    assert not client.has_credentials()  # kagglesdk ignores an empty token file
    token.write_text("KGAT_abc\n")
    assert client.has_credentials()


def test_has_credentials_username_and_key_env(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_USERNAME", "me")
    assert not client.has_credentials()
    monkeypatch.setenv("KAGGLE_KEY", "0123456789abcdef")
    assert client.has_credentials()


def test_has_credentials_kaggle_json(no_kaggle_env: Path) -> None:
    (no_kaggle_env / ".kaggle").mkdir()
    (no_kaggle_env / ".kaggle" / "kaggle.json").write_text('{"username": "me", "key": "0123456789abcdef"}')
    assert client.has_credentials()


def test_has_credentials_kaggle_json_other_places(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    creds = '{"username": "me", "key": "0123456789abcdef"}'
    xdg = no_kaggle_env / ".config" / "kaggle"  # used by kaggle on Linux when ~/.kaggle is absent
    xdg.mkdir(parents=True)
    (xdg / "kaggle.json").write_text(creds)
    assert client.has_credentials() == sys.platform.startswith("linux")

    other = no_kaggle_env / "elsewhere"
    other.mkdir()
    (other / "kaggle.json").write_text(creds)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(other))
    (xdg / "kaggle.json").unlink()
    assert client.has_credentials()


def test_has_credentials_rejects_broken_kaggle_json(no_kaggle_env: Path) -> None:
    (no_kaggle_env / ".kaggle").mkdir()
    (no_kaggle_env / ".kaggle" / "kaggle.json").write_text('{"username": "me"')
    assert not client.has_credentials()


def test_credentials_hint_lists_the_four_ways() -> None:
    hint = client.credentials_hint()
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
        client.get_api()
    assert client.credentials_hint() in str(info.value)
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
        client.get_api()
    message = str(info.value)
    assert SENTINEL not in message
    assert "\n" not in message
    if isinstance(failure, (SystemExit, requests.HTTPError)):
        assert client.credentials_hint() in message


def test_get_api_without_kaggle_package(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_API_TOKEN", SENTINEL)
    monkeypatch.setitem(sys.modules, "kaggle.api.kaggle_api_extended", None)
    with pytest.raises(KaggleError, match="pip install -r requirements.txt") as info:
        client.get_api()
    assert SENTINEL not in str(info.value)


# ---------------------------------------------------------------------------------------------
# Against the real kaggle 2.2.5, offline: requests.Session.send is replaced in a subprocess.

REAL_SCRIPT = """
    import json, sys
    from pathlib import Path
    import requests
    from pipeline.kaggle import client, downloads

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
        downloads.download_competition(competition, dest, api=client.get_api())
    except client.KaggleError as exc:
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
        client.get_api()
    assert SENTINEL not in str(info.value) and "\n" not in str(info.value)


def test_complete_credentials_have_no_problems(no_kaggle_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAGGLE_USERNAME", "me")
    monkeypatch.setenv("KAGGLE_KEY", SENTINEL)
    assert client.credential_problems() == []
    (no_kaggle_env / ".kaggle").mkdir(exist_ok=True)
    (no_kaggle_env / ".kaggle" / "kaggle.json").write_text('{"username": "me"}')  # key from the environment
    assert client.credential_problems() == []


def test_printable_writes_control_characters_out_and_keeps_the_rest() -> None:
    """A kernel's log or Kaggle's message reaches the terminal with no escape sequence it would obey: OSC 52 (ESC ]
    52; ... BEL) sets the clipboard in many terminals; tab, newline and text in any script stay as they are."""
    osc52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
    assert client.printable(f"step 1{osc52}\tdone\n") == "step 1\\x1b]52;c;ZWNobyBwd25lZA==\\x07\tdone\n"
    assert client.printable("\x9b2J\r\x00\x7f") == "\\x9b2J\\x0d\\x00\\x7f"  # C1's CSI, carriage return, NUL, DEL
    assert client.printable("toxicité, токсичность ✓") == "toxicité, токсичность ✓"
    assert "\x1b" not in client.clean(f"refused {osc52}")
