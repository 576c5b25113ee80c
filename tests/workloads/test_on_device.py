"""The ``WorkloadOnDevice`` facts derived from the health topic's log
(:mod:`services.domain.workloads.on_device`): when each is made, and that no batch split
changes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.adapters.projection.batch_plan import plan_batch
from services.domain.directory import DeviceKey, DeviceRecord
from services.domain.events import (
    DeviceHealthObserved,
    DeviceSource,
    Health,
    PodDevicesReleased,
    PodsListed,
    ReleaseReason,
)
from services.domain.log import LoggedEvent, LogPosition
from services.domain.migration.records import WorkloadOnDevice
from services.domain.tombstones import Tombstone, merged
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.fold import supersedes
from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.domain.workloads.on_device import (
    Rekey,
    WorkloadFacts,
    batch_workloads_on_devices,
    facts_of,
    workloads_on_devices,
)
from services.domain.workloads.owners import OwnerLink

T0 = datetime(2026, 12, 3, tzinfo=UTC)
NODE = "gpu-1"
JOB = OwnerLink("Job", "train", "job-uid", "batch/v1")


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def observe(pod: str, device: str, version: int | None, seconds: int) -> DeviceHealthObserved:
    return DeviceHealthObserved(
        node=NODE,
        namespace="ml",
        pod_name=pod,
        pod_uid=f"uid-{pod}",
        containers=(),
        resource_name="nvidia.com/gpu",
        resource_id=device,
        health=Health.HEALTHY,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=version,
        observed_at=at(seconds),
    )


def workload(
    pod: str,
    version: int | None,
    seconds: int,
    cls: MigrationClass = MigrationClass.CHECKPOINTED,
    age: int | None = 600,
) -> PodWorkloadObserved:
    return PodWorkloadObserved(
        node=NODE,
        namespace="ml",
        pod_name=pod,
        pod_uid=f"uid-{pod}",
        status_version=version,
        observed_at=at(seconds),
        chain=(JOB,),
        migration_class=cls,
        migration_source=MigrationSource.POD,
        checkpoint_max_age_seconds=age if cls is MigrationClass.CHECKPOINTED else None,
    )


def release(pod: str, version: int | None, seconds: int) -> PodDevicesReleased:
    return PodDevicesReleased(
        NODE, "ml", pod, f"uid-{pod}", ReleaseReason.DELETED, version, at(seconds)
    )


Record = DeviceHealthObserved | PodDevicesReleased | PodsListed | PodWorkloadObserved


def run(
    log: Sequence[Record], cuts: Sequence[int] = (), rekeys: Sequence[Rekey] = ()
) -> list[tuple[LogPosition, WorkloadOnDevice]]:
    """The facts of ``log`` written in batches split at ``cuts``, each batch seeing what the
    projection holds after the batches before it (as :meth:`ProjectionStore.apply_batch`)."""
    devices: dict[DeviceKey, DeviceRecord] = {}
    tombstones: dict[str, Tombstone] = {}
    stored: dict[str, WorkloadFacts] = {}
    names: dict[DeviceKey, str] = {}
    out: list[tuple[LogPosition, WorkloadOnDevice]] = []
    for start, end in pairwise(sorted({0, *cuts, len(log)})):
        batch = [(LogPosition("health", 0, i), log[i]) for i in range(start, end)]
        records = [LoggedEvent(p, e) for p, e in batch if not isinstance(e, PodWorkloadObserved)]
        workloads = [(p, e) for p, e in batch if isinstance(e, PodWorkloadObserved)]
        plan = plan_batch(devices, records, tombstones)
        mine = [r for r in rekeys if start <= r.position.offset < end]
        out += workloads_on_devices(dict(devices), plan.history, workloads, stored, names, mine)
        devices.update(plan.written)
        merged(tombstones, list(plan.tombstones.values()))
        for _, w in workloads:  # the guarded upsert of pod_workloads
            old = stored.get(w.pod_uid)
            if old is None or supersedes(w.status_version, old.status_version):
                stored[w.pod_uid] = facts_of(w)
        for r in mine:
            names[r.device] = r.resource_id
    return out


def test_a_workload_record_after_the_allocation_forwards_the_devices_the_pod_holds() -> None:
    log = [observe("a", "gpu-0", 10, 1), observe("a", "gpu-1", 10, 1), workload("a", 10, 2)]
    facts = run(log)
    assert [(p.offset, f.resource_id, f.present) for p, f in facts] == [
        (2, "gpu-0", True),
        (2, "gpu-1", True),
    ]
    fact = facts[0][1]
    assert fact.workload_uid == "job-uid" and fact.pod_uid == "uid-a"
    assert fact.migration_class == "checkpointed" and fact.checkpoint_max_age_seconds == 600
    assert fact.status_version == 10 and fact.observed_at == at(2)


def test_an_allocation_after_the_workload_record_is_forwarded_at_the_observation() -> None:
    facts = run([workload("a", 10, 1), observe("a", "gpu-0", 11, 2), observe("a", "gpu-0", 12, 3)])
    assert [(p.offset, f.status_version) for p, f in facts] == [(1, 11)]  # once: not a new holder


def test_the_same_facts_again_forward_nothing_new_facts_forward_again() -> None:
    log = [
        observe("a", "gpu-0", 10, 1),
        workload("a", 10, 2),
        workload("a", 11, 3),  # same facts, newer version: nothing
        workload("a", 9, 4, MigrationClass.SHARDED),  # older: ignored
        workload("a", 12, 5, MigrationClass.SHARDED),
    ]
    facts = run(log)
    assert [(p.offset, f.migration_class) for p, f in facts] == [
        (1, "checkpointed"),
        (4, "sharded"),
    ]


def test_a_bare_pod_is_its_own_workload_and_a_default_class_is_none() -> None:
    bare = replace(
        workload("a", 10, 1, MigrationClass.NON_RECOVERABLE),
        chain=(),
        migration_source=MigrationSource.DEFAULT,
    )
    ((_, fact),) = run([bare, observe("a", "gpu-0", 10, 2)])
    assert fact.workload_uid == "uid-a" and fact.migration_class is None


def test_a_release_forwards_present_false_with_a_version_the_governor_takes() -> None:
    log = [
        workload("a", 10, 1),
        observe("a", "gpu-0", 10, 2),
        release("a", 20, 3),
        workload("b", 30, 4),
        observe("b", "gpu-0", 30, 5),
        release("b", None, 6),  # unordered: the newest version known of the Pod
        release("a", 21, 7),  # holds nothing any more: nothing
    ]
    facts = run(log)
    assert [(p.offset, f.pod_uid, f.present, f.status_version) for p, f in facts] == [
        (1, "uid-a", True, 10),
        (2, "uid-a", False, 20),
        (4, "uid-b", True, 30),
        (5, "uid-b", False, 30),
    ]


def test_a_snapshot_that_lists_the_pod_no_more_forwards_present_false() -> None:
    snapshot = PodsListed(NODE, 50, at(3), pod_uids=("uid-z",))
    facts = run([workload("a", 10, 1), observe("a", "gpu-0", 10, 2), snapshot])
    assert [(f.present, f.status_version) for _, f in facts] == [(True, 10), (False, 50)]


def test_a_pod_without_a_workload_record_is_not_forwarded() -> None:
    assert run([observe("a", "gpu-0", 10, 1), release("a", 11, 2)]) == []


def test_devices_are_named_as_the_governor_keys_them() -> None:
    log = [workload("a", 10, 1), observe("a", "cdi-0", 10, 2), observe("x", "other", 1, 3)]
    resolved = Rekey(LogPosition("health", 0, 1), (NODE, "cdi-0"), "drv/pool/dev-0", at(2))
    identified = Rekey(
        LogPosition("health", 0, 2), (NODE, "cdi-0"), "drv/pool/dev-9", at(3), identified=True
    )
    facts = run(log, rekeys=[resolved, identified])
    assert [(p.offset, f.resource_id) for p, f in facts] == [
        (1, "drv/pool/dev-0"),  # as its HealthTransition
        (2, "drv/pool/dev-9"),  # identified later: forwarded again under the physical key
    ]
    assert facts[1][1].observed_at == at(3)


def _record(kind: int, pod: int, device: int, version: int, cls: int) -> Record:
    name = f"p{pod}"
    if kind == 0:
        return observe(name, f"gpu-{device}", version, version)
    if kind == 1:
        return workload(name, version, version, list(MigrationClass)[cls])
    if kind == 2:
        return release(name, version if cls else None, version)
    return PodsListed(NODE, version, at(version), pod_uids=(f"uid-p{cls}",))


logs = st.lists(
    st.builds(
        _record,
        st.integers(0, 3),
        st.integers(0, 2),
        st.integers(0, 2),
        st.integers(1, 40),
        st.integers(0, 2),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(log=logs, cuts=st.lists(st.integers(0, 25), max_size=6))
def test_no_batch_split_changes_the_facts(log: list[Record], cuts: list[int]) -> None:
    whole = run(log)
    assert run(log, [c for c in cuts if c <= len(log)]) == whole
    assert run(log, range(len(log))) == whole  # batch size 1


class NoRekeys:
    """An inventory plan whose rekeys must not be read."""

    @property
    def resolved(self) -> dict[LogPosition, object]:
        raise AssertionError("rekeys made for a batch without workload facts")

    identified: list[object] = []


def test_a_batch_without_workload_facts_makes_no_rekeys_and_no_facts() -> None:
    """Every fact names a Pod's workload facts: with none stored and no workload record in the
    batch, nothing is forwarded, and the rekeys are not made (issue 12: CPU per observation)."""
    records = [
        LoggedEvent(LogPosition("health", 0, i), observe("a", f"gpu-{i}", 10, 1)) for i in range(8)
    ]
    plan = plan_batch({}, records)
    inventory: Any = NoRekeys()
    assert batch_workloads_on_devices({}, plan.history, [], {}, {}, inventory) == []
    stored = {"uid-a": facts_of(workload("a", 9, 0))}
    with pytest.raises(AssertionError, match="rekeys made"):
        batch_workloads_on_devices({}, plan.history, [], stored, {}, inventory)
    facts = batch_workloads_on_devices({}, plan.history, [], stored, {}, None)
    assert facts == workloads_on_devices({}, plan.history, [], stored, {}, [])
    assert [f.resource_id for _, f in facts] == [f"gpu-{i}" for i in range(8)]
