#!/usr/bin/env python
"""Summarise a pyinstrument session written by ``python -m bench.pipeline --profile-*``.

    .venv/bin/python -m bench.profile_summary PROFILE.pyisession worker
    .venv/bin/python -m bench.profile_summary PROFILE.pyisession --children Handle._run
    .venv/bin/python -m bench.profile_summary PROFILE.pyisession --functions a,b,c

(``.venv/bin/python bench/profile_summary.py ...`` works too: it imports nothing of the project.)

Prints the inclusive time of chosen functions (outermost call only, so recursion is not counted
twice), or the children of one function aggregated by name. The presets (``worker``, ``replay``,
``api``) list the functions docs/benchmarks.md reports. pyinstrument must be installed (it is not
a project dependency: ``.venv/bin/pip install pyinstrument``).
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

PRESETS = {
    "worker": [
        "Handle._run",
        "Agent._execute_actor",
        "DeviceDedup.handle_batch",
        "DeviceDedup._decode_one",
        "DeviceDedup._known_ranks",
        "DeviceDedup._remember",
        "DeviceDedup._write_with_retry",
        "lock_devices",
        "plan_batch",
        "ProjectionStore._write_rows",
        "Connection.copy_records_to_table",
        "Fetcher._execute_task",
        "on_message",
        "Stream._execute_task",
        "Consumer._execute_task",
        "ProducerBuffer._execute_task",
        "Sender._send_produce_req",
    ],
    "replay": [
        "replay",
        "read_log",
        "decode_event",
        "ProjectionStore.apply_batch",
        "lock_devices",
        "records_from_rows",
        "plan_batch",
        "ProjectionStore._write_rows",
        "Connection.copy_records_to_table",
        "AsyncAdapt_asyncpg_cursor._prepare_and_execute",
    ],
    "api": [
        "RequestResponseCycle.run_asgi",
        "get_device",
        "AsyncConnection.__aenter__",
        "AsyncAdapt_asyncpg_connection._async_ping",
        "AsyncAdapt_asyncpg_connection.create",
        "AsyncConnection.execute",
        "Select._compile_w_cache",
        "record_from_row",
        "solve_dependencies",
        "run_in_threadpool",
        "serialize_response",
        "Response.__call__",
        "AsyncConnection.close",
    ],
}


def name_of(frame: Any) -> str:
    cls = getattr(frame, "class_name", None)
    return f"{cls}.{frame.function}" if cls else str(frame.function)


def inclusive(root: Any, targets: list[str]) -> dict[str, float]:
    totals = dict.fromkeys(targets, 0.0)
    stack = [(root, frozenset[str]())]
    while stack:
        frame, active = stack.pop()
        name = name_of(frame)
        newly = {name} if name in totals and name not in active else set()
        for target in newly:
            totals[target] += frame.time
        stack.extend((child, active | newly) for child in frame.children)
    return totals


def children(root: Any, target: str, depth: int) -> Counter[str]:
    found: Counter[str] = Counter()

    def collect(frame: Any, level: int) -> None:
        if level == 0:
            found[f"{name_of(frame)}  {frame.file_path_short}"] += frame.time
            return
        for child in frame.children:
            collect(child, level - 1)

    stack = [root]
    while stack:
        frame = stack.pop()
        if name_of(frame) == target:
            for child in frame.children:
                collect(child, depth - 1)
            continue
        stack.extend(frame.children)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("session", help="a .pyisession file")
    parser.add_argument("preset", nargs="?", choices=sorted(PRESETS), help="functions to list")
    parser.add_argument("--functions", help="comma-separated Class.method or function names")
    parser.add_argument("--children", help="aggregate the children of this function")
    parser.add_argument("--depth", type=int, default=1, help="levels below --children")
    args = parser.parse_args()

    from pyinstrument.session import Session

    session = Session.load(args.session)
    root = session.root_frame()
    print(f"duration {session.duration:.1f} s, CPU {session.cpu_time:.1f} s")
    if args.children:
        for name, seconds in children(root, args.children, args.depth).most_common(25):
            print(f"{seconds:9.2f}  {name}")
        return
    targets = args.functions.split(",") if args.functions else PRESETS[args.preset or "worker"]
    for name, total in inclusive(root, targets).items():
        print(f"{total:9.2f}  {name}")


if __name__ == "__main__":
    main()
