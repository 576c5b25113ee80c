"""The directory API application: ``create_app(settings)``.

The database engine and the command producer are created when the app starts (lifespan) and
closed when it stops; nothing connects at import time. The producer's first connection checks
(and, with ``DEVICESTATE_TOPICS_CREATE_MISSING``, creates) the event and governance topics: wrong
ones stop the app at start (:class:`~services.adapters.kafka.topics.TopicCheckError`, naming the
fix), or make writes 503 when Kafka only answered later. The API only reads the projection (the
stream worker and the governor write it); operator writes are commands appended to the governance
topic (:mod:`services.processes.api.command_submit`). ``create_app`` raises
:class:`~services.processes.api.auth.TokenConfigError` for an invalid token configuration, so a
misconfigured API never starts.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.adapters.projection.engine import create_engine
from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.failure_sql import FailureReads
from services.adapters.projection.migration_metrics_sql import MigrationMetricReads
from services.adapters.projection.reads_adoption import AdoptionReads
from services.adapters.projection.reads_adoption_report import AdoptionReportReads
from services.adapters.projection.reads_changes import ChangeReads
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.reads_governance import GovernanceReads
from services.adapters.projection.reads_inventory import InventoryReads
from services.adapters.projection.reads_migrations import MigrationReads
from services.adapters.projection.reads_node_facts import NodeFactReads
from services.adapters.projection.reads_workloads import WorkloadReads
from services.domain.events import now_utc
from services.processes.api import (
    routes_adoption,
    routes_adoption_report,
    routes_automation,
    routes_devices,
    routes_extender,
    routes_fleet_page,
    routes_governance,
    routes_inventory,
    routes_migration_evidence,
    routes_migrations,
    routes_ops,
    routes_quarantines,
    routes_workloads,
)
from services.processes.api.auth import Authenticator, describe
from services.processes.api.commands import CommandLogUnavailable, CommandPublisher
from services.processes.api.hardening import (
    EXTENDER_MAX_BODY_BYTES,
    MAX_BODY_BYTES,
    BodyLimitMiddleware,
    NulGuardMiddleware,
    validation_failed,
)
from services.processes.api.idempotency import KeyRegistry
from services.processes.api.migration_metrics import MigrationMetricsFollower
from services.processes.api.openapi import install_openapi
from services.processes.api.readiness import LagReader
from services.processes.api.routes_ops import GovernanceGaugeCache
from services.processes.api.warm_devices import WarmDevices
from services.processes.api.warm_devices import stop as stop_refresher
from services.processes.api.warm_node_facts import WarmNodeFacts
from services.runtime.config import ApiProcessSettings

DESCRIPTION = """\
Current health of every allocated device (KEP-4680 `allocatedResourcesStatus`), as the
event-sourced projection holds it.

**URL scheme.** A device is identified by `(node, resourceID)`. Node names never contain `/`;
resourceIDs often do (`gpu.example.com/pool-a/gpu-3`, CDI names), so the resourceID is always the
**last** part of a path and may contain `/` unescaped:
`/v1/nodes/{node}/devices/{resourceID}`, `/v1/nodes/{node}/history/{resourceID}`.
Percent-encode only what URLs require (`%`, `?`, `#`, spaces).

**JSON.** Field names are camelCase; times are RFC 3339 in UTC; `statusVersion` values are
decimal strings (Kubernetes resourceVersions exceed what JSON numbers hold exactly).
Lists are paged with `limit` and an opaque `cursor` (`nextCursor` of the previous page).
Errors carry a `detail` message (`ErrorOut`): 404 for an unknown node or device, 422 for invalid
parameters or bodies and for query parameters the endpoint does not take (`errors` lists each
`{loc, msg, type}`; the offending value is not echoed), 503 when the database cannot be read. 400 for a NUL character (`%00`) anywhere in the path or query; 413 for a request body
over 1 MiB (16 MiB for `/scheduler/filter`).

**Authentication.** `Authorization: Bearer <token>`; roles viewer < operator < admin. GETs need
no token unless `DEVICESTATE_API_ANONYMOUS_READ=false` (then viewer); writes need operator (break-
glass releases and breaker resets: admin). 401 (with `WWW-Authenticate: Bearer`) for a missing or
invalid token, 403 for too weak a role, checked before the body is read. `/healthz`, `/readyz`,
`/metrics` stay open.

**Governance writes are commands.** `POST` routes append an operator command to the governance
log and answer `202 {commandID, status: "pending"}` (503 when Kafka is unreachable); the governor
decides it. `?wait=<s>` (at most 30) waits for the decision: 201/200 accepted, 409 rejected with
the governor's reason. `GET /v1/commands/{commandID}` reads an outcome later. An
`Idempotency-Key` header is scoped to the token's principal (commandID `<token name>~<key>`):
a retry of the same request (method, path, JSON body) makes no second command and gets the first
one's commandID and outcome, concurrent retries included; the same key with another request is
409 with a `detail` naming the conflict. Another principal's use of a key is independent.
Body strings may not contain U+0000, other control characters (reasons: tab, LF and CR allowed)
or lone surrogates; `reason` is at most 1024 characters, `node` 253 bytes, `resourceID` 1024
bytes; `expiresAt` at most 366 days ahead, like `ttlSeconds`. `NaN`/`Infinity` are refused.
Quarantine IDs contain `/` and `@` and are written unescaped; actions come last:
`POST /v1/quarantines/{quarantineID}/extend`, `.../release`.

**Inventory** (issue 4). `/v1/inventory/devices` lists every device, idle ones included (DRA
devices of the ResourceSlices, device-plugin devices whose IDs Pods reported), keyed by
`(node, deviceID)` with the physical identity; `/v1/inventory/unseen` counts device-plugin
capacity never reported (plugins publish no IDs for idle devices); `/v1/inventory/conflicts`
lists data-quality findings. `/v1/capacity?view=node|pool|deviceClass|namespace` gives total,
allocated, idle, unavailable (quarantined, recovering, restricted, deferred, Unhealthy, tainted)
and fragmented counts; `/v1/capacity/divergence` compares what ResourceSlices advertise for a
DeviceClass's `extendedResourceName` with the Node's capacity.

**DRA adoption** (issue 16). `POST /v1/adoption` (operator) declares a pool's phase (`plugin`,
`canary`, `dra`, `rolled-back`) as a governance command; `GET /v1/adoption` gives each pool's
phase, history and the gate (`expand`, `hold`, `rollback`) with every reason and its figures. `GET /v1/adoption/report?class=` compares DRA
against the device plugin per pool: allocation success, stage times, fragmentation, device-hours
and job retries (issue 16 item 5).

**Workload migration** (issue 13). `GET /v1/migrations` lists the migrations of the workloads on
quarantined devices as the governor last decided them (`?phase=`); `GET /v1/migrations/{id}`
gives one with every decision about it; a migration executor (operator token) reports each step
with `POST /v1/migrations/{id}/reports` (lease requests, checkpoint, eviction, replacement), which
the governor decides on its event time under the lease's fencing token (`docs/migration.md`).

**Scheduler extender.** With `DEVICESTATE_SCHEDULER_EXTENDER=true`, `POST /scheduler/filter`
answers kube-scheduler's extender `filter` verb (no token: the scheduler sends none; off: 404).
It drops nodes whose only free devices of a requested device-plugin resource are quarantined or
restricted, passes nodes it knows nothing about, and reports internal errors in the result's
`Error` field with status 200 (configure the extender `ignorable: true` to fail open).
"""

log = structlog.get_logger(__name__)


async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """503 for a database that is unreachable or not migrated, instead of a bare 500."""
    log.warning("database read failed", path=request.url.path, error=repr(exc))
    return JSONResponse({"detail": f"database unavailable: {type(exc).__name__}"}, status_code=503)


async def command_log_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """503 for a write whose command Kafka did not take; reads are unaffected."""
    return JSONResponse(
        {"detail": f"command not recorded, retry later: {exc}"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


def create_app(settings: ApiProcessSettings, *, clock: Callable[[], datetime] = now_utc) -> FastAPI:
    """The FastAPI app serving the projection in ``settings.database_schema`` of
    ``settings.database_url``. The engine and the command producer are created on startup and
    closed on shutdown. ``clock`` (wall clock, UTC) serves staleness and expiry computations.

    Raises :class:`~services.processes.api.auth.TokenConfigError` for an invalid token configuration."""
    authenticator = Authenticator.from_settings(settings)
    if authenticator.entries:
        log.info("api tokens loaded", tokens=describe(authenticator.entries))
    else:
        log.warning("no api tokens configured: every write is refused (401)")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # No pre-ping: it costs a round trip per request. A connection broken by a database
        # restart fails one request with 503 and is then replaced by the pool.
        engine = create_engine(
            settings.database_url,
            pool_size=10,
            max_overflow=20,
            recycle_seconds=1800,
            orjson_rows=True,
        )
        app.state.store = DeviceReads(engine, settings.database_schema)
        app.state.reads = GovernanceReads(engine, settings.database_schema)
        app.state.inventory = InventoryReads(engine, settings.database_schema)
        app.state.adoption = AdoptionReads(engine, settings.database_schema)
        app.state.adoption_report = AdoptionReportReads(engine, settings.database_schema)
        app.state.workloads = WorkloadReads(engine, settings.database_schema)
        app.state.failures = FailureReads(engine, settings.database_schema)
        app.state.migrations = MigrationReads(engine, settings.database_schema)
        app.state.migration_metrics = MigrationMetricsFollower(
            MigrationMetricReads(engine, settings.database_schema)
        )
        publisher = CommandPublisher(settings)
        app.state.publisher = publisher
        app.state.lag = LagReader.of(settings)
        warm = refresher = None
        if settings.api_read_cache:
            warm = WarmDevices(
                ChangeReads(engine, settings.database_schema),
                poll_seconds=settings.api_read_cache_poll_seconds,
                max_devices=settings.api_read_cache_max_devices,
            )
            # Loaded before the first request is taken: a start-up's work, not the first GETs'.
            await warm.start()
            refresher = asyncio.create_task(warm.run(), name="api read cache")
        app.state.warm_devices = warm
        app.state.node_facts = NodeFactReads(engine, settings.database_schema)
        warm_facts = facts_refresher = None
        if settings.api_read_cache and settings.scheduler_extender:
            warm_facts = WarmNodeFacts(
                app.state.node_facts, poll_seconds=settings.api_read_cache_poll_seconds
            )
            await warm_facts.start()
            facts_refresher = asyncio.create_task(warm_facts.run(), name="extender read model")
        app.state.warm_node_facts = warm_facts
        try:
            await publisher.start()  # raises TopicCheckError: the topics are wrong
            yield
        finally:
            await stop_refresher(facts_refresher)
            await stop_refresher(refresher)
            await app.state.lag.close()
            await publisher.close()
            await engine.dispose()

    app = FastAPI(
        title="devicestate directory API",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.clock = clock
    app.state.authenticator = authenticator
    app.state.recent_commands = OrderedDict()
    app.state.idempotency_keys = KeyRegistry()
    app.state.governance_gauges = GovernanceGaugeCache()
    app.state.inventory_gauges = routes_inventory.InventoryGaugeCache()
    app.state.adoption_report_gauges = routes_adoption_report.ReportGaugeCache()
    app.state.extender_stats = routes_extender.ExtenderStats()
    app.state.warm_devices = None  # the lifespan starts it (api_read_cache)
    app.state.warm_node_facts = None  # likewise, with the scheduler extender
    app.add_exception_handler(RequestValidationError, validation_failed)
    app.add_exception_handler(DatabaseError, database_unavailable)
    app.add_exception_handler(OSError, database_unavailable)
    app.add_exception_handler(CommandLogUnavailable, command_log_unavailable)
    app.include_router(routes_devices.router)
    app.include_router(routes_quarantines.router)
    app.include_router(routes_automation.router)
    app.include_router(routes_governance.router)
    app.include_router(routes_inventory.router)
    app.include_router(routes_workloads.router)
    app.include_router(routes_adoption_report.router)
    app.include_router(routes_adoption.router)
    app.include_router(routes_migrations.router)
    app.include_router(routes_migration_evidence.router)
    app.include_router(routes_ops.router)
    app.include_router(routes_fleet_page.router)  # HTML: /ui/fleet
    if settings.scheduler_extender:  # off by default: the route does not exist (404)
        app.include_router(routes_extender.router)  # no token: the scheduler sends none
    # The last added runs first: NUL in the URL (400) before the body is read (413).
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=MAX_BODY_BYTES,
        overrides={"/scheduler/": EXTENDER_MAX_BODY_BYTES},
    )
    app.add_middleware(NulGuardMiddleware)
    install_openapi(app, anonymous_read=settings.api_anonymous_read)
    return app
