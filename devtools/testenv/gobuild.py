"""What the test tools' Go builders share: ``go build`` from a wrapper module, logged and niced,
and the cache directory's completion marker.

kube-apiserver + etcd (:mod:`devtools.testenv.kubeapi_build`), kustomize
(:mod:`devtools.testenv.kustomize`) and the monitoring tools (:mod:`devtools.testenv.monitoring`)
are each built from a wrapper Go module whose go.mod names the version and whose go.sum pins every
module, into ``<stack cache root>/<tool>/<version key>/``. A build writes ``.complete`` (JSON: the
versions, a digest of the go.sum files, when and how long) last; a directory is reused only when
that marker names the same digest and every binary is executable, so an interrupted build or a
changed go.sum means another build. ``DEVICESTATE_KUBEAPI_BUILD_JOBS`` (default 1) is ``go build
-p`` for all of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools.stack.supervisor import Reporter, tail
from devtools.testenv.errors import KubeAPIError

COMPLETE_MARKER = ".complete"
PROGRESS_SECONDS = 30.0  # how often a verbose build reports the packages compiled so far


def stderr_reporter(prefix: str) -> Reporter:
    """A reporter printing ``[prefix] line`` to stderr (each builder's default progress sink)."""

    def report(line: str) -> None:
        print(f"[{prefix}] {line}", file=sys.stderr, flush=True)

    return report


def required_version(go_mod: Path, module: str, error: type[KubeAPIError] = KubeAPIError) -> str:
    """The version ``go_mod`` requires of ``module``, without its ``v`` (``"1.36.3"``).

    Raises ``error`` if the file cannot be read or does not require the module."""
    try:
        text = go_mod.read_text()
    except OSError as exc:
        raise error(f"cannot read {go_mod}: {exc}") from exc
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+v(\S+)", text, re.MULTILINE)
    if match is None:
        raise error(f"{go_mod} does not require {module}")
    return match.group(1)


def go_sum_digest(go_sums: Iterable[Path], seed: bytes = b"") -> str:
    """SHA-256 (hex) of ``seed`` then each go.sum's bytes in order; a missing file adds nothing."""
    digest = hashlib.sha256(seed)
    for go_sum in go_sums:
        with contextlib.suppress(OSError):
            digest.update(go_sum.read_bytes())
    return digest.hexdigest()


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The completion marker of a cache directory, or None (no finished build, or unreadable)."""
    try:
        data = json.loads((directory / COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_reusable(directory: Path, key: str, digest: str, binaries: Iterable[Path]) -> bool:
    """True when a finished build left ``directory`` with ``marker[key] == digest`` and every
    binary executable (a half-removed cache is not reused)."""
    marker = read_marker(directory)
    if marker is None or marker.get(key) != digest:
        return False
    return all(os.access(path, os.X_OK) for path in binaries)


def clear_marker(directory: Path) -> None:
    """Mark ``directory`` unfinished; call before a build replaces any binary in it."""
    (directory / COMPLETE_MARKER).unlink(missing_ok=True)


def write_marker(directory: Path, marker: Mapping[str, Any]) -> None:
    """Mark ``directory`` finished (last, after every binary is in place)."""
    (directory / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def utc_now() -> str:
    """The marker's ``built_at``: ``2026-12-02T06:40:00Z`` (a build record, not a domain time)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def go_command(env: Mapping[str, str]) -> str:
    """The ``go`` on ``env``'s PATH; raises :class:`KubeAPIError` if there is none."""
    go = shutil.which("go", path=env.get("PATH"))
    if go is None:
        raise KubeAPIError(
            "`go` is not on the PATH: building kube-apiserver and etcd needs Go >= 1.26 "
            "(the modules come from the Go module proxy)"
        )
    return go


def go_version(go: str) -> str:
    """What ``go version`` prints (``go version go1.26.8 linux/amd64``), for the build logs."""
    return subprocess.run(
        [go, "version"], capture_output=True, text=True, check=False
    ).stdout.strip()


def build_env() -> dict[str, str]:
    """This process's environment with the build settings every tool is built with."""
    env = dict(os.environ)
    env.setdefault("GOMAXPROCS", "2")  # a shared 2-core machine: leave room for the rest
    env["GOFLAGS"] = "-mod=readonly"  # go.mod/go.sum in the repository decide every module
    env["CGO_ENABLED"] = "0"  # static binaries, as Kubernetes releases them
    return env


def go_build(
    go: str,
    args: Sequence[str],
    module_dir: Path,
    log: Path,
    *,
    what: str,
    report: Reporter | None = None,
    discard: Path | None = None,
    error: type[KubeAPIError] = KubeAPIError,
) -> float:
    """Run ``nice -n 10 go build [-v] -p $DEVICESTATE_KUBEAPI_BUILD_JOBS -trimpath <args>`` in
    ``module_dir`` with :func:`build_env`, all output in ``log`` (its first line the command);
    returns the seconds it took.

    With ``report``, ``-v`` is added and every 30 s a note says how many packages were compiled.
    On failure ``discard`` (a partial output file) is removed and ``error`` raised with the exit
    code and the log's last 30 lines; ``what`` names the build in that message."""
    command = [go, "build", *(["-v"] if report is not None else [])]
    command += ["-p", os.environ.get("DEVICESTATE_KUBEAPI_BUILD_JOBS", "1"), "-trimpath", *args]
    nice = shutil.which("nice")
    if nice is not None:
        command = [nice, "-n", "10", *command]
    started = time.monotonic()
    with log.open("w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=module_dir,
            env=build_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        next_note = started + PROGRESS_SECONDS
        while process.poll() is None:
            time.sleep(0.5)
            if report is not None and time.monotonic() >= next_note:
                # `go build -v` prints each package it compiles: an import path has a slash.
                packages = sum(1 for line in tail(log, 1_000_000).splitlines() if "/" in line)
                report(
                    f"  still building {what}: {time.monotonic() - started:.0f} s, "
                    f"{packages} packages so far"
                )
                next_note += PROGRESS_SECONDS
    seconds = time.monotonic() - started
    if process.returncode != 0:
        if discard is not None:
            discard.unlink(missing_ok=True)
        raise error(
            f"go build {what} failed (exit {process.returncode}) after {seconds:.0f} s; "
            f"last lines of {log}:\n{tail(log, 30)}"
        )
    return seconds
