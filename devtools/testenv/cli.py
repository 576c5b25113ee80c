"""``devicestate-dev testenv build|monitoring|up|down|env``: a real kube-apiserver + etcd on
127.0.0.1 for tests, and the monitoring tools (Prometheus, promtool, Alertmanager, amtool).

Progress goes to stderr; stdout carries only ``NAME=value`` lines a script may read: the binary
paths after ``build`` and ``monitoring``, the connection settings after ``up`` and from ``env``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from devtools.stack.supervisor import StackError, StackLayout, file_lock
from devtools.testenv import control_plane_build, kubeapi, kustomize, monitoring

app = typer.Typer(
    help=(
        "A real Kubernetes API server for tests: kube-apiserver and etcd built from the Go module "
        "proxy (cached per version), run on 127.0.0.1 with an admin and a service identity. "
        "State in .stack/kubeapi (DEVICESTATE_TESTENV_DIR)."
    ),
    no_args_is_help=True,
)

EXIT_NOT_RUNNING = 3


def _report(line: str) -> None:
    print(f"[testenv] {line}", file=sys.stderr, flush=True)


def _fail(exc: Exception) -> NoReturn:
    message = exc.details() if isinstance(exc, StackError) else str(exc)
    print(f"[testenv] ERROR: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(1)


def _print_built(build: Callable[[], dict[str, Path]]) -> None:
    """Run a build (or cache check), then print its binaries as ``NAME=path`` on stdout."""
    try:
        paths = build()
    except (kubeapi.KubeAPIError, StackError, OSError) as exc:
        _fail(exc)
    for name, path in paths.items():
        print(f"{name}={path}")


def state_dir() -> Path:
    override = os.environ.get("DEVICESTATE_TESTENV_DIR")
    if override:
        return Path(override).expanduser().resolve()
    return StackLayout.from_env().state_dir / "kubeapi"


def _print_env(api: kubeapi.KubeAPI) -> None:
    for name, value in api.env().items():
        print(f"{name}={value}")


@app.command()
def build(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if cached.")] = False,
    control_plane: Annotated[
        bool,
        typer.Option(
            "--control-plane/--no-control-plane",
            help="Also kube-scheduler and kube-controller-manager (for the scheduler tests).",
        ),
    ] = True,
) -> None:
    """Build kube-apiserver and etcd (pinned in tools/kube-apiserver), kube-scheduler and
    kube-controller-manager of the same release (tools/kube-apiserver/control-plane) and kustomize
    (pinned in devtools/testenv/kustomize-go, for the deploy/ tests), or reuse the cached ones."""

    def paths() -> dict[str, Path]:
        binaries = kubeapi.ensure_binaries(_report, force=force)
        built = {"KUBE_APISERVER": binaries.kube_apiserver, "ETCD": binaries.etcd}
        if control_plane:
            plane = control_plane_build.ensure_binaries(_report, force=force)
            built["KUBE_SCHEDULER"] = plane.kube_scheduler
            built["KUBE_CONTROLLER_MANAGER"] = plane.kube_controller_manager
        built["KUSTOMIZE"] = kustomize.ensure_kustomize(_report, force=force)
        return built

    _print_built(paths)


@app.command("monitoring")
def monitoring_build(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if cached.")] = False,
) -> None:
    """Build Prometheus, promtool, Alertmanager and amtool (pinned in
    devtools/testenv/monitoring-go, for the alert-rule and monitoring tests), or reuse the cached
    ones."""

    def paths() -> dict[str, Path]:
        binaries = monitoring.ensure_binaries(_report, force=force)
        return {
            "PROMETHEUS": binaries.prometheus,
            "PROMTOOL": binaries.promtool,
            "ALERTMANAGER": binaries.alertmanager,
            "AMTOOL": binaries.amtool,
        }

    _print_built(paths)


@app.command()
def up(
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for each server to become ready.")
    ] = 120.0,
) -> None:
    """Start etcd and kube-apiserver in the background (building them on first use).

    Does nothing if they already run. Prints the connection settings.
    """
    started = time.monotonic()
    directory = state_dir()
    try:
        with file_lock(directory / "testenv.lock", _report, "testenv up/down"):
            api = kubeapi.read_state(directory)
            if api is not None and api.alive():
                _report(f"already running at {api.server_url}")
            else:
                if api is not None:
                    kubeapi.stop(api, _report)  # whatever half of it is left
                api = kubeapi.start(directory, _report, timeout)
    except (kubeapi.KubeAPIError, StackError, OSError) as exc:
        _fail(exc)
    _report(f"up in {time.monotonic() - started:.1f} s")
    _print_env(api)


@app.command()
def down() -> None:
    """Stop the kube-apiserver and etcd that ``up`` started (by their recorded PIDs)."""
    directory = state_dir()
    api = kubeapi.read_state(directory)
    if api is None:
        _report(f"nothing to stop: no state in {directory}")
        return
    try:
        with file_lock(directory / "testenv.lock", _report, "testenv up/down"):
            kubeapi.stop(api, _report)
    except (StackError, OSError) as exc:
        _fail(exc)
    _report("stopped")


@app.command()
def env() -> None:
    """Print the connection settings of the running test API server (exit 3 if it is not up)."""
    api = kubeapi.read_state(state_dir())
    if api is None or not api.alive():
        _report("not running: `devicestate-dev testenv up` starts it")
        raise typer.Exit(EXIT_NOT_RUNNING)
    _print_env(api)
