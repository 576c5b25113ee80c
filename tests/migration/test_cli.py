"""``devicestate migrate`` on the command line: registered, dry-run by default, and a missing
Kubernetes configuration or token file is one line and exit 2, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    for name in (
        "DEVICESTATE_KUBECONFIG",
        "KUBERNETES_SERVICE_HOST",
        "DEVICESTATE_MIGRATE_DRY_RUN",
    ):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_help_names_the_steps_and_the_dry_run_default() -> None:
    result = CliRunner().invoke(app, ["migrate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("--apply", "--dry-run", "--holder", "--once", "Eviction API", "evidence"):
        assert text in result.output


def test_without_kubeconfig_it_is_one_line_and_exit_2(no_cluster: Path) -> None:
    result = CliRunner().invoke(app, ["migrate", "--once"])
    assert result.exit_code == 2, result.output
    assert "error: no usable Kubernetes configuration" in result.output
    assert "Traceback" not in result.output


def test_a_missing_token_file_is_one_line_and_exit_2(
    no_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVICESTATE_MIGRATE_API_TOKEN_FILE", str(no_cluster / "absent"))
    result = CliRunner().invoke(app, ["migrate", "--once", "--apply"])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "absent" in result.output
    assert "Traceback" not in result.output
