"""The inventory part of a health-topic batch, in memory (issue 4): pure, no I/O.

:class:`InventoryFold` owns an :class:`~services.domain.inventory.state.InventoryState` and the
active inventory conflicts. :meth:`InventoryFold.fold` takes a batch's records in log order and
returns an :class:`InventoryPlan`: the rows to upsert into the inventory tables
(:mod:`services.adapters.projection.inventory_tables`), the identity each applied observation resolved to,
and the conflicts raised or cleared (to forward to the governance topic). The worker
(:class:`services.adapters.projection.inventory_store.InventoryProjection`) and the replay run the same fold,
so replaying the log gives the same rows.

Per record, in order:

- ``InventoryObserved``: the object is applied to the state (its row upserted, a deletion kept as a
  tombstone) unless a newer record of the object (by resourceVersion) was folded already, which
  can happen when the object's records sit in two partitions (an older one changes no row); devices
  that left a ResourceSlice (and are in no other slice of its pool) raise ``vanished-from-slice``,
  devices present in a slice again clear it. A claim then re-resolves the aliases last reported
  with it, a slice the aliases of its devices (:meth:`InventoryState.reresolve`, stale records
  too: what they say of an allocation or a UUID is remembered): their rows are upserted, an
  alias resolved to a physical device after it was reported under its own resourceID is listed in
  :attr:`InventoryPlan.identified` (the worker tells the governor: ``DeviceIdentified``);
- ``NodeResourcesChanged``: the node's extended-resource capacity (row upserted);
- ``NodeLabelsChanged``: the node's labels (``node_labels`` row upserted, deleted on a removal;
  issue 16);
- ``DeviceHealthObserved`` the directory fold *applied* (others are skipped): its identity is
  resolved against what the inventory knows at that point (:meth:`InventoryState.resolve`); the
  identity the state keeps for ``(node, resourceID)`` is upserted into ``device_identities`` when
  it changed (an unresolved reading never replaces a resolved one, so the row always equals the
  state); ``ambiguous-resource-id`` and ``resource-id-reused`` are raised; an ambiguous alias that
  resolves cleanly clears its ``ambiguous-resource-id``.

The objects, node resources and identities the fold writes end the same for every interleaving of
the partitions that keeps each partition's order, and every batching
(:mod:`.resolution` says how; ``tests/inventory/test_fold_order.py`` checks it): an identity row's
``observed_at`` is its alias's first observation. What an identity was *at* a given observation
(what a HealthTransition carries) still depends on what had been read by then: the governor
merges the rest (``docs/inventory.md``). Conflicts are raised at the record that finds them, so
their times, and ``resource-id-reused``, may differ between interleavings.

A record that can change a node's ownership (its slices, its capacity, a device-plugin alias with
a GPU UUID, or a DeviceClass with an ``extendedResourceName`` for every node with a slice of its
drivers) re-checks ``plugin-and-dra`` for those nodes right after it
(:meth:`InventoryState.ownership_conflicts` of those nodes), raising what is new and clearing what
is gone. Checking after each record rather than once per batch makes the result independent of the
batch boundaries.

Conflict rows are keyed by ``(kind, node, subject)``. ``first_seen`` is the event time the conflict
was raised (the start of its current episode), ``last_seen`` the newest event time it was raised,
seen again or cleared. A conflict is reported in :attr:`InventoryPlan.changes` when it is raised
while not active and when it is cleared: never twice while it stays active. ``resource-id-reused``
is a finding about the past: it is cleared when its claim alias is forgotten.

Retention (:mod:`.expiry`): a claim alias (CDI form, one per claim) not observed for a week of
its partition's event time, and no longer allocated, is forgotten at a batch's end
(:meth:`InventoryFold.expire`: its row in :attr:`InventoryPlan.forgotten`, its conflicts cleared);
an observation of an alias lapsed meanwhile starts it afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from services.domain.events import DeviceHealthObserved, DeviceSource
from services.domain.inventory.adoption_facts import FactsTold
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.expiry import AliasExpiry, claim_alias
from services.domain.inventory.identity import Identity, IdentityStatus
from services.domain.inventory.objects import DeviceClassInfo, ResourceClaimInfo, ResourceSliceInfo
from services.domain.inventory.plan import (
    ConflictChange,
    IdentityResolved,
    InventoryPlan,
    forwards,
)
from services.domain.inventory.resolution import Alias
from services.domain.inventory.rows import (
    ConflictKey,
    ConflictRow,
    ObjectKey,
    Row,
    by_key,
    conflict_key,
    identity_from_row,
    identity_row,
    node_labels_row,
    node_resources_row,
    object_key,
    object_row,
)
from services.domain.inventory.state import Conflict, ConflictKind, InventoryState
from services.domain.log import LogPosition
from services.domain.node_events import NodeResourcesChanged
from services.domain.node_labels import NodeLabelsChanged

__all__ = [
    "ConflictChange",
    "ConflictKey",
    "ConflictRow",
    "IdentityResolved",
    "InventoryFold",
    "InventoryPlan",
    "ObjectKey",
    "Row",
    "by_key",
    "conflict_key",
    "forwards",
    "identity_from_row",
    "identity_row",
    "node_resources_row",
    "object_key",
    "object_row",
]

_DEVICE_PLUGIN = DeviceSource.DEVICE_PLUGIN
_AMBIGUOUS = ConflictKind.AMBIGUOUS_RESOURCE_ID.value
_REUSED = ConflictKind.RESOURCE_ID_REUSED.value


# --- the fold -----------------------------------------------------------------------------------


class InventoryFold:
    """The inventory state and the active conflicts; :meth:`fold` applies batches in log order."""

    def __init__(
        self,
        state: InventoryState | None = None,
        active: Iterable[ConflictRow] = (),
        expiry: AliasExpiry | None = None,
    ) -> None:
        self.state = state if state is not None else InventoryState()
        self.expiry = expiry if expiry is not None else AliasExpiry()
        self.active: dict[ConflictKey, ConflictRow] = {}
        self.told = FactsTold()  # the adoption-gate facts last put in a plan (issue 16)
        self._by_node: dict[str, set[ConflictKey]] = {}
        for row in active:
            if row.active:
                self._activate(row)

    def active_on(self, node: str, kind: ConflictKind | None = None) -> set[ConflictKey]:
        """Keys of the active conflicts on ``node`` (of ``kind`` when given)."""
        keys = self._by_node.get(node, set())
        if kind is None:
            return set(keys)
        return {k for k in keys if k[0] == kind.value}

    def fold(
        self,
        items: Iterable[tuple[LogPosition, object]],
        applied: Container[LogPosition],
        times: Mapping[LogPosition, datetime] | None = None,
    ) -> InventoryPlan:
        """Apply a batch's records (``(position, record)`` in log order; records of other types
        are skipped, and observations whose position is not in ``applied``) and return the plan
        of its writes. ``times``: the event time of the applied observations (their partition's
        running maximum, :func:`services.domain.event_time.effective_times`; else their
        ``observedAt``), which claim aliases are kept by (:mod:`.expiry`)."""
        plan = InventoryPlan()
        for position, record in items:
            if isinstance(record, DeviceHealthObserved):
                if position in applied:
                    at = record.observed_at if times is None else times.get(position)
                    self._observed(plan, position, record, at or record.observed_at)
            elif isinstance(record, InventoryObserved):
                self._inventory(plan, position, record)
            elif isinstance(record, NodeResourcesChanged):
                self._resources(plan, position, record)
            elif isinstance(record, NodeLabelsChanged):
                # issue 16: a Node's labels (row upserted; its newest record in log order wins,
                # and a Node's records share its partition); a removal deletes the row
                if record.removed:
                    plan.node_labels.pop(record.node, None)
                    plan.node_labels_removed.add(record.node)
                else:
                    plan.node_labels_removed.discard(record.node)
                    plan.node_labels[record.node] = node_labels_row(record)
        return plan

    # -- per record --------------------------------------------------------------------------------

    def expire(
        self,
        plan: InventoryPlan,
        watermarks: Mapping[int, datetime],
        allocated: Callable[[list[Alias]], set[Alias]],
        positions: Mapping[int, LogPosition],
    ) -> None:
        """At a batch's end: forget the claim aliases lapsed under ``watermarks`` (the
        watermark of each partition the batch read, after it) that ``allocated`` (given the
        lapsed ones, sorted) does not say a ``devices`` row still holds; ``positions``: each
        partition's last position in the batch (where the cleared conflicts are placed)."""
        lapsed = self.expiry.candidates(watermarks)
        if not lapsed:
            return
        held = allocated(lapsed)
        for alias in lapsed:
            if alias not in held:
                at = self.expiry.lapsed_at(alias)
                self._forget(plan, alias, positions[self.expiry.partition[alias]], at)

    def _forget(
        self, plan: InventoryPlan, alias: Alias, position: LogPosition, at: datetime
    ) -> None:
        """Forget a lapsed claim alias: its state and row, and its conflicts (cleared at ``at``)."""
        self.state.forget(alias)
        self.expiry.forget(alias)
        plan.identities.pop(alias, None)
        plan.forgotten.add(alias)
        node, resource_id = alias
        if node in self._by_node:
            for kind in (_AMBIGUOUS, _REUSED):
                self._clear(plan, (kind, node, resource_id), position, at)

    def _observed(
        self,
        plan: InventoryPlan,
        position: LogPosition,
        event: DeviceHealthObserved,
        seen_at: datetime,
    ) -> None:
        state = self.state
        node = event.node
        alias = (node, event.resource_id)
        claim = claim_alias(event.resource_id, event.source)
        if claim and self.expiry.lapsed(alias, seen_at):  # as if its row had been deleted
            self._forget(plan, alias, position, self.expiry.lapsed_at(alias))
        before = state.aliases.get(alias)
        if before is not None and event.source is _DEVICE_PLUGIN and before.owner is _DEVICE_PLUGIN:
            # The common case, fast: a device-plugin ID's identity depends on the ID alone
            # (plugin_identity), so resolving it again gives ``before`` and no conflict.
            plan.resolved[position] = before
            if node in self._by_node:
                self._clear(
                    plan, (_AMBIGUOUS, node, event.resource_id), position, event.observed_at
                )
            return
        given = state.resolutions.inputs.get(alias)
        identity, conflicts = state.resolve(event)
        after = state.aliases[alias]
        plan.resolved[position] = after  # the identity kept: an unresolved reading keeps it
        at = event.observed_at
        if claim:
            self.expiry.touch(alias, position.partition, seen_at)
        if claim or after != before or state.resolutions.inputs.get(alias) != given:
            self._identity_row(plan, alias, after)
        for conflict in conflicts:
            self._raise(plan, conflict, position, at)
        if forwards(identity) and node in self._by_node:  # resolved cleanly: not ambiguous
            self._clear(plan, (_AMBIGUOUS, node, event.resource_id), position, at)
        if after != before and (_plugin_uuid(before) or _plugin_uuid(after)):
            self._ownership(plan, (node,), position, at)

    def _identity_row(self, plan: InventoryPlan, alias: Alias, identity: Identity) -> None:
        state = self.state
        expiry = self.expiry
        plan.forgotten.discard(alias)
        plan.identities[alias] = identity_row(
            *alias,
            identity,
            state.first_seen[alias],
            state.resolutions.inputs.get(alias),
            expiry.last_seen.get(alias),
            expiry.partition.get(alias),
        )

    def _reresolved(
        self, plan: InventoryPlan, position: LogPosition, event: InventoryObserved
    ) -> None:
        """Rows, conflicts and governor records of the aliases ``event`` re-resolved."""
        at = event.observed_at
        for alias, before, after in self.state.reresolve(event):
            self._identity_row(plan, alias, after)
            node, resource_id = alias
            key = (_AMBIGUOUS, node, resource_id)
            if after.status is IdentityStatus.AMBIGUOUS:
                reason = after.reason or "ambiguous"
                conflict = Conflict(ConflictKind.AMBIGUOUS_RESOURCE_ID, node, resource_id, reason)
                self._raise(plan, conflict, position, at)
            elif forwards(after):
                self._clear(plan, key, position, at)
            if (
                before is not None
                and forwards(before)
                and forwards(after)
                and before.device_id != after.device_id
            ):
                detail = f"reported for {before.device_id} and for {after.device_id}"
                reused = Conflict(ConflictKind.RESOURCE_ID_REUSED, node, resource_id, detail)
                self._raise(plan, reused, position, at)
            reported = before is None or not forwards(before)
            if forwards(after) and reported and after.device_id != resource_id:
                plan.identified.append(IdentityResolved(position, at, node, resource_id, after))

    def _inventory(
        self, plan: InventoryPlan, position: LogPosition, event: InventoryObserved
    ) -> None:
        state = self.state
        obj = event.obj
        at = event.observed_at
        if state.resolutions.stale(event):  # an older form read after a newer one: no row
            state.apply(event)  # (what it says of an allocation or a UUID is still learned)
            self._reresolved(plan, position, event)
            return
        nodes: set[str] = set()
        gate_nodes: set[str] = set()  # nodes whose adoption-gate facts this record may change
        if isinstance(obj, ResourceClaimInfo):
            old_claim = state.claims.get((obj.namespace, obj.name))
            gate_nodes.update(n for n in (obj.node, old_claim.node if old_claim else None) if n)
        if isinstance(obj, ResourceSliceInfo):
            old = state.slices.get((obj.driver, obj.pool, obj.name))
            nodes.update(n for n in (obj.node, old.node if old else None) if n)
        elif isinstance(obj, DeviceClassInfo):
            old_class = state.classes.get(obj.name)
            if obj.extended_resource_name or (old_class and old_class.extended_resource_name):
                drivers = set(obj.drivers) | set(old_class.drivers if old_class else ())
                nodes = state.nodes_with_drivers(drivers)
        vanished = state.apply(event)
        if vanished and isinstance(obj, ResourceSliceInfo):
            # Still published by another slice of the pool (a driver replacing its slices): not
            # vanished.
            pool = state.slice_index().get((obj.driver, obj.pool), ())
            present = {f"{obj.driver}/{obj.pool}/{d.name}" for s in pool for d in s.devices}
            vanished = [c for c in vanished if c.subject not in present]
        row = object_row(event)
        plan.objects[(row["kind"], row["object_key"])] = row
        for conflict in vanished:
            self._raise(plan, conflict, position, at)
        if isinstance(obj, ResourceSliceInfo) and not event.deleted:
            node = obj.node or f"pool:{obj.driver}/{obj.pool}"
            for device in obj.devices:
                key = (
                    ConflictKind.VANISHED.value,
                    node,
                    f"{obj.driver}/{obj.pool}/{device.name}",
                )
                self._clear(plan, key, position, at)
        if nodes:
            self._ownership(plan, sorted(nodes), position, at)
        plan.adoption.extend(self.told.changed(state, nodes | gate_nodes, position, at))
        self._reresolved(plan, position, event)

    def _resources(
        self, plan: InventoryPlan, position: LogPosition, event: NodeResourcesChanged
    ) -> None:
        state = self.state
        before = state.node_capacity.get(event.node)
        state.set_capacity(event.node, event.capacity)
        plan.node_resources[event.node] = node_resources_row(event)
        if state.node_capacity[event.node] != before:
            self._ownership(plan, (event.node,), position, event.observed_at)
            plan.adoption.extend(
                self.told.changed(state, (event.node,), position, event.observed_at)
            )

    # -- conflicts -----------------------------------------------------------------------------

    def _ownership(
        self, plan: InventoryPlan, nodes: Iterable[str], position: LogPosition, at: datetime
    ) -> None:
        """Re-check ``plugin-and-dra`` on ``nodes``: raise what is found, clear what is gone."""
        for node in nodes:
            if not self.state.has_slices(node) and node not in self._by_node:
                continue  # no DRA on the node and nothing to clear: nothing to find
            found = by_key(self.state.ownership_conflicts((node,)))
            for conflict in found.values():
                self._raise(plan, conflict, position, at)
            for key in sorted(self.active_on(node, ConflictKind.PLUGIN_AND_DRA) - found.keys()):
                self._clear(plan, key, position, at)

    def _raise(
        self, plan: InventoryPlan, conflict: Conflict, position: LogPosition, at: datetime
    ) -> None:
        key = conflict_key(conflict)
        current = self.active.get(key)
        if current is not None:
            last = max(current.last_seen, at)
            if current.detail == conflict.detail and current.last_seen == last:
                return
            row = replace(current, detail=conflict.detail, last_seen=last)
            self.active[key] = row
            plan.conflicts[key] = row
            return
        row = ConflictRow(*key, detail=conflict.detail, active=True, first_seen=at, last_seen=at)
        self._activate(row)
        plan.conflicts[key] = row
        plan.changes.append(ConflictChange(position, at, row))

    def _clear(
        self, plan: InventoryPlan, key: ConflictKey, position: LogPosition, at: datetime
    ) -> None:
        current = self.active.pop(key, None)
        if current is None:
            return
        held = self._by_node.get(key[1])
        if held is not None:
            held.discard(key)
            if not held:
                del self._by_node[key[1]]
        row = replace(current, active=False, last_seen=max(current.last_seen, at))
        plan.conflicts[key] = row
        plan.changes.append(ConflictChange(position, at, row))

    def _activate(self, row: ConflictRow) -> None:
        self.active[row.key] = row
        self._by_node.setdefault(row.node, set()).add(row.key)


def _plugin_uuid(identity: Identity | None) -> bool:
    return (
        identity is not None
        and identity.owner is DeviceSource.DEVICE_PLUGIN
        and identity.uuid is not None
    )
