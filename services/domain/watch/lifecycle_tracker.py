"""The watcher's memory for claim lifecycle stages: which Pods were already seen Ready, so that
each Pod's stage latencies (:mod:`services.domain.lifecycle`) are observed once.

Pure: no I/O, no clock. Rules:

- a Pod that uses devices is observed when a *watch* event (ADDED or MODIFIED) first shows it
  Ready; its UID is then remembered, and later events (Ready flapping, status updates,
  out-of-order repeats) observe nothing;
- a Pod already Ready in a LIST (the watcher's first LIST, or a re-LIST after 410 Gone) is
  remembered but **not** observed: its Ready transition happened before the watcher could see it
  (a restart must not count every running Pod again). The cost: a Pod that turned Ready while
  the watcher was down, or during the gap before a re-LIST, is never observed;
- DELETED forgets the Pod; a LIST forgets the remembered Pods it no longer has;
- a ResourceClaim shared by several observed Pods has its ``claim_allocated`` counted once (with
  the first of them); its UID is remembered while one of those Pods is.

A recorded stream (file mode) has no LIST: every line is a watch event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from services.domain.lifecycle import (
    ClaimLookup,
    Stage,
    StageReport,
    read_lifecycle,
    stage_latencies,
)
from services.domain.watch.pod_tracker import WatchKind


class LifecycleTracker:
    """Pod UIDs already seen Ready (and the claims counted with them). See the module docstring."""

    def __init__(self) -> None:
        self._ready: set[str] = set()
        self._claims_of: dict[str, tuple[str, ...]] = {}  # observed Pod UID -> claim UIDs
        self._claim_pods: dict[str, set[str]] = {}  # claim UID -> observed Pod UIDs

    def __len__(self) -> int:
        """Pods remembered as seen Ready."""
        return len(self._ready)

    def __contains__(self, uid: object) -> bool:
        return uid in self._ready

    def _forget(self, uid: str) -> None:
        self._ready.discard(uid)
        for claim_uid in self._claims_of.pop(uid, ()):
            pods = self._claim_pods.get(claim_uid)
            if pods is not None:
                pods.discard(uid)
                if not pods:
                    del self._claim_pods[claim_uid]

    def watched(self, kind: WatchKind, pod: Mapping[str, Any], claims: ClaimLookup) -> StageReport:
        """One watch event of a Pod: the stage latencies to observe (empty unless this is the
        first time the Pod is seen Ready)."""
        facts = read_lifecycle(pod)
        if facts is None:
            return StageReport()
        if kind is WatchKind.DELETED:
            self._forget(facts.uid)
            return StageReport()
        if facts.uid in self._ready or not facts.ready or not facts.uses_devices:
            return StageReport()
        self._ready.add(facts.uid)
        report = stage_latencies(facts, claims)
        report.latencies = [
            latency
            for latency in report.latencies
            # A claim shared with a Pod observed before: its allocation was counted then.
            if not (
                latency.stage is Stage.CLAIM_ALLOCATED and latency.claim_uid in self._claim_pods
            )
        ]
        for claim_uid in report.claim_uids:
            self._claim_pods.setdefault(claim_uid, set()).add(facts.uid)
        if report.claim_uids:
            self._claims_of[facts.uid] = tuple(report.claim_uids)
        return report

    def listed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A complete LIST: remember the Ready Pods without observing them; forget the
        remembered Pods it does not have."""
        listed: set[str] = set()
        for pod in pods:
            facts = read_lifecycle(pod)
            if facts is None:
                continue
            listed.add(facts.uid)
            if facts.ready and facts.uses_devices:
                self._ready.add(facts.uid)
        for uid in self._ready - listed:
            self._forget(uid)
