"""The worker forwards ``WorkloadOnDevice`` facts and the governor plans migrations from them
(issue 13), with the real worker, Kafka and PostgreSQL.

A checkpointed Job's Pod and a bare non-recoverable Pod each hold a GPU that turns Unhealthy: the
governor quarantines both and decides ``MigrationPlanned`` for the first, ``MigrationEvidenceKept``
for the second; the Pod's workload record of the second comes after its observation (joined when
it arrives). Released Pods leave the governor's workload facts. Governed with the test default
batch size and with batch size 1: the same decisions, row for row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.event_codec import decode_event, encode_event
from services.domain.events import Health, PodDevicesReleased, ReleaseReason
from services.domain.governance.input_batch import decode_records
from services.domain.migration.records import WorkloadOnDevice
from services.domain.workloads.codec import encode_workload
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.domain.workloads.owners import OwnerLink
from services.runtime.config import Settings
from tests.replay.test_replay import drop, run_replay
from tests.streams.conftest import TopicSets
from tests.streams.test_governor_integration import Pipeline, Record, at, observation, stop
from tests.streams.test_worker_integration import read_topic

pytestmark = pytest.mark.integration

NODE = "gpu-node-a"
POD_UID = f"uid-{NODE}"  # the Pod of tests.streams.test_governor_integration.observation
POLICY = {"breaker_min_devices": 1000, "breaker_min_nodes": 1000}


def workload(
    pod_uid: str, pod_name: str, version: int, seconds: float, checkpointed: bool
) -> Record:
    record = PodWorkloadObserved(
        node=NODE,
        namespace="ml",
        pod_name=pod_name,
        pod_uid=pod_uid,
        status_version=version,
        observed_at=at(seconds),
        chain=(OwnerLink("Job", "train", "job-uid", "batch/v1"),) if checkpointed else (),
        migration_class=MigrationClass.CHECKPOINTED
        if checkpointed
        else MigrationClass.NON_RECOVERABLE,
        migration_source=MigrationSource.POD if checkpointed else MigrationSource.DEFAULT,
        checkpoint_max_age_seconds=900 if checkpointed else None,
    )
    return (NODE.encode(), encode_workload(record), None)


def other_pod(resource_id: str, health: Health, version: int, seconds: float) -> Record:
    """An observation of the bare Pod ``ml/infer`` (UID ``uid-infer``)."""
    key, value, partition = observation(NODE, resource_id, health, version, seconds)
    event = decode_event(value)
    return (key, encode_event(replace(event, pod_name="infer", pod_uid="uid-infer")), partition)


def released(pod_uid: str, pod_name: str, version: int, seconds: float) -> Record:
    event = PodDevicesReleased(
        NODE, "ml", pod_name, pod_uid, ReleaseReason.DELETED, version, at(seconds)
    )
    return (NODE.encode(), encode_event(event), None)


WAVES: list[list[Record]] = [
    [
        workload(POD_UID, f"train-{NODE}", 10, 0, checkpointed=True),
        observation(NODE, "GPU-1", Health.HEALTHY, 10, 1),  # joined with the stored record
        other_pod("GPU-2", Health.HEALTHY, 20, 1),  # its workload record comes later
    ],
    [workload("uid-infer", "infer", 20, 2, checkpointed=False)],
    [
        observation(NODE, "GPU-1", Health.UNHEALTHY, 11, 3),
        other_pod("GPU-2", Health.UNHEALTHY, 21, 3),
    ],
    [released(POD_UID, f"train-{NODE}", 12, 5), released("uid-infer", "infer", 22, 5)],
]


async def govern(
    settings: Settings, engine: AsyncEngine, bootstrap: str, worker_process: Any
) -> dict[str, Any]:
    async with Pipeline(settings, engine, bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        facts_before_release: list[Any] = []
        for index, wave in enumerate(WAVES):
            if index == len(WAVES) - 1:
                facts_before_release = await pipe.rows(
                    "SELECT node, resource_id, pod_uid FROM {s}.governor_workloads "
                    "ORDER BY resource_id"
                )
            await pipe.wave(wave)
        out = {
            "decisions": [
                tuple(r)
                for r in await pipe.rows(
                    "SELECT seq, idx, kind, at, node, resource_id, payload "
                    "FROM {s}.governance_decisions ORDER BY seq, idx"
                )
            ],
            "held": [tuple(r) for r in facts_before_release],
            "after": await pipe.rows("SELECT pod_uid FROM {s}.governor_workloads"),
        }
        end = await pipe.governance_end()
        forwarded = await read_topic(bootstrap, settings.governance_topic, end, 30)
        out["facts"] = [
            r
            for m in forwarded
            for r, _ in decode_records(m.value)
            if isinstance(r, WorkloadOnDevice)
        ]
        await stop(pipe.worker)
    return out


async def test_a_quarantined_gpu_plans_the_migration_of_its_workload_at_any_batch_size(
    topic_sets: TopicSets, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    default = await govern(await topic_sets(**POLICY), engine, kafka_bootstrap, worker_process)
    facts = default["facts"]
    assert [(f.resource_id, f.pod_uid, f.present, f.status_version) for f in facts] == [
        ("GPU-1", POD_UID, True, 10),
        ("GPU-2", "uid-infer", True, 20),  # when its workload record arrived
        ("GPU-1", POD_UID, False, 12),
        ("GPU-2", "uid-infer", False, 22),
    ]
    train = facts[0]
    assert train.workload_uid == "job-uid" and train.migration_class == "checkpointed"
    assert train.checkpoint_max_age_seconds == 900 and train.observed_at == at(1)
    assert facts[1].workload_uid == "uid-infer" and facts[1].migration_class is None

    assert default["held"] == [(NODE, "GPU-1", POD_UID), (NODE, "GPU-2", "uid-infer")]
    assert default["after"] == []  # the released Pods left the governor's facts
    by_device = {(row[5], row[2]) for row in default["decisions"]}
    assert {
        ("GPU-1", "DeviceQuarantined"),
        ("GPU-2", "DeviceQuarantined"),
        ("GPU-1", "MigrationPlanned"),
        ("GPU-2", "MigrationEvidenceKept"),
    } <= by_device, by_device
    [planned] = [row[6] for row in default["decisions"] if row[2] == "MigrationPlanned"]
    assert planned["details"]["workloadUID"] == "job-uid", planned

    single = await topic_sets(worker_batch_size=1, **POLICY)
    one = await govern(single, engine, kafka_bootstrap, worker_process)
    assert one["decisions"] == default["decisions"]
    assert one["facts"] == facts

    # The governance topic alone rebuilds the same governance projection, migrations included.
    schema = f"replay_{uuid4().hex[:12]}"
    try:
        result = await run_replay(single, "--governance", "--schema", schema, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {schema} is identical to {single.database_schema}" in result.stdout
    finally:
        await drop(engine, schema)
