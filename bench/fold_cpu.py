"""The health agent's pure work per observation (issue 12), without the stack:

    .venv/bin/python -m bench.fold_cpu --events 100000 --batch 200

Generates the pipeline benchmark's ``--shape training`` log (:func:`bench.load_pods.generate_pods`:
8-GPU Pods, schema-2 records, 10 % re-sent), files it on 6 partitions by the key's CRC-32, and
runs, batch by batch of ``--batch`` Kafka records, what :mod:`streams.dedup` and
:meth:`ProjectionStore.apply_batch
<services.adapters.projection.store.ProjectionStore.apply_batch>` compute in memory: decoding
(``decode_into``), the dedup table's selection (a dict for the table), the early-drop check, the
device ceiling, ``plan_batch``, the stage rows, the event times, the inventory fold, the
``WorkloadOnDevice`` facts and the forwarded records (``governance_records``, encoded). The
projection is a dict of the rows the plans wrote. No Faust, Kafka, SQL or event loop: what is
left of the worker's CPU is theirs. Prints the CPU seconds (``time.process_time``) of each stage,
per observation.
"""

from __future__ import annotations

import argparse
import time
import zlib
from types import SimpleNamespace
from typing import Any

from bench.load_pods import generate_pods
from services.adapters.kafka.headers import type_headers
from services.adapters.projection.batch_plan import (
    applied_positions,
    health_transitions,
    plan_batch,
    progress_params,
)
from services.adapters.projection.retention_sql import batch_event_times
from services.adapters.projection.store import _device_rows
from services.domain.batch import PendingCommit
from services.domain.device_ceiling import within_ceiling
from services.domain.directory import DeviceKey, DeviceRecord, Outcome
from services.domain.early_drops import unjustified_drops
from services.domain.governance.input_codec import encode_input
from services.domain.inventory.fold import InventoryFold
from services.domain.observations import OBSERVATIONS_TYPE
from services.domain.workloads.on_device import batch_workloads_on_devices
from streams.dedup_decode import DecodedBatch, decode_into, early_event_times
from streams.dedup_table import KEY_SEPARATOR, select_new, table_key
from streams.forward import BatchView, governance_records, record_key

PARTITIONS = 6


def _messages(keys: list[bytes], values: list[bytes]) -> list[Any]:
    offsets = [0] * PARTITIONS
    out = []
    for key, value in zip(keys, values, strict=True):
        partition = zlib.crc32(key) % PARTITIONS
        kind = OBSERVATIONS_TYPE if b'"schema":2' in value else "DeviceHealthObserved"
        message = SimpleNamespace(
            topic="health",
            partition=partition,
            offset=offsets[partition],
            key=key,
            value=value,
            headers=type_headers(kind),
            timestamp=None,
        )
        offsets[partition] += 1
        out.append(SimpleNamespace(message=message))
    return out


async def _no_dead_letters(message: Any, position: Any, reason: str, **_: Any) -> None:
    raise AssertionError(f"the benchmark's log has no bad record: {reason}")


def run(messages: list[Any], batch_size: int) -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds per stage, and counts (applied observations, transitions, forwarded)."""
    devices: dict[DeviceKey, DeviceRecord] = {}
    ranks: dict[str, dict[str, int]] = {}
    inventory = InventoryFold()
    last_event_at: dict[tuple[str, int], Any] = {}
    seconds: dict[str, float] = {}
    counts = {"applied": 0, "transitions": 0, "forwarded": 0}

    def tick(stage: str, since: float) -> float:
        now = time.process_time()
        seconds[stage] = seconds.get(stage, 0.0) + now - since
        return now

    for start in range(0, len(messages), batch_size):
        events = messages[start : start + batch_size]
        t = time.process_time()
        batch = DecodedBatch(events)
        for event in events:
            decode_into(batch, event, _no_dead_letters)
        t = tick("decode", t)
        known = {
            table_key(r.event.node, rid): rank
            for r in batch.records
            for rid, rank in ranks.get(r.event.node, {}).items()
        }
        selection = select_new(batch.records, known)
        dropped, event_times = early_event_times(batch, selection.kept)
        t = tick("dedup table selection", t)
        records = selection.records
        committed = {
            key: devices[key].status_version
            for r in dropped
            if (key := r.event.device_key) in devices  # type: ignore[union-attr]
        }
        assert not unjustified_drops(dropped, records, committed)
        t = tick("early-drop check", t)
        current = {
            key: devices[key]
            for r in records
            if (key := r.event.device_key) in devices  # type: ignore[union-attr]
        }
        applied, refused = within_ceiling(records, current.__contains__, {}, 64)
        t = tick("device ceiling", t)
        plan = plan_batch(current, applied, {})
        t = tick("plan_batch", t)
        _device_rows(plan)
        t = tick("stage rows", t)
        progress_params(records, {}, {}, event_times)
        clock = batch_event_times(records, event_times, last_event_at)
        t = tick("event times", t)
        folded = inventory.fold(batch.items, applied_positions(plan), clock[0])
        t = tick("inventory fold", t)
        facts = batch_workloads_on_devices(current, plan.history, [], {}, {}, folded)
        t = tick("workloads_on_devices", t)
        commit = PendingCommit(
            health_transitions(plan), {}, dict(last_event_at), folded, refused, facts
        )
        view = BatchView(batch.order, batch.node_events, dict(batch.times), set(batch.clamped))
        forwarded = governance_records(view, commit, PARTITIONS)
        [(record_key(r), encode_input(r, key), r.type) for r, key in forwarded]
        t = tick("forwarded records", t)
        devices.update(plan.written)
        for key, (rank, _) in selection.ranks.items():
            node, _, resource_id = key.partition(KEY_SEPARATOR)
            ranks.setdefault(node, {})[resource_id] = rank
        last_event_at.update(clock[1])
        counts["applied"] += plan.counts[Outcome.APPLIED]
        counts["transitions"] += plan.transitions
        counts["forwarded"] += len(forwarded)
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="observations")
    parser.add_argument("--devices", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=2_500)
    parser.add_argument("--batch", type=int, default=200, help="Kafka records per batch")
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args()
    workload = generate_pods(args.events, args.devices, args.nodes, 8, 0.1, args.seed)
    messages = _messages(workload.keys, workload.values)
    started = time.process_time()
    seconds, counts = run(messages, args.batch)
    total = time.process_time() - started
    observations = workload.observations or len(messages)
    per = 1e6 / observations
    print(f"{observations:,} observations in {len(messages):,} records; {counts}")
    for stage, spent in seconds.items():
        print(f"  {stage:24s} {spent:6.2f} s  {spent * per:6.1f} us/observation")
    print(f"  {'total':24s} {total:6.2f} s  {total * per:6.1f} us/observation")


if __name__ == "__main__":
    main()
