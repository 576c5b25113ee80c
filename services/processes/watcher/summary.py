"""What one watcher run did, counted: :class:`WatchSummary` (the CLI prints its line)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class WatchSummary:
    """Counts of one watcher run: items read, events published by type (device, node and
    inventory events; ticks are counted apart in ``ticks_sent``), problems by code (Pod problems
    from ``read_pod``, Lease/Node problems from ``node_tracker``, plus ``broken-line``,
    ``unknown-event-type``, ``watch-error``, ``dra-inventory``), dead-lettered records, ignored
    items by kind, the last Pod resourceVersion (``resource_version``) and the Lease, Node and DRA
    ones (``object_versions``), the DRA objects tracked by kind (``inventory_tracked``) and the
    DRA resources the API server does not serve (``not_served``)."""

    source: str
    items: int = 0
    events_published: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    ignored: Counter[str] = field(default_factory=Counter)
    resource_version: str | None = None
    pods_tracked: int = 0
    ticks_sent: int = 0
    heartbeats_coarsened: int = 0
    nodes_tracked: int = 0
    object_versions: dict[str, str] = field(default_factory=dict)
    inventory_tracked: dict[str, int] = field(default_factory=dict)
    not_served: list[str] = field(default_factory=list)

    @property
    def events_total(self) -> int:
        return sum(self.events_published.values())

    def line(self) -> str:
        """One human-readable line, e.g. for the CLI."""

        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{k}={v}" for k, v in sorted(counter.items())) or "none"

        return (
            f"{self.source}: {self.items} items, {self.events_total} events published "
            f"({counts(self.events_published)}), {sum(self.problems.values())} problems "
            f"({counts(self.problems)}), {self.dead_lettered} dead-lettered, "
            f"{self.pods_tracked} pods tracked, last resourceVersion {self.resource_version}, "
            f"{self.ticks_sent} ticks sent, {self.heartbeats_coarsened} heartbeats coarsened, "
            f"{self.nodes_tracked} nodes tracked, "
            f"{sum(self.inventory_tracked.values())} DRA objects tracked"
        )

    def __str__(self) -> str:
        return self.line()

    def __rich__(self) -> str:
        return self.line()
