"""The PostgreSQL projection of the device directory: batch writer and read helpers.

:meth:`ProjectionStore.apply_batch` is the only writer. In one transaction it locks the rows the
batch touches, runs the pure :func:`services.domain.directory.apply_event` over the batch in log
order in memory (so any batch split gives the same rows as one-by-one processing), then writes the
changed devices, their history rows and the partition progress with one set-based statement each
(``INSERT ... SELECT FROM jsonb_to_recordset(...)``, see the SQL section). Redelivered observations
are duplicates or stale in the fold, and history rows are keyed by log position (``ON CONFLICT DO
NOTHING``), so at-least-once delivery never writes history twice. An ``ON CONFLICT`` version guard
backs up the row locks: a write the guard refuses raises :class:`ProjectionConflictError`. Row values come from events only, never from the wall clock, so a replay of the same
log gives identical ``devices`` and ``device_history`` rows.

Times are aware ``datetime`` objects in UTC. Status versions are ``int`` (``NUMERIC(39,0)``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Executable, func, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.cache import DeviceCache, same_pods
from services.adapters.projection.inventory_store import (
    InventoryProjection,
    fresh_items,
    write_plan,
)
from services.adapters.projection.tables import (
    device_history,
    devices,
    in_schema,
    partition_progress,
    quoted_schema,
)
from services.domain.directory import (
    Allocation,
    Change,
    DeviceKey,
    DeviceRecord,
    Outcome,
    apply_event,
)
from services.domain.events import (
    ClaimRef,
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
)
from services.domain.inventory.fold import InventoryPlan
from services.domain.log import LoggedEvent, LogPosition

# --- results and read models ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """An applied observation that changed (or first set) a device's health, in a batch being
    written: the :class:`Change` (``transition`` set; ``change.record`` is the device after it),
    the observation and its log position."""

    position: LogPosition
    change: Change
    event: DeviceHealthObserved


@dataclass(frozen=True, slots=True)
class PendingCommit:
    """What a :data:`CommitHook` sees: the batch is written but not committed yet.

    ``transitions`` are the batch's health transitions in log order (only records after the
    recorded offsets: a redelivered record is skipped whole and makes none). ``applied_through``
    and ``last_event_at`` are each partition's recorded offset and newest event time *before* this
    batch (read with the rows locked until commit; partitions without a row are absent).
    ``inventory`` is what the batch did to the inventory (identities resolved, conflicts raised
    or cleared), when the batch maintained it (``inventory_items``).
    """

    transitions: list[Transition]
    applied_through: dict[tuple[str, int], int]
    last_event_at: dict[tuple[str, int], datetime]
    inventory: InventoryPlan | None = None

    def fresh(self, position: LogPosition) -> bool:
        """Whether a record at ``position`` is after its partition's recorded offset."""
        return position.offset > self.applied_through.get((position.topic, position.partition), -1)


CommitHook = Callable[[PendingCommit], Awaitable[None]]
"""Called by :meth:`ProjectionStore.apply_batch` inside the transaction, after the writes and just
before the commit; an exception rolls the batch back (and is raised by ``apply_batch``)."""


class ProjectionConflictError(RuntimeError):
    """The SQL version guard refused a write the in-memory fold planned: another writer changed
    the same devices concurrently. The transaction was rolled back; retrying the batch is safe."""


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one :meth:`ProjectionStore.apply_batch` did.

    ``applied``/``duplicates``/``stale`` count observations by outcome; ``released`` counts
    allocations removed (one per device a release touched); ``transitions`` counts applied
    observations that changed (or first set) a device's health; ``devices_written`` counts device
    rows inserted or updated (several changes to one device in a batch write it once).
    """

    applied: int = 0
    duplicates: int = 0
    stale: int = 0
    released: int = 0
    transitions: int = 0
    devices_written: int = 0
    redelivered: int = 0
    """Records at or before the partition's recorded offset: already applied, skipped whole."""


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch folded over a :class:`DeviceCache` and encoded for the database, not written yet
    (see :meth:`ProjectionStore.prepare_batch`)."""

    written: dict[DeviceKey, DeviceRecord]
    """The new state of each device the batch changes."""
    offsets: dict[tuple[str, int], int]
    """The partition offsets the batch records."""
    stats: BatchStats
    """What the batch does once written."""
    observed_rows: dict[str, str] | None
    released_rows: dict[str, str] | None
    history_rows: dict[str, str] | None
    progress: dict[str, list[Any]]
    inventory: InventoryPlan | None = None
    """The inventory rows to write (when prepared with ``inventory_items``)."""


@dataclass(frozen=True, slots=True)
class DeviceFilters:
    """Filters of :meth:`ProjectionStore.list_devices`; ``None`` means any. ``namespace`` and
    ``pod_uid`` match devices with an allocation of a Pod in that namespace / with that UID."""

    node: str | None = None
    health: Health | None = None
    resource_name: str | None = None
    source: DeviceSource | None = None
    namespace: str | None = None
    pod_uid: str | None = None


@dataclass(frozen=True, slots=True)
class DevicePage:
    """One page of devices sorted by ``(node, resource_id)``; ``next_after`` is the key to pass as
    ``after`` for the next page (``None``: this is the last page)."""

    items: list[DeviceRecord]
    next_after: DeviceKey | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One ``device_history`` row: a change one event made to one device (see
    :data:`services.adapters.projection.tables.device_history`)."""

    position: LogPosition
    node: str
    resource_id: str
    kind: str
    health: Health
    status_version: int | None
    observed_at: datetime
    transition: bool
    pod_uid: str
    namespace: str
    pod_name: str
    message: str | None
    raw_health: str | None


def _zero_health() -> dict[Health, int]:
    return dict.fromkeys(Health, 0)


@dataclass(frozen=True, slots=True)
class NodeCounts:
    """Device counts of one node, by health (every :class:`Health` present, zeros included)."""

    node: str
    devices: int
    by_health: dict[Health, int] = field(default_factory=_zero_health)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A node's counts and its devices sorted by resource ID."""

    counts: NodeCounts
    devices: list[DeviceRecord]


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """Device counts of the whole fleet by health and by source (zeros included)."""

    devices: int
    nodes: int
    by_health: dict[Health, int]
    by_source: dict[DeviceSource, int]


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """Progress of the projection on one Kafka partition.

    ``offset`` is the last applied offset (``None``: none yet); ``highwater`` the partition's end
    offset the worker last saw (the offset of the next record); ``last_event_at`` the newest
    ``observedAt`` applied (event time, UTC); ``updated_at`` the wall-clock time of the last write.
    """

    topic: str
    partition: int
    offset: int | None
    highwater: int | None
    last_event_at: datetime | None
    updated_at: datetime

    @property
    def lag(self) -> int | None:
        """Records not yet applied: ``highwater - offset - 1`` (never negative); ``None`` when the
        highwater is unknown."""
        if self.highwater is None:
            return None
        applied_through = -1 if self.offset is None else self.offset
        return max(0, self.highwater - applied_through - 1)


# --- row <-> record conversion --------------------------------------------------------------


_HEALTH: dict[str, Health] = {h.value: h for h in Health}
_SOURCE: dict[str, DeviceSource] = {s.value: s for s in DeviceSource}
_KIND: dict[str, ContainerKind] = {k.value: k for k in ContainerKind}


def _version_text(version: int | None) -> str | None:
    return None if version is None else str(version)


def allocation_to_json(allocation: Allocation) -> dict[str, Any]:
    """The JSON object of one allocation in ``devices.allocations`` (camelCase, statusVersion as a
    decimal string)."""
    claim = allocation.claim
    return {
        "podUID": allocation.pod_uid,
        "namespace": allocation.namespace,
        "podName": allocation.pod_name,
        "containers": [{"name": c.name, "kind": c.kind.value} for c in allocation.containers],
        "claim": None
        if claim is None
        else {
            "podClaimName": claim.pod_claim_name,
            "request": claim.request,
            "resourceClaimName": claim.resource_claim_name,
        },
        "statusVersion": _version_text(allocation.status_version),
    }


def _allocation_from_json(obj: dict[str, Any]) -> Allocation:
    claim = obj.get("claim")
    version = obj.get("statusVersion")
    return Allocation(
        pod_uid=obj["podUID"],
        namespace=obj["namespace"],
        pod_name=obj["podName"],
        containers=tuple(ContainerRef(c["name"], _KIND[c["kind"]]) for c in obj["containers"]),
        claim=None
        if claim is None
        else ClaimRef(claim["podClaimName"], claim.get("request"), claim.get("resourceClaimName")),
        status_version=None if version is None else int(version),
    )


def record_from_row(row: Sequence[Any]) -> DeviceRecord:
    """A :class:`DeviceRecord` from a ``devices`` row in column order (``allocations`` as JSON text
    or already parsed). Raises ``KeyError`` for a health, source or container kind value the model
    lacks (the projection only ever writes model values)."""
    (
        node,
        resource_id,
        resource_name,
        source,
        health,
        raw_health,
        message,
        status_version,
        _ordered,
        last_observed_at,
        last_transition_at,
        allocations,
        flags,
    ) = row
    if isinstance(allocations, str):
        allocations = orjson.loads(allocations)
    return DeviceRecord(
        node=node,
        resource_id=resource_id,
        resource_name=resource_name,
        source=_SOURCE[source],
        health=_HEALTH[health],
        raw_health=raw_health,
        message=message,
        status_version=None if status_version is None else int(status_version),
        last_observed_at=last_observed_at,
        last_transition_at=last_transition_at,
        allocations=tuple(_allocation_from_json(a) for a in allocations),
        flags=tuple(flags),
    )


def _history_from_row(row: Any) -> HistoryEntry:
    m = row._mapping
    return HistoryEntry(
        position=LogPosition(m["topic"], m["partition"], m["offset"]),
        node=m["node"],
        resource_id=m["resource_id"],
        kind=m["kind"],
        health=_HEALTH[m["health"]],
        status_version=None if m["status_version"] is None else int(m["status_version"]),
        observed_at=m["observed_at"],
        transition=m["transition"],
        pod_uid=m["pod_uid"],
        namespace=m["namespace"],
        pod_name=m["pod_name"],
        message=m["message"],
        raw_health=m["raw_health"],
    )


# --- the in-memory part of a batch ----------------------------------------------------------


@dataclass(slots=True)
class _BatchPlan:
    """The fold of one batch over the locked rows: what to write."""

    written: dict[DeviceKey, DeviceRecord] = field(default_factory=dict)
    observed: set[DeviceKey] = field(default_factory=set)  # keys with an APPLIED change
    history: list[tuple[LogPosition, Change, Event]] = field(default_factory=list)
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    transitions: int = 0


def _plan_batch(
    current: Mapping[DeviceKey, DeviceRecord], records: Sequence[LoggedEvent]
) -> _BatchPlan:
    """Fold ``records`` in order over ``current`` (the locked rows) with the pure
    :func:`apply_event`. Releases see only the devices their Pod holds on their node (kept in an
    index), which is what :func:`apply_event` asks for, without scanning the whole batch state."""
    state = dict(current)
    holders: dict[tuple[str, str], set[DeviceKey]] = defaultdict(set)
    for record in state.values():
        for allocation in record.allocations:
            holders[(record.node, allocation.pod_uid)].add(record.key)
    plan = _BatchPlan()
    counts, written, observed, history = plan.counts, plan.written, plan.observed, plan.history
    applied, released = Outcome.APPLIED, Outcome.RELEASED
    transitions = 0
    for logged in records:
        event = logged.event
        view: Mapping[DeviceKey, DeviceRecord]
        if isinstance(event, DeviceHealthObserved):
            view = state
        else:
            view = {k: state[k] for k in holders.get((event.node, event.pod_uid), ())}
        for change in apply_event(view, event):
            outcome = change.outcome
            counts[outcome] += 1
            if outcome is not applied and outcome is not released:  # not change.changed
                continue
            key, new = change.key, change.record
            old = state.get(key)
            if old is None or not same_pods(old.allocations, new.allocations):
                node = key[0]  # the index only changes when the device's Pods do
                if old is not None:
                    for allocation in old.allocations:
                        holders[(node, allocation.pod_uid)].discard(key)
                for allocation in new.allocations:
                    holders[(node, allocation.pod_uid)].add(key)
            state[key] = new
            written[key] = new
            if outcome is applied:
                observed.add(key)
                transitions += change.transition
            history.append((logged.position, change, event))
    plan.transitions = transitions
    return plan


# --- SQL ------------------------------------------------------------------------------------
#
# Batch rows travel as ONE jsonb parameter (an array of objects, encoded by orjson) expanded with
# jsonb_to_recordset: far cheaper on the client than a dozen typed arrays, and nested values
# (allocations, flags) need no second encoding. Status versions travel as decimal strings (JSON
# numbers lose precision above 2**53 in many parsers; PostgreSQL reads them into NUMERIC exactly).

_DEVICE_COLUMNS = (
    "node, resource_id, resource_name, source, health, raw_health, message, status_version, "
    "ordered, last_observed_at, last_transition_at, allocations, flags"
)
_DEVICE_RECORDSET = (
    "jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(node text, resource_id text, "
    "resource_name text, source text, health text, raw_health text, message text, "
    "status_version numeric, last_observed_at timestamptz, last_transition_at timestamptz, "
    "allocations jsonb, flags text[])"
)
_HISTORY_COLUMNS = (
    'topic, "partition", "offset", node, resource_id, kind, health, status_version, '
    "observed_at, transition, pod_uid, namespace, pod_name, message, raw_health"
)
_HISTORY_RECORDSET = (
    'jsonb_to_recordset(CAST(:rows AS jsonb)) AS u(topic text, "partition" integer, '
    '"offset" bigint, node text, resource_id text, kind text, health text, '
    "status_version numeric, observed_at timestamptz, transition boolean, pod_uid text, "
    "namespace text, pod_name text, message text, raw_health text)"
)
# One lateral index probe per key (or per released Pod), whatever the planner's statistics say
# about a young table; keys are sorted, so rows are locked in key order.
_LOCKED_DEVICE = (
    "SELECT d.node, d.resource_id, d.resource_name, d.source, d.health, d.raw_health, "
    "d.message, d.status_version, d.ordered, d.last_observed_at, d.last_transition_at, "
    "d.allocations::text, d.flags FROM {s}.devices AS d WHERE {where} FOR UPDATE"
)


class _Statements:
    """The write path's SQL for one schema (schema names cannot be bind parameters)."""

    def __init__(self, schema: str) -> None:
        s = quoted_schema(schema)
        by_key = _LOCKED_DEVICE.format(s=s, where="d.node = k.node AND d.resource_id = k.id")
        self.lock_by_key = text(
            "SELECT x.* FROM unnest(CAST(:nodes AS text[]), CAST(:ids AS text[])) AS k(node, id) "
            f"CROSS JOIN LATERAL ({by_key}) AS x"
        )
        by_pod = _LOCKED_DEVICE.format(
            s=s,
            where="d.node = k.node AND d.allocations @> "
            "jsonb_build_array(jsonb_build_object('podUID', k.pod_uid))",
        )
        self.lock_by_pod = text(
            "SELECT x.* FROM unnest(CAST(:nodes AS text[]), CAST(:pods AS text[])) "
            f"AS k(node, pod_uid) CROSS JOIN LATERAL ({by_pod}) AS x"
        )
        # Version guard: an observation overwrites only an older (or unordered, rank 0) state.
        self.upsert_observed = text(
            f"INSERT INTO {s}.devices AS d ({_DEVICE_COLUMNS}) "
            "SELECT u.node, u.resource_id, u.resource_name, u.source, u.health, u.raw_health, "
            "u.message, u.status_version, u.status_version IS NOT NULL, u.last_observed_at, "
            f"u.last_transition_at, u.allocations, u.flags FROM {_DEVICE_RECORDSET} "
            "ON CONFLICT (node, resource_id) DO UPDATE SET "
            "resource_name = EXCLUDED.resource_name, source = EXCLUDED.source, "
            "health = EXCLUDED.health, raw_health = EXCLUDED.raw_health, "
            "message = EXCLUDED.message, status_version = EXCLUDED.status_version, "
            "ordered = EXCLUDED.ordered, last_observed_at = EXCLUDED.last_observed_at, "
            "last_transition_at = EXCLUDED.last_transition_at, "
            "allocations = EXCLUDED.allocations, flags = EXCLUDED.flags "
            "WHERE COALESCE(d.status_version, 0) < COALESCE(EXCLUDED.status_version, 0)"
        )
        # A release changes allocations only, of the state the fold saw (same status_version).
        self.update_released = text(
            f"UPDATE {s}.devices AS d SET allocations = u.allocations FROM {_DEVICE_RECORDSET} "
            "WHERE d.node = u.node AND d.resource_id = u.resource_id "
            "AND d.status_version IS NOT DISTINCT FROM u.status_version"
        )
        self.insert_history = text(
            f"INSERT INTO {s}.device_history ({_HISTORY_COLUMNS}) "
            f"SELECT {_HISTORY_COLUMNS} FROM {_HISTORY_RECORDSET} ON CONFLICT DO NOTHING"
        )
        self.lock_progress = text(
            f'SELECT p.topic, p."partition", p."offset", p.last_event_at '
            f"FROM {s}.partition_progress AS p "
            "JOIN unnest(CAST(:topic AS text[]), CAST(:partition AS integer[])) "
            'AS u(topic, "partition") ON p.topic = u.topic AND p."partition" = u."partition" '
            'ORDER BY p.topic, p."partition" FOR UPDATE OF p'
        )
        self.upsert_progress = text(
            f'INSERT INTO {s}.partition_progress AS p (topic, "partition", "offset", highwater, '
            "last_event_at, updated_at) SELECT u.*, now() FROM unnest("
            "CAST(:topic AS text[]), CAST(:partition AS integer[]), CAST(:offset AS bigint[]), "
            "CAST(:highwater AS bigint[]), CAST(:last_event_at AS timestamptz[])) "
            'AS u(topic, "partition", "offset", highwater, last_event_at) '
            'ON CONFLICT (topic, "partition") DO UPDATE SET '
            '"offset" = GREATEST(p."offset", EXCLUDED."offset"), '
            "highwater = GREATEST(p.highwater, EXCLUDED.highwater), "
            "last_event_at = GREATEST(p.last_event_at, EXCLUDED.last_event_at), "
            "updated_at = EXCLUDED.updated_at"
        )


def _json_rows(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {"rows": orjson.dumps(rows).decode()}


# The row builders below hand orjson the enum members themselves: it writes a StrEnum member as
# its value, the same JSON text as ``.value`` without the property lookup per field.


def _device_rows(records: Iterable[DeviceRecord]) -> dict[str, str]:
    return _json_rows(
        [
            {
                "node": r.node,
                "resource_id": r.resource_id,
                "resource_name": r.resource_name,
                "source": r.source,
                "health": r.health,
                "raw_health": r.raw_health,
                "message": r.message,
                "status_version": None if r.status_version is None else str(r.status_version),
                "last_observed_at": r.last_observed_at,
                "last_transition_at": r.last_transition_at,
                "allocations": [
                    {
                        "podUID": a.pod_uid,
                        "namespace": a.namespace,
                        "podName": a.pod_name,
                        "containers": [{"name": c.name, "kind": c.kind} for c in a.containers],
                        "claim": None
                        if (claim := a.claim) is None
                        else {
                            "podClaimName": claim.pod_claim_name,
                            "request": claim.request,
                            "resourceClaimName": claim.resource_claim_name,
                        },
                        "statusVersion": None
                        if a.status_version is None
                        else str(a.status_version),
                    }
                    for a in r.allocations
                ],
                "flags": r.flags,
            }
            for r in records
        ]
    )


def _history_rows(plan: _BatchPlan) -> dict[str, str]:
    rows: list[dict[str, Any]] = []
    append = rows.append
    for position, change, event in plan.history:
        version = event.status_version
        common = {
            "topic": position.topic,
            "partition": position.partition,
            "offset": position.offset,
            "node": change.key[0],
            "resource_id": change.key[1],
            "health": change.record.health,
            "status_version": None if version is None else str(version),
            "observed_at": event.observed_at,
            "transition": change.transition,
            "pod_uid": event.pod_uid,
            "namespace": event.namespace,
            "pod_name": event.pod_name,
        }
        if isinstance(event, DeviceHealthObserved):
            common["kind"] = "observed"
            common["message"] = event.message
            common["raw_health"] = event.raw_health
        else:
            common["kind"] = "released"
            common["message"] = None
            common["raw_health"] = None
        append(common)
    return _json_rows(rows)


def _applied_positions(plan: _BatchPlan) -> set[LogPosition]:
    """Positions of the observations the fold applied (the inventory resolves their identity)."""
    applied = Outcome.APPLIED
    return {
        position
        for position, change, event in plan.history
        if change.outcome is applied and isinstance(event, DeviceHealthObserved)
    }


def _recorded_offsets(
    progress: Mapping[str, list[Any]], before: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """The offsets ``partition_progress`` holds once ``progress`` is written over ``before``."""
    out = dict(before)
    for topic, partition, offset in zip(
        progress["topic"], progress["partition"], progress["offset"], strict=True
    ):
        if offset is not None and offset > out.get((topic, partition), -1):
            out[(topic, partition)] = offset
    return out


def _transitions(plan: _BatchPlan) -> list[Transition]:
    return [
        Transition(position, change, event)
        for position, change, event in plan.history
        if change.transition and isinstance(event, DeviceHealthObserved)
    ]


def _progress_params(
    records: Sequence[LoggedEvent],
    highwaters: Mapping[tuple[str, int], int],
    consumed_through: Mapping[tuple[str, int], int],
    event_times: Iterable[tuple[LogPosition, datetime]] = (),
) -> dict[str, list[Any]]:
    offsets: dict[tuple[str, int], int] = dict(consumed_through)
    newest: dict[tuple[str, int], datetime] = {}
    for logged in records:
        part = (logged.position.topic, logged.position.partition)
        offsets[part] = max(offsets.get(part, -1), logged.position.offset)
        observed_at = logged.event.observed_at
        if part not in newest or observed_at > newest[part]:
            newest[part] = observed_at
    for position, observed_at in event_times:
        part = (position.topic, position.partition)
        offsets[part] = max(offsets.get(part, -1), position.offset)
        if part not in newest or observed_at > newest[part]:
            newest[part] = observed_at
    parts = sorted(offsets.keys() | highwaters.keys())
    return {
        "topic": [t for t, _ in parts],
        "partition": [p for _, p in parts],
        "offset": [offsets.get(part) for part in parts],
        "highwater": [highwaters.get(part) for part in parts],
        "last_event_at": [newest.get(part) for part in parts],
    }


# --- the store ------------------------------------------------------------------------------


class ProjectionStore:
    """The device directory in PostgreSQL schema ``schema`` (migrated, see
    :func:`services.adapters.projection.migrate.migrate`), accessed through ``engine`` (asyncpg).

    Raises ``ValueError`` for a schema name that is not a plain identifier.
    """

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._schema = schema
        self._options = in_schema(schema)
        self._sql = _Statements(schema)
        self.inventory = InventoryProjection(schema)
        """The inventory this store maintains when batches come with ``inventory_items``."""

    @property
    def schema(self) -> str:
        return self._schema

    # --- writing ----------------------------------------------------------------------------

    async def apply_batch(
        self,
        records: Sequence[LoggedEvent],
        highwaters: Mapping[tuple[str, int], int] | None = None,
        consumed_through: Mapping[tuple[str, int], int] | None = None,
        *,
        cache: DeviceCache | None = None,
        event_times: Sequence[tuple[LogPosition, datetime]] = (),
        before_commit: CommitHook | None = None,
        inventory_items: Sequence[tuple[LogPosition, object]] | None = None,
    ) -> BatchStats:
        """Apply ``records`` (in log order) in one transaction; return what they did.

        ``highwaters`` maps ``(topic, partition)`` to the end offset the consumer saw (the next
        record's offset), stored for the lag metric; partitions without records may be given too.
        ``consumed_through`` maps ``(topic, partition)`` to the last offset the caller consumed,
        including records it did not pass (dropped early as duplicates, dead-lettered), so the
        recorded progress covers them.

        Exactly-once in effect: the partition progress is read (and locked) in the same
        transaction, and records at or before a partition's recorded offset are skipped whole
        (``redelivered``), so a batch redelivered after a crash between the commit and the Kafka
        offset commit changes nothing, whatever its events are.
        The result equals applying the records one by one whatever the batch split. Redelivered
        observations are DUPLICATE/STALE no-ops and history rows are keyed by log position, so
        at-least-once delivery never writes a history row twice. Raises :class:`ProjectionConflictError` when a concurrent
        writer changed the same devices (rolled back; retry), and SQLAlchemy's ``DBAPIError``
        family for database failures (rolled back).

        ``cache`` is for a caller that owns the projection alone (the replay, on a fresh or
        truncated schema): the current device rows and the recorded partition offsets come from it
        instead of being locked and read back (:meth:`prepare_batch`), and it is updated with what
        was written once the transaction has committed. It must hold exactly what the tables hold
        (see :class:`~services.adapters.projection.cache.DeviceCache`); the rows written are then the same
        as without it.

        ``event_times`` are the log positions and event times (``observedAt``) of the batch's
        other records, those not in ``records`` (node events, observations dropped early): like
        the records, they advance their partition's ``last_event_at`` (newest event time) and
        offset, unless at or before the recorded offset. ``before_commit`` (not with ``cache``) is
        awaited inside the transaction after every write, just before the commit, with the
        batch's :class:`PendingCommit` (its health transitions): what it does before returning
        happens before the commit, and an exception from it rolls the batch back.

        ``inventory_items`` (every decoded record of the batch with its position, in log order:
        the records, the node events and the DRA inventory records) makes the batch maintain the
        inventory tables too, in the same transaction (:attr:`inventory`,
        :mod:`services.domain.inventory.fold`): records after the recorded offsets are
        folded, an observation only when the directory fold applied it; the hook then sees the
        result in :attr:`PendingCommit.inventory`.
        """
        highwaters = highwaters or {}
        consumed_through = consumed_through or {}
        if (
            not records
            and not highwaters
            and not consumed_through
            and not event_times
            and not inventory_items
        ):
            return BatchStats()
        if cache is not None:
            if before_commit is not None:
                raise ValueError("apply_batch: before_commit cannot be used with a cache")
            prepared = self.prepare_batch(
                records, cache, highwaters, consumed_through, inventory_items=inventory_items
            )
            stats = await self.write_prepared(prepared)
            cache.update(prepared.written, prepared.offsets)
            return stats
        async with self._engine.begin() as conn:
            parts = {(r.position.topic, r.position.partition) for r in records}
            parts.update(consumed_through)
            parts.update((p.topic, p.partition) for p, _ in event_times)
            parts.update((p.topic, p.partition) for p, _ in inventory_items or ())
            applied_through, last_event_at = await self._lock_progress(conn, parts)

            def fresh_position(position: LogPosition) -> bool:
                return position.offset > applied_through.get(
                    (position.topic, position.partition), -1
                )

            fresh = [r for r in records if fresh_position(r.position)]
            redelivered = len(records) - len(fresh)
            records = fresh
            current = await self._lock_devices(conn, records)
            plan = _plan_batch(current, records)
            written = await self._write_devices(conn, plan)
            if plan.history:
                await conn.execute(self._sql.insert_history, _history_rows(plan))
            times = [(p, t) for p, t in event_times if fresh_position(p)]
            progress = _progress_params(records, highwaters, consumed_through, times)
            await conn.execute(self._sql.upsert_progress, progress)
            inventory = None
            if inventory_items is not None:
                inventory = await self.inventory.apply(
                    conn,
                    fresh_items(inventory_items, applied_through),
                    _applied_positions(plan),
                    applied_through,
                    parts,
                )
            if before_commit is not None:
                await before_commit(
                    PendingCommit(_transitions(plan), applied_through, last_event_at, inventory)
                )
        if inventory_items is not None:
            self.inventory.committed(_recorded_offsets(progress, applied_through))
        return BatchStats(
            applied=plan.counts[Outcome.APPLIED],
            duplicates=plan.counts[Outcome.DUPLICATE],
            stale=plan.counts[Outcome.STALE],
            released=plan.counts[Outcome.RELEASED],
            transitions=plan.transitions,
            devices_written=written,
            redelivered=redelivered,
        )

    def prepare_batch(
        self,
        records: Sequence[LoggedEvent],
        cache: DeviceCache,
        highwaters: Mapping[tuple[str, int], int] | None = None,
        consumed_through: Mapping[tuple[str, int], int] | None = None,
        *,
        inventory_items: Sequence[tuple[LogPosition, object]] | None = None,
    ) -> PreparedBatch:
        """The in-memory half of :meth:`apply_batch` with a ``cache``: drop the records at or before
        the offsets the cache recorded (``redelivered``), fold the rest over the cached devices and
        encode the rows to write. CPU only, no I/O; ``cache`` is read, not changed.

        A writer that owns the projection may pipeline: fold the next batch over
        ``cache.update(prepared.written, prepared.offsets)`` while :meth:`write_prepared` writes
        this one, provided the writes then happen in order and a failed one ends the whole run
        (the cache is then ahead of the tables).

        With ``inventory_items`` (see :meth:`apply_batch`) the inventory is folded too, over
        :attr:`inventory`'s in-memory state from an empty inventory (the writer owns the schema:
        nothing is loaded), and its rows written by :meth:`write_prepared`. ``inventory`` then
        folds on from this batch: prepared batches must be written in order.
        """
        highwaters = highwaters or {}
        consumed_through = consumed_through or {}
        fresh = cache.fresh(records)
        plan = _plan_batch(cache.current(fresh), fresh)
        inventory = None
        if inventory_items is not None:
            recorded = {
                (p.topic, p.partition): offset
                for p, _ in inventory_items
                if (offset := cache.offset(p.topic, p.partition)) is not None
            }
            inventory = self.inventory.fold_owned(
                fresh_items(inventory_items, recorded), _applied_positions(plan)
            )
        observed = [r for k, r in plan.written.items() if k in plan.observed]
        released = [r for k, r in plan.written.items() if k not in plan.observed]
        progress = _progress_params(fresh, highwaters, consumed_through)
        offsets = {
            (topic, partition): offset
            for topic, partition, offset in zip(
                progress["topic"], progress["partition"], progress["offset"], strict=True
            )
            if offset is not None
        }
        return PreparedBatch(
            written=plan.written,
            offsets=offsets,
            stats=BatchStats(
                applied=plan.counts[Outcome.APPLIED],
                duplicates=plan.counts[Outcome.DUPLICATE],
                stale=plan.counts[Outcome.STALE],
                released=plan.counts[Outcome.RELEASED],
                transitions=plan.transitions,
                devices_written=len(plan.written),
                redelivered=len(records) - len(fresh),
            ),
            observed_rows=_device_rows(observed) if observed else None,
            released_rows=_device_rows(released) if released else None,
            history_rows=_history_rows(plan) if plan.history else None,
            progress=progress,
            inventory=inventory,
        )

    async def write_prepared(self, prepared: PreparedBatch) -> BatchStats:
        """Write a :meth:`prepare_batch` result in one transaction (the same statements as
        :meth:`apply_batch`); return its stats. Raises :class:`ProjectionConflictError` when the
        version guard refuses a device write (rolled back), and SQLAlchemy's ``DBAPIError``
        family for database failures (rolled back)."""
        async with self._engine.begin() as conn:
            await self._write_device_rows(
                conn, prepared.observed_rows, prepared.released_rows, len(prepared.written)
            )
            if prepared.history_rows is not None:
                await conn.execute(self._sql.insert_history, prepared.history_rows)
            await conn.execute(self._sql.upsert_progress, prepared.progress)
            if prepared.inventory is not None:
                await write_plan(conn, self.inventory.sql, prepared.inventory)
        return prepared.stats

    async def _lock_progress(
        self, conn: AsyncConnection, partitions: Iterable[tuple[str, int]]
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], datetime]]:
        """The recorded offset and newest event time of each of ``partitions`` (those with a
        value), rows locked until commit."""
        parts = sorted(set(partitions))
        if not parts:
            return {}, {}
        result = await conn.execute(
            self._sql.lock_progress,
            {"topic": [t for t, _ in parts], "partition": [p for _, p in parts]},
        )
        offsets: dict[tuple[str, int], int] = {}
        times: dict[tuple[str, int], datetime] = {}
        for topic, partition, offset, last_event_at in result:
            if offset is not None:
                offsets[(topic, partition)] = offset
            if last_event_at is not None:
                times[(topic, partition)] = last_event_at
        return offsets, times

    async def _lock_devices(
        self, conn: AsyncConnection, records: Sequence[LoggedEvent]
    ) -> dict[DeviceKey, DeviceRecord]:
        """Lock and load the observed devices (by key) and the devices released Pods hold."""
        keys: set[DeviceKey] = set()
        pods: set[tuple[str, str]] = set()
        for logged in records:
            event = logged.event
            if isinstance(event, DeviceHealthObserved):
                keys.add(event.device_key)
            else:
                pods.add((event.node, event.pod_uid))
        current: dict[DeviceKey, DeviceRecord] = {}
        if keys:
            ordered = sorted(keys)
            params = {"nodes": [n for n, _ in ordered], "ids": [i for _, i in ordered]}
            result = await conn.execute(self._sql.lock_by_key, params)
            current.update((r.key, r) for r in map(record_from_row, result))
        if pods:
            ordered = sorted(pods)
            params = {"nodes": [n for n, _ in ordered], "pods": [p for _, p in ordered]}
            result = await conn.execute(self._sql.lock_by_pod, params)
            current.update((r.key, r) for r in map(record_from_row, result))
        return current

    async def _write_devices(self, conn: AsyncConnection, plan: _BatchPlan) -> int:
        observed = [r for k, r in plan.written.items() if k in plan.observed]
        released = [r for k, r in plan.written.items() if k not in plan.observed]
        return await self._write_device_rows(
            conn,
            _device_rows(observed) if observed else None,
            _device_rows(released) if released else None,
            len(plan.written),
        )

    async def _write_device_rows(
        self,
        conn: AsyncConnection,
        observed: dict[str, str] | None,
        released: dict[str, str] | None,
        expected: int,
    ) -> int:
        written = 0
        if observed is not None:
            result = await conn.execute(self._sql.upsert_observed, observed)
            written += result.rowcount
        if released is not None:
            result = await conn.execute(self._sql.update_released, released)
            written += result.rowcount
        if written != expected:
            raise ProjectionConflictError(
                f"version guard refused {expected - written} of {expected} "
                "device writes: a concurrent writer changed them; the batch was rolled back"
            )
        return written

    # --- reading ----------------------------------------------------------------------------

    async def _fetch(self, stmt: Executable) -> list[Any]:
        async with self._engine.connect() as conn:
            result = await conn.execute(stmt, execution_options=self._options)
            return list(result)

    async def list_devices(
        self, filters: DeviceFilters | None = None, limit: int = 100, after: DeviceKey | None = None
    ) -> DevicePage:
        """Devices matching ``filters``, sorted by ``(node, resource_id)``, at most ``limit``
        (>= 1), starting after the key ``after`` (keyset pagination). Raises ``ValueError`` for a
        limit below 1."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        f = filters or DeviceFilters()
        c = devices.c
        stmt = select(devices).order_by(c.node, c.resource_id).limit(limit + 1)
        if f.node is not None:
            stmt = stmt.where(c.node == f.node)
        if f.health is not None:
            stmt = stmt.where(c.health == f.health.value)
        if f.resource_name is not None:
            stmt = stmt.where(c.resource_name == f.resource_name)
        if f.source is not None:
            stmt = stmt.where(c.source == f.source.value)
        if f.namespace is not None:
            stmt = stmt.where(c.allocations.contains([{"namespace": f.namespace}]))
        if f.pod_uid is not None:
            stmt = stmt.where(c.allocations.contains([{"podUID": f.pod_uid}]))
        if after is not None:
            stmt = stmt.where(tuple_(c.node, c.resource_id) > tuple_(*after))
        items = [record_from_row(row) for row in await self._fetch(stmt)]
        if len(items) > limit:
            return DevicePage(items[:limit], items[limit - 1].key)
        return DevicePage(items, None)

    async def get_device(self, node: str, resource_id: str) -> DeviceRecord | None:
        """The device ``(node, resource_id)``, or ``None`` when it is unknown."""
        c = devices.c
        stmt = select(devices).where(c.node == node, c.resource_id == resource_id)
        rows = await self._fetch(stmt)
        return record_from_row(rows[0]) if rows else None

    async def device_history(
        self, node: str, resource_id: str, limit: int = 100, before: datetime | None = None
    ) -> list[HistoryEntry]:
        """History of one device, newest first (by ``observed_at``, then log position), at most
        ``limit``; with ``before``, only entries observed strictly earlier. Empty for an unknown
        device."""
        c = device_history.c
        stmt = (
            select(device_history)
            .where(c.node == node, c.resource_id == resource_id)
            .order_by(c.observed_at.desc(), c.topic.desc(), c.partition.desc(), c.offset.desc())
            .limit(limit)
        )
        if before is not None:
            stmt = stmt.where(c.observed_at < before)
        return [_history_from_row(row) for row in await self._fetch(stmt)]

    async def node_summary(self, node: str) -> NodeSummary | None:
        """Counts by health and the devices of ``node``; ``None`` when it has no devices."""
        c = devices.c
        stmt = select(devices).where(c.node == node).order_by(c.resource_id)
        records = [record_from_row(row) for row in await self._fetch(stmt)]
        if not records:
            return None
        counts = NodeCounts(node, len(records))
        for record in records:
            counts.by_health[record.health] += 1
        return NodeSummary(counts, records)

    async def list_nodes(self) -> list[NodeCounts]:
        """Per-node device counts by health, sorted by node name."""
        c = devices.c
        stmt = (
            select(c.node, c.health, func.count())
            .group_by(c.node, c.health)
            .order_by(c.node, c.health)
        )
        by_node: dict[str, dict[Health, int]] = defaultdict(_zero_health)
        for node, health, count in await self._fetch(stmt):
            by_node[node][_HEALTH[health]] = count
        return [NodeCounts(node, sum(c.values()), c) for node, c in by_node.items()]

    async def fleet_counts(self) -> FleetCounts:
        """Device counts over all nodes, by health and by source."""
        c = devices.c
        by_health = _zero_health()
        by_source = dict.fromkeys(DeviceSource, 0)
        for health, count in await self._fetch(select(c.health, func.count()).group_by(c.health)):
            by_health[_HEALTH[health]] = count
        for source, count in await self._fetch(select(c.source, func.count()).group_by(c.source)):
            by_source[_SOURCE[source]] = count
        [(nodes,)] = await self._fetch(select(func.count(c.node.distinct())))
        return FleetCounts(sum(by_health.values()), nodes, by_health, by_source)

    async def partition_progress(self) -> list[PartitionProgress]:
        """Progress rows sorted by ``(topic, partition)`` (empty before the first batch)."""
        c = partition_progress.c
        stmt = select(partition_progress).order_by(c.topic, c.partition)
        return [
            PartitionProgress(
                r.topic, r.partition, r.offset, r.highwater, r.last_event_at, r.updated_at
            )
            for r in await self._fetch(stmt)
        ]

    async def freshness(self) -> datetime | None:
        """The newest ``last_event_at`` over all partitions (event time, UTC), or ``None``."""
        [(newest,)] = await self._fetch(select(func.max(partition_progress.c.last_event_at)))
        result: datetime | None = newest
        return result
