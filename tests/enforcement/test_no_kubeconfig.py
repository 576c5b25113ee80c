"""Without any Kubernetes configuration, ``devicestate adoption enforce`` says so in one line and
exits 2 (the new user got a 230-line traceback ending in a misleading kube-config message)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app


def test_adoption_enforce_without_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("DEVICESTATE_KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(app, ["adoption", "enforce", "--once"])
    assert result.exit_code == 2, result.output
    assert "error: no usable Kubernetes configuration" in result.output
    assert "Traceback" not in result.output
