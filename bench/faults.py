"""The fault campaign (issue 11, item 11): the pipeline under worker kills, broker and
PostgreSQL restarts, checked after every fault against its known input.

``python -m bench.faults --short`` (CI: 20,000 events, 3 worker kills, 1 broker restart,
1 PostgreSQL restart) or ``--long`` (200,000 events, 20 worker kills, 1 broker restart,
1 PostgreSQL restart, then the watcher killed mid-re-LIST against the test kube-apiserver,
:mod:`bench.faults_watcher`; ``--brokers 3`` adds the loss of one of three brokers). Against the local
stack (``DEVICESTATE_*``, as :mod:`bench.stack`), on fresh topics, consumer group and schemas,
removed at the end unless ``--keep``.

The input (:mod:`bench.faults_input`) is cut into one round per fault plus a first round without
one; each round is checked (:mod:`bench.faults_run`, :mod:`bench.faults_check`): ``replay
--verify`` and ``replay --governance --verify`` find no difference, every fresh observation has
exactly one ``device_history`` row (none lost, none doubled), and the quarantines are exactly the
ones the input implies (none created or released by a fault). Exit code 0 when every round
passed, 1 when any check failed, 2 when the campaign could not run (stack down, bad options).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.console import console
from bench.faults_inject import FaultKind, Worker
from bench.faults_input import CampaignInput, campaign_input
from bench.faults_run import Campaign, RoundResult, as_json
from bench.faults_watcher import WatcherFault
from bench.kafka_admin import create_topic
from bench.machine import code_version, command_line
from bench.stack import (
    StackUnreachable,
    check_stack,
    cleanup,
    new_run,
    run_settings,
    stack_settings,
)
from bench.worker_stage import worker_env
from devtools.stack.supervisor import StackLayout
from services.runtime.config import Settings

PROFILES: dict[str, dict[str, int]] = {
    "short": {"events": 20_000, "worker_kills": 3, "broker_restarts": 1, "postgres_restarts": 1},
    "long": {"events": 200_000, "worker_kills": 20, "broker_restarts": 1, "postgres_restarts": 1},
}
GOVERNANCE_LIMITS = {
    # Blast-radius limits out of the way: every Unhealthy device is quarantined at once, so the
    # quarantines are a function of the input alone (the limits have their own tests).
    "DEVICESTATE_BREAKER_MIN_DEVICES": "1000000",
    "DEVICESTATE_BREAKER_MIN_NODES": "1000000",
    "DEVICESTATE_RESTRICT_NODE_BURST": "1000000",
    "DEVICESTATE_RESTRICT_FLEET_BURST": "1000000",
}


def fault_plan(
    worker_kills: int, broker_restarts: int, postgres_restarts: int, broker_losses: int, seed: int
) -> list[FaultKind]:
    """The faults in a seeded order; a broker loss (the broker stays down) comes last."""
    plan = (
        [FaultKind.WORKER_KILL] * worker_kills
        + [FaultKind.BROKER_RESTART] * broker_restarts
        + [FaultKind.POSTGRES_RESTART] * postgres_restarts
    )
    random.Random(seed).shuffle(plan)
    return plan + [FaultKind.BROKER_LOSS] * broker_losses


def totals(results: list[RoundResult]) -> dict[str, Any]:
    """The campaign's figures: runs, faults by kind, and the sums of every failure count."""
    faults: dict[str, int] = {}
    for r in results:
        if r.fault:
            faults[r.fault] = faults.get(r.fault, 0) + 1
    catch_up = sorted(r.caught_up_seconds for r in results if r.fault)
    return {
        "rounds": len(results),
        "faults": faults,
        "differences": sum(r.replay_differences + r.governance_differences for r in results),
        "lost": sum(r.lost for r in results),
        "doubled": sum(r.doubled for r in results),
        "spurious_quarantines": sum(r.spurious_created + r.spurious_released for r in results),
        "missing_quarantines": sum(r.missing_quarantines for r in results),
        "errors": [f"round {r.round}: {r.error}" for r in results if r.error],
        "catch_up_seconds_max": catch_up[-1] if catch_up else None,
        "catch_up_seconds_median": catch_up[len(catch_up) // 2] if catch_up else None,
        "passed": not any(r.failed for r in results),
    }


async def campaign_main(
    profile: str, *, events: int | None, worker_kills: int | None, brokers: int, nodes: int,
    devices: int, partitions: int, batch_size: int, seed: int, keep: bool, json_out: Path | None,
    watcher: bool, watcher_only: bool, watcher_pods: int,
) -> int:  # fmt: skip
    sizes = dict(PROFILES[profile])
    if events is not None:
        sizes["events"] = events
    if worker_kills is not None:
        sizes["worker_kills"] = worker_kills
    plan = fault_plan(
        sizes["worker_kills"],
        sizes["broker_restarts"],
        sizes["postgres_restarts"],
        1 if brokers == 3 else 0,
        seed,
    )
    base = stack_settings()
    try:
        await check_stack(base)
    except StackUnreachable as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    started = time.monotonic()
    code = code_version()  # now: the tree may change while the campaign runs
    results: list[RoundResult] = []
    worker: Worker | None = None
    watcher = watcher or watcher_only
    if not watcher_only:
        campaign = campaign_input(
            sizes["events"], rounds=len(plan) + 1, devices=devices, nodes=nodes,
            partitions=partitions, seed=seed,
        )  # fmt: skip
        worker, results = await publish_rounds(
            base, profile, sizes, campaign, plan, partitions, batch_size, seed, keep
        )
    if watcher:
        fault = WatcherFault(
            base, GOVERNANCE_LIMITS, pods=watcher_pods, batch_size=batch_size, seed=seed
        )
        watched = await fault.run()
        watched.round = len(results)
        results.append(watched)
    summary = totals(results)
    if worker is not None:
        summary["worker"] = {
            "starts": worker.starts,
            "killed": worker.killed,
            "unexpected_exits": worker.unexpected_exits,
        }
    summary["seconds"] = round(time.monotonic() - started, 1)
    verdict = "[green]PASSED[/green]" if summary["passed"] else "[red]FAILED[/red]"
    console.print(f"fault campaign {verdict}: {json.dumps(summary)}")
    if json_out is not None:
        report = {
            "command": command_line(),
            "code": code,
            "profile": profile,
            "sizes": sizes,
            "summary": summary,
            "rounds": as_json(results),
        }
        await asyncio.to_thread(json_out.write_text, json.dumps(report, indent=2))
        console.print(f"  figures written to {json_out}")
    expected = (0 if watcher_only else len(plan) + 1) + (1 if watcher else 0)
    return 0 if summary["passed"] and len(results) == expected else 1


async def publish_rounds(
    base: Settings, profile: str, sizes: dict[str, int], campaign: CampaignInput,
    plan: list[FaultKind], partitions: int, batch_size: int, seed: int, keep: bool,
) -> tuple[Worker, list[RoundResult]]:  # fmt: skip
    """The rounds of the published input (:mod:`bench.faults_run`) on fresh topics and schema;
    returns the supervised worker (its counts) and the rounds' results."""
    from sqlalchemy.ext.asyncio import create_async_engine

    run = new_run(None)
    settings = run_settings(base, run, partitions)
    console.print(
        f"fault campaign ({profile}) {run.run_id}: {sizes['events']:,} events, "
        f"{campaign.devices:,} devices ({campaign.bad_devices} bad), {len(plan) + 1} rounds, "
        f"faults {[f.value for f in plan]}; logs {run.log_dir}"
    )
    engine = create_async_engine(settings.database_url, pool_pre_ping=True)
    worker = Worker(run, {**worker_env(run, settings, 0, batch_size), **GOVERNANCE_LIMITS})
    results: list[RoundResult] = []
    try:
        await create_topic(settings)
        run.created_topic = True
        run.created_schemas.append(run.worker_schema)
        worker.start()
        run.done.add("worker")
        runner = Campaign(run, settings, worker, engine, StackLayout.from_env(), seed)
        results = await runner.rounds(campaign, plan)
        worker.stop()
    finally:
        await engine.dispose()
        await cleanup(run, settings, keep)
    return worker, results


def cli(
    short: Annotated[bool, typer.Option("--short", help="The CI form (the default).")] = False,
    long: Annotated[bool, typer.Option("--long", help="The full campaign of issue 11.")] = False,
    events: Annotated[int | None, typer.Option(min=100, help="Override the events.")] = None,
    worker_kills: Annotated[int | None, typer.Option(min=0, help="Override the kills.")] = None,
    brokers: Annotated[
        int, typer.Option(min=1, max=3, help="Brokers of the stack; 3 adds the broker loss.")
    ] = 1,
    nodes: Annotated[int, typer.Option(min=1)] = 100,
    devices: Annotated[int, typer.Option(min=1)] = 2000,
    partitions: Annotated[int, typer.Option(min=1)] = 6,
    batch_size: Annotated[int, typer.Option(min=1, help="The worker's batch size.")] = 500,
    seed: Annotated[int, typer.Option()] = 11,
    keep: Annotated[bool, typer.Option("--keep", help="Keep topics and schemas.")] = False,
    json_out: Annotated[Path | None, typer.Option(help="Write the figures as JSON.")] = None,
    watcher: Annotated[
        bool | None,
        typer.Option(
            "--watcher/--no-watcher",
            help="The watcher kill mid-re-LIST against the test kube-apiserver (default: with "
            "--long only; needs `devicestate-dev testenv build`).",
        ),
    ] = None,
    watcher_only: Annotated[
        bool, typer.Option("--watcher-only", help="Only the watcher fault.")
    ] = False,
    watcher_pods: Annotated[int, typer.Option(min=10, help="Pods of the watcher fault.")] = 2000,
) -> None:
    """Run the fault campaign against the local stack; exit 1 on any difference, loss,
    double or spurious quarantine."""
    if short and long:
        raise typer.BadParameter("--short or --long, not both")
    if brokers == 2:
        raise typer.BadParameter("--brokers is 1 or 3")
    profile = "long" if long else "short"

    async def runner() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await campaign_main(
            profile, events=events, worker_kills=worker_kills, brokers=brokers, nodes=nodes,
            devices=devices, partitions=partitions, batch_size=batch_size, seed=seed, keep=keep,
            json_out=json_out, watcher=long if watcher is None else watcher,
            watcher_only=watcher_only, watcher_pods=watcher_pods,
        )  # fmt: skip

    try:
        code = asyncio.run(runner())
    except (KeyboardInterrupt, asyncio.CancelledError):
        console.print("[red]interrupted[/red]")
        code = 130
    raise typer.Exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench.faults``."""
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)


if __name__ == "__main__":
    main()
