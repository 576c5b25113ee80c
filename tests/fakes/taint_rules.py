"""An in-memory :class:`~services.processes.enforcement.kube.TaintRuleApi` with the API server's semantics
that the reconciler relies on: dry runs change nothing, names are unique (409 AlreadyExists),
replace checks ``resourceVersion`` (and keeps the stored ``uid`` and ``timeAdded``; a replace
that changes nothing keeps the ``resourceVersion``) and delete the ``uid`` precondition (409), a
missing rule is 404, the label selector (``k=v`` and ``k`` terms) filters the list. Held to the
real API server by ``tests/contracts/test_taint_rules.py``."""

from __future__ import annotations

import copy
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

from services.adapters.kube.errors import KubeApiError


def matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, sep, value = term.partition("=")
        if sep and labels.get(key) != value:
            return False
        if not sep and key not in labels:
            return False
    return True


@dataclass
class FakeTaintRules:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, bool]] = field(default_factory=list)
    fail_on: dict[str, KubeApiError] = field(default_factory=dict)
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def _maybe_fail(self, method: str) -> None:
        if method in self.fail_on:
            raise self.fail_on[method]

    def writes(self) -> list[tuple[str, str, bool]]:
        return [c for c in self.calls if c[0] != "list"]

    def put(self, body: dict[str, Any]) -> dict[str, Any]:
        """Store ``body`` as the server would (uid, resourceVersion, timeAdded)."""
        obj = self._defaulted(body)
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    @staticmethod
    def _defaulted(body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with what the server sets on a create (uid, timeAdded), not stored."""
        obj = copy.deepcopy(body)
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("uid", str(uuid.uuid4()))
        taint = obj.setdefault("spec", {}).setdefault("taint", {})
        taint.setdefault("timeAdded", "2026-11-29T12:00:00Z")
        return obj

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list", label_selector, False))
        self._maybe_fail("list_rules")
        return [
            copy.deepcopy(o)
            for o in self.objects.values()
            if matches(label_selector, (o.get("metadata") or {}).get("labels") or {})
        ]

    async def create_rule(self, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(("create", name, dry_run))
        self._maybe_fail("create_rule")
        if name in self.objects:
            raise KubeApiError(409, f'devicetaintrules "{name}" already exists', "AlreadyExists")
        if dry_run:
            return self._defaulted(body)
        return self.put(body)

    async def replace_rule(self, name: str, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        self.calls.append(("update", name, dry_run))
        self._maybe_fail("replace_rule")
        current = self.objects.get(name)
        if current is None:
            raise KubeApiError(404, "not found", "NotFound")
        version = body["metadata"].get("resourceVersion")
        if version and version != current["metadata"]["resourceVersion"]:
            raise KubeApiError(409, "the object has been modified", "Conflict")
        # As the API server does: uid and timeAdded stay those stored, and an update that
        # changes nothing is not written (the resourceVersion stays).
        updated = copy.deepcopy(body)
        metadata = updated.setdefault("metadata", {})
        metadata["uid"] = current["metadata"]["uid"]
        metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        taint = updated.setdefault("spec", {}).setdefault("taint", {})
        taint.setdefault("timeAdded", current["spec"]["taint"]["timeAdded"])
        if dry_run or updated == current:
            return updated
        return self.put(updated)

    async def delete_rule(self, name: str, uid: str | None, dry_run: bool) -> bool:
        self.calls.append(("delete", name, dry_run))
        self._maybe_fail("delete_rule")
        current = self.objects.get(name)
        if current is None:
            return False
        if uid and current["metadata"]["uid"] != uid:
            raise KubeApiError(409, "Precondition failed: UID in precondition", "Conflict")
        if not dry_run:
            del self.objects[name]
        return True
