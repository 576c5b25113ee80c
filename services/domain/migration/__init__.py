"""Migration of the workloads on a quarantined device (issue 13, item 2), as a pure fold on the
governor's event time: the input records (:mod:`.records`: the workload-on-device fact and the
executor's reports), the policy and token buckets (:mod:`.limits`), the book of migrations and its
snapshot form (:mod:`.book`), the decisions (:mod:`.outcomes`) and the state machine
(:mod:`.machine`). The governor feeds it (:mod:`services.domain.governance.migrations`); it never
imports the governor. Walk-through in ``docs/migration.md``. No I/O, no clock."""
