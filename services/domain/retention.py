"""Retention of the projection's side tables (issue 11 item 9): what is dropped, and when, as a
function of the log alone (event time, never the wall clock).

The log keeps everything; the tables keep what the directory, the inventory and the API need:

- ``device_history``: with a retention ``R`` (``DEVICESTATE_DEVICE_HISTORY_RETENTION_SECONDS``,
  0 keeps all), a row whose ``observed_at`` is older than ``R`` before its partition's
  **watermark** (``partition_progress.last_event_at``: the newest event time folded from that
  partition) is dropped (:func:`history_horizon`). Nothing reads the table back into a fold, so
  dropping a row never changes a later write: the rows left after the last batch of a partition
  are those within ``R`` of its final watermark, whatever the batch split;
- ``device_identities``: the row of a claim alias (a CDI-form DRA resourceID,
  one per ResourceClaim) is dropped once its last observation is older than a week before its
  partition's watermark and its ``devices`` row holds no allocation; a cleared conflict in
  ``inventory_conflicts`` a week before the log's newest event time (both in
  :mod:`services.domain.inventory.expiry`).
"""

from __future__ import annotations

from datetime import datetime, timedelta


def history_horizon(watermark: datetime, retention_seconds: float) -> datetime | None:
    """History rows of a partition observed before this time are dropped, given the partition's
    watermark (UTC) and the retention in seconds; ``None`` (keep all) for a retention of 0."""
    if retention_seconds <= 0:
        return None
    return watermark - timedelta(seconds=retention_seconds)


def history_kept(observed_at: datetime, watermark: datetime, retention_seconds: float) -> bool:
    """Whether a history row observed at ``observed_at`` is kept under ``watermark``."""
    horizon = history_horizon(watermark, retention_seconds)
    return horizon is None or observed_at >= horizon
