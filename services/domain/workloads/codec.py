"""The wire form of ``PodWorkloadObserved`` (:mod:`services.domain.workloads.events`).

JSON, keys sorted, camelCase: ``{"schema": 1, "type": "PodWorkloadObserved", "version": 1,
"node", "namespace", "podName", "podUID", "statusVersion" (decimal string or null),
"observedAt" (RFC 3339 UTC), "chain": [{"kind", "name", "uid", "apiVersion"}], "chainComplete",
"chainReason", "migration": {"class", "source", "checkpointMaxAgeSeconds", "shard",
"reasons"}}``. :func:`decode_workload` raises
:class:`~services.domain.codec.EventDecodeError` naming the field for anything else (a newer
``version`` included), and for values the projection could not store.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from services.domain.codec import (
    EventDecodeError,
    decode_record,
    optional_str_field,
    require,
    version_field,
)
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.limits import STATUS_VERSION_MAX_DIGITS, invisible_problem, node_name_problem
from services.domain.workloads.events import (
    WORKLOAD_EVENT_TYPE,
    WORKLOAD_RECORD_VERSION,
    PodWorkloadObserved,
)
from services.domain.workloads.migration import (
    MAX_AGE_LIMIT_SECONDS,
    MigrationClass,
    MigrationSource,
)
from services.domain.workloads.owners import MAX_CHAIN_LENGTH, OwnerLink, string_fields

_CLASSES: Final = {c.value: c for c in MigrationClass}
_SOURCES: Final = {s.value: s for s in MigrationSource}
TEXT_MAX_LENGTH: Final = 1024
"""Most characters of a reason (chain or migration) kept on the wire and in the projection."""


def encode_workload(event: PodWorkloadObserved) -> bytes:
    """The JSON bytes of ``event`` (keys sorted, stable)."""
    body: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "type": event.type,
        "version": WORKLOAD_RECORD_VERSION,
        "node": event.node,
        "namespace": event.namespace,
        "podName": event.pod_name,
        "podUID": event.pod_uid,
        "statusVersion": None if event.status_version is None else str(event.status_version),
        "observedAt": format_time(event.observed_at),
        "chain": [
            {"kind": c.kind, "name": c.name, "uid": c.uid, "apiVersion": c.api_version}
            for c in event.chain
        ],
        "chainComplete": event.chain_complete,
        "chainReason": event.chain_reason,
        "migration": {
            "class": event.migration_class.value,
            "source": event.migration_source.value,
            "checkpointMaxAgeSeconds": event.checkpoint_max_age_seconds,
            "shard": event.shard,
            "reasons": list(event.migration_reasons),
        },
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _link(item: Any) -> OwnerLink:
    if not isinstance(item, dict):
        raise EventDecodeError("field 'chain' holds an entry that is not an object")
    values = string_fields(item, ("kind", "name", "uid", "apiVersion"))
    if values is None:
        raise EventDecodeError("field 'chain' holds an entry without kind, name, uid, apiVersion")
    return OwnerLink(*values)


def _migration(obj: Any) -> tuple[MigrationClass, MigrationSource, int | None, str | None, Any]:
    if not isinstance(obj, dict):
        raise EventDecodeError("field 'migration' must be an object")
    raw_class, raw_source = obj.get("class"), obj.get("source")
    found = _CLASSES.get(raw_class) if isinstance(raw_class, str) else None
    if found is None:
        raise EventDecodeError(f"field 'migration.class' has unknown value {raw_class!r}")
    source = _SOURCES.get(raw_source) if isinstance(raw_source, str) else None
    if source is None:
        raise EventDecodeError(f"field 'migration.source' has unknown value {obj.get('source')!r}")
    age = obj.get("checkpointMaxAgeSeconds")
    if age is not None and (type(age) is not int or not 0 < age <= MAX_AGE_LIMIT_SECONDS):
        raise EventDecodeError(
            "field 'migration.checkpointMaxAgeSeconds' must be a positive integer"
        )
    shard = optional_str_field(obj, "shard")
    reasons = obj.get("reasons") or []
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise EventDecodeError("field 'migration.reasons' must be a list of strings")
    return found, source, age, shard, reasons


def decode_workload(payload: bytes) -> PodWorkloadObserved:
    """Parse a ``PodWorkloadObserved``; raises :class:`EventDecodeError` with the reason."""
    obj, observed_at = decode_record(
        payload, SCHEMA_VERSION, WORKLOAD_EVENT_TYPE, WORKLOAD_RECORD_VERSION
    )
    chain_items = require(obj, "chain", list)
    if len(chain_items) > MAX_CHAIN_LENGTH:
        raise EventDecodeError(f"field 'chain' has more than {MAX_CHAIN_LENGTH} entries")
    complete = obj.get("chainComplete")
    if type(complete) is not bool:
        raise EventDecodeError("field 'chainComplete' must be true or false")
    migration_class, source, age, shard, reasons = _migration(obj.get("migration"))
    event = PodWorkloadObserved(
        node=require(obj, "node"),
        namespace=require(obj, "namespace"),
        pod_name=require(obj, "podName"),
        pod_uid=require(obj, "podUID"),
        status_version=version_field(obj, "statusVersion"),
        observed_at=observed_at,
        chain=tuple(_link(item) for item in chain_items),
        chain_complete=complete,
        chain_reason=optional_str_field(obj, "chainReason"),
        migration_class=migration_class,
        migration_source=source,
        checkpoint_max_age_seconds=age,
        shard=shard,
        migration_reasons=tuple(reasons),
    )
    problems = workload_violations(event)
    if problems:
        raise EventDecodeError("cannot be stored: " + "; ".join(problems))
    return event


def _text_problem(field: str, value: str, limit: int) -> str | None:
    if not value:
        return f"{field} is empty"
    if "\x00" in value or any(ord(ch) < 0x20 for ch in value):
        return f"{field} contains a control character"
    if len(value) > limit:
        return f"{field} is longer than {limit} characters"
    return invisible_problem(field, value)


def workload_violations(event: PodWorkloadObserved) -> list[str]:
    """Why ``event`` cannot be stored, one reason per field (empty: it can be)."""
    checks: list[tuple[str, str | None, int]] = [
        ("namespace", event.namespace, 63),
        ("podName", event.pod_name, 253),
        ("podUID", event.pod_uid, 128),
        ("shard", event.shard, 253),
    ]
    for link in event.chain:
        checks += [
            ("chain.kind", link.kind, 63),
            ("chain.name", link.name, 253),
            ("chain.uid", link.uid, 128),
            ("chain.apiVersion", link.api_version, 253),
        ]
    problems = [
        p for f, v, n in checks if v is not None and (p := _text_problem(f, v, n)) is not None
    ]
    if (problem := node_name_problem(event.node)) is not None:
        problems.insert(0, problem)
    if (
        event.status_version is not None
        and len(str(event.status_version)) > STATUS_VERSION_MAX_DIGITS
    ):
        problems.append(f"statusVersion has more than {STATUS_VERSION_MAX_DIGITS} digits")
    for text in (event.chain_reason, *event.migration_reasons):
        if text is not None and ("\x00" in text or len(text) > TEXT_MAX_LENGTH):
            problems.append(f"a reason contains a NUL or is longer than {TEXT_MAX_LENGTH}")
    return problems
