"""The controller chain as a pure function of the Pod and the owner objects (issue 13 item 1)."""

from __future__ import annotations

import pytest

from services.domain.workloads.owners import (
    MAX_CHAIN_LENGTH,
    FetchFailed,
    OwnerLink,
    resolve_chain,
)
from tests.workloads.objects import APPS, BATCH, JOBSET, LWS, obj, ref


def test_bare_pod_has_an_empty_complete_chain() -> None:
    chain = resolve_chain(obj("solo", "p-1", node="gpu-1"), {})
    assert chain.links == () and chain.complete and chain.reason is None
    assert chain.workload is None and chain.workload_kind == "Pod" and chain.missing is None


def test_owner_references_without_a_controller_make_a_bare_pod() -> None:
    pod = obj("solo", "p-1", owners=[ref("ConfigMap", "cm", "c-1", "v1", controller=False)])
    assert resolve_chain(pod, {}).links == ()


def test_deployment_through_its_replicaset() -> None:
    pod = obj("web-7d9-abc", "p-1", owners=[ref("ReplicaSet", "web-7d9", "rs-1", APPS)])
    first = resolve_chain(pod, {})
    assert first.missing == OwnerLink("ReplicaSet", "web-7d9", "rs-1", APPS)
    assert not first.complete and first.reason == "ReplicaSet web-7d9: not read yet"
    rs = obj("web-7d9", "rs-1", owners=[ref("Deployment", "web", "d-1", APPS)])
    second = resolve_chain(pod, {"rs-1": rs})
    assert second.missing == OwnerLink("Deployment", "web", "d-1", APPS)
    deployment = obj("web", "d-1", annotations={"devicestate.io/migration-class": "sharded"})
    chain = resolve_chain(pod, {"rs-1": rs, "d-1": deployment})
    assert chain.complete and chain.missing is None and chain.reason is None
    assert [link.kind for link in chain.links] == ["ReplicaSet", "Deployment"]
    assert chain.workload_kind == "Deployment" and chain.top_object is deployment


def test_bare_job() -> None:
    pod = obj("train-0-x", "p-1", owners=[ref("Job", "train", "j-1", BATCH)])
    chain = resolve_chain(pod, {"j-1": obj("train", "j-1")})
    assert chain.complete and chain.workload == OwnerLink("Job", "train", "j-1", BATCH)


def test_jobset_above_its_job() -> None:
    pod = obj("js-workers-0-0-x", "p-1", owners=[ref("Job", "js-workers-0", "j-1", BATCH)])
    job = obj("js-workers-0", "j-1", owners=[ref("JobSet", "js", "s-1", JOBSET)])
    chain = resolve_chain(pod, {"j-1": job, "s-1": obj("js", "s-1")})
    assert chain.complete and [link.kind for link in chain.links] == ["Job", "JobSet"]


def test_statefulset() -> None:
    pod = obj("db-0", "p-1", owners=[ref("StatefulSet", "db", "ss-1", APPS)])
    chain = resolve_chain(pod, {"ss-1": obj("db", "ss-1")})
    assert chain.complete and chain.workload_kind == "StatefulSet"


def test_leaderworkerset_above_its_statefulset() -> None:
    pod = obj("lws-0-1", "p-1", owners=[ref("StatefulSet", "lws-0", "ss-1", APPS)])
    sts = obj("lws-0", "ss-1", owners=[ref("LeaderWorkerSet", "lws", "l-1", LWS)])
    chain = resolve_chain(pod, {"ss-1": sts, "l-1": obj("lws", "l-1")})
    assert chain.complete and chain.workload_kind == "LeaderWorkerSet"


def test_failed_get_publishes_the_chain_as_far_as_known() -> None:
    pod = obj("web-x", "p-1", owners=[ref("ReplicaSet", "web-7d9", "rs-1", APPS)])
    rs = obj("web-7d9", "rs-1", owners=[ref("Deployment", "web", "d-1", APPS)])
    chain = resolve_chain(pod, {"rs-1": rs, "d-1": FetchFailed("HTTP 503: unavailable")})
    assert [link.kind for link in chain.links] == ["ReplicaSet", "Deployment"]
    assert not chain.complete and chain.missing is None
    assert chain.reason == "Deployment web: HTTP 503: unavailable"
    assert chain.top_object is None  # its annotations are not known


def test_owner_recreated_under_the_same_name_is_a_dangling_reference() -> None:
    pod = obj("train-x", "p-1", owners=[ref("Job", "train", "j-old", BATCH)])
    chain = resolve_chain(pod, {"j-old": obj("train", "j-new")})
    assert not chain.complete
    assert chain.reason == "Job train: gone (the object of that name has uid 'j-new')"


def test_unknown_owner_kind_ends_the_chain_there() -> None:
    pod = obj("m-0", "p-1", owners=[ref("PyTorchJob", "m", "t-1", "kubeflow.org/v1")])
    chain = resolve_chain(pod, {})
    assert chain.workload_kind == "PyTorchJob" and not chain.complete and chain.missing is None
    assert chain.reason == "PyTorchJob m: kind 'PyTorchJob' is not read by devicestate"


@pytest.mark.parametrize(
    "owners",
    [
        [ref("Job", "a", "j-1", BATCH), ref("Job", "b", "j-2", BATCH)],
        [{"kind": "Job", "name": "a", "controller": True, "apiVersion": BATCH}],
    ],
    ids=["two-controllers", "no-uid"],
)
def test_broken_reference_on_the_pod(owners: list[dict[str, object]]) -> None:
    chain = resolve_chain(obj("x", "p-1", owners=owners), {})  # type: ignore[arg-type]
    assert chain.links == () and not chain.complete
    assert chain.reason is not None and chain.reason.startswith("the Pod: ")


def test_ownership_loop_stops_at_the_length_limit() -> None:
    # Two ReplicaSets owning each other (a corrupted store): the walk stops, it does not spin.
    pod = obj("x", "p-1", owners=[ref("ReplicaSet", "a", "a", APPS)])
    a = obj("a", "a", owners=[ref("ReplicaSet", "b", "b", APPS)])
    b = obj("b", "b", owners=[ref("ReplicaSet", "a", "a", APPS)])
    chain = resolve_chain(pod, {"a": a, "b": b})
    assert not chain.complete and len(chain.links) == 2 <= MAX_CHAIN_LENGTH
    assert chain.reason is not None and "loop" in chain.reason
