"""The load the pipeline benchmark puts on the system: synthetic health events (stage 1) and
open-loop HTTP GETs (stage d).

- :func:`generate`: a deterministic log of ``DeviceHealthObserved`` events (seeded: the same IDs
  and the same log every run), with duplicates and stale re-sends.
- :func:`load_gets`: point GETs at a fixed rate, latency counted from each request's due time
  (no coordinated omission), with httpx or :class:`RawHttpClient`.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.console import Reporter

BENCH_NAMESPACE = uuid.UUID("5d1c7a8e-4b0b-4f7e-9d55-0d3e5b1c2a90")
"""uuid5 namespace of the synthetic device IDs and Pod UIDs (fixed: same IDs every run)."""
T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
FIRST_VERSION = 1_000_000


def compact(payload: bytes) -> bytes:
    """A copy of ``payload`` in a buffer of its own size (see the comment in :func:`generate`)."""
    return memoryview(payload).tobytes()


@dataclass
class Workload:
    """The generated log, as ``(key, value)`` pairs in publish order, and what it must produce."""

    keys: list[bytes]
    values: list[bytes]
    devices: list[tuple[str, str]]  # (node, resourceID) of every device observed at least once
    new: int  # ordered observations with a higher statusVersion than the device's last (applied)
    duplicates: int  # exact re-sends of a device's latest observation
    stale: int  # re-sends of an older observation of the device
    bytes: int
    seconds: float
    observations: int | None = None
    """Observations the records carry (``None``: one each; a schema-2 record carries a Pod
    change's, :mod:`bench.load_pods`)."""


def generate(events: int, devices: int, nodes: int, dup_ratio: float, seed: int) -> Workload:
    """N observations over ``devices`` GPUs spread round-robin on ``nodes`` nodes.

    A fresh observation picks a random device and gets the next cluster-wide statusVersion (so
    each device's versions increase along the log); with probability ``dup_ratio`` an event is
    instead a re-send of a random already-observed device's latest observation (exact duplicate)
    or, when it has one, of its previous one (stale), half and half. Health: 95 % Healthy,
    4 % Unhealthy (with an XID message), 1 % Unknown.
    """
    from services.domain.event_codec import encode_event
    from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health

    started = time.perf_counter()
    rng = random.Random(seed)
    node_names = [f"bench-node-{i + 1:05d}" for i in range(nodes)]
    node_keys = [name.encode() for name in node_names]
    containers = (ContainerRef("main"),)
    device_node: list[int] = []
    device_rid: list[str] = []
    device_pod: list[tuple[str, str]] = []
    for d in range(devices):
        n, local = d % nodes, d // nodes
        slot = local // 2  # two GPUs per Pod
        pod_name = f"bench-job-{n + 1:05d}-{slot}"
        device_node.append(n)
        device_rid.append(f"GPU-{uuid.uuid5(BENCH_NAMESPACE, f'{seed}/gpu/{d}')}")
        device_pod.append((pod_name, str(uuid.uuid5(BENCH_NAMESPACE, f"{seed}/pod/{n}/{slot}"))))

    latest: list[bytes | None] = [None] * devices
    previous: list[bytes | None] = [None] * devices
    observed: list[int] = []
    keys: list[bytes] = []
    values: list[bytes] = []
    version = FIRST_VERSION
    new = dup = stale = size = 0
    healthy, unhealthy, unknown = Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN
    plugin = DeviceSource.DEVICE_PLUGIN
    xid = "XID 79: GPU has fallen off the bus"
    with Reporter("generate", events) as progress:
        for i in range(events):
            if observed and rng.random() < dup_ratio:
                d = observed[rng.randrange(len(observed))]
                older = previous[d]
                if older is not None and rng.random() < 0.5:
                    payload = older
                    stale += 1
                else:
                    payload = latest[d]  # type: ignore[assignment]
                    dup += 1
            else:
                d = rng.randrange(devices)
                version += 1
                roll = rng.random()
                health = healthy if roll < 0.95 else unhealthy if roll < 0.99 else unknown
                pod_name, pod_uid = device_pod[d]
                # A copy: orjson's result keeps the ~4 KB buffer it was built in (realloc'ed
                # down in place), so holding a million of them would take ~4 GB of RSS.
                payload = compact(
                    encode_event(
                        DeviceHealthObserved(
                            node=node_names[device_node[d]],
                            namespace="bench",
                            pod_name=pod_name,
                            pod_uid=pod_uid,
                            containers=containers,
                            resource_name="nvidia.com/gpu",
                            resource_id=device_rid[d],
                            health=health,
                            source=plugin,
                            status_version=version,
                            observed_at=T0 + timedelta(milliseconds=i),
                            message=xid if health is unhealthy else None,
                        )
                    )
                )
                if latest[d] is None:
                    observed.append(d)
                else:
                    previous[d] = latest[d]
                latest[d] = payload
                new += 1
            keys.append(node_keys[device_node[d]])
            values.append(payload)
            size += len(payload)
            if i % 20_000 == 0:
                progress.update(i)
        progress.update(events)
    return Workload(
        keys=keys,
        values=values,
        devices=sorted((node_names[device_node[d]], device_rid[d]) for d in observed),
        new=new,
        duplicates=dup,
        stale=stale,
        bytes=size,
        seconds=time.perf_counter() - started,
    )


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1, nearest rank) of sorted values; NaN when empty."""
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


class RawHttpClient:
    """A bare HTTP/1.1 keep-alive GET client on asyncio streams (``--api-client raw``).

    Costs a small fraction of httpx's CPU per request, to tell the server's latency apart from
    the load generator's on a small machine. Handles ``Content-Length`` responses only (what
    uvicorn sends for JSON); anything else counts as an error.
    """

    def __init__(self, base: str, connections: int) -> None:
        from urllib.parse import urlsplit

        url = urlsplit(base)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.host_header = f"{self.host}:{self.port}".encode()
        self.idle: asyncio.LifoQueue[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]
        self.idle = asyncio.LifoQueue()
        for _ in range(connections):
            self.idle.put_nowait(None)  # a slot: connect lazily

    async def get(self, path: str, body: bytes | None = None) -> int:
        """GET ``path``, or POST ``body`` (JSON) to it; returns the status."""
        if body is None:
            request = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host_header
            request += b"\r\n\r\n"
        else:
            request = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host_header
            request += b"\r\nContent-Type: application/json\r\nContent-Length: "
            request += str(len(body)).encode() + b"\r\n\r\n" + body
        conn = await self.idle.get()
        try:
            reused = conn is not None
            if conn is None:
                conn = await asyncio.open_connection(self.host, self.port)
            reader, writer = conn
            writer.write(request)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not reused or exc.partial:
                    raise
                # The server closed an idle keep-alive connection (uvicorn: after 5 s) before
                # this request reached it: send it again on a new one, as httpx does.
                writer.close()
                conn = await asyncio.open_connection(self.host, self.port)
                reader, writer = conn
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            lower = head.lower()
            at = lower.find(b"content-length:")
            if at < 0:
                raise RuntimeError("response without Content-Length")
            length = int(lower[at + 15 : lower.find(b"\r\n", at)])
            await reader.readexactly(length)
        except BaseException:
            if conn is not None:
                conn[1].close()
            self.idle.put_nowait(None)
            raise
        self.idle.put_nowait(conn)
        return status

    async def aclose(self) -> None:
        while not self.idle.empty():
            conn = self.idle.get_nowait()
            if conn is not None:
                conn[1].close()


async def load_gets(
    base: str,
    paths: Sequence[str],
    *,
    rate: float,
    count: int,
    connections: int,
    time_limit: float,
    client_kind: str = "httpx",
    bodies: Sequence[bytes] | None = None,
) -> dict[str, Any]:
    """Open loop: request i is due at ``start + i / rate`` whatever earlier responses do
    (a GET of ``paths[i]``, or with ``bodies`` a POST of ``bodies[i]`` to it).

    ``latency`` runs from the request's due time to its response (includes any wait for a free
    connection or a late client: no coordinated omission); ``service`` from the moment the HTTP
    client was called. At most ``connections`` connections; nothing is sent after ``time_limit``
    seconds. ``client_kind``: ``httpx`` (httpx.AsyncClient, keep-alive) or ``raw``
    (:class:`RawHttpClient`).
    """
    import httpx

    loop = asyncio.get_running_loop()
    latency: list[float] = []
    service: list[float] = []
    errors: dict[str, int] = {}
    fetch: Callable[[int], Awaitable[int]]
    close: Callable[[], Awaitable[None]]
    if client_kind == "httpx":
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        http = httpx.AsyncClient(base_url=base, limits=limits, timeout=10.0)

        async def fetch(i: int) -> int:
            if bodies is not None:
                return (await http.post(paths[i], content=bodies[i])).status_code
            return (await http.get(paths[i])).status_code

        close = http.aclose
    else:
        raw = RawHttpClient(base, connections)

        async def fetch(i: int) -> int:
            body = None if bodies is None else bodies[i]
            return await asyncio.wait_for(raw.get(paths[i], body), 10.0)

        close = raw.aclose

    # At most `connections` requests are handed to the client at once: httpx's pool hands
    # connections to queued requests in O(queue) per release, so a long queue there costs the
    # client more CPU the further it falls behind. Waiting here is O(1) and still counted in
    # `latency` (from the due time).
    gate = asyncio.Semaphore(connections)

    async def one(i: int, due: float) -> None:
        async with gate:
            sent = loop.time()
            try:
                status = await fetch(i)
            except Exception as exc:  # timeouts, resets
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return
            done = loop.time()
            if status != 200:
                errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
                return
            latency.append(done - due)
            service.append(done - sent)

    try:
        # Warm-up (not counted): open the connections, warm the server's pools.
        warm = [asyncio.create_task(fetch(i % len(paths))) for i in range(connections)]
        await asyncio.gather(*warm, return_exceptions=True)

        tasks: list[asyncio.Task[None]] = []
        start = loop.time() + 0.01
        hard_stop = start + time_limit
        sent = 0
        last_update = 0.0
        with Reporter("api", count, unit="req") as progress:
            while sent < count:
                now = loop.time()
                if now > hard_stop:
                    break
                due_count = min(count, int((now - start) * rate) + 1)
                while sent < due_count:
                    due = start + sent / rate
                    tasks.append(asyncio.create_task(one(sent, due)))
                    sent += 1
                if now - last_update >= 0.25:
                    last_update = now
                    progress.update(
                        len(latency), extra=f"sent {sent:,} errors {sum(errors.values())}"
                    )
                await asyncio.sleep(max(0.0, min(0.002, start + sent / rate - loop.time())))
            remaining = max(1.0, hard_stop + 10.0 - loop.time())
            _, pending = await asyncio.wait(tasks, timeout=remaining) if tasks else (set(), set())
            for task in pending:
                task.cancel()
            if pending:
                errors["not finished in time"] = len(pending)
                await asyncio.gather(*pending, return_exceptions=True)
            finished = loop.time()
            progress.update(len(latency), extra=f"sent {sent:,} errors {sum(errors.values())}")
    finally:
        await close()
    latency.sort()
    service.sort()
    elapsed = finished - start

    def ms(values: Sequence[float], q: float) -> float:
        return round(percentile(values, q) * 1000, 2)

    return {
        "requests": count,
        "sent": sent,
        "ok": len(latency),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "target_rate": rate,
        "achieved_rate": round(len(latency) / elapsed, 1) if elapsed > 0 else 0.0,
        "send_rate": round(sent / max(min(elapsed, time_limit), 1e-9), 1),
        "seconds": round(elapsed, 2),
        "connections": connections,
        "client": client_kind,
        "latency_ms": {
            q: ms(latency, p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
        "service_ms": {
            q: ms(service, p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
    }
