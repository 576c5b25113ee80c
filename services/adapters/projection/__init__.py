"""The PostgreSQL projection: the only owner of SQL on the projection's tables.

- tables and migrations: :mod:`.tables`, :mod:`.governance_tables`, :mod:`.inventory_tables`,
  :mod:`.migrate`; the pool: :mod:`.engine`; errors: :mod:`.errors`;
- the directory's batch writer: :mod:`.store` (:class:`~.store.ProjectionStore`), with its fold
  (:mod:`.batch_plan`), statements and rows (:mod:`.batch_sql`), the replay's cache (:mod:`.cache`)
  and the inventory it maintains (:mod:`.inventory_store`); the governor's writer:
  :mod:`.governance_store`;
- reads: :mod:`.reads_devices` (read models in :mod:`.read_models`, row mapping in :mod:`.rows`),
  :mod:`.reads_governance`, :mod:`.reads_inventory`, :mod:`.reads_quarantines`;
- the replay's schema administration (:mod:`.schema_admin`) and comparison (:mod:`.compare`).

What an event does to a device is decided by :mod:`services.domain.directory` only; this package
loads rows, runs that fold and writes the result.
"""
