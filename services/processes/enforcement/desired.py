"""Desired DeviceTaintRules: pure functions from quarantine rows to manifests, and the plan that
turns the rules present in the cluster into the desired ones.

One ``resource.k8s.io/v1beta2`` DeviceTaintRule per ACTIVE or RECOVERING quarantine of a DRA
device whose id is ``driver/pool/device`` (:func:`~services.domain.inventory.identity.split_device_id`):

- ``metadata.name``: ``devicestate-quarantine-<40 hex of sha256(quarantine id)>`` (63 characters,
  a DNS label): the same quarantine always gives the same name, so a restart, a second replica or
  a replayed projection finds the rule it made instead of making another;
- labels ``app.kubernetes.io/managed-by=devicestate``,
  ``app.kubernetes.io/component=quarantine-enforcement`` and ``devicestate.io/quarantine-id=<the
  same hash>``: the reconciler lists with all three and never touches a rule without them;
- annotations ``devicestate.io/quarantine-id`` (the full id), ``devicestate.io/device``
  (``driver/pool/device``), ``devicestate.io/node``, ``devicestate.io/quarantine-kind`` and
  ``devicestate.io/reason``;
- ``spec.deviceSelector`` ``{driver, pool, device}`` (the v1beta2 schema, checked against
  kube-apiserver v1.36.3: these are the only selector fields; the server does not validate their
  form, so :func:`desired_rules` does);
- ``spec.taint`` ``{key: devicestate.io/quarantined, value, effect}``: ``value`` is the quarantine's
  reason when it is a short code that is a valid label value (``pod-status-unhealthy``), else its
  kind (``system``/``manual``; an operator's free-text reason stays in the annotation); ``effect``
  ``NoSchedule``, ``NoExecute`` only when configured. The server adds ``taint.timeAdded``.

Skipped, with a reason (logged and counted by the reconciler): device-plugin devices
(``device-plugin``); ids that are not ``driver/pool/device``, e.g. a CDI-form id no claim resolved
(``unresolved``); ``driver/pool/device`` whose parts are no valid DRA names, e.g. a legacy
``MIG-GPU-<uuid>/<gi>/<ci>`` plugin id (``invalid-device-id``); a second quarantine of a device
that already has a rule (``duplicate-device``: the oldest quarantine keeps it, so the rule does not
move between names).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from services.domain.events import DeviceSource
from services.domain.governance.held import QuarantineRow
from services.domain.inventory.identity import split_device_id

# The labels that make a rule devicestate's own: one definition, which the watcher reads too (it
# never takes an own rule for a fault, issue 15).
from services.domain.inventory.taint_rules import (
    COMPONENT,
    COMPONENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    QUARANTINE_LABEL,
    is_devicestate_rule,
)

API_VERSION: Final = "resource.k8s.io/v1beta2"
KIND: Final = "DeviceTaintRule"
QUARANTINE_ANNOTATION: Final = "devicestate.io/quarantine-id"
DEVICE_ANNOTATION: Final = "devicestate.io/device"
NODE_ANNOTATION: Final = "devicestate.io/node"
KIND_ANNOTATION: Final = "devicestate.io/quarantine-kind"
REASON_ANNOTATION: Final = "devicestate.io/reason"
TAINT_KEY: Final = "devicestate.io/quarantined"
NAME_PREFIX: Final = "devicestate-quarantine-"
ENFORCED_STATUSES: Final = frozenset({"active", "recovering"})
REASON_ANNOTATION_MAX: Final = 1024

LABEL_SELECTOR: Final = (
    f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}={COMPONENT},{QUARANTINE_LABEL}"
)
"""What the reconciler lists with: only rules carrying all of its labels are its own."""

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(rf"^{_DNS_LABEL}$")
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class Effect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


class SkipReason(StrEnum):
    DEVICE_PLUGIN = "device-plugin"
    UNRESOLVED = "unresolved"
    INVALID_DEVICE_ID = "invalid-device-id"
    DUPLICATE_DEVICE = "duplicate-device"


@dataclass(frozen=True, slots=True)
class DesiredRule:
    """One DeviceTaintRule the cluster should hold."""

    name: str
    quarantine_id: str
    node: str
    driver: str
    pool: str
    device: str
    kind: str
    reason: str
    effect: Effect

    @property
    def device_id(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"

    @property
    def taint_value(self) -> str:
        return taint_value(self.reason, self.kind)

    def manifest(self) -> dict[str, Any]:
        return rule_manifest(self)


@dataclass(frozen=True, slots=True)
class Skipped:
    quarantine_id: str
    node: str
    resource_id: str
    reason: SkipReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DesiredState:
    """Rules by name, and the enforced quarantines that get none (with why)."""

    rules: Mapping[str, DesiredRule]
    skipped: tuple[Skipped, ...] = ()

    def skipped_by_reason(self) -> dict[SkipReason, int]:
        counts = dict.fromkeys(SkipReason, 0)
        for item in self.skipped:
            counts[item.reason] += 1
        return counts


def label_hash(value: str) -> str:
    """A label-safe stand-in for ``value``: 40 hex characters of its SHA-256 (the same function
    as the recovery Jobs' ``devicestate.io/quarantine-id`` label, so both select alike)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:40]


def rule_name(quarantine_id: str) -> str:
    """``devicestate-quarantine-<label_hash(quarantine id)>``: 63 characters, a DNS label."""
    return f"{NAME_PREFIX}{label_hash(quarantine_id)}"


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE_RE.match(value))


def taint_value(reason: str, kind: str) -> str:
    """The reason when it is a short code that a label value can hold, else the kind."""
    if reason and is_label_value(reason):
        return reason
    return kind if is_label_value(kind) else ""


def valid_dra_names(driver: str, pool: str, device: str) -> str | None:
    """``None`` when these can name a DRA device (driver: a DNS subdomain of at most 63
    characters; pool: DNS subdomains separated by ``/``, at most 253; device: a DNS label), else
    what is wrong."""
    if len(driver) > 63 or not _DNS_SUBDOMAIN_RE.match(driver):
        return f"driver {driver!r} is not a DNS subdomain of at most 63 characters"
    if len(pool) > 253 or not all(_DNS_SUBDOMAIN_RE.match(p) for p in pool.split("/")):
        return f"pool {pool!r} is not DNS subdomains separated by '/'"
    if len(device) > 63 or not _DNS_LABEL_RE.match(device):
        return f"device {device!r} is not a DNS label"
    return None


def _sort_key(row: QuarantineRow) -> tuple[Any, ...]:
    # Oldest first; rows without a creation time after those with one; then every field, so
    # that the order of the input never matters.
    return (
        0 if row.created_at is not None else 1,
        row.created_at,
        row.quarantine_id,
        row.node,
        row.resource_id,
        row.kind,
        row.reason,
        row.source or "",
    )


def desired_rules(rows: Iterable[QuarantineRow], no_execute: bool = False) -> DesiredState:
    """The rules the quarantines call for (see the module docstring). Rows with another status
    than active/recovering are ignored; the result does not depend on the rows' order."""
    effect = Effect.NO_EXECUTE if no_execute else Effect.NO_SCHEDULE
    rules: dict[str, DesiredRule] = {}
    by_device: dict[tuple[str, str, str], DesiredRule] = {}
    skipped: list[Skipped] = []
    enforced = sorted((r for r in rows if r.status in ENFORCED_STATUSES), key=_sort_key)
    unique: dict[str, QuarantineRow] = {}
    for row in enforced:
        unique.setdefault(row.quarantine_id, row)  # the same quarantine read twice: one rule
    for row in unique.values():
        if row.source == DeviceSource.DEVICE_PLUGIN.value:
            skipped.append(_skip(row, SkipReason.DEVICE_PLUGIN, "a device-plugin device"))
            continue
        parts = split_device_id(row.resource_id)
        if parts is None:
            skipped.append(_skip(row, SkipReason.UNRESOLVED, "not a driver/pool/device id"))
            continue
        problem = valid_dra_names(*parts)
        if problem is not None:
            skipped.append(_skip(row, SkipReason.INVALID_DEVICE_ID, problem))
            continue
        holder = by_device.get(parts)
        if holder is not None:
            skipped.append(
                _skip(row, SkipReason.DUPLICATE_DEVICE, f"rule kept by {holder.quarantine_id}")
            )
            continue
        driver, pool, device = parts
        rule = DesiredRule(
            name=rule_name(row.quarantine_id),
            quarantine_id=row.quarantine_id,
            node=row.node,
            driver=driver,
            pool=pool,
            device=device,
            kind=row.kind,
            reason=row.reason,
            effect=effect,
        )
        rules[rule.name] = rule
        by_device[parts] = rule
    return DesiredState(rules=dict(sorted(rules.items())), skipped=tuple(skipped))


def _skip(row: QuarantineRow, reason: SkipReason, detail: str) -> Skipped:
    return Skipped(row.quarantine_id, row.node, row.resource_id, reason, detail)


def own_labels(quarantine_id: str) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: COMPONENT,
        QUARANTINE_LABEL: label_hash(quarantine_id),
    }


def own_annotations(rule: DesiredRule) -> dict[str, str]:
    return {
        QUARANTINE_ANNOTATION: rule.quarantine_id,
        DEVICE_ANNOTATION: rule.device_id,
        NODE_ANNOTATION: rule.node,
        KIND_ANNOTATION: rule.kind,
        REASON_ANNOTATION: rule.reason[:REASON_ANNOTATION_MAX],
    }


def rule_spec(rule: DesiredRule) -> dict[str, Any]:
    return {
        "deviceSelector": {"driver": rule.driver, "pool": rule.pool, "device": rule.device},
        "taint": {"key": TAINT_KEY, "value": rule.taint_value, "effect": rule.effect.value},
    }


def rule_manifest(rule: DesiredRule) -> dict[str, Any]:
    """The DeviceTaintRule to create for ``rule``."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": rule.name,
            "labels": own_labels(rule.quarantine_id),
            "annotations": own_annotations(rule),
        },
        "spec": rule_spec(rule),
    }


def is_own(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` carries the labels of a rule this reconciler made (the list's selector
    already asks for them; checked again so that nothing else is ever changed)."""
    return is_devicestate_rule(obj)


def _taint_core(taint: Mapping[str, Any] | None) -> tuple[Any, Any, Any]:
    taint = taint or {}
    return (taint.get("key"), taint.get("value") or "", taint.get("effect"))


def differences(existing: Mapping[str, Any], rule: DesiredRule) -> list[str]:
    """What differs between a present rule and the desired one (empty: nothing to do). The
    server's own additions (``taint.timeAdded``, status, other metadata) do not count, nor do
    labels and annotations that are not ours."""
    found: list[str] = []
    metadata = existing.get("metadata") or {}
    spec = existing.get("spec") or {}
    want = rule_spec(rule)
    if (spec.get("deviceSelector") or {}) != want["deviceSelector"]:
        found.append("spec.deviceSelector")
    if _taint_core(spec.get("taint")) != _taint_core(want["taint"]):
        found.append("spec.taint")
    labels = metadata.get("labels") or {}
    if any(labels.get(k) != v for k, v in own_labels(rule.quarantine_id).items()):
        found.append("metadata.labels")
    annotations = metadata.get("annotations") or {}
    if any(annotations.get(k) != v for k, v in own_annotations(rule).items()):
        found.append("metadata.annotations")
    return found


def updated_object(existing: Mapping[str, Any], rule: DesiredRule) -> dict[str, Any]:
    """The body of a replace (PUT) that makes ``existing`` the desired rule: its metadata (with
    ``resourceVersion``: a concurrent change makes the update fail with 409 instead of losing it)
    plus our labels and annotations, the desired spec. ``timeAdded`` is kept when the taint itself
    (key, value, effect) is unchanged; a changed taint is a new one, dated by the server."""
    metadata = {k: v for k, v in (existing.get("metadata") or {}).items() if k != "managedFields"}
    metadata["labels"] = {**(metadata.get("labels") or {}), **own_labels(rule.quarantine_id)}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **own_annotations(rule)}
    spec = rule_spec(rule)
    old_taint = (existing.get("spec") or {}).get("taint") or {}
    if _taint_core(old_taint) == _taint_core(spec["taint"]) and old_taint.get("timeAdded"):
        spec["taint"]["timeAdded"] = old_taint["timeAdded"]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


@dataclass(frozen=True, slots=True)
class Update:
    rule: DesiredRule
    existing: Mapping[str, Any]
    changed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Delete:
    name: str
    uid: str | None
    quarantine_id: str | None
    device: str | None


@dataclass(frozen=True, slots=True)
class Plan:
    """What a reconcile does: create missing rules, update changed ones, delete the rest of ours."""

    create: tuple[DesiredRule, ...] = ()
    update: tuple[Update, ...] = ()
    delete: tuple[Delete, ...] = ()
    unchanged: tuple[str, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)

    def signature(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """The plan's names (to tell whether a dry run would do something new)."""
        return (
            tuple(r.name for r in self.create),
            tuple(u.rule.name for u in self.update),
            tuple(d.name for d in self.delete),
        )


def plan(desired: DesiredState, present: Sequence[Mapping[str, Any]]) -> Plan:
    """Compare the desired rules with the present ones. Objects in ``present`` that are not ours
    (:func:`is_own`) are ignored: never updated, never deleted."""
    own: dict[str, Mapping[str, Any]] = {}
    for obj in present:
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str) and is_own(obj):
            own[name] = obj
    create: list[DesiredRule] = []
    update: list[Update] = []
    unchanged: list[str] = []
    for name, rule in desired.rules.items():
        existing = own.get(name)
        if existing is None:
            create.append(rule)
            continue
        changed = differences(existing, rule)
        if changed:
            update.append(Update(rule, existing, tuple(changed)))
        else:
            unchanged.append(name)
    delete = [
        Delete(
            name=name,
            uid=(obj.get("metadata") or {}).get("uid"),
            quarantine_id=((obj.get("metadata") or {}).get("annotations") or {}).get(
                QUARANTINE_ANNOTATION
            ),
            device=((obj.get("metadata") or {}).get("annotations") or {}).get(DEVICE_ANNOTATION),
        )
        for name, obj in sorted(own.items())
        if name not in desired.rules
    ]
    return Plan(tuple(create), tuple(update), tuple(delete), tuple(unchanged))
