"""Benchmark of the pure governor: ``services.domain.governance.machine.step`` over a synthetic
governance log, no Kafka, no PostgreSQL, no I/O.

1. ``generate`` -- a deterministic (seeded) governance log of N records for a fleet of D GPUs on
   M nodes (half device-plugin, half DRA), in the order the governance topic would hold them:

   - ``HealthTransition``: every device first seen (Healthy), then DRA claim churn (the same
     physical GPU under a new claim: a new CDI-form resourceID, Healthy -> Healthy for the
     governor), Unhealthy episodes (quarantine -> recovery), flapping devices, Unknown episodes
     (short ones end tolerated, long ones are restricted), a few "bad nodes" (most of their devices
     Unhealthy at once: escalation);
   - ``NodeHeartbeat``: one per node per ``--heartbeat-interval`` seconds of event time (the
     watcher's coarsening), with a few nodes losing theirs for a while (node incidents);
   - ``WatermarkAdvanced``: every ``--watermark-every`` records, one per health-topic partition;
   - ``NodeResourcesChanged`` (a device plugin losing a device, then back), ``InventoryConflict``
     raised and cleared, ``OperatorCommand``\\ s (manual quarantine, extend, release, break-glass,
     pause/resume, breaker reset, a viewer's command, a retried command, an unknown device);
   - ``RecoveryLeaseRequested`` / ``RecoveryReport``: an executor model reacting to the decisions
     (a lease request a few seconds after each probe/canary starts, sometimes a competing one; a
     report after each grant, mostly passed, sometimes a stale token).

   The executor reacts to decisions, so the generator folds the log through ``step`` as it writes
   it (closed loop); the timed passes then fold the finished log open loop, like a replay of the
   topic, and must make the same decisions (a check).
2. ``baseline`` -- ``decode_input`` of every record's encoded bytes (``encode_input``): the cost of
   just reading the log. Ratios are against it.
3. ``step`` -- a fresh ``GovernorState`` and ``step(state, record, offset, policy)`` over the decoded
   records, ``state.clear_dirty()`` every ``--batch`` records (the agent's batch); decisions kept.
   Decode and step are repeated ``--repeat`` times, interleaved; the best time counts (the machine
   is shared), the median is reported too.
4. ``snapshot`` -- the final state: ``orjson.dumps(state.snapshot())`` (size, time),
   ``orjson.loads`` + ``GovernorState.restore`` (time), round trip checked.
5. ``restart`` -- fold the first half, snapshot, restore from the bytes, fold the second half:
   decisions and final snapshot byte-identical to the uninterrupted fold (OK/FAIL); this pass also
   times ``step`` per record type.

Run from the repository root: ``.venv/bin/python -m bench.governor --help``.

Modules: :mod:`bench.governor.fleet` (the options, the synthetic fleet, the generated log),
:mod:`bench.governor.generator` (the log writer), :mod:`bench.governor.actors` (the recovery
executors and the operator in that log), :mod:`bench.governor.passes` (the timed passes),
:mod:`bench.governor.run` (the run and its report), :mod:`bench.governor.cli` (the flags).
"""
