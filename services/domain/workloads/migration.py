"""A workload's migration class, from the annotations of the workload contract
(``docs/migration.md``): on the Pod, or on its top-level owner; the Pod's own annotation wins,
key by key.

- ``devicestate.io/migration-class``: ``checkpointed`` | ``sharded`` | ``non-recoverable``;
  absent: ``non-recoverable``; another value: ``non-recoverable`` and a reason;
- ``devicestate.io/checkpoint-max-age-seconds``: a positive integer (seconds), read for a
  ``checkpointed`` workload only;
- ``devicestate.io/shard``: the shard's name of a ``sharded`` workload (default: the Pod's
  completion index when it has one, :func:`default_shard`; else the Pod's name).

Pure: plain mappings in, a :class:`Migration` out; a value that breaks the contract never raises,
it is reported in :attr:`Migration.reasons`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from services.domain.limits import invisible_problem


class MigrationClass(StrEnum):
    """How a workload may be moved off a bad device (issue 13)."""

    CHECKPOINTED = "checkpointed"  # saves a checkpoint, then is rebuilt elsewhere
    SHARDED = "sharded"  # one shard (Pod) may move alone
    NON_RECOVERABLE = "non-recoverable"  # cannot move: evidence kept, tenant told


class MigrationSource(StrEnum):
    """Where the migration class came from."""

    POD = "pod"
    OWNER = "owner"
    DEFAULT = "default"


CLASS_ANNOTATION: Final = "devicestate.io/migration-class"
MAX_AGE_ANNOTATION: Final = "devicestate.io/checkpoint-max-age-seconds"
SHARD_ANNOTATION: Final = "devicestate.io/shard"

COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
"""Set by the Job controller on every Pod of an Indexed Job (batch/v1), JobSets' included."""
JOBSET_JOB_ANNOTATION: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_INDEX_ANNOTATION: Final = "jobset.sigs.k8s.io/job-index"
"""Set by the JobSet controller on its Pods: which replicated Job, which of its Jobs."""

MAX_AGE_LIMIT_SECONDS: Final = 10 * 365 * 86400
"""Largest checkpoint age accepted (ten years, seconds): keeps the value a 32-bit column."""

_CLASS_BY_VALUE: Final = {c.value: c for c in MigrationClass}


@dataclass(frozen=True, slots=True)
class Migration:
    """The migration facts of one Pod. ``checkpoint_max_age_seconds`` only for ``checkpointed``
    (``None``: not declared), ``shard`` only for ``sharded``; ``reasons`` name every annotation
    value that was not used, and why."""

    migration_class: MigrationClass = MigrationClass.NON_RECOVERABLE
    source: MigrationSource = MigrationSource.DEFAULT
    checkpoint_max_age_seconds: int | None = None
    shard: str | None = None
    reasons: tuple[str, ...] = ()


def annotations_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata.annotations`` of a raw object (empty when absent or not an object)."""
    if obj is None:
        return {}
    metadata = obj.get("metadata")
    found = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def default_shard(pod_annotations: Mapping[str, Any], pod_name: str) -> str:
    """The shard of a ``sharded`` Pod that declares none: its place in an Indexed Job, which the
    Job controller gives the Pod that replaces it too (``index-<n>``; in a JobSet
    ``<replicatedJob>-<jobIndex>-<n>``), so the replacement is recognised as the same shard;
    the Pod's name for other Pods (a replacement then has another shard name)."""
    index = pod_annotations.get(COMPLETION_INDEX_ANNOTATION)
    if not isinstance(index, str) or not index.strip():
        return pod_name
    job = pod_annotations.get(JOBSET_JOB_ANNOTATION)
    job_index = pod_annotations.get(JOBSET_INDEX_ANNOTATION)
    if isinstance(job, str) and job and isinstance(job_index, str) and job_index:
        return f"{job}-{job_index}-{index.strip()}"
    return f"index-{index.strip()}"


def _pick(
    key: str, pod: Mapping[str, Any], owner: Mapping[str, Any]
) -> tuple[str | None, MigrationSource]:
    for where, source in ((pod, MigrationSource.POD), (owner, MigrationSource.OWNER)):
        value = where.get(key)
        if isinstance(value, str):
            return value, source
    return None, MigrationSource.DEFAULT


def read_migration(
    pod_name: str, pod_annotations: Mapping[str, Any], owner_annotations: Mapping[str, Any]
) -> Migration:
    """The :class:`Migration` of the Pod ``pod_name`` from its annotations and its top-level
    owner's (empty when it has none, or it could not be read)."""
    reasons: list[str] = []
    raw_class, source = _pick(CLASS_ANNOTATION, pod_annotations, owner_annotations)
    migration_class = MigrationClass.NON_RECOVERABLE
    if raw_class is not None:
        found = _CLASS_BY_VALUE.get(raw_class.strip())
        if found is None:
            shown = raw_class if len(raw_class) <= 64 else raw_class[:64] + "..."
            reasons.append(
                f"{CLASS_ANNOTATION}: unknown value {shown!r} (read as non-recoverable; "
                "expected checkpointed, sharded or non-recoverable)"
            )
        else:
            migration_class = found
    raw_age, _ = _pick(MAX_AGE_ANNOTATION, pod_annotations, owner_annotations)
    max_age = None
    if raw_age is not None:
        text = raw_age.strip()
        if migration_class is not MigrationClass.CHECKPOINTED:
            reasons.append(f"{MAX_AGE_ANNOTATION}: ignored, the workload is not checkpointed")
        elif (
            text.isascii()
            and text.isdigit()
            # Bounded before int(): Python refuses to convert more than 4300 digits (ValueError),
            # and an annotation may hold 256 KiB of them.
            and len(text.lstrip("0")) <= len(str(MAX_AGE_LIMIT_SECONDS))
            and 0 < int(text.lstrip("0") or "0") <= MAX_AGE_LIMIT_SECONDS
        ):
            max_age = int(text.lstrip("0"))
        else:
            reasons.append(
                f"{MAX_AGE_ANNOTATION}: {raw_age[:64]!r} is not a positive integer of seconds "
                f"(at most {MAX_AGE_LIMIT_SECONDS})"
            )
    raw_shard, _ = _pick(SHARD_ANNOTATION, pod_annotations, owner_annotations)
    shard = None
    if migration_class is MigrationClass.SHARDED:
        declared = raw_shard.strip() if raw_shard is not None else ""
        shard = declared or default_shard(pod_annotations, pod_name)
        if len(shard) > 253:
            reasons.append(f"{SHARD_ANNOTATION}: longer than 253 characters, the Pod's name used")
            shard = pod_name
        elif any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in shard) or invisible_problem(
            "shard", shard
        ):
            # Such a name cannot be stored or shown (workload_violations): the whole record
            # would be dropped, and the Pod would never migrate, with no reason anywhere.
            reasons.append(
                f"{SHARD_ANNOTATION}: {shard[:64]!r} holds a control, invisible or "
                "bidirectional-control character, the Pod's name used"
            )
            shard = pod_name
    elif raw_shard is not None:
        reasons.append(f"{SHARD_ANNOTATION}: ignored, the workload is not sharded")
    return Migration(migration_class, source, max_age, shard, tuple(reasons))
