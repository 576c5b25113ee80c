"""Which Pod of which workload holds which device: the ``WorkloadOnDevice`` facts the worker
forwards to the governance topic (issue 13), derived from the health topic's log alone.

Two records of the health topic meet here, both keyed by the Pod's node (so one partition holds
all of a Pod's records, in log order): the device observations, whose directory fold says which
Pods hold a device (:attr:`~services.domain.directory.DeviceRecord.allocations`), and the Pod's
``PodWorkloadObserved`` (its workload and migration class; the projection keeps the newest per
Pod UID, :mod:`.fold`). :func:`workloads_on_devices` walks a batch in log order and says, at the
position of the record that made it true:

- an allocation appears (an applied observation adds the Pod to the device) and the Pod's
  workload record is known: ``present`` true, ``status_version`` the observation's;
- a Pod's workload record arrives, supersedes the one held (:func:`.fold.supersedes`) and its
  facts (:func:`facts_of`: workload UID, class, checkpoint age, shard, name) differ from it, or
  there was none: ``present`` true for every device the Pod holds then, ``status_version`` the
  record's. So a Pod whose workload record comes after its observations is forwarded when the
  record arrives, joined with the devices it holds at that point of the log;
- an allocation goes (``PodDevicesReleased``, a ``PodsListed`` snapshot) of a Pod whose workload
  record is known: ``present`` false, ``status_version`` the release's (the snapshot's LIST
  version), or for an unordered release the newest version known of the Pod (the governor
  ignores a fact older than the one it holds).

A Pod whose workload record never arrives is never forwarded (it is not a workload the migration
policy can move). The device is named as the governor keys it: ``device_key`` gives the
physical ``device_id`` when the inventory resolved the device (or as reported), the reported
resourceID otherwise, as for ``HealthTransition``; an identification later in the log
(``DeviceIdentified``) forwards the Pods holding the device again under the physical key.

Everything is a function of the state at the batch's start (a prefix of the log) and the
batch's records in log order, so any batch split, and any number of workers (a partition has one
owner), gives the same facts at the same positions. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from services.domain.directory import Allocation, Change, DeviceKey, DeviceRecord
from services.domain.events import DeviceHealthObserved, Event, PodDevicesReleased, PodsListed
from services.domain.inventory.plan import InventoryPlan, forwards
from services.domain.log import LogPosition
from services.domain.migration.records import WorkloadOnDevice
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.fold import supersedes
from services.domain.workloads.migration import MigrationSource


@dataclass(frozen=True, slots=True)
class WorkloadFacts:
    """What a ``WorkloadOnDevice`` says of a Pod, from its newest ``PodWorkloadObserved`` (or
    its ``pod_workloads`` row). ``migration_class`` is the class's value when an annotation
    declared it, ``None`` for the default; ``status_version`` orders the Pod's records."""

    pod_uid: str
    namespace: str
    pod_name: str
    workload_uid: str
    migration_class: str | None
    checkpoint_max_age_seconds: int | None
    shard: str | None
    status_version: int | None

    def same_facts(self, other: WorkloadFacts) -> bool:
        """Whether ``other`` says the same of the Pod (versions aside)."""
        return replace(other, status_version=self.status_version) == self


def facts_of(record: PodWorkloadObserved) -> WorkloadFacts:
    """The :class:`WorkloadFacts` of a record: the workload is the top of the chain (the Pod
    itself for a bare Pod)."""
    top = record.workload
    declared = record.migration_source is not MigrationSource.DEFAULT
    return WorkloadFacts(
        pod_uid=record.pod_uid,
        namespace=record.namespace,
        pod_name=record.pod_name,
        workload_uid=record.pod_uid if top is None else top.uid,
        migration_class=record.migration_class.value if declared else None,
        checkpoint_max_age_seconds=record.checkpoint_max_age_seconds,
        shard=record.shard,
        status_version=record.status_version,
    )


@dataclass(frozen=True, slots=True)
class Rekey:
    """At ``position`` (event time ``at``, UTC) the governor's name of device ``device`` became
    ``resource_id``: an applied observation resolved it (``identified`` false), or a DRA object
    identified it after its observations (``identified`` true: the Pods holding it are
    forwarded again under the new name)."""

    position: LogPosition
    device: DeviceKey
    resource_id: str
    at: datetime
    identified: bool = False


HistoryEntry = tuple[LogPosition, Change, Event]
"""An effect of the directory fold of a batch, in log order (``BatchPlan.history``)."""


def _fact(
    device: DeviceKey,
    name: str,
    facts: WorkloadFacts,
    version: int | None,
    at: datetime,
    present: bool,
) -> WorkloadOnDevice:
    return WorkloadOnDevice(
        node=device[0],
        resource_id=name,
        workload_uid=facts.workload_uid,
        pod_uid=facts.pod_uid,
        namespace=facts.namespace,
        pod_name=facts.pod_name,
        migration_class=facts.migration_class,
        status_version=version,
        observed_at=at,
        checkpoint_max_age_seconds=facts.checkpoint_max_age_seconds,
        shard=facts.shard,
        present=present,
    )


def _newest(*versions: int | None) -> int | None:
    known = [v for v in versions if v is not None]
    return max(known) if known else None


def rekeys(inventory: InventoryPlan | None, history: Sequence[HistoryEntry]) -> list[Rekey]:
    """The governor's names the batch's inventory fold gave its devices: per applied observation
    of ``history`` the identity it was resolved to (the name its ``HealthTransition`` carries),
    and per identification after the observations the physical device. None without an
    inventory (the devices keep their resourceIDs)."""
    if inventory is None:
        return []
    out = []
    for position, _, event in history:
        identity = inventory.resolved.get(position)
        if identity is not None and isinstance(event, DeviceHealthObserved):
            name = identity.device_id if forwards(identity) else event.resource_id
            out.append(Rekey(position, event.device_key, name, event.observed_at))
    out.extend(
        Rekey(r.position, (r.node, r.resource_id), r.identity.device_id, r.at, identified=True)
        for r in inventory.identified
    )
    return out


Step = Rekey | PodWorkloadObserved | tuple[Change, Event]


def workloads_on_devices(
    current: Mapping[DeviceKey, DeviceRecord],
    history: Sequence[HistoryEntry],
    workloads: Sequence[tuple[LogPosition, PodWorkloadObserved]],
    stored: Mapping[str, WorkloadFacts],
    names: Mapping[DeviceKey, str] | None = None,
    rekeys: Iterable[Rekey] = (),
) -> list[tuple[LogPosition, WorkloadOnDevice]]:
    """The ``WorkloadOnDevice`` facts of one batch, each with the position of the record that
    made it, in log order (the module docstring says when).

    ``current``: the devices at the batch's start that the batch touches, and every device the
    Pods of ``workloads`` hold then. ``history``: the directory fold's effects of the batch's
    records after the recorded offsets, in log order (several for one release or snapshot, in
    their order). ``workloads``: the batch's ``PodWorkloadObserved`` records after the recorded
    offsets, in log order. ``stored``: by Pod UID, the facts the projection held at the batch's
    start for the Pods of ``current``, ``history`` and ``workloads``. ``names``: the governor's
    name of a device at the batch's start (absent: its resourceID); ``rekeys``: its changes in
    the batch (a rekey counts before the other effects of its position)."""
    if not stored and not workloads:
        return []  # every fact names a Pod's workload facts, and none is known or arrives
    holders: dict[DeviceKey, dict[str, Allocation]] = {
        key: {a.pod_uid: a for a in record.allocations} for key, record in current.items()
    }
    known: dict[str, WorkloadFacts] = dict(stored)
    name: dict[DeviceKey, str] = dict(names or {})
    steps: list[tuple[LogPosition, int, Step]] = [(r.position, 0, r) for r in rekeys]
    steps.extend((p, 1, (c, e)) for p, c, e in history)
    steps.extend((p, 2, w) for p, w in workloads)
    # stable: a position's changes keep their order; plain tuples compare in C
    steps.sort(key=lambda s: (s[0].topic, s[0].partition, s[0].offset, s[0].index, s[1]))
    out: list[tuple[LogPosition, WorkloadOnDevice]] = []

    def named(key: DeviceKey) -> str:
        return name.get(key, key[1])

    for position, _, item in steps:
        if isinstance(item, Rekey):
            name[item.device] = item.resource_id
            if item.identified:
                for pod_uid, allocation in sorted(holders.get(item.device, {}).items()):
                    facts = known.get(pod_uid)
                    if facts is not None:
                        version = _newest(allocation.status_version, facts.status_version)
                        fact = _fact(item.device, item.resource_id, facts, version, item.at, True)
                        out.append((position, fact))
        elif isinstance(item, PodWorkloadObserved):
            old = known.get(item.pod_uid)
            if old is not None and not supersedes(item.status_version, old.status_version):
                continue
            new = facts_of(item)
            known[item.pod_uid] = new
            if old is not None and old.same_facts(new):
                continue
            for key in sorted(k for k, pods in holders.items() if item.pod_uid in pods):
                if key[0] == item.node:
                    fact = _fact(key, named(key), new, item.status_version, item.observed_at, True)
                    out.append((position, fact))
        else:
            change, event = item
            before = holders.get(change.key, {})
            after = {a.pod_uid: a for a in change.record.allocations}
            holders[change.key] = after
            if len(after) == 1 and len(before) == 1 and after.keys() == before.keys():
                continue  # the same Pod holds the device: nothing appears or goes
            for pod_uid in sorted(after.keys() - before.keys()):
                facts = known.get(pod_uid)
                if facts is not None:
                    version = after[pod_uid].status_version
                    fact = _fact(
                        change.key, named(change.key), facts, version, event.observed_at, True
                    )
                    out.append((position, fact))
            for pod_uid in sorted(before.keys() - after.keys()):
                facts = known.get(pod_uid)
                if facts is None:
                    continue
                version = (
                    event.status_version
                    if isinstance(event, PodDevicesReleased | PodsListed)
                    else None
                )
                if version is None:
                    version = _newest(before[pod_uid].status_version, facts.status_version)
                fact = _fact(
                    change.key, named(change.key), facts, version, event.observed_at, False
                )
                out.append((position, fact))
    return out


def batch_workloads_on_devices(
    current: Mapping[DeviceKey, DeviceRecord],
    history: Sequence[HistoryEntry],
    workloads: Sequence[tuple[LogPosition, PodWorkloadObserved]],
    stored: Mapping[str, WorkloadFacts],
    names: Mapping[DeviceKey, str] | None,
    inventory: InventoryPlan | None,
) -> list[tuple[LogPosition, WorkloadOnDevice]]:
    """:func:`workloads_on_devices` with the :func:`rekeys` of ``inventory``, made only when a
    fact can come of them (a Pod's workload facts are stored or in the batch): a batch of
    Pods without workload records costs nothing here."""
    if not stored and not workloads:
        return []
    return workloads_on_devices(
        current, history, workloads, stored, names, rekeys(inventory, history)
    )
