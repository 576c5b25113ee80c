"""A/B of the pipeline benchmark between two git revisions, interleaved on one running stack.

    .venv/bin/python -m bench.ab --base HEAD~1 --head HEAD --rounds 3 \\
        --json-out /tmp/ab.json -- --events 200000 --devices 20000 --nodes 2500 ...

Each revision is checked out in a ``git worktree`` of its own (detached, under a temporary
directory, removed at the end unless ``--keep-worktrees``); then each round runs the pipeline
benchmark of the base worktree and of the head worktree, one after the other (``--order abab``:
base first every round; ``abba``: who goes first alternates), with the SAME pipeline arguments
(everything after ``--``) against the SAME stack. A run measures its own revision's code: its
``cwd`` is its worktree and ``PYTHONPATH`` is exactly that worktree (ahead of the shared
virtualenv's editable install), so the worker and API children it starts import it too. Every
run creates and removes its own topics, consumer group and schemas (names from its run id), so
runs never see each other's data.

Which benchmark a worktree has is detected: ``bench/__init__.py`` -> ``python -m
bench.pipeline`` (this package), else ``bench/pipeline.py`` -> ``python bench/pipeline.py`` (the
single file of revisions up to 3f282e5). The compared figures are in :mod:`bench.ab_figures`.

Output: per run its JSON report and log under ``<work dir>/runs/`` (kept); a table of medians,
min-max and the ratio head/base; with ``--json-out``, everything as JSON (every run's report
included). Exit code 1 when a run failed (its figures are left out), 130 when interrupted.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from bench import REPO_ROOT
from bench.ab_figures import print_summary, read_figures, summarise
from bench.console import console
from bench.machine import command_line, machine_info
from bench.stack import StackUnreachable, check_stack, stack_settings

RESERVED = ("--json-out",)
"""Pipeline flags the driver sets itself for every run."""
STOP_WAIT_SECONDS = 180.0
"""How long an interrupted run may take to clean up (it deletes its topics and schemas)."""


class Interrupted(Exception):
    """SIGTERM (or SIGINT) reached the driver."""


@dataclass(frozen=True)
class Side:
    """One revision under test: its label (``base``/``head``), commit and worktree."""

    label: str
    rev: str
    commit: str
    tree: Path

    @property
    def short(self) -> str:
        return self.commit[:8]

    def command(self, pipeline_args: list[str], json_out: Path) -> list[str]:
        """The benchmark command line of this worktree (package or single file)."""
        bench = self.tree / "bench"
        if (bench / "__init__.py").exists() and (bench / "pipeline.py").exists():
            runner = [sys.executable, "-m", "bench.pipeline"]
        elif (bench / "pipeline.py").exists():
            runner = [sys.executable, "bench/pipeline.py"]
        else:
            raise typer.BadParameter(f"{self.rev} ({self.short}) has no bench/pipeline.py")
        return [*runner, *pipeline_args, "--json-out", str(json_out)]


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``; stdout stripped. Raises ``typer.BadParameter`` with git's error."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise typer.BadParameter(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def add_worktree(repo: Path, label: str, rev: str, trees: Path) -> Side:
    """A detached ``git worktree`` of ``rev`` at ``trees/<label>-<short sha>``."""
    commit = git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = trees / f"{label}-{commit[:8]}"
    git(repo, "worktree", "add", "--detach", str(tree), commit)
    return Side(label=label, rev=rev, commit=commit, tree=tree)


def remove_worktree(repo: Path, side: Side) -> None:
    """``git worktree remove --force`` of this one worktree only (never ``prune``: other
    people's worktrees share the repository)."""
    try:
        git(repo, "worktree", "remove", "--force", str(side.tree))
    except typer.BadParameter as exc:
        console.print(f"  [yellow]could not remove worktree {side.tree}: {exc}[/yellow]")


def run_once(side: Side, pipeline_args: list[str], json_out: Path, log: Path) -> dict[str, Any]:
    """One pipeline run of ``side``'s worktree; returns its exit code, wall seconds, command
    and report (``None`` when it wrote none). On :class:`Interrupted` or ``KeyboardInterrupt``
    the run gets SIGTERM by PID (it cleans up), SIGKILL after :data:`STOP_WAIT_SECONDS`."""
    argv = side.command(pipeline_args, json_out)
    env = {**os.environ, "PYTHONPATH": str(side.tree)}
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=side.tree, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            code = process.wait()
        except KeyboardInterrupt:  # the terminal sent SIGINT to the run as well: it cleans up
            _stop(process, signal_first=False)
            raise
        except Interrupted:
            _stop(process, signal_first=True)
            raise
    report = json.loads(json_out.read_text()) if json_out.exists() else None
    return {
        "exit_code": code,
        "seconds": round(time.monotonic() - started, 1),
        "command": " ".join([Path(argv[0]).name, *argv[1:]]),
        "cwd": str(side.tree),
        "json": str(json_out),
        "log": str(log),
        "report": report,
    }


def _stop(process: subprocess.Popen[bytes], *, signal_first: bool) -> None:
    """Let an interrupted run clean up: SIGTERM by PID (the pipeline turns it into a cancel and
    still deletes its topics and schemas) unless it got SIGINT already, a second signal would
    cut its clean-up short; SIGTERM, then SIGKILL, after :data:`STOP_WAIT_SECONDS`."""
    if process.poll() is not None:
        return
    console.print(f"  waiting for run pid {process.pid} to clean up its topics and schemas")
    if signal_first:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_WAIT_SECONDS)
        return
    except subprocess.TimeoutExpired:
        pass
    if not signal_first:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_WAIT_SECONDS / 6)
            return
        except subprocess.TimeoutExpired:
            pass
    process.kill()
    process.wait()


def schedule(rounds: int, order: str) -> list[tuple[int, str]]:
    """``[(round, "base"|"head"), ...]``: ``abab`` base first each round, ``abba`` alternating."""
    plan: list[tuple[int, str]] = []
    for r in range(1, rounds + 1):
        first, second = ("head", "base") if order == "abba" and r % 2 == 0 else ("base", "head")
        plan += [(r, first), (r, second)]
    return plan


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run_ab(
    repo: Path,
    base_rev: str,
    head_rev: str,
    rounds: int,
    order: str,
    pipeline_args: list[str],
    work_dir: Path,
    keep_worktrees: bool,
) -> dict[str, Any]:
    """Make the worktrees, run the schedule, summarise; the worktrees are removed in any case
    (unless ``keep_worktrees``)."""
    trees, runs_dir = work_dir / "trees", work_dir / "runs"
    trees.mkdir(parents=True, exist_ok=True)
    runs_dir.mkdir(parents=True, exist_ok=True)
    sides: dict[str, Side] = {}
    runs: list[dict[str, Any]] = []
    interrupted = False
    try:
        sides["base"] = add_worktree(repo, "base", base_rev, trees)
        sides["head"] = add_worktree(repo, "head", head_rev, trees)
        for side in sides.values():
            console.print(f"  {side.label}: {side.rev} = {side.short}, worktree {side.tree}")
        plan = schedule(rounds, order)
        for i, (r, label) in enumerate(plan, 1):
            side = sides[label]
            stem = f"{r:02d}-{label}-{side.short}"
            console.rule(f"run {i}/{len(plan)}: round {r}, {label} {side.short}")
            console.print(f"  log {runs_dir / stem}.log")
            done = run_once(
                side, pipeline_args, runs_dir / f"{stem}.json", runs_dir / f"{stem}.log"
            )
            figures = read_figures(done["report"]) if done["report"] else {}
            runs.append(
                {"round": r, "side": label, "commit": side.commit, **done, "figures": figures}
            )
            shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items() if v is not None)
            status = "OK" if done["exit_code"] == 0 else f"[red]exit {done['exit_code']}[/red]"
            console.print(f"  {status} in {done['seconds']} s: {shown or 'no report'}")
    except (Interrupted, KeyboardInterrupt):
        interrupted = True
        console.print("[red]interrupted[/red]")
    finally:
        if not keep_worktrees:
            for side in sides.values():
                remove_worktree(repo, side)
            shutil.rmtree(trees, ignore_errors=True)
    ok = {
        label: [r["figures"] for r in runs if r["side"] == label and r["exit_code"] == 0]
        for label in sides
    }
    return {
        "interrupted": interrupted,
        "sides": {
            label: {"rev": s.rev, "commit": s.commit, "worktree": str(s.tree)}
            for label, s in sides.items()
        },
        "runs": runs,
        "summary": summarise(ok.get("base", []), ok.get("head", [])),
    }


def cli(
    pipeline_args: Annotated[
        list[str] | None,
        typer.Argument(
            help="Arguments of the pipeline benchmark, after `--` (the same for every run; "
            "--json-out is set per run)."
        ),
    ] = None,
    base: Annotated[str, typer.Option(help="Base revision (any git rev).")] = "HEAD~1",
    head: Annotated[str, typer.Option(help="Head revision (any git rev).")] = "HEAD",
    rounds: Annotated[int, typer.Option(min=1, help="Runs of each revision.")] = 3,
    order: Annotated[
        str, typer.Option(help="abab: base first every round; abba: alternate who goes first.")
    ] = "abab",
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="Write the A/B (all runs) as JSON here.")
    ] = None,
    work_dir: Annotated[
        Path | None,
        typer.Option(
            help="Worktrees (removed) and per-run reports and logs (kept): default a "
            "new devicestate-ab-* directory under $TMPDIR."
        ),
    ] = None,
    keep_worktrees: Annotated[
        bool, typer.Option("--keep-worktrees", help="Do not remove the worktrees at the end.")
    ] = False,
    repo: Annotated[
        Path, typer.Option(help="The git repository the revisions are in.")
    ] = REPO_ROOT,
) -> None:
    """The pipeline benchmark of two revisions, interleaved, on the running local stack: median,
    min-max and ratio head/base of ingest, replay, GET p50/p99 and rate, worker CPU per event."""
    args = list(pipeline_args or ())
    if order not in ("abab", "abba"):
        raise typer.BadParameter("--order must be abab or abba")
    if any(a == flag or a.startswith(flag + "=") for a in args for flag in RESERVED):
        raise typer.BadParameter("--json-out is set by the driver for each run; use it before --")
    try:
        asyncio.run(check_stack(stack_settings()))
    except StackUnreachable as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    work = work_dir or Path(tempfile.mkdtemp(prefix="devicestate-ab-"))
    console.rule(f"pipeline A/B: {base} vs {head}, {rounds} round(s), order {order}")
    console.print(f"  pipeline arguments: {' '.join(args) or '(defaults)'}; work dir {work}")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        outcome = run_ab(repo, base, head, rounds, order, args, work, keep_worktrees)
    finally:
        signal.signal(signal.SIGTERM, previous)
    sides = outcome["sides"]
    labels = {k: f"{v['rev']} ({v['commit'][:8]})" for k, v in sides.items()}
    console.rule("A/B results")
    if "base" in labels and "head" in labels and outcome["runs"]:
        print_summary(outcome["summary"], labels["base"], labels["head"])
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command_line(),
        "repo": str(repo),
        "rounds": rounds,
        "order": order,
        "pipeline_args": args,
        "machine": machine_info(),
        "work_dir": str(work),
        **outcome,
    }
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"results written to {json_out}")
    console.print(f"per-run reports and logs in {work / 'runs'}")
    if outcome["interrupted"]:
        raise typer.Exit(130)
    failed = [r for r in outcome["runs"] if r["exit_code"] != 0]
    raise typer.Exit(1 if failed else 0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m bench.ab`` (``argv``: the arguments, default ``sys.argv``)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)


if __name__ == "__main__":
    main()
