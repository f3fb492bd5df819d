"""`make train` (pipeline.train): a models folder in the way stops it in one line. One fold's training is tested in
tests/core/test_fold.py, whole runs in test_e2e.py, resumes in tests/core/test_resume.py."""

from __future__ import annotations

from pathlib import Path

from pipeline import train
from tests.helpers import one_line_error, stage_args


def test_models_being_a_file_stops_train_in_one_line(tmp_path: Path, capsys) -> None:
    models = tmp_path / "models"
    models.write_text("not a folder")
    assert train.main(stage_args(tmp_path, f"models_dir={models}")) == 2
    assert one_line_error(capsys) == (
        f"error: {models}: is a file, but the models folder (models_dir) must be a folder there; move the file away"
    )
