"""The watcher's memory, pure: what to publish for each Pod (:mod:`.pod_tracker`), Node and Lease
(:mod:`.node_tracker`, which reads them with :mod:`.node_objects`), DRA object
(:mod:`.inventory_tracker`) and claim lifecycle (:mod:`.lifecycle_tracker`). No I/O, no wall
clock: times come from the caller."""
