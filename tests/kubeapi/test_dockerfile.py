"""The Dockerfile, read statically (no Docker engine here to build it): multi-stage, non-root,
``devicestate`` as the entrypoint, and one image name shared by docker-compose.yml and deploy/.

The parser understands what the Dockerfile uses: comments, a ``# syntax=`` directive, ``\\``
line continuations, ``ARG`` in ``FROM``, JSON (exec) form of ENTRYPOINT/CMD.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from services.runtime.config import Settings

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"devicestate:{VERSION}"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """``(global ARG defaults, stages)``; each stage keeps its instructions in order."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        logical.append((current + line).strip())
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for instruction in logical:
        keyword, _, rest = instruction.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            parts = rest.split()
            parts = [p for p in parts if not p.startswith("--platform")]
            base = re.sub(
                r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], parts[0]
            )
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = value
    return env


def test_it_is_multi_stage_with_a_build_and_a_runtime_stage(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    args, stages = dockerfile
    assert len(stages) >= 2
    build, runtime = stages[0], stages[-1]
    assert (build.name, runtime.name) == ("build", "runtime")
    # The same Python for both stages (wheels built for the interpreter that runs them).
    assert build.base == runtime.base
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", runtime.base), runtime.base
    assert list(args) == ["PYTHON_IMAGE"]  # one build argument: the base image
    # Wheels are built in the first stage, and only they reach the runtime stage.
    assert any("pip wheel" in run for run in build.all("RUN"))
    takes_from_build = [
        run for run in runtime.all("RUN") if "--mount=type=bind,from=build" in run
    ] + [copy for copy in runtime.all("COPY") if copy.startswith("--from=build")]
    assert takes_from_build, "the runtime stage takes nothing from the build stage"
    assert not any(copy.split()[0] in {"services", "streams"} for copy in runtime.all("COPY"))
    install = next(run for run in runtime.all("RUN") if "pip install" in run)
    assert "--no-index" in install and "--no-cache-dir" in install


def test_the_build_stage_copies_every_package_the_wheel_needs(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    _, stages = dockerfile
    copied = {
        source.rstrip("/")
        for args in stages[0].all("COPY")
        for source in args.split()[:-1]
        if not source.startswith("--")
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages <= copied, f"not copied into the build stage: {packages - copied}"
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied


def test_the_runtime_stage_runs_devicestate_as_a_non_root_numeric_user(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    _, stages = dockerfile
    runtime = stages[-1]
    users = runtime.all("USER")
    assert users, "no USER in the runtime stage: it would run as root"
    uid, _, gid = users[-1].partition(":")
    # Numeric: Kubernetes can only check runAsNonRoot against a numeric UID.
    assert uid.isdigit() and int(uid) > 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) > 0), users[-1]
    # USER comes after every RUN (no later step runs as root)...
    keywords = [kw for kw, _ in runtime.instructions]
    assert max(i for i, kw in enumerate(keywords) if kw == "RUN") < keywords.index("USER")
    # ...and matches the user the manifests ask for.
    assert any(f"--uid {uid}" in run for run in runtime.all("RUN"))
    (entrypoint,) = runtime.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["devicestate"]  # exec form: signals reach the process
    assert json.loads(runtime.all("CMD")[-1]) == ["--help"]


def test_runtime_settings_and_ports_are_the_projects(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    _, stages = dockerfile
    runtime = stages[-1]
    env = _env(runtime)
    names = {k for k in env if k.startswith("DEVICESTATE_")}
    fields = set(Settings.model_fields)
    assert names and all(n.removeprefix("DEVICESTATE_").lower() in fields for n in names)
    # The worker's data directory is one the image's user owns (a volume there starts writable).
    data_dir = env["DEVICESTATE_WORKER_DATA_DIR"]
    owned = re.findall(r"install -d -o (\d+) -g \d+ -m \d+ (\S+)", " ".join(runtime.all("RUN")))
    assert any(data_dir.startswith(path + "/") for _, path in owned), (data_dir, owned)
    exposed = {int(p) for args in runtime.all("EXPOSE") for p in args.split()}
    defaults = Settings.model_fields
    assert {
        defaults["api_port"].default,
        defaults["watcher_metrics_port"].default,
        defaults["worker_metrics_port"].default,
        9109,  # devicestate alerts --metrics-port
        9110,  # devicestate recovery --metrics-port
        9111,  # devicestate enforce --metrics-port
    } <= exposed


def test_compose_and_deploy_use_the_same_image() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("watcher", "worker", "api"):
        service = compose["services"][name]
        assert service["build"] in (".", {"context": "."})
        assert service["image"] == IMAGE, name
    kustomization = yaml.safe_load((ROOT / "deploy" / "base" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert (image["name"], image["newTag"]) == ("devicestate", VERSION)
    assert "newName" not in image
    for path in sorted((ROOT / "deploy" / "base").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Deployment":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    assert container["image"] == "devicestate", (path.name, container["name"])
                    assert "command" not in container  # the image's ENTRYPOINT: devicestate
