"""Scripted fakes of the watcher's Kubernetes ports (``pod_source.PodApi``,
``node_source.ObjectApi``; real: ``services.adapters.kube.watch_apis``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from services.adapters.kube.list_watch import ObjectList


@dataclass(frozen=True)
class Silence:
    """A watch step that sends nothing for ``seconds`` (a half-open connection)."""

    seconds: float


Step = bytes | Exception | Silence
"""One step of a scripted WATCH: a line of the body, or an exception raised there."""


# The lines a script is made of, shaped as kube-apiserver serves them (what the watcher reads of
# them is held to the real server by tests/contracts/test_watch_apis.py).
def event_line(kind: str, obj: dict[str, Any]) -> bytes:
    """A watch event line: ``{"type": kind, "object": obj}``."""
    return orjson.dumps({"type": kind, "object": obj})


def bookmark(version: str, kind: str = "Pod") -> bytes:
    """A BOOKMARK at ``version`` (the server sends one shortly before a watch times out)."""
    return event_line("BOOKMARK", {"kind": kind, "metadata": {"resourceVersion": version}})


GONE = event_line(
    "ERROR",
    {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410, "message": "too old"},
)
"""What the server sends (HTTP 200, then this line, then the end) for a WATCH from a
resourceVersion older than the history it keeps."""


@dataclass
class FakePodApi:
    """Scripted LIST responses and WATCH sessions; sets ``stop`` when the script runs out."""

    lists: list[ObjectList | Exception]
    watches: list[list[Step]]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    list_calls: int = 0
    watch_calls: list[str | None] = field(default_factory=list)

    async def list_pods(self) -> ObjectList:
        self.list_calls += 1
        response = self.lists.pop(0)
        if isinstance(response, Exception):
            raise response
        return response

    async def watch_pods(self, resource_version: str | None) -> AsyncIterator[bytes]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.stop.set()
            return
        for step in self.watches.pop(0):
            if isinstance(step, Exception):
                raise step
            if isinstance(step, Silence):
                await asyncio.sleep(step.seconds)
                continue
            yield step


@dataclass
class FakeObjectApi:
    """Scripted LIST responses and WATCH sessions of one kind; sets ``stop`` when the script
    runs out."""

    object_kind: str
    lists: list[ObjectList | Exception]
    watches: list[list[Step]]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    list_calls: int = 0
    watch_calls: list[str | None] = field(default_factory=list)

    async def list_objects(self) -> ObjectList:
        self.list_calls += 1
        response = self.lists.pop(0)
        if isinstance(response, Exception):
            raise response
        return response

    async def watch_objects(self, resource_version: str | None) -> AsyncIterator[bytes]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.stop.set()
            return
        for step in self.watches.pop(0):
            if isinstance(step, Exception):
                raise step
            if isinstance(step, Silence):
                await asyncio.sleep(step.seconds)
                continue
            yield step
