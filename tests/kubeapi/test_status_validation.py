"""What a real kube-apiserver lets through in ``allocatedResourcesStatus``, and what the watcher
makes of exactly that.

Each accepted case is PATCHed into a Pod's status, read back as raw JSON (what a LIST or WATCH
hands the watcher) and given to the watcher's own processor (``WatchProcessor``: ``read_pod``, the
tracker, the field limits). So the watcher's checks are tested against inputs a server really
sends: those it accepts that still need the watcher (a control character or 2000 bytes in a
resourceID, conflicting health across containers or entries, a container status for a container
the spec lacks, a NUL in a message) and those where the watcher is stricter or more tolerant than
needed. The refusals complete ``test_apiserver.py``'s: the server never sends them, the watcher
only meets them in recorded streams. docs/kube-apiserver.md has the table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.domain.events import ClaimRef, ContainerKind, DeviceHealthObserved, Health
from services.domain.pod_status import ProblemCode
from services.domain.watch.pod_tracker import WatchKind
from services.processes.watcher.processor import WatchProcessor

GPU = "nvidia.com/gpu"
IMAGE = "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04"
DRA_ID = "gpu.example.com/node-1/gpu-0"


def _status(name: str, allocated: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    status = {
        "name": name,
        "image": IMAGE,
        "imageID": "",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2026-11-29T12:00:00Z"}},
        "allocatedResourcesStatus": allocated,
    }
    status.update(fields)
    return status


def _entry(name: str, *resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "resources": list(resources)}


def _res(resource_id: str | None, health: str = "Healthy", **more: Any) -> dict[str, Any]:
    resource: dict[str, Any] = {"health": health, **more}
    if resource_id is not None:
        resource["resourceID"] = resource_id
    return resource


def _gpu_container(name: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "resources": {"limits": {GPU: "1"}}}


def _claim_container(name: str, request: str | None) -> dict[str, Any]:
    claim = {"name": "gpus", **({"request": request} if request else {})}
    return {"name": name, "image": IMAGE, "resources": {"claims": [claim]}}


CLAIMS = {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}]}


@dataclass
class Case:
    """A Pod ``spec`` (containers a and b with a GPU each unless given), the ``status`` kubelet
    PATCHes, and what the watcher must make of the stored Pod."""

    status: dict[str, Any]
    spec: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, Health] = field(default_factory=dict)
    problems: set[ProblemCode] = field(default_factory=set)
    dead_letter: str | None = None  # a substring of the dead letter's reason
    check: Any = None  # more checks on the observations, by resourceID


ACCEPTED: dict[str, Case] = {
    "one device shared by two containers, same health": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1"))]),
                _status("b", [_entry(GPU, _res("G1"))]),
            ]
        },
        devices={"G1": Health.HEALTHY},
        check=lambda o: [c.name for c in o["G1"].containers] == ["a", "b"],
    ),
    "one device in two containers with conflicting health": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1", "Healthy"))]),
                _status("b", [_entry(GPU, _res("G1", "Unhealthy"))]),
            ]
        },
        problems={ProblemCode.CONFLICTING_HEALTH},
        dead_letter="conflicting-health",
    ),
    "two entries of the same name in one container": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1")), _entry(GPU, _res("G2", "Unhealthy"))])
            ]
        },
        devices={"G1": Health.HEALTHY, "G2": Health.UNHEALTHY},
    ),
    "one device in two entries of one container, conflicting health": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1")), _entry(GPU, _res("G1", "Unhealthy"))])
            ]
        },
        problems={ProblemCode.CONFLICTING_HEALTH},
        dead_letter="conflicting-health",
    ),
    "one device under the device plugin and a claim": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1")), _entry("claim:gpus/gpu", _res("G1"))])
            ]
        },
        spec={
            **CLAIMS,
            "containers": [
                {
                    "name": "a",
                    "image": IMAGE,
                    "resources": {
                        "limits": {GPU: "1"},
                        "claims": [{"name": "gpus", "request": "gpu"}],
                    },
                }
            ],
        },
        devices={"G1": Health.HEALTHY},
        problems={ProblemCode.DUPLICATE_RESOURCE_ID},
        check=lambda o: "duplicate-resource-id" in o["G1"].flags,
    ),
    "a status for a container the spec does not have": Case(
        {"containerStatuses": [_status("ghost", [_entry(GPU, _res("G1"))])]},
        devices={"G1": Health.HEALTHY},
        problems={ProblemCode.STATUS_FOR_UNKNOWN_CONTAINER},
        check=lambda o: o["G1"].flags == ("status-for-unknown-container",),
    ),
    "a NUL character in the message": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1", "Unhealthy", message="XID\x0079"))])
            ]
        },
        devices={"G1": Health.UNHEALTHY},
        check=lambda o: o["G1"].message == "XID\ufffd79",
    ),
    "a control character in the resourceID": Case(
        {"containerStatuses": [_status("a", [_entry(GPU, _res("GPU-\x1f1"))])]},
        problems={ProblemCode.INVALID_FIELD},
        dead_letter="resourceID contains a control character",
    ),
    "a resourceID of 2000 bytes": Case(
        {"containerStatuses": [_status("a", [_entry(GPU, _res("G" * 2000))])]},
        problems={ProblemCode.INVALID_FIELD},
        dead_letter="resourceID is longer than 1024 bytes",
    ),
    "an empty resourceID": Case(
        {"containerStatuses": [_status("a", [_entry(GPU, _res(""))])]},
        problems={ProblemCode.MISSING_RESOURCE_ID},
    ),
    "a resource without resourceID": Case(
        {"containerStatuses": [_status("a", [_entry(GPU, _res(None))])]},
        problems={ProblemCode.MISSING_RESOURCE_ID},
    ),
    "an entry without resources": Case(
        {"containerStatuses": [_status("a", [{"name": GPU}]), _status("b", [_entry(GPU)])]},
    ),
    "a message of 1024 bytes (512 two-byte characters)": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1", "Unhealthy", message="é" * 512))])
            ]
        },
        devices={"G1": Health.UNHEALTHY},
        check=lambda o: o["G1"].message == "é" * 512 and o["G1"].flags == (),
    ),
    "Unknown with a message": Case(
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1", "Unknown", message="plugin gone"))])
            ]
        },
        devices={"G1": Health.UNKNOWN},
        check=lambda o: (
            (o["G1"].message, o["G1"].raw_health, o["G1"].flags) == ("plugin gone", None, ())
        ),
    ),
    "an init container (and a sidecar)": Case(
        {
            "initContainerStatuses": [
                _status(
                    "init",
                    [_entry(GPU, _res("G1"))],
                    ready=False,
                    started=False,
                    state={
                        "terminated": {
                            "exitCode": 0,
                            "startedAt": "2026-11-29T12:00:00Z",
                            "finishedAt": "2026-11-29T12:00:01Z",
                        }
                    },
                ),
                _status("sidecar", [_entry(GPU, _res("G2"))]),
            ]
        },
        spec={
            "initContainers": [
                _gpu_container("init"),
                {**_gpu_container("sidecar"), "restartPolicy": "Always"},
            ],
            "containers": [{"name": "main", "image": IMAGE}],
        },
        devices={"G1": Health.HEALTHY, "G2": Health.HEALTHY},
        check=lambda o: {c.kind for d in o.values() for c in d.containers} == {ContainerKind.INIT},
    ),
    "a claim without request, with its ResourceClaim name in the status": Case(
        {
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "pod-gpus-x7k2q"}],
            "containerStatuses": [_status("a", [_entry("claim:gpus", _res(DRA_ID, "Unhealthy"))])],
        },
        spec={**CLAIMS, "containers": [_claim_container("a", None)]},
        devices={DRA_ID: Health.UNHEALTHY},
        check=lambda o: o[DRA_ID].claim == ClaimRef("gpus", None, "pod-gpus-x7k2q"),
    ),
    "a resource that is not a device (cpu)": Case(
        {"containerStatuses": [_status("a", [_entry("cpu", _res("core-0"))])]},
        spec={"containers": [{"name": "a", "image": IMAGE, "resources": {"limits": {"cpu": "1"}}}]},
        devices={"core-0": Health.HEALTHY},
        check=lambda o: o["core-0"].resource_name == "cpu",
    ),
}

REFUSED: dict[str, tuple[dict[str, Any], dict[str, Any], str, set[ProblemCode]]] = {
    # name: (spec, status, the server's message, what the watcher flags for the same JSON)
    "an entry without name": (
        {},
        {"containerStatuses": [_status("a", [{"resources": [_res("G1")]}])]},
        "must match one of the container's resource requests",
        {ProblemCode.MISSING_NAME},
    ),
    "a message of 1025 bytes but 513 characters": (
        {},
        {
            "containerStatuses": [
                _status("a", [_entry(GPU, _res("G1", "Unhealthy", message="é" * 512 + "x"))])
            ]
        },
        "may not be more than 1024 bytes",
        set(),  # the watcher counts characters: it would keep this one whole
    ),
    "claim:<name> when the container claims <name>/<request>": (
        {**CLAIMS, "containers": [_claim_container("a", "gpu")]},
        {"containerStatuses": [_status("a", [_entry("claim:gpus", _res(DRA_ID))])]},
        "must match one of the container's resource claims",
        set(),
    ),
    "a resourceClaimStatuses entry for no claim of the Pod": (
        {**CLAIMS, "containers": [_claim_container("a", "gpu")]},
        {"resourceClaimStatuses": [{"name": "other", "resourceClaimName": "x"}]},
        "must match the name of an entry in `spec.resourceClaims`",
        set(),
    ),
    "a resourceClaimName that is not a DNS subdomain": (
        {**CLAIMS, "containers": [_claim_container("a", "gpu")]},
        {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "Bad_Name"}]},
        "a lowercase RFC 1123 subdomain",
        set(),
    ),
}


@pytest.fixture(scope="module")
async def namespace(admin_client: client.ApiClient) -> AsyncIterator[str]:
    name = f"status-checks-{uuid.uuid4().hex[:6]}"
    await client.CoreV1Api(admin_client).create_namespace({"metadata": {"name": name}})
    yield name


async def _pod(admin: client.ApiClient, namespace: str, spec: dict[str, Any]) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [_gpu_container("a"), _gpu_container("b")],
            **spec,
        },
    }
    await client.CoreV1Api(admin).create_namespaced_pod(namespace, body)
    return name


@pytest.mark.parametrize("case", list(ACCEPTED))
async def test_what_the_server_accepts_the_watcher_reads_as_intended(
    admin_client: client.ApiClient, namespace: str, case: str
) -> None:
    expected = ACCEPTED[case]
    core = client.CoreV1Api(admin_client)
    name = await _pod(admin_client, namespace, expected.spec)
    await core.patch_namespaced_pod_status(name, namespace, {"status": expected.status})
    response = await core.read_namespaced_pod(name, namespace, _preload_content=False)
    raw = await response.read()
    pod = json.loads(raw)

    outcome = WatchProcessor().pod_event(
        WatchKind.ADDED, pod, raw, f"kube:test/{name}", datetime.now(UTC)
    )
    found = {e.resource_id: e for e in outcome.events if isinstance(e, DeviceHealthObserved)}
    assert {rid: e.health for rid, e in found.items()} == expected.devices
    assert {p.code for p in outcome.problems} == expected.problems
    if expected.dead_letter is None:
        assert not outcome.dead_letters
    else:
        (letter,) = outcome.dead_letters
        assert expected.dead_letter in letter.reason
        assert letter.original == raw  # the Pod as the server sent it
    if expected.check is not None:
        assert expected.check(found), found


@pytest.mark.parametrize("case", list(REFUSED))
async def test_what_the_server_refuses(
    admin_client: client.ApiClient, namespace: str, case: str
) -> None:
    spec, status, message, watcher_flags = REFUSED[case]
    core = client.CoreV1Api(admin_client)
    name = await _pod(admin_client, namespace, spec)
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod_status(name, namespace, {"status": status})
    assert caught.value.status == 422, caught.value.body
    assert message in json.loads(caught.value.body)["message"]
    # The same JSON in a recorded stream: what the watcher makes of it (never from a server).
    pod = {
        "metadata": {"name": name, "namespace": namespace, "uid": "u-1", "resourceVersion": "7"},
        "spec": {"nodeName": "gpu-node-1", **spec},
        "status": status,
    }
    outcome = WatchProcessor().pod_event(
        WatchKind.ADDED, pod, b"{}", "file:recorded", datetime.now(UTC)
    )
    assert {p.code for p in outcome.problems} - {ProblemCode.STATUS_FOR_UNKNOWN_CONTAINER} == (
        watcher_flags
    )
