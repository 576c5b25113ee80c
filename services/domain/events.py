"""The event model: what the watcher publishes and the stream worker applies.

Events are frozen dataclasses serialised as JSON objects with a ``schema`` number and a ``type``
name (the wire form is :mod:`services.domain.event_codec`). Field names on the wire are camelCase,
as in the Kubernetes API they come from. Times are UTC and serialised as RFC 3339 with a ``Z``
suffix. ``statusVersion`` is the Pod's
``metadata.resourceVersion`` (comparable as an integer since Kubernetes 1.35, KEP-5504); it is
written as a decimal string because real values exceed 2**53 and JSON numbers are doubles for many
consumers.

Schema history:

- 1: ``DeviceHealthObserved``, ``PodDevicesReleased``; ``PodsListed`` (issue 11 item 7) is a new
  type of the same schema: a consumer that predates it dead-letters it as an unknown type.
  ``DeviceHealthObserved.podTerminated`` (issue 15 item 2) is an optional boolean of the same
  schema, written only when true: the observation comes from a Pod in a terminal phase. A consumer
  that predates it ignores the key (and so takes a frozen Healthy as fresh evidence).
- 2: ``DeviceHealthObservations`` (issue 12, :mod:`services.domain.observations`): the
  observations of one Pod status change in one record. Schema-1 records are still written (every
  other type, and a change of one device) and read; a consumer that predates schema 2
  dead-letters such a record whole.

Decoding (:func:`services.domain.event_codec.decode_event`) never guesses: a payload that is not
valid JSON, has an unknown ``schema`` or ``type``, or lacks a required field raises
:class:`~services.domain.codec.EventDecodeError`, whose message the worker puts on the dead-letter record.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final, TypeAlias

SCHEMA_VERSION: Final = 1
"""Current event schema number, written in every event's ``schema`` field."""

MESSAGE_MAX_LENGTH: Final = 1024
"""core/v1 ``ResourceHealthMessageMaxLength``: longer messages are cut to this many characters."""


class Health(StrEnum):
    """Device health as the API defines it (core/v1 ``ResourceHealthStatus``, KEP-4680).

    The values are case-sensitive; anything else is recorded as ``Unknown`` with the raw value kept
    in ``DeviceHealthObserved.raw_health``.
    """

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


class DeviceSource(StrEnum):
    """Who allocated the device: a device plugin (``name`` is an extended resource name) or DRA
    (``name`` is ``claim:<podClaimName>[/<request>]``)."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


class ContainerKind(StrEnum):
    """Which Pod status list a container came from: ``containerStatuses`` (regular) or
    ``initContainerStatuses`` (init, including native sidecars)."""

    REGULAR = "regular"
    INIT = "init"


class ReleaseReason(StrEnum):
    """Why a Pod's devices were released."""

    DELETED = "deleted"  # DELETED watch event, or the Pod vanished between two LISTs
    TERMINATED = "terminated"  # status.phase became Succeeded or Failed


@dataclass(frozen=True, slots=True, order=True)
class ContainerRef:
    """One container of the Pod that reports the device."""

    name: str
    kind: ContainerKind = ContainerKind.REGULAR


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """DRA claim behind an ``allocatedResourcesStatus`` entry named ``claim:<podClaimName>[/<request>]``.

    ``resource_claim_name`` is the ResourceClaim object's name, from
    ``pod.status.resourceClaimStatuses[]`` (``None`` when the Pod status does not list it).
    """

    pod_claim_name: str
    request: str | None = None
    resource_claim_name: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceHealthObserved:
    """Health of one allocated device as one Pod's status reports it.

    One event per (Pod, resourceID): when several containers of the Pod report the same device
    (shared DRA claims, sidecars; KEP-4680 allows it) they are listed together in ``containers``
    rather than sent as several events.

    Dedup key: ``(node, resource_id, status_version)``. ``status_version`` is ``None`` when the Pod's
    resourceVersion was missing or not an integer; such an observation is *unordered*: it may create
    a device's first state but never overwrites state that came from an ordered observation.

    ``pod_terminated``: the Pod's ``status.phase`` was ``Succeeded`` or ``Failed``. Such a Pod
    holds no device, so the observation adds no allocation. An Unhealthy or Unknown of a
    terminated Pod (a post-mortem kubelet update, kubernetes PR #135202) is a real fault and is
    applied; a Healthy one is :attr:`frozen`.
    """

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    containers: tuple[ContainerRef, ...]
    resource_name: str
    resource_id: str
    health: Health
    source: DeviceSource
    status_version: int | None
    observed_at: datetime
    message: str | None = None
    raw_health: str | None = None
    claim: ClaimRef | None = None
    flags: tuple[str, ...] = ()
    pod_terminated: bool = False
    type: str = field(default="DeviceHealthObserved", init=False)

    @property
    def frozen(self) -> bool:
        """A Healthy reported by a terminated Pod: kubelet stops updating a terminated Pod's
        ``allocatedResourcesStatus`` (KEP-4680 known limitation, kubernetes#132978), so it is no
        fresh evidence of health. The directory records it in the device's history and changes
        nothing else; no governance rule sees it."""
        return self.pod_terminated and self.health is Health.HEALTHY

    @property
    def device_key(self) -> tuple[str, str]:
        """``(node, resourceID)``: the key of the device in the directory."""
        return (self.node, self.resource_id)


@dataclass(frozen=True, slots=True)
class PodDevicesReleased:
    """A Pod no longer holds its devices: it was deleted or reached a terminal phase.

    Releases remove the Pod's allocations from the directory; they never change a device's health.
    ``resource_ids`` lists the devices the watcher last saw the Pod report (possibly empty);
    the projection releases every allocation of ``pod_uid`` on ``node`` whatever the list says.
    """

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    reason: ReleaseReason
    status_version: int | None
    observed_at: datetime
    resource_ids: tuple[str, ...] = ()
    type: str = field(default="PodDevicesReleased", init=False)


@dataclass(frozen=True, slots=True)
class PodsListed:
    """The Pods one LIST of the watcher found on one node: a snapshot (issue 11 item 7).

    ``pod_uids`` (sorted) are the UIDs of the listed Pods whose ``spec.nodeName`` is ``node``
    and whose UID lies in ``[uid_from, uid_to)`` (``uid_to`` ``None``: no upper bound), so a node
    whose snapshot does not fit one record is sent as several self-sufficient chunks covering
    disjoint UID ranges (:func:`services.domain.record_size.fit_events`). ``list_version`` is
    the LIST's ``metadata.resourceVersion`` (``None``: missing or not an integer);
    ``observed_at`` (UTC) the watcher time of the LIST.

    The fold (:func:`services.domain.directory.apply_snapshot`) releases every allocation on
    ``node`` of a Pod in the range that the snapshot does not list and that was observed at or
    before ``list_version``: the Pod vanished before the LIST (deleted while the watcher was
    down). An allocation observed after the LIST (a Pod created after it) is kept.
    """

    node: str
    list_version: int | None
    observed_at: datetime
    pod_uids: tuple[str, ...] = ()
    uid_from: str = ""
    uid_to: str | None = None
    type: str = field(default="PodsListed", init=False)

    @property
    def status_version(self) -> int | None:
        """The ordering key of the snapshot, as of the other events: ``list_version``."""
        return self.list_version

    def __post_init__(self) -> None:
        # Sorted, so that lists() is a binary search (a node may list thousands of Pods).
        if any(a > b for a, b in zip(self.pod_uids, self.pod_uids[1:], strict=False)):
            object.__setattr__(self, "pod_uids", tuple(sorted(self.pod_uids)))

    def covers(self, pod_uid: str) -> bool:
        """Whether ``pod_uid`` lies in this snapshot's UID range."""
        return pod_uid >= self.uid_from and (self.uid_to is None or pod_uid < self.uid_to)

    def lists(self, pod_uid: str) -> bool:
        """Whether the LIST found ``pod_uid`` on the node."""
        uids = self.pod_uids
        at = bisect_left(uids, pod_uid)
        return at < len(uids) and uids[at] == pod_uid


Event: TypeAlias = DeviceHealthObserved | PodDevicesReleased | PodsListed


# --- time and resourceVersion helpers ---------------------------------------------------------


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix and at most microsecond precision.

    Raises ``ValueError`` for a naive datetime (no tzinfo): every time in the model is aware.
    """
    if value.tzinfo is None:
        raise ValueError("naive datetime: times in devicestate events must be timezone-aware")
    text = value.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def now_utc() -> datetime:
    """The wall clock in UTC. Only adapters (the watcher stamping ``observedAt``) may call it; the
    domain core takes every time from events."""
    return datetime.now(UTC)
