"""What changed in the directory since a point of PostgreSQL's transaction history: the reads
that keep the API's warm copy of the point GETs (:mod:`services.processes.api.warm_devices`)
current without any help from the writers.

A point GET serves a ``devices`` row joined with its ``device_identities`` row and the
``device_governance`` row of its physical identity (:mod:`.reads_governance`). Every row version
PostgreSQL stores carries ``xmin``, the id of the transaction that wrote it. A
:class:`Horizon` is the ``xmin`` of a snapshot: every transaction with a smaller id had ended
when the snapshot was taken, so every row written since (committed later) has ``xmin`` at or
after it. :meth:`ChangeReads.changed_since` reads, in one REPEATABLE READ snapshot, the
directory keys whose rows in any of the three tables have such an ``xmin`` (a governance row
maps to the devices governed as it), those devices with their governance, and the next horizon.
Rows of a transaction still running are not visible yet; they have ``xmin`` at or after the new
horizon, so the next call finds them. ``xmin`` is 32 bits and wraps: the comparison is modulo
2**32 within the window ``[horizon, snapshot xmax)``, which a few seconds of writes never fill.

Costs: a sequential scan of the three tables per call (about 5 ms per 20k devices on the
benchmark machine), so callers first compare :meth:`ChangeReads.snapshot_id` (one function
call, no table read): it only changes when some transaction of the server ended or began.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import text, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.reads_governance import GovernanceReads, GovernedDevice
from services.adapters.projection.tables import devices, quoted_schema
from services.domain.directory import DeviceKey

KEY_CHUNK: Final = 1000
"""Changed keys fetched per statement (an ``IN`` list of ``(node, resource_id)`` pairs)."""

READ_ONLY: Final = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
"""First statement of each read: one snapshot for the horizon and the rows."""

SNAPSHOT_ID: Final = text("SELECT CAST(pg_current_snapshot() AS text)")
"""The server's current snapshot (``xmin:xmax:running``) as text."""

XMIN_WINDOW: Final = """
    ((CAST(CAST({alias}xmin AS text) AS bigint) - :lo + 4294967296) % 4294967296)
      < ((bounds.hi - :lo + 4294967296) % 4294967296)
"""


@dataclass(frozen=True, slots=True)
class Horizon:
    """A snapshot's ``xmin`` (``pg_snapshot_xmin``, a 64-bit transaction id): every row
    written by a transaction that committed after the snapshot has ``xmin`` at or after it."""

    xid: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Devices read in one snapshot, and the horizon to read changes from next."""

    items: list[GovernedDevice]
    horizon: Horizon


class ChangeReads:
    """Whole-directory and changed-since reads of the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._governed = GovernanceReads(engine, schema)
        s = quoted_schema(schema)
        device_window = XMIN_WINDOW.format(alias="")
        self._changed_keys = text(
            f"""
            WITH snap AS (SELECT pg_current_snapshot() AS s),
            bounds AS (
                SELECT CAST(CAST(pg_snapshot_xmin(s) AS text) AS bigint) AS next_xid,
                       CAST(CAST(pg_snapshot_xmax(s) AS text) AS bigint) % 4294967296 AS hi
                FROM snap
            ),
            gov AS (
                SELECT node, resource_id FROM {s}.device_governance, bounds
                WHERE {XMIN_WINDOW.format(alias="device_governance.")}
            ),
            keys AS (
                SELECT node, resource_id FROM {s}.devices, bounds WHERE {device_window}
                UNION
                SELECT node, resource_id FROM {s}.device_identities, bounds WHERE {device_window}
                UNION
                SELECT node, resource_id FROM gov
                UNION
                SELECT i.node, i.resource_id FROM {s}.device_identities AS i
                JOIN gov ON gov.node = i.node AND gov.resource_id = i.device_id
            )
            SELECT (SELECT next_xid FROM bounds), keys.node, keys.resource_id
            FROM (SELECT 1) AS one LEFT JOIN keys ON true
            """
        )
        self._horizon = text(
            "SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint)"
        )
        self._snapshot_id = SNAPSHOT_ID

    async def snapshot_id(self) -> str:
        """The server's current snapshot as text (``xmin:xmax:running``): unchanged while no
        transaction began or ended anywhere on the server, hence while no row changed."""
        async with self._engine.connect() as conn:
            return str((await conn.execute(self._snapshot_id)).scalar_one())

    async def load(self, limit: int) -> Snapshot:
        """The first ``limit`` devices (by ``(node, resource_id)``) with their governance, and
        the horizon of the snapshot they were read in."""
        async with self._engine.begin() as conn:
            await conn.execute(READ_ONLY)
            horizon = Horizon(int((await conn.execute(self._horizon)).scalar_one()))
            c = devices.c
            stmt = self._governed.joined().order_by(c.node, c.resource_id).limit(limit)
            rows = await conn.execute(stmt, execution_options=self._governed.options)
            items = self._governed.governed(list(rows))
        return Snapshot(items, horizon)

    async def changed_since(
        self, horizon: Horizon, *, chunk: int = KEY_CHUNK
    ) -> tuple[set[DeviceKey], Snapshot]:
        """The directory keys whose device, identity or governance rows changed since
        ``horizon`` (see the module doc), the current state of those that are devices, and the
        next horizon, all from one snapshot; the devices are read ``chunk`` keys per statement
        (each statement's rows are decoded before the next is sent, so a smaller ``chunk``
        holds the event loop for less time at once)."""
        lo = horizon.xid % 4294967296
        async with self._engine.begin() as conn:
            await conn.execute(READ_ONLY)
            rows = list(await conn.execute(self._changed_keys, {"lo": lo}))
            next_horizon = Horizon(int(rows[0][0]))
            keys: set[DeviceKey] = {(r[1], r[2]) for r in rows if r[1] is not None}
            items: list[GovernedDevice] = []
            ordered = sorted(keys)
            c = devices.c
            for start in range(0, len(ordered), chunk):
                part: Sequence[DeviceKey] = ordered[start : start + chunk]
                stmt = self._governed.joined().where(
                    tuple_(c.node, c.resource_id).in_([tuple(k) for k in part])
                )
                result = await conn.execute(stmt, execution_options=self._governed.options)
                items.extend(self._governed.governed(list(result)))
        return keys, Snapshot(items, next_horizon)
