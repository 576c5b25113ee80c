"""The faults the campaign (:mod:`bench.faults`) injects, each by PID, never by name.

- ``worker-kill``: SIGKILL of the worker (``devicestate worker``), restarted at once.
- ``broker-restart``: SIGKILL of the local stack's Kafka broker (its recorded PID,
  ``devtools.stack``), then the stack's own launch, waiting until it answers.
- ``postgres-restart``: the stack's own ``pg_ctl stop -m fast`` (every connection dropped), then
  its start.
- ``broker-loss``: SIGKILL of one of three brokers, left down for :data:`LOSS_SECONDS` while the
  stream goes on, then started again (needs a three-broker stack, ``--brokers 3``: see
  :func:`lose_a_broker`).

The worker is supervised like a Deployment would: :meth:`Worker.ensure_running` restarts it when
it exited on its own, and counts it (an exit the campaign did not cause is a finding).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from bench.console import console
from bench.processes import Child, start_child
from bench.stack import Run
from devtools.stack import postgres
from devtools.stack.brokers import brokers, start_broker, stop_broker
from devtools.stack.supervisor import StackLayout, file_lock

LOSS_SECONDS: Final = 20.0
"""How long the lost broker stays down (seconds) while the stream goes on."""


class FaultKind(StrEnum):
    WORKER_KILL = "worker-kill"
    BROKER_RESTART = "broker-restart"
    POSTGRES_RESTART = "postgres-restart"
    BROKER_LOSS = "broker-loss"


def module_argv(command: str) -> list[str]:
    """``python -m services.cli.main <command>``: run from the checkout (:data:`bench.REPO_ROOT`,
    the children's cwd), this imports the checkout's code, where the virtualenv's ``devicestate``
    script would import the tree it was installed from (another worktree's)."""
    return [sys.executable, "-m", "services.cli.main", command]


def _report(line: str) -> None:
    console.print(f"    [dim]{line}[/dim]")


@dataclass
class Worker:
    """The supervised worker of a campaign run: its environment, the current child, its counts."""

    run: Run
    env: dict[str, str]
    child: Child | None = None
    starts: int = 0
    killed: int = 0
    unexpected_exits: list[int | None] = field(default_factory=list)

    def start(self) -> None:
        self.child = start_child("worker", module_argv("worker"), self.env, self.run.log_dir)
        self.run.children.append(self.child)
        self.starts += 1

    def kill9(self) -> None:
        """SIGKILL the worker by PID, wait for it, start a new one."""
        assert self.child is not None
        if self.child.alive():
            os.kill(self.child.pid, signal.SIGKILL)
            self.child.process.wait(30)
            self.killed += 1
        self.start()

    def ensure_running(self) -> None:
        """Restart the worker if it exited without the campaign killing it (counted)."""
        if self.child is not None and not self.child.alive():
            code = self.child.process.returncode
            console.print(
                f"    [yellow]worker pid {self.child.pid} exited by itself (code {code}); "
                f"restarting[/yellow]\n{self.child.tail(5)}"
            )
            self.unexpected_exits.append(code)
            self.start()

    def stop(self) -> int | None:
        return None if self.child is None else self.child.stop()


def _locked(layout: StackLayout, action: Callable[[], None]) -> None:
    # The stack's own lock: no `devicestate-dev stack up/down` runs while a server is cycled.
    with file_lock(layout.state_dir / "stack.lock", _report, "a fault campaign restart"):
        action()


def restart_broker(layout: StackLayout, down_seconds: float) -> float:
    """SIGKILL broker 1 of the stack by its recorded PID, wait ``down_seconds``, start it again
    on its storage and wait until the metadata names every broker; returns the seconds it took.
    Raises ``RuntimeError`` when the broker is not running."""
    started = time.monotonic()
    if stop_broker(layout, 1, kill=True, report=_report) is None:
        raise RuntimeError("no Kafka broker of this stack is running (devicestate-dev stack up)")
    time.sleep(down_seconds)
    start_broker(layout, 1, report=_report, timeout=180)
    return time.monotonic() - started


def restart_postgres(layout: StackLayout, down_seconds: float) -> float:
    """The stack's ``pg_ctl stop -m fast`` (by its recorded postmaster PID if that fails), wait
    ``down_seconds``, start it again; returns the seconds it was unreachable."""

    def cycle() -> None:
        postgres.stop(layout, _report)
        time.sleep(down_seconds)
        postgres.start(layout, _report, timeout=120)

    started = time.monotonic()
    _locked(layout, cycle)
    return time.monotonic() - started


def lose_a_broker(layout: StackLayout, down_seconds: float = LOSS_SECONDS) -> float:
    """SIGKILL the last broker of a three-broker stack by its PID and leave it down for
    ``down_seconds`` while the stream goes on (two replicas of three in sync: with
    ``min.insync.replicas=2`` and ``acks=all`` every write still counts), then start it again and
    wait until its replicas are back in sync; returns the seconds it took. Raises
    ``RuntimeError`` on a stack of fewer than three brokers."""
    count = len(brokers(layout))
    if count < 3:
        raise RuntimeError(
            f"broker-loss needs a three-broker stack (devicestate-dev stack up --brokers 3); "
            f"this one has {count}"
        )
    started = time.monotonic()
    pid = stop_broker(layout, count, kill=True, report=_report)
    _report(f"kafka: broker {count} (pid {pid}) SIGKILLed; down {down_seconds:.0f} s")
    time.sleep(down_seconds)
    start_broker(layout, count, report=_report, timeout=180)
    return time.monotonic() - started
