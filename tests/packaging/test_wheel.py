"""The product's wheel holds the product only: no developer tools (local stack, test
kube-apiserver, demo, bundled examples), which ship as the separate ``devicestate-devtools``
distribution (``devtools/pyproject.toml``) and the ``devicestate-dev`` command."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Both wheels, built as a packager would (``pip wheel --no-deps``), by distribution name."""
    out = tmp_path_factory.mktemp("wheels")
    # A copy of the sources (devtools/ included, to show the product's build leaves it out), so
    # that setuptools' build/ folders land outside the checkout.
    tree = tmp_path_factory.mktemp("tree")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    for name in ("services", "streams", "migrations", "devtools"):
        shutil.copytree(REPO / name, tree / name, ignore=skip)
    for source in (tree, tree / "devtools"):
        pip_wheel = ["pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)]
        subprocess.run([sys.executable, "-m", *pip_wheel], check=True, cwd=tree)
    names: dict[str, list[str]] = {}
    for wheel in out.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            names[wheel.name.split("-")[0]] = archive.namelist()
    return names


def test_the_product_wheel_has_no_developer_tools(wheels: dict[str, list[str]]) -> None:
    files = wheels["devicestate"]
    tops = {name.split("/")[0] for name in files if not name.startswith("devicestate-")}
    assert tops == {"services", "streams", "migrations"}
    dev_only = [
        name
        for name in files
        if name.endswith(".jsonl") or "/stack/" in name or "/testenv/" in name or "/demo/" in name
    ]
    assert dev_only == []
    entry_points = next(n for n in files if n.endswith("entry_points.txt"))
    assert "devicestate-dev" not in entry_points


def test_the_devtools_wheel_has_the_tools_and_their_data(wheels: dict[str, list[str]]) -> None:
    files = set(wheels["devicestate_devtools"])
    assert {
        "devtools/cli.py",
        "devtools/stack/maven/pom.xml",
        "devtools/testenv/kustomize-go/go.mod",
        "devtools/testenv/monitoring-go/prometheus/go.sum",
        "devtools/testenv/monitoring-go/alertmanager/go.sum",
        "devtools/examples/demo-stream.jsonl",
    } <= files
    assert not any(name.startswith(("services/", "streams/")) for name in files)


def test_the_product_command_has_no_developer_commands() -> None:
    from typer.main import get_command

    from services.cli.main import app

    commands = set(get_command(app).commands)  # type: ignore[attr-defined]
    assert {"watch", "worker", "api", "replay"} <= commands
    assert commands.isdisjoint({"stack", "testenv", "demo"})


def test_the_developer_command_has_them() -> None:
    from typer.main import get_command

    from devtools.cli import app

    assert set(get_command(app).commands) == {"stack", "testenv", "demo"}  # type: ignore[attr-defined]
