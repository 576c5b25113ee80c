"""The kube-scheduler/kube-controller-manager cache (``devtools.testenv.control_plane_build``):
its directory and key, the reuse rule, and the refusal of a release other than kube-apiserver's.
The real build and start are exercised by ``tests/kubeapi/test_scheduler_*.py``."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from devtools.testenv import control_plane_build, kubeapi
from devtools.testenv.errors import KubeAPIError


def test_same_release_as_kube_apiserver_in_a_cache_directory_of_its_own(tmp_path: Path) -> None:
    env = {"DEVICESTATE_STACK_CACHE_DIR": str(tmp_path)}
    version = control_plane_build.kubernetes_version()
    assert version == kubeapi.versions().kubernetes == "1.36.3"
    directory = control_plane_build.cache_dir(version, env)
    assert directory == tmp_path / "kube" / "1.36.3-control-plane"
    assert directory != kubeapi.cache_dir(kubeapi.versions(), env)


def test_reused_only_with_a_marker_naming_its_go_sum(tmp_path: Path) -> None:
    env = {"DEVICESTATE_STACK_CACHE_DIR": str(tmp_path)}
    directory = control_plane_build.cache_dir("1.36.3", env)
    directory.mkdir(parents=True)
    for name in ("kube-scheduler", "kube-controller-manager"):
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    assert control_plane_build.cached_binaries(env=env) is None
    go_sum = (control_plane_build.module_dir() / "go.sum").read_bytes()
    (directory / ".complete").write_text(json.dumps({"go_sum_sha256": "another"}))
    assert control_plane_build.cached_binaries(env=env) is None
    digest = hashlib.sha256(go_sum).hexdigest()
    (directory / ".complete").write_text(json.dumps({"go_sum_sha256": digest}))
    binaries = control_plane_build.cached_binaries(env=env)
    assert binaries is not None
    assert binaries.kube_scheduler == directory / "kube-scheduler"
    assert binaries.kube_controller_manager == directory / "kube-controller-manager"
    (directory / "kube-scheduler").chmod(0o644)  # half-removed: not reused
    assert control_plane_build.cached_binaries(env=env) is None


def test_a_control_plane_of_another_release_is_refused(tmp_path: Path) -> None:
    tools = tmp_path / "kube-apiserver"
    shutil.copytree(kubeapi.tools_dir(), tools, ignore=shutil.ignore_patterns("go.sum"))
    module = tools / "control-plane"
    go_mod = module / "go.mod"
    go_mod.write_text(
        go_mod.read_text().replace("k8s.io/kubernetes v1.36.3", "k8s.io/kubernetes v1.36.1")
    )
    with pytest.raises(KubeAPIError, match=r"v1\.36\.1 but kube-apiserver is v1\.36\.3"):
        control_plane_build.kubernetes_version(module)
