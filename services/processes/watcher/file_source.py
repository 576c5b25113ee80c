"""Read a recorded watch stream (JSONL, the format of ``devtools/examples/stream-*.jsonl``).

One watch event a line, as the API serves it, plus harness directives (``type`` starting with
``_``): ``_CLOCK`` moves the watcher clock (:class:`HarnessClock`) so that ``observedAt`` in the
demo output is deterministic. Blank lines are skipped. A line that cannot be decoded is yielded as
:class:`~services.processes.watcher.watch_lines.BrokenLine` with its number; reading goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from services.domain.events import now_utc
from services.processes.watcher.watch_lines import WatchItem, decode_watch_line


class HarnessClock:
    """The watcher's clock: the time of the last ``_CLOCK`` directive once one was read, the wall
    clock (UTC, from ``wall``) before that."""

    def __init__(self, wall: Callable[[], datetime] = now_utc) -> None:
        self._wall = wall
        self._pinned: datetime | None = None

    def set(self, now: datetime) -> None:
        """Pin the clock to ``now`` (timezone-aware); raises ``ValueError`` for a naive time."""
        if now.tzinfo is None:
            raise ValueError("the watcher clock needs a timezone-aware time")
        self._pinned = now

    @property
    def pinned(self) -> bool:
        """True once a ``_CLOCK`` directive set the clock."""
        return self._pinned is not None

    def now(self) -> datetime:
        """Current watcher time (UTC)."""
        return self._pinned if self._pinned is not None else self._wall()


def source_of(path: Path, line: int) -> str:
    """Dead-letter ``source`` header for a line of a recorded stream: ``file:<path>:<line>``."""
    return f"file:{path}:{line}"


def read_watch_file(
    path: Path, kinds: frozenset[str] = frozenset()
) -> Iterator[tuple[int, WatchItem]]:
    """Yield ``(line number, item)`` for each non-blank line of ``path`` (numbers start at 1).
    Objects of a kind in ``kinds`` (Node, Lease: streams may mix kinds) are
    :class:`~services.processes.watcher.watch_lines.ObjectChange`, other non-Pod objects ``OtherKind``.

    Raises ``OSError`` when the file cannot be opened or read; never for its content.
    """
    with path.open("rb") as stream:
        for number, line in enumerate(stream, start=1):
            if line.strip():
                yield number, decode_watch_line(line.rstrip(b"\r\n"), kinds=kinds)
