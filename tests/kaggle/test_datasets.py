"""Tests for pipeline.kaggle.datasets: the code bundle's upload and its readiness. No test reaches the network.

The whole push, from the bundle's upload to the kernel's, is in tests/test_kernel.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.kaggle import datasets
from pipeline.kaggle.client import KaggleError
from tests.helpers.fake_kaggle import FakeKaggleApi, http_error


def test_new_version_while_the_last_one_processes(tmp_path: Path) -> None:
    """A dataset version uploaded while the previous one still processes answers 403: say that, not 'no access'."""
    (tmp_path / "dataset-metadata.json").write_text(json.dumps({"id": "tester/code"}))
    api = FakeKaggleApi()
    api.datasets.add("tester/code")
    api.fail["dataset_create_version"] = http_error(403, "Forbidden")
    api.dataset_states = ["ready", "pending"]  # exists (ready), then: the version in flight is pending
    with pytest.raises(KaggleError, match=r"previous version is still pending on Kaggle \(403 until it is ready\)"):
        datasets.upload_dataset(tmp_path, "tester/code", "notes", api)
    api.dataset_states = ["ready", "ready"]  # nothing in flight: a real access problem
    with pytest.raises(KaggleError, match=r"access denied \(403\)"):
        datasets.upload_dataset(tmp_path, "tester/code", "notes", api)


def test_deleted_dataset_is_final() -> None:
    api = FakeKaggleApi()
    api.datasets.add("tester/code")
    api.dataset_states = ["deleted"] * 5
    sleeps: list[float] = []
    with pytest.raises(KaggleError, match="was deleted on Kaggle.*kaggle.dataset_slug"):
        datasets.wait_dataset_ready("tester/code", api, sleep=sleeps.append)
    assert sleeps == []  # no waiting out the timeout


def test_brief_404_after_creating_is_waited_out() -> None:
    api = FakeKaggleApi()  # the dataset is not visible yet: dataset_status answers 404
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            api.datasets.add("tester/code")  # visible now

    assert datasets.wait_dataset_ready("tester/code", api, poll_s=10, sleep=sleep) == "ready"
    api = FakeKaggleApi()  # still 404 after the grace period: it is really not there
    with pytest.raises(KaggleError, match=r"not found \(404\)"):
        datasets.wait_dataset_ready("tester/code", api, poll_s=10, sleep=lambda s: None, grace_s=30)
