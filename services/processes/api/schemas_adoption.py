"""Request and response models of the DRA adoption endpoints (issue 16): ``POST /v1/adoption``
declares a pool's phase, ``GET /v1/adoption`` gives each pool's phase, history and gate. camelCase
JSON, times RFC 3339 UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field, field_validator, model_validator

from services.domain.adoption.gate import PoolGate, Reason, Verdict
from services.domain.governance.adoption import (
    MAX_NODES,
    MAX_POOL_NAME,
    AdoptionDeclaration,
    Declared,
    Phase,
    PoolSelector,
    PoolState,
    pool_name_problem,
)
from services.processes.api.schemas import ApiModel
from services.processes.api.schemas_governance import ReasonIn, RequestModel
from services.processes.api.schemas_labels import LabelSelectorIn, LabelSelectorOut

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = f"{_LABEL}(\\.{_LABEL})*"
NameField = Annotated[str, Field(min_length=1, max_length=253, pattern=f"^{_SUBDOMAIN}$")]
"""A Kubernetes object name (DNS subdomain): a driver, node or DeviceClass."""
SlicePoolField = Annotated[
    str, Field(min_length=1, max_length=253, pattern=f"^{_SUBDOMAIN}(/{_SUBDOMAIN})*$")
]
"""A ResourceSlice pool name: DNS subdomains separated by slashes (``spec.pool.name``)."""


class SelectorIn(RequestModel):
    """The pool's nodes: where a DRA driver's ResourceSlices (of one pool, with ``slicePool``)
    publish, or nodes named explicitly; ``labelSelector`` alone (every node whose labels match)
    or with ``driver`` (the driver's nodes that match). The shape ``GET /v1/adoption`` gives (``driver``,
    ``slicePool``, ``nodes``, with nulls and an empty list for what is not set) is accepted back."""

    # The rules of ``_one_kind`` as the schema states them (three shapes).
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["driver"],
                    "properties": {"driver": {"type": "string"}, "nodes": {"maxItems": 0}},
                },
                {
                    "required": ["nodes"],
                    "properties": {
                        "nodes": {"minItems": 1},
                        "driver": {"type": "null"},
                        "slicePool": {"type": "null"},
                        "labelSelector": {"type": "null"},
                    },
                },
                {
                    "required": ["labelSelector"],
                    "properties": {
                        "labelSelector": {"$ref": "#/components/schemas/LabelSelectorIn"},
                        "nodes": {"maxItems": 0},
                        "slicePool": {"type": "null"},
                    },
                },
            ]
        }
    )

    driver: NameField | None = Field(
        None, description="DRA driver name (ResourceSlice `spec.driver`)."
    )
    slice_pool: SlicePoolField | None = Field(
        None, description="ResourceSlice `spec.pool.name` (with `driver` only)."
    )
    nodes: list[NameField] = Field(
        default_factory=list, description="Node names of the pool.", max_length=MAX_NODES
    )
    label_selector: LabelSelectorIn | None = Field(
        None,
        description="Node labels (`metav1.LabelSelector`), alone or with `driver` (not with "
        "`nodes`).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> SelectorIn:
        if self.driver is None and not self.nodes and self.label_selector is None:
            raise ValueError(
                "selector: give `driver` (and optionally `slicePool`), `nodes` or `labelSelector`"
            )
        if self.driver is not None and self.nodes:
            raise ValueError("selector: `driver` or `nodes`, not both")
        if self.label_selector is not None and self.nodes:
            raise ValueError("selector: `labelSelector` or `nodes`, not both")
        if self.slice_pool is not None and self.driver is None:
            raise ValueError("selector: `slicePool` needs `driver`")
        return self


class AdoptionIn(ReasonIn):
    """A pool's declared phase and the nodes it holds."""

    pool: str = Field(
        description="The pool's name: a DNS subdomain (dot-separated DNS labels) of at most 63 "
        "characters, as it names the rollback policy (`devicestate-adoption-rollback-<pool>`) "
        "and labels it.",
        # Stated for the schema, checked by `_pool_name` (whose 422 says the rule in words,
        # not the regex pydantic would print).
        json_schema_extra={"maxLength": MAX_POOL_NAME, "pattern": f"^{_SUBDOMAIN}$"},
    )
    phase: Phase = Field(description="plugin, canary, dra or rolled-back.")
    selector: SelectorIn = Field(
        description="`{driver, slicePool?, labelSelector?}`, `{labelSelector}` or `{nodes}`."
    )
    device_class: NameField | None = Field(None, description="The DeviceClass the pool moves to.")

    @field_validator("pool")
    @classmethod
    def _pool_name(cls, pool: str) -> str:
        problem = pool_name_problem(pool)
        if problem is not None:
            raise ValueError(problem)
        return pool

    def declaration(self) -> AdoptionDeclaration:
        """The domain's declaration (the schema already holds it to the domain's rules)."""
        sel = self.selector
        labels = None if sel.label_selector is None else sel.label_selector.selector()
        if sel.driver is not None or labels is not None:
            selector = PoolSelector(driver=sel.driver, pool=sel.slice_pool, labels=labels)
        else:
            selector = PoolSelector(nodes=tuple(sel.nodes))
        return AdoptionDeclaration(self.pool, selector, self.phase, self.device_class)


class SelectorOut(ApiModel):
    driver: str | None
    slice_pool: str | None
    nodes: list[str]
    label_selector: LabelSelectorOut | None = None


class DeclaredOut(ApiModel):
    seq: int = Field(description="The decision's place on the governance log.")
    at: datetime = Field(description="Event time of the declaration (UTC).")
    phase: Phase
    actor: str
    reason: str

    @classmethod
    def of(cls, d: Declared) -> DeclaredOut:
        return cls(seq=d.seq, at=d.at, phase=d.declaration.phase, actor=d.actor, reason=d.reason)


class ReasonOut(ApiModel):
    code: str = Field(description="The signal (docs/dra-adoption.md).")
    verdict: Verdict
    detail: str
    figures: dict[str, int | float | str | None]

    @classmethod
    def of(cls, r: Reason) -> ReasonOut:
        return cls(code=r.code, verdict=r.verdict, detail=r.detail, figures=dict(r.figures))


class RecordedVerdictOut(ApiModel):
    verdict: Verdict = Field(description="The verdict the governor last recorded for the pool.")
    at: datetime = Field(description="Event time of that AdoptionVerdictChanged decision (UTC).")
    decision_id: str = Field(description="The decision's id (`<seq>.<index>`).")


class PoolOut(ApiModel):
    pool: str
    phase: Phase
    since: datetime = Field(description="When the pool entered its phase (UTC event time).")
    selector: SelectorOut
    device_class: str | None
    nodes: list[str] = Field(description="The nodes the selector matches now.")
    verdict: Verdict = Field(description="The gate: expand, hold or rollback.")
    reasons: list[ReasonOut] = Field(description="Every signal read, with its verdict and figures.")
    history: list[DeclaredOut] = Field(description="The pool's declarations, oldest first.")
    recorded: RecordedVerdictOut | None = Field(
        None,
        description="The governor's own evaluation on event time (its last "
        "AdoptionVerdictChanged decision; null: none yet). `verdict` is evaluated on read.",
    )

    @classmethod
    def of(
        cls, state: PoolState, gate: PoolGate, recorded: RecordedVerdictOut | None = None
    ) -> PoolOut:
        decl = state.current.declaration
        return cls(
            pool=state.pool,
            phase=state.phase,
            since=state.since,
            selector=SelectorOut(
                driver=decl.selector.driver,
                slice_pool=decl.selector.pool,
                nodes=list(decl.selector.nodes),
                label_selector=None
                if decl.selector.labels is None
                else LabelSelectorOut.of(decl.selector.labels),
            ),
            device_class=decl.device_class,
            nodes=list(gate.nodes),
            verdict=gate.verdict,
            reasons=[ReasonOut.of(r) for r in gate.reasons],
            history=[DeclaredOut.of(d) for d in state.history],
            recorded=recorded,
        )


class AdoptionOut(ApiModel):
    event_time: datetime | None = Field(
        description="The governor's event time the gate was evaluated at (UTC; null: none yet)."
    )
    pools: list[PoolOut]
