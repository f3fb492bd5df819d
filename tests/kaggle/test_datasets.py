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
    api.add_bundle("tester/code")
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


def test_a_dataset_that_is_not_a_bundle_gets_no_version(tmp_path: Path) -> None:
    """kaggle.dataset_slug naming another dataset of the user's (a public one would publish the code and config):
    refused before anything is sent, whether it was seen at once or only when the slug turned out taken."""
    (tmp_path / "dataset-metadata.json").write_text(json.dumps({"id": "tester/photos"}))
    (tmp_path / "kernel-config.yaml").write_text("name: sample\n")
    api = FakeKaggleApi()
    api.datasets.add("tester/photos")
    api.dataset_listing["tester/photos"] = ["cat.jpg", "pipeline/readme.md"]
    with pytest.raises(
        KaggleError, match=r"dataset tester/photos exists and is not a code bundle .* kaggle.dataset_slug"
    ):
        datasets.upload_dataset(tmp_path, "tester/photos", "notes", api)
    assert [name for name, _ in api.calls] == ["dataset_status", "dataset_list_files"]  # nothing sent
    api = FakeKaggleApi()  # not visible a moment ago, then taken: the same question first
    api.create_result = {"status": "error", "error": "The requested slug is already in use by a dataset."}
    api.dataset_create_new = lambda *a, **k: api._create_response("tester/photos")
    api.dataset_listing["tester/photos"] = ["cat.jpg"]
    with pytest.raises(KaggleError, match="is not a code bundle"):
        datasets.upload_dataset(tmp_path, "tester/photos", "notes", api)
    assert "dataset_create_version" not in [name for name, _ in api.calls]
    api = FakeKaggleApi()
    api.add_bundle("tester/photos")  # an earlier bundle: a new version
    assert datasets.upload_dataset(tmp_path, "tester/photos", "notes", api)[0] == "new version"
