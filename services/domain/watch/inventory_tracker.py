"""The watcher's memory of DRA objects: what to publish as :class:`InventoryObserved`.

Pure: no I/O and no wall clock (``observed_at`` comes from the caller). Objects are raw JSON as the
API serves them (ResourceSlice, ResourceClaim, DeviceClass of resource.k8s.io/v1), read with
:mod:`.objects`. Rules:

- an object is published on its first sighting and whenever its *compact form* (the parsed record
  without its resourceVersion) changes; a resourceVersion bump that changes nothing devicestate
  keeps (status conditions, managedFields, labels...) publishes nothing;
- an ADDED/MODIFIED whose resourceVersion is not newer than the newest seen for that object is
  stale and ignored (out-of-order input, a re-LIST of an unchanged object); an unordered
  (non-integer) resourceVersion is never stale;
- DELETED publishes ``deleted=True`` with the last compact form (under that form's key) and
  forgets the object; a DELETED of an object never published is ignored;
- a complete LIST (at start, after 410 Gone) reads every object as ADDED, then publishes
  ``deleted=True`` for every tracked object of that kind the LIST no longer has;
- the key of an event is :func:`~.events.record_key` of the form it carries: a claim that goes
  from unallocated (``claim:<ns>/<name>``) to allocated is published under its node;
- an object that cannot be read (:class:`~.objects.InventoryParseError`, or a record key that
  could pass for a tick's) is a rejection: the caller dead-letters it with the reason. The same
  reason for the same object is reported once, until the object is read without it again. The
  last good form stays tracked.

Objects are told apart by name (ResourceSlice, DeviceClass: cluster-scoped) or by namespace and
name (ResourceClaim).

DeviceTaintRules written by others (:mod:`.taint_rule_tracker`; never devicestate's own) are not
published as objects: their taints are added to the taints of the devices they select in every
ResourceSlice published (``DeviceTaint.rule`` set), and a rule change publishes again each tracked
slice whose devices' taints it altered (issue 15 item 1).

Namespaces (:mod:`.namespace_tracker`) are not published either: a claim with admin access
(``ResourceClaimInfo.admin_access``) is published with its Namespace's admin-access label
(``namespace_admin``, ``None`` while the Namespace is not known), and a change of a Namespace's
label publishes again its tracked admin-access claims (issue 16, the gate's ``tenant-boundary``):
the label travels in the claim's own record, on its node's partition, so the worker and the
governor see it in the same order as the claim's other changes.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeAlias

from services.domain.codec import parse_resource_version
from services.domain.inventory.events import (
    InventoryKind,
    InventoryObject,
    InventoryObserved,
    record_key,
)
from services.domain.inventory.objects import (
    InventoryParseError,
    ResourceClaimInfo,
    ResourceSliceInfo,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from services.domain.node_events import TICK_KEY_PREFIX
from services.domain.watch.namespace_tracker import NAMESPACE_KIND, NamespaceTracker
from services.domain.watch.pod_tracker import WatchKind
from services.domain.watch.taint_rule_tracker import TAINT_RULE_KIND, TaintRuleTracker

INVENTORY_KINDS: Final = frozenset(kind.value for kind in InventoryKind) | {
    TAINT_RULE_KIND,
    NAMESPACE_KIND,
}
"""The object kinds the tracker reads (``ResourceSlice``, ``ResourceClaim``, ``DeviceClass``,
``DeviceTaintRule``, which it folds into the slices, and ``Namespace``, whose admin-access label it
folds into the admin-access claims)."""

_PARSERS: Final[dict[InventoryKind, Callable[[Any], InventoryObject]]] = {
    InventoryKind.RESOURCE_SLICE: parse_resource_slice,
    InventoryKind.RESOURCE_CLAIM: parse_resource_claim,
    InventoryKind.DEVICE_CLASS: parse_device_class,
}

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

ObjectId: TypeAlias = tuple[InventoryKind, str]
"""``(kind, name)``; the name of a ResourceClaim is ``<namespace>/<name>``."""


@dataclass(slots=True)
class InventoryOutcome:
    """What to do after one object: publish ``events``; dead-letter the object with
    ``reject_reason`` when set; ``ignored`` says why an object published nothing without a
    problem (``stale``, ``unchanged``, ``unknown`` for a DELETED never published)."""

    events: list[InventoryObserved] = field(default_factory=list)
    reject_reason: str | None = None
    ignored: str | None = None


@dataclass(slots=True)
class InventoryRelist:
    """What a complete LIST gives: one outcome per listed object, in order, and the deletions of
    the tracked objects it no longer has (sorted by name); for a LIST of DeviceTaintRules,
    ``republished``: the slices the rules changed."""

    outcomes: list[InventoryOutcome]
    deleted: list[InventoryObserved]
    republished: list[InventoryObserved] = field(default_factory=list)


def compact(obj: InventoryObject) -> InventoryObject:
    """The form compared for changes: the record without its resourceVersion."""
    return dataclasses.replace(obj, resource_version=None)


def object_name(kind: InventoryKind, obj: Mapping[str, Any]) -> str | None:
    """How the tracker names an object from its metadata (``None`` if it has no usable name)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    if kind is not InventoryKind.RESOURCE_CLAIM:
        return name
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        return None
    return f"{namespace}/{name}"


def _version(obj: Mapping[str, Any]) -> int | None:
    metadata = obj.get("metadata")
    return parse_resource_version(
        metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    )


def _bad_key(key: str) -> str | None:
    if _CONTROL.search(key):
        return f"record key {key[:80]!r} has control characters"
    if key.startswith(TICK_KEY_PREFIX[0]):
        return f"record key {key[:80]!r} starts with {TICK_KEY_PREFIX[0]!r} (reserved for ticks)"
    return None


def read_object(kind: InventoryKind, obj: Any) -> InventoryObject:
    """Parse one DRA object; raises :class:`InventoryParseError` with the reason (for any
    malformed input, also where the parser itself would trip on an unexpected shape)."""
    try:
        record = _PARSERS[kind](obj)
    except InventoryParseError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        # e.g. a "spec" or "status" that is not an object: the parsers assume objects there.
        raise InventoryParseError(f"malformed {kind.value}: {type(exc).__name__}: {exc}") from None
    problem = _bad_key(record_key(record))
    if problem is not None:
        raise InventoryParseError(problem)
    return record


class InventoryTracker:
    """Per DRA object: the last published form, the newest resourceVersion seen and the last
    problem reported. See the module docstring for the rules."""

    def __init__(self) -> None:
        self._forms: dict[ObjectId, InventoryObject] = {}
        self._versions: dict[ObjectId, int] = {}
        self._reported: dict[ObjectId, str] = {}
        self._tracked: Counter[InventoryKind] = Counter()
        self.rules = TaintRuleTracker()
        self.namespaces = NamespaceTracker()

    def tracked(self, kind: InventoryKind) -> int:
        """How many objects of ``kind`` are tracked (published and not deleted)."""
        return self._tracked[kind]

    def form(self, kind: InventoryKind, name: str) -> InventoryObject | None:
        """The last published form of an object (``name`` as :func:`object_name`), if tracked."""
        return self._forms.get((kind, name))

    def _stale(self, oid: ObjectId, version: int | None) -> bool:
        if version is None:
            return False
        newest = self._versions.get(oid)
        if newest is not None and version <= newest:
            return True
        self._versions[oid] = version
        return False

    def _forget(self, oid: ObjectId) -> InventoryObject | None:
        self._versions.pop(oid, None)
        self._reported.pop(oid, None)
        form = self._forms.pop(oid, None)
        if form is not None:
            self._tracked[oid[0]] -= 1
        return form

    def _reject(self, outcome: InventoryOutcome, oid: ObjectId | None, reason: str) -> None:
        if oid is None:
            outcome.reject_reason = reason
        elif self._reported.get(oid) != reason:
            self._reported[oid] = reason
            outcome.reject_reason = reason

    def event(
        self,
        kind: WatchKind,
        object_kind: InventoryKind,
        obj: Mapping[str, Any],
        observed_at: datetime,
    ) -> InventoryOutcome:
        """One ADDED/MODIFIED/DELETED of a DRA object of ``object_kind``."""
        outcome = InventoryOutcome()
        name = object_name(object_kind, obj)
        oid = None if name is None else (object_kind, name)
        version = _version(obj)
        if kind is WatchKind.DELETED:
            if oid is None or oid not in self._forms:
                if oid is not None:
                    self._forget(oid)
                outcome.ignored = "unknown"
                return outcome
            newest = self._versions.get(oid)
            if version is not None and newest is not None and version < newest:
                outcome.ignored = "stale"
                return outcome
            last = self._forget(oid)
            assert last is not None
            outcome.events.append(InventoryObserved(record_key(last), last, True, observed_at))
            return outcome
        if oid is not None and self._stale(oid, version):
            outcome.ignored = "stale"
            return outcome
        try:
            record = read_object(object_kind, obj)
        except InventoryParseError as exc:
            self._reject(outcome, oid, f"{object_kind.value} {name or '<no name>'}: {exc}")
            return outcome
        assert oid is not None  # read_object needs the name (and a claim's namespace)
        if isinstance(record, ResourceSliceInfo):
            record = self._with_rules(record)
        elif isinstance(record, ResourceClaimInfo):
            record = self._with_namespace(record)
        self._reported.pop(oid, None)
        previous = self._forms.get(oid)
        self._forms[oid] = record
        if previous is None:
            self._tracked[object_kind] += 1
        if previous is not None and compact(previous) == compact(record):
            outcome.ignored = "unchanged"
            return outcome
        outcome.events.append(InventoryObserved(record_key(record), record, False, observed_at))
        return outcome

    def listed(
        self,
        object_kind: InventoryKind,
        objs: Iterable[Mapping[str, Any]],
        observed_at: datetime,
    ) -> InventoryRelist:
        """A complete LIST of ``object_kind``: every object read as ADDED (one outcome each, in
        order), then ``deleted=True`` for the tracked objects of that kind not listed."""
        outcomes = []
        listed: set[str] = set()
        for obj in objs:
            outcomes.append(self.event(WatchKind.ADDED, object_kind, obj, observed_at))
            name = object_name(object_kind, obj)
            if name is not None:
                listed.add(name)
        known = {
            name
            for k, name in (*self._forms, *self._versions, *self._reported)
            if k is object_kind and name not in listed
        }
        deleted = []
        for name in sorted(known):
            last = self._forget((object_kind, name))
            if last is not None:
                deleted.append(InventoryObserved(record_key(last), last, True, observed_at))
        return InventoryRelist(outcomes, deleted)

    # --- DeviceTaintRules of others (issue 15 item 1) -------------------------------------------

    def _with_rules(self, record: ResourceSliceInfo) -> ResourceSliceInfo:
        """``record`` with its devices' taints: the slice's own, then the tracked rules'."""
        if not len(self.rules) and not any(t.rule for d in record.devices for t in d.taints):
            return record
        devices = tuple(
            dataclasses.replace(
                d,
                taints=tuple(t for t in d.taints if t.rule is None)
                + self.rules.taints_for(record.driver, record.pool, d.name),
            )
            for d in record.devices
        )
        return dataclasses.replace(record, devices=devices)

    def _republish(self, observed_at: datetime) -> list[InventoryObserved]:
        """Publish again the tracked slices whose taints the rules changed (by name)."""
        events = []
        for oid in sorted(o for o in self._forms if o[0] is InventoryKind.RESOURCE_SLICE):
            form = self._forms[oid]
            assert isinstance(form, ResourceSliceInfo)
            new = self._with_rules(form)
            if new != form:
                self._forms[oid] = new
                events.append(InventoryObserved(record_key(new), new, False, observed_at))
        return events

    def rule_event(
        self, kind: WatchKind, obj: Mapping[str, Any], observed_at: datetime
    ) -> InventoryOutcome:
        """One ADDED/MODIFIED/DELETED of a DeviceTaintRule: the slices it changed are published."""
        rule = self.rules.event(kind, obj)
        outcome = InventoryOutcome(reject_reason=rule.reject_reason, ignored=rule.ignored)
        if rule.changed:
            outcome.events = self._republish(observed_at)
        return outcome

    def rules_listed(
        self, objs: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> InventoryRelist:
        """A complete LIST of DeviceTaintRules: one outcome per rule (no events), then the slices
        the rules changed (``republished``)."""
        rules, changed = self.rules.listed(objs)
        outcomes = [
            InventoryOutcome(reject_reason=r.reject_reason, ignored=r.ignored) for r in rules
        ]
        return InventoryRelist(outcomes, [], self._republish(observed_at) if changed else [])

    # --- Namespaces' admin-access label (issue 16, tenant-boundary) -----------------------------

    def _with_namespace(self, record: ResourceClaimInfo) -> ResourceClaimInfo:
        """``record`` with its Namespace's admin-access label when it has admin access."""
        label = self.namespaces.admin_access(record.namespace) if record.admin_access else None
        if record.namespace_admin is label:
            return record
        return dataclasses.replace(record, namespace_admin=label)

    def _republish_claims(
        self, namespaces: set[str], observed_at: datetime
    ) -> list[InventoryObserved]:
        """Publish again the tracked claims of ``namespaces`` whose label changed (by name)."""
        if not namespaces:
            return []
        events = []
        for oid in sorted(o for o in self._forms if o[0] is InventoryKind.RESOURCE_CLAIM):
            form = self._forms[oid]
            assert isinstance(form, ResourceClaimInfo)
            if form.namespace not in namespaces:
                continue
            new = self._with_namespace(form)
            if new != form:
                self._forms[oid] = new
                events.append(InventoryObserved(record_key(new), new, False, observed_at))
        return events

    def namespace_event(
        self, kind: WatchKind, obj: Mapping[str, Any], observed_at: datetime
    ) -> InventoryOutcome:
        """One ADDED/MODIFIED/DELETED of a Namespace: its admin-access claims are published
        again when its label changed."""
        found = self.namespaces.event(kind, obj)
        outcome = InventoryOutcome(reject_reason=found.reject_reason, ignored=found.ignored)
        if found.changed is not None:
            outcome.events = self._republish_claims({found.changed}, observed_at)
        return outcome

    def namespaces_listed(
        self, objs: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> InventoryRelist:
        """A complete LIST of Namespaces: one outcome per Namespace (no events), then the claims
        whose Namespace's label changed (``republished``)."""
        found, changed = self.namespaces.listed(objs)
        outcomes = [
            InventoryOutcome(reject_reason=n.reject_reason, ignored=n.ignored) for n in found
        ]
        return InventoryRelist(outcomes, [], self._republish_claims(changed, observed_at))
