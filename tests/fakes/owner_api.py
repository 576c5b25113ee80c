"""An in-memory :class:`~services.processes.watcher.workloads.OwnerApi` for the resolver's tests,
held to :class:`~services.adapters.kube.owners.KubernetesOwners` on the test kube-apiserver by
``tests/contracts/test_owner_api.py``."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

OwnerKey = tuple[str, str, str, str]
"""``(apiVersion, resource, namespace, name)``."""


@dataclass
class FakeOwners:
    """Owner objects by :data:`OwnerKey`; ``failures`` (a ``KubeApiError`` or any exception)
    are raised, first to last, by the next reads (whatever they read); ``reads`` counts every
    call."""

    objects: dict[OwnerKey, dict[str, Any]] = field(default_factory=dict)
    failures: list[Exception] = field(default_factory=list)
    reads: list[OwnerKey] = field(default_factory=list)

    def add(self, api_version: str, resource: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        self.objects[(api_version, resource, metadata["namespace"], metadata["name"])] = obj

    async def read_owner(
        self, api_version: str, resource: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        key = (api_version, resource, namespace, name)
        self.reads.append(key)
        if "/" not in api_version:
            raise ValueError(f"apiVersion {api_version!r} has no group")
        if self.failures:
            raise self.failures.pop(0)
        found = self.objects.get(key)
        return copy.deepcopy(found) if found is not None else None
