"""The workload contract's annotations (docs/migration.md)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.domain.workloads.codec import workload_violations
from services.domain.workloads.migration import (
    CLASS_ANNOTATION,
    COMPLETION_INDEX_ANNOTATION,
    JOBSET_INDEX_ANNOTATION,
    JOBSET_JOB_ANNOTATION,
    MAX_AGE_ANNOTATION,
    SHARD_ANNOTATION,
    Migration,
    MigrationClass,
    MigrationSource,
    read_migration,
)
from services.domain.workloads.owners import OwnerChain
from services.domain.workloads.record import workload_record


def test_default_is_non_recoverable() -> None:
    assert read_migration("p", {}, {}) == Migration()


def test_checkpointed_on_the_pod_with_its_max_age() -> None:
    found = read_migration("p", {CLASS_ANNOTATION: "checkpointed", MAX_AGE_ANNOTATION: "900"}, {})
    assert found == Migration(MigrationClass.CHECKPOINTED, MigrationSource.POD, 900)


def test_owner_declares_and_the_pods_own_annotation_wins() -> None:
    owner = {CLASS_ANNOTATION: "checkpointed", MAX_AGE_ANNOTATION: "600"}
    from_owner = read_migration("p", {}, owner)
    assert from_owner.migration_class is MigrationClass.CHECKPOINTED
    assert from_owner.source is MigrationSource.OWNER
    assert from_owner.checkpoint_max_age_seconds == 600
    mixed = read_migration("p", {MAX_AGE_ANNOTATION: "60"}, owner)
    assert mixed.checkpoint_max_age_seconds == 60  # key by key: the Pod's max age wins
    pod_wins = read_migration("p", {CLASS_ANNOTATION: "sharded"}, owner)
    assert pod_wins.migration_class is MigrationClass.SHARDED
    assert pod_wins.source is MigrationSource.POD
    assert pod_wins.checkpoint_max_age_seconds is None
    assert pod_wins.reasons == (f"{MAX_AGE_ANNOTATION}: ignored, the workload is not checkpointed",)


def test_sharded_shard_defaults_to_the_pod_name() -> None:
    assert read_migration("w-3", {CLASS_ANNOTATION: "sharded"}, {}).shard == "w-3"
    named = read_migration("w-3", {CLASS_ANNOTATION: "sharded", SHARD_ANNOTATION: "s2"}, {})
    assert named.shard == "s2" and named.reasons == ()


def test_an_indexed_job_pods_shard_is_its_completion_index_which_its_replacement_shares() -> None:
    sharded = {CLASS_ANNOTATION: "sharded", COMPLETION_INDEX_ANNOTATION: "3"}
    assert read_migration("train-3-abcde", sharded, {}).shard == "index-3"
    assert read_migration("train-3-xyz12", sharded, {}).shard == "index-3"  # the replacement
    jobset = {**sharded, JOBSET_JOB_ANNOTATION: "workers", JOBSET_INDEX_ANNOTATION: "1"}
    assert read_migration("js-workers-1-3-q", jobset, {}).shard == "workers-1-3"
    declared = read_migration("p", {**sharded, SHARD_ANNOTATION: "rank-7"}, {})
    assert declared.shard == "rank-7"  # a declared shard wins
    assert read_migration("p", {**sharded, COMPLETION_INDEX_ANNOTATION: " "}, {}).shard == "p"


def test_unknown_class_is_non_recoverable_with_a_reason() -> None:
    found = read_migration("p", {CLASS_ANNOTATION: "Checkpointed"}, {})
    assert found.migration_class is MigrationClass.NON_RECOVERABLE
    assert found.source is MigrationSource.POD
    assert found.reasons == (
        f"{CLASS_ANNOTATION}: unknown value 'Checkpointed' (read as non-recoverable; "
        "expected checkpointed, sharded or non-recoverable)",
    )


def test_bad_max_age_is_not_used() -> None:
    for raw in ("0", "-5", "15m", "1e3", ""):
        found = read_migration("p", {CLASS_ANNOTATION: "checkpointed", MAX_AGE_ANNOTATION: raw}, {})
        assert found.checkpoint_max_age_seconds is None, raw
        assert found.reasons and found.reasons[0].startswith(MAX_AGE_ANNOTATION), raw


def test_a_max_age_of_thousands_of_digits_is_a_reason_not_a_crash() -> None:
    # int() refuses more than 4300 digits (ValueError): read_migration never raises, and the
    # watcher's workload task (which calls it for every Pod holding a device) must not die.
    for raw in ("9" * 5000, "0" * 5000 + "900", "1" + "0" * 20):
        found = read_migration("p", {CLASS_ANNOTATION: "checkpointed", MAX_AGE_ANNOTATION: raw}, {})
        if raw.lstrip("0") == "900":
            assert found.checkpoint_max_age_seconds == 900 and found.reasons == ()
        else:
            assert found.checkpoint_max_age_seconds is None
            assert found.reasons[0].startswith(MAX_AGE_ANNOTATION)
            assert len(found.reasons[0]) < 200


def test_a_shard_name_that_cannot_be_stored_falls_back_to_the_pods_name_with_a_reason() -> None:
    # workload_violations refuses such a shard: the watcher would drop the Pod's whole record
    # (no workload, no class, never migrated) with only a log line.
    for bad in ("rank\u202e3", "rank\x013", "rank\u200b3", "rank\x853"):
        found = read_migration("w-3", {CLASS_ANNOTATION: "sharded", SHARD_ANNOTATION: bad}, {})
        assert found.migration_class is MigrationClass.SHARDED
        assert found.shard == "w-3", bad
        [reason] = found.reasons
        assert reason.startswith(SHARD_ANNOTATION) and "\u202e" not in reason, reason
        record = workload_record(
            {
                "metadata": {
                    "name": "w-3",
                    "uid": "u-3",
                    "namespace": "ml",
                    "annotations": {CLASS_ANNOTATION: "sharded", SHARD_ANNOTATION: bad},
                },
                "spec": {"nodeName": "gpu-node-a"},
            },
            OwnerChain(),
            datetime(2026, 12, 3, tzinfo=UTC),
        )
        assert record is not None and workload_violations(record) == [], bad


def test_shard_of_a_workload_that_is_not_sharded_is_ignored() -> None:
    found = read_migration("p", {SHARD_ANNOTATION: "s1"}, {})
    assert found.shard is None
    assert found.reasons == (f"{SHARD_ANNOTATION}: ignored, the workload is not sharded",)
