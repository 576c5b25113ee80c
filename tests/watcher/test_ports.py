"""The watcher's ports to the Kubernetes API (``pod_source.PodApi``, ``node_source.ObjectApi``):
the fakes the tests drive the loops with and the real adapters
(``services.adapters.kube.watch_apis``) implement them member by member; and the check itself
sees a fake that drifted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from services.adapters.kube.list_watch import ObjectList
from services.adapters.kube.watch_apis import KubernetesObjectApi, KubernetesPodApi
from services.processes.watcher.node_source import ObjectApi
from services.processes.watcher.pod_source import PodApi
from tests.fakes.watch_apis import FakeObjectApi, FakePodApi
from tests.ports import port_mismatches


@pytest.mark.parametrize(
    ("implementation", "port"),
    [
        (FakePodApi, PodApi),
        (KubernetesPodApi, PodApi),
        (FakeObjectApi, ObjectApi),
        (KubernetesObjectApi, ObjectApi),
    ],
    ids=lambda value: value.__name__,
)
def test_fake_and_real_implement_the_port(implementation: type, port: type) -> None:
    assert port_mismatches(implementation, port) == []


def test_the_fakes_are_the_ports_for_mypy() -> None:
    # Annotated as the ports: mypy, when it reads the tests, checks them statically too.
    pods: PodApi = FakePodApi([], [])
    objects: ObjectApi = FakeObjectApi("Lease", [], [])
    assert objects.object_kind == "Lease" and callable(pods.watch_pods)


@dataclass
class Drifted:
    """A Pod API whose calls no longer match the port."""

    def list_pods(self) -> ObjectList:  # not async any more
        return ObjectList([], None)

    async def watch_pods(self, version: str | None, limit: int) -> AsyncIterator[bytes]:
        yield b""


@dataclass
class Missing:
    """An object API without its WATCH, and ``object_kind`` of another type."""

    object_kind: int = 0

    async def list_objects(self) -> ObjectList:
        return ObjectList([], None)


def test_a_drifted_fake_is_seen() -> None:
    assert port_mismatches(Drifted, PodApi) == [
        "list_pods: the port has an async def",
        "watch_pods: parameter version where resource_version is expected",
        "watch_pods: parameter limit without a default",
        "watch_pods: resource_version is None where the port has str | None",
    ]
    assert port_mismatches(Missing, ObjectApi) == [
        "object_kind: <class 'int'> where the port has <class 'str'>",
        "watch_objects: missing",
    ]
