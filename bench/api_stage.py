"""Stage (d) of the pipeline benchmark: ``devicestate api`` on the worker's schema, under
open-loop point GETs of random existing devices (:func:`bench.load.load_gets`).

The API runs as a child process on a free port of 127.0.0.1; its CPU over each load comes from
:class:`bench.cpu.CpuSampler`. With ``--api-client httpx,raw`` the load runs once per client,
the first one is the stage's result and the others go to ``other_clients``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import REPO_ROOT
from bench.console import console
from bench.cpu import CpuSampler
from bench.load import load_gets
from bench.options import Options
from bench.processes import (
    Child,
    StageUnavailable,
    devicestate_argv,
    devicestate_commands,
    free_port,
    pyinstrument_argv,
    render_profile,
    start_child,
)
from bench.stack import Run
from services.runtime.config import Settings


async def wait_api_ready(base: str, child: Child, probe: str, limit: float = 90.0) -> str:
    """Poll ``/healthz`` then ``probe`` until one answers 200 (returns that path); raises
    ``TimeoutError`` after ``limit`` seconds, ``RuntimeError`` when the API exits."""
    import httpx

    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            child.check()
            for path in ("/healthz", probe):
                with contextlib.suppress(httpx.HTTPError):
                    response = await http.get(base + path)
                    if response.status_code == 200:
                        return path
            await asyncio.sleep(0.3)
    raise TimeoutError(f"API at {base} not ready within {limit:.0f} s; log:\n{child.tail()}")


async def run_api_stage(
    run: Run,
    settings: Settings,
    devices: Sequence[tuple[str, str]],
    *,
    rate: float,
    count: int,
    connections: int,
    seed: int,
    schema: str,
    client_kinds: list[str],
    profile: Path | None,
    extender_calls: int = 0,
    extender_rate: float = 200.0,
    extender_nodes: int = 100,
) -> dict[str, Any]:
    """Start the API on ``schema``, wait until it answers, run ``count`` GETs at ``rate``/s per
    client kind, stop it (by PID) and return the first client's figures (``achieved_rate``
    req/s, ``latency_ms`` p50/p90/p99/max from the due time, ``service_ms``, errors,
    ``cpu_seconds``). Raises :class:`StageUnavailable` when this checkout has no API command."""
    from urllib.parse import quote

    if "api" in devicestate_commands():
        argv = devicestate_argv("api")
        module_argv = ["-m", "services.cli.main", "api"]
        how = "devicestate api"
    elif (REPO_ROOT / "services" / "processes" / "api" / "cli.py").exists():
        # The sub-command is not wired into the CLI yet: run its typer function directly.
        code = "import typer; from services.processes.api.cli import api; typer.run(api)"
        argv = [sys.executable, "-c", code]
        module_argv = ["-c", code]
        how = "services.processes.api.cli.api via typer.run (no `devicestate api` sub-command registered)"
    else:
        raise StageUnavailable(
            "no `devicestate api` command and no services/processes/api/cli.py yet"
        )
    if profile is not None:
        if module_argv[0] == "-c":
            script = run.log_dir / "api_main.py"
            script.write_text(module_argv[1] + "\n")
            module_argv = [str(script)]
        argv = pyinstrument_argv(profile, module_argv)
        how += f" under pyinstrument -> {profile}"
    port = free_port()
    env = {
        "DEVICESTATE_DATABASE_URL": settings.database_url,
        "DEVICESTATE_DATABASE_SCHEMA": schema,
        "DEVICESTATE_API_HOST": "127.0.0.1",
        "DEVICESTATE_API_PORT": str(port),
        "DEVICESTATE_LOG_FORMAT": "json",
        "DEVICESTATE_LOG_LEVEL": "WARNING",
        "DEVICESTATE_SCHEDULER_EXTENDER": "true" if extender_calls else "false",
    }
    child = start_child("api", argv, env, run.log_dir)
    run.children.append(child)
    base = f"http://127.0.0.1:{port}"
    rng = random.Random(seed + 1)
    paths = []
    for _ in range(count):
        node, rid = devices[rng.randrange(len(devices))]
        paths.append(f"/v1/nodes/{quote(node, safe='')}/devices/{quote(rid, safe='/')}")
    console.print(f"  starting {how} (pid {child.pid}) on {base}, schema {schema}")
    ready_path = await wait_api_ready(base, child, paths[0])
    console.print(f"  API ready ({ready_path} answered 200)")
    by_client: dict[str, dict[str, Any]] = {}
    for kind in client_kinds:
        cpu = CpuSampler()
        cpu.add("api", child.pid)
        cpu.start()
        console.print(
            f"  load: {count:,} GETs at {rate:,.0f}/s, client {kind}, {connections} connections"
        )
        outcome = await load_gets(
            base,
            paths,
            rate=rate,
            count=count,
            connections=connections,
            time_limit=count / rate * 2 + 30,
            client_kind=kind,
        )
        outcome["cpu_seconds"] = cpu.stop()
        by_client[kind] = outcome
        lat = outcome["latency_ms"]
        console.print(
            f"  [{kind}] {outcome['ok']:,}/{count:,} OK at {outcome['achieved_rate']:,.0f} req/s; "
            f"latency ms p50 {lat['p50']} p90 {lat['p90']} p99 {lat['p99']} max {lat['max']}; "
            f"errors {outcome['errors']}; CPU s {outcome['cpu_seconds']}"
        )
        child.check()
        await asyncio.sleep(2.0)  # let a backlog drain before the next client
    result = dict(by_client[client_kinds[0]])
    if extender_calls:
        result["extender"] = await _extender_load(
            base,
            child,
            devices,
            extender_calls,
            extender_rate,
            extender_nodes,
            seed,
            client_kinds[0],
        )
    result["other_clients"] = {k: v for k, v in by_client.items() if k != client_kinds[0]}
    result["peak_rss_mb"] = round(child.sample().get("VmHWM", 0) / 1024, 1)
    result["pid"] = child.pid
    # uvicorn re-raises SIGTERM after its graceful shutdown, which kills pyinstrument before it
    # writes; SIGINT ends the same shutdown with a KeyboardInterrupt pyinstrument survives.
    child.stop(sig=signal.SIGINT if profile is not None else signal.SIGTERM)
    if profile is not None:
        render_profile(profile)
    return result


def extender_bodies(
    devices: Sequence[tuple[str, str]], calls: int, nodes: int, seed: int
) -> list[bytes]:
    """``calls`` ExtenderArgs of a Pod asking one ``nvidia.com/gpu``, each with ``nodes`` random
    candidate node names of the workload (``NodeNames``: a ``nodeCacheCapable`` extender)."""
    import orjson

    names = sorted({node for node, _ in devices})
    rng = random.Random(seed + 2)
    pod = {
        "metadata": {"namespace": "bench", "name": "pod"},
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
        },
    }
    return [
        orjson.dumps({"Pod": pod, "NodeNames": rng.sample(names, min(nodes, len(names)))})
        for _ in range(calls)
    ]


async def _extender_load(
    base: str,
    child: Child,
    devices: Sequence[tuple[str, str]],
    calls: int,
    rate: float,
    nodes: int,
    seed: int,
    kind: str,
) -> dict[str, Any]:
    """``calls`` POSTs of ``/scheduler/filter`` at ``rate``/s, with the API's CPU."""
    bodies = extender_bodies(devices, calls, nodes, seed)
    cpu = CpuSampler()
    cpu.add("api", child.pid)
    cpu.start()
    console.print(f"  load: {calls:,} scheduler filters of {nodes} nodes at {rate:,.0f}/s, {kind}")
    outcome = await load_gets(
        base,
        ["/scheduler/filter"] * calls,
        rate=rate,
        count=calls,
        connections=16,
        time_limit=calls / rate * 2 + 30,
        client_kind=kind,
        bodies=bodies,
    )
    outcome["cpu_seconds"] = cpu.stop()
    outcome["candidate_nodes"] = nodes
    lat = outcome["latency_ms"]
    console.print(
        f"  [extender] {outcome['ok']:,}/{calls:,} OK at {outcome['achieved_rate']:,.0f} req/s; "
        f"latency ms p50 {lat['p50']} p99 {lat['p99']} max {lat['max']}; "
        f"errors {outcome['errors']}; CPU s {outcome['cpu_seconds']}"
    )
    child.check()
    return outcome


def during_profile(profile: Path | None) -> Path | None:
    """Where the API under load during the ingest writes its profile: ``profile`` (the
    ``--profile-api`` path) with ``-during`` before its suffix, or ``None``."""
    if profile is None:
        return None
    return profile.with_name(f"{profile.stem}-during{profile.suffix}")


async def api_during_ingest(
    run: Run, settings: Settings, devices: Any, opts: Options, delay: float
) -> dict[str, Any]:
    """Stage (d) on the worker's schema while the worker ingests: started ``delay`` seconds
    after the worker (so most devices exist: a GET of one not written yet is a 404, counted in
    ``error_kinds``); ``worker_still_ingesting`` says whether the load ended before the worker."""
    await asyncio.sleep(delay)
    result = await run_api_stage(
        run,
        settings,
        devices,
        rate=opts.api_rate,
        count=opts.api_requests,
        connections=opts.api_connections,
        seed=opts.seed,
        schema=run.worker_schema,
        client_kinds=opts.api_client.split(",")[:1],
        profile=during_profile(opts.profile_api),
    )
    result["worker_still_ingesting"] = "worker" not in run.done
    return result
