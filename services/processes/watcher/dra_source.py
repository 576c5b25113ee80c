"""LIST then WATCH the DRA inventory (resource.k8s.io/v1): ResourceSlices, ResourceClaims in all
namespaces, DeviceClasses, with the node loops' machinery (``node_source``).

Each is an :class:`~services.processes.watcher.node_source.ObjectSource` over a
:class:`~services.processes.watcher.node_source.KubernetesObjectApi` (raw JSON, resume from the last
resourceVersion, bookmarks, a re-LIST after 410 Gone, backoff on errors), started *optional*: on a
cluster without resource.k8s.io/v1 (404) the loop logs a warning and ends; the watcher goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from kubernetes_asyncio import client as k8s_client

from services.domain.inventory.events import InventoryKind
from services.processes.watcher.kube_source import LIST_PAGE_SIZE
from services.processes.watcher.node_source import KubernetesObjectApi
from services.runtime.config import Settings

RESOURCE_SLICE: Final = InventoryKind.RESOURCE_SLICE.value
RESOURCE_CLAIM: Final = InventoryKind.RESOURCE_CLAIM.value
DEVICE_CLASS: Final = InventoryKind.DEVICE_CLASS.value


def resource_slice_api(
    api_client: k8s_client.ApiClient, settings: Settings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All ResourceSlices (``ResourceV1Api.list_resource_slice``, cluster-scoped)."""
    return KubernetesObjectApi(
        RESOURCE_SLICE,
        k8s_client.ResourceV1Api(api_client).list_resource_slice,
        settings,
        page_size=page_size,
    )


def resource_claim_api(
    api_client: k8s_client.ApiClient, settings: Settings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """ResourceClaims in all namespaces (``ResourceV1Api.list_resource_claim_for_all_namespaces``)."""
    return KubernetesObjectApi(
        RESOURCE_CLAIM,
        k8s_client.ResourceV1Api(api_client).list_resource_claim_for_all_namespaces,
        settings,
        page_size=page_size,
    )


def device_class_api(
    api_client: k8s_client.ApiClient, settings: Settings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All DeviceClasses (``ResourceV1Api.list_device_class``, cluster-scoped)."""
    return KubernetesObjectApi(
        DEVICE_CLASS,
        k8s_client.ResourceV1Api(api_client).list_device_class,
        settings,
        page_size=page_size,
    )


DRA_APIS: Final[tuple[Callable[[k8s_client.ApiClient, Settings], KubernetesObjectApi], ...]] = (
    device_class_api,
    resource_slice_api,
    resource_claim_api,
)
"""The three DRA watches, in the order the watcher starts them."""
