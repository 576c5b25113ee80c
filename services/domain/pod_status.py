"""What one Pod's status says about its devices: :class:`PodReading`, the observations and the
:class:`Problem` list, with their codes (:class:`ProblemCode`) and which of them dead-letter
the Pod. :func:`services.domain.pod_reader.read_pod` makes a reading from the Pod's raw JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from services.domain.events import DeviceHealthObserved

CLAIM_PREFIX: Final = "claim:"
"""Prefix of a DRA entry name: ``claim:<podClaimName>[/<request>]`` (KEP-4680)."""

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
"""``status.phase`` values after which the Pod holds no device (core/v1 ``PodPhase``)."""


class ProblemCode(StrEnum):
    """What :func:`~services.domain.pod_reader.read_pod` skipped or flagged. The flag codes also
    appear in ``DeviceHealthObserved.flags`` of the observation they concern."""

    # skipped: the entry or resource yields no observation
    MISSING_NAME = "missing-name"
    MISSING_RESOURCE_ID = "missing-resource-id"
    MISSING_CONTAINER_NAME = "missing-container-name"
    MALFORMED_STATUS = "malformed-status"  # a list or object of the wrong JSON type
    # flagged: the observation is kept and carries the code in its flags
    UNRECOGNIZED_HEALTH = "unrecognized-health"
    MISSING_HEALTH = "missing-health"
    MESSAGE_TRUNCATED = "message-truncated"
    STATUS_FOR_UNKNOWN_CONTAINER = "status-for-unknown-container"
    DUPLICATE_RESOURCE_ID = "duplicate-resource-id"
    CONFLICTING_MESSAGE = "conflicting-message"
    CONTAINERS_TRUNCATED = "containers-truncated"  # too many to fit one record (record_size)
    # rejected: the watcher dead-letters the Pod
    CONFLICTING_HEALTH = "conflicting-health"
    MISSING_NODE_NAME = "missing-node-name"
    MISSING_UID = "missing-uid"
    INVALID_FIELD = "invalid-field"  # a value the projection cannot store (see domain/limits.py)
    # warning only: observations are emitted, unordered
    UNORDERED_RESOURCE_VERSION = "unordered-resource-version"


DEAD_LETTER_CODES: Final = frozenset(
    {
        ProblemCode.CONFLICTING_HEALTH,
        ProblemCode.MISSING_NODE_NAME,
        ProblemCode.MISSING_UID,
        ProblemCode.INVALID_FIELD,
    }
)
"""Problems that lose device information no flag can carry: the watcher dead-letters the Pod's
original bytes so a person can look at it."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing :func:`~services.domain.pod_reader.read_pod` skipped or flagged: a stable
    ``code`` for counting and a ``message`` for people (names the container, entry and resourceID
    concerned)."""

    code: ProblemCode
    message: str


@dataclass(frozen=True, slots=True)
class PodReading:
    """What one Pod object says about its devices.

    ``node`` is ``spec.nodeName`` (``None`` when unscheduled); ``status_version`` is
    ``metadata.resourceVersion`` parsed per KEP-5504 (``None``: missing or not comparable);
    ``observations`` are sorted by resourceID, at most one per resourceID; ``observed_at`` is the
    watcher time (UTC) passed to :func:`~services.domain.pod_reader.read_pod`.
    """

    node: str | None
    namespace: str
    name: str
    uid: str
    status_version: int | None
    phase: str | None
    observed_at: datetime
    observations: tuple[DeviceHealthObserved, ...]
    problems: tuple[Problem, ...]

    @property
    def terminal(self) -> bool:
        """True once ``status.phase`` is ``Succeeded`` or ``Failed``."""
        return self.phase in TERMINAL_PHASES

    @property
    def rejected(self) -> bool:
        """True when a problem in :data:`DEAD_LETTER_CODES` was found."""
        return any(p.code in DEAD_LETTER_CODES for p in self.problems)

    @property
    def ref(self) -> str:
        """``namespace/name`` for logs and problem messages."""
        return f"{self.namespace}/{self.name}"
