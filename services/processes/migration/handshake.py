"""The checkpoint handshake between the executor and a ``checkpointed`` workload (pure).

The executor annotates the Pod ``devicestate.io/checkpoint-request: <migrationID>``; the workload
(or its sidecar) answers ``devicestate.io/checkpoint-response: {"migrationID": ..., "checkpointID":
..., "checkpointAt": "<RFC 3339 UTC>"}``. A ``devicestate.io/last-checkpoint: {"checkpointID":
..., "checkpointAt": ...}`` counts without asking when it is recent enough. Every parse returns
the checkpoint or the problem (a bad value is reported, never taken).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

SERVING_CONDITION: Final = "devicestate.io/serving"
"""The Pod condition the executor owns (readiness gate ``conditionType``)."""
CHECKPOINT_REQUEST: Final = "devicestate.io/checkpoint-request"
CHECKPOINT_RESPONSE: Final = "devicestate.io/checkpoint-response"
LAST_CHECKPOINT: Final = "devicestate.io/last-checkpoint"
MAX_CHECKPOINT_ID: Final = 253


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint the workload committed: its ID and when it was taken (UTC)."""

    checkpoint_id: str
    checkpoint_at: datetime


@dataclass(frozen=True, slots=True)
class Parsed:
    """A checkpoint annotation read: ``checkpoint`` or, when it cannot be used, ``problem``."""

    checkpoint: Checkpoint | None = None
    problem: str | None = None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None or at.utcoffset() != timedelta(0):
        return None  # RFC 3339 UTC only: an offset or a local time is ambiguous to the governor
    return at.astimezone(UTC)


def _checkpoint(annotation: str, raw: str | None) -> tuple[dict[str, Any] | None, Parsed]:
    if raw is None:
        return None, Parsed()
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, Parsed(problem=f"{annotation}: not JSON")
    if not isinstance(obj, dict):
        return None, Parsed(problem=f"{annotation}: not a JSON object")
    checkpoint_id = obj.get("checkpointID")
    if not isinstance(checkpoint_id, str) or not 0 < len(checkpoint_id) <= MAX_CHECKPOINT_ID:
        return obj, Parsed(problem=f"{annotation}: checkpointID must be a string of 1-253 chars")
    if not checkpoint_id.isprintable():
        return obj, Parsed(problem=f"{annotation}: checkpointID holds control characters")
    at = _time(obj.get("checkpointAt"))
    if at is None:
        return obj, Parsed(problem=f"{annotation}: checkpointAt must be an RFC 3339 UTC time")
    return obj, Parsed(Checkpoint(checkpoint_id, at))


def parse_response(annotations: dict[str, str], migration_id: str) -> Parsed:
    """The workload's answer to ``migration_id``'s request (``Parsed()`` when there is none; a
    problem for bad JSON, a missing field, or an answer to another migration)."""
    obj, parsed = _checkpoint(CHECKPOINT_RESPONSE, annotations.get(CHECKPOINT_RESPONSE))
    if obj is None or parsed.problem is not None:
        return parsed
    answered = obj.get("migrationID")
    if answered != migration_id:
        return Parsed(problem=f"{CHECKPOINT_RESPONSE}: answers migration {answered!r}")
    return parsed


def parse_last(annotations: dict[str, str]) -> Parsed:
    """The workload's ``last-checkpoint`` (``Parsed()`` when absent)."""
    return _checkpoint(LAST_CHECKPOINT, annotations.get(LAST_CHECKPOINT))[1]


def fresh(
    checkpoint: Checkpoint,
    max_age_seconds: int | None,
    requested_at: datetime | None,
    now: datetime,
) -> bool:
    """A last checkpoint counts without asking when it is at most ``max_age_seconds`` old at
    ``now`` (UTC); without a declared age, when it was taken at or after the governor's request
    (``requested_at``), as the governor judges it. One from the future never does."""
    if checkpoint.checkpoint_at > now:
        return False
    if max_age_seconds is None:
        return requested_at is not None and checkpoint.checkpoint_at >= requested_at
    return now - checkpoint.checkpoint_at <= timedelta(seconds=max_age_seconds)


def committed(
    annotations: dict[str, str],
    migration_id: str,
    max_age_seconds: int | None,
    requested_at: datetime | None,
    now: datetime,
) -> tuple[Checkpoint | None, list[str]]:
    """The checkpoint to report as committed for ``migration_id``: the answer to its request,
    else a fresh ``last-checkpoint``; with the problems seen on the way (logged)."""
    problems: list[str] = []
    answer = parse_response(annotations, migration_id)
    if answer.checkpoint is not None:
        return answer.checkpoint, problems
    if answer.problem:
        problems.append(answer.problem)
    last = parse_last(annotations)
    if last.problem:
        problems.append(last.problem)
    if last.checkpoint is not None:
        if fresh(last.checkpoint, max_age_seconds, requested_at, now):
            return last.checkpoint, problems
        problems.append(f"{LAST_CHECKPOINT}: too old for this migration")
    return None, problems


def newest_committed(
    pods_annotations: list[dict[str, str]],
    migration_id: str,
    max_age_seconds: int | None,
    requested_at: datetime | None,
    now: datetime,
) -> tuple[Checkpoint | None, list[str]]:
    """:func:`committed` over the annotations of every Pod of the migration: the newest
    checkpoint any of them gives (a first Pod's older answer, which the governor may refuse,
    must not hide another Pod's fresh one), with every problem seen."""
    found: list[Checkpoint] = []
    problems: list[str] = []
    for of_pod in pods_annotations:
        checkpoint, seen = committed(of_pod, migration_id, max_age_seconds, requested_at, now)
        problems += seen
        if checkpoint is not None:
            found.append(checkpoint)
    return max(found, key=lambda c: c.checkpoint_at, default=None), problems
