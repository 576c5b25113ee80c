"""``devicestate migrate`` (issue 13 item 3): the migration executor. It follows the governor's
migrations (``GET /v1/migrations``), takes their lease, and does the Kubernetes side: the
``devicestate.io/serving`` Pod condition, the checkpoint handshake, policy/v1 Evictions, the
replacement, and for a non-recoverable workload a Warning Event and the evidence. Walk-through
in ``docs/migration.md`` ("The executor")."""
