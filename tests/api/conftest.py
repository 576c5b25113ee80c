"""Fixtures of the governance API tests: tokens per role, a private single-partition governance
topic on the real broker, an API client factory, and helpers that write the governance projection
the way the governor would (tests simulate the governor; the API only reads these tables)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any
from uuid import uuid4

import httpx
import orjson
import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import (
    device_governance,
    governance_commands,
    governance_decisions,
    governor_fleet,
    governor_nodes,
    quarantines,
)
from services.adapters.projection.tables import in_schema
from services.domain.governance.input_codec import decode_input
from services.domain.governance.inputs import OperatorCommand
from services.processes.api.app import create_app
from services.runtime.config import Settings
from services.runtime.tokens import token_entry
from tests.conftest import T0

TOKENS = {
    "viewer": "viewer-token-0123456789",
    "operator": "operator-token-0123456789",
    "admin": "admin-token-0123456789",
}
"""Plain tokens of the test principals ``vic`` (viewer), ``olga`` (operator), ``ada`` (admin)."""
NAMES = {"viewer": "vic", "operator": "olga", "admin": "ada"}


def tokens_json() -> str:
    return orjson.dumps([token_entry(NAMES[r], r, t) for r, t in TOKENS.items()]).decode()


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


@pytest.fixture
async def governance_topic(kafka_admin: Any, kafka_bootstrap: str) -> AsyncIterator[str]:
    """A private single-partition governance topic (made by the service's ``ensure_topics``, as
    the API checks it on start), deleted afterwards."""
    from services.adapters.kafka.topics import TopicRole, ensure_topics

    name = f"t{uuid4().hex[:12]}.governance"
    kafka = Settings(kafka_bootstrap_servers=kafka_bootstrap, governance_topic=name)
    await ensure_topics(kafka, (TopicRole.GOVERNANCE,))
    try:
        yield name
    finally:
        await kafka_admin.delete_topics([name])


@pytest.fixture
def api_settings(
    database_url: str, fresh_schema: str, governance_topic: str, kafka_bootstrap: str
) -> Settings:
    # These tests read right after they write: off, the point GET reads PostgreSQL. The copy
    # and its freshness bound are tested in test_warm_devices.py (and served to schemathesis).
    return Settings(
        database_url=database_url,
        database_schema=fresh_schema,
        governance_topic=governance_topic,
        kafka_bootstrap_servers=kafka_bootstrap,
        api_tokens=tokens_json(),
        api_read_cache=False,
    )


ApiFactory = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def make_api(api_settings: Settings) -> ApiFactory:
    """``async with make_api(clock=..., **setting_overrides) as client``: the app (lifespan run)
    behind an httpx client on the ASGI transport."""

    @asynccontextmanager
    async def make(
        clock: Callable[[], datetime] | None = None, **overrides: Any
    ) -> AsyncIterator[httpx.AsyncClient]:
        settings = api_settings.model_copy(update=overrides)
        app = create_app(settings) if clock is None else create_app(settings, clock=clock)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client,
        ):
            yield client

    return make


@pytest.fixture
async def gov_api(make_api: ApiFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_api() as client:
        yield client


class Governor:
    """Writes governance projection rows into the test's schema, as the governor would."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine = engine
        self.options = in_schema(schema)
        self.seq = 0

    async def _insert(self, table: Any, rows: list[dict[str, Any]]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(table), rows, execution_options=self.options)

    async def decide(
        self,
        command_id: str,
        action: str,
        accepted: bool,
        reason: str = "",
        actor: str = "olga",
        request_fingerprint: str | None = None,
    ) -> None:
        self.seq += 1
        await self._insert(
            governance_commands,
            [
                dict(
                    command_id=command_id,
                    action=action,
                    actor=actor,
                    accepted=accepted,
                    reason=reason,
                    seq=self.seq,
                    request_fingerprint=request_fingerprint,
                )
            ],
        )

    async def decision(
        self,
        seq: int,
        idx: int,
        kind: str,
        at: datetime,
        node: str | None,
        resource_id: str | None,
        **details: Any,
    ) -> None:
        payload = {
            "schema": 1,
            "type": kind,
            "id": f"{seq}.{idx}",
            "seq": seq,
            "index": idx,
            "at": at.isoformat().replace("+00:00", "Z"),
            "node": node,
            "resourceID": resource_id,
            "incident": details.pop("incident", None),
            "alert": None,
            "severity": None,
            "summary": details.pop("summary", ""),
            "details": details,
        }
        await self._insert(
            governance_decisions,
            [
                dict(
                    seq=seq,
                    idx=idx,
                    kind=kind,
                    at=at,
                    node=node,
                    resource_id=resource_id,
                    incident=payload["incident"],
                    payload=payload,
                )
            ],
        )

    async def quarantine(
        self, quarantine_id: str, node: str, resource_id: str, **fields: Any
    ) -> None:
        row: dict[str, Any] = dict(
            quarantine_id=quarantine_id,
            node=node,
            resource_id=resource_id,
            kind="system",
            status="active",
            reason="pod-status-unhealthy",
            actor="system",
            created_at=T0,
            confirmed_fault=True,
            fencing_token=0,
            recovery_attempts=0,
        )
        row.update(fields)
        await self._insert(quarantines, [row])

    async def device(
        self, node: str, resource_id: str, state: str, since: datetime, **fields: Any
    ) -> None:
        row: dict[str, Any] = dict(
            node=node,
            resource_id=resource_id,
            resource_name="nvidia.com/gpu",
            source="device-plugin",
            observed_health="Healthy",
            effective_health="Healthy",
            state=state,
            state_since=since,
            snapshot={},
        )
        row.update(fields)
        await self._insert(device_governance, [row])

    async def fleet(self, watermark: datetime | None, **fields: Any) -> None:
        row: dict[str, Any] = dict(
            id=1, watermark=watermark, breaker_open=False, automation_paused=False, snapshot={}
        )
        row.update(fields)
        await self._insert(governor_fleet, [row])

    async def node(self, node: str, heartbeat_lost: bool) -> None:
        await self._insert(
            governor_nodes, [dict(node=node, heartbeat_lost=heartbeat_lost, snapshot={})]
        )


@pytest.fixture
def governor(engine: AsyncEngine, fresh_schema: str) -> Governor:
    return Governor(engine, fresh_schema)


async def read_commands(
    bootstrap: str, topic: str, expected: int, seconds: float = 20.0
) -> list[tuple[bytes | None, OperatorCommand]]:
    """The first ``expected`` records of ``topic`` (keys and decoded commands)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    found: list[tuple[bytes | None, OperatorCommand]] = []
    try:
        async with asyncio.timeout(seconds):
            while len(found) < expected:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    for record in records:
                        command = decode_input(record.value)
                        assert isinstance(command, OperatorCommand)
                        found.append((record.key, command))
    finally:
        await consumer.stop()
    return found


# --- inventory (issue 4) ----------------------------------------------------------------------
# The health agent writes the inventory tables; these helpers write the same rows from the tests.
# Until Alembic revision 0003_inventory lands, the tables are created in the test's schema from
# the SQLAlchemy metadata (``checkfirst``: a migrated schema keeps its own).

INVENTORY_TABLES = (
    "inventory_objects",
    "node_resources",
    "node_labels",
    "device_identities",
    "inventory_conflicts",
)


def example_object(name: str) -> Any:
    """A ``../shared/examples/dra-*.json`` object parsed into its compact record."""
    from services.domain.inventory.objects import (
        parse_device_class,
        parse_resource_claim,
        parse_resource_slice,
    )
    from tests.conftest import SHARED_EXAMPLES

    raw = orjson.loads((SHARED_EXAMPLES / name).read_bytes())
    parse = {
        "ResourceSlice": parse_resource_slice,
        "ResourceClaim": parse_resource_claim,
        "DeviceClass": parse_device_class,
    }[raw["kind"]]
    return parse(raw)


def example_raw(name: str) -> dict[str, Any]:
    from tests.conftest import SHARED_EXAMPLES

    value: dict[str, Any] = orjson.loads((SHARED_EXAMPLES / name).read_bytes())
    return value


class InventoryWriter:
    """Writes inventory projection rows into the test's schema, as the health agent would."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine = engine
        self.schema = schema
        self.options = in_schema(schema)

    async def create_tables(self) -> None:
        import services.adapters.projection.inventory_tables  # noqa: F401 - registers the tables
        from services.adapters.projection.tables import metadata

        tables = [metadata.tables[name] for name in INVENTORY_TABLES]
        async with self.engine.begin() as conn:
            await conn.execution_options(**self.options)
            await conn.run_sync(lambda c: metadata.create_all(c, tables=tables, checkfirst=True))

    async def _insert(self, table: Any, rows: list[dict[str, Any]]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(table), rows, execution_options=self.options)

    async def objects(self, *objs: Any, deleted: bool = False, at: datetime = T0) -> None:
        """``inventory_objects`` rows of DRA records (compact JSON of ``object_to_json``)."""
        from services.adapters.projection.inventory_tables import inventory_objects
        from services.domain.inventory.events import InventoryKind, object_to_json, record_key
        from services.domain.inventory.objects import ResourceClaimInfo, ResourceSliceInfo

        rows = []
        for obj in objs:
            if isinstance(obj, ResourceSliceInfo):
                kind, key, node = (
                    InventoryKind.RESOURCE_SLICE,
                    f"{obj.driver}/{obj.pool}/{obj.name}",
                    obj.node,
                )
            elif isinstance(obj, ResourceClaimInfo):
                kind, key, node = (
                    InventoryKind.RESOURCE_CLAIM,
                    f"{obj.namespace}/{obj.name}",
                    obj.node,
                )
            else:
                kind, key, node = InventoryKind.DEVICE_CLASS, obj.name, None
            rows.append(
                dict(
                    kind=kind.value,
                    object_key=key,
                    record_key=record_key(obj),
                    node=node,
                    object=object_to_json(obj),
                    deleted=deleted,
                    observed_at=at,
                )
            )
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        async with self.engine.begin() as conn:
            stmt = pg_insert(inventory_objects).values(rows)
            stmt = stmt.on_conflict_do_update(
                index_elements=["kind", "object_key"],
                set_={c: stmt.excluded[c] for c in ("record_key", "node", "object", "deleted")},
            )
            await conn.execute(stmt, execution_options=self.options)

    async def node(
        self, node: str, capacity: dict[str, int], allocatable: dict[str, int] | None = None
    ) -> None:
        from services.adapters.projection.inventory_tables import node_resources

        await self._insert(
            node_resources,
            [
                dict(
                    node=node,
                    capacity=capacity,
                    allocatable=capacity if allocatable is None else allocatable,
                    observed_at=T0,
                )
            ],
        )

    async def identities(self, pairs: list[tuple[Any, Any]]) -> None:
        """``device_identities`` rows of ``(DeviceHealthObserved, Identity)`` pairs."""
        from services.adapters.projection.inventory_tables import device_identities

        await self._insert(
            device_identities,
            [
                dict(
                    node=event.node,
                    resource_id=event.resource_id,
                    device_id=identity.device_id,
                    owner=identity.owner.value,
                    status=identity.status.value,
                    uuid=identity.uuid,
                    candidates=list(identity.candidates),
                    reason=identity.reason,
                    observed_at=event.observed_at,
                )
                for event, identity in pairs
            ],
        )

    async def conflicts(self, conflicts: list[Any], active: bool = True) -> None:
        from services.adapters.projection.inventory_tables import inventory_conflicts

        await self._insert(
            inventory_conflicts,
            [
                dict(
                    kind=c.kind.value,
                    node=c.node,
                    subject=c.subject,
                    detail=c.detail,
                    active=active,
                    first_seen=T0,
                    last_seen=T0,
                )
                for c in conflicts
            ],
        )


@pytest.fixture
async def inventory_writer(engine: AsyncEngine, fresh_schema: str) -> InventoryWriter:
    writer = InventoryWriter(engine, fresh_schema)
    await writer.create_tables()
    return writer


@pytest.fixture
def make_inventory_api(database_url: str, fresh_schema: str) -> ApiFactory:
    """``async with make_inventory_api(**setting_overrides) as client``: the app on the test's
    schema (no governance topic: these tests only read)."""

    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
        values: dict[str, Any] = {
            "database_url": database_url,
            "database_schema": fresh_schema,
            "api_read_cache": False,  # reads right after writes, as api_settings
        }
        settings = Settings(**{**values, **overrides})
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client,
        ):
            yield client

    return make
