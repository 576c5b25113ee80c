"""Prometheus, promtool, Alertmanager and amtool for the tests, built from the Go module proxy.

The alert rules, the Prometheus and Alertmanager configs in ``deploy/`` and the services'
``/metrics`` are checked with the real tools (``tests/monitoring/``), not re-implementations.
``ensure_binaries`` builds them from the two wrapper Go modules in
``devtools/testenv/monitoring-go/`` (``prometheus/`` and ``alertmanager/``: each go.mod names the
version through its ``tool`` lines, each go.sum pins every module, so each project builds with its
own dependency versions) into ``<cache>/monitoring/<key>/`` and reuses them from then on;
``<cache>`` is the stack's cache root (``DEVICESTATE_STACK_CACHE_DIR``, default
``~/.cache/devicestate``), ``<key>`` is ``prometheus<version>-alertmanager<version>``.

Prometheus is built with the ``remove_all_sd`` tag: every service-discovery plugin but the
file and HTTP ones (``plugins/minimum.go``) is left out, 243 of the 1527 packages of
``cmd/prometheus`` + ``cmd/promtool`` (most of the AWS SDK, the Consul, Hetzner, ... clients;
client-go stays, other packages import it); ``static_configs`` and ``file_sd_configs``
are all the tests and ``deploy/prometheus/prometheus.yml`` use. Without the ``builtinassets`` tag
the web UI is not embedded; the HTTP API, which the tests read, is all there. Alertmanager's
module does not build as the proxy serves it (its UI assets are built with npm and left out of
the zip): :func:`_alertmanager_source` builds it from a copy with a placeholder UI.

Cold build times on this project's 2-core machine are in docs/operations.md ("Building the
monitoring tools").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.stack.supervisor import Reporter, StackLayout, file_lock
from devtools.testenv import gobuild
from devtools.testenv.errors import KubeAPIError

MODULE_DIR = Path(__file__).resolve().with_name("monitoring-go")
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
ALERTMANAGER_MODULE = "github.com/prometheus/alertmanager"
PROMETHEUS_TAGS = "netgo,remove_all_sd"
"""``remove_all_sd``: no service discovery but file, HTTP and static (what the tests use)."""
ALERTMANAGER_TAGS = "netgo"
_VERSION_FLAG = "-X github.com/prometheus/common/version.Version="


class MonitoringBuildError(KubeAPIError):
    """Building the monitoring tools failed; the message says what and where (the build log)."""


_stderr = gobuild.stderr_reporter("monitoring")


@dataclass(frozen=True)
class Versions:
    prometheus: str  # the release, "3.16.0" (module version v0.316.0)
    prometheus_module: str  # "0.316.0"
    alertmanager: str  # "0.35.0"

    @property
    def key(self) -> str:
        return f"prometheus{self.prometheus}-alertmanager{self.alertmanager}"


@dataclass(frozen=True)
class Binaries:
    prometheus: Path
    promtool: Path
    alertmanager: Path
    amtool: Path
    versions: Versions

    def all(self) -> tuple[Path, ...]:
        return (self.prometheus, self.promtool, self.alertmanager, self.amtool)


def _required(go_mod: Path, module: str) -> str:
    return gobuild.required_version(go_mod, module, MonitoringBuildError)


def release_of_module(module_version: str) -> str:
    """Prometheus 3.x publishes its Go module as v0.3MM.P: ``0.316.0`` -> ``3.16.0``."""
    major, minor, patch = (int(part) for part in module_version.split("-")[0].split("."))
    if major != 0 or minor < 100:
        raise MonitoringBuildError(f"unexpected Prometheus module version v{module_version}")
    return f"{minor // 100}.{minor % 100}.{patch}"


def versions(module_dir: Path = MODULE_DIR) -> Versions:
    """The versions the wrapper modules pin (their go.mod files are the single source)."""
    module = _required(module_dir / "prometheus" / "go.mod", PROMETHEUS_MODULE)
    return Versions(
        prometheus=release_of_module(module),
        prometheus_module=module,
        alertmanager=_required(module_dir / "alertmanager" / "go.mod", ALERTMANAGER_MODULE),
    )


def cache_dir(vers: Versions, env: Mapping[str, str] | None = None) -> Path:
    """``<stack cache root>/monitoring/prometheus<v>-alertmanager<v>``."""
    return StackLayout.from_env(env).cache_dir / "monitoring" / vers.key


def _fingerprint(module_dir: Path) -> str:
    """go.sum of both modules and the build tags: a change of either means another build."""
    return gobuild.go_sum_digest(
        (module_dir / name / "go.sum" for name in ("prometheus", "alertmanager")),
        seed=f"{PROMETHEUS_TAGS};{ALERTMANAGER_TAGS}".encode(),
    )


def _binaries(directory: Path, vers: Versions) -> Binaries:
    return Binaries(
        directory / "prometheus",
        directory / "promtool",
        directory / "alertmanager",
        directory / "amtool",
        vers,
    )


def _marker(directory: Path) -> dict[str, Any]:
    return gobuild.read_marker(directory) or {}


def cached_binaries(
    module_dir: Path = MODULE_DIR, env: Mapping[str, str] | None = None
) -> Binaries | None:
    """The cached binaries of the pinned versions, if a finished build with these go.sum left them."""
    vers = versions(module_dir)
    binaries = _binaries(cache_dir(vers, env), vers)
    directory = binaries.prometheus.parent
    reusable = gobuild.is_reusable(
        directory, "fingerprint", _fingerprint(module_dir), binaries.all()
    )
    return binaries if reusable else None


def _alertmanager_source(go: str, directory: Path) -> Path:
    """A build module for Alertmanager: its module source (from the Go module cache, as the
    proxy served it) with a placeholder ``ui/app/dist``, and the wrapper go.mod/go.sum plus a
    ``replace`` to that copy. Returns the build module's directory.

    Why: ``ui/web.go`` embeds ``ui/app/dist``, which its release process builds with npm and the
    module zip does not hold, so the module does not build as served. The placeholder serves a
    one-line page at ``/``; the API v2 (all the tests and ``devicestate alerts`` use) is intact.
    """
    wrapper = MODULE_DIR / "alertmanager"
    result = subprocess.run(
        [go, "mod", "download", "-json", ALERTMANAGER_MODULE],
        cwd=wrapper,
        env=gobuild.build_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise MonitoringBuildError(
            f"go mod download {ALERTMANAGER_MODULE} failed: {result.stdout}{result.stderr}"
        )
    source = Path(json.loads(result.stdout)["Dir"])
    build = directory / "alertmanager-build"
    shutil.rmtree(build, ignore_errors=True)
    copy = build / "alertmanager"
    shutil.copytree(source, copy)
    for path in (copy, *copy.rglob("*")):  # the module cache is read-only
        path.chmod(path.stat().st_mode | 0o200)
    for ui in ("elm", "mantine"):
        page = copy / "ui" / "app" / "dist" / ui / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(
            "Alertmanager UI not built (devicestate test build); the API is at /api/v2.\n"
        )
    go_mod = (wrapper / "go.mod").read_text()
    (build / "go.mod").write_text(go_mod + f"\nreplace {ALERTMANAGER_MODULE} => ./alertmanager\n")
    shutil.copy2(wrapper / "go.sum", build / "go.sum")
    return build


def _go_build(
    go: str,
    module: str,
    version: str,
    tags: str,
    directory: Path,
    log: Path,
    report: Reporter,
    module_dir: Path,
) -> float:
    """``go build`` both commands of ``module`` from ``module_dir`` into ``directory``; returns
    seconds."""
    tmp = directory / "tmp"
    tmp.mkdir(exist_ok=True)
    base = "prometheus" if module == PROMETHEUS_MODULE else "alertmanager"
    tool = "promtool" if module == PROMETHEUS_MODULE else "amtool"
    report(f"building {base} and {tool} {version} (log: {log})")
    seconds = gobuild.go_build(
        go,
        [
            *("-tags", tags, "-ldflags", f"-s -w {_VERSION_FLAG}{version}", "-o", f"{tmp}/"),
            *(f"{module}/cmd/{base}", f"{module}/cmd/{tool}"),
        ],
        module_dir,
        log,
        what=module,
        error=MonitoringBuildError,
    )
    for name in (base, tool):
        (tmp / name).replace(directory / name)
    report(f"built {base} and {tool} in {seconds:.1f} s")
    return seconds


def ensure_binaries(report: Reporter = _stderr, force: bool = False) -> Binaries:
    """Build the four tools for the pinned versions, or reuse the cached ones.

    Raises :class:`MonitoringBuildError` (Go missing, a build failed: the log's tail in the
    message) or ``OSError`` (cache not writable).
    """
    started = time.monotonic()
    vers = versions()
    directory = cache_dir(vers)
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / ".build.lock", report, "monitoring tools build"):
        cached = None if force else cached_binaries()
        if cached is not None:
            report(
                f"reusing Prometheus {vers.prometheus} and Alertmanager {vers.alertmanager} from "
                f"{directory} (built {_marker(directory).get('built_at', '?')})"
            )
            return cached
        go = gobuild.go_command(os.environ)
        report(
            f"building Prometheus {vers.prometheus} and Alertmanager {vers.alertmanager} into "
            f"{directory} (cold: see docs/operations.md, 'Building the monitoring tools')"
        )
        gobuild.clear_marker(directory)
        timings = {
            "prometheus": _go_build(
                go,
                PROMETHEUS_MODULE,
                vers.prometheus,
                PROMETHEUS_TAGS,
                directory,
                directory / "build-prometheus.log",
                report,
                MODULE_DIR / "prometheus",
            ),
            "alertmanager": _go_build(
                go,
                ALERTMANAGER_MODULE,
                vers.alertmanager,
                ALERTMANAGER_TAGS,
                directory,
                directory / "build-alertmanager.log",
                report,
                _alertmanager_source(go, directory),
            ),
        }
        shutil.rmtree(directory / "alertmanager-build", ignore_errors=True)  # the source copy
        gobuild.write_marker(
            directory,
            {
                "prometheus": vers.prometheus,
                "alertmanager": vers.alertmanager,
                "fingerprint": _fingerprint(MODULE_DIR),
                "built_at": gobuild.utc_now(),
                "build_seconds": {name: round(s, 1) for name, s in timings.items()},
            },
        )
    report(f"monitoring tools ready in {time.monotonic() - started:.1f} s")
    return _binaries(directory, vers)
