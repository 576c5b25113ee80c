"""Rollback without deleting claims (issue 16, item 4), the pure part: for each adoption pool in
``rolled-back`` with a DeviceClass, one ValidatingAdmissionPolicy and its binding
(``admissionregistration.k8s.io/v1``) that refuse a new ResourceClaim requesting that class;
and the plan (create, update, delete) against the objects of ours present.

The policy matches CREATE of ``resource.k8s.io`` ``resourceclaims`` at ``v1`` with
``matchPolicy: Equivalent`` (the default), so a claim sent through another served version
(v1beta1, v1beta2) is converted and checked in its v1 form: ``spec.devices.requests[]`` with
either ``exactly.deviceClassName`` or ``firstAvailable[].deviceClassName`` (resource.k8s.io/v1
``DeviceRequest``). Only CREATE: existing claims (bound or not) and the Pods using them are never
touched, and the claim's status updates by the scheduler and kubelet go on. The binding's action
is ``Deny``. Removing the pool's ``rolled-back`` phase removes both (delete binding first).

Objects are named ``devicestate-adoption-rollback-<pool>`` and labelled
:data:`LABELS` plus ``devicestate.io/adoption-pool``; only objects carrying :data:`LABEL_SELECTOR`
are listed, changed or deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from services.domain.governance.adoption import Phase, PoolState

Kind = Literal["policy", "binding"]
KINDS: Final[tuple[Kind, Kind]] = ("policy", "binding")
"""Creation order (deletion is the reverse: a binding never names a missing policy)."""

MANAGED_BY: Final = "app.kubernetes.io/managed-by"
COMPONENT: Final = "devicestate.io/component"
POOL_LABEL: Final = "devicestate.io/adoption-pool"
CLASS_LABEL: Final = "devicestate.io/device-class"
LABELS: Final = {MANAGED_BY: "devicestate", COMPONENT: "adoption-rollback"}
LABEL_SELECTOR: Final = (
    "app.kubernetes.io/managed-by=devicestate,devicestate.io/component=adoption-rollback"
)
NAME_PREFIX: Final = "devicestate-adoption-rollback-"
MAX_LABEL_VALUE: Final = 63
"""The longest label value the API server takes."""
DEVICE_CLASS_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
"""A DeviceClass name: a DNS subdomain (so it needs no escaping in a CEL string literal)."""
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
OBJECT_NAME: Final = re.compile(f"^{_LABEL}(\\.{_LABEL})*$")
"""A Kubernetes object name (DNS subdomain): what ``devicestate-adoption-rollback-<pool>`` must
be. The API refuses a pool name that would not make one; a pool declared before it did (``a..b``)
is skipped."""


def object_name(pool: str) -> str:
    """The policy's and the binding's name for ``pool`` (valid when the pool's name is a DNS
    subdomain, as the API requires: :data:`OBJECT_NAME`)."""
    return f"{NAME_PREFIX}{pool}"


def expression(device_class: str) -> str:
    """The CEL validation: true (admitted) unless a request names ``device_class``."""
    q = f"'{device_class}'"
    return (
        "!has(object.spec.devices) || !has(object.spec.devices.requests) || "
        "!object.spec.devices.requests.exists(r, "
        f"(has(r.exactly) && r.exactly.deviceClassName == {q}) || "
        f"(has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName == {q})))"
    )


@dataclass(frozen=True, slots=True)
class RollbackPolicy:
    """The objects of one rolled-back pool."""

    pool: str
    device_class: str

    @property
    def name(self) -> str:
        return object_name(self.pool)

    def labels(self) -> dict[str, str]:
        """Ours, the pool and the class; a class name over :data:`MAX_LABEL_VALUE` characters (a
        DeviceClass name may have 253) is left out: the API server would refuse the object."""
        labels = {**LABELS, POOL_LABEL: self.pool}
        if len(self.device_class) <= MAX_LABEL_VALUE:
            labels[CLASS_LABEL] = self.device_class
        return labels

    def policy(self) -> dict[str, Any]:
        """The ValidatingAdmissionPolicy manifest."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": self.name, "labels": self.labels()},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "matchPolicy": "Equivalent",
                    "resourceRules": [
                        {
                            "apiGroups": ["resource.k8s.io"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["resourceclaims"],
                        }
                    ],
                },
                "validations": [
                    {
                        "expression": expression(self.device_class),
                        "message": (
                            f"devicestate: adoption pool {self.pool} is rolled back to the device "
                            f"plugin: new ResourceClaims for DeviceClass {self.device_class} are "
                            "refused (existing claims are kept; see docs/dra-adoption.md)"
                        ),
                        "reason": "Forbidden",
                    }
                ],
            },
        }

    def binding(self) -> dict[str, Any]:
        """The ValidatingAdmissionPolicyBinding manifest (every namespace, action Deny)."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": self.name, "labels": self.labels()},
            "spec": {"policyName": self.name, "validationActions": ["Deny"]},
        }

    def manifest(self, kind: Kind) -> dict[str, Any]:
        return self.policy() if kind == "policy" else self.binding()


@dataclass(frozen=True, slots=True)
class SkippedPool:
    """A rolled-back pool without an enforceable DeviceClass: ``reason`` says why."""

    pool: str
    reason: str


def desired_policies(
    pools: Mapping[str, PoolState],
) -> tuple[list[RollbackPolicy], list[SkippedPool]]:
    """The policies the pools' current phases call for (sorted by pool), and the rolled-back
    pools that cannot have one."""
    wanted: list[RollbackPolicy] = []
    skipped: list[SkippedPool] = []
    for name in sorted(pools):
        state = pools[name]
        if state.phase is not Phase.ROLLED_BACK:
            continue
        device_class = state.current.declaration.device_class
        if not OBJECT_NAME.fullmatch(object_name(name)):
            skipped.append(SkippedPool(name, f"{object_name(name)!r} is not an object name"))
        elif device_class is None:
            skipped.append(
                SkippedPool(name, "no DeviceClass declared (adoption set --device-class)")
            )
        elif not DEVICE_CLASS_NAME.fullmatch(device_class):
            skipped.append(SkippedPool(name, f"{device_class!r} is not a DeviceClass name"))
        else:
            wanted.append(RollbackPolicy(name, device_class))
    return wanted, skipped


@dataclass(frozen=True, slots=True)
class Write:
    """One write: ``op`` create/update/delete of ``kind`` ``name``; ``body`` for create and
    update (an update carries the present object's resourceVersion), ``uid`` the delete's
    precondition."""

    op: Literal["create", "update", "delete"]
    kind: Kind
    name: str
    body: dict[str, Any] | None = None
    uid: str | None = None


@dataclass(slots=True)
class AdmissionPlan:
    """The writes of a pass in order: creates (policy before its binding), updates, deletes
    (binding before its policy), and the names left as they are."""

    writes: list[Write] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def signature(self) -> tuple[tuple[str, str, str], ...]:
        return tuple((w.op, w.kind, w.name) for w in self.writes)


def _differs(existing: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the present object's labels or the fields we set differ (defaults the server adds
    to ``spec`` are not ours to compare: only the keys we set are)."""
    labels = (existing.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in body["metadata"]["labels"].items()):
        return True
    return _subset_differs(body["spec"], existing.get("spec") or {})


def _subset_differs(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return True
        return any(_subset_differs(v, theirs.get(k)) for k, v in ours.items())
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return True
        return any(_subset_differs(a, b) for a, b in zip(ours, theirs, strict=True))
    return bool(ours != theirs)


def plan(
    wanted: list[RollbackPolicy],
    present: Mapping[Kind, list[dict[str, Any]]],
) -> AdmissionPlan:
    """What makes the present objects of ours (listed with :data:`LABEL_SELECTOR`) match
    ``wanted``."""
    out = AdmissionPlan()
    by_kind = {
        kind: {str((o.get("metadata") or {}).get("name")): o for o in present.get(kind, [])}
        for kind in KINDS
    }
    names = {w.name for w in wanted}
    updates: list[Write] = []
    for want in wanted:
        for kind in KINDS:
            body = want.manifest(kind)
            existing = by_kind[kind].get(want.name)
            if existing is None:
                out.writes.append(Write("create", kind, want.name, body))
            elif _differs(existing, body):
                body["metadata"]["resourceVersion"] = existing["metadata"].get("resourceVersion")
                updates.append(Write("update", kind, want.name, body))
            else:
                out.unchanged.append(f"{kind}/{want.name}")
    out.writes.extend(updates)
    for kind in reversed(KINDS):
        for name, existing in sorted(by_kind[kind].items()):
            if name not in names:
                uid = (existing.get("metadata") or {}).get("uid")
                out.writes.append(Write("delete", kind, name, uid=uid))
    return out
