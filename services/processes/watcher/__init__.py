"""The Pod watcher: reads Pods (live from the Kubernetes API, or from a recorded JSONL stream),
turns their KEP-4680 ``allocatedResourcesStatus`` into device-health events and publishes them to
Kafka, with node Leases and Nodes (node events) and the DRA inventory (``InventoryObserved``).
Entry point: ``devicestate watch`` (``services.processes.watcher.cli``)."""
