"""When the watcher's watches last delivered, for its ticks (issue 15 item 3).

A half-open watch connection delivers nothing, not even the BOOKMARKs the API server sends about
once a minute (``allowWatchBookmarks``), while the watcher itself keeps ticking. So every tick
carries ``watchSeenAt``: the watcher's clock when its *quietest* watch last delivered an event, a
BOOKMARK, an ERROR or a LIST, and the governor decides on event time whether the watch is stale
(:mod:`services.domain.governance.watch_freshness`). A watch counts from the watcher's first tick
(its start), and a DRA watch the API server does not serve leaves the count. A recorded stream's
``_CLOCK`` lines count as deliveries: a recording stands for a live watch whose BOOKMARKs it did
not keep.
"""

from __future__ import annotations

from datetime import datetime


class WatchDeliveries:
    """Last delivery time (watcher clock, UTC) per watch stream (``Pod``, ``Lease``...)."""

    def __init__(self, streams: tuple[str, ...]) -> None:
        self._streams = streams
        self._seen: dict[str, datetime] = {}

    def delivered(self, stream: str, at: datetime) -> None:
        """``stream`` delivered something at ``at``."""
        previous = self._seen.get(stream)
        if previous is None or at > previous:
            self._seen[stream] = at

    def ended(self, stream: str) -> None:
        """``stream`` stopped for good (a DRA resource not served): it no longer counts."""
        self._seen.pop(stream, None)
        self._streams = tuple(s for s in self._streams if s != stream)

    def seen_at(self, now: datetime) -> datetime:
        """The quietest stream's last delivery, for a tick at ``now``; the streams expected from
        the start (and any without a delivery yet) count from the first tick."""
        for stream in self._streams:
            self._seen.setdefault(stream, now)
        return min(self._seen.values(), default=now)
