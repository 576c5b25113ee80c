"""Driver and claim failures against a real kube-apiserver (issue 16 item 3): Events as the
kubelet (``FailedPrepareDynamicResources``, core/v1, ``source.host`` its node) and the scheduler
(``FailedScheduling`` with a DRA message, written through events.k8s.io/v1 as the scheduler
does) write them, and a Pod's ``PodScheduled=False`` condition.

``devicestate watch`` runs as a subprocess with the ``devicestate-watcher`` ServiceAccount and the
RBAC of ``deploy/`` only; it must publish each classified failure as ``DRAFailureObserved``, a
worker projects them into ``dra_failures``, and the counts (what ``/metrics`` serves as
``devicestate_dra_failures_total``) are by class. A re-LIST by a restarted watcher publishes
them again and counts nothing twice; an unclassified Event is ignored; a malformed one is a
problem that stops nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from kubernetes_asyncio import client
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import kubeapi
from services.adapters.projection.failure_sql import FailureReads
from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.records import TopicRecord
from services.runtime.config import Settings
from tests.kubeapi.kube_rest import KubeREST, apply_identities, wait_until_allowed
from tests.kubeapi.test_watcher_live import (
    IMAGE,
    WATCHER_ACCOUNT,
    Cluster,
    TopicTail,
    WatcherProcess,
    watcher_process,  # noqa: F401 - the fixture
)
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

PREPARE = (
    "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim "
    "train-0-gpu: gpu.example.com: rpc error: code = DeadlineExceeded desc = context deadline "
    "exceeded"
)
INVALID = (
    "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim "
    'train-1-gpu: failed to decode opaque config: unknown field "sharingg"'
)
SCHEDULING = (
    "0/3 nodes are available: 3 cannot allocate all claims. preemption: 0/3 nodes are "
    "available: 3 Preemption is not helpful for scheduling."
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kubelet_event(
    namespace: str, name: str, pod: str, pod_uid: str, node: str, reason: str, message: str
) -> dict[str, Any]:
    """A core/v1 Event as the kubelet's recorder writes it."""
    return {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": namespace,
            "name": pod,
            "uid": pod_uid,
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": _now(),
        "lastTimestamp": _now(),
        "source": {"component": "kubelet", "host": node},
    }


def failures(records: list[TopicRecord]) -> list[DRAFailureObserved]:
    return [r for r in records if isinstance(r, DRAFailureObserved)]


def by_source(records: list[TopicRecord], source_uid: str) -> list[DRAFailureObserved]:
    return [r for r in failures(records) if r.source_uid == source_uid]


async def counts_by_class(reads: FailureReads, namespace: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for c in await reads.counts():
        if c.namespace == namespace:
            found[c.failure_class] = found.get(c.failure_class, 0) + c.total
    return found


async def until_counts(reads: FailureReads, namespace: str, expected: dict[str, int]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while (found := await counts_by_class(reads, namespace)) != expected:
        assert loop.time() < deadline, f"dra_failures counts {found}, expected {expected}"
        await asyncio.sleep(0.5)


async def test_watcher_publishes_and_counts_driver_failures_by_class(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,
    rendered: dict[str, list[dict[str, Any]]],
    stream_settings: Settings,
    worker_process: Any,
    watcher_process: Callable[..., WatcherProcess],  # noqa: F811
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    settings = with_governance_topics(stream_settings)
    tag = uuid4().hex[:6]
    node, namespace = f"gpu-f-{tag}", f"fail-{tag}"
    cluster = Cluster(admin_client)
    core, events_v1 = client.CoreV1Api(admin_client), client.EventsV1Api(admin_client)
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["base"])
        for verb in ("list", "watch"):
            await wait_until_allowed(rest, WATCHER_ACCOUNT, verb, "events")
        kubeconfig = await rest.service_account_kubeconfig(
            "devicestate", WATCHER_ACCOUNT, tmp_path / "watcher.kubeconfig"
        )
    await core.create_namespace({"metadata": {"name": namespace}})
    await cluster.node(node)
    containers = [{"name": "a", "image": IMAGE}]
    train_uid = await cluster.pod(namespace, "train-0", node, containers=containers)
    # Before the watcher starts (its first LIST finds it): the kubelet could not prepare a claim.
    prepare = await core.create_namespaced_event(
        namespace,
        kubelet_event(
            namespace,
            "train-0.prep",
            "train-0",
            train_uid,
            node,
            "FailedPrepareDynamicResources",
            PREPARE,
        ),
    )
    prepare_uid = prepare.metadata.uid
    # A Pod the scheduler could not place for its claims: PodScheduled=False, Unschedulable.
    pending = await core.create_namespaced_pod(
        namespace, {"metadata": {"name": "serve-0"}, "spec": {"containers": containers}}
    )
    await core.patch_namespaced_pod_status(
        "serve-0",
        namespace,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": SCHEDULING,
                        "lastTransitionTime": _now(),
                    }
                ],
            }
        },
    )

    worker_process(settings)
    watcher = watcher_process(settings, kubeconfig)
    reads = FailureReads(engine, settings.database_schema)
    async with TopicTail(settings.kafka_bootstrap_servers, settings.topic, watcher) as tail:
        records = await tail.wait_for(
            lambda rs: (
                by_source(rs, prepare_uid)
                and any(r.pod_uid == pending.metadata.uid for r in failures(rs))
            ),
            "the listed Event's and the unschedulable Pod's failures",
            60,
        )
        [listed] = by_source(records, prepare_uid)
        assert (listed.failure_class.value, listed.reason, listed.occurrences) == (
            "retryable",
            "FailedPrepareDynamicResources",
            1,
        )
        assert listed.node == node and listed.pod_uid == train_uid
        [condition] = [r for r in failures(records) if r.pod_uid == pending.metadata.uid]
        assert condition.origin.value == "PodCondition" and condition.reason == "Unschedulable"
        assert condition.node == f"namespace:{namespace}"  # no node yet: keyed by namespace

        # Watched: the scheduler's FailedScheduling (events.k8s.io/v1, as it writes them), an
        # invalid claim, a failed unprepare, an unclassified Warning and a malformed Event.
        scheduled = await events_v1.create_namespaced_event(
            namespace,
            {
                "metadata": {"name": "serve-0.sched"},
                "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "reportingController": "default-scheduler",
                "reportingInstance": "default-scheduler-test",
                "action": "Scheduling",
                "reason": "FailedScheduling",
                "note": SCHEDULING,
                "type": "Warning",
                "regarding": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "namespace": namespace,
                    "name": "serve-0",
                    "uid": pending.metadata.uid,
                },
            },
        )
        invalid = await core.create_namespaced_event(
            namespace,
            kubelet_event(
                namespace,
                "train-1.prep",
                "train-1",
                str(uuid4()),
                node,
                "FailedPrepareDynamicResources",
                INVALID,
            ),
        )
        unprepare = await core.create_namespaced_event(
            namespace,
            kubelet_event(
                namespace,
                "train-2.unprep",
                "train-2",
                str(uuid4()),
                node,
                "FailedUnprepareDynamicResources",
                "NodeUnprepareResources failed",
            ),
        )
        await core.create_namespaced_event(
            namespace,
            kubelet_event(
                namespace,
                "train-0.backoff",
                "train-0",
                train_uid,
                node,
                "BackOff",
                "Back-off restarting failed container",
            ),
        )
        malformed = kubelet_event(
            namespace, "broken.prep", "", "", node, "FailedPrepareDynamicResources", PREPARE
        )
        await core.create_namespaced_event(namespace, malformed)
        # The kubelet counts the first failure again.
        await core.patch_namespaced_event(
            "train-0.prep", namespace, {"count": 3, "lastTimestamp": _now()}
        )
        wanted = {scheduled.metadata.uid, invalid.metadata.uid, unprepare.metadata.uid}
        records = await tail.wait_for(
            lambda rs: (
                wanted <= {r.source_uid for r in failures(rs)}
                and any(r.occurrences == 3 for r in by_source(rs, prepare_uid))
            ),
            "the watched failures",
            60,
        )
        classes = {r.source_uid: r.failure_class.value for r in failures(records)}
        assert classes[scheduled.metadata.uid] == "retryable"
        assert classes[invalid.metadata.uid] == "non-retryable"
        assert classes[unprepare.metadata.uid] == "needs-cleanup"
        assert {r.reason for r in failures(records)} == {
            "FailedPrepareDynamicResources",
            "FailedUnprepareDynamicResources",
            "FailedScheduling",
            "Unschedulable",
        }  # BackOff is not a driver failure: never published
        [sched] = by_source(records, scheduled.metadata.uid)
        assert sched.node == f"namespace:{namespace}" and sched.pod_name == "serve-0"
        expected = {"retryable": 3 + 1 + 1, "non-retryable": 1, "needs-cleanup": 1}
        await until_counts(reads, namespace, expected)
        watcher.check_running()
        assert (
            watcher.metrics()['devicestate_watcher_problems_total{code="failure-unreadable"}'] >= 1
        )

        # A new watcher (its memory empty) LISTs and publishes them all again: nothing is
        # counted twice. A later Event of the same node (same partition, after the copies) says
        # when the worker has read them.
        published = len(failures(records))
        assert watcher.stop() == 0
        again = watcher_process(settings, kubeconfig)
        tail._watcher = again
        records = await tail.wait_for(
            lambda rs: len(by_source(rs, prepare_uid)) >= 3, "the re-LISTed failures", 60
        )
        assert len(failures(records)) > published
        marker = await core.create_namespaced_event(
            namespace,
            kubelet_event(
                namespace,
                "train-0.prep2",
                "train-0",
                train_uid,
                node,
                "FailedPrepareDynamicResources",
                PREPARE,
            ),
        )
        await tail.wait_for(lambda rs: bool(by_source(rs, marker.metadata.uid)), "the marker", 60)
        await until_counts(reads, namespace, {**expected, "retryable": expected["retryable"] + 1})
