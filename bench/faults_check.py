"""What the fault campaign (:mod:`bench.faults`) checks after each round, against the input.

- :func:`count_observations`: the worker's ``device_history`` rows per
  ``(node, resourceID, statusVersion)`` against the fresh observations the input published so far:
  ``lost`` (an observation with no row), ``doubled`` (an observation with more than one row, or a
  row no fresh observation explains: a re-send applied).
- :func:`count_quarantines`: the ``quarantines`` rows against the ones the input implies
  (:mod:`bench.faults_input`): ``spurious_created`` (a quarantine the input does not imply),
  ``spurious_released`` (an implied one not ``active``), ``missing`` (an implied one absent).
- :func:`replay_verify`: ``devicestate replay --verify`` and ``--governance --verify`` as child
  processes on the worker's topics and schema: their difference counts (0 when identical).

Connection errors are not caught: a check runs once the worker has caught up and the stack is up.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import REPO_ROOT
from bench.faults_inject import module_argv
from bench.faults_input import ObservationKey, Round

_DIFFERENCES = re.compile(r"verify: (\d+) difference\(s\)")


@dataclass(frozen=True)
class ObservationCount:
    expected: int
    rows: int
    lost: int
    doubled: int


@dataclass(frozen=True)
class QuarantineCount:
    expected: int
    rows: int
    spurious_created: int
    spurious_released: int
    missing: int


async def count_observations(
    engine: Any, schema: str, expected: set[ObservationKey]
) -> ObservationCount:
    """``device_history`` of ``schema`` against ``expected`` (see the module docstring)."""
    from sqlalchemy import text

    from services.adapters.projection.tables import quoted_schema

    async with engine.connect() as conn:
        result = await conn.execute(
            text(
                "SELECT node, resource_id, status_version, count(*) FROM "
                f"{quoted_schema(schema)}.device_history WHERE kind = 'observed' "
                "GROUP BY node, resource_id, status_version"
            )
        )
        counts = {(r[0], r[1], int(r[2])): int(r[3]) for r in result}
    lost = sum(1 for key in expected if key not in counts)
    doubled = sum(n - 1 for n in counts.values() if n > 1)
    doubled += sum(n for key, n in counts.items() if key not in expected)
    return ObservationCount(len(expected), sum(counts.values()), lost, doubled)


async def count_quarantines(engine: Any, schema: str, round_: Round) -> QuarantineCount:
    """``quarantines`` of ``schema`` against the ones ``round_`` implies."""
    from sqlalchemy import text

    from services.adapters.projection.tables import quoted_schema

    async with engine.connect() as conn:
        result = await conn.execute(
            text(f"SELECT quarantine_id, status FROM {quoted_schema(schema)}.quarantines")
        )
        status = {r[0]: r[1] for r in result}
    implied = round_.quarantines
    return QuarantineCount(
        expected=len(implied),
        rows=len(status),
        spurious_created=sum(1 for q in status if q not in implied),
        spurious_released=sum(1 for q in implied if q in status and status[q] != "active"),
        missing=sum(1 for q in implied if q not in status),
    )


@dataclass(frozen=True)
class VerifyResult:
    differences: int
    exit_code: int
    seconds: float
    output: str


def replay_verify(env: dict[str, str], schema: str, *, governance: bool, log: Path) -> VerifyResult:
    """``devicestate replay [--governance] --verify --drop --schema <schema>`` with ``env`` (the
    worker's topics, live schema and policy); ``differences`` is what it printed (0 when it says
    identical, -1 when it could not run: exit code 2). Its output is appended to ``log``."""
    import os
    import time

    argv = [*module_argv("replay"), "--verify", "--drop", "--no-progress", "--schema", schema]
    if governance:
        argv.append("--governance")
    started = time.monotonic()
    done = subprocess.run(
        argv,
        env={**os.environ, **env, "DEVICESTATE_LOG_LEVEL": "WARNING"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(argv)}\n{output}\n")
    if done.returncode == 0 and "is identical to" in done.stdout:
        differences = 0
    elif (match := _DIFFERENCES.search(done.stdout)) is not None:
        differences = int(match.group(1))
    else:
        differences = -1
    return VerifyResult(differences, done.returncode, round(seconds, 2), output[-2000:])
