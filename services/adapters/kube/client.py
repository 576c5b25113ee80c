"""The kubernetes-asyncio ``ApiClient``: how the processes reach the API server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeAlias

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from services.runtime.config import KubeSettings

ApiClient: TypeAlias = k8s_client.ApiClient
"""The client the adapter classes are built on (the processes hold it, never look inside)."""


class KubeConfigUnavailable(Exception):
    """No usable way to reach the API server: the message says what was tried and why it failed
    (a command prints it as one line, not a traceback)."""


@asynccontextmanager
async def kubernetes_api_client(settings: KubeSettings) -> AsyncIterator[ApiClient]:
    """A kubernetes-asyncio ``ApiClient`` configured from ``settings.kubeconfig``, else the
    in-cluster service account, else ``~/.kube/config``; closed on exit. Raises
    :class:`KubeConfigUnavailable` when none is usable."""
    configuration = k8s_client.Configuration()
    try:
        if settings.kubeconfig:
            await k8s_config.load_kube_config(
                config_file=settings.kubeconfig, client_configuration=configuration
            )
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except k8s_config.ConfigException:
                await k8s_config.load_kube_config(client_configuration=configuration)
    except (k8s_config.ConfigException, OSError) as exc:
        tried = (
            f"DEVICESTATE_KUBECONFIG={settings.kubeconfig}"
            if settings.kubeconfig
            else "no DEVICESTATE_KUBECONFIG, not in a cluster, then ~/.kube/config"
        )
        raise KubeConfigUnavailable(
            f"no usable Kubernetes configuration ({tried}): {exc}"
        ) from None
    async with k8s_client.ApiClient(configuration=configuration) as api_client:
        yield api_client
