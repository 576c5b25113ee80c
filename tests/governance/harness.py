"""A pure governance pipeline for tests: recorded stream -> watcher processing -> directory fold ->
governance records -> :func:`services.domain.governance.machine.step`. No Kafka, no database.

The stream's ``_CLOCK`` directives become watermarks (one partition), as the watcher's ticks do in
the product; Node objects become ``NodeResourcesChanged`` and Lease objects ``NodeHeartbeat``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson

from services.domain.codec import parse_resource_version, parse_time
from services.domain.directory import DeviceKey, DeviceRecord, apply_event
from services.domain.events import DeviceHealthObserved, Event
from services.domain.governance.decisions import Decision
from services.domain.governance.inputs import GovernanceInput, HealthTransition, WatermarkAdvanced
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.processor import WatchProcessor
from services.processes.watcher.watch_lines import ClockSet, PodChange, decode_watch_line

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
FIXED_TIME = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def transition_of(
    event: DeviceHealthObserved, record: DeviceRecord, offset: int
) -> HealthTransition:
    """The record the stream worker forwards for a directory transition."""
    return HealthTransition(
        node=event.node,
        resource_id=event.resource_id,
        resource_name=event.resource_name,
        source=event.source,
        health=event.health,
        status_version=event.status_version,
        observed_at=event.observed_at,
        partition=0,
        offset=offset,
        message=event.message,
        raw_health=event.raw_health,
        resource_claim=None if event.claim is None else event.claim.resource_claim_name,
        pods=tuple(sorted(f"{a.namespace}/{a.pod_name}" for a in record.allocations)),
    )


def node_resources(obj: dict, at: datetime) -> NodeResourcesChanged:  # type: ignore[type-arg]
    status = obj.get("status") or {}

    def ext(kind: str) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((k, int(v)) for k, v in (status.get(kind) or {}).items() if "/" in k))

    return NodeResourcesChanged(
        node=obj["metadata"]["name"],
        capacity=ext("capacity"),
        allocatable=ext("allocatable"),
        status_version=parse_resource_version(obj["metadata"].get("resourceVersion")),
        observed_at=at,
    )


@dataclass
class GovernanceRun:
    """Records fed to the governor and what it decided."""

    policy: GovernancePolicy = field(default_factory=GovernancePolicy)
    state: GovernorState = field(default_factory=GovernorState)
    directory: dict[DeviceKey, DeviceRecord] = field(default_factory=dict)
    records: list[GovernanceInput] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def feed(self, record: GovernanceInput) -> list[Decision]:
        decided = step(self.state, record, len(self.records), self.policy)
        self.records.append(record)
        self.decisions.extend(decided)
        return decided

    def observe(self, events: list[Event]) -> None:
        for event in events:
            for change in apply_event(self.directory, event):
                if change.changed:
                    self.directory[change.key] = change.record
                if change.transition:
                    assert isinstance(event, DeviceHealthObserved)
                    self.feed(transition_of(event, change.record, len(self.records)))

    def clock(self, now: datetime) -> None:
        self.feed(WatermarkAdvanced(partition=0, partitions=1, event_time=now))

    def kinds(self) -> list[str]:
        return [d.kind.value for d in self.decisions]


def run_stream(
    path: Path,
    policy: GovernancePolicy | None = None,
    *,
    drop_last_lines: int = 0,
    then_clock: list[datetime] | None = None,
) -> GovernanceRun:
    """Run a recorded stream (optionally without its last lines, then with extra clock moves)."""
    run = GovernanceRun(policy=policy or GovernancePolicy())
    processor = WatchProcessor()
    clock = HarnessClock(wall=lambda: FIXED_TIME)
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    if drop_last_lines:
        lines = lines[:-drop_last_lines]
    for number, line in enumerate(lines, start=1):
        item = decode_watch_line(line)
        if isinstance(item, ClockSet):
            clock.set(item.now)
            run.clock(item.now)
        elif isinstance(item, PodChange):
            outcome = processor.pod_event(
                item.kind, item.pod, item.raw, f"{path}:{number}", clock.now()
            )
            run.observe(outcome.events)
        else:
            try:
                obj = orjson.loads(line).get("object") or {}
            except orjson.JSONDecodeError:
                continue
            if obj.get("kind") == "Node":
                run.feed(node_resources(obj, clock.now()))
            elif obj.get("kind") == "Lease":
                run.feed(
                    NodeHeartbeat(
                        node=obj["metadata"]["name"],
                        renewed_at=parse_time(obj["spec"]["renewTime"]),
                        observed_at=clock.now(),
                    )
                )
    for now in then_clock or []:
        run.clock(now)
    return run
