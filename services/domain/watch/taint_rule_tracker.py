"""The watcher's memory of DeviceTaintRules written by others (issue 15 item 1).

Pure: raw JSON in (``resource.k8s.io/v1beta2`` DeviceTaintRule, :mod:`services.domain.inventory.
taint_rules`), no I/O. A rule is not published as an object of its own: its taint is a fact about
the devices it selects, so the :class:`~.inventory_tracker.InventoryTracker` adds it to those
devices' taints in the ResourceSlice it publishes (``DeviceTaint.rule`` names the rule), and
publishes again every tracked slice whose devices' taints a rule change altered. Rules:

- a rule carrying devicestate's own labels (``devicestate enforce``'s) is never tracked: it is
  ``ignored`` as ``own`` (a tracked rule that gains those labels is forgotten, as if deleted);
- ADDED/MODIFIED with a resourceVersion not newer than the newest seen is ``stale``; the same
  rule again is ``unchanged``; a rule that cannot be read is a rejection (reported once per
  reason, the last good form stays);
- DELETED forgets the rule; a complete LIST forgets the rules it no longer has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from services.domain.codec import parse_resource_version
from services.domain.inventory.objects import DeviceTaint, InventoryParseError
from services.domain.inventory.taint_rules import (
    DeviceTaintRuleInfo,
    is_devicestate_rule,
    parse_device_taint_rule,
)
from services.domain.watch.pod_tracker import WatchKind

TAINT_RULE_KIND: Final = "DeviceTaintRule"
"""The object kind of a DeviceTaintRule (watch lines, the watcher's streams)."""


@dataclass(slots=True)
class RuleOutcome:
    """``changed``: the tracked rules changed (the slices must be looked at again);
    ``reject_reason``: dead-letter the object with it; ``ignored``: why nothing changed."""

    changed: bool = False
    reject_reason: str | None = None
    ignored: str | None = None


def _name(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else None


def _version(obj: Mapping[str, Any]) -> int | None:
    metadata = obj.get("metadata")
    return parse_resource_version(
        metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    )


class TaintRuleTracker:
    """The DeviceTaintRules of others, by name; see the module docstring."""

    def __init__(self) -> None:
        self._rules: dict[str, DeviceTaintRuleInfo] = {}
        self._versions: dict[str, int] = {}
        self._reported: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._rules)

    def taints_for(self, driver: str, pool: str, device: str) -> tuple[DeviceTaint, ...]:
        """The taints the tracked rules put on ``driver/pool/device``, by rule name."""
        if not self._rules:
            return ()
        return tuple(
            self._rules[name].taint
            for name in sorted(self._rules)
            if self._rules[name].selects(driver, pool, device)
        )

    def event(self, kind: WatchKind, obj: Mapping[str, Any]) -> RuleOutcome:
        """One ADDED/MODIFIED/DELETED of a DeviceTaintRule."""
        name = _name(obj)
        version = _version(obj)
        if kind is WatchKind.DELETED:
            if name is None or name not in self._rules:
                return RuleOutcome(ignored="unknown")
            self._forget(name)
            return RuleOutcome(changed=True)
        if name is not None and version is not None:
            newest = self._versions.get(name)
            if newest is not None and version <= newest:
                return RuleOutcome(ignored="stale")
            self._versions[name] = version
        if is_devicestate_rule(obj):
            if name is not None and name in self._rules:
                self._forget(name)
                return RuleOutcome(changed=True)
            return RuleOutcome(ignored="own")
        try:
            rule = parse_device_taint_rule(obj)
        except InventoryParseError as exc:
            reason = f"{TAINT_RULE_KIND} {name or '<no name>'}: {exc}"
            if name is not None and self._reported.get(name) == reason:
                return RuleOutcome()
            if name is not None:
                self._reported[name] = reason
            return RuleOutcome(reject_reason=reason)
        self._reported.pop(rule.name, None)
        if self._rules.get(rule.name) == rule:
            return RuleOutcome(ignored="unchanged")
        self._rules[rule.name] = rule
        return RuleOutcome(changed=True)

    def listed(self, objs: Iterable[Mapping[str, Any]]) -> tuple[list[RuleOutcome], bool]:
        """A complete LIST: every object read as ADDED (one outcome each, in order), then the
        rules it no longer has forgotten; ``True`` when the tracked rules changed."""
        outcomes, listed = [], set()
        for obj in objs:
            outcomes.append(self.event(WatchKind.ADDED, obj))
            name = _name(obj)
            if name is not None:
                listed.add(name)
        changed = any(o.changed for o in outcomes)
        for name in sorted(set(self._rules) - listed):
            self._forget(name)
            changed = True
        for name in set(self._versions) - listed:
            self._versions.pop(name, None)
            self._reported.pop(name, None)
        return outcomes, changed

    def _forget(self, name: str) -> None:
        self._rules.pop(name, None)
        self._versions.pop(name, None)
        self._reported.pop(name, None)
