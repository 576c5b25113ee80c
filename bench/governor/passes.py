"""The timed passes of the governor benchmark: decode, fold (``step``), snapshot and restore;
and the process's memory and CPU as the report gives them (MB of RSS, CPU seconds)."""

from __future__ import annotations

import hashlib
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from bench.console import ProgressLines
from services.domain.governance.decisions import Decision, encode_decision
from services.domain.governance.input_codec import decode_input
from services.domain.governance.inputs import GovernanceInput
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState


def _self_status() -> dict[str, int]:
    """VmRSS / VmHWM (kB) of this process."""
    values: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, rest = line.split(":", 1)
                    values[name] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return values


def rss_mb() -> float:
    """Resident memory of this process now, MB."""
    return round(_self_status().get("VmRSS", 0) / 1024, 1)


def peak_rss_mb() -> float:
    """Peak resident memory of this process, MB."""
    hwm = _self_status().get("VmHWM")
    if hwm is None:  # not Linux: ru_maxrss is kB on Linux, bytes on macOS
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(hwm / 1024, 1)


def digest(decisions: Sequence[Decision]) -> tuple[str, int]:
    """blake2b of the decisions' wire bytes (in order) and their total size."""
    h = hashlib.blake2b(digest_size=16)
    size = 0
    for decision in decisions:
        data = encode_decision(decision)
        size += len(data)
        h.update(data)
        h.update(b"\n")
    return h.hexdigest(), size


def decode_pass(payloads: Sequence[bytes], label: str) -> tuple[list[GovernanceInput], float]:
    """``decode_input`` of every payload: the records and the seconds it took."""
    progress = ProgressLines(label, len(payloads))
    out: list[GovernanceInput] = []
    append = out.append
    chunk = 20_000
    started = time.perf_counter()
    for start in range(0, len(payloads), chunk):
        for payload in payloads[start : start + chunk]:
            append(decode_input(payload))
        progress.update(len(out))
    seconds = time.perf_counter() - started
    progress.update(len(out), force=True)
    return out, seconds


@dataclass
class Fold:
    """A fold's final state, its decisions and its seconds (per record type when timed so)."""

    state: GovernorState
    decisions: list[Decision]
    seconds: float
    by_kind_seconds: dict[str, float] = field(default_factory=dict)


def fold(
    records: Sequence[GovernanceInput],
    policy: GovernancePolicy,
    *,
    batch: int,
    label: str,
    state: GovernorState | None = None,
    first_seq: int = 0,
    per_kind: dict[str, float] | None = None,
) -> Fold:
    """``step`` over ``records`` (offsets from ``first_seq``), ``clear_dirty`` every ``batch``
    records. With ``per_kind``, also the time of each record type (perf_counter per record: a
    little slower; used by the restart pass, not the headline)."""
    state = GovernorState() if state is None else state
    decisions: list[Decision] = []
    extend = decisions.extend
    progress = ProgressLines(label, len(records))
    perf = time.perf_counter
    started = perf()
    seq = first_seq
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        if per_kind is None:
            for record in chunk:
                extend(step(state, record, seq, policy))
                seq += 1
        else:
            for record in chunk:
                t = perf()
                extend(step(state, record, seq, policy))
                per_kind[record.type] = per_kind.get(record.type, 0.0) + perf() - t
                seq += 1
        state.clear_dirty()
        progress.update(start + len(chunk), f"{len(decisions):,} decisions")
    seconds = perf() - started
    progress.update(len(records), f"{len(decisions):,} decisions", force=True)
    return Fold(state, decisions, seconds)


def snapshot_bytes(state: GovernorState) -> tuple[bytes, float]:
    """``orjson.dumps(state.snapshot())`` and the seconds it took."""
    started = time.perf_counter()
    data = orjson.dumps(state.snapshot())
    return data, time.perf_counter() - started


def restore(data: bytes, policy: GovernancePolicy) -> tuple[GovernorState, float, float]:
    """(state, seconds of orjson.loads, seconds of GovernorState.restore)."""
    started = time.perf_counter()
    obj = orjson.loads(data)
    parsed = time.perf_counter()
    state = GovernorState.restore(
        obj["devices"], obj["nodes"], obj["fleet"], policy.heartbeat_grace_seconds
    )
    return state, parsed - started, time.perf_counter() - parsed


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
