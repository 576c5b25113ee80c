"""``devicestate-dev demo``: stack up, migrate, start worker and API, publish a recorded watch stream,
wait for the projection to catch up, print the directory.

The bundled stream (``devtools/examples/demo-stream.jsonl``) is copied from the shared examples
so the product never needs them at run time: eight GPUs on one node with one turning Unhealthy,
a Pod deleted after its GPU failed, duplicate and near-duplicate watch events, and malformed
Pods (which end on the dead-letter topic, not in the directory).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from devtools.demo.catchup import wait_caught_up
from devtools.demo.processes import Child, require_free_port, start_child, wait_http_ok
from services.client.directory import fetch_devices, make_console, render_table
from services.runtime.config import Settings
from services.runtime.logs import configure_logging

BUNDLED_STREAM = Path(__file__).resolve().parents[1] / "examples" / "demo-stream.jsonl"


def _print_governance(api_url: str, console: Any) -> None:
    """The quarantines and the governor's status, as ``devicestate quarantine list`` and
    ``devicestate governance`` show them."""
    import httpx

    quarantines = httpx.get(f"{api_url}/v1/quarantines", params={"limit": 100}, timeout=10).json()
    status = httpx.get(f"{api_url}/v1/governance", timeout=10).json()
    for q in quarantines.get("items", []):
        console.print(
            f"[bold red]QUARANTINED[/] {escape(q['quarantineID'])} ({escape(q['status'])}, "
            f"{escape(q['kind'])} by {escape(q['actor'])}): {escape(q['reason'])}"
        )
    console.print(f"governance: {escape(status.get('message', ''))}")
    console.print(
        f"  devices by state {status.get('devicesByState')}, breaker "
        f"{'OPEN' if (status.get('breaker') or {}).get('open') else 'closed'}, "
        f"watermark {status.get('watermark')}"
    )


def _stack_up() -> None:
    """``devicestate-dev stack up``; its connection settings (``DEVICESTATE_*=...`` lines on stdout)
    are adopted unless already set, so the demo follows the stack's ports."""
    done = subprocess.run(
        [sys.executable, "-m", "devtools", "stack", "up"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    for line in done.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.startswith("DEVICESTATE_"):
            os.environ.setdefault(name, value)


def demo(
    input_path: Path = typer.Option(
        BUNDLED_STREAM,
        "--input",
        exists=True,
        dir_okay=False,
        help="Recorded watch stream (JSONL) to publish; defaults to the bundled demo stream.",
    ),
    keep_running: bool = typer.Option(
        False, "--keep-running", help="Leave the worker and API running after printing."
    ),
    timeout: float = typer.Option(180.0, help="Seconds to wait for the projection to catch up."),
) -> None:
    """Run the whole pipeline end to end on a recorded watch stream and print the directory."""
    console = make_console()
    started = time.monotonic()
    console.rule("1/5 local stack (Kafka, PostgreSQL)")
    _stack_up()
    settings = Settings()
    configure_logging(settings)

    from services.adapters.kafka.topics import ensure_topics
    from services.adapters.projection.migrate import migrate
    from services.processes.watcher.run import run_watch

    console.rule("2/5 database schema and topics")
    asyncio.run(migrate(settings.database_url, settings.database_schema))
    asyncio.run(ensure_topics(settings))
    log_dir = Path(settings.worker_data_dir).parent / "logs"
    children: list[Child] = []
    try:
        console.rule("3/5 stream worker and directory API")
        worker = start_child("worker", log_dir)
        children.append(worker)
        require_free_port(settings.api_host, settings.api_port, "DEVICESTATE_API_PORT")
        api = start_child("api", log_dir)
        children.append(api)
        wait_http_ok(f"http://{settings.api_host}:{settings.api_port}/healthz", api, 60)
        console.print(
            f"worker pid {worker.process.pid}, API pid {api.process.pid}, logs in {log_dir}"
        )

        console.rule(f"4/5 watcher publishes {input_path.name}")
        summary = asyncio.run(run_watch(settings, from_file=input_path))
        console.print(escape(str(summary)))
        # The health agent first, then the governor, which folds what the health agent forwarded.
        for topic, what in ((settings.topic, "worker"), (settings.governance_topic, "governor")):

            def progress(lag: int, what: str = what) -> None:
                console.print(f"  {what} lag: {lag} records")

            asyncio.run(
                wait_caught_up(
                    settings.kafka_bootstrap_servers,
                    topic,
                    settings.consumer_group,
                    timeout,
                    on_progress=progress,
                    still_alive=worker.check_alive,
                )
            )

        console.rule("5/5 device directory and governance")
        api_url = f"http://{settings.api_host}:{settings.api_port}"
        devices = fetch_devices(api_url, {})
        render_table(devices, console, wide=True)
        _print_governance(api_url, console)
        for d in devices:
            if d["health"] == "Unhealthy":
                console.print(
                    f"[bold red]UNHEALTHY[/] {escape(d['node'])}/{escape(d['resourceID'])}: "
                    f"{escape((d.get('message') or 'no message')[:100])}"
                )
        console.print(f"\ndemo done in {time.monotonic() - started:.1f} s; API: {api_url}/docs")
        if keep_running:
            console.print(
                "worker and API keep running; stop them with Ctrl-C / kill "
                f"{worker.process.pid} {api.process.pid}; stack: devicestate-dev stack down"
            )
            children.clear()
    finally:
        for child in children:
            child.stop()
