"""The monitoring tools' cache (``devtools.testenv.monitoring``): versions from the wrapper
modules, one directory per version pair, reused only after a finished build with the same go.sum
files and build tags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools.testenv import monitoring


def test_versions_come_from_the_wrapper_modules() -> None:
    vers = monitoring.versions()
    assert (vers.prometheus, vers.prometheus_module, vers.alertmanager) == (
        "3.16.0",
        "0.316.0",
        "0.35.0",
    )
    assert vers.key == "prometheus3.16.0-alertmanager0.35.0"


def test_prometheus_module_versions_map_to_releases() -> None:
    assert monitoring.release_of_module("0.316.0") == "3.16.0"
    assert monitoring.release_of_module("0.305.2") == "3.5.2"
    with pytest.raises(monitoring.MonitoringBuildError):
        monitoring.release_of_module("2.53.0")


def _fake_build(directory: Path, fingerprint: str) -> None:
    directory.mkdir(parents=True)
    for name in ("prometheus", "promtool", "alertmanager", "amtool"):
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    (directory / ".complete").write_text(json.dumps({"fingerprint": fingerprint}))


def test_a_finished_build_is_reused_only_with_the_same_fingerprint(tmp_path: Path) -> None:
    env = {"DEVICESTATE_STACK_CACHE_DIR": str(tmp_path)}
    vers = monitoring.versions()
    directory = monitoring.cache_dir(vers, env)
    assert directory == tmp_path / "monitoring" / vers.key
    assert monitoring.cached_binaries(env=env) is None  # nothing built
    _fake_build(directory, "another go.sum")
    assert monitoring.cached_binaries(env=env) is None
    (directory / ".complete").write_text(
        json.dumps({"fingerprint": monitoring._fingerprint(monitoring.MODULE_DIR)})
    )
    binaries = monitoring.cached_binaries(env=env)
    assert binaries is not None and binaries.promtool == directory / "promtool"
    (directory / "amtool").unlink()  # a half-removed cache is not reused
    assert monitoring.cached_binaries(env=env) is None
