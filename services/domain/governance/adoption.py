"""Adoption pools and their phases (issue 16, item 1): what an operator declares, its wire form,
and the fold of the declarations the governor accepted into each pool's current phase.

A *pool* is a named set of nodes moving from device plugins to DRA (``resource.k8s.io/v1``): the
nodes where a DRA driver (optionally one of its ResourceSlice pools) publishes, or nodes named
explicitly, or nodes whose labels match a label selector (alone, or with a driver: the driver's
nodes that match). A declaration is an operator command on the governance log (``adoption-set``); the
governor records each accepted one as an ``AdoptionPhaseDeclared`` decision, so the history is
replayable and audited (actor, reason, event time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from services.domain.codec import EventDecodeError, optional_str_field, required_enum, str_field
from services.domain.labels import LabelSelector, selector_from_dict

POOL_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
"""A pool's name on the log: a DNS label (with dots), at most 63 characters (what the governor
decodes: a pool declared before the API held names to :data:`NEW_POOL_NAME`, such as ``a..b``,
still reads)."""

_DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
NEW_POOL_NAME: Final = re.compile(f"{_DNS_LABEL}(\\.{_DNS_LABEL})*")
"""A name a new declaration may give (with ``fullmatch``, at most :data:`MAX_POOL_NAME`
characters): a DNS subdomain, as it names the rollback policy
``devicestate-adoption-rollback-<pool>``."""
MAX_POOL_NAME: Final = 63
POOL_NAME_RULE: Final = (
    "a pool name is a DNS subdomain of at most 63 characters: lower-case letters, digits, "
    "'-' and '.' (each part between dots starting and ending with a letter or digit)"
)
"""What the API (422) and the CLI say of a name that is not :data:`NEW_POOL_NAME`."""


def pool_name_problem(name: str) -> str | None:
    """Why ``name`` may not name a new pool (``None``: it may): :data:`POOL_NAME_RULE`, with
    the name given."""
    if len(name) <= MAX_POOL_NAME and NEW_POOL_NAME.fullmatch(name):
        return None
    shown = name if len(name) <= 80 else name[:80] + "..."
    return f"{shown!r} is not a pool name: {POOL_NAME_RULE}"


MAX_NODES: Final = 1000
"""Most nodes a pool may name explicitly (a larger pool is a driver/pool selector)."""


class Phase(StrEnum):
    """Where a pool is on its way to DRA."""

    PLUGIN = "plugin"  # the device plugin owns the hardware; DRA not in use
    CANARY = "canary"  # some nodes of the pool run the DRA driver, under the gate
    DRA = "dra"  # the pool is on DRA
    ROLLED_BACK = "rolled-back"  # sent back to the plugin path; bound claims are left to finish


@dataclass(frozen=True, slots=True)
class PoolSelector:
    """Which nodes a pool holds: ``driver`` (a DRA driver name, e.g. ``gpu.nvidia.com``) with an
    optional ``pool`` (a ResourceSlice ``spec.pool.name``): the nodes its ResourceSlices name;
    or ``nodes``: node names (kept sorted, once each); ``labels``
    (:class:`~services.domain.labels.LabelSelector`, ``metav1.LabelSelector``) alone selects
    every node whose labels match, with ``driver`` the driver's nodes that also match. Either
    ``nodes`` or at least one of ``driver`` and ``labels`` is set; ``ValueError`` otherwise."""

    driver: str | None = None
    pool: str | None = None
    nodes: tuple[str, ...] = ()
    labels: LabelSelector | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(sorted(set(self.nodes))))
        if (self.driver is None and self.labels is None) == (not self.nodes):
            raise ValueError(
                "a pool selector names either a driver (and pool) or nodes, "
                "or a label selector (alone or with a driver)"
            )
        if self.pool is not None and self.driver is None:
            raise ValueError("a ResourceSlice pool needs its driver")
        if len(self.nodes) > MAX_NODES:
            raise ValueError(f"a pool names at most {MAX_NODES} nodes ({len(self.nodes)} given)")

    def to_dict(self) -> dict[str, Any]:
        if self.nodes:
            return {"nodes": list(self.nodes)}
        out: dict[str, Any] = {"driver": self.driver, "pool": self.pool}
        if self.labels is not None:  # absent otherwise: older declarations keep their bytes
            out["labelSelector"] = self.labels.to_dict()
        return out


@dataclass(frozen=True, slots=True)
class AdoptionDeclaration:
    """An operator's declaration: pool ``pool`` (its name, :data:`POOL_NAME`) selected by
    ``selector`` is in ``phase``; ``device_class`` optionally names the DeviceClass the pool
    moves to (what the gate's reasons and a later rollback policy refer to)."""

    pool: str
    selector: PoolSelector
    phase: Phase
    device_class: str | None = None

    def __post_init__(self) -> None:
        if not POOL_NAME.fullmatch(self.pool):
            raise ValueError(f"pool name {self.pool!r} is not a DNS label of at most 63 characters")


def declaration_to_dict(d: AdoptionDeclaration) -> dict[str, Any]:
    """The declaration's JSON object (camelCase), as on the governance log and in the decision."""
    return {
        "pool": d.pool,
        "selector": d.selector.to_dict(),
        "phase": d.phase.value,
        "deviceClass": d.device_class,
    }


def declaration_from_dict(obj: Any) -> AdoptionDeclaration:
    """Parse a declaration; raises :class:`EventDecodeError` naming the bad field."""
    if not isinstance(obj, dict):
        raise EventDecodeError("field 'adoption' must be an object")
    raw = obj.get("selector")
    if not isinstance(raw, dict):
        raise EventDecodeError("field 'selector' must be an object")
    nodes = raw.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        raise EventDecodeError("field 'nodes' must be a list of node names")
    try:
        raw_labels = raw.get("labelSelector")
        selector = PoolSelector(
            driver=optional_str_field(raw, "driver") or None,
            pool=optional_str_field(raw, "pool") or None,
            nodes=tuple(nodes),
            labels=None if raw_labels is None else selector_from_dict(raw_labels),
        )
        return AdoptionDeclaration(
            pool=str_field(obj, "pool"),
            selector=selector,
            phase=required_enum(Phase, obj, "phase"),
            device_class=optional_str_field(obj, "deviceClass") or None,
        )
    except EventDecodeError:
        raise
    except ValueError as exc:
        raise EventDecodeError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class AdoptionRetirement:
    """An operator's retirement of pool ``pool`` (an ``adoption-retire`` command): the pool
    leaves the governor's state and ``GET /v1/adoption``; declaring the name again starts a new
    pool. ``force`` retires a pool in ``canary`` or ``dra`` (refused without it: its devices are
    still on DRA, see :func:`retire_problem`)."""

    pool: str
    force: bool = False


def retirement_to_dict(r: AdoptionRetirement) -> dict[str, Any]:
    """The retirement's JSON object, as on the governance log."""
    return {"pool": r.pool, "force": r.force}


def retirement_from_dict(obj: Any) -> AdoptionRetirement:
    """Parse a retirement; raises :class:`EventDecodeError` naming the bad field."""
    if not isinstance(obj, dict):
        raise EventDecodeError("field 'retire' must be an object")
    force = obj.get("force", False)
    if not isinstance(force, bool):
        raise EventDecodeError("field 'force' must be a boolean")
    return AdoptionRetirement(pool=str_field(obj, "pool"), force=force)


ON_DRA: Final = frozenset({Phase.CANARY, Phase.DRA})
"""Phases whose pool is not retired without ``force``: DRA owns (some of) its devices."""


def retire_problem(pool: str, phase: Phase | None, force: bool) -> str | None:
    """Why pool ``pool`` (in ``phase``; ``None``: not declared) may not be retired, or ``None``.
    The governor rejects the command with this reason; the API answers it first (404, 409)."""
    if phase is None:
        return f"pool {pool!r} is not declared (GET /v1/adoption lists the pools)"
    if phase in ON_DRA and not force:
        return (
            f"pool {pool} is in {phase.value}: its devices are still on DRA; declare it "
            "rolled-back or plugin first, or retire it with force"
        )
    return None


@dataclass(frozen=True, slots=True)
class Declared:
    """One accepted declaration as the governor recorded it: the decision's ``seq`` (its place
    on the governance log), event time ``at`` (UTC), ``actor`` and ``reason``."""

    seq: int
    at: datetime
    actor: str
    reason: str
    declaration: AdoptionDeclaration


@dataclass(frozen=True, slots=True)
class PoolState:
    """A pool's current declaration and its history (oldest first)."""

    current: Declared
    history: tuple[Declared, ...] = field(default=())

    @property
    def pool(self) -> str:
        return self.current.declaration.pool

    @property
    def phase(self) -> Phase:
        return self.current.declaration.phase

    @property
    def since(self) -> datetime:
        """When the pool entered its current phase (UTC event time): the first declaration of
        this phase since the last other one (a repeated declaration keeps the phase's start)."""
        start = self.current.at
        for entry in reversed(self.history):
            if entry.declaration.phase is not self.phase:
                break
            start = entry.at
        return start


@dataclass(frozen=True, slots=True)
class Retired:
    """One accepted retirement as the governor recorded it (an ``AdoptionPoolRetired``
    decision): its ``seq``, time ``at`` (UTC), ``actor``, ``reason`` and ``pool``."""

    seq: int
    at: datetime
    actor: str
    reason: str
    pool: str


def fold(entries: Iterable[Declared | Retired]) -> dict[str, PoolState]:
    """Each pool's state from its accepted declarations and retirements, in log order (by
    ``seq`` whatever order they come in: a replay of the log gives the same pools). A retired
    pool is gone; a declaration after its retirement starts a new pool (a history of its own)."""
    pools: dict[str, list[Declared]] = {}
    for entry in sorted(entries, key=lambda e: e.seq):
        if isinstance(entry, Retired):
            pools.pop(entry.pool, None)
            continue
        pools.setdefault(entry.declaration.pool, []).append(entry)
    return {
        name: PoolState(current=items[-1], history=tuple(items))
        for name, items in sorted(pools.items())
    }
