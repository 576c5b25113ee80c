"""``PodWorkloadObserved``: what the watcher knows of a Pod's workload, on the health topic.

A new record type of the topic (schema 1, like the device events of
:mod:`services.domain.events`), with a ``version`` of its own (:data:`WORKLOAD_RECORD_VERSION`)
so its fields can grow without touching the other types. Keyed by node like the device events
(the Pod's ``spec.nodeName``), ordered by ``statusVersion``, the Pod's
``metadata.resourceVersion``: the projection keeps, per Pod UID, the record with the newest
comparable one (an unordered record, ``statusVersion`` null, may create a row but never replaces
one of an ordered record). Times are UTC (``observedAt``: the watcher time of the Pod event).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.domain.workloads.owners import BARE_POD, OwnerLink

WORKLOAD_RECORD_VERSION: Final = 1
"""The ``version`` written in every ``PodWorkloadObserved``; a reader refuses a newer one."""

WORKLOAD_EVENT_TYPE: Final = "PodWorkloadObserved"


@dataclass(frozen=True, slots=True)
class PodWorkloadObserved:
    """One Pod's controller chain and migration facts (issue 13 item 1).

    ``chain``: the controller references from the Pod's direct owner up to the workload (empty: a
    bare Pod); ``chain_complete`` false when the chain could not be followed to its end, with
    ``chain_reason`` (published as far as known). ``migration_*``: see
    :class:`~services.domain.workloads.migration.Migration`."""

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    status_version: int | None
    observed_at: datetime
    chain: tuple[OwnerLink, ...] = ()
    chain_complete: bool = True
    chain_reason: str | None = None
    migration_class: MigrationClass = MigrationClass.NON_RECOVERABLE
    migration_source: MigrationSource = MigrationSource.DEFAULT
    checkpoint_max_age_seconds: int | None = None
    shard: str | None = None
    migration_reasons: tuple[str, ...] = ()
    type: str = field(default=WORKLOAD_EVENT_TYPE, init=False)

    @property
    def workload(self) -> OwnerLink | None:
        """The topmost known controller (``None``: a bare Pod)."""
        return self.chain[-1] if self.chain else None

    @property
    def workload_kind(self) -> str:
        return self.chain[-1].kind if self.chain else BARE_POD

    def facts(self) -> tuple[object, ...]:
        """What must differ for a new record of the same Pod to be worth publishing."""
        return (
            self.node,
            self.chain,
            self.chain_complete,
            self.chain_reason,
            self.migration_class,
            self.migration_source,
            self.checkpoint_max_age_seconds,
            self.shard,
            self.migration_reasons,
        )
