"""Benchmarks of devicestate, a development tool (not shipped; the product never imports it).

Run from the repository root with the project's virtualenv:

- ``python -m bench.pipeline``: the pipeline end to end on the local stack (publish, raw-consume
  baseline, worker ingest, replay, API point GETs); see :mod:`bench.pipeline`.
- ``python -m bench.governor``: the pure governor (``step``) over a synthetic governance log.
- ``python -m bench.ab``: the pipeline benchmark of two git revisions, interleaved on one stack.
- ``python -m bench.profile_summary``: summarise a pyinstrument session of ``--profile-*``.
- ``python -m bench.faults``: the fault campaign (``--short`` in CI, ``--long``); see
  :mod:`bench.faults` and ``docs/reliability.md``.

Modules of the pipeline benchmark, by job: :mod:`bench.stack` (reaching the local stack, the run's
names, clean-up), :mod:`bench.processes` (child processes by PID), :mod:`bench.cpu` (the /proc
CPU sampler), :mod:`bench.load` (the synthetic events and the HTTP load generator),
:mod:`bench.kafka_admin` and :mod:`bench.kafka_io` (topics, offsets; publish and the baseline),
:mod:`bench.worker_stage`, :mod:`bench.replay_stage`, :mod:`bench.api_stage` (stages b-d),
:mod:`bench.report` (verdicts and the table), :mod:`bench.console` (output and progress).
Results and how they were obtained: ``docs/benchmarks.md``.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout this package belongs to: child processes run here and ``git`` describes it."""
