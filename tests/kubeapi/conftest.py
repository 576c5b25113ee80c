"""A real kube-apiserver + etcd for the whole test session (``services.testenv.kubeapi``).

``kube_api`` starts them (building the binaries first if the cache has none: CI builds them in
a step of its own) and stops them at the end. A failure to build or start FAILS the tests that
use it; set ``DEVICESTATE_KUBEAPI=off`` to skip them instead on a machine without Go.
``admin_client`` and ``service_client`` are kubernetes_asyncio clients from the two kubeconfigs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from services.stack.supervisor import StackError
from services.testenv import kubeapi

NAMESPACE = kubeapi.SERVICE_NAMESPACE


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeapi.KubeAPI]:
    if os.environ.get("DEVICESTATE_KUBEAPI", "").strip().lower() == "off":
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
