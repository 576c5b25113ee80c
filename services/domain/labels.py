"""Kubernetes labels and label selectors (issue 16, node-label pool selectors): validation of a
label's key and value, :class:`LabelSelector` (``metav1.LabelSelector``: ``matchLabels`` and
``matchExpressions``), matching a Node's labels, the JSON form and kubectl's selector syntax
(``k=v,k2 in (a,b),!k3,k4``).

Sources: the label syntax of ``k8s.io/apimachinery/pkg/util/validation`` (``IsQualifiedName``,
``IsValidLabelValue``) and ``metav1.LabelSelector`` / ``LabelSelectorRequirement``
(``k8s.io/apimachinery/pkg/apis/meta/v1``), whose requirements are ANDed. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

LABEL_NAME: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
"""A key's name part (and a non-empty value): alphanumerics at both ends, ``-_.`` inside."""
DNS_SUBDOMAIN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
"""A key's prefix: a DNS subdomain (RFC 1123), lower case."""
KEY_PATTERN: Final = rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$"
"""A label key, ``[prefix/]name`` (the pattern the OpenAPI document states)."""
VALUE_PATTERN: Final = rf"^({LABEL_NAME})?$"
"""A label value: empty, or a name."""

MAX_NAME: Final = 63
MAX_PREFIX: Final = 253
MAX_KEY: Final = MAX_PREFIX + 1 + MAX_NAME
MAX_VALUE: Final = 63
MAX_MATCH_LABELS: Final = 32
"""Most ``matchLabels`` entries a selector may hold."""
MAX_EXPRESSIONS: Final = 32
"""Most ``matchExpressions`` a selector may hold."""
MAX_VALUES: Final = 64
"""Most values one expression may list."""

_NAME_RE: Final = re.compile(LABEL_NAME)
_PREFIX_RE: Final = re.compile(DNS_SUBDOMAIN)


def key_error(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``: prefix a DNS subdomain of at most
    253 characters, name at most 63 of :data:`LABEL_NAME`), or ``None`` when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return f"label key {key!r}: the prefix before '/' is empty"
    if slash and (len(prefix) > MAX_PREFIX or not _PREFIX_RE.fullmatch(prefix)):
        return (
            f"label key {key!r}: the prefix must be a lower-case DNS subdomain of at most "
            f"{MAX_PREFIX} characters"
        )
    if not name or len(name) > MAX_NAME or not _NAME_RE.fullmatch(name):
        return (
            f"label key {key!r}: the name must be 1 to {MAX_NAME} characters, alphanumeric at "
            "both ends, with '-', '_' or '.' inside"
        )
    return None


def value_error(value: str) -> str | None:
    """Why ``value`` is not a valid label value (empty, or at most 63 characters of
    :data:`LABEL_NAME`), or ``None`` when it is."""
    if value == "":
        return None
    if len(value) > MAX_VALUE or not _NAME_RE.fullmatch(value):
        return (
            f"label value {value!r}: must be empty or 1 to {MAX_VALUE} characters, alphanumeric "
            "at both ends, with '-', '_' or '.' inside"
        )
    return None


class Operator(StrEnum):
    """A ``LabelSelectorRequirement``'s operator."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


_WITH_VALUES: Final = frozenset({Operator.IN, Operator.NOT_IN})


@dataclass(frozen=True, slots=True, order=True)
class Requirement:
    """One ``matchExpressions`` entry: ``key`` ``operator`` ``values`` (kept sorted, once each;
    at least one for ``In``/``NotIn``, none for ``Exists``/``DoesNotExist``). ``ValueError``
    with the reason otherwise."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(sorted(set(self.values))))
        if (err := key_error(self.key)) is not None:
            raise ValueError(err)
        if self.operator in _WITH_VALUES and not self.values:
            raise ValueError(f"{self.key} {self.operator.value}: needs at least one value")
        if self.operator not in _WITH_VALUES and self.values:
            raise ValueError(f"{self.key} {self.operator.value}: takes no values")
        if len(self.values) > MAX_VALUES:
            raise ValueError(f"{self.key}: at most {MAX_VALUES} values ({len(self.values)} given)")
        for v in self.values:
            if (err := value_error(v)) is not None:
                raise ValueError(err)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a Node's ``labels`` satisfy the requirement (``NotIn`` and ``DoesNotExist``
        hold for a node without the key, as in Kubernetes)."""
        present = self.key in labels
        if self.operator is Operator.IN:
            return present and labels[self.key] in self.values
        if self.operator is Operator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if self.operator is Operator.EXISTS:
            return present
        return not present


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """``metav1.LabelSelector``: ``match_labels`` (sorted ``(key, value)`` pairs, one per key)
    and ``match_expressions`` (sorted, once each), all ANDed. Non-empty (an empty selector would
    match every node; a pool must say which): ``ValueError`` with the reason otherwise, and
    when a key or value is invalid or a limit (:data:`MAX_MATCH_LABELS`,
    :data:`MAX_EXPRESSIONS`) is exceeded."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        keys = [k for k, _ in self.match_labels]
        if len(set(keys)) != len(keys):
            raise ValueError("matchLabels names a key twice")
        object.__setattr__(self, "match_labels", tuple(sorted(self.match_labels)))
        object.__setattr__(self, "match_expressions", tuple(sorted(set(self.match_expressions))))
        if not self.match_labels and not self.match_expressions:
            raise ValueError("a label selector needs at least one of matchLabels, matchExpressions")
        if len(self.match_labels) > MAX_MATCH_LABELS:
            raise ValueError(
                f"at most {MAX_MATCH_LABELS} matchLabels ({len(self.match_labels)} given)"
            )
        if len(self.match_expressions) > MAX_EXPRESSIONS:
            raise ValueError(
                f"at most {MAX_EXPRESSIONS} matchExpressions ({len(self.match_expressions)} given)"
            )
        for k, v in self.match_labels:
            if (err := key_error(k) or value_error(v)) is not None:
                raise ValueError(err)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a Node with ``labels`` is selected: every matchLabels entry equal, every
        expression satisfied."""
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``metav1.LabelSelector``'s field names)."""
        return {
            "matchLabels": dict(self.match_labels),
            "matchExpressions": [
                {"key": r.key, "operator": r.operator.value, "values": list(r.values)}
                for r in self.match_expressions
            ],
        }

    def __str__(self) -> str:
        """kubectl's syntax, :func:`parse` reads it back."""
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for r in self.match_expressions:
            if r.operator is Operator.EXISTS:
                parts.append(r.key)
            elif r.operator is Operator.DOES_NOT_EXIST:
                parts.append(f"!{r.key}")
            else:
                op = "in" if r.operator is Operator.IN else "notin"
                parts.append(f"{r.key} {op} ({','.join(r.values)})")
        return ",".join(parts)


def selector_from_dict(obj: Any) -> LabelSelector:
    """Parse the JSON object; ``ValueError`` naming what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("labelSelector must be an object")
    labels = obj.get("matchLabels") or {}
    exprs = obj.get("matchExpressions") or []
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError("matchLabels must be an object of string values")
    if not isinstance(exprs, list) or not all(isinstance(e, dict) for e in exprs):
        raise ValueError("matchExpressions must be a list of objects")
    reqs = []
    for e in exprs:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if not isinstance(key, str):
            raise ValueError("a matchExpressions entry needs a string key")
        if op not in {o.value for o in Operator}:
            raise ValueError(f"{key}: operator must be one of In, NotIn, Exists, DoesNotExist")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{key}: values must be a list of strings")
        reqs.append(Requirement(key, Operator(op), tuple(values)))
    return LabelSelector(tuple(labels.items()), tuple(reqs))


_SET_RE: Final = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQ_RE: Final = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")
_KEY_RE: Final = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in selector {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '(' in selector {text!r}")
    parts.append(text[start:])
    return parts


def parse(text: str) -> LabelSelector:
    """Parse kubectl's selector syntax: ``k=v`` (or ``k==v``), ``k!=v`` (``NotIn (v)``),
    ``k in (a,b)``, ``k notin (a,b)``, ``k`` (``Exists``), ``!k`` (``DoesNotExist``), joined by
    commas. As in ``k8s.io/apimachinery/pkg/labels`` (``parseValues``), the empty string is a
    value of a set: ``k in ()`` is ``In [""]``, ``k notin (,b)`` is ``NotIn ["", "b"]``.
    ``ValueError`` naming the bad term."""
    labels: dict[str, str] = {}
    reqs: list[Requirement] = []
    for term in _split(text):
        if not term.strip():
            raise ValueError(f"empty term in selector {text!r}")
        if (m := _SET_RE.match(term)) is not None:
            if m.group(1):
                raise ValueError(f"term {term.strip()!r}: '!' goes only before a bare key")
            # As kubectl: the empty value is a value ("()" is {""}, "(,b)" is {"", "b"}).
            values = tuple(v.strip() for v in m.group(4).split(","))
            op = Operator.IN if m.group(3) == "in" else Operator.NOT_IN
            reqs.append(Requirement(m.group(2), op, values))
        elif (m := _EQ_RE.match(term)) is not None:
            key, op_text, value = m.groups()
            if op_text == "!=":
                reqs.append(Requirement(key, Operator.NOT_IN, (value,)))
            elif labels.get(key, value) != value:
                raise ValueError(f"key {key!r} is given two values")
            else:
                labels[key] = value
        elif (m := _KEY_RE.match(term)) is not None:
            op = Operator.DOES_NOT_EXIST if m.group(1) else Operator.EXISTS
            reqs.append(Requirement(m.group(2), op))
        else:
            raise ValueError(f"cannot read selector term {term.strip()!r}")
    return LabelSelector(tuple(labels.items()), tuple(reqs))
