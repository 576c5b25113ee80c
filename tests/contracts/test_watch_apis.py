"""The watcher's LIST/WATCH ports (``watcher.pod_source.PodApi`` for Pods,
``watcher.node_source.ObjectApi`` for the other kinds, here Leases): the scripted fakes
(:mod:`tests.fakes.watch_apis`) and the real adapters (:mod:`services.adapters.kube.watch_apis`)
on the test kube-apiserver pass the same tests.

The fakes replay scripts, they do not keep objects: their harness here is a small world that
turns creates, updates and deletes into the LIST answer and the WATCH lines a script would hold,
with the line builders the watcher tests script with (``event_line``, ``bookmark``, ``GONE``).
So what is held to the real server is the fakes' interface (an ``ObjectList``, raw lines ending
with the stream) and those builders' shapes, read through the watcher's own decoder.

What the real server does (v1.36, seen running these tests): a LIST's items have no ``kind``; a
WATCH from the LIST's resourceVersion replays every change after it in order and ends at the
server-side timeout, with a BOOKMARK 2 s before it only when a change came while it ran; a Pod
deleted with grace 0 is MODIFIED (``deletionTimestamp``) then DELETED; a WATCH from a
resourceVersion older than the history is HTTP 200 with one ERROR line (410 ``Expired``), not an
HTTP 410, so the adapter raises nothing and the watcher reads the line. That takes a server whose
WATCHes read etcd (``kube_api_etcd_watch``) and a compaction: the default server's watch cache
still answers from its own history.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import pytest
from kubernetes_asyncio import client, config

from devtools.testenv import kubeapi
from services.adapters.kube.list_watch import ObjectList
from services.adapters.kube.watch_apis import KubernetesPodApi, lease_api
from services.processes.watcher.node_source import ObjectApi
from services.processes.watcher.pod_source import PodApi
from services.processes.watcher.watch_lines import (
    Bookmark,
    ObjectChange,
    PodChange,
    WatchError,
    decode_watch_line,
)
from services.runtime.config import Settings
from tests.fakes.watch_apis import GONE, FakeObjectApi, FakePodApi, bookmark, event_line
from tests.kubeapi import conftest as kube_harness
from tests.kubeapi.kube_rest import compact_etcd

kube_api_etcd_watch = kube_harness.kube_api_etcd_watch

RUN_LABEL: Final = "devicestate.io/contract-run"
WATCH_SECONDS: Final = 5
"""Server-side timeout of a WATCH here: the server bookmarks 2 s before it (at 3 s it may not)."""


class WatchHarness(ABC):
    """One LIST/WATCH port of ``kind`` and a way to change the objects it lists."""

    kind: str
    deleted: tuple[str, ...]
    """The watch event types a delete shows as."""

    @abstractmethod
    async def list(self) -> ObjectList: ...

    @abstractmethod
    def watch(self, resource_version: str | None) -> AsyncIterator[bytes]: ...

    @abstractmethod
    async def create(self, name: str) -> None: ...

    @abstractmethod
    async def modify(self, name: str) -> None: ...

    @abstractmethod
    async def delete(self, name: str) -> None: ...

    @abstractmethod
    async def expire(self) -> str:
        """A resourceVersion the history no longer holds (changes made after it, then
        compacted)."""


async def lines_of(harness: WatchHarness, resource_version: str | None) -> list[bytes]:
    """Every line of one WATCH, until the server ends it."""
    async with asyncio.timeout(WATCH_SECONDS + 20):
        return [line async for line in harness.watch(resource_version)]


def decoded(harness: WatchHarness, lines: list[bytes]) -> list[Any]:
    return [decode_watch_line(line, kinds=frozenset({"Lease"})) for line in lines]


def changes(items: list[Any]) -> list[tuple[str, str]]:
    """``(event type, object name)`` of each change."""
    out = []
    for item in items:
        if isinstance(item, PodChange):
            out.append((item.kind.value, item.pod["metadata"]["name"]))
        elif isinstance(item, ObjectChange):
            out.append((item.kind.value, item.obj["metadata"]["name"]))
    return out


def version_of(item: Any) -> int:
    return int(item.resource_version)


class WatchApiContract:
    """What the watcher's LIST/WATCH loop relies on. Subclasses provide ``harness`` (and
    ``expiring``: a harness whose history can be compacted)."""

    async def test_list_returns_the_objects_without_kind_and_a_version(
        self, harness: WatchHarness
    ) -> None:
        assert await harness.list() == ObjectList([], (await harness.list()).resource_version)
        for name in ("a", "b"):
            await harness.create(name)
        listed = await harness.list()
        assert sorted(i["metadata"]["name"] for i in listed.items) == ["a", "b"]
        assert all("kind" not in i and i["metadata"]["resourceVersion"] for i in listed.items)
        assert listed.resource_version and int(listed.resource_version) >= max(
            int(i["metadata"]["resourceVersion"]) for i in listed.items
        )

    async def test_watch_from_the_list_version_yields_the_later_changes_in_order(
        self, harness: WatchHarness
    ) -> None:
        for name in ("a", "b"):
            await harness.create(name)
        listed = await harness.list()
        await harness.create("c")
        await harness.modify("a")
        await harness.delete("b")
        items = decoded(harness, await lines_of(harness, listed.resource_version))
        assert changes(items) == [
            ("ADDED", "c"),
            ("MODIFIED", "a"),
            *((kind, "b") for kind in harness.deleted),
        ]
        versions = [version_of(i) for i in items if isinstance(i, PodChange | ObjectChange)]
        assert versions == sorted(versions) and versions[0] > int(listed.resource_version or 0)

    async def test_a_watch_from_a_compacted_version_is_one_410_error_line(
        self, expiring: WatchHarness
    ) -> None:
        old = await expiring.expire()
        lines = await lines_of(expiring, old)
        (item,) = decoded(expiring, lines)
        assert isinstance(item, WatchError) and item.expired
        assert (item.code, item.reason) == (410, "Expired")


# --- the fakes ------------------------------------------------------------------------------------
class ScriptedWorld(WatchHarness):
    """Objects with resourceVersions, and the history of their changes, as scripts for a fake:
    each ``list``/``watch`` loads the fake with the answer the server would give and calls it."""

    def __init__(self, kind: str, deleted: tuple[str, ...]) -> None:
        self.kind, self.deleted = kind, deleted
        self._versions: Iterator[int] = itertools.count(100)
        self.version = next(self._versions)
        self.objects: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted = 0

    def _record(self, event_type: str, obj: dict[str, Any]) -> None:
        self.version = next(self._versions)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.history.append((self.version, event_type, {"kind": self.kind, **obj}))

    async def create(self, name: str) -> None:
        obj = {"metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": {}}}
        self.objects[name] = obj
        self._record("ADDED", obj)

    async def modify(self, name: str) -> None:
        self.objects[name]["metadata"]["labels"]["touched"] = "yes"
        self._record("MODIFIED", self.objects[name])

    async def delete(self, name: str) -> None:
        obj = self.objects.pop(name)
        for event_type in self.deleted:
            self._record(event_type, obj)

    async def expire(self) -> str:
        old = str(self.version)
        await self.create("x")
        await self.modify("x")
        self.compacted = self.version
        return old

    def answer(self) -> ObjectList:
        items = [{"metadata": dict(o["metadata"])} for o in self.objects.values()]
        return ObjectList(items, str(self.version))

    def script(self, resource_version: str | None) -> list[bytes]:
        since = int(resource_version or 0)
        if since < self.compacted:
            return [GONE]
        # The changes since, then the end: the server bookmarks only a watch that saw a change
        # live, which a script played at once cannot show.
        return [event_line(t, o) for v, t, o in self.history if v > since]


class FakePods(ScriptedWorld):
    def __init__(self) -> None:
        super().__init__("Pod", ("MODIFIED", "DELETED"))
        self.api: PodApi = FakePodApi([], [])
        self._fake = self.api

    async def list(self) -> ObjectList:
        assert isinstance(self._fake, FakePodApi)
        self._fake.lists.append(self.answer())
        return await self.api.list_pods()

    def watch(self, resource_version: str | None) -> AsyncIterator[bytes]:
        assert isinstance(self._fake, FakePodApi)
        self._fake.watches.append(self.script(resource_version))
        return self.api.watch_pods(resource_version)


class FakeLeases(ScriptedWorld):
    def __init__(self) -> None:
        super().__init__("Lease", ("DELETED",))
        self.fake = FakeObjectApi("Lease", [], [])
        self.api: ObjectApi = self.fake

    async def list(self) -> ObjectList:
        self.fake.lists.append(self.answer())
        return await self.api.list_objects()

    def watch(self, resource_version: str | None) -> AsyncIterator[bytes]:
        self.fake.watches.append(self.script(resource_version))
        return self.api.watch_objects(resource_version)


class TestFakePodApi(WatchApiContract):
    @pytest.fixture
    def harness(self) -> WatchHarness:
        return FakePods()

    @pytest.fixture
    def expiring(self) -> WatchHarness:
        return FakePods()


class TestFakeObjectApi(WatchApiContract):
    @pytest.fixture
    def harness(self) -> WatchHarness:
        return FakeLeases()

    @pytest.fixture
    def expiring(self) -> WatchHarness:
        return FakeLeases()

    def test_the_kind_is_the_objects(self) -> None:
        assert FakeLeases().api.object_kind == "Lease"


# --- the real adapters on the test kube-apiserver ----------------------------------------------
class KubeWorld(WatchHarness):
    """Objects of one test in a namespace of their own (Pods also labelled: the Pod API reads all
    namespaces), written through the admin client."""

    def __init__(self, api_client: client.ApiClient, namespace: str, run: str) -> None:
        self.namespace, self.run = namespace, run
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.settings = Settings(
            label_selector=f"{RUN_LABEL}={run}",
            lease_namespace=namespace,
            watch_timeout_seconds=WATCH_SECONDS,
            read_timeout_seconds=WATCH_SECONDS + 30,
        )
        self.api_server: kubeapi.KubeAPI | None = None

    async def expire(self) -> str:
        assert self.api_server is not None, "only on the server without watch cache"
        old = (await self.list()).resource_version
        assert old is not None
        await self.create("x")
        await self.modify("x")
        await self.modify("x")  # the compaction must be past the first change after ``old``
        compact_etcd(self.api_server)
        return old


class KubePods(KubeWorld):
    kind, deleted = "Pod", ("MODIFIED", "DELETED")

    def __init__(self, api_client: client.ApiClient, namespace: str, run: str) -> None:
        super().__init__(api_client, namespace, run)
        self.api: PodApi = KubernetesPodApi(api_client, self.settings)

    async def list(self) -> ObjectList:
        return await self.api.list_pods()

    def watch(self, resource_version: str | None) -> AsyncIterator[bytes]:
        return self.api.watch_pods(resource_version)

    async def create(self, name: str) -> None:
        body = {
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run}},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/none"}]},
        }
        await self.core.create_namespaced_pod(self.namespace, body)

    async def modify(self, name: str) -> None:
        patch = {"metadata": {"labels": {"touched": uuid.uuid4().hex[:8]}}}
        await self.core.patch_namespaced_pod(name, self.namespace, patch)

    async def delete(self, name: str) -> None:
        # No kubelet confirms a graceful deletion here: grace 0 deletes at once.
        await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)


class KubeLeases(KubeWorld):
    kind, deleted = "Lease", ("DELETED",)

    def __init__(self, api_client: client.ApiClient, namespace: str, run: str) -> None:
        super().__init__(api_client, namespace, run)
        self.api: ObjectApi = lease_api(api_client, self.settings)

    async def list(self) -> ObjectList:
        return await self.api.list_objects()

    def watch(self, resource_version: str | None) -> AsyncIterator[bytes]:
        return self.api.watch_objects(resource_version)

    async def create(self, name: str) -> None:
        body = {"metadata": {"name": name}, "spec": {"holderIdentity": name}}
        await self.coordination.create_namespaced_lease(self.namespace, body)

    async def modify(self, name: str) -> None:
        patch = {"spec": {"holderIdentity": f"{name}-{uuid.uuid4().hex[:8]}"}}
        await self.coordination.patch_namespaced_lease(name, self.namespace, patch)

    async def delete(self, name: str) -> None:
        await self.coordination.delete_namespaced_lease(name, self.namespace)


async def _bookmarked_after_a_live_change(harness: WatchHarness) -> None:
    """A change made while a WATCH runs, then a BOOKMARK at its resourceVersion or later before
    the server ends the watch; the bookmark reads as the fakes' ``bookmark`` builder's does.

    Real adapters only: a scripted fake plays its WATCH at once, it cannot wait for a change made
    while it runs (and the server sends no bookmark to a watch that only replayed history)."""
    await harness.create("a")
    listed = await harness.list()

    async def change() -> None:
        await asyncio.sleep(0.5)
        await harness.modify("a")

    changing = asyncio.create_task(change())
    lines = await lines_of(harness, listed.resource_version)
    await changing
    items = decoded(harness, lines)
    (changed,) = [i for i in items if isinstance(i, PodChange | ObjectChange)]
    assert isinstance(items[-1], Bookmark)
    assert int(items[-1].resource_version or 0) >= version_of(changed)
    version = items[-1].resource_version or ""
    assert items[-1] == decode_watch_line(bookmark(version, harness.kind))


async def _namespace(api_client: client.ApiClient) -> tuple[str, str]:
    """A new namespace (left behind: no namespace controller runs to delete it) and a run id."""
    run = uuid.uuid4().hex[:12]
    namespace = f"contract-{run}"
    await client.CoreV1Api(api_client).create_namespace({"metadata": {"name": namespace}})
    return namespace, run


@pytest.fixture(scope="session")
async def etcd_watch_client(
    kube_api_etcd_watch: kubeapi.KubeAPI,
) -> AsyncIterator[client.ApiClient]:
    api_client = await config.new_client_from_config(
        config_file=str(kube_api_etcd_watch.kubeconfig_admin)
    )
    try:
        yield api_client
    finally:
        await api_client.close()


class TestKubernetesPodApi(WatchApiContract):
    @pytest.fixture
    async def harness(self, admin_client: client.ApiClient) -> WatchHarness:
        return KubePods(admin_client, *await _namespace(admin_client))

    @pytest.fixture
    async def expiring(
        self, kube_api_etcd_watch: kubeapi.KubeAPI, etcd_watch_client: client.ApiClient
    ) -> WatchHarness:
        world = KubePods(etcd_watch_client, *await _namespace(etcd_watch_client))
        world.api_server = kube_api_etcd_watch
        return world

    async def test_a_change_during_the_watch_is_followed_by_a_bookmark(
        self, harness: WatchHarness
    ) -> None:
        await _bookmarked_after_a_live_change(harness)


class TestKubernetesObjectApi(WatchApiContract):
    @pytest.fixture
    async def harness(self, admin_client: client.ApiClient) -> WatchHarness:
        return KubeLeases(admin_client, *await _namespace(admin_client))

    @pytest.fixture
    async def expiring(
        self, kube_api_etcd_watch: kubeapi.KubeAPI, etcd_watch_client: client.ApiClient
    ) -> WatchHarness:
        world = KubeLeases(etcd_watch_client, *await _namespace(etcd_watch_client))
        world.api_server = kube_api_etcd_watch
        return world

    async def test_the_kind_is_the_objects(self, harness: WatchHarness) -> None:
        assert isinstance(harness, KubeLeases) and harness.api.object_kind == "Lease"

    async def test_a_change_during_the_watch_is_followed_by_a_bookmark(
        self, harness: WatchHarness
    ) -> None:
        await _bookmarked_after_a_live_change(harness)
