"""The Go builders' shared steps (``devtools.testenv.gobuild``): a real ``go build`` of a tiny
module (the machine's Go; its build cache makes it take a second or two), the completion marker's
reuse rule, and the cache keys of the three builders (kube-apiserver + etcd, kustomize, the
monitoring tools), which must not change or every cache already built is rebuilt."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from devtools.testenv import gobuild, kubeapi, kubeapi_build, kustomize, monitoring

HELLO = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from go") }\n'


def _module(directory: Path, name: str, main_go: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "go.mod").write_text(f"module example.com/{name}\n\ngo 1.22\n")
    (directory / "main.go").write_text(main_go)
    return directory


def test_go_build_runs_the_niced_logged_command_with_the_build_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVICESTATE_KUBEAPI_BUILD_JOBS", "2")
    module = _module(tmp_path / "hello", "hello", HELLO)
    output, log = tmp_path / "out" / "hello", tmp_path / "build.log"
    output.parent.mkdir()
    go = gobuild.go_command(os.environ)
    seconds = gobuild.go_build(
        go, ["-o", str(output), "example.com/hello"], module, log, what="example.com/hello"
    )
    assert seconds > 0
    run = subprocess.run([str(output)], capture_output=True, text=True, check=True)
    assert run.stdout == "hello from go\n"
    first = log.read_text().splitlines()[0]
    assert first.startswith("$ ") and first.endswith(
        f"{go} build -p 2 -trimpath -o {output} example.com/hello"
    )
    assert "nice -n 10 " in first


def test_a_reported_build_is_verbose(tmp_path: Path) -> None:
    module = _module(tmp_path / "hello", "hello", HELLO)
    log, notes = tmp_path / "build.log", []
    gobuild.go_build(
        gobuild.go_command(os.environ),
        ["-o", str(tmp_path / "hello.bin"), "example.com/hello"],
        module,
        log,
        what="example.com/hello",
        report=notes.append,
    )
    assert " build -v -p 1 -trimpath " in log.read_text().splitlines()[0]
    assert (tmp_path / "hello.bin").exists()


def test_a_failed_build_raises_the_builders_error_with_the_log_tail(tmp_path: Path) -> None:
    module = _module(tmp_path / "broken", "broken", "package main\n\nfunc main() { nope() }\n")
    partial, log = tmp_path / "broken.tmp", tmp_path / "build.log"
    partial.write_text("left by an earlier try")
    with pytest.raises(monitoring.MonitoringBuildError) as caught:
        gobuild.go_build(
            gobuild.go_command(os.environ),
            ["-o", str(partial), "example.com/broken"],
            module,
            log,
            what="example.com/broken",
            discard=partial,
            error=monitoring.MonitoringBuildError,
        )
    message = str(caught.value)
    assert message.startswith("go build example.com/broken failed (exit 1) after ")
    assert f"last lines of {log}:\n" in message and "undefined: nope" in message
    assert not partial.exists()


def test_a_directory_is_reused_only_after_a_finished_build_with_the_same_digest(
    tmp_path: Path,
) -> None:
    binary = tmp_path / "tool"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert not gobuild.is_reusable(tmp_path, "go_sum_sha256", "abc", [binary])  # no marker
    gobuild.write_marker(tmp_path, {"go_sum_sha256": "abc", "built_at": gobuild.utc_now()})
    assert gobuild.is_reusable(tmp_path, "go_sum_sha256", "abc", [binary])
    assert not gobuild.is_reusable(tmp_path, "go_sum_sha256", "another", [binary])
    assert not gobuild.is_reusable(tmp_path, "fingerprint", "abc", [binary])
    binary.chmod(0o644)  # a half-removed or damaged cache is not reused
    assert not gobuild.is_reusable(tmp_path, "go_sum_sha256", "abc", [binary])
    binary.chmod(0o755)
    gobuild.clear_marker(tmp_path)  # a build under way
    assert gobuild.read_marker(tmp_path) is None
    assert not gobuild.is_reusable(tmp_path, "go_sum_sha256", "abc", [binary])
    (tmp_path / gobuild.COMPLETE_MARKER).write_text("[]")  # not a marker
    assert gobuild.read_marker(tmp_path) is None


def test_required_version_reads_go_mod(tmp_path: Path) -> None:
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(
        "module x\n\nrequire (\n\texample.com/a v1.2.3\n)\nrequire example.com/b v0.4.0\n"
    )
    assert gobuild.required_version(go_mod, "example.com/a") == "1.2.3"
    assert gobuild.required_version(go_mod, "example.com/b") == "0.4.0"
    with pytest.raises(monitoring.MonitoringBuildError, match=r"does not require example\.com/c"):
        gobuild.required_version(go_mod, "example.com/c", monitoring.MonitoringBuildError)
    with pytest.raises(kubeapi.KubeAPIError, match="cannot read"):
        gobuild.required_version(tmp_path / "missing.mod", "example.com/a")


def _sha256(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()


def test_the_builders_cache_keys_are_the_go_sum_digests_they_always_were() -> None:
    tools = kubeapi.tools_dir()
    kube_sums = [(tools / "go.sum").read_bytes(), (tools / "etcd" / "go.sum").read_bytes()]
    assert kubeapi.cache_dir(kubeapi.versions(tools), {}).parts[-2:] == (
        "kube",
        "1.36.3-etcd3.6.16",
    )
    assert kubeapi_build._go_sum_digest(tools) == _sha256(*kube_sums)
    assert kustomize._go_sum_digest(kustomize.MODULE_DIR) == _sha256(
        (kustomize.MODULE_DIR / "go.sum").read_bytes()
    )
    mon = monitoring.MODULE_DIR
    assert monitoring._fingerprint(mon) == _sha256(
        f"{monitoring.PROMETHEUS_TAGS};{monitoring.ALERTMANAGER_TAGS}".encode(),
        (mon / "prometheus" / "go.sum").read_bytes(),
        (mon / "alertmanager" / "go.sum").read_bytes(),
    )


def test_kustomize_and_kube_caches_are_reused_only_with_their_marker(tmp_path: Path) -> None:
    env = {"DEVICESTATE_STACK_CACHE_DIR": str(tmp_path)}
    directory = kustomize.cache_dir(kustomize.version(), env)
    assert directory == tmp_path / "kustomize" / "5.8.2"
    directory.mkdir(parents=True)
    (directory / "kustomize").write_text("#!/bin/sh\n")
    (directory / "kustomize").chmod(0o755)
    assert kustomize.cached_kustomize(env=env) is None
    digest = kustomize._go_sum_digest(kustomize.MODULE_DIR)
    (directory / ".complete").write_text(json.dumps({"go_sum_sha256": digest}))
    assert kustomize.cached_kustomize(env=env) == directory / "kustomize"

    kube = kubeapi.cache_dir(kubeapi.versions(), env)
    kube.mkdir(parents=True)
    for name in ("kube-apiserver", "etcd"):
        (kube / name).write_text("#!/bin/sh\n")
        (kube / name).chmod(0o755)
    assert kubeapi.cached_binaries(env=env) is None
    marker = {"go_sum_sha256": kubeapi_build._go_sum_digest(kubeapi.tools_dir())}
    (kube / ".complete").write_text(json.dumps(marker))
    binaries = kubeapi.cached_binaries(env=env)
    assert binaries is not None and binaries.etcd == kube / "etcd"


def test_the_reporter_prefixes_its_lines(capsys: pytest.CaptureFixture[str]) -> None:
    gobuild.stderr_reporter("kustomize")("building")
    assert capsys.readouterr().err == "[kustomize] building\n"
