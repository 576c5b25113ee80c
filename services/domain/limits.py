"""Field limits every event must meet before it may reach the projection.

A value PostgreSQL cannot store (a NUL character), that overflows a column (a statusVersion of
more than 39 digits, ``NUMERIC(39,0)``) or an index entry (btree rows stop near 2.7 KB), or that
could collide with the worker's dedup-table key (control characters such as ``\\x1f``) would stop
the worker on every restart. Such events are refused where they are made (the watcher) and where
they are read (``decode_event``), and go to the dead-letter topic with the reason instead.

Sources: node, Pod and namespace names are DNS-1123 names or subdomains (at most 253 and 63
characters, Kubernetes ``validation.IsDNS1123Subdomain`` / ``IsDNS1123Label``); Pod UIDs are
UUIDs; messages are at most 1024 characters (core/v1 ``ResourceHealthMessageMaxLength``).
resourceID and resource names have no API limit: 1024 UTF-8 bytes keeps the ``devices`` primary
key and indexes well inside PostgreSQL's btree entry limit.
"""

from __future__ import annotations

import re
from typing import Final

from services.domain.events import (
    MESSAGE_MAX_LENGTH,
    DeviceHealthObserved,
    Event,
    PodsListed,
)

STATUS_VERSION_MAX_DIGITS: Final = 39
"""Digits of the projection's ``NUMERIC(39,0)`` statusVersion columns (uint128 fits)."""

IDENTIFIER_MAX_BYTES: Final = 1024
"""Most UTF-8 bytes of a resourceID, resource name, container or claim name."""

RAW_HEALTH_MAX_LENGTH: Final = 256
"""Most characters of an unrecognised health value kept as ``rawHealth``."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _name_problem(field: str, value: str, max_bytes: int) -> str | None:
    if not value:
        return f"{field} is empty"
    if _CONTROL.search(value):
        return f"{field} contains a control character"
    if len(value.encode()) > max_bytes:
        return f"{field} is longer than {max_bytes} bytes"
    return None


def field_violations(event: Event) -> list[str]:
    """Why ``event`` cannot be stored, one readable reason per field (empty: it can be)."""
    if isinstance(event, PodsListed):
        return _snapshot_violations(event)
    checks: list[tuple[str, str | None, int]] = [
        ("node", event.node, 253),
        ("namespace", event.namespace, 63),
        ("podName", event.pod_name, 253),
        ("podUID", event.pod_uid, 128),
    ]
    if isinstance(event, DeviceHealthObserved):
        checks += [
            ("resourceID", event.resource_id, IDENTIFIER_MAX_BYTES),
            ("resourceName", event.resource_name, IDENTIFIER_MAX_BYTES),
        ]
        checks += [(f"container {c.name!r}", c.name, 253) for c in event.containers]
        if event.claim is not None:
            checks += [
                ("claim.podClaimName", event.claim.pod_claim_name, 253),
                ("claim.request", event.claim.request, 253),
                ("claim.resourceClaimName", event.claim.resource_claim_name, 253),
            ]
    problems = [
        problem
        for field, value, limit in checks
        if value is not None and (problem := _name_problem(field, value, limit)) is not None
    ]
    if (
        event.status_version is not None
        and len(str(event.status_version)) > STATUS_VERSION_MAX_DIGITS
    ):
        problems.append(f"statusVersion has more than {STATUS_VERSION_MAX_DIGITS} digits")
    if isinstance(event, DeviceHealthObserved):
        if event.message is not None:
            if "\x00" in event.message:
                problems.append("message contains a NUL character")
            if len(event.message) > MESSAGE_MAX_LENGTH:
                problems.append(f"message is longer than {MESSAGE_MAX_LENGTH} characters")
        if event.raw_health is not None and (
            "\x00" in event.raw_health or len(event.raw_health) > RAW_HEALTH_MAX_LENGTH
        ):
            problems.append(
                f"rawHealth contains a NUL or is longer than {RAW_HEALTH_MAX_LENGTH} characters"
            )
        problems += [
            f"flag {f!r} is not a plain short word"
            for f in event.flags
            if _name_problem("flag", f, 64)
        ]
    return problems


def _snapshot_violations(event: PodsListed) -> list[str]:
    checks = [("node", event.node, 253)]
    checks += [(f"podUID {uid!r}", uid, 128) for uid in event.pod_uids]
    problems = [
        problem
        for field, value, limit in checks
        if (problem := _name_problem(field, value, limit)) is not None
    ]
    if event.list_version is not None and len(str(event.list_version)) > STATUS_VERSION_MAX_DIGITS:
        problems.append(f"listVersion has more than {STATUS_VERSION_MAX_DIGITS} digits")
    return problems
