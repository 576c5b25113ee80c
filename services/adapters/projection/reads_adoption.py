"""Reads of the DRA adoption pools (issue 16): the governor's ``AdoptionPhaseDeclared`` decisions
(``governance_decisions``, in log order) and its event time (``governor_fleet.watermark``). What
they mean is folded in the domain (:mod:`services.domain.governance.adoption`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Executable, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import governance_decisions, governor_fleet
from services.adapters.projection.tables import in_schema
from services.domain.governance.adoption import Declared, Retired, declaration_from_dict
from services.domain.governance.decisions import DecisionKind


class AdoptionReads:
    """Read helpers on the projection in ``schema``."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._options = in_schema(schema)

    async def _fetch(self, stmt: Executable) -> list[Any]:
        async with self._engine.connect() as conn:
            return list(await conn.execute(stmt, execution_options=self._options))

    async def declarations(self) -> list[Declared | Retired]:
        """Every accepted declaration and retirement, oldest first (the decision's ``at`` is its
        time), as :func:`~services.domain.governance.adoption.fold` takes them."""
        d = governance_decisions.c
        kinds = (DecisionKind.ADOPTION_DECLARED.value, DecisionKind.ADOPTION_RETIRED.value)
        rows = await self._fetch(
            select(d.seq, d.at, d.kind, d.payload).where(d.kind.in_(kinds)).order_by(d.seq, d.idx)
        )
        out: list[Declared | Retired] = []
        for seq, at, kind, payload in rows:
            details = payload.get("details", {})
            actor, reason = str(details.get("actor", "")), str(details.get("reason", ""))
            if kind == DecisionKind.ADOPTION_RETIRED.value:
                out.append(Retired(int(seq), at, actor, reason, str(details.get("pool"))))
                continue
            out.append(
                Declared(
                    seq=int(seq),
                    at=at,
                    actor=actor,
                    reason=reason,
                    declaration=declaration_from_dict(details.get("adoption")),
                )
            )
        return out

    async def verdicts(self) -> dict[str, tuple[str, datetime, str]]:
        """Per pool, the verdict of the governor's last ``AdoptionVerdictChanged`` decision, its
        event time and its id (``<seq>.<index>``); none for a pool retired since."""
        d = governance_decisions.c
        kinds = (DecisionKind.ADOPTION_VERDICT_CHANGED.value, DecisionKind.ADOPTION_RETIRED.value)
        rows = await self._fetch(
            select(d.seq, d.idx, d.at, d.kind, d.payload)
            .where(d.kind.in_(kinds))
            .order_by(d.seq, d.idx)
        )
        out: dict[str, tuple[str, datetime, str]] = {}
        for seq, idx, at, kind, payload in rows:
            details = payload.get("details", {})
            if kind == DecisionKind.ADOPTION_RETIRED.value:
                out.pop(str(details.get("pool")), None)
                continue
            out[str(details.get("pool"))] = (str(details.get("verdict")), at, f"{seq}.{idx}")
        return out

    async def event_time(self) -> datetime | None:
        """The governor's fleet watermark (UTC), ``None`` before it has one."""
        f = governor_fleet.c
        rows = await self._fetch(select(f.watermark).where(f.id == 1))
        return rows[0][0] if rows else None
