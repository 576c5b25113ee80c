"""Recorded watch streams: line decoding, the harness clock, and reading files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.adapters.kube.list_watch import split_lines
from services.domain.watch.pod_tracker import WatchKind
from services.processes.watcher.file_source import HarnessClock, read_watch_file, source_of
from services.processes.watcher.watch_lines import (
    NODE_KINDS,
    OBJECT_KINDS,
    Bookmark,
    BrokenLine,
    ClockSet,
    Directive,
    ObjectChange,
    OtherKind,
    PodChange,
    UnknownType,
    WatchError,
    decode_watch_line,
)

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
WALL = datetime(2030, 1, 1, tzinfo=UTC)


def test_clock_directive() -> None:
    item = decode_watch_line(b'{"type":"_CLOCK","now":"2026-11-29T10:42:10Z"}')
    assert item == ClockSet(datetime(2026, 11, 29, 10, 42, 10, tzinfo=UTC))


@pytest.mark.parametrize(
    "line", [b'{"type":"_CLOCK","now":"soon"}', b'{"type":"_CLOCK"}', b'{"type":"_CLOCK","now":5}']
)
def test_bad_clock_directive_is_a_broken_line(line: bytes) -> None:
    item = decode_watch_line(line)
    assert isinstance(item, BrokenLine) and item.raw == line


def test_other_directives_are_skipped() -> None:
    assert decode_watch_line(b'{"type":"_PAUSE","seconds":3}') == Directive("_PAUSE")


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_pod_events(kind: str) -> None:
    line = (
        b'{"type":"%s","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"7"}}}'
        % kind.encode()
    )
    item = decode_watch_line(line)
    assert isinstance(item, PodChange)
    assert (item.kind, item.raw, item.resource_version) == (WatchKind(kind), line, "7")
    assert item.pod["metadata"]["name"] == "p"


def test_object_without_kind_is_read_as_a_pod() -> None:
    item = decode_watch_line(b'{"type":"ADDED","object":{"metadata":{"name":"p"}}}')
    assert isinstance(item, PodChange) and item.resource_version is None


def test_bookmark_carries_the_resume_point_only() -> None:
    line = b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"95020"}}}'
    assert decode_watch_line(line) == Bookmark("95020")
    assert decode_watch_line(b'{"type":"BOOKMARK","object":{"kind":"Pod"}}') == Bookmark(None)


def test_error_410_is_expired() -> None:
    line = (
        b'{"type":"ERROR","object":{"kind":"Status","status":"Failure",'
        b'"message":"too old resource version: 1 (2)","reason":"Expired","code":410}}'
    )
    item = decode_watch_line(line)
    assert isinstance(item, WatchError)
    assert (item.code, item.reason, item.expired) == (410, "Expired", True)
    other = decode_watch_line(b'{"type":"ERROR","object":{"code":500,"message":"boom"}}')
    assert isinstance(other, WatchError) and not other.expired


def test_unknown_type_and_other_kinds() -> None:
    line = b'{"type":"SYNCED","object":{"kind":"Pod"}}'
    assert decode_watch_line(line) == UnknownType("SYNCED", line)
    node = b'{"type":"MODIFIED","object":{"kind":"Node","metadata":{"name":"n"}}}'
    assert decode_watch_line(node) == OtherKind("MODIFIED", "Node")


def test_nodes_and_leases_are_read_when_asked_for() -> None:
    node = b'{"type":"MODIFIED","object":{"kind":"Node","metadata":{"name":"n","resourceVersion":"9"}}}'
    item = decode_watch_line(node, kinds=NODE_KINDS)
    assert isinstance(item, ObjectChange)
    assert (item.kind, item.object_kind, item.raw) == (WatchKind.MODIFIED, "Node", node)
    assert (item.obj["metadata"]["name"], item.resource_version) == ("n", "9")
    lease = b'{"type":"DELETED","object":{"kind":"Lease","metadata":{"name":"n"}}}'
    only_nodes = frozenset({"Node"})
    assert decode_watch_line(lease, kinds=only_nodes) == OtherKind("DELETED", "Lease")
    claim = b'{"type":"ADDED","object":{"kind":"ResourceClaim","metadata":{"name":"c"}}}'
    assert decode_watch_line(claim, kinds=NODE_KINDS) == OtherKind("ADDED", "ResourceClaim")
    pod = b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p"}}}'
    assert isinstance(decode_watch_line(pod, kinds=NODE_KINDS), PodChange)


@pytest.mark.parametrize("kind", ["ResourceSlice", "ResourceClaim", "DeviceClass"])
def test_dra_objects_are_read_when_asked_for(kind: str) -> None:
    line = (
        b'{"type":"MODIFIED","object":{"apiVersion":"resource.k8s.io/v1","kind":"%s",'
        b'"metadata":{"name":"x","resourceVersion":"12"}}}' % kind.encode()
    )
    item = decode_watch_line(line, kinds=OBJECT_KINDS)
    assert isinstance(item, ObjectChange)
    assert (item.kind, item.object_kind, item.resource_version) == (WatchKind.MODIFIED, kind, "12")
    assert decode_watch_line(line, kinds=NODE_KINDS) == OtherKind("MODIFIED", kind)
    assert decode_watch_line(line) == OtherKind("MODIFIED", kind)


def test_stream_05b_claim_is_an_object_change_when_asked_for() -> None:
    path = EXAMPLES / "stream-05b-shared-claim-across-pods.jsonl"
    items = dict(read_watch_file(path, kinds=OBJECT_KINDS))
    claim = items[2]
    assert isinstance(claim, ObjectChange) and claim.object_kind == "ResourceClaim"
    assert claim.obj["metadata"]["name"] == "shared-gpu-pool-a"
    assert dict(read_watch_file(path))[2] == OtherKind("ADDED", "ResourceClaim")


def test_objects_without_kind_are_of_the_watched_kind() -> None:
    line = b'{"type":"ADDED","object":{"metadata":{"name":"n"}}}'
    item = decode_watch_line(line, kinds=frozenset({"Lease"}), default_kind="Lease")
    assert isinstance(item, ObjectChange) and item.object_kind == "Lease"
    assert item.resource_version is None


def test_stream_03b_nodes_are_object_changes_when_asked_for() -> None:
    path = EXAMPLES / "stream-03b-plugin-unregistered-observed-kubelet.jsonl"
    kinds = [type(item).__name__ for _, item in read_watch_file(path, kinds=NODE_KINDS)]
    assert kinds.count("ObjectChange") == 3 and "OtherKind" not in kinds
    assert [type(item).__name__ for _, item in read_watch_file(path)].count("OtherKind") == 3


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"tru',
        b"not json",
        b"[1, 2]",
        b'{"object":{}}',
        b'{"type":"ADDED","object":"Pod"}',
        b'{"type":"ADDED"}',
    ],
)
def test_unreadable_lines_are_broken_with_their_bytes(line: bytes) -> None:
    item = decode_watch_line(line)
    assert isinstance(item, BrokenLine)
    assert item.raw == line and item.reason


def test_harness_clock_uses_the_wall_clock_until_pinned() -> None:
    clock = HarnessClock(wall=lambda: WALL)
    assert (clock.now(), clock.pinned) == (WALL, False)
    pinned = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    clock.set(pinned)
    assert (clock.now(), clock.pinned) == (pinned, True)
    with pytest.raises(ValueError, match="timezone"):
        clock.set(datetime(2026, 11, 29))


def test_read_watch_file_numbers_lines_and_skips_blank_ones(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        b'{"type":"_CLOCK","now":"2026-11-29T10:00:00Z"}\n'
        b"\n"
        b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}}\r\n'
        b"{broken\n"
        b'{"type":"ADDED","object":{"kind":"Pod"}}'  # last line without newline
    )
    items = list(read_watch_file(path))
    assert [line for line, _ in items] == [1, 3, 4, 5]
    assert items[1][1] == Bookmark("5")
    broken = items[2][1]
    assert isinstance(broken, BrokenLine) and broken.raw == b"{broken"
    assert isinstance(items[3][1], PodChange)
    assert source_of(path, 4) == f"file:{path}:4"


def test_truncated_line_of_stream_10b_is_reported_and_reading_goes_on() -> None:
    path = EXAMPLES / "stream-10b-truncated-line.jsonl"
    items = list(read_watch_file(path))
    kinds = [(line, type(item).__name__) for line, item in items]
    assert kinds == [(1, "ClockSet"), (2, "PodChange"), (3, "BrokenLine"), (4, "PodChange")]
    broken = items[2][1]
    assert isinstance(broken, BrokenLine)
    assert broken.raw == path.read_bytes().splitlines()[2]


def test_every_shared_stream_decodes_into_known_items() -> None:
    for path in sorted(EXAMPLES.glob("stream-*.jsonl")):
        for _, item in read_watch_file(path):
            assert not isinstance(item, Directive), path


async def _chunks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in sorted(set(cuts)):
        yield data[start:cut]
        start = cut
    yield data[start:]


@given(
    st.lists(st.binary(min_size=1, max_size=30).filter(lambda b: b"\n" not in b), max_size=6),
    st.lists(st.integers(min_value=0, max_value=200), max_size=10),
    st.booleans(),
)
async def test_split_lines_is_independent_of_chunk_boundaries(
    lines: list[bytes], cuts: list[int], final_newline: bool
) -> None:
    data = b"\n".join(lines) + (b"\n" if final_newline else b"")
    got = [line async for line in split_lines(_chunks(data, [c % (len(data) + 1) for c in cuts]))]
    assert got == [line for line in lines if line.strip()]
