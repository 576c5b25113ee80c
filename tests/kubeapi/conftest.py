"""A real kube-apiserver + etcd for the whole test session (``devtools.testenv.kubeapi``).

``kube_api`` starts them (building the binaries first if the cache has none: CI builds them in
a step of its own) and stops them at the end. A failure to build or start FAILS the tests that
use it; set ``DEVICESTATE_KUBEAPI=off`` to skip them instead on a machine without Go.
``admin_client`` and ``service_client`` are kubernetes_asyncio clients from the two kubeconfigs.

For the deploy/ and live-watcher tests: ``kustomize_binary`` (built like the API server, see
``devtools.testenv.kustomize``), ``rendered`` (``kustomize build`` of deploy/base and every overlay,
parsed), and ``kube_api_etcd_watch``, a second API server started on first use with
``--watch-cache=false``: its WATCHes read etcd directly, so compacting etcd
(``kube_rest.compact_etcd``) makes an older resourceVersion 410 Expired, as a real cluster answers
once a resourceVersion has left its watch cache (the first server's cache answers from its own
history however etcd is compacted).

``kube_control_plane``: a third API server (etcd of its own) with a real kube-scheduler and
kube-controller-manager (``devtools.testenv.control_plane``), started on first use; its own server
so that the scheduler and the controllers never act on the other tests' objects. No kubelet: the
tests play its part.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from devtools.stack.supervisor import StackError
from devtools.testenv import control_plane, kubeapi, kustomize

if TYPE_CHECKING:
    from tests.kubeapi.kube_rest import KubeREST

NAMESPACE = kubeapi.SERVICE_NAMESPACE
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OVERLAYS = ("dev", "production", "enforcement", "adoption-enforcement", "migration")
"""deploy/overlays/*, each rendered and applied by the tests."""


def _harness_off() -> bool:
    return os.environ.get("DEVICESTATE_KUBEAPI", "").strip().lower() == "off"


def _start(
    tmp_path_factory: pytest.TempPathFactory, name: str, extra_flags: tuple[str, ...] = ()
) -> kubeapi.KubeAPI:
    if _harness_off():
        pytest.skip("DEVICESTATE_KUBEAPI=off: no test kube-apiserver")
    try:
        return kubeapi.start(tmp_path_factory.mktemp(name), extra_flags=extra_flags)
    except (kubeapi.KubeAPIError, StackError, OSError) as exc:
        pytest.fail(
            f"the test kube-apiserver could not be built or started "
            f"(DEVICESTATE_KUBEAPI=off skips these tests): {exc}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def kube_api_etcd_watch(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[kubeapi.KubeAPI]:
    """A second API server (etcd of its own) without watch cache: WATCHes go to etcd."""
    api = _start(tmp_path_factory, "kubeapi-etcd-watch", ("--watch-cache=false",))
    try:
        yield api
    finally:
        kubeapi.stop(api)


@dataclass(frozen=True)
class ControlPlaneEnv:
    api: kubeapi.KubeAPI
    plane: control_plane.ControlPlane


@pytest.fixture(scope="session")
def kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneEnv]:
    """kube-apiserver + etcd + kube-scheduler + kube-controller-manager, for the session."""
    api = _start(tmp_path_factory, "kubeapi-control-plane")
    try:
        try:
            plane = control_plane.start(api, api.work_dir / "control-plane")
        except (kubeapi.KubeAPIError, StackError, OSError) as exc:
            pytest.fail(
                f"kube-scheduler/kube-controller-manager could not be built or started: {exc}",
                pytrace=False,
            )
        try:
            yield ControlPlaneEnv(api, plane)
        finally:
            control_plane.stop(plane)
    finally:
        kubeapi.stop(api)


@pytest_asyncio.fixture
async def control_plane_rest(kube_control_plane: ControlPlaneEnv) -> AsyncIterator[KubeREST]:
    """A REST session on ``kube_control_plane``'s API server, as admin."""
    from tests.kubeapi.kube_rest import KubeREST

    async with KubeREST(kube_control_plane.api) as session:
        yield session


@pytest.fixture(scope="session")
def kustomize_binary() -> Path:
    if _harness_off():
        pytest.skip("DEVICESTATE_KUBEAPI=off: no Go, so no kustomize either")
    try:
        return kustomize.ensure_kustomize()
    except (kubeapi.KubeAPIError, StackError, OSError) as exc:
        pytest.fail(f"kustomize could not be built: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def rendered(kustomize_binary: Path) -> dict[str, list[dict[str, Any]]]:
    """``kustomize build`` of deploy/base and of each overlay: name -> its manifests."""
    from tests.kubeapi.kube_rest import load_manifests

    paths = {"base": DEPLOY / "base", **{o: DEPLOY / "overlays" / o for o in OVERLAYS}}
    return {
        name: load_manifests(kustomize.render(path, kustomize_binary))
        for name, path in paths.items()
    }


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeapi.KubeAPI]:
    if _harness_off():
        pytest.skip("DEVICESTATE_KUBEAPI=off: no test kube-apiserver")
    try:
        api = kubeapi.start(tmp_path_factory.mktemp("kubeapi"))
    except (kubeapi.KubeAPIError, StackError, OSError) as exc:
        pytest.fail(
            f"the test kube-apiserver could not be built or started "
            f"(DEVICESTATE_KUBEAPI=off skips these tests): {exc}",
            pytrace=False,
        )
    try:
        yield api
    finally:
        kubeapi.stop(api)


@pytest_asyncio.fixture(scope="session")
async def admin_client(kube_api: kubeapi.KubeAPI) -> AsyncIterator[client.ApiClient]:
    api_client = await config.new_client_from_config(config_file=str(kube_api.kubeconfig_admin))
    try:
        await client.CoreV1Api(api_client).create_namespace({"metadata": {"name": NAMESPACE}})
        yield api_client
    finally:
        await api_client.close()


@pytest_asyncio.fixture(scope="session")
async def service_client(
    kube_api: kubeapi.KubeAPI, admin_client: client.ApiClient
) -> AsyncIterator[client.ApiClient]:
    api_client = await config.new_client_from_config(config_file=str(kube_api.kubeconfig_service))
    try:
        yield api_client
    finally:
        await api_client.close()
