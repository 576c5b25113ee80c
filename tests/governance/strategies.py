"""Record builders and Hypothesis strategies for the governance core's tests.

Builders (``transition``, ``watermark``, ``heartbeat``, ``resources``, ``command``, ``lease``,
``report``) make governance-topic records with times given in seconds after :data:`T0`.

``governance_runs`` draws a whole governance topic over a few nodes and devices: health
transitions (random health, growing statusVersions with some duplicates and some stale, reordered
ones), per-partition watermarks, heartbeats, device-plugin counts, operator commands, recovery lease
requests and reports. Event time is realistic: each node's records come from one partition of the
device-health topic in time order, and a partition's watermark never passes a record that partition
forwards later; operator and executor records carry their own clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from services.domain.events import DeviceSource, Health
from services.domain.governance.device_state import GovState
from services.domain.governance.inputs import (
    CommandAction,
    GovernanceInput,
    HealthTransition,
    OperatorCommand,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
    Role,
    WatermarkAdvanced,
)
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


# --- builders -----------------------------------------------------------------------------------


def transition(
    node: str,
    resource_id: str,
    health: Health,
    version: int | None,
    t: float,
    *,
    resource_name: str = GPU,
    source: DeviceSource = DeviceSource.DEVICE_PLUGIN,
    raw_health: str | None = None,
    partition: int = 0,
    pods: tuple[str, ...] = ("ns/pod-0",),
) -> HealthTransition:
    return HealthTransition(
        node=node,
        resource_id=resource_id,
        resource_name=resource_name,
        source=source,
        health=health,
        status_version=version,
        observed_at=at(t),
        partition=partition,
        offset=0 if version is None else version,
        raw_health=raw_health,
        resource_claim="claim-0" if source is DeviceSource.DRA else None,
        pods=pods,
    )


def watermark(t: float, partition: int = 0, partitions: int = 1) -> WatermarkAdvanced:
    return WatermarkAdvanced(partition=partition, partitions=partitions, event_time=at(t))


def heartbeat(node: str, renewed: float, observed: float | None = None) -> NodeHeartbeat:
    return NodeHeartbeat(
        node=node, renewed_at=at(renewed), observed_at=at(renewed if observed is None else observed)
    )


def resources(
    node: str, capacity: dict[str, int], allocatable: dict[str, int], t: float
) -> NodeResourcesChanged:
    return NodeResourcesChanged(
        node=node,
        capacity=tuple(sorted(capacity.items())),
        allocatable=tuple(sorted(allocatable.items())),
        status_version=None,
        observed_at=at(t),
    )


def command(
    command_id: str,
    action: CommandAction,
    t: float,
    *,
    role: Role = Role.OPERATOR,
    actor: str = "alice",
    reason: str = "",
    node: str | None = None,
    resource_id: str | None = None,
    expires: float | None = None,
    break_glass: bool = False,
    quarantine_id: str | None = None,
) -> OperatorCommand:
    return OperatorCommand(
        command_id=command_id,
        action=action,
        actor=actor,
        role=role,
        requested_at=at(t),
        reason=reason,
        node=node,
        resource_id=resource_id,
        expires_at=None if expires is None else at(expires),
        break_glass=break_glass,
        quarantine_id=quarantine_id,
    )


def lease(node: str, resource_id: str, holder: str, t: float) -> RecoveryLeaseRequested:
    return RecoveryLeaseRequested(
        node=node, resource_id=resource_id, holder=holder, requested_at=at(t)
    )


def report(
    node: str,
    resource_id: str,
    stage: RecoveryStage,
    passed: bool,
    holder: str,
    token: int,
    t: float,
    detail: str = "",
) -> RecoveryReport:
    return RecoveryReport(
        node=node,
        resource_id=resource_id,
        stage=stage,
        passed=passed,
        holder=holder,
        fencing_token=token,
        reported_at=at(t),
        detail=detail,
    )


# --- policies -----------------------------------------------------------------------------------

SMALL_POLICY = GovernancePolicy(
    unknown_tolerance_seconds=20.0,
    unknown_tolerance_max_seconds=60.0,
    unknown_backoff_factor=2.0,
    unknown_backoff_reset_seconds=300.0,
    heartbeat_grace_seconds=30.0,
    flap_threshold=3,
    flap_window_seconds=120.0,
    node_escalation_share=0.5,
    node_escalation_min_devices=2,
    restrict_node_burst=2,
    restrict_node_refill_seconds=30.0,
    restrict_fleet_burst=4,
    restrict_fleet_refill_seconds=10.0,
    breaker_window_seconds=60.0,
    breaker_device_share=0.5,
    breaker_min_devices=4,
    breaker_node_share=0.6,
    breaker_min_nodes=2,
    recovery_stage_timeout_seconds=30.0,
    recovery_stability_seconds=40.0,
    recovery_holddown_seconds=50.0,
    recovery_lease_seconds=15.0,
)
"""Short windows and tight limits, so that timers fire and limits bite in generated runs."""

policies = st.builds(
    GovernancePolicy,
    unknown_tolerance_seconds=st.sampled_from([5.0, 20.0]),
    unknown_tolerance_max_seconds=st.sampled_from([20.0, 60.0]),
    unknown_backoff_factor=st.sampled_from([1.0, 2.0]),
    unknown_backoff_reset_seconds=st.just(300.0),
    heartbeat_grace_seconds=st.sampled_from([15.0, 40.0]),
    flap_threshold=st.sampled_from([2, 4]),
    flap_window_seconds=st.sampled_from([60.0, 200.0]),
    node_escalation_share=st.just(0.5),
    node_escalation_min_devices=st.just(2),
    restrict_node_burst=st.sampled_from([1, 2]),
    restrict_node_refill_seconds=st.sampled_from([10.0, 40.0]),
    restrict_fleet_burst=st.sampled_from([2, 3]),
    restrict_fleet_refill_seconds=st.sampled_from([5.0, 20.0]),
    breaker_window_seconds=st.just(60.0),
    breaker_device_share=st.sampled_from([0.3, 0.6]),
    breaker_min_devices=st.sampled_from([3, 5, 99]),
    breaker_node_share=st.just(0.6),
    breaker_min_nodes=st.sampled_from([2, 99]),
    recovery_probe=st.booleans(),
    recovery_canary=st.booleans(),
    recovery_stage_timeout_seconds=st.sampled_from([10.0, 30.0]),
    recovery_stability_seconds=st.sampled_from([10.0, 40.0]),
    recovery_holddown_seconds=st.sampled_from([0.0, 30.0]),
    recovery_lease_seconds=st.sampled_from([5.0, 15.0]),
)


# --- generated runs -----------------------------------------------------------------------------

NODES = ("node-a", "node-b", "node-c")
PARTITION_OF = {"node-a": 0, "node-b": 1, "node-c": 1}
PARTITIONS = 2
DEVICES: tuple[tuple[str, str, str, DeviceSource], ...] = (
    ("node-a", "GPU-0", GPU, DeviceSource.DEVICE_PLUGIN),
    ("node-a", "GPU-1", GPU, DeviceSource.DEVICE_PLUGIN),
    ("node-a", "drv/pool/gpu-2", "claim:gpu", DeviceSource.DRA),
    ("node-b", "GPU-0", GPU, DeviceSource.DEVICE_PLUGIN),
    ("node-b", "GPU-1", GPU, DeviceSource.DEVICE_PLUGIN),
    ("node-c", "GPU-0", GPU, DeviceSource.DEVICE_PLUGIN),
)
CAPACITY = {"node-a": 2, "node-b": 2, "node-c": 1}
HOLDERS = ("exec-1", "exec-2")
STAGES = list(RecoveryStage)
HEALTHS = [Health.HEALTHY, Health.HEALTHY, Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN]
KINDS = (
    ["transition"] * 6
    + ["duplicate", "stale"]
    + ["watermark"] * 5
    + ["heartbeat"] * 2
    + ["resources", "command", "command"]
    + ["lease"] * 2
    + ["report"] * 3
)


@dataclass(frozen=True)
class Generated:
    """A drawn governance topic and the policy to run it with."""

    policy: GovernancePolicy
    records: list[GovernanceInput]


@st.composite
def governance_runs(draw: st.DrawFn, min_records: int = 15, max_records: int = 60) -> Generated:
    """A governance topic: see the module docstring.

    Lease requests, reports and commands are steered by a shadow run of the governor (they
    mostly name devices in recovery or quarantined, with the running stage and the lease's
    holder and token, and sometimes a wrong one), so that recoveries really progress. The records
    themselves are plain data: the tests run them from scratch.
    """
    policy = draw(policies)
    shadow = GovernorState()
    records: list[GovernanceInput] = []
    clock = [0.0] * PARTITIONS  # per-partition event time: the latest record forwarded
    versions: dict[tuple[str, str], int] = {}
    sent: list[HealthTransition] = []
    command_ids: list[str] = []

    def now() -> float:
        return max(clock)

    for _ in range(draw(st.integers(min_records, max_records))):
        kind = draw(st.sampled_from(KINDS))
        if any(d.state is GovState.RECOVERING for d in shadow.devices.values()) and draw(
            st.booleans()
        ):
            kind = draw(st.sampled_from(["lease", "report", "report", "watermark"]))
        unleased = any(
            d.quarantine is not None
            and d.quarantine.recovery_stage in (RecoveryStage.PROBE, RecoveryStage.CANARY)
            and d.quarantine.lease_holder is None
            for d in shadow.devices.values()
        )
        if kind == "report" and unleased and draw(st.integers(0, 3)) > 0:
            kind = "lease"
        record: GovernanceInput | None = None
        node = draw(st.sampled_from(NODES))
        partition = PARTITION_OF[node]
        if kind in ("transition", "heartbeat", "resources"):
            clock[partition] += draw(st.sampled_from([0.0, 1.0, 3.0, 10.0, 25.0]))
        t = clock[partition]
        if kind == "transition":
            _, resource_id, name, source = draw(
                st.sampled_from([d for d in DEVICES if d[0] == node])
            )
            key = (node, resource_id)
            version: int | None = None
            if draw(st.integers(0, 9)) > 0:
                version = versions[key] = versions.get(key, 0) + draw(st.integers(1, 3))
            health = draw(st.sampled_from(HEALTHS))
            raw = "Degraded" if health is Health.UNKNOWN and draw(st.booleans()) else None
            record = transition(
                node,
                resource_id,
                health,
                version,
                t,
                resource_name=name,
                source=source,
                raw_health=raw,
                partition=partition,
            )
            sent.append(record)
        elif kind == "duplicate" and sent:
            record = draw(st.sampled_from(sent))
        elif kind == "stale" and sent:
            # A reordered observation: an older statusVersion of a device, any health.
            old = draw(st.sampled_from(sent))
            if old.status_version is not None and old.status_version > 1:
                record = transition(
                    old.node,
                    old.resource_id,
                    draw(st.sampled_from(HEALTHS)),
                    draw(st.integers(1, old.status_version - 1)),
                    (old.observed_at - T0).total_seconds(),
                    resource_name=old.resource_name,
                    source=old.source,
                    partition=old.partition,
                )
        elif kind == "watermark":
            clock[partition] += draw(st.sampled_from([0.0, 5.0, 15.0, 40.0]))
            record = watermark(clock[partition], partition, PARTITIONS)
        elif kind == "heartbeat":
            record = heartbeat(node, t - draw(st.sampled_from([0.0, 2.0])), t)
        elif kind == "resources":
            capacity = CAPACITY[node]
            allocatable = draw(st.sampled_from([capacity, capacity, capacity - 1, 0]))
            record = resources(node, {GPU: capacity}, {GPU: allocatable}, t)
        elif kind == "command":
            record = draw(_commands(shadow, command_ids, now()))
        elif kind == "lease":
            node, resource_id = draw(_device_in(shadow, recovering=True))
            record = lease(node, resource_id, draw(st.sampled_from(HOLDERS)), now())
        elif kind == "report":
            record = draw(_reports(shadow, now()))
        if record is not None:
            step(shadow, record, len(records), policy)
            records.append(record)
    return Generated(policy, records)


@st.composite
def _device_in(
    draw: st.DrawFn, shadow: GovernorState, *, recovering: bool = False, quarantined: bool = False
) -> tuple[str, str]:
    """A device, mostly one in recovery (or quarantined) in the shadow run when there is one."""
    wanted = sorted(
        key
        for key, d in shadow.devices.items()
        if (recovering and d.state is GovState.RECOVERING)
        or (quarantined and d.quarantine is not None)
    )
    if wanted and draw(st.integers(0, 4)) > 0:
        return draw(st.sampled_from(wanted))
    node, resource_id, _, _ = draw(st.sampled_from(DEVICES))
    return node, resource_id


@st.composite
def _reports(draw: st.DrawFn, shadow: GovernorState, now: float) -> RecoveryReport:
    node, resource_id = draw(_device_in(shadow, recovering=True))
    device = shadow.devices.get((node, resource_id))
    q = None if device is None else device.quarantine
    holder = draw(st.sampled_from(HOLDERS))
    token = draw(st.integers(1, 3))
    stage = draw(st.sampled_from(STAGES))
    if q is not None and draw(st.integers(0, 4)) > 0:
        # The running stage, under the lease (sometimes with a stale token or another holder).
        holder = q.lease_holder or holder
        token = max(1, q.fencing_token - draw(st.sampled_from([0, 0, 0, 1])))
        stage = q.recovery_stage or stage
    return report(
        node,
        resource_id,
        stage,
        draw(st.sampled_from([True, True, True, False])),
        holder,
        token,
        now,
        "generated",
    )


@st.composite
def _commands(
    draw: st.DrawFn, shadow: GovernorState, seen: list[str], now: float
) -> OperatorCommand:
    if seen and draw(st.integers(0, 7)) == 0:
        command_id = draw(st.sampled_from(seen))  # a client retry
    else:
        command_id = f"cmd-{len(seen)}"
        seen.append(command_id)
    action = draw(st.sampled_from(list(CommandAction)))
    if shadow.fleet.breaker_open and draw(st.booleans()):
        action = CommandAction.RESET_BREAKER
    if action is CommandAction.QUARANTINE:
        node, resource_id, _, _ = draw(st.sampled_from(DEVICES))
    else:
        node, resource_id = draw(_device_in(shadow, quarantined=True))
    # Extend/release may name the quarantine the operator saw: the active one, or an old one.
    device = shadow.devices.get((node, resource_id))
    quarantine_id = None
    if device is not None and device.quarantine is not None and draw(st.booleans()):
        quarantine_id = device.quarantine.quarantine_id
    elif draw(st.integers(0, 5)) == 0:
        quarantine_id = f"{node}/{resource_id}@1"
    return command(
        command_id,
        action,
        now,
        quarantine_id=quarantine_id,
        role=draw(st.sampled_from([Role.VIEWER, Role.OPERATOR, Role.ADMIN, Role.ADMIN])),
        actor=draw(st.sampled_from(["alice", "bob"])),
        reason=draw(st.sampled_from(["", "maintenance", "maintenance"])),
        node=node,
        resource_id=resource_id,
        expires=draw(st.one_of(st.none(), st.sampled_from([now + 20.0, now + 90.0, now - 1.0]))),
        break_glass=draw(st.integers(0, 3)) == 0,
    )
