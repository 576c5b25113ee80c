"""The watcher's LIST/WATCH calls, one resource each, over :class:`~.list_watch.RawListWatch`:
Pods in all namespaces (:class:`KubernetesPodApi`), node Leases, Nodes, and the DRA inventory
(resource.k8s.io/v1: ResourceSlices, ResourceClaims in all namespaces, DeviceClasses), each a
:class:`KubernetesObjectApi` of one ``object_kind``.

They implement the watcher's ports (``watcher.pod_source.PodApi``,
``watcher.node_source.ObjectApi``): both calls raise only ``ResourceExpired``,
``ApiUnavailable`` or ``ApiRejected`` (``ResourceNotServed`` for a 404), never a client
library's exception. RBAC: ``list`` and ``watch`` of each resource (``deploy/``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from kubernetes_asyncio import client as k8s_client

from services.adapters.kube.client import ApiClient
from services.adapters.kube.list_watch import LIST_PAGE_SIZE, ListCall, ObjectList, RawListWatch
from services.domain.inventory.events import InventoryKind
from services.runtime.config import WatchSettings

LEASE: Final = "Lease"
NODE: Final = "Node"
RESOURCE_SLICE: Final = InventoryKind.RESOURCE_SLICE.value
RESOURCE_CLAIM: Final = InventoryKind.RESOURCE_CLAIM.value
DEVICE_CLASS: Final = InventoryKind.DEVICE_CLASS.value


class KubernetesPodApi:
    """Pods in all namespaces (``CoreV1Api.list_pod_for_all_namespaces``); selectors come from
    ``settings.label_selector``/``field_selector``."""

    def __init__(
        self, api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
    ) -> None:
        selectors = {}
        if settings.label_selector:
            selectors["label_selector"] = settings.label_selector
        if settings.field_selector:
            selectors["field_selector"] = settings.field_selector
        self._raw = RawListWatch(
            k8s_client.CoreV1Api(api_client).list_pod_for_all_namespaces,
            settings,
            page_size=page_size,
            params=selectors,
        )

    async def list_pods(self) -> ObjectList:
        """LIST every Pod (all pages)."""
        return await self._raw.list_all()

    def watch_pods(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH Pods from ``resource_version``: the raw lines of the body."""
        return self._raw.watch(resource_version)


class KubernetesObjectApi:
    """LIST and WATCH of one kind of object over one kubernetes-asyncio list call."""

    def __init__(
        self,
        object_kind: str,
        call: ListCall,
        settings: WatchSettings,
        *,
        page_size: int = LIST_PAGE_SIZE,
        params: dict[str, Any] | None = None,
    ) -> None:
        self._object_kind = object_kind
        self._raw = RawListWatch(call, settings, page_size=page_size, params=params)

    @property
    def object_kind(self) -> str:
        """The objects' ``kind`` (``Lease``, ``Node``, ``ResourceSlice``...)."""
        return self._object_kind

    async def list_objects(self) -> ObjectList:
        """LIST every object (all pages)."""
        return await self._raw.list_all()

    def watch_objects(self, resource_version: str | None) -> AsyncIterator[bytes]:
        """WATCH from ``resource_version``: the raw lines of the body."""
        return self._raw.watch(resource_version)


def lease_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """Leases in ``settings.lease_namespace`` (``CoordinationV1Api.list_namespaced_lease``)."""
    coordination = k8s_client.CoordinationV1Api(api_client)
    return KubernetesObjectApi(
        LEASE,
        coordination.list_namespaced_lease,
        settings,
        page_size=page_size,
        params={"namespace": settings.lease_namespace},
    )


def node_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All Nodes (``CoreV1Api.list_node``)."""
    return KubernetesObjectApi(
        NODE, k8s_client.CoreV1Api(api_client).list_node, settings, page_size=page_size
    )


def resource_slice_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All ResourceSlices (``ResourceV1Api.list_resource_slice``, cluster-scoped)."""
    return KubernetesObjectApi(
        RESOURCE_SLICE,
        k8s_client.ResourceV1Api(api_client).list_resource_slice,
        settings,
        page_size=page_size,
    )


def resource_claim_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """ResourceClaims in all namespaces (``ResourceV1Api.list_resource_claim_for_all_namespaces``)."""
    return KubernetesObjectApi(
        RESOURCE_CLAIM,
        k8s_client.ResourceV1Api(api_client).list_resource_claim_for_all_namespaces,
        settings,
        page_size=page_size,
    )


def device_class_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All DeviceClasses (``ResourceV1Api.list_device_class``, cluster-scoped)."""
    return KubernetesObjectApi(
        DEVICE_CLASS,
        k8s_client.ResourceV1Api(api_client).list_device_class,
        settings,
        page_size=page_size,
    )


DEVICE_TAINT_RULE: Final = "DeviceTaintRule"


def device_taint_rule_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All DeviceTaintRules (``ResourceV1beta2Api.list_device_taint_rule``, cluster-scoped;
    ``resource.k8s.io/v1beta2``, served in 1.36 only with the ``DRADeviceTaintRules`` gate and
    that API version enabled: the watcher treats it as optional)."""
    return KubernetesObjectApi(
        DEVICE_TAINT_RULE,
        k8s_client.ResourceV1beta2Api(api_client).list_device_taint_rule,
        settings,
        page_size=page_size,
    )


EVENT: Final = "Event"
EVENT_FIELD_SELECTOR: Final = "involvedObject.kind=Pod,type=Warning"
"""The Events the watcher reads: Warnings about Pods (the kubelet's
``FailedPrepareDynamicResources``/``FailedUnprepareDynamicResources``, the scheduler's
``FailedScheduling``); the API server filters, so Normal Events and other kinds' never reach the
watcher's memory."""


def event_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """Warning Events about Pods in all namespaces (``CoreV1Api.list_event_for_all_namespaces``,
    core/v1, field selector :data:`EVENT_FIELD_SELECTOR`). core/v1 rather than
    events.k8s.io/v1: the same objects (one storage), and the kubelet writes through the core/v1
    recorder (``count``, ``source.host`` = its node) while the scheduler's events.k8s.io/v1
    ``series`` shows there as ``series.count``; both readable in one shape."""
    return KubernetesObjectApi(
        EVENT,
        k8s_client.CoreV1Api(api_client).list_event_for_all_namespaces,
        settings,
        page_size=page_size,
        params={"field_selector": EVENT_FIELD_SELECTOR},
    )


NAMESPACE: Final = "Namespace"


def namespace_api(
    api_client: ApiClient, settings: WatchSettings, *, page_size: int = LIST_PAGE_SIZE
) -> KubernetesObjectApi:
    """All Namespaces (``CoreV1Api.list_namespace``, cluster-scoped): the watcher keeps only
    whether each carries the admin-access label (KEP-5018, the gate's ``tenant-boundary``)."""
    return KubernetesObjectApi(
        NAMESPACE, k8s_client.CoreV1Api(api_client).list_namespace, settings, page_size=page_size
    )
