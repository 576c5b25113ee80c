"""Health governance: the pure core (issue 3).

- :mod:`.inputs`: records of the governance topic (the governor's log);
- :mod:`.decisions`: what the governor decides (the decisions topic and the projection);
- :mod:`.policy`: the configurable timings and limits;
- :mod:`.state`: per-device, per-node and fleet state, with a JSON snapshot form;
- :mod:`.limits`: token buckets and the circuit breaker;
- :mod:`.machine`: :func:`~.machine.step`, the fold ``(state, record) -> decisions``, which
  dispatches to :mod:`.clock` (event time: the watermark fires due timers), :mod:`.rules`
  (per-device rules), :mod:`.nodes` (heartbeats, plugin loss, escalation, breaker signals),
  :mod:`.commands` (operator commands) and :mod:`.leases` (recovery leases and reports),
  sharing :mod:`.context`.

No I/O and no wall clock: every time comes from the records, so a replay of the governance topic
gives the same decisions byte for byte.
"""
