"""The evidence of a non-recoverable migration (issue 13 item 3): the executor's
:class:`~.records.MigrationEvidence` (``POST /v1/migrations/{id}/evidence``) folded into the book.

Pure: a function of the book and the record. Accepted only for a migration the book holds whole in
phase ``evidence-kept``, and per Pod only for a Pod the migration lists (by UID, with the namespace
and name it lists for that UID). The **first**
accepted evidence of each (migration, Pod UID) is kept: a second POST for the same Pod stores
nothing and is reported as a duplicate, so a retried POST is idempotent. Each accepted Pod is one
``migration_evidence`` row (:attr:`~.book.MigrationBook.pending_evidence`, written with the
governor's batch). Every outcome is one decision: ``MigrationEvidenceStored`` (with
``storedPodUIDs``, ``duplicatePodUIDs``, ``refusedPodUIDs``), or ``MigrationReportRejected``
(``report: evidence``) for a migration not held or not ``evidence-kept``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.domain.events import format_time
from services.domain.migration.book import MigrationBook, Phase
from services.domain.migration.outcomes import Outcome, OutcomeKind, emit, name
from services.domain.migration.records import EvidencePod, MigrationEvidence


def on_evidence(book: MigrationBook, r: MigrationEvidence, at: datetime) -> list[Outcome]:
    """Fold evidence ``r`` at event time ``at`` (UTC); accepted Pods are appended to
    ``book.pending_evidence`` and remembered in ``book.evidence``."""
    out: list[Outcome] = []
    m = book.migrations.get(r.migration_id)
    if m is None or m.phase is not Phase.EVIDENCE_KEPT:
        if m is None:
            why = ("finished" if r.migration_id in book.finished_set else "unknown") + " migration"
        else:
            why = f"evidence is kept only for evidence-kept migrations (phase {m.phase.value})"
        out.append(
            Outcome(
                OutcomeKind.REPORT_REJECTED,
                at,
                r.migration_id,
                "" if m is None else m.node,
                "" if m is None else m.resource_id,
                f"evidence from {r.holder} rejected: {why} {r.migration_id}",
                {
                    "migrationID": r.migration_id,
                    "holder": r.holder,
                    "report": "evidence",
                    "rejectReason": why,
                },
            )
        )
        return out
    # By UID, and under the namespace and name the migration lists for it: the first evidence
    # of a Pod is kept for good, so one naming another Pod must not take its place.
    listed = {uid: (namespace, pod_name) for namespace, pod_name, uid in m.pods}
    kept = book.evidence.setdefault(m.migration_id, [])
    stored: list[str] = []
    duplicate: list[str] = []
    refused: list[str] = []
    for pod in r.pods:
        if listed.get(pod.uid) != (pod.namespace, pod.name):
            refused.append(pod.uid)
        elif pod.uid in kept or pod.uid in stored:
            duplicate.append(pod.uid)
        else:
            stored.append(pod.uid)
            book.pending_evidence.append(_row(r, m.node, m.resource_id, pod))
    kept.extend(stored)
    if not kept:
        del book.evidence[m.migration_id]
    parts = [f"{len(stored)} Pod(s) stored"]
    if duplicate:
        parts.append(f"{len(duplicate)} already stored (kept the first)")
    if refused:
        parts.append(f"{len(refused)} not of this migration (refused)")
    emit(
        out,
        OutcomeKind.EVIDENCE_STORED,
        m,
        at,
        f"evidence of {name(m)} from {r.holder}: " + ", ".join(parts),
        evidenceHolder=r.holder,
        collectedAt=r.collected_at,
        storedPodUIDs=stored,
        duplicatePodUIDs=duplicate,
        refusedPodUIDs=refused,
    )
    return out


def _row(r: MigrationEvidence, node: str, resource_id: str, pod: EvidencePod) -> dict[str, Any]:
    """The ``migration_evidence`` row of ``pod`` (times RFC 3339 UTC)."""
    return {
        "migration_id": r.migration_id,
        "pod_uid": pod.uid,
        "namespace": pod.namespace,
        "pod_name": pod.name,
        "resource_version": pod.resource_version,
        "status": pod.status,
        "node": node,
        "resource_id": resource_id,
        "holder": r.holder,
        "collected_at": format_time(r.collected_at),
        "reported_at": format_time(r.reported_at),
    }
