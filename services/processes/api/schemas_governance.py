"""Request and response models of the governance API (camelCase JSON, RFC 3339 UTC times)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from services.domain.events import now_utc
from services.domain.limits import (
    DNS1123_SUBDOMAIN_PATTERN,
    INVISIBLE_CHARACTERS,
    bidi_control_problem,
    invisible_problem,
    node_name_problem,
)
from services.processes.api.hardening import (
    NODE_MAX_BYTES,
    RESOURCE_ID_MAX_BYTES,
    nested_text_problem,
    text_problem,
)
from services.processes.api.schemas import ApiModel, FleetOut

MAX_REASON = 1024
"""Longest reason, in characters."""
MAX_TTL_SECONDS = 366 * 86400
"""Longest quarantine duration one command may ask for (a year)."""
MIN_TTL_SECONDS = 1
"""Shortest quarantine duration (a second): ``ttlSeconds=5e-324`` would expire as it is made."""
_REASON_CONTROL = (
    "\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u202a-\\u202e\\u2066-\\u2069"
)
REASON_PATTERN = f"^[^{_REASON_CONTROL}]*[^{_REASON_CONTROL}\\s][^{_REASON_CONTROL}]*$"
"""A reason as the schema states it: no control character but tab, LF and CR, no bidi embedding,
override or isolate; not blank."""
RESOURCE_ID_PATTERN = f"^[^\\u0000-\\u001f\\u007f-\\u009f{INVISIBLE_CHARACTERS}]+$"
"""A resourceID as the schema states it: no control, invisible or bidi-control character."""


def _in_utc(value: datetime) -> datetime:
    """``value`` in UTC; a time that has no UTC form (``9999-12-31T23:59:59-14:00`` is in year
    10000 there, ``0001-01-01T00:00:00+14:00`` in year 0) is a ``ValueError`` (a 422), not the
    ``OverflowError`` that ``astimezone`` raises (a 500 wherever the time is converted)."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{value.isoformat()} is out of range: it has no UTC time (years 1 to 9999)"
        ) from None


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_in_utc)]
"""An RFC 3339 time with an offset, converted to UTC (422 for one with no UTC form)."""


class RequestModel(BaseModel):
    """Base of request bodies: camelCase (snake_case accepted too), unknown fields rejected,
    ``NaN``/``Infinity`` refused. No string field may hold U+0000, another C0/C1 control
    character or a lone surrogate (:func:`~services.processes.api.hardening.text_problem`; the fields of
    ``MULTILINE`` may hold tab, LF and CR): the governor stores these values in PostgreSQL."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )
    MULTILINE: ClassVar[frozenset[str]] = frozenset({"reason"})

    @field_validator("*", mode="before")
    @classmethod
    def _no_control_characters(cls, value: Any, info: ValidationInfo) -> Any:
        # Before any other validator: ``str.strip`` would silently drop some of them.
        name = info.field_name or ""
        field = cls.model_fields.get(name)
        label = (field.alias if field is not None else None) or name
        problem = nested_text_problem(label, value, multiline=name in cls.MULTILINE)
        if problem is not None:
            raise ValueError(problem)
        return value


def _reason(value: str, *, required: bool = True) -> str:
    value = value.strip()
    if required and not value:
        raise ValueError("reason must not be empty: say why (it is recorded with the command)")
    if len(value) > MAX_REASON:
        raise ValueError(f"reason is longer than {MAX_REASON} characters")
    problem = bidi_control_problem("reason", value)
    if problem is not None:
        raise ValueError(problem)
    return value


class ReasonIn(RequestModel):
    reason: str = Field(
        description="Why (required, non-empty; recorded with the command).",
        json_schema_extra={"minLength": 1, "maxLength": MAX_REASON, "pattern": REASON_PATTERN},
    )

    @field_validator("reason")
    @classmethod
    def _check_reason(cls, value: str) -> str:
        return _reason(value)


class ExpiryIn(ReasonIn):
    """A quarantine expiry: ``expiresAt`` (RFC 3339 with an offset) or ``ttlSeconds`` from now."""

    expires_at: UtcDatetime | None = Field(
        None, description="When the quarantine ends (RFC 3339 with an offset, in the future)."
    )
    ttl_seconds: float | None = Field(
        None,
        ge=MIN_TTL_SECONDS,
        le=MAX_TTL_SECONDS,
        description="Or: how long from now the quarantine lasts (seconds, 1 to 366 days).",
    )

    @field_validator("expires_at")
    @classmethod
    def _in_the_future(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC)
        now = now_utc()
        if value <= now:
            raise ValueError(f"expiresAt {value.isoformat()} is in the past")
        if value > now + timedelta(seconds=MAX_TTL_SECONDS):
            raise ValueError(
                f"expiresAt {value.isoformat()} is more than {MAX_TTL_SECONDS // 86400} days "
                "from now (the longest quarantine one command may ask for; extend it later)"
            )
        return value

    @model_validator(mode="after")
    def _one_expiry(self) -> ExpiryIn:
        if self.expires_at is not None and self.ttl_seconds is not None:
            raise ValueError("give expiresAt or ttlSeconds, not both")
        return self

    def expiry(self, now: datetime) -> datetime | None:
        """The absolute expiry (UTC), ``None`` when neither field is given."""
        if self.expires_at is not None:
            return self.expires_at
        if self.ttl_seconds is not None:
            return now + timedelta(seconds=self.ttl_seconds)
        return None


class DeviceRefIn(RequestModel):
    """A device as the governor keys it: its node and resourceID (or physical ID), checked as
    the worker checks them (``services.domain.limits``)."""

    node: str = Field(
        min_length=1,
        max_length=NODE_MAX_BYTES,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description="Node name: a DNS-1123 subdomain (lowercase letters, digits, `-` and `.`; at "
        "most 253 characters).",
    )
    resource_id: str = Field(
        alias="resourceID",
        min_length=1,
        max_length=RESOURCE_ID_MAX_BYTES,
        description="Device ID (at most 1024 bytes of UTF-8; no control, invisible or "
        "bidirectional-control character).",
        json_schema_extra={"pattern": RESOURCE_ID_PATTERN},
    )

    @field_validator("node", mode="before")
    @classmethod
    def _node_name(cls, value: Any) -> Any:
        # Before the pattern: its message ("should match pattern") would not say what a name is.
        if isinstance(value, str):
            problem = text_problem("node", value) or node_name_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("resource_id")
    @classmethod
    def _resource_id(cls, value: str) -> str:
        problem = text_problem(
            "resourceID", value, max_bytes=RESOURCE_ID_MAX_BYTES
        ) or invisible_problem("resourceID", value)
        if problem is not None:
            raise ValueError(problem)
        return value


class QuarantineCreateIn(ExpiryIn, DeviceRefIn):
    """Quarantine one device. Without ``expiresAt``/``ttlSeconds`` the quarantine lasts until
    it is released."""


class ExtendIn(ExpiryIn):
    """A new expiry for a quarantine (``expiresAt``, or ``ttlSeconds`` counted from now)."""

    @model_validator(mode="after")
    def _expiry_required(self) -> ExtendIn:
        if self.expires_at is None and self.ttl_seconds is None:
            raise ValueError("give the new expiry: expiresAt or ttlSeconds")
        return self


class ReleaseIn(ReasonIn):
    break_glass: bool = Field(
        False,
        description="Release a system quarantine that has not passed recovery (admin only).",
    )


class ResumeIn(RequestModel):
    reason: str = Field(
        "",
        description="Why (optional).",
        json_schema_extra={"maxLength": MAX_REASON, "pattern": f"^[^{_REASON_CONTROL}]*$"},
    )

    @field_validator("reason")
    @classmethod
    def _check_reason(cls, value: str) -> str:
        return _reason(value, required=False)


CommandStatus = Literal["pending", "accepted", "rejected"]


class CommandOut(ApiModel):
    """A command and, once the governor decided it, its outcome."""

    command_id: str = Field(alias="commandID")
    status: CommandStatus = Field(
        description="pending (appended to the log, not decided yet), accepted or rejected."
    )
    action: str | None = None
    actor: str | None = None
    accepted: bool | None = Field(None, description="null while pending.")
    reason: str | None = Field(None, description="The governor's reason (rejections say why).")
    quarantine_id: str | None = Field(
        None, alias="quarantineID", description="The quarantine the command created or changed."
    )
    seq: int | None = Field(None, description="Governance-topic offset of the command.")
    detail: str | None = Field(None, description="A readable summary of the outcome.")


class QuarantineOut(ApiModel):
    quarantine_id: str = Field(alias="quarantineID")
    node: str
    resource_id: str = Field(alias="resourceID")
    resource_claim: str | None
    kind: str = Field(description="system (from an Unhealthy observation) or manual.")
    status: str = Field(description="active, recovering or released.")
    reason: str
    actor: str
    created_at: datetime
    expires_at: datetime | None
    released_at: datetime | None
    release_reason: str | None
    released_by: str | None
    confirmed_fault: bool
    lease_holder: str | None
    fencing_token: int
    lease_expires_at: datetime | None
    recovery_stage: str | None
    recovery_attempts: int

    @classmethod
    def of(cls, row: dict[str, Any]) -> QuarantineOut:
        return cls(**{k: row[k] for k in cls.model_fields})


class QuarantinePageOut(ApiModel):
    items: list[QuarantineOut] = Field(description="Newest first.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )


class TimelineItemOut(ApiModel):
    kind: Literal["observation", "decision"]
    time: datetime = Field(
        description="observedAt of an observation; the governor's event time of a decision."
    )
    fields: dict[str, Any]


class TimelineOut(ApiModel):
    node: str
    resource_id: str = Field(alias="resourceID")
    items: list[TimelineItemOut] = Field(description="Oldest first.")


class BreakerOut(ApiModel):
    open: bool
    opened_at: datetime | None
    incident: str | None


class AutomationOut(ApiModel):
    paused: bool
    paused_by: str | None
    reason: str | None


class WatchOut(ApiModel):
    """Whether the governor holds the Kubernetes watch stale (issue 15): on event time, from the
    watcher's ticks (``watchSeenAt``: when its quietest watch last delivered an event, BOOKMARK or
    LIST). A stale watch turns no device Unknown."""

    stale: bool = Field(description="True from WatchStale until WatchFresh.")
    last_seen_at: datetime | None = Field(
        description="Event time (UTC) of the watch's last delivery the governor knows."
    )
    incident: str | None = Field(description="The open `watch-stale/...` incident, if stale.")


class NodeIncidentOut(ApiModel):
    """An open node incident: devices of one node that faulted together (issue 15)."""

    node: str
    incident: str = Field(description="`node-fault/<node>/<first fault time>`.")
    opened_at: datetime = Field(description="Event time (UTC) it opened.")
    devices: list[str] = Field(description="resourceIDs in it, sorted.")


class FleetGovernanceOut(ApiModel):
    """The fleet-level governance state: breaker, pause, watch freshness, open node incidents."""

    governor_seen: bool = Field(description="False until the governor wrote its fleet state.")
    breaker: BreakerOut
    automation: AutomationOut
    watch: WatchOut
    node_incidents: list[NodeIncidentOut] = Field(description="Open ones, by node.")


class FleetStatusOut(FleetOut):
    """``GET /v1/fleet``: device counts, and the fleet-level governance state (issue 15)."""

    governance: FleetGovernanceOut


class GovernanceOut(ApiModel):
    """Fleet governance status."""

    governor_seen: bool = Field(description="False until the governor wrote its fleet state.")
    watermark: datetime | None = Field(
        description="Event time up to which the governor has every partition's observations."
    )
    watermarks: dict[str, datetime] = Field(description="Per device-health topic partition.")
    pending: int = Field(
        0,
        description="Forwarded records the event-time merge holds until every partition's "
        "watermark has passed them.",
    )
    clamped: int = Field(
        0,
        description="Records whose observedAt ran more than DEVICESTATE_MAX_CLOCK_SKEW_SECONDS "
        "ahead of the broker's append time: their event time was clamped to that bound.",
    )
    last_clamped_at: datetime | None = Field(
        None, description="Event time (the bound) of the last clamped record."
    )
    watermark_age_seconds: float | None = Field(description="Wall clock minus the watermark.")
    stale: bool = Field(
        description="True when the watermark lags the wall clock by more than "
        "`staleThresholdSeconds` (or is unknown): decisions are based on old observations."
    )
    stale_since: datetime | None = Field(description="Observations are stale since this time.")
    stale_threshold_seconds: float
    message: str = Field(description="The status in one sentence.")
    breaker: BreakerOut
    automation: AutomationOut
    active_quarantines: int = Field(description="Quarantines active or recovering.")
    deferred: int = Field(description="Devices whose restriction waits for a limit.")
    nodes_heartbeat_lost: int
    devices: int = Field(description="Devices the governor knows.")
    devices_by_state: dict[str, int]
    watch: WatchOut | None = Field(None, description="The watch's freshness (issue 15).")
    node_incidents: list[NodeIncidentOut] = Field(
        default_factory=list, description="Open node incidents (issue 15), by node."
    )
