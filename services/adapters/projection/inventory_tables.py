"""Tables of the inventory projection (issue 4), on the shared schema-less ``metadata``
(Alembic revisions ``0003_inventory``, ``0004_identity_reported_with``, ``0007_retention``). Written by the health agent in the same transaction as the
directory (``device_history``/``devices``) and ``partition_progress``, from ``InventoryObserved``,
``NodeResourcesChanged`` and the identity of each observation; times are event times.

- ``inventory_objects``: the latest compact form of each ResourceSlice / ResourceClaim /
  DeviceClass (:func:`services.domain.inventory.events.object_to_json`), ``deleted`` kept as a
  tombstone so a replay of the topic gives identical rows;
- ``node_resources``: extended-resource capacity/allocatable per node;
- ``node_labels``: each Node's labels (``NodeLabelsChanged``, issue 16);
- ``device_identities``: per reported ``(node, resourceID)``, the resolved physical identity
  (:class:`services.domain.inventory.identity.Identity`), ``observed_at`` its first observation,
  ``reported_with`` the claim it was last reported with
  (:func:`services.domain.inventory.rows.reported_with_json`; NULL for none), and for a claim
  alias (CDI form) ``last_observed_at``/``partition``, by which it is forgotten a week after its
  last observation once unallocated (:mod:`services.domain.inventory.expiry`);
- ``inventory_conflicts``: data-quality findings (:class:`services.domain.inventory.state.Conflict`),
  ``active`` false once cleared; a cleared row is deleted a week before the log's newest
  event time.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, DateTime, Index, Integer, Table, Text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from services.adapters.projection.tables import metadata

inventory_objects = Table(
    "inventory_objects",
    metadata,
    Column("kind", Text, primary_key=True),  # ResourceSlice | ResourceClaim | DeviceClass
    Column("object_key", Text, primary_key=True),  # driver/pool/slice | namespace/name | name
    # the topic key (node, pool:..., claim:..., class:...)
    Column("record_key", Text, nullable=False),
    Column("node", Text),
    Column("object", JSONB, nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Index("ix_inventory_objects_node", "node"),
)

node_resources = Table(
    "node_resources",
    metadata,
    Column("node", Text, primary_key=True),
    Column("capacity", JSONB, nullable=False),
    Column("allocatable", JSONB, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
)

node_labels = Table(  # issue 16: pools selected by node labels (0015)
    "node_labels",
    metadata,
    Column("node", Text, primary_key=True),
    Column("labels", JSONB, nullable=False),  # {key: value}, valid labels only
    Column("observed_at", DateTime(timezone=True), nullable=False),
)

device_identities = Table(
    "device_identities",
    metadata,
    Column("node", Text, primary_key=True),
    Column("resource_id", Text, primary_key=True),
    Column("device_id", Text, nullable=False),
    Column("owner", Text, nullable=False),  # device-plugin | dra
    Column("status", Text, nullable=False),  # as-reported | resolved | ambiguous | unresolved
    Column("uuid", Text),
    Column("candidates", ARRAY(Text), nullable=False),
    Column("reason", Text),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("reported_with", JSONB),  # {namespace, podClaim, request, resourceClaim}
    # Claim aliases only (retention, services.domain.inventory.expiry): the event time of the
    # latest applied observation and the health-topic partition it came from (0007).
    Column("last_observed_at", DateTime(timezone=True)),
    Column("partition", Integer),
    Index("ix_device_identities_device", "node", "device_id"),
)

inventory_conflicts = Table(
    "inventory_conflicts",
    metadata,
    Column("kind", Text, primary_key=True),
    Column("node", Text, primary_key=True),
    Column("subject", Text, primary_key=True),
    Column("detail", Text, nullable=False),
    Column("active", Boolean, nullable=False),
    Column("first_seen", DateTime(timezone=True), nullable=False),
    Column("last_seen", DateTime(timezone=True), nullable=False),
    Index("ix_inventory_conflicts_active", "active"),
)
