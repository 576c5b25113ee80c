"""kustomize for the deploy tests, built from the Go module proxy and cached like kube-apiserver.

``deploy/`` is a kustomize base with overlays; ``tests/kubeapi/test_deploy.py`` renders every
overlay with the real ``kustomize`` (sigs.k8s.io/kustomize/kustomize/v5) rather than a
re-implementation of the parts it uses. ``ensure_kustomize`` builds it from the wrapper Go module in
``devtools/testenv/kustomize-go/`` (its go.mod names the version, its go.sum pins every module)
into ``<cache>/kustomize/<version>/kustomize`` and reuses it from then on; ``<cache>`` is the
stack's cache root (``DEVICESTATE_STACK_CACHE_DIR``, default ``~/.cache/devicestate``).
``DEVICESTATE_KUSTOMIZE`` names a binary to use instead (no build). ``render`` runs
``kustomize build``.

Cost on this project's 2-core machine: about 50 s cold (empty Go build cache, modules already
downloaded), 15 s with the build cache kube-apiserver leaves, 13 MB on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from devtools.stack.supervisor import Reporter, StackLayout, file_lock, tail
from devtools.testenv.kubeapi import KubeAPIError, _build_env, _go_command

MODULE_DIR = Path(__file__).resolve().with_name("kustomize-go")
PACKAGE = "sigs.k8s.io/kustomize/kustomize/v5"
_COMPLETE_MARKER = ".complete"


def _stderr(line: str) -> None:
    print(f"[kustomize] {line}", file=sys.stderr, flush=True)


def version(module_dir: Path = MODULE_DIR) -> str:
    """The kustomize version the wrapper module pins (``5.8.2``)."""
    go_mod = module_dir / "go.mod"
    try:
        text = go_mod.read_text()
    except OSError as exc:
        raise KubeAPIError(f"cannot read {go_mod}: {exc}") from exc
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(PACKAGE)}\s+v(\S+)", text, re.MULTILINE)
    if match is None:
        raise KubeAPIError(f"{go_mod} does not require {PACKAGE}")
    return match.group(1)


def cache_dir(vers: str, env: Mapping[str, str] | None = None) -> Path:
    """``<stack cache root>/kustomize/<version>``."""
    return StackLayout.from_env(env).cache_dir / "kustomize" / vers


def _go_sum_digest(module_dir: Path) -> str:
    try:
        return hashlib.sha256((module_dir / "go.sum").read_bytes()).hexdigest()
    except OSError:
        return ""


def cached_kustomize(
    module_dir: Path = MODULE_DIR, env: Mapping[str, str] | None = None
) -> Path | None:
    """The cached binary for the pinned version, if a finished build with this go.sum left it."""
    directory = cache_dir(version(module_dir), env)
    binary = directory / "kustomize"
    try:
        marker = json.loads((directory / _COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("go_sum_sha256") != _go_sum_digest(module_dir):
        return None
    return binary if os.access(binary, os.X_OK) else None


def ensure_kustomize(report: Reporter = _stderr, force: bool = False) -> Path:
    """``$DEVICESTATE_KUSTOMIZE`` if set, else the cached build, else build it now."""
    override = os.environ.get("DEVICESTATE_KUSTOMIZE")
    if override:
        path = Path(override).expanduser()
        if not os.access(path, os.X_OK):
            raise KubeAPIError(f"DEVICESTATE_KUSTOMIZE={override} is not an executable file")
        return path
    started = time.monotonic()
    vers = version()
    directory = cache_dir(vers)
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / ".build.lock", report, "kustomize build"):
        cached = None if force else cached_kustomize()
        if cached is not None:
            report(f"reusing kustomize v{vers} from {directory}")
            return cached
        go = _go_command(os.environ)
        (directory / _COMPLETE_MARKER).unlink(missing_ok=True)
        binary, tmp, log = (
            directory / "kustomize",
            directory / "kustomize.tmp",
            directory / "build.log",
        )
        command = [go, "build", "-p", os.environ.get("DEVICESTATE_KUBEAPI_BUILD_JOBS", "1")]
        command += ["-trimpath", "-ldflags", "-s -w", "-o", str(tmp), PACKAGE]
        nice = shutil.which("nice")
        if nice is not None:
            command = [nice, "-n", "10", *command]
        report(f"building kustomize v{vers} into {directory} (about a minute cold; log: {log})")
        with log.open("w") as out:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            result = subprocess.run(
                command,
                cwd=MODULE_DIR,
                env=_build_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        seconds = time.monotonic() - started
        if result.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise KubeAPIError(
                f"go build {PACKAGE} failed (exit {result.returncode}) after {seconds:.0f} s; "
                f"last lines of {log}:\n{tail(log, 30)}"
            )
        tmp.replace(binary)
        marker = {
            "kustomize": vers,
            "go_sum_sha256": _go_sum_digest(MODULE_DIR),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(seconds, 1),
        }
        (directory / _COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        report(f"built kustomize v{vers} in {seconds:.1f} s")
        return binary


def render(path: Path, binary: Path | None = None, timeout: float = 60.0) -> str:
    """``kustomize build <path>``: the rendered manifests (a multi-document YAML stream)."""
    binary = ensure_kustomize() if binary is None else binary
    result = subprocess.run(
        [str(binary), "build", str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise KubeAPIError(f"kustomize build {path} failed: {result.stderr.strip()}")
    return result.stdout
