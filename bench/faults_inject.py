"""The faults the campaign (:mod:`bench.faults`) injects, each by PID, never by name.

- ``worker-kill``: SIGKILL of the worker (``devicestate worker``), restarted at once.
- ``broker-restart``: SIGKILL of the local stack's Kafka broker (its recorded PID,
  ``devtools.stack``), then the stack's own launch, waiting until it answers.
- ``postgres-restart``: the stack's own ``pg_ctl stop -m fast`` (every connection dropped), then
  its start.
- ``broker-loss``: SIGKILL of one of three brokers, left down (needs a three-broker stack,
  ``--brokers 3``: see :func:`lose_a_broker`).

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

from bench.console import console
from bench.processes import Child, start_child
from bench.stack import Run
from devtools.stack import kafka, postgres
from devtools.stack.supervisor import StackLayout, file_lock, pid_alive


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
    """SIGKILL the stack's broker by its recorded PID, wait ``down_seconds``, launch it again and
    wait until it answers metadata; returns the seconds it was unreachable. Raises
    ``RuntimeError`` when the stack's broker is not running."""

    def cycle() -> None:
        record = kafka.running(layout, _report)
        if record is None:
            raise RuntimeError(
                "no Kafka broker of this stack is running (devicestate-dev stack up)"
            )
        _report(f"kafka: SIGKILL pid {record.pid}")
        os.kill(record.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pid_alive(record.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        layout.pid_file(kafka.NAME).unlink(missing_ok=True)
        time.sleep(down_seconds)
        launch = kafka.launch(layout, _report)
        kafka.wait_ready(layout, launch, _report, timeout=180)

    started = time.monotonic()
    _locked(layout, cycle)
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


def lose_a_broker(layout: StackLayout) -> float:
    """SIGKILL one broker of a three-broker stack and leave it down.

    Not wired yet: the three-broker stack (``devicestate-dev stack up --brokers 3``) is being
    added to ``devtools/stack`` in parallel; this needs from it the PID record of one broker that
    is not the only replica leader. Raises ``NotImplementedError`` until then."""
    raise NotImplementedError(
        "broker-loss needs a three-broker stack (devicestate-dev stack up --brokers 3), "
        "not available in devtools/stack yet"
    )
