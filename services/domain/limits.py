"""Field limits every event must meet before it may reach the projection.

A value PostgreSQL cannot store (a NUL character), that overflows a column (a statusVersion of
more than 39 digits, ``NUMERIC(39,0)``) or an index entry (btree rows stop near 2.7 KB), or that
could collide with the worker's dedup-table key (control characters such as ``\\x1f``) would stop
the worker on every restart. Such events are refused where they are made (the watcher) and where
they are read (``decode_event``), and go to the dead-letter topic with the reason instead.

Sources: node, Pod and namespace names are DNS-1123 names or subdomains (at most 253 and 63
characters, Kubernetes ``validation.IsDNS1123Subdomain`` / ``IsDNS1123Label``; node names are
checked to be one, :func:`node_name_problem`); no name or ID may hold an invisible or
bidirectional-control character (:func:`invisible_problem`: it would display as another ID); Pod UIDs are
UUIDs; messages are at most 1024 characters (core/v1 ``ResourceHealthMessageMaxLength``).
resourceID and resource names have no API limit: 1024 UTF-8 bytes keeps the ``devices`` primary
key and indexes well inside PostgreSQL's btree entry limit.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from services.domain.events import (
    MESSAGE_MAX_LENGTH,
    DeviceHealthObserved,
    Event,
    PodDevicesReleased,
    PodsListed,
)

STATUS_VERSION_MAX_DIGITS: Final = 39
"""Digits of the projection's ``NUMERIC(39,0)`` statusVersion columns (uint128 fits)."""

IDENTIFIER_MAX_BYTES: Final = 1024
"""Most UTF-8 bytes of a resourceID, resource name, container or claim name."""

RAW_HEALTH_MAX_LENGTH: Final = 256
"""Most characters of an unrecognised health value kept as ``rawHealth``."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

NODE_NAME_MAX_LENGTH: Final = 253
"""Kubernetes ``validation.IsDNS1123Subdomain``: at most 253 characters."""
DNS1123_SUBDOMAIN_PATTERN: Final = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
"""A DNS-1123 subdomain (Kubernetes ``dns1123SubdomainFmt``): what every Node name is."""
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_PATTERN)

INVISIBLE_CHARACTERS: Final = (
    "\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
)
"""A regex class body of the characters a terminal shows as nothing or that reorder what follows:
soft hyphen, Arabic letter mark, Mongolian vowel separator, zero-width space/joiners, LRM/RLM,
line and paragraph separators (U+2028/9), bidi embeddings and overrides (U+202A-E), word joiner
and invisible operators, bidi isolates (U+2066-9), the deprecated format controls, and the BOM.
No Kubernetes name holds one; an ID holding one reads as another ID (Trojan Source)."""
_INVISIBLE = re.compile(f"[{INVISIBLE_CHARACTERS}]")

BIDI_CONTROLS: Final = "\u202a-\u202e\u2066-\u2069"
"""A regex class body of the bidi embeddings, overrides and isolates (U+202A-E, U+2066-9): they
reorder the text that follows them, so a reason holding one displays as other text (Trojan
Source). Free text (a command's reason) may hold the other invisible characters of
:data:`INVISIBLE_CHARACTERS` (LRM/RLM and joiners belong in right-to-left and some scripts'
text), never these."""
_BIDI_CONTROL = re.compile(f"[{BIDI_CONTROLS}]")


def bidi_control_problem(field: str, value: str) -> str | None:
    """Why the free text ``value`` (the field ``field``) cannot be recorded: its first bidi
    embedding, override or isolate (:data:`BIDI_CONTROLS`) by code point and position."""
    found = _BIDI_CONTROL.search(value)
    if found is None:
        return None
    return (
        f"{field} contains a bidirectional-control character, U+{ord(found.group()):04X} at "
        f"position {found.start()}: it makes the text display as other text; write it without"
    )


@lru_cache(maxsize=256)
def node_name_problem(value: str) -> str | None:
    """Why ``value`` is not a Node name (a DNS-1123 subdomain), or ``None``."""
    problem = _name_problem("node", value, NODE_NAME_MAX_LENGTH)
    if problem is not None:
        return problem
    if _DNS1123_SUBDOMAIN.fullmatch(value) is None:
        return (
            f"node is not a DNS-1123 subdomain (at most {NODE_NAME_MAX_LENGTH} characters of "
            "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
        )
    return None


def invisible_problem(field: str, value: str) -> str | None:
    """Why ``value`` (the field ``field``) cannot be shown faithfully: the first invisible or
    bidirectional-control character (:data:`INVISIBLE_CHARACTERS`) by code point and position."""
    found = _INVISIBLE.search(value)
    if found is None:
        return None
    return (
        f"{field} contains an invisible or bidirectional-control character, "
        f"U+{ord(found.group()):04X} at position {found.start()}"
    )


# Cached: a Pod's events repeat its namespace, name, UID, node, containers and claim, so the
# watcher and the worker's decode check each value once per Pod instead of once per device (pure
# functions of their arguments; a Pod's events come together, so a small cache keeps the hits).
@lru_cache(maxsize=256)
def _name_problem(field: str, value: str, max_bytes: int) -> str | None:
    if not value:
        return f"{field} is empty"
    if _CONTROL.search(value):
        return f"{field} contains a control character"
    if len(value.encode()) > max_bytes:
        return f"{field} is longer than {max_bytes} bytes"
    return invisible_problem(field, value)


def _plain(value: str, max_bytes: int) -> bool:
    """Whether ``value`` passes :func:`_name_problem` at a glance: non-empty printable ASCII
    (no control character; every invisible one is outside ASCII) of at most ``max_bytes``
    characters (= bytes). False says nothing: :func:`_name_problem` decides then."""
    return 0 < len(value) <= max_bytes and value.isascii() and value.isprintable()


def pod_fields_plain(
    node: str, namespace: str, pod_name: str, pod_uid: str, status_version: int | None
) -> bool:
    """Whether the Pod's fields of an observation (what all observations of a schema-2 record
    share: :func:`services.domain.observations.pod_change`) pass :func:`field_violations` at a
    glance (:func:`_plain`; the node by its cached DNS-1123 check). False says nothing."""
    return (
        _plain(namespace, 63)
        and _plain(pod_name, 253)
        and _plain(pod_uid, 128)
        and node_name_problem(node) is None
        and (status_version is None or len(str(status_version)) <= STATUS_VERSION_MAX_DIGITS)
    )


def _device_fields_plain(event: DeviceHealthObserved) -> bool:
    """Whether the observation's own fields (all but the Pod's) pass :func:`field_violations`
    at a glance (uncached: unique resourceIDs would only churn :func:`_name_problem`'s cache)."""
    if not (
        _plain(event.resource_id, IDENTIFIER_MAX_BYTES)
        and _plain(event.resource_name, IDENTIFIER_MAX_BYTES)
    ):
        return False
    for container in event.containers:
        if not _plain(container.name, 253):
            return False
    claim = event.claim
    if claim is not None and not (
        _plain(claim.pod_claim_name, 253)
        and (claim.request is None or _plain(claim.request, 253))
        and (claim.resource_claim_name is None or _plain(claim.resource_claim_name, 253))
    ):
        return False
    message = event.message
    if message is not None and ("\x00" in message or len(message) > MESSAGE_MAX_LENGTH):
        return False
    raw_health = event.raw_health
    if raw_health is not None and ("\x00" in raw_health or len(raw_health) > RAW_HEALTH_MAX_LENGTH):
        return False
    flags = event.flags
    return not flags or all(_plain(flag, 64) for flag in flags)  # usually none: no generator


def field_violations(event: Event, *, pod_plain: bool = False) -> list[str]:
    """Why ``event`` cannot be stored, one readable reason per field (empty: it can be).

    ``pod_plain``: the caller found the observation's Pod fields plain already
    (:func:`pod_fields_plain` of these very values: a schema-2 record's observations share them),
    so only its own fields are looked at before the verdict "nothing"."""
    if isinstance(event, PodsListed):
        return _snapshot_violations(event)
    if (
        isinstance(event, DeviceHealthObserved)
        and (
            pod_plain
            or pod_fields_plain(
                event.node, event.namespace, event.pod_name, event.pod_uid, event.status_version
            )
        )
        and _device_fields_plain(event)
    ):
        return []
    return _field_by_field(event)


def _field_by_field(event: DeviceHealthObserved | PodDevicesReleased) -> list[str]:
    """:func:`field_violations` of a device event, each field checked (and named) in turn."""
    checks: list[tuple[str, str | None, int]] = [
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
    if (problem := node_name_problem(event.node)) is not None:
        problems.insert(0, problem)
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
