"""read_pod: one raw Pod dict -> PodReading (observations + problems)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.domain.events import (
    MESSAGE_MAX_LENGTH,
    ClaimRef,
    ContainerKind,
    ContainerRef,
    DeviceSource,
    Health,
)
from services.domain.pod_reader import read_pod
from services.domain.pod_status import ProblemCode

AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def resource(
    resource_id: str | None = "GPU-0", health: Any = "Healthy", **extra: Any
) -> dict[str, Any]:
    item: dict[str, Any] = dict(extra)
    if resource_id is not None:
        item["resourceID"] = resource_id
    if health is not None:
        item["health"] = health
    return item


def entry(name: str | None = "nvidia.com/gpu", *resources: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {"resources": list(resources)}
    if name is not None:
        item["name"] = name
    return item


def pod(
    *statuses: dict[str, Any],
    init_statuses: list[dict[str, Any]] | None = None,
    node: str | None = "gpu-node-a",
    version: Any = "100",
    phase: str = "Running",
    containers: tuple[str, ...] = ("main", "sidecar"),
    init_containers: tuple[str, ...] = ("init",),
    claim_statuses: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train-0", "namespace": "ml", "uid": "uid-1"}
    if version is not None:
        metadata["resourceVersion"] = version
    spec: dict[str, Any] = {
        "containers": [{"name": n} for n in containers],
        "initContainers": [{"name": n} for n in init_containers],
    }
    if node is not None:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "containerStatuses": list(statuses)}
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if claim_statuses is not None:
        status["resourceClaimStatuses"] = claim_statuses
    return {"kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def status(name: str | None = "main", *entries: dict[str, Any] | None) -> dict[str, Any]:
    item: dict[str, Any] = {"ready": True}
    if name is not None:
        item["name"] = name
    if entries != (None,):
        item["allocatedResourcesStatus"] = list(entries) if entries else None
    return item


def codes(reading: Any) -> list[str]:
    return [p.code.value for p in reading.problems]


def test_device_plugin_observation_carries_the_pod_facts() -> None:
    reading = read_pod(pod(status("main", entry("nvidia.com/gpu", resource("GPU-0")))), AT)
    (obs,) = reading.observations
    assert (obs.node, obs.namespace, obs.pod_name, obs.pod_uid) == (
        "gpu-node-a",
        "ml",
        "train-0",
        "uid-1",
    )
    assert (obs.resource_name, obs.resource_id, obs.health) == (
        "nvidia.com/gpu",
        "GPU-0",
        Health.HEALTHY,
    )
    assert obs.source is DeviceSource.DEVICE_PLUGIN and obs.claim is None
    assert obs.containers == (ContainerRef("main", ContainerKind.REGULAR),)
    assert (obs.status_version, obs.observed_at, obs.flags) == (100, AT, ())
    assert reading.problems == ()
    assert (reading.node, reading.uid, reading.status_version, reading.terminal) == (
        "gpu-node-a",
        "uid-1",
        100,
        False,
    )


@pytest.mark.parametrize(
    "container_status",
    [
        status("main", None),  # allocatedResourcesStatus missing
        status("main"),  # null
        {"name": "main", "allocatedResourcesStatus": []},
        status("main", entry("nvidia.com/gpu")),  # empty resources
        status("main", {"name": "nvidia.com/gpu"}),  # no resources key
    ],
)
def test_no_health_data_is_no_observation_and_no_problem(container_status: dict[str, Any]) -> None:
    reading = read_pod(pod(container_status), AT)
    assert reading.observations == ()
    assert reading.problems == ()


def test_init_container_statuses_are_read_as_init() -> None:
    reading = read_pod(
        pod(init_statuses=[status("init", entry("claim:gpu", resource("dev-1")))]), AT
    )
    (obs,) = reading.observations
    assert obs.containers == (ContainerRef("init", ContainerKind.INIT),)
    assert reading.problems == ()


def test_entry_without_name_is_skipped_with_a_problem() -> None:
    reading = read_pod(
        pod(
            status(
                "main", entry(None, resource("GPU-0")), entry("nvidia.com/gpu", resource("GPU-1"))
            )
        ),
        AT,
    )
    assert [o.resource_id for o in reading.observations] == ["GPU-1"]
    assert codes(reading) == ["missing-name"]


@pytest.mark.parametrize("bad_id", [None, "", 7])
def test_resource_without_usable_id_is_skipped(bad_id: Any) -> None:
    bad = resource(None, "Unhealthy") if bad_id is None else resource(bad_id, "Unhealthy")
    reading = read_pod(pod(status("main", entry("nvidia.com/gpu", bad, resource("GPU-1")))), AT)
    assert [o.resource_id for o in reading.observations] == ["GPU-1"]
    assert codes(reading) == ["missing-resource-id"]


@pytest.mark.parametrize(
    ("raw", "health", "raw_health", "flag"),
    [
        ("Healthy", Health.HEALTHY, None, None),
        ("Unhealthy", Health.UNHEALTHY, None, None),
        ("Unknown", Health.UNKNOWN, None, None),
        ("unhealthy", Health.UNKNOWN, "unhealthy", "unrecognized-health"),
        ("Degraded", Health.UNKNOWN, "Degraded", "unrecognized-health"),
        ("", Health.UNKNOWN, "", "unrecognized-health"),
        (1, Health.UNKNOWN, "1", "unrecognized-health"),
        (None, Health.UNKNOWN, None, "missing-health"),
    ],
)
def test_health_is_case_sensitive_and_never_guessed(
    raw: Any, health: Health, raw_health: str | None, flag: str | None
) -> None:
    reading = read_pod(pod(status("main", entry("nvidia.com/gpu", resource("GPU-0", raw)))), AT)
    (obs,) = reading.observations
    assert (obs.health, obs.raw_health) == (health, raw_health)
    assert obs.flags == (() if flag is None else (flag,))
    assert codes(reading) == ([] if flag is None else [flag])


def test_message_is_kept_and_cut_to_the_api_limit() -> None:
    long = "x" * (MESSAGE_MAX_LENGTH + 5)
    reading = read_pod(
        pod(
            status(
                "main",
                entry(
                    "claim:gpu",
                    resource("a", "Unhealthy", message="ECC"),
                    resource("b", "Unhealthy", message=long),
                    resource("c", "Unhealthy", message="y" * MESSAGE_MAX_LENGTH),
                ),
            )
        ),
        AT,
    )
    by_id = {o.resource_id: o for o in reading.observations}
    assert (by_id["a"].message, by_id["a"].flags) == ("ECC", ())
    assert by_id["b"].message == long[:MESSAGE_MAX_LENGTH]
    assert by_id["b"].flags == ("message-truncated",)
    assert by_id["c"].flags == ()
    assert codes(reading) == ["message-truncated"]


def test_dra_claim_names_are_resolved_through_resource_claim_statuses() -> None:
    reading = read_pod(
        pod(
            status(
                "main",
                entry("claim:gpus/main", resource("drv/pool/gpu-1")),
                entry("claim:accel", resource("drv/pool/accel-1")),
                entry("claim:other", resource("drv/pool/x")),
            ),
            claim_statuses=[
                {"name": "gpus", "resourceClaimName": "train-0-gpus-abcde"},
                {"name": "accel", "resourceClaimName": "train-0-accel-xyz"},
                {"name": "other"},  # no ResourceClaim needed / not listed
            ],
        ),
        AT,
    )
    claims = {o.resource_id: o.claim for o in reading.observations}
    assert claims == {
        "drv/pool/gpu-1": ClaimRef("gpus", "main", "train-0-gpus-abcde"),
        "drv/pool/accel-1": ClaimRef("accel", None, "train-0-accel-xyz"),
        "drv/pool/x": ClaimRef("other", None, None),
    }
    assert {o.source for o in reading.observations} == {DeviceSource.DRA}


def test_same_device_in_two_containers_is_one_observation_with_both() -> None:
    shared = entry("claim:shared", resource("dev-4", "Unhealthy", message="ECC"))
    reading = read_pod(pod(status("sidecar", shared), status("main", shared)), AT)
    (obs,) = reading.observations
    assert [c.name for c in obs.containers] == ["main", "sidecar"]
    assert (obs.health, obs.message, obs.flags) == (Health.UNHEALTHY, "ECC", ())
    assert reading.problems == ()


def test_conflicting_health_for_one_resource_id_yields_no_observation() -> None:
    reading = read_pod(
        pod(
            status(
                "main",
                entry(
                    "claim:gpus",
                    resource("common", "Healthy"),
                    resource("common", "Unhealthy"),
                    resource("dev-2"),
                ),
            )
        ),
        AT,
    )
    assert [o.resource_id for o in reading.observations] == ["dev-2"]
    assert codes(reading) == ["conflicting-health"]
    assert reading.rejected


def test_conflict_across_containers_is_a_conflict_too() -> None:
    reading = read_pod(
        pod(
            status("main", entry("claim:g", resource("dev", "Healthy"))),
            status("sidecar", entry("claim:g", resource("dev", "Unknown"))),
        ),
        AT,
    )
    assert reading.observations == ()
    assert codes(reading) == ["conflicting-health"]


def test_duplicate_resource_id_with_agreeing_health_is_flagged_not_merged_silently() -> None:
    reading = read_pod(
        pod(
            status(
                "main", entry("claim:b", resource("common")), entry("claim:a", resource("common"))
            )
        ),
        AT,
    )
    (obs,) = reading.observations
    assert obs.flags == ("duplicate-resource-id",)
    assert obs.resource_name == "claim:a"  # chosen by name, not by list order
    assert codes(reading) == ["duplicate-resource-id"]
    assert not reading.rejected


def test_different_messages_for_one_device_are_flagged() -> None:
    reading = read_pod(
        pod(
            status("main", entry("claim:g", resource("dev", "Unhealthy", message="b"))),
            status("sidecar", entry("claim:g", resource("dev", "Unhealthy", message="a"))),
        ),
        AT,
    )
    (obs,) = reading.observations
    assert obs.message == "b"  # the first container in name order
    assert obs.flags == ("conflicting-message",)


def test_status_for_a_container_not_in_the_spec_is_recorded_and_flagged() -> None:
    reading = read_pod(
        pod(
            status("main", entry("nvidia.com/gpu", resource("GPU-0"))),
            status("ghost", entry("nvidia.com/gpu", resource("GPU-1", "Unhealthy"))),
        ),
        AT,
    )
    by_id = {o.resource_id: o for o in reading.observations}
    assert by_id["GPU-0"].flags == ()
    assert by_id["GPU-1"].flags == ("status-for-unknown-container",)
    assert by_id["GPU-1"].health is Health.UNHEALTHY
    assert codes(reading) == ["status-for-unknown-container"]


def test_init_status_under_a_regular_container_name_is_a_mismatch() -> None:
    reading = read_pod(pod(init_statuses=[status("main", entry("claim:g", resource("dev")))]), AT)
    (obs,) = reading.observations
    assert obs.flags == ("status-for-unknown-container",)


@pytest.mark.parametrize("node", [None, ""])
def test_no_node_name_means_no_observation(node: str | None) -> None:
    reading = read_pod(
        pod(status("main", entry("nvidia.com/gpu", resource("GPU-0"))), node=node), AT
    )
    assert reading.observations == ()
    assert codes(reading) == ["missing-node-name"]
    assert reading.rejected and reading.node is None


def test_unscheduled_pod_without_health_is_normal() -> None:
    reading = read_pod(pod(node=None, phase="Pending"), AT)
    assert (reading.observations, reading.problems, reading.rejected) == ((), (), False)


@pytest.mark.parametrize("version", [None, "", "v2-abc", "007", "0", 12])
def test_unordered_resource_version_still_emits(version: Any) -> None:
    reading = read_pod(
        pod(status("main", entry("nvidia.com/gpu", resource("GPU-0"))), version=version), AT
    )
    (obs,) = reading.observations
    assert obs.status_version is None
    assert codes(reading) == ["unordered-resource-version"]
    assert not reading.rejected


def test_huge_resource_versions_are_exact() -> None:
    reading = read_pod(
        pod(
            status("main", entry("nvidia.com/gpu", resource("GPU-0"))),
            version="1776286634735007008",
        ),
        AT,
    )
    assert reading.observations[0].status_version == 1776286634735007008


def test_missing_uid_is_rejected() -> None:
    raw = pod(status("main", entry("nvidia.com/gpu", resource("GPU-0"))))
    del raw["metadata"]["uid"]
    reading = read_pod(raw, AT)
    assert reading.observations == ()
    assert codes(reading) == ["missing-uid"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_phases(phase: str) -> None:
    assert read_pod(pod(phase=phase), AT).terminal


def test_observations_sorted_by_resource_id_whatever_the_list_order() -> None:
    ids = ["GPU-c", "GPU-a", "GPU-b"]
    reading = read_pod(
        pod(status("main", entry("nvidia.com/gpu", *[resource(i) for i in ids]))), AT
    )
    assert [o.resource_id for o in reading.observations] == sorted(ids)


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"metadata": "x", "spec": [], "status": 3},
        {"status": {"containerStatuses": {"name": "main"}}},
        {"status": {"containerStatuses": [7, None, {"allocatedResourcesStatus": "x"}]}},
        {
            "status": {
                "containerStatuses": [
                    {"name": "m", "allocatedResourcesStatus": [3, {"name": "n", "resources": [1]}]}
                ]
            }
        },
    ],
)
def test_odd_shapes_never_raise(raw: dict[str, Any]) -> None:
    reading = read_pod(raw, AT)
    assert reading.observations == ()


def test_wrong_types_are_reported_as_malformed() -> None:
    reading = read_pod({"status": {"containerStatuses": {"name": "main"}}}, AT)
    assert codes(reading) == [ProblemCode.MALFORMED_STATUS.value]


def test_container_status_without_name_is_skipped() -> None:
    reading = read_pod(pod(status(None, entry("nvidia.com/gpu", resource("GPU-0")))), AT)
    assert reading.observations == ()
    assert codes(reading) == ["missing-container-name"]


def test_naive_observed_at_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        read_pod(pod(), datetime(2026, 11, 29))
