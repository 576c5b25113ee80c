"""KubeSource (LIST/WATCH loop) over a fake Kubernetes API, and KubernetesPodApi (the real
kubernetes-asyncio adapter) over a fake API server on 127.0.0.1. Fakes stand in for the
Kubernetes API only."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.errors import ApiRejected, ApiUnavailable, ResourceExpired
from services.adapters.kube.list_watch import ObjectList
from services.adapters.kube.watch_apis import KubernetesPodApi
from services.domain.events import DeviceHealthObserved, Event, PodDevicesReleased, ReleaseReason
from services.processes.watcher.pod_source import KubeSource
from services.processes.watcher.processor import WatchProcessor
from services.processes.watcher.watch_lines import BrokenLine, PodChange
from services.processes.watcher.watch_loop import Relisted, SourceItem
from services.runtime.config import Settings
from tests.domain.test_pod_tracker import make_pod
from tests.fakes.watch_apis import GONE, FakePodApi, Silence, bookmark, event_line

AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

Step = bytes | Exception


def pod(uid: str, version: str, **devices: str) -> dict[str, Any]:
    return make_pod(devices or {"GPU-0": "Healthy"}, version, uid=uid, name=f"pod-{uid}")


@dataclass
class Collector:
    """The handler: runs each item through the (pure) processor and keeps what it produced."""

    processor: WatchProcessor = field(default_factory=WatchProcessor)
    items: list[tuple[SourceItem, str]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    async def __call__(self, item: SourceItem, source: str) -> None:
        self.items.append((item, source))
        if isinstance(item, Relisted):
            outcome = self.processor.relisted(item.pods, item.resource_version, source, AT)
        elif isinstance(item, PodChange):
            outcome = self.processor.pod_event(item.kind, item.pod, item.raw, source, AT)
        else:
            return
        self.events.extend(outcome.events)

    def observed(self) -> list[tuple[str, str, str, int | None]]:
        return [
            (e.pod_uid, e.resource_id, e.health.value, e.status_version)
            for e in self.events
            if isinstance(e, DeviceHealthObserved)
        ]

    def released(self) -> list[PodDevicesReleased]:
        return [e for e in self.events if isinstance(e, PodDevicesReleased)]


@dataclass
class Run:
    api: FakePodApi
    collector: Collector
    sleeps: list[float]
    restarts: list[str]
    source: KubeSource


async def run_source(
    lists: list[ObjectList | Exception],
    watches: list[list[Step]],
    silence_seconds: float | None = None,
) -> Run:
    api = FakePodApi(lists, watches)
    sleeps: list[float] = []
    restarts: list[str] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    source = KubeSource(
        api, sleep=sleep, on_restart=restarts.append, silence_seconds=silence_seconds
    )
    collector = Collector()
    async with asyncio.timeout(10):
        await source.run(collector, api.stop)
    return Run(api, collector, sleeps, restarts, source)


async def test_initial_list_emits_every_pod() -> None:
    run = await run_source([ObjectList([pod("a", "10"), pod("b", "11")], "12")], [])
    assert run.collector.observed() == [
        ("a", "GPU-0", "Healthy", 10),
        ("b", "GPU-0", "Healthy", 11),
    ]
    first, source = run.collector.items[0]
    assert isinstance(first, Relisted) and source == "kube:list@12"
    assert run.api.watch_calls[0] == "12"  # the watch starts at the list's resourceVersion


async def test_watch_modifications_emit_only_changes() -> None:
    run = await run_source(
        [ObjectList([pod("a", "10", **{"GPU-0": "Healthy", "GPU-1": "Healthy"})], "12")],
        [
            [
                event_line("MODIFIED", pod("a", "13", **{"GPU-1": "Healthy", "GPU-0": "Healthy"})),
                event_line(
                    "MODIFIED", pod("a", "14", **{"GPU-0": "Unhealthy", "GPU-1": "Healthy"})
                ),
            ]
        ],
    )
    assert run.collector.observed()[2:] == [("a", "GPU-0", "Unhealthy", 14)]
    assert run.api.watch_calls[:2] == ["12", "14"]
    assert run.collector.items[2][1] == "kube:watch@13"


async def test_bookmark_advances_the_resume_point() -> None:
    run = await run_source([ObjectList([pod("a", "10")], "12")], [[bookmark("50")]])
    assert run.api.watch_calls[:2] == ["12", "50"]
    assert run.collector.observed() == [("a", "GPU-0", "Healthy", 10)]  # no Pod processing
    assert run.restarts[0] == "timeout"


@pytest.mark.parametrize("expiry", [GONE, ResourceExpired("HTTP 410")], ids=["event", "http"])
async def test_410_relists_and_releases_vanished_pods(expiry: Step) -> None:
    run = await run_source(
        [ObjectList([pod("a", "10"), pod("b", "11")], "12"), ObjectList([pod("a", "10")], "40")],
        [[event_line("MODIFIED", pod("b", "20", **{"GPU-0": "Unhealthy"})), expiry]],
    )
    assert run.api.list_calls == 2
    assert run.api.watch_calls[:2] == ["12", "40"]
    (release,) = run.collector.released()
    assert (release.pod_uid, release.reason, release.status_version) == (
        "b",
        ReleaseReason.DELETED,
        40,
    )
    # a is re-emitted after the re-LIST (harmless downstream), b's change came before.
    assert run.collector.observed() == [
        ("a", "GPU-0", "Healthy", 10),
        ("b", "GPU-0", "Healthy", 11),
        ("b", "GPU-0", "Unhealthy", 20),
        ("a", "GPU-0", "Healthy", 10),
    ]
    assert "expired" in run.restarts
    assert run.source.resource_version == "40"


async def test_dropped_connection_resumes_from_the_last_resource_version() -> None:
    run = await run_source(
        [ObjectList([pod("a", "10")], "12")],
        [
            [
                event_line("MODIFIED", pod("a", "20", **{"GPU-0": "Unknown"})),
                ApiUnavailable("reset"),
            ],
            [ApiUnavailable("connection refused")],
            [event_line("MODIFIED", pod("a", "21", **{"GPU-0": "Healthy"}))],
        ],
    )
    assert run.api.list_calls == 1  # resumed, not re-listed
    assert run.api.watch_calls[:4] == ["12", "20", "20", "21"]
    assert run.collector.observed()[1:] == [
        ("a", "GPU-0", "Unknown", 20),
        ("a", "GPU-0", "Healthy", 21),
    ]
    # Only the attempt that failed without progress waited; the first resumed at once.
    assert len([s for s in run.sleeps if s >= 0]) >= 1
    assert run.restarts[:3] == ["error", "error", "timeout"]


async def test_backoff_grows_while_the_api_stays_down() -> None:
    down: list[list[Step]] = [[ApiUnavailable("refused")] for _ in range(6)]
    run = await run_source([ObjectList([pod("a", "10")], "12")], [[bookmark("13")], *down])
    waits = run.sleeps[:6]
    assert len(waits) == 6
    assert all(0 <= w <= 30 for w in waits)
    assert max(waits[3:]) > 0  # randomised exponential: later waits are not all zero


async def test_broken_line_is_handed_over_and_the_watch_resumes() -> None:
    run = await run_source(
        [ObjectList([pod("a", "10")], "12")],
        [
            [
                event_line("MODIFIED", pod("a", "20", **{"GPU-0": "Unhealthy"})),
                b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"uid":"a","resourceV',
                event_line("MODIFIED", pod("a", "21", **{"GPU-0": "Healthy"})),
            ]
        ],
    )
    broken = [
        (item, source) for item, source in run.collector.items if isinstance(item, BrokenLine)
    ]
    assert len(broken) == 1 and broken[0][1] == "kube:watch@20"
    # The rest of that connection is not trusted: the watch restarts from the last good version.
    assert run.api.watch_calls[:2] == ["12", "20"]
    assert run.collector.observed()[1:] == [("a", "GPU-0", "Unhealthy", 20)]


async def test_list_failure_backs_off_and_lists_again() -> None:
    run = await run_source([ApiUnavailable("503"), ObjectList([pod("a", "10")], "12")], [])
    assert run.api.list_calls == 2
    assert len(run.sleeps) >= 1
    assert run.collector.observed() == [("a", "GPU-0", "Healthy", 10)]


async def test_rejected_api_stops_the_source() -> None:
    with pytest.raises(ApiRejected):
        await run_source([ObjectList([], "12")], [[ApiRejected("HTTP 403: forbidden")]])


# --- KubernetesPodApi over a fake API server --------------------------------------------------


@dataclass
class FakeApiServer:
    """Serves ``GET /api/v1/pods`` like the API server: paged LISTs and scripted WATCH bodies.

    ``watch_script`` holds one entry per WATCH request: an HTTP status (int), or a list of body
    chunks (bytes) optionally ending with ``"cut"`` to drop the connection mid-body or ``"hold"``
    to keep it open without events (a quiet cluster; ``holding`` is set meanwhile).
    ``next_lists``: ``(objects, resourceVersion)`` that replace ``pods`` and ``list_version``
    after each complete LIST, in turn (what changed in the cluster meanwhile).
    """

    pods: list[dict[str, Any]]
    list_version: str = "100"
    list_status: int = 200
    watch_script: list[int | list[bytes | str]] = field(default_factory=list)
    next_lists: list[tuple[list[dict[str, Any]], str]] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    address: tuple[str, int] = ("", 0)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        if query.get("watch", "").lower() == "true":  # the client sends "True" (ParseBool ok)
            return await self._watch(request)
        if self.list_status != 200:
            return web.json_response(
                {"kind": "Status", "code": self.list_status}, status=self.list_status
            )
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(self.pods))
        page = self.pods[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": self.list_version}
        if start + limit < len(self.pods):
            metadata["continue"] = str(start + limit)
        elif self.next_lists:
            self.pods, self.list_version = self.next_lists.pop(0)
        return web.Response(
            body=orjson.dumps({"kind": "ObjectList", "metadata": metadata, "items": page}),
            content_type="application/json",
        )

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        script = self.watch_script.pop(0) if self.watch_script else []
        if isinstance(script, int):
            return web.json_response({"kind": "Status", "code": script}, status=script)
        response = web.StreamResponse()
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        for chunk in script:
            if chunk == "cut":
                assert request.transport is not None
                request.transport.abort()
                return response
            if chunk == "hold":
                self.holding.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.closing.wait(), 60)
                continue
            assert isinstance(chunk, bytes)
            await response.write(chunk)
            await asyncio.sleep(0)
        await response.write_eof()
        return response


@pytest.fixture
async def fake_server() -> AsyncIterator[
    tuple[FakeApiServer, Callable[[Settings], KubernetesPodApi]]
]:
    server = FakeApiServer(pods=[pod(uid, str(10 + i)) for i, uid in enumerate("abc")])
    app = web.Application()
    app.router.add_get("/api/v1/pods", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.address = (host, port)
    clients: list[k8s_client.ApiClient] = []

    def connect(settings: Settings) -> KubernetesPodApi:
        configuration = k8s_client.Configuration(host=f"http://{host}:{port}")
        api_client = k8s_client.ApiClient(configuration=configuration)
        clients.append(api_client)
        return KubernetesPodApi(api_client, settings, page_size=2)

    yield server, connect
    for api_client in clients:
        await api_client.close()
    server.closing.set()
    await runner.cleanup()


Server = tuple[FakeApiServer, Callable[[Settings], KubernetesPodApi]]


async def test_list_pages_through_continue_tokens(fake_server: Server) -> None:
    server, connect = fake_server
    api = connect(Settings(label_selector="app=gpu", field_selector="spec.nodeName=gpu-node-a"))
    listed = await api.list_pods()
    assert [p["metadata"]["uid"] for p in listed.items] == ["a", "b", "c"]
    assert listed.resource_version == "100"
    assert [(r.get("limit"), r.get("continue")) for r in server.requests] == [
        ("2", None),
        ("2", "2"),
    ]
    assert all(r["labelSelector"] == "app=gpu" for r in server.requests)
    assert all(r["fieldSelector"] == "spec.nodeName=gpu-node-a" for r in server.requests)


async def test_watch_asks_for_bookmarks_and_a_server_timeout(fake_server: Server) -> None:
    server, connect = fake_server
    big = pod("a", "101")
    big["metadata"]["annotations"] = {"huge": "x" * 300_000}  # beyond aiohttp's readline limit
    line = event_line("MODIFIED", big)
    server.watch_script = [
        [line[:1000], line[1000:] + b"\n" + bookmark("102")[:10], bookmark("102")[10:] + b"\n"]
    ]
    api = connect(Settings(watch_timeout_seconds=42))
    lines = [item async for item in api.watch_pods("100")]
    assert lines == [line, bookmark("102")]
    (request,) = server.requests
    assert request["watch"].lower() == "true"
    assert request["allowWatchBookmarks"].lower() == "true"
    assert request["timeoutSeconds"] == "42"
    assert request["resourceVersion"] == "100"


@pytest.mark.parametrize(
    ("status", "error"),
    [(410, ResourceExpired), (500, ApiUnavailable), (429, ApiUnavailable), (403, ApiRejected)],
)
async def test_watch_http_errors_are_mapped(
    fake_server: Server, status: int, error: type[Exception]
) -> None:
    server, connect = fake_server
    server.watch_script = [status]
    with pytest.raises(error):
        async for _ in connect(Settings()).watch_pods("100"):
            pass


async def test_list_http_errors_are_mapped(fake_server: Server) -> None:
    server, connect = fake_server
    server.list_status = 503
    with pytest.raises(ApiUnavailable):
        await connect(Settings()).list_pods()
    server.list_status = 401
    with pytest.raises(ApiRejected):
        await connect(Settings()).list_pods()


async def test_connection_cut_mid_body_is_unavailable(fake_server: Server) -> None:
    server, connect = fake_server
    server.watch_script = [[bookmark("101") + b"\n", b'{"type":"MODIFIED","obj', "cut"]]
    got: list[bytes] = []
    with pytest.raises(ApiUnavailable):
        async for line in connect(Settings()).watch_pods("100"):
            got.append(line)
    assert got == [bookmark("101")]  # the cut half-line is never handed on


async def test_unreachable_api_is_unavailable() -> None:
    configuration = k8s_client.Configuration(host="http://127.0.0.1:9")
    async with k8s_client.ApiClient(configuration=configuration) as api_client:
        api = KubernetesPodApi(api_client, Settings())
        with pytest.raises(ApiUnavailable):
            await api.list_pods()


async def test_source_over_the_real_client_relists_after_410(fake_server: Server) -> None:
    server, connect = fake_server
    server.watch_script = [
        [event_line("MODIFIED", pod("a", "101", **{"GPU-0": "Unhealthy"})) + b"\n", GONE + b"\n"],
    ]
    api = connect(Settings())
    stop = asyncio.Event()
    collector = Collector()

    async def handle(item: SourceItem, source: str) -> None:
        await collector(item, source)
        if isinstance(item, Relisted):
            if item.resource_version == "100":
                # Pods b and c are deleted while the watch runs; the 410 hides their DELETED.
                server.pods = server.pods[:1]
                server.list_version = "200"
            else:
                stop.set()

    async def fast_sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    async with asyncio.timeout(10):
        await KubeSource(api, sleep=fast_sleep).run(handle, stop)
    released = sorted(r.pod_uid for r in collector.released())
    assert released == ["b", "c"]
    assert {r.status_version for r in collector.released()} == {200}
    assert ("a", "GPU-0", "Unhealthy", 101) in collector.observed()


async def test_a_silent_watch_is_watched_again_from_its_last_version() -> None:
    """No event and no BOOKMARK for ``silence_seconds`` (a half-open connection): the watch is
    ended, counted as ``silent`` and watched again from the last resourceVersion, long before the
    client's read timeout; a silent watch that made no progress backs off first."""
    run = await run_source(
        [ObjectList([pod("a", "10")], "12")],
        [
            [event_line("MODIFIED", pod("a", "13", **{"GPU-0": "Unhealthy"})), Silence(30)],
            [Silence(30)],
            [bookmark("20")],
        ],
        silence_seconds=0.2,
    )
    # The fourth watch is the script's end (an empty watch: an error, backed off too).
    assert run.restarts == ["silent", "silent", "timeout", "error"]
    assert run.api.watch_calls[:3] == ["12", "13", "13"]
    assert len(run.sleeps) == 2  # the second silence, without progress, backed off
    assert run.collector.observed()[-1] == ("a", "GPU-0", "Unhealthy", 13)


async def test_without_a_silence_bound_a_quiet_watch_is_waited_on() -> None:
    api = FakePodApi([ObjectList([pod("a", "10")], "12")], [[Silence(0.5), bookmark("20")]])
    source = KubeSource(api, on_restart=lambda reason: None)
    async with asyncio.timeout(10):
        await source.run(Collector(), api.stop)
    assert api.watch_calls[:2] == ["12", "20"]
