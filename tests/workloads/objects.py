"""Real-shaped Pods and owners for the workload tests: ownerReferences as the controllers write
them (kube-controller-manager's ReplicaSet and Job controllers, the JobSet and LeaderWorkerSet
controllers)."""

from __future__ import annotations

from typing import Any


def ref(
    kind: str, name: str, uid: str, api_version: str, controller: bool = True
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def obj(
    name: str,
    uid: str,
    owners: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "team-a",
    node: str | None = None,
    resource_version: str = "1200",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": resource_version,
    }
    if owners is not None:
        metadata["ownerReferences"] = owners
    if annotations is not None:
        metadata["annotations"] = annotations
    body: dict[str, Any] = {"metadata": metadata}
    if node is not None:
        body["spec"] = {"nodeName": node}
    return body


APPS = "apps/v1"
BATCH = "batch/v1"
JOBSET = "jobset.x-k8s.io/v1alpha2"
LWS = "leaderworkerset.x-k8s.io/v1"
