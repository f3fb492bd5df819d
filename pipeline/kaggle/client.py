"""The one module that imports the kaggle library: credentials, the authenticated API object, and API errors
in plain words. The calls themselves are made by the modules beside it, each with the `api` this one returns:
downloads (competition and dataset files), datasets (the code bundle's upload), kernels (push, state, output,
log) and submissions.

Nothing else in the pipeline imports `kaggle` (an import-linter contract in pyproject.toml), so that:

* `import kaggle` runs only when a Kaggle call is really made. The package authenticates (and may
  print help or hit the network) at import time, and creates its config folder as a side effect.
* every failure the user can fix reaches them as one `KaggleError` with a one-line message that says
  what to do, and never contains a secret.

Facts about kaggle 2.2.5 this module relies on (read from its source):

* `KaggleApi.authenticate()` tries, in order: an access token (`KAGGLE_API_TOKEN`, whose value may
  also be a path to a token file, then `~/.kaggle/access_token` or `access_token.txt`, which the SDK
  validates online), a legacy key (`username` + `key` from `<config dir>/kaggle.json`, overridden by
  `KAGGLE_USERNAME` / `KAGGLE_KEY`), OAuth (`~/.kaggle/credentials.json` from `kaggle auth login`).
  When all fail it prints help and calls `exit(1)`, i.e. raises `SystemExit`.
* The config dir is `$KAGGLE_CONFIG_DIR`, else `~/.kaggle`, else on Linux when that is missing
  `$XDG_CONFIG_HOME/kaggle` (default `~/.config/kaggle`). The token files are always under `~/.kaggle`.
* API failures are `requests.exceptions.HTTPError` whose `.response.status_code` holds the status
  (kagglesdk raises it from `raise_for_status()` or from a JSON body with `code >= 400`);
  network failures are `requests.exceptions.ConnectionError` / `Timeout`.

Each call, in whichever module, wraps the library's in
`except Exception as exc: raise explain(exc, "<kind> <ref>") from exc`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import PipelineError

if TYPE_CHECKING:  # only for type checkers: importing kaggle at run time authenticates
    from kaggle.api.kaggle_api_extended import KaggleApi

TOKEN_SETTINGS_URL = "https://www.kaggle.com/settings"


class KaggleError(PipelineError, RuntimeError):
    """A Kaggle failure the user can fix; the message (one line, no secrets) says how.

    A PipelineError too, so that `errors.run_stage` prints it as one line instead of a traceback.
    """


def credentials_hint() -> str:
    """Return the one-line message listing the ways to give Kaggle credentials."""
    return (
        "Give Kaggle credentials in one of four ways: set KAGGLE_API_TOKEN=<token>; "
        "or save the token to ~/.kaggle/access_token; "
        "or set KAGGLE_USERNAME and KAGGLE_KEY; "
        'or save {"username": ..., "key": ...} to ~/.kaggle/kaggle.json '
        "(the folder can be changed with KAGGLE_CONFIG_DIR). "
        f'Create a token at {TOKEN_SETTINGS_URL}, section "API".'
    )


# ---------------------------------------------------------------------------------------------
# Credentials


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _config_dir(env: Mapping[str, str], home: Path) -> Path:
    # Mirrors KaggleApi.config_dir (computed in the class body of kaggle_api_extended.py).
    if env.get("KAGGLE_CONFIG_DIR"):
        return Path(env["KAGGLE_CONFIG_DIR"])
    legacy = home / ".kaggle"
    if sys.platform.startswith("linux") and not legacy.exists():
        return Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "kaggle"
    return legacy


def kaggle_json(env: Mapping[str, str], home: Path) -> dict[str, Any]:
    text = _read_text(_config_dir(env, home) / "kaggle.json")
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _token_env(env: Mapping[str, str]) -> str:
    value = env.get("KAGGLE_API_TOKEN", "")
    # kagglesdk treats a KAGGLE_API_TOKEN that names an existing file as the path to the token.
    if value and Path(value).exists():
        return _read_text(Path(value))
    return value


def has_credentials(env: Mapping[str, str] | None = None, home: Path | None = None) -> bool:
    """Tell whether any Kaggle credentials are present, without importing kaggle or going online.

    `env` defaults to `os.environ` and `home` to `Path.home()`, both read at call time (a default of
    `Path.home()` in the signature would freeze the home of the moment the module was imported).
    Presence only: whether Kaggle accepts them is known at the first API call.
    """
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    if _token_env(env):
        return True
    kaggle_dir = home / ".kaggle"  # token files are looked up here whatever KAGGLE_CONFIG_DIR says
    if _read_text(kaggle_dir / "access_token") or _read_text(kaggle_dir / "access_token.txt"):
        return True
    # KaggleApi reads kaggle.json first, then lets every KAGGLE_* variable override its keys, so a
    # username in the file plus KAGGLE_KEY in the environment is a valid pair.
    config = kaggle_json(env, home)
    username = env.get("KAGGLE_USERNAME") or config.get("username")
    key = env.get("KAGGLE_KEY") or config.get("key")
    if username and key:
        return True
    # OAuth credentials saved by `kaggle auth login`; authenticate() accepts them too.
    oauth = _read_text(kaggle_dir / "credentials.json")
    try:
        return bool(oauth and json.loads(oauth).get("refresh_token"))
    except (json.JSONDecodeError, AttributeError):
        return False


def credential_problems(env: Mapping[str, str] | None = None, home: Path | None = None) -> list[str]:
    """Credentials that are there but cannot work, each as one line naming the variable or file (never a value)."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    problems = []
    path = _config_dir(env, home) / "kaggle.json"
    text = _read_text(path) if path.is_file() else ""
    if path.is_file():
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            problems.append(f'{path} is not a JSON object like {{"username": ..., "key": ...}}: fix or remove it')
        else:
            absent = [k for k in ("username", "key") if not data.get(k) and not env.get(f"KAGGLE_{k.upper()}")]
            if absent:
                problems.append(f"{path} has no {' and no '.join(map(repr, absent))}: fix or remove it")
    if env.get("KAGGLE_USERNAME") and not env.get("KAGGLE_KEY") and not (kaggle_json(env, home).get("key")):
        problems.append("KAGGLE_USERNAME is set but KAGGLE_KEY is not: set both, or use KAGGLE_API_TOKEN")
    if env.get("KAGGLE_KEY") and not env.get("KAGGLE_USERNAME") and not (kaggle_json(env, home).get("username")):
        problems.append("KAGGLE_KEY is set but KAGGLE_USERNAME is not: set both, or use KAGGLE_API_TOKEN")
    token = env.get("KAGGLE_API_TOKEN", "")
    if token and Path(token).exists() and not _token_env(env):
        problems.append("KAGGLE_API_TOKEN names a file that is empty or unreadable: fix the file or the variable")
    return problems


def oauth_tokens(home: Path) -> list[str]:
    """The tokens of `kaggle auth login`'s ~/.kaggle/credentials.json (kagglesdk's KaggleCredentials): the refresh
    token, which authenticate() accepts alone, and the access token it last got; [] without the file."""
    try:
        data = json.loads(_read_text(home / ".kaggle" / "credentials.json") or "{}")
    except json.JSONDecodeError:
        return []
    if not isinstance(data, dict):
        return []
    return [str(data.get(name) or "") for name in ("refresh_token", "access_token")]


def known_secrets() -> list[str]:
    """Secret values known to this process, so that messages can be scrubbed of them and the code bundle checked:
    every kind of credential has_credentials accepts."""
    home = Path.home()
    values = [
        os.environ.get("KAGGLE_KEY", ""),
        os.environ.get("KAGGLE_API_TOKEN", ""),
        _token_env(os.environ),
    ]
    values += [_read_text(home / ".kaggle" / name) for name in ("access_token", "access_token.txt")]
    values.append(str(kaggle_json(os.environ, home).get("key") or ""))
    values += oauth_tokens(home)  # OAuth alone: without them the scrubber would know no secret at all
    # Short values could match ordinary words; real keys and tokens are long.
    return sorted({v for v in values if len(v) >= 8}, key=len, reverse=True)


# C0 and C1 control characters but tab and newline, and DEL: ESC starts a terminal's escape sequences (OSC 52
# writes the clipboard, others retitle the window or hide text), \r overwrites the line a reader sees
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` that came from Kaggle (a kernel's log, a failure message) as a terminal may show it: each control
    character written out as `\\xNN`, so it is seen and never obeyed."""
    return CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def clean(text: str) -> str:
    """Make `text` safe for a KaggleError: one line, no secret values, no control characters."""
    for secret in known_secrets():
        text = text.replace(secret, "***")
    return printable(" ".join(text.split()))


def get_api() -> KaggleApi:
    """Return an authenticated `KaggleApi`, or raise `KaggleError` saying how to fix the setup."""
    problems = credential_problems()
    # kaggle's authenticate() reads kaggle.json even when a token is also given: a broken one is always fatal
    broken = [p for p in problems if "kaggle.json" in p] or (problems if not has_credentials() else [])
    if broken:
        raise KaggleError(f"Kaggle credentials: {broken[0]}")
    if not has_credentials():
        raise KaggleError(f"No Kaggle credentials found. {credentials_hint()}")
    try:
        # Lazy on purpose: `import kaggle` (which this import triggers) authenticates at import time.
        from kaggle.api.kaggle_api_extended import KaggleApi
    except ImportError as exc:
        raise KaggleError(
            f"Cannot import the kaggle package ({clean(f'{type(exc).__name__}: {exc}')}): "
            "run `pip install -r requirements.txt`."
        ) from exc
    except Exception as exc:  # e.g. OSError: the class body creates the config folder
        raise KaggleError(f"Cannot load the kaggle package ({clean(str(exc))}). {credentials_hint()}") from exc
    api = KaggleApi()
    try:
        api.authenticate()
    except SystemExit as exc:
        # authenticate() prints its own help and calls exit(1) when no credential works.
        raise KaggleError(f"Kaggle did not accept the credentials found. {credentials_hint()}") from exc
    except Exception as exc:
        # Token validation goes online: network and HTTP errors get the same words as API calls.
        raise explain(exc, "Kaggle authentication") from exc
    return api


# ---------------------------------------------------------------------------------------------
# Errors


def http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)  # requests.HTTPError; may be None (IAP token errors)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_network_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        import requests
    except ImportError:
        return False
    # requests' ConnectionError is not the builtin one; kaggle's retries re-raise these.
    return isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout))


def explain(exc: BaseException, what: str) -> KaggleError:
    """Turn an exception from a Kaggle API call into a `KaggleError` whose message says what to do.

    `what` names the target as "<kind> <ref>", e.g. "competition jigsaw-multilingual-toxic-comment-
    classification", "dataset owner/slug", "kernel owner/slug"; the kind picks the 403 advice.
    The caller raises the result `from exc`, which keeps the original traceback for debugging.
    """
    if isinstance(exc, KaggleError):
        return exc
    status = http_status(exc)
    kind, _, ref = what.partition(" ")
    if status == 401:
        return KaggleError(f"{what}: Kaggle rejected the credentials (401): wrong or expired. {credentials_hint()}")
    if status == 403:
        if kind == "competition":
            return KaggleError(
                f"{what}: access denied (403). Accept the competition's rules on its Kaggle page: "
                f"https://www.kaggle.com/competitions/{ref}/rules"
            )
        return KaggleError(
            f"{what}: access denied (403): your account lacks access to this {kind} (private, or owned by someone else)"
        )
    if status == 404:
        return KaggleError(f"{what}: not found (404): check the name")
    if status == 409:
        return KaggleError(f"{what}: conflict (409): a version or slug already exists / is being processed")
    if status is not None:
        return KaggleError(f"{what}: Kaggle answered {status}: {clean(str(exc))}")
    if is_network_error(exc):
        return KaggleError(f"{what}: cannot reach Kaggle: check your internet connection")
    return KaggleError(f"{what}: {type(exc).__name__}: {clean(str(exc))}")


# ---------------------------------------------------------------------------------------------
# The user name (the kernel's owner)

CONFIG_NAME_USER = "username"  # KaggleApi.CONFIG_NAME_USER


def configured_username(env: Mapping[str, str] | None = None, home: Path | None = None) -> str:
    """The Kaggle user name known without importing kaggle: KAGGLE_USERNAME, else kaggle.json's; or ""."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    return str(env.get("KAGGLE_USERNAME") or kaggle_json(env, home).get("username") or "")


def authenticated_username(api: KaggleApi) -> str:
    """The user name the API authenticated as ("" when the credentials do not carry one)."""
    try:
        return str(api.get_config_value(CONFIG_NAME_USER) or "")
    except Exception:  # get_config_value only reads a dict, but a stranger api object may differ
        return ""
