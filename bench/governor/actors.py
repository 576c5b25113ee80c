"""The actors of the governor benchmark's log besides the fleet: the recovery executors, which
react to the governor's decisions (lease requests, stage reports), and the operator's scripted
commands. Functions of the log's writer (:class:`~bench.governor.generator.Generator`, seen
through :class:`LogWriter`: its random source, clock, schedule and the governor state it folds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from random import Random
from typing import Any, Protocol

from bench.governor.fleet import Gpu, Options
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.device_state import GovState, QuarantineKind
from services.domain.governance.inputs import CommandAction, GovernanceInput, OperatorCommand, Role
from services.domain.governance.state import GovernorState


class LogWriter(Protocol):
    """What the actors use of the generator (a protocol, so the generator can import them)."""

    opts: Options
    rng: Random
    state: GovernorState
    gpus: list[Gpu]
    commands: list[OperatorCommand]
    command_script: tuple[str, ...]

    def at(self, seconds: float, kind: str, *args: Any) -> None: ...

    def now(self) -> float: ...

    def emit(self, record: GovernanceInput, label: str) -> None: ...


def react(gen: LogWriter, decisions: Sequence[Decision]) -> None:
    """The recovery executors: lease requests after a probe/canary starts, reports after a
    grant; sometimes a competing request or a stale report."""
    rng, now, executors = gen.rng, gen.now(), gen.opts.executors
    for decision in decisions:
        if decision.kind is DecisionKind.RECOVERY_STAGE_STARTED:
            if decision.details.get("stage") not in ("probe", "canary"):
                continue
            holder = rng.randrange(executors)
            when = now + rng.uniform(1, 10)
            gen.at(when, "lease", decision.node, decision.resource_id, f"executor-{holder}")
            if rng.random() < 0.05:
                other = f"executor-{(holder + 1) % executors}"
                gen.at(when + 0.5, "lease", decision.node, decision.resource_id, other)
        elif decision.kind is DecisionKind.LEASE_GRANTED:
            d = decision.details
            token = int(d["fencingToken"])
            gen.at(
                now + rng.uniform(5, 45),
                "report",
                decision.node,
                decision.resource_id,
                d["stage"],
                d["holder"],
                token,
                rng.random() < 0.93,
            )
            if token > 1 and rng.random() < 0.05:
                gen.at(
                    now + rng.uniform(5, 45),
                    "report",
                    decision.node,
                    decision.resource_id,
                    d["stage"],
                    d["holder"],
                    token - 1,
                    True,
                )


def pick(gen: LogWriter, want: Callable[[Any], bool]) -> tuple[str, str] | None:
    """A device key (node, key) whose governance state satisfies ``want`` (random tries, then
    a scan in key order)."""
    devices = gen.state.devices
    if not devices:
        return None
    for _ in range(50):
        g = gen.gpus[gen.rng.randrange(len(gen.gpus))]
        device = devices.get((g.node, g.key))
        if device is not None and want(device):
            return device.key
    for key in sorted(devices):
        if want(devices[key]):
            return key
    return None


def command(gen: LogWriter, j: int, at: datetime) -> None:
    """Operator command ``j`` of the script (cycled), at event time ``at``."""
    kind = gen.command_script[j % len(gen.command_script)]
    rng = gen.rng

    def cmd(action: CommandAction, role: Role, key: tuple[str, str] | None, **kw: Any) -> None:
        command = OperatorCommand(
            command_id=f"cmd-{j:04d}",
            action=action,
            actor={Role.VIEWER: "victor", Role.OPERATOR: "olga", Role.ADMIN: "ada"}[role],
            role=role,
            requested_at=at,
            node=None if key is None else key[0],
            resource_id=None if key is None else key[1],
            **kw,
        )
        gen.commands.append(command)
        gen.emit(command, "")

    def available(device: Any) -> bool:
        return device.state is GovState.AVAILABLE

    def manual(device: Any) -> bool:
        q = device.quarantine
        return q is not None and q.kind is QuarantineKind.MANUAL

    def system(device: Any) -> bool:
        q = device.quarantine
        return q is not None and q.kind is QuarantineKind.SYSTEM

    expires = at + timedelta(seconds=rng.uniform(300, 1200))
    if kind in ("quarantine", "viewer"):
        role = Role.VIEWER if kind == "viewer" else Role.OPERATOR
        key = pick(gen, available)
        cmd(
            CommandAction.QUARANTINE,
            role,
            key,
            reason="ECC errors reported",
            expires_at=expires,
        )
    elif kind == "extend":
        key = pick(gen, manual)
        until = at + timedelta(seconds=2400)
        cmd(CommandAction.EXTEND, Role.OPERATOR, key, reason="waiting for RMA", expires_at=until)
    elif kind == "release-manual":
        cmd(CommandAction.RELEASE, Role.OPERATOR, pick(gen, manual), reason="replaced")
    elif kind == "release-system":  # rejected unless it passed probe and canary
        cmd(CommandAction.RELEASE, Role.OPERATOR, pick(gen, system), reason="looks fine")
    elif kind == "break-glass":
        key = pick(gen, system)
        cmd(CommandAction.RELEASE, Role.ADMIN, key, reason="vendor cleared it", break_glass=True)
    elif kind == "pause":
        cmd(CommandAction.PAUSE, Role.ADMIN, None, reason="maintenance window")
    elif kind == "resume":
        cmd(CommandAction.RESUME, Role.ADMIN, None, reason="maintenance over")
    elif kind == "reset-breaker":
        cmd(CommandAction.RESET_BREAKER, Role.ADMIN, None, reason="false alarm")
    elif kind == "retry" and gen.commands:
        previous = gen.commands[-1]  # a client retry: the same command id again
        gen.emit(previous, "")
    else:
        cmd(
            CommandAction.QUARANTINE,
            Role.OPERATOR,
            ("gpu-node-99999", "GPU-00000000-0000-0000-0000-000000000000"),
            reason="typo",
        )


# -- the loop -----------------------------------------------------------------------------
