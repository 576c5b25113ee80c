"""Build a Pod's ``PodWorkloadObserved`` from the Pod, its resolved chain and the owners' objects.

Pure: the watcher resolves the chain (:func:`~services.domain.workloads.owners.resolve_chain`,
fetching owners as it says) and calls :func:`workload_record` with what it knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from services.domain.codec import parse_resource_version
from services.domain.workloads.codec import TEXT_MAX_LENGTH
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import annotations_of, read_migration
from services.domain.workloads.owners import OwnerChain, string_fields


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_MAX_LENGTH else text[: TEXT_MAX_LENGTH - 3] + "..."


def workload_record(
    pod: Mapping[str, Any], chain: OwnerChain, observed_at: datetime
) -> PodWorkloadObserved | None:
    """The record of ``pod`` (raw JSON) with ``chain``; ``None`` for a Pod not bound to a node
    (``spec.nodeName`` unset: it holds no device) or without a name or UID. ``observed_at`` is
    the watcher time (UTC) of the Pod event."""
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return None
    node = spec.get("nodeName")
    named = string_fields(metadata, ("name", "uid", "namespace"))
    if named is None or not isinstance(node, str) or not node:
        return None
    name, uid, namespace = named
    migration = read_migration(name, annotations_of(pod), annotations_of(chain.top_object))
    return PodWorkloadObserved(
        node=node,
        namespace=namespace,
        pod_name=name,
        pod_uid=uid,
        status_version=parse_resource_version(metadata.get("resourceVersion")),
        observed_at=observed_at,
        chain=chain.links,
        chain_complete=chain.complete,
        chain_reason=None if chain.reason is None else _cut(chain.reason),
        migration_class=migration.migration_class,
        migration_source=migration.source,
        checkpoint_max_age_seconds=migration.checkpoint_max_age_seconds,
        shard=migration.shard,
        migration_reasons=tuple(_cut(r) for r in migration.reasons),
    )
