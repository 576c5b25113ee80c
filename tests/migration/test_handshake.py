"""The checkpoint handshake's parsing (services/processes/migration/handshake.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from services.processes.migration.handshake import (
    CHECKPOINT_RESPONSE,
    LAST_CHECKPOINT,
    Checkpoint,
    committed,
    fresh,
    parse_last,
    parse_response,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
MID = "m-0123456789abcdef0123"


def _response(**fields: object) -> dict[str, str]:
    return {CHECKPOINT_RESPONSE: json.dumps(fields)}


def test_an_answer_to_this_migration_is_the_checkpoint() -> None:
    parsed = parse_response(
        _response(migrationID=MID, checkpointID="ckpt-42", checkpointAt="2026-12-03T11:59:00Z"),
        MID,
    )
    assert parsed.problem is None
    assert parsed.checkpoint == Checkpoint("ckpt-42", NOW - timedelta(minutes=1))


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{not json", "not JSON"),
        ('["a"]', "not a JSON object"),
        (json.dumps({"migrationID": MID, "checkpointAt": "2026-12-03T11:59:00Z"}), "checkpointID"),
        (json.dumps({"migrationID": MID, "checkpointID": "c"}), "checkpointAt"),
        (
            json.dumps({"migrationID": MID, "checkpointID": "c", "checkpointAt": "yesterday"}),
            "checkpointAt",
        ),
        (  # an offset is not UTC
            json.dumps(
                {
                    "migrationID": MID,
                    "checkpointID": "c",
                    "checkpointAt": "2026-12-03T12:59:00+01:00",
                }
            ),
            "checkpointAt",
        ),
        (
            json.dumps(
                {
                    "migrationID": MID,
                    "checkpointID": "c\x07",
                    "checkpointAt": "2026-12-03T11:59:00Z",
                }
            ),
            "control characters",
        ),
        (
            json.dumps(
                {
                    "migrationID": "m-ffff",
                    "checkpointID": "c",
                    "checkpointAt": "2026-12-03T11:59:00Z",
                }
            ),
            "answers migration 'm-ffff'",
        ),
    ],
)
def test_a_bad_answer_is_a_problem_not_a_checkpoint(raw: str, problem: str) -> None:
    parsed = parse_response({CHECKPOINT_RESPONSE: raw}, MID)
    assert parsed.checkpoint is None
    assert parsed.problem is not None and problem in parsed.problem


def test_no_annotation_is_neither() -> None:
    assert parse_response({}, MID).checkpoint is None
    assert parse_response({}, MID).problem is None
    assert parse_last({}).checkpoint is None


def test_a_last_checkpoint_counts_only_when_fresh() -> None:
    recent = Checkpoint("c", NOW - timedelta(seconds=300))
    assert fresh(recent, 900, None, NOW)
    assert not fresh(recent, 299, None, NOW)  # stale
    assert not fresh(Checkpoint("c", NOW + timedelta(seconds=5)), 900, None, NOW)  # future
    # No max age declared: only a checkpoint taken at or after the governor's request counts.
    assert not fresh(recent, None, None, NOW)
    assert not fresh(recent, None, NOW - timedelta(seconds=60), NOW)
    assert fresh(recent, None, NOW - timedelta(seconds=600), NOW)


def test_committed_prefers_the_answer_then_a_fresh_last_checkpoint() -> None:
    last = {
        LAST_CHECKPOINT: json.dumps({"checkpointID": "old", "checkpointAt": "2026-12-03T11:55:00Z"})
    }
    answer = _response(migrationID=MID, checkpointID="new", checkpointAt="2026-12-03T11:59:30Z")
    assert committed({**last, **answer}, MID, 900, None, NOW)[0] == Checkpoint(
        "new", NOW - timedelta(seconds=30)
    )
    checkpoint, problems = committed(last, MID, 900, None, NOW)
    assert checkpoint == Checkpoint("old", NOW - timedelta(minutes=5)) and problems == []
    checkpoint, problems = committed(last, MID, 60, None, NOW)  # stale: none, and why
    assert checkpoint is None and problems == [f"{LAST_CHECKPOINT}: too old for this migration"]
    wrong = _response(migrationID="m-other", checkpointID="x", checkpointAt="2026-12-03T11:59:30Z")
    checkpoint, problems = committed({**wrong, **last}, MID, 900, None, NOW)
    assert checkpoint is not None and checkpoint.checkpoint_id == "old"
    assert problems and "answers migration" in problems[0]
