"""``?wait=<seconds>``: waiting for the governor's decision of a command this API appended.

:data:`Wait` is the query parameter of every governance ``POST`` (0 to
:data:`MAX_WAIT_SECONDS`, finite; 422 otherwise). :func:`wait_for_outcome` polls the projection's
``governance_commands`` (where the governor records each ``CommandAccepted``/``CommandRejected``)
with a delay doubling from 50 ms to at most 500 ms, until the outcome is there or the time is up.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Final

import structlog
from fastapi import Query

from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.reads_governance import CommandOutcome, GovernanceReads

log = structlog.get_logger(__name__)

MAX_WAIT_SECONDS: Final = 30.0
_POLL_FIRST, _POLL_MAX = 0.05, 0.5

Wait = Annotated[
    float,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description="Seconds to wait for the governor's decision (at most 30; 0: do not wait).",
    ),
]


async def wait_for_outcome(
    reads: GovernanceReads, command_id: str, seconds: float
) -> CommandOutcome | None:
    """Poll ``governance_commands`` until the command is decided (its outcome) or ``seconds``
    pass (None). A database error ends the wait with None (the command is in the log; it is
    merely undecided as far as we know); it is logged, not raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = _POLL_FIRST
    while True:
        try:
            outcome = await reads.command(command_id)
        except (DatabaseError, OSError) as exc:
            log.warning("cannot read the command outcome", command_id=command_id, error=repr(exc))
            return None
        if outcome is not None:
            return outcome
        left = deadline - loop.time()
        if left <= 0:
            return None
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_MAX)
