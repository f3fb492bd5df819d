"""Tests for pipeline.kaggle.kernels: Kaggle's answers about a kernel, told apart. No test reaches the network.

The push, the state, the log and the output through the stages are in tests/test_kernel.py; this file runs the
real kaggle 2.2.5 package in a subprocess (as tests/kaggle/test_client.py does), with `requests.Session.send`
replaced, for the errors the library hides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_kaggle import SENTINEL, run_python

pytestmark = pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)

REAL_KERNEL_SCRIPT = """
    import json, sys
    import requests
    from pipeline.kaggle import client, kernels

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
    api = client.get_api()
    try:
        if call == "status":
            kernels.kernel_status("me/jigsaw-sample", api)
        elif call == "logs":
            kernels.kernel_log("me/jigsaw-sample", api)
        else:
            kernels.download_kernel_output("me/jigsaw-sample", sys.argv[3], api)
    except client.KaggleError as exc:
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
