"""One run of the governor benchmark: generate, decode and step interleaved, snapshot and
restore, the restart check; the results table and the JSON report (``--json-out``).

Exit code 1 when a check fails (restart != uninterrupted, replay != generation, snapshot round
trip); the rates themselves have no target.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from rich.table import Table

from bench.console import console
from bench.governor.fleet import Options
from bench.governor.generator import Generator
from bench.governor.passes import (
    Fold,
    cpu_seconds,
    decode_pass,
    digest,
    fold,
    peak_rss_mb,
    restore,
    rss_mb,
    snapshot_bytes,
)
from bench.machine import code_version, command_line, machine_info
from services.domain.governance.decisions import encode_decision
from services.domain.governance.inputs import GovernanceInput
from services.domain.governance.policy import GovernancePolicy


def run(opts: Options) -> int:
    """Run the benchmark with ``opts``; returns the exit code (0: every check OK)."""
    policy = GovernancePolicy()
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command_line(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "machine": machine_info(),
        "code": code_version(),
        "policy": asdict(policy),
    }
    console.rule("devicestate governor benchmark (pure step, no I/O)")
    console.print(
        f"records {opts.records:,}, devices {opts.devices:,}, nodes {opts.nodes:,}, "
        f"partitions {opts.partitions}, event time {opts.duration:,.0f} s, heartbeat every "
        f"{opts.heartbeat_interval:g} s, watermarks every {opts.watermark_every} records, "
        f"Unhealthy {opts.unhealthy_share:.1%} / Unknown {opts.unknown_share:.1%} of devices, "
        f"batch {opts.batch}, repeat {opts.repeat}, seed {opts.seed}"
    )

    # ---- 1. generate ---------------------------------------------------------------------
    console.rule("1/5 generate (closed loop: the executors react to the decisions)")
    log = Generator(opts).run()
    payloads = log.payloads
    n = len(payloads)
    composition = dict(sorted(log.kinds.items(), key=lambda kv: -kv[1]))
    report["log"] = {
        "records": n,
        "by_type": composition,
        "transitions": dict(sorted(log.transitions.items(), key=lambda kv: -kv[1])),
        "mean_record_bytes": round(log.payload_bytes / max(n, 1), 1),
        "event_seconds": log.event_seconds,
        "late_seconds_max": log.late_seconds_max,
        "generation_seconds": round(log.seconds, 2),
        "generation_decisions": log.decisions,
        "decisions_by_kind": dict(sorted(log.decision_kinds.items(), key=lambda kv: -kv[1])),
    }
    console.print(
        f"  {n:,} records in {log.seconds:.1f} s; {log.payload_bytes / n:.0f} B/record; "
        f"scheduled records at most {log.late_seconds_max:g} s of event time late"
    )
    console.print(f"  by type: {composition}")
    console.print(f"  transitions: {report['log']['transitions']}")
    console.print(f"  {log.decisions:,} decisions: {report['log']['decisions_by_kind']}")
    if log.late_seconds_max > 5:
        console.print(
            f"  [yellow]scheduled records ran up to {log.late_seconds_max:.0f} s of event time "
            "late: the log is too short for the schedule (raise --records or --duration)[/yellow]"
        )
    rss_after_generate = rss_mb()

    if opts.tune_gc:
        from services.runtime.loop import tune_gc

        tune_gc()  # what the worker does at start-up (streams/cli.py)

    # ---- 2+3. baseline and step, interleaved ------------------------------------------------
    decode_times: list[float] = []
    step_times: list[float] = []
    step_cpu: list[float] = []
    first: Fold | None = None
    records: list[GovernanceInput] = []
    rss_before_fold = rss_after_fold = 0.0
    for r in range(opts.repeat):
        console.rule(f"2/5 (a) baseline: decode_input, pass {r + 1}/{opts.repeat}")
        records = []  # free the previous pass's records first
        records, seconds = decode_pass(payloads, "decode")
        decode_times.append(seconds)
        console.print(f"  decoded {n:,} records in {seconds:.3f} s = {n / seconds:,.0f} records/s")
        console.rule(f"3/5 (b) step, pass {r + 1}/{opts.repeat}")
        gc.collect()
        rss_before = rss_mb()
        cpu0 = cpu_seconds()
        result = fold(records, policy, batch=opts.batch, label="step")
        step_cpu.append(cpu_seconds() - cpu0)
        step_times.append(result.seconds)
        console.print(
            f"  folded {n:,} records in {result.seconds:.3f} s = "
            f"{n / result.seconds:,.0f} records/s, {len(result.decisions):,} decisions "
            f"({len(result.decisions) / result.seconds:,.0f}/s); CPU {step_cpu[-1]:.2f} s"
        )
        if first is None:
            first = result
            rss_before_fold, rss_after_fold = rss_before, rss_mb()
        else:
            del result
    assert first is not None

    decisions_digest, decision_bytes = digest(first.decisions)
    started = time.perf_counter()
    for decision in first.decisions:
        encode_decision(decision)
    encode_seconds = time.perf_counter() - started
    same_as_generation = decisions_digest == log.digest and len(first.decisions) == log.decisions

    # ---- 4. snapshot / restore of the final state ------------------------------------------
    console.rule("4/5 snapshot and restore (final state)")
    final_bytes, snap_seconds = snapshot_bytes(first.state)
    restored, loads_seconds, restore_seconds = restore(final_bytes, policy)
    round_trip = orjson.dumps(restored.snapshot()) == final_bytes
    console.print(
        f"  snapshot {len(final_bytes) / 1e6:,.2f} MB ({len(first.state.devices):,} devices, "
        f"{len(first.state.nodes):,} nodes) in {snap_seconds:.3f} s; orjson.loads "
        f"{loads_seconds:.3f} s + restore {restore_seconds:.3f} s; round trip "
        f"{'OK' if round_trip else 'FAIL'}"
    )
    del restored

    # ---- 5. restart at half -------------------------------------------------------------
    console.rule("5/5 restart: fold half, snapshot, restore, fold the rest")
    half = n // 2
    per_kind: dict[str, float] = {}
    a = fold(records[:half], policy, batch=opts.batch, label="step 1st half", per_kind=per_kind)
    half_bytes, half_snap_seconds = snapshot_bytes(a.state)
    state_b, half_loads, half_restore = restore(half_bytes, policy)
    b = fold(
        records[half:],
        policy,
        batch=opts.batch,
        label="step 2nd half",
        state=state_b,
        first_seq=half,
        per_kind=per_kind,
    )
    restarted = a.decisions + b.decisions
    same_decisions = len(restarted) == len(first.decisions) and all(
        encode_decision(x) == encode_decision(y)
        for x, y in zip(restarted, first.decisions, strict=True)
    )
    same_state = orjson.dumps(b.state.snapshot()) == final_bytes
    restart_ok = same_decisions and same_state
    console.print(
        f"  at record {half:,}: snapshot {len(half_bytes) / 1e6:,.2f} MB in "
        f"{half_snap_seconds:.3f} s, loads {half_loads:.3f} s + restore {half_restore:.3f} s; "
        f"decisions {'identical' if same_decisions else 'DIFFERENT'} ({len(restarted):,}), "
        f"final state {'identical' if same_state else 'DIFFERENT'}: "
        f"[bold]{'OK' if restart_ok else 'FAIL'}[/bold]"
    )
    kinds_count = Counter(type(r).__name__ for r in records)
    by_kind = {
        kind: {
            "records": kinds_count[kind],
            "seconds": round(seconds, 3),
            "us_per_record": round(seconds / max(kinds_count[kind], 1) * 1e6, 1),
            "share": round(seconds / max(sum(per_kind.values()), 1e-9), 3),
        }
        for kind, seconds in sorted(per_kind.items(), key=lambda kv: -kv[1])
    }

    # ---- results ------------------------------------------------------------------------
    best_decode, best_step = min(decode_times), min(step_times)
    med_decode, med_step = statistics.median(decode_times), statistics.median(step_times)
    decode_rate, step_rate = n / best_decode, n / best_step
    decisions = len(first.decisions)
    results: dict[str, Any] = {
        "decode": {
            "seconds_best": round(best_decode, 3),
            "seconds_all": [round(t, 3) for t in decode_times],
            "records_per_second": round(decode_rate, 1),
            "records_per_second_median": round(n / med_decode, 1),
            "us_per_record": round(best_decode / n * 1e6, 2),
        },
        "step": {
            "seconds_best": round(best_step, 3),
            "seconds_all": [round(t, 3) for t in step_times],
            "cpu_seconds_all": [round(t, 3) for t in step_cpu],
            "records_per_second": round(step_rate, 1),
            "records_per_second_median": round(n / med_step, 1),
            "us_per_record": round(best_step / n * 1e6, 2),
            "ratio_to_decode": round(step_rate / decode_rate, 3),
            "decisions": decisions,
            "decisions_per_second": round(decisions / best_step, 1),
            "decode_plus_step_records_per_second": round(n / (best_decode + best_step), 1),
            "by_record_type": by_kind,
        },
        "encode_decisions": {
            "seconds": round(encode_seconds, 3),
            "decisions_per_second": round(decisions / max(encode_seconds, 1e-9), 1),
            "bytes": decision_bytes,
        },
        "snapshot": {
            "bytes": len(final_bytes),
            "devices": len(first.state.devices),
            "nodes": len(first.state.nodes),
            "snapshot_seconds": round(snap_seconds, 3),
            "loads_seconds": round(loads_seconds, 3),
            "restore_seconds": round(restore_seconds, 3),
            "round_trip": "OK" if round_trip else "FAIL",
        },
        "restart": {
            "at_record": half,
            "snapshot_bytes": len(half_bytes),
            "snapshot_seconds": round(half_snap_seconds, 3),
            "loads_seconds": round(half_loads, 3),
            "restore_seconds": round(half_restore, 3),
            "first_half_seconds": round(a.seconds, 3),
            "second_half_seconds": round(b.seconds, 3),
            "identical_decisions": same_decisions,
            "identical_final_state": same_state,
            "verdict": "OK" if restart_ok else "FAIL",
        },
        "replay_equals_generation": "OK" if same_as_generation else "FAIL",
        "memory": {
            "peak_rss_mb": peak_rss_mb(),
            "rss_after_generate_mb": rss_after_generate,
            "rss_before_fold_mb": rss_before_fold,
            "rss_after_fold_mb": rss_after_fold,
            "fold_growth_mb": round(rss_after_fold - rss_before_fold, 1),
        },
    }
    report["results"] = results

    console.rule("results")
    table = Table(title="devicestate governor benchmark", show_lines=False)
    for name, justify in (("figure", "left"), ("value", "right"), ("x decode", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_row("(a) decode_input (baseline)", f"{decode_rate:,.0f} records/s", "1.00x")
    table.add_row(
        "(b) step",
        f"{step_rate:,.0f} records/s ({best_step / n * 1e6:.1f} us)",
        f"{step_rate / decode_rate:.2f}x",
    )
    table.add_row("(b) decisions", f"{decisions / best_step:,.0f} decisions/s ({decisions:,})", "")
    table.add_row(
        "decode + step (the agent's CPU per record)",
        f"{n / (best_decode + best_step):,.0f} records/s",
        f"{best_decode / (best_decode + best_step):.2f}x",
    )
    table.add_row(
        "medians (decode / step)", f"{n / med_decode:,.0f} / {n / med_step:,.0f} records/s", ""
    )
    table.add_row(
        "encode_decision", f"{decisions / max(encode_seconds, 1e-9):,.0f} decisions/s", ""
    )
    table.add_row("peak RSS (whole process)", f"{results['memory']['peak_rss_mb']} MB", "")
    table.add_row("RSS growth of the fold", f"{results['memory']['fold_growth_mb']} MB", "")
    table.add_row(
        "snapshot (final state)",
        f"{len(final_bytes) / 1e6:.2f} MB, {snap_seconds * 1000:.0f} ms",
        "",
    )
    table.add_row(
        "restore (loads + restore)",
        f"{loads_seconds * 1000:.0f} + {restore_seconds * 1000:.0f} ms",
        "",
    )
    table.add_row("restart at half == uninterrupted", "OK" if restart_ok else "FAIL", "")
    table.add_row(
        "replayed log == generation (decisions)", "OK" if same_as_generation else "FAIL", ""
    )
    console.print(table)
    breakdown = Table(title="step time by record type (restart pass, timed per record)")
    for name in ("type", "records", "s", "us/record", "share"):
        breakdown.add_column(name, justify="left" if name == "type" else "right")
    for kind, row in by_kind.items():
        breakdown.add_row(
            kind,
            f"{row['records']:,}",
            f"{row['seconds']:.2f}",
            f"{row['us_per_record']:.1f}",
            f"{row['share']:.0%}",
        )
    console.print(breakdown)
    if opts.json_out is not None:
        opts.json_out.parent.mkdir(parents=True, exist_ok=True)
        opts.json_out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"results written to {opts.json_out}")
    return 0 if restart_ok and same_as_generation and round_trip else 1
