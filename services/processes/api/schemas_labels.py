"""The label selector of ``POST /v1/adoption`` and ``GET /v1/adoption`` (issue 16, pools selected
by node labels): ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``) as the OpenAPI
document states it, so that the document allows exactly what the API accepts:

- a key is ``[prefix/]name`` (:data:`KEY_PATTERN`: the name bounded to 63 characters in the
  pattern, the whole key to 253 characters, so a prefix never exceeds Kubernetes' 253);
- a value is empty or at most 63 characters (:data:`VALUE_PATTERN`);
- each requirement is one of two shapes, told apart by ``operator``: ``In``/``NotIn`` with 1 to
  64 values, ``Exists``/``DoesNotExist`` with none;
- at most 32 ``matchLabels`` and 32 ``matchExpressions``, and at least one of them (an empty
  selector would match every node: the document says so with an ``anyOf``).

The domain's validation (:mod:`services.domain.labels`) accepts everything these models do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from services.domain.labels import (
    MAX_EXPRESSIONS,
    MAX_MATCH_LABELS,
    MAX_VALUES,
    LabelSelector,
    Operator,
    Requirement,
)
from services.processes.api.schemas import ApiModel
from services.processes.api.schemas_governance import RequestModel

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
KEY_PATTERN = rf"^({_PREFIX}/)?{_NAME}$"
"""A label key: an optional DNS-subdomain prefix and ``/``, then a name of at most 63."""
VALUE_PATTERN = rf"^({_NAME})?$"
"""A label value: empty, or a name of at most 63 characters."""
MAX_KEY = 253
"""Longest key the API takes (Kubernetes allows 253 + 1 + 63; a selector's keys stay shorter)."""

LabelKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_KEY,
        pattern=KEY_PATTERN,
        description="A label key, `[prefix/]name`.",
    ),
]
LabelValue = Annotated[
    str, Field(max_length=63, pattern=VALUE_PATTERN, description="A label value (may be empty).")
]


class _RequirementModel(BaseModel):
    """A request body part like :class:`RequestModel`, without its character check (a
    ``mode='before'`` validator that a discriminated union's tag cannot have): every field
    here is held by a pattern that admits no control character."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, extra="forbid", frozen=True
    )


class SetRequirementIn(_RequirementModel):
    """``key`` ``In``/``NotIn`` ``values`` (1 to 64 values)."""

    key: LabelKey
    operator: Literal["In", "NotIn"]
    values: list[LabelValue] = Field(min_length=1, max_length=MAX_VALUES)


class ExistsRequirementIn(_RequirementModel):
    """``key`` ``Exists``/``DoesNotExist`` (no values)."""

    key: LabelKey
    operator: Literal["Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list, max_length=0)


RequirementIn = Annotated[SetRequirementIn | ExistsRequirementIn, Field(discriminator="operator")]


def _describe(schema: dict[str, Any]) -> None:
    """State the rules pydantic's schema leaves out: a ``matchLabels`` key's pattern (pydantic
    puts it in ``patternProperties``, which lets other keys through) in ``propertyNames``; and
    at least one of ``matchLabels`` and ``matchExpressions`` holding something, as two
    branches, each with the field's full schema (a generator may take a branch alone)."""
    props = schema.get("properties", {})
    labels = props["matchLabels"]
    (value,) = labels.pop("patternProperties").values()
    labels["propertyNames"] = {**labels.get("propertyNames", {}), "pattern": KEY_PATTERN}
    labels["additionalProperties"] = value
    exprs = {k: v for k, v in props["matchExpressions"].items() if k != "default"}
    labels = {k: v for k, v in labels.items() if k != "default"}
    schema["anyOf"] = [
        {
            "required": ["matchLabels"],
            "properties": {"matchLabels": {**labels, "minProperties": 1}},
        },
        {
            "required": ["matchExpressions"],
            "properties": {"matchExpressions": {**exprs, "minItems": 1}},
        },
    ]


class LabelSelectorIn(RequestModel):
    """``metav1.LabelSelector``: nodes whose labels equal every ``matchLabels`` entry and
    satisfy every ``matchExpressions`` requirement."""

    model_config = ConfigDict(json_schema_extra=_describe)

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=MAX_MATCH_LABELS, description="key: value, all equal."
    )
    match_expressions: list[RequirementIn] = Field(
        default_factory=list, max_length=MAX_EXPRESSIONS, description="Requirements, all met."
    )

    @model_validator(mode="after")
    def _something(self) -> LabelSelectorIn:
        if not self.match_labels and not self.match_expressions:
            raise ValueError(
                "labelSelector: give at least one of `matchLabels`, `matchExpressions` "
                "(an empty selector would match every node)"
            )
        return self

    def selector(self) -> LabelSelector:
        """The domain's selector (the schema already holds it to the domain's rules)."""
        return LabelSelector(
            tuple(self.match_labels.items()),
            tuple(
                Requirement(r.key, Operator(r.operator), tuple(r.values))
                for r in self.match_expressions
            ),
        )


class RequirementOut(ApiModel):
    key: str
    operator: Operator
    values: list[str]


class LabelSelectorOut(ApiModel):
    match_labels: dict[str, str]
    match_expressions: list[RequirementOut]

    @classmethod
    def of(cls, sel: LabelSelector) -> LabelSelectorOut:
        return cls(
            match_labels=dict(sel.match_labels),
            match_expressions=[
                RequirementOut(key=r.key, operator=r.operator, values=list(r.values))
                for r in sel.match_expressions
            ],
        )
