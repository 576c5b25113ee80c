"""The workloads of ``tests/api/test_workloads_api.py`` and ``tests/operator_cli``: devices and
PodWorkloadObserved records written by ``apply_batch`` (as the worker writes them), governance
rows as the governor writes them (real PostgreSQL).

uid-1 (ml/train-0, JobSet, checkpointed) holds GPU-0, quarantined; uid-2 (ml/web-x,
Deployment) holds GPU-1; uid-3 (infer/solo, bare Pod) holds GPU-5 on node b; uid-4 has a
workload record but holds no device.
"""

from __future__ import annotations

from datetime import timedelta

from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.log import LogPosition
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.domain.workloads.owners import OwnerLink
from tests.api.conftest import Governor
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

JOB = (
    OwnerLink("Job", "train-0", "job-uid", "batch/v1"),
    OwnerLink("JobSet", "train", "jobset-uid", "jobset.x-k8s.io/v1alpha2"),
)
DEPLOYMENT = (
    OwnerLink("ReplicaSet", "web-7d9", "rs-uid", "apps/v1"),
    OwnerLink("Deployment", "web", "d-uid", "apps/v1"),
)


def workload(uid: str, name: str, version: int | None, **fields: object) -> PodWorkloadObserved:
    values: dict[str, object] = {"node": "gpu-node-a", "namespace": "ml"}
    values.update(fields)
    return PodWorkloadObserved(
        pod_name=name,
        pod_uid=uid,
        status_version=version,
        observed_at=T0 + timedelta(seconds=5),
        **values,  # type: ignore[arg-type]
    )


async def load_workloads(
    store: ProjectionStore, governor: Governor, observation: ObservationFactory, logged: LogFactory
) -> None:
    """Write the scenario (module docstring) into the test's schema."""
    events = [
        observation(10, resource_id="GPU-0"),
        observation(11, resource_id="GPU-1", pod_uid="uid-2", pod_name="web-x"),
        observation(12, node="gpu-node-b", resource_id="GPU-5", pod_uid="uid-3", namespace="infer"),
    ]
    records = [
        workload(
            "uid-1",
            "train-0",
            10,
            chain=JOB,
            migration_class=MigrationClass.CHECKPOINTED,
            migration_source=MigrationSource.OWNER,
            checkpoint_max_age_seconds=900,
        ),
        workload(
            "uid-2",
            "web-x",
            11,
            chain=DEPLOYMENT[:1],
            chain_complete=False,
            chain_reason="Deployment web: GET failed, retried: HTTP 503: unavailable",
        ),
        workload("uid-3", "solo", 12, node="gpu-node-b", namespace="infer"),
        workload("uid-4", "idle", 3),
        # A later record of uid-2 with the whole chain, then an older one that must not win.
        workload("uid-2", "web-x", 14, chain=DEPLOYMENT),
        workload("uid-2", "web-x", 13, chain=(), migration_class=MigrationClass.SHARDED),
    ]
    start = len(events)
    positions = [LogPosition(TOPIC, 0, start + i) for i in range(len(records))]
    await store.apply_batch(
        LoggedBatch(
            logged(events),
            event_times=[(p, r.observed_at) for p, r in zip(positions, records, strict=True)],
            workloads=list(zip(positions, records, strict=True)),
        )
    )
    await governor.device(
        "gpu-node-a", "GPU-0", "Quarantined", T0, quarantine_id="gpu-node-a/GPU-0@10"
    )
    await governor.device("gpu-node-a", "GPU-1", "Available", T0)
