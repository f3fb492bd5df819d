"""Submissions to the competition: one sent, and its state and scores read back (`make submit`).

kaggle 2.2.5: `competition_submit(file_name, message, competition, quiet=False, sandbox=False)` uploads
and returns an ApiCreateSubmissionResponse (`ref`, `message`; ref 0 and message "Could not submit to
competition" when the upload failed). `get_submission(submission_ref)` returns an ApiSubmission:
`status` (SubmissionStatus PENDING / COMPLETE / ERROR), `public_score`, `private_score` (strings,
"" until published), `error_description`. Right after submitting, get_submission may answer 404; like any call
it may meet a 5xx or a dropped connection, which a wait asks again through (`transient`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.kaggle.client import KaggleError, clean, explain, http_status, is_network_error

if TYPE_CHECKING:  # only for type checkers: importing kaggle at run time authenticates
    from pipeline.kaggle.client import KaggleApi

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
        said = clean(str(getattr(result, "message", "") or "no answer"))
        if any(w in said.lower() for w in LIMIT_WORDS):
            raise KaggleError(f"{what}: daily submission limit reached ({said}); submit again tomorrow (UTC)")
        raise KaggleError(f"{what}: the submission was not accepted: {said}")
    return int(ref)


def _submit_refused(exc: BaseException, what: str) -> KaggleError:
    text = str(exc) + " " + str(getattr(getattr(exc, "response", None), "text", "") or "")
    if http_status(exc) in (400, 429) and any(w in text.lower() for w in LIMIT_WORDS):
        return KaggleError(f"{what}: daily submission limit reached; submit again tomorrow (UTC)")
    return explain(exc, what)  # 403: the competition's rules are not accepted


def transient(exc: BaseException | None) -> bool:
    """A failure that asking again may cure: Kaggle answered 5xx or 429, or the connection dropped or timed out."""
    if exc is None:
        return False
    status = http_status(exc)
    return (status is not None and (status >= 500 or status == 429)) or (status is None and is_network_error(exc))


def submission_state(ref: int, api: KaggleApi) -> dict:
    """{"status": pending | complete | error, "public": str, "private": str, "error": str} of submission `ref`."""
    try:
        sub = api.get_submission(ref)
    except Exception as exc:
        if http_status(exc) == 404:  # not readable yet, right after submitting
            return {"status": "pending", "public": "", "private": "", "error": ""}
        raise explain(exc, f"submission {ref}") from exc
    status = getattr(sub, "status", "")
    return {
        "status": str(getattr(status, "name", status) or "pending").lower(),
        "public": str(getattr(sub, "public_score", "") or ""),
        "private": str(getattr(sub, "private_score", "") or ""),
        "error": str(getattr(sub, "error_description", "") or ""),
    }
