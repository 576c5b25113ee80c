"""Device alerts held back by their node incident (issue 15 item 5).

The governor opens one node incident (``NodeFaultIncidentOpened``, incident
``node-fault/<node>/<time>``, ``details.devices``: the resourceIDs in it) when devices of a node
fault together, and says when more join (``NodeFaultIncidentUpdated``) and when it is over
(``NodeFaultIncidentClosed``). While it is open, every alert of one of its devices carries the label
``nodeIncident=<incident>``, and so does the node incident's own alert: Alertmanager's inhibition
(``deploy/alertmanager/alertmanager.yml``, ``equal: [nodeIncident]``) holds the device alerts back
while the node alert fires, so one node-wide fault is one page. A device alert already firing when
its device joins is posted again with the label (its old label set resolved: Alertmanager knows an
alert by its labels). After the incident closes, device alerts keep the label they fired with
until they resolve; a new one is posted without it.
"""

from __future__ import annotations

from typing import Final

from services.domain.governance.decisions import AlertAction, Decision, DecisionKind

LABEL: Final = "nodeIncident"
"""The label naming the node incident an alert belongs to."""

OPENING: Final = frozenset({DecisionKind.NODE_FAULT_OPENED, DecisionKind.NODE_FAULT_UPDATED})
KINDS: Final = OPENING | {DecisionKind.NODE_FAULT_CLOSED}
"""The decisions of a node incident itself (its alert carries its own key as ``nodeIncident``)."""


class NodeIncidents:
    """The open node incidents' devices: ``(node, resourceID)`` -> incident key."""

    def __init__(self) -> None:
        self._members: dict[tuple[str, str], str] = {}

    def apply(self, decision: Decision) -> list[tuple[str, str]]:
        """Fold a node-incident decision; returns the devices that joined by it (none for other
        decisions or a closing one)."""
        if decision.kind is DecisionKind.NODE_FAULT_CLOSED or (
            decision.kind in OPENING and decision.alert is AlertAction.RESOLVED
        ):
            self._members = {k: v for k, v in self._members.items() if v != decision.incident}
            return []
        if decision.kind not in OPENING or not decision.node or not decision.incident:
            return []
        devices = decision.details.get("devices")
        joined = []
        for rid in devices if isinstance(devices, list) else ():
            key = (decision.node, str(rid))
            if self._members.get(key) != decision.incident:
                self._members[key] = decision.incident
                joined.append(key)
        return joined

    def of(self, labels: dict[str, str]) -> str | None:
        """The node incident the alert of ``labels`` belongs to, if open: its own, or its
        device's."""
        node, rid = labels.get("node"), labels.get("resourceID")
        if node is None or rid is None:
            return None
        return self._members.get((node, rid))

    def snapshot(self) -> dict[tuple[str, str], str]:
        return dict(self._members)

    def restore(self, snapshot: dict[tuple[str, str], str]) -> None:
        self._members = dict(snapshot)

    def clear(self) -> None:
        self._members.clear()
