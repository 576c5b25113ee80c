"""Schema 2: one record carrying several observations of one Pod's status change (issue 12).

A Pod status change reports every device of the Pod at once (a training Pod: 8 GPUs of one
node). Schema 1 puts each device in its own record (:class:`~services.domain.events.
DeviceHealthObserved`); the worker's cost is per Kafka record (``docs/benchmarks.md``), so a
schema-2 :class:`DeviceHealthObservations` carries all of them, the Pod's fields once::

    {"schema": 2, "type": "DeviceHealthObservations", "node": ..., "namespace": ...,
     "podName": ..., "podUID": ..., "statusVersion": "<decimal>" | null, "observedAt": ...,
     ["podTerminated": true,] "observations": [<the device fields of a schema-1 observation>, ...]}

It is keyed by its node like a schema-1 observation and decodes into the same
``DeviceHealthObserved`` values the N schema-1 records would give: the dedup stays per
``(node, resourceID, statusVersion)``. Each observation has its place in the log,
``LogPosition(topic, partition, offset, index)`` with ``index`` its place in the record's
``observations`` list (a schema-1 record is index 0), stable on replay.

**A bad observation dead-letters only itself.** A record whose Pod fields are bad (no JSON, a
bad ``observedAt``, node or statusVersion, no ``observations``) raises
:class:`~services.domain.codec.EventDecodeError` and is dead-lettered whole, as a schema-1 record.
An entry of ``observations`` that does not decode, that the projection could not store
(:func:`~services.domain.limits.field_violations`) or that repeats an earlier entry's resourceID
is a :class:`RejectedObservation` (its index, the reason, and a schema-2 record of it alone as
the dead letter's value); the other observations are kept ("bad input loses nothing").

Old consumers (schema 1 only) dead-letter a schema-2 record as an unsupported type: upgrade the
workers and the replay before the watcher (``DEVICESTATE_WATCHER_RECORD_SCHEMA``,
``docs/operations.md``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.codec import EventDecodeError, json_fault
from services.domain.event_codec import device_dict, device_fields, event_head, pod_head
from services.domain.events import DeviceHealthObserved, Event, format_time
from services.domain.limits import field_violations, pod_fields_plain
from services.domain.log import LogPosition

OBSERVATIONS_SCHEMA: Final = 2
"""The ``schema`` of a :class:`DeviceHealthObservations` record."""

OBSERVATIONS_TYPE: Final = "DeviceHealthObservations"
"""Its ``type`` (and ``devicestate-type`` header)."""


@dataclass(frozen=True, slots=True)
class RejectedObservation:
    """An entry of a schema-2 record that cannot be applied: ``index`` in ``observations``,
    ``reason`` (readable, names the index), ``original`` the schema-2 record of the Pod's
    fields and this entry alone (JSON bytes): the dead letter's value."""

    index: int
    reason: str
    original: bytes


@dataclass(frozen=True, slots=True)
class DeviceHealthObservations:
    """Observations of one Pod's status change, all of one node: a schema-2 record.

    ``observations`` share the record's Pod fields (node, namespace, Pod, statusVersion,
    observedAt, podTerminated); ``indexes`` gives each one's place in the record's list (empty:
    ``0..n-1``, as built by :meth:`of`); ``rejected`` the entries that did not decode, in order.
    """

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    status_version: int | None
    observed_at: datetime
    observations: tuple[DeviceHealthObserved, ...]
    pod_terminated: bool = False
    indexes: tuple[int, ...] = ()
    rejected: tuple[RejectedObservation, ...] = ()
    type: str = field(default=OBSERVATIONS_TYPE, init=False)

    @classmethod
    def of(cls, observations: Sequence[DeviceHealthObserved]) -> DeviceHealthObservations:
        """The record of ``observations`` (at least one). Raises ``ValueError`` when they are
        not of one Pod change (node, namespace, Pod name and UID, statusVersion, observedAt,
        podTerminated differ) or repeat a resourceID."""
        if not observations:
            raise ValueError("a DeviceHealthObservations record holds at least one observation")
        first = observations[0]
        head = pod_change(first)
        if any(pod_change(o) != head for o in observations):
            raise ValueError("observations of one record must be of one Pod status change")
        ids = [o.resource_id for o in observations]
        if len(set(ids)) != len(ids):
            raise ValueError("observations of one record must have distinct resourceIDs")
        return cls(
            first.node,
            first.namespace,
            first.pod_name,
            first.pod_uid,
            first.status_version,
            first.observed_at,
            tuple(observations),
            first.pod_terminated,
        )

    def entries(self) -> Iterator[tuple[int, DeviceHealthObserved]]:
        """``(index in the record, observation)`` of the kept observations, in record order."""
        if self.indexes:
            return zip(self.indexes, self.observations, strict=True)
        return enumerate(self.observations)


def pod_change(event: DeviceHealthObserved) -> tuple[Any, ...]:
    """What observations of one record share: node, namespace, Pod name, Pod UID,
    statusVersion, observedAt, podTerminated."""
    return (
        event.node,
        event.namespace,
        event.pod_name,
        event.pod_uid,
        event.status_version,
        event.observed_at,
        event.pod_terminated,
    )


def observation_positions(
    position: LogPosition, record: DeviceHealthObservations
) -> list[tuple[LogPosition, DeviceHealthObserved]]:
    """Each kept observation of ``record`` (read at ``position``, a record's index-0 position)
    with its own position: ``index`` its place in the record."""
    topic, partition, offset = position.topic, position.partition, position.offset
    return [(LogPosition(topic, partition, offset, i), o) for i, o in record.entries()]


# --- the wire form ---------------------------------------------------------------------------


def _head_dict(record: DeviceHealthObservations) -> dict[str, Any]:
    head: dict[str, Any] = {
        "schema": OBSERVATIONS_SCHEMA,
        "type": OBSERVATIONS_TYPE,
        "node": record.node,
        "namespace": record.namespace,
        "podName": record.pod_name,
        "podUID": record.pod_uid,
        "statusVersion": None if record.status_version is None else str(record.status_version),
        "observedAt": format_time(record.observed_at),
    }
    if record.pod_terminated:
        head["podTerminated"] = True
    return head


def encode_observations(record: DeviceHealthObservations) -> bytes:
    """The record's JSON wire form (UTF-8, keys sorted; the observations in order; the rejected
    entries of a decoded record are not written)."""
    obj = _head_dict(record)
    obj["observations"] = [device_dict(o) for o in record.observations]
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def decode_observations(payload: bytes) -> DeviceHealthObservations:
    """Parse a schema-2 record. Raises :class:`EventDecodeError` when the record itself is bad
    (not JSON, another schema or type, a bad Pod field, ``observations`` missing, not a list, or
    empty); a bad entry is kept in ``rejected`` instead (module doc)."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    schema = obj.get("schema")
    if schema != OBSERVATIONS_SCHEMA or obj.get("type") != OBSERVATIONS_TYPE:
        raise EventDecodeError(
            f"not a schema-{OBSERVATIONS_SCHEMA} {OBSERVATIONS_TYPE} record "
            f"(schema {schema!r}, type {obj.get('type')!r})"
        )
    observed_at, node = event_head(obj)
    namespace, pod_name, pod_uid, status_version = pod_head(obj)
    pod_terminated = obj.get("podTerminated", False)
    if type(pod_terminated) is not bool:
        raise EventDecodeError("field 'podTerminated' must be a boolean")
    items = obj.get("observations")
    if type(items) is not list:
        raise EventDecodeError("field 'observations' must be a list")
    if not items:
        raise EventDecodeError("field 'observations' is empty")
    # Checked once for all the record's observations: they share the Pod's fields.
    pod_plain = pod_fields_plain(node, namespace, pod_name, pod_uid, status_version)
    kept: list[DeviceHealthObserved] = []
    indexes: list[int] = []
    rejected: list[RejectedObservation] = []
    seen: dict[str, int] = {}
    total = len(items)
    for index, item in enumerate(items):
        try:
            if type(item) is not dict:
                raise EventDecodeError("not a JSON object")
            observation = device_fields(
                item,
                node,
                namespace,
                pod_name,
                pod_uid,
                status_version,
                observed_at,
                pod_terminated,
            )
            violations = field_violations(observation, pod_plain=pod_plain)
            if violations:
                raise EventDecodeError("cannot be stored: " + "; ".join(violations))
            earlier = seen.get(observation.resource_id)
            if earlier is not None:
                raise EventDecodeError(
                    f"resourceID {observation.resource_id!r} repeats observation {earlier}"
                )
        except EventDecodeError as exc:
            alone = {k: v for k, v in obj.items() if k != "observations"}
            alone["observations"] = [item]
            rejected.append(
                RejectedObservation(
                    index,
                    f"observation {index} of {total}: {exc}",
                    orjson.dumps(alone, option=orjson.OPT_SORT_KEYS),
                )
            )
            continue
        seen[observation.resource_id] = index
        kept.append(observation)
        indexes.append(index)
    return DeviceHealthObservations(
        node,
        namespace,
        pod_name,
        pod_uid,
        status_version,
        observed_at,
        tuple(kept),
        pod_terminated,
        tuple(indexes) if rejected else (),
        tuple(rejected),
    )


# --- the watcher's side: a Pod change's observations in records that fit ----------------------


def group_pod_changes(
    events: Sequence[Event], budget: int, sizes: Sequence[int] | None = None
) -> list[Event | DeviceHealthObservations]:
    """``events`` with each run of consecutive observations of one Pod change
    (:func:`pod_change`, distinct resourceIDs) of two or more made into schema-2 records of at
    most ``budget`` bytes (their JSON), in order; a part of one observation stays a schema-1
    event, and every other event is unchanged. Each observation must already fit alone
    (:func:`services.domain.record_size.fit_events`). ``sizes``, when given, are the events'
    own JSON sizes in bytes (``Fitted.sizes``): a run whose events add up to at most ``budget``
    is one record without being encoded again (a schema-2 record of two or more observations
    is smaller than their schema-1 events together: it writes the Pod's fields once)."""
    out: list[Event | DeviceHealthObservations] = []
    run: list[DeviceHealthObserved] = []
    run_ids: set[str] = set()
    run_head: tuple[Any, ...] = ()
    run_bytes = 0

    def flush() -> None:
        nonlocal run_bytes
        if run:
            if sizes is not None and len(run) > 1 and run_bytes <= budget:
                out.append(DeviceHealthObservations.of(run))
            else:
                out.extend(_fit_run(run, budget))
            run.clear()
            run_ids.clear()
        run_bytes = 0

    for index, event in enumerate(events):
        if isinstance(event, DeviceHealthObserved):
            head = pod_change(event)
            if run and (head != run_head or event.resource_id in run_ids):
                flush()
            if not run:
                run_head = head
            run.append(event)
            run_ids.add(event.resource_id)
            run_bytes += sizes[index] if sizes is not None else 0
            continue
        flush()
        out.append(event)
    flush()
    return out


def _fit_run(
    run: Sequence[DeviceHealthObserved], budget: int
) -> list[Event | DeviceHealthObservations]:
    """One Pod change's observations in records of at most ``budget`` bytes, greedily in
    order: the head's size plus each entry's (and a comma between two)."""
    if len(run) == 1:
        return [run[0]]
    head = len(encode_observations(DeviceHealthObservations.of(run[:1]))) - len(
        orjson.dumps(device_dict(run[0]), option=orjson.OPT_SORT_KEYS)
    )
    parts: list[list[DeviceHealthObserved]] = []
    part: list[DeviceHealthObserved] = []
    size = head
    for observation in run:
        entry = len(orjson.dumps(device_dict(observation), option=orjson.OPT_SORT_KEYS))
        grown = size + entry + (1 if part else 0)
        if part and grown > budget:
            parts.append(part)
            part, grown = [], head + entry
        part.append(observation)
        size = grown
    parts.append(part)
    return [p[0] if len(p) == 1 else DeviceHealthObservations.of(p) for p in parts]
