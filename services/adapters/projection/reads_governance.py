"""Read queries of the governance projection (:mod:`services.adapters.projection.governance_tables`)
for the API: devices joined with their governance state, quarantines, command outcomes, the device
timeline and the fleet status. Read-only; the governor writes these tables.

A directory device (``devices``, keyed by the resourceID its Pod reported) is joined with the
governance of its *physical* identity (issue 10): the governor keys a device by
``HealthTransition.device_id`` when the worker resolved one (``driver/pool/device`` for a
CDI-form DRA ID, the physical GPU for a device-plugin replica), so the join goes through
``device_identities``: its ``device_id`` when the identity is resolved or as reported, the
reported resourceID otherwise (unresolved, ambiguous, or no identity row)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson
from sqlalchemy import Executable, Text, and_, bindparam, case, cast, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import (
    device_governance,
    governance_commands,
    governance_decisions,
    governor_fleet,
    governor_nodes,
    quarantines,
)
from services.adapters.projection.inventory_tables import device_identities
from services.adapters.projection.read_models import DeviceFilters
from services.adapters.projection.reads_devices import device_filter_clauses
from services.adapters.projection.rows import records_from_rows
from services.adapters.projection.tables import devices, in_schema
from services.domain.directory import DeviceKey, DeviceRecord
from services.domain.governance.decisions import DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.held import HOLDING_STATUSES
from services.domain.inventory.identity import IdentityStatus


@dataclass(frozen=True, slots=True)
class DeviceGovernance:
    """The governance part of a device: what devicestate decided about it."""

    state: str
    state_since: datetime
    effective_health: str
    effective_reason: str | None
    quarantine_id: str | None


@dataclass(frozen=True, slots=True)
class GovernedDevice:
    record: DeviceRecord
    governance: DeviceGovernance | None


@dataclass(frozen=True, slots=True)
class GovernedPage:
    items: list[GovernedDevice]
    next_after: DeviceKey | None


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """A ``governance_commands`` row: the governor's answer to a command."""

    command_id: str
    action: str
    actor: str
    accepted: bool
    reason: str
    seq: int
    request_fingerprint: str | None = None
    """The fingerprint of the request that made the command (``Idempotency-Key``), if any."""


@dataclass(frozen=True, slots=True)
class QuarantineFilters:
    status: str | None = None
    kind: str | None = None
    node: str | None = None
    resource_id: str | None = None


QuarantineCursor = tuple[datetime, str]
"""``(created_at, quarantine_id)`` of the last item of a page (newest first)."""


@dataclass(frozen=True, slots=True)
class QuarantinePage:
    items: list[dict[str, Any]]
    """``quarantines`` rows as column -> value mappings."""
    next_after: QuarantineCursor | None


@dataclass(frozen=True, slots=True)
class DecisionRow:
    seq: int
    idx: int
    kind: str
    at: datetime
    incident: str | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """``governor_fleet`` (``seen`` false when the governor never wrote it) and counts."""

    seen: bool
    watermark: datetime | None
    breaker_open: bool
    automation_paused: bool
    snapshot: dict[str, Any]
    by_state: dict[str, int] = field(default_factory=dict)
    active_quarantines: int = 0
    nodes_heartbeat_lost: int = 0


def _governance(m: Any) -> DeviceGovernance | None:
    if m["g_state"] is None:
        return None
    return DeviceGovernance(
        state=m["g_state"],
        state_since=m["g_state_since"],
        effective_health=m["g_effective_health"],
        effective_reason=m["g_effective_reason"],
        quarantine_id=m["g_quarantine_id"],
    )


def _governance_at(row: Sequence[Any]) -> DeviceGovernance | None:
    """:func:`_governance` of a :meth:`GovernanceReads.joined` row as a tuple (the governance
    columns follow the device's, in :data:`_GOV_COLUMNS` order)."""
    state, since, effective_health, effective_reason, quarantine_id = row[_DEVICE_COLUMNS:]
    if state is None:
        return None
    return DeviceGovernance(
        state=state,
        state_since=since,
        effective_health=effective_health,
        effective_reason=effective_reason,
        quarantine_id=quarantine_id,
    )


_G = device_governance.c
_GOV_COLUMNS = (
    _G.state.label("g_state"),
    _G.state_since.label("g_state_since"),
    _G.effective_health.label("g_effective_health"),
    _G.effective_reason.label("g_effective_reason"),
    _G.quarantine_id.label("g_quarantine_id"),
)
_DEVICE_COLUMNS = len(devices.c)
_I = device_identities.c
_PHYSICAL = (IdentityStatus.RESOLVED.value, IdentityStatus.REPORTED.value)


def _with_governance(source: Any) -> Any:
    """``source`` (``devices`` or a join with it) outer-joined with the device's identity and
    the governance of its physical identity (see the module docstring)."""
    c = devices.c
    governed_as = case((_I.status.in_(_PHYSICAL), _I.device_id), else_=c.resource_id)
    return source.outerjoin(
        device_identities, and_(_I.node == c.node, _I.resource_id == c.resource_id)
    ).outerjoin(device_governance, and_(_G.node == c.node, _G.resource_id == governed_as))


_DEVICE_SELECTED: Final = tuple(
    cast(c, Text).label(c.name) if c.name == "allocations" else c for c in devices.c
)
"""``devices``' columns in order, ``allocations`` as its JSON text: a Pod's devices share one
value, which :func:`~.rows.records_from_rows` then decodes once (the jsonb decoder would parse
it again for every row)."""
_JOINED: Final = select(*_DEVICE_SELECTED, *_GOV_COLUMNS).select_from(_with_governance(devices))
"""Built once: a statement is immutable, and building it costs more than running it."""
_ONE_DEVICE: Final = _JOINED.where(
    devices.c.node == bindparam("node"), devices.c.resource_id == bindparam("rid")
)


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, str | bytes):
        value = orjson.loads(value)
    return dict(value) if isinstance(value, dict) else {}


class GovernanceReads:
    """Read helpers on the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    @property
    def options(self) -> dict[str, Any]:
        """Execution options that point a statement at this projection's schema."""
        return self._options

    async def _fetch(self, stmt: Executable) -> list[Any]:
        async with self._engine.connect() as conn:
            result = await conn.execute(stmt, execution_options=self._options)
            return list(result)

    # --- devices with their governance ----------------------------------------------------

    def joined(self) -> Any:
        """``devices`` with the governance columns of :meth:`governed` (a ``select``)."""
        return _JOINED

    def governed(self, rows: Sequence[Any]) -> list[GovernedDevice]:
        """The rows of a :meth:`joined` statement as :class:`GovernedDevice` objects."""
        plain = [tuple(r) for r in rows]  # by position: a row's ``_mapping`` costs ~9 us
        records = records_from_rows(t[:_DEVICE_COLUMNS] for t in plain)
        return [
            GovernedDevice(record, _governance_at(t))
            for record, t in zip(records, plain, strict=True)
        ]

    async def list_devices(
        self,
        filters: DeviceFilters,
        state: GovState | None,
        limit: int,
        after: DeviceKey | None,
    ) -> GovernedPage:
        """Like :meth:`DeviceReads.list_devices
        <services.adapters.projection.reads_devices.DeviceReads.list_devices>` (the same
        :func:`~services.adapters.projection.reads_devices.device_filter_clauses`), each device
        with its governance (``None`` when the governor has not seen it); ``state`` keeps the
        devices in that governance state."""
        c = devices.c
        stmt = (
            self.joined()
            .where(*device_filter_clauses(filters, after))
            .order_by(c.node, c.resource_id)
            .limit(limit + 1)
        )
        if state is not None:
            stmt = stmt.where(_G.state == state.value)
        items = self.governed(await self._fetch(stmt))
        if len(items) > limit:
            return GovernedPage(items[:limit], items[limit - 1].record.key)
        return GovernedPage(items, None)

    async def get_device(self, node: str, resource_id: str) -> GovernedDevice | None:
        """One device with its governance, or ``None`` when the directory has no such row."""
        async with self._engine.connect() as conn:
            result = await conn.execute(
                _ONE_DEVICE, {"node": node, "rid": resource_id}, execution_options=self._options
            )
            items = self.governed(list(result))
        return items[0] if items else None

    async def node_governance(self, node: str) -> dict[str, DeviceGovernance]:
        """Governance of the directory devices of ``node`` the governor knows, by the resourceID
        the directory holds them under (joined on their physical identity)."""
        c = devices.c
        stmt = (
            select(c.resource_id, *_GOV_COLUMNS)
            .select_from(_with_governance(devices))
            .where(c.node == node)
        )
        result = {}
        for row in await self._fetch(stmt):
            gov = _governance(row._mapping)
            if gov is not None:
                result[row.resource_id] = gov
        return result

    async def device_known(self, node: str, resource_id: str) -> bool:
        """True when the directory or the governor knows the device."""
        in_devices = select(devices.c.node).where(
            devices.c.node == node, devices.c.resource_id == resource_id
        )
        in_governance = select(_G.node).where(_G.node == node, _G.resource_id == resource_id)
        return bool(await self._fetch(in_devices.union_all(in_governance).limit(1)))

    # --- commands and quarantines ---------------------------------------------------------

    async def command(self, command_id: str) -> CommandOutcome | None:
        c = governance_commands.c
        rows = await self._fetch(select(governance_commands).where(c.command_id == command_id))
        if not rows:
            return None
        r = rows[0]
        return CommandOutcome(
            r.command_id, r.action, r.actor, r.accepted, r.reason, r.seq, r.request_fingerprint
        )

    async def command_quarantine_id(self, command_id: str) -> str | None:
        """The ``quarantineID`` the governor's ``CommandAccepted`` decision of the command names
        (the quarantine it created, extended or released), or ``None``."""
        d = governance_decisions.c
        stmt = (
            select(d.payload)
            .where(
                d.kind == DecisionKind.COMMAND_ACCEPTED.value,
                d.payload["details"]["commandID"].astext == command_id,
            )
            .limit(1)
        )
        for (payload,) in await self._fetch(stmt):
            details = _json(payload).get("details")
            value = details.get("quarantineID") if isinstance(details, dict) else None
            if isinstance(value, str):
                return value
        return None

    async def quarantine(self, quarantine_id: str) -> dict[str, Any] | None:
        c = quarantines.c
        rows = await self._fetch(select(quarantines).where(c.quarantine_id == quarantine_id))
        return dict(rows[0]._mapping) if rows else None

    async def list_quarantines(
        self, filters: QuarantineFilters, limit: int, after: QuarantineCursor | None
    ) -> QuarantinePage:
        """Quarantines matching every filter, newest first (``created_at``, then id, both
        descending), keyset-paginated like the devices."""
        c = quarantines.c
        stmt = (
            select(quarantines)
            .order_by(c.created_at.desc(), c.quarantine_id.desc())
            .limit(limit + 1)
        )
        if filters.status is not None:
            stmt = stmt.where(c.status == filters.status)
        if filters.kind is not None:
            stmt = stmt.where(c.kind == filters.kind)
        if filters.node is not None:
            stmt = stmt.where(c.node == filters.node)
        if filters.resource_id is not None:
            stmt = stmt.where(c.resource_id == filters.resource_id)
        if after is not None:
            stmt = stmt.where(tuple_(c.created_at, c.quarantine_id) < tuple_(*after))
        items = [dict(r._mapping) for r in await self._fetch(stmt)]
        if len(items) > limit:
            last = items[limit - 1]
            return QuarantinePage(items[:limit], (last["created_at"], last["quarantine_id"]))
        return QuarantinePage(items, None)

    # --- timeline ---------------------------------------------------------------------------

    async def device_decisions(self, node: str, resource_id: str, limit: int) -> list[DecisionRow]:
        """The newest ``limit`` decisions about the device, newest first."""
        c = governance_decisions.c
        stmt = (
            select(governance_decisions)
            .where(c.node == node, c.resource_id == resource_id)
            .order_by(c.seq.desc(), c.idx.desc())
            .limit(limit)
        )
        return [
            DecisionRow(r.seq, r.idx, r.kind, r.at, r.incident, _json(r.payload))
            for r in await self._fetch(stmt)
        ]

    # --- fleet --------------------------------------------------------------------------------

    async def fleet_status(self) -> FleetStatus:
        """The ``governor_fleet`` row, devices by governance state (every state, zeros
        included), active (or recovering) quarantines and nodes with a lost heartbeat."""
        f = governor_fleet.c
        fleet = await self._fetch(select(governor_fleet).where(f.id == 1))
        by_state = {state.value: 0 for state in GovState}
        for state_value, count in await self._fetch(
            select(_G.state, func.count()).group_by(_G.state)
        ):
            by_state[state_value] = count
        q = quarantines.c
        [(active,)] = await self._fetch(
            select(func.count()).select_from(quarantines).where(q.status.in_(HOLDING_STATUSES))
        )
        n = governor_nodes.c
        [(lost,)] = await self._fetch(
            select(func.count()).select_from(governor_nodes).where(n.heartbeat_lost.is_(True))
        )
        row = fleet[0] if fleet else None
        return FleetStatus(
            seen=row is not None,
            watermark=None if row is None else row.watermark,
            breaker_open=False if row is None else row.breaker_open,
            automation_paused=False if row is None else row.automation_paused,
            snapshot={} if row is None else _json(row.snapshot),
            by_state=by_state,
            active_quarantines=int(active),
            nodes_heartbeat_lost=int(lost),
        )
