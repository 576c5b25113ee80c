"""``python -m bench.governor``: the flags of the governor benchmark (typer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.governor.fleet import Options
from bench.governor.run import run


def cli(
    records: Annotated[int, typer.Option(min=100, help="Records of the governance log.")] = 200_000,
    devices: Annotated[
        int, typer.Option(min=1, help="GPUs (spread round-robin over nodes).")
    ] = 20_000,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes.")] = 2_500,
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of the health topic (watermark sources).")
    ] = 6,
    duration: Annotated[
        float,
        typer.Option(min=1.0, help="Event time the log spans (seconds); sets its record rate."),
    ] = 1800.0,
    heartbeat_interval: Annotated[
        float, typer.Option(min=1.0, help="One NodeHeartbeat per node per this many seconds.")
    ] = 60.0,
    watermark_every: Annotated[
        int,
        typer.Option(min=1, help="Records between watermark bursts (one per partition)."),
    ] = 100,
    unhealthy_share: Annotated[
        float, typer.Option(min=0.0, max=0.5, help="Share of devices with an Unhealthy episode.")
    ] = 0.01,
    unknown_share: Annotated[
        float, typer.Option(min=0.0, max=0.5, help="Share of devices with an Unknown episode.")
    ] = 0.01,
    flapping_share: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Share of the Unhealthy ones that flap (3 episodes)."),
    ] = 0.1,
    bad_nodes: Annotated[
        int, typer.Option(min=0, help="Nodes with most of their devices Unhealthy at once.")
    ] = 2,
    heartbeat_outages: Annotated[
        int, typer.Option(min=0, help="Nodes whose heartbeat stops for 300 s.")
    ] = 3,
    plugin_losses: Annotated[
        int, typer.Option(min=0, help="Nodes whose device plugin loses a device for 200 s.")
    ] = 2,
    conflicts: Annotated[
        int, typer.Option(min=0, help="Inventory conflicts raised (and cleared 300 s later).")
    ] = 4,
    commands: Annotated[int, typer.Option(min=0, help="Operator commands.")] = 24,
    executors: Annotated[int, typer.Option(min=2, help="Recovery executors (lease holders).")] = 3,
    batch: Annotated[
        int, typer.Option(min=1, help="Records per batch (clear_dirty), as the agent's batch.")
    ] = 2000,
    repeat: Annotated[
        int, typer.Option(min=1, help="Timed passes of decode and of step (best one counts).")
    ] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic log.")] = 20261129,
    tune_gc: Annotated[
        bool,
        typer.Option(
            "--tune-gc/--no-tune-gc",
            help="Apply the worker's GC tuning (services.runtime.loop.tune_gc) before timing.",
        ),
    ] = True,
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="Write all results as JSON to this path.")
    ] = None,
) -> None:
    """Benchmark the pure governor (services/domain/governance/machine.py:step) on a synthetic
    governance log: records/s of step against decode_input of the same records (the baseline),
    decisions/s, peak RSS, snapshot size and restore time, and a restart check (snapshot at half,
    restore, continue: identical decisions). No Kafka, no database. Exit code 1 when a check
    fails.
    """
    opts = Options(
        records=records,
        devices=devices,
        nodes=nodes,
        partitions=partitions,
        duration=duration,
        heartbeat_interval=heartbeat_interval,
        watermark_every=watermark_every,
        unhealthy_share=unhealthy_share,
        unknown_share=unknown_share,
        flapping_share=flapping_share,
        bad_nodes=bad_nodes,
        heartbeat_outages=heartbeat_outages,
        plugin_losses=plugin_losses,
        conflicts=conflicts,
        commands=commands,
        executors=executors,
        batch=batch,
        repeat=repeat,
        seed=seed,
        tune_gc=tune_gc,
        json_out=json_out,
    )
    raise typer.Exit(run(opts))


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench.governor`` (``argv``: default ``sys.argv``)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)
