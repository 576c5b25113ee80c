"""Governance decisions -> Alertmanager API v2 alerts (pure: no I/O, no clock).

A decision with ``alert`` set starts (``firing``) or ends (``resolved``) the alert of its
``incident``. Alertmanager identifies an alert by its whole label set (the fingerprint), so the
firing and the resolved alert of one incident must carry exactly the same labels:

- ``alertname``: from the incident type, the incident key's first segment
  (``quarantine/<node>/<resourceID>/<quarantineID>`` -> ``DeviceQuarantined``; see
  :data:`ALERT_NAMES`; an unlisted type is CamelCased, ``foo-bar`` -> ``FooBar``);
- ``incident``: the stable incident key (the dedup key);
- ``node``, ``resourceID``: when the decision names them (``resourceID`` as the directory API
  spells it);
- ``namespace``: the namespaces of the Pods holding the device (``details.pods``, each
  ``namespace/name``; sorted, comma-separated) when the decision lists any;
- ``reason``: the decision's reason code (``details.reason``, e.g. ``pod-status-unhealthy``) when
  it has one;
- ``severity``: the decision's severity (``warning`` when it has none);
- ``nodeIncident``: the open node incident a device's alert is held back by, and on that node
  incident's own alert (:mod:`.node_incidents`).

Alertmanager's routes and inhibitions (``deploy/alertmanager/alertmanager.yml``) group and match
on these names.

:class:`ActiveAlerts` remembers the firing alerts, so a ``resolved`` decision reuses the labels
and ``startsAt`` its incident fired with, even if the resolving decision carries another severity,
and so the sender can re-post what is still firing (Alertmanager resolves an alert by itself
``resolve_timeout`` after its last post when the post had no ``endsAt``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeAlias

import orjson

from services.domain.codec import parse_time
from services.domain.events import format_time
from services.domain.governance.decisions import AlertAction, Decision, Severity
from services.processes.alerts import node_incidents

Alert: TypeAlias = dict[str, Any]
"""One element of the JSON list POSTed to ``/api/v2/alerts``: ``labels``, ``annotations``,
``startsAt``, optionally ``endsAt`` and ``generatorURL``."""

ALERT_NAMES: Final[dict[str, str]] = {
    "quarantine": "DeviceQuarantined",
    "deferred": "QuarantineDeferred",
    "node-unknown": "DeviceUnknown",
    "node-heartbeat": "NodeHeartbeatLost",
    "device-plugin": "DevicePluginLost",
    "breaker": "MassSignalBreakerOpen",
    "escalation": "NodeEscalation",
    "automation-paused": "AutomationPaused",
    "quarantine-age": "QuarantineNeedsOperator",
    "adoption-hold": "AdoptionHold",  # a DRA adoption pool's gate says hold (issue 16)
    "adoption-rollback": "AdoptionRollback",  # ... says roll back
    "node-fault": "NodeFaultIncident",
    "watch-stale": "WatchStale",
}
"""Alert names of the incident types the governor opens (the incident key's first segment)."""

DEFAULT_SEVERITY: Final = Severity.WARNING
FALLBACK_ALERT_NAME: Final = "DevicestateIncident"
DESCRIPTION_DETAILS_MAX: Final = 4000
"""Longest ``details`` JSON (characters) in a description; longer ones are cut and marked."""

_WORD = re.compile(r"[A-Za-z0-9]+")


def incident_type(incident: str) -> str:
    """The incident key's first segment: ``quarantine/gpu-node-a/GPU-1/q1`` -> ``quarantine``."""
    return incident.split("/", 1)[0]


def camel_case(text: str) -> str:
    """``node-heartbeat`` -> ``NodeHeartbeat``; ``""`` -> ``""``."""
    return "".join(word[:1].upper() + word[1:] for word in _WORD.findall(text))


def alert_name(incident: str) -> str:
    """Alertmanager ``alertname`` of an incident key (:data:`ALERT_NAMES`, else CamelCase)."""
    kind = incident_type(incident)
    return ALERT_NAMES.get(kind) or camel_case(kind) or FALLBACK_ALERT_NAME


def alert_labels(decision: Decision) -> dict[str, str]:
    """The label set of the decision's incident (the decision must have an ``incident``)."""
    if not decision.incident:
        raise ValueError(f"decision {decision.decision_id} has no incident")
    labels = {
        "alertname": alert_name(decision.incident),
        "incident": decision.incident,
        "severity": (decision.severity or DEFAULT_SEVERITY).value,
    }
    if decision.node:
        labels["node"] = decision.node
    if decision.resource_id:
        labels["resourceID"] = decision.resource_id
    namespaces = pod_namespaces(decision.details.get("pods"))
    if namespaces:
        labels["namespace"] = namespaces
    reason = decision.details.get("reason")
    if isinstance(reason, str) and reason:
        labels["reason"] = reason
    return labels


def pod_namespaces(pods: object) -> str:
    """``["ml/a", "ml/b", "qa/c"]`` -> ``"ml,qa"``; ``""`` when there are none (or not a list)."""
    if not isinstance(pods, list):
        return ""
    found = {pod.split("/", 1)[0] for pod in pods if isinstance(pod, str) and "/" in pod}
    return ",".join(sorted(n for n in found if n))


def describe(decision: Decision) -> str:
    """``decision <id> <kind>: <details as compact JSON>`` (details cut past
    :data:`DESCRIPTION_DETAILS_MAX` characters)."""
    details = orjson.dumps(decision.details, option=orjson.OPT_SORT_KEYS).decode()
    if len(details) > DESCRIPTION_DETAILS_MAX:
        details = details[:DESCRIPTION_DETAILS_MAX] + "...(cut)"
    return f"decision {decision.decision_id} {decision.kind.value}: {details}"


def _summary(decision: Decision, name: str) -> str:
    if decision.summary:
        return decision.summary
    where = "/".join(p for p in (decision.node, decision.resource_id) if p)
    return f"{name} {where}".strip()


def alert_from_decision(decision: Decision, generator_url: str | None = None) -> Alert | None:
    """The Alertmanager alert of a decision, or ``None`` when the decision does not start or end
    an alert (no ``alert`` or no ``incident``).

    ``startsAt`` is the decision's time; a ``resolved`` alert also has ``endsAt`` = that time.
    ``generator_url``, when given, becomes ``generatorURL``.
    """
    if decision.alert is None or not decision.incident:
        return None
    labels = alert_labels(decision)
    at = format_time(decision.at)
    alert: Alert = {
        "labels": labels,
        "annotations": {
            "summary": _summary(decision, labels["alertname"]),
            "description": describe(decision),
        },
        "startsAt": at,
    }
    if decision.alert is AlertAction.RESOLVED:
        alert["endsAt"] = at
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


def device_url(base_url: str | None, decision: Decision) -> str | None:
    """A link for ``generatorURL``: the device (or node) in the directory API at ``base_url``;
    ``None`` without a base URL or a node. The resourceID goes last, unescaped, as the API
    expects."""
    if not base_url or not decision.node:
        return None
    base = base_url.rstrip("/")
    if decision.resource_id:
        return f"{base}/v1/nodes/{decision.node}/devices/{decision.resource_id}"
    return f"{base}/v1/nodes/{decision.node}"


class ActiveAlerts:
    """The alerts firing now, by incident, built by folding decisions with :meth:`apply`.

    Keeps firing and resolved alerts of one incident identical in labels: a ``resolved`` decision
    takes the labels (and ``startsAt``) its incident fired with. A second ``firing`` decision of
    an incident whose labels changed (e.g. a new severity) resolves the old label set first.
    """

    def __init__(self, generator_base_url: str | None = None) -> None:
        self._firing: dict[str, Alert] = {}
        self._base_url = generator_base_url
        self._nodes = node_incidents.NodeIncidents()

    def __len__(self) -> int:
        return len(self._firing)

    def __contains__(self, incident: object) -> bool:
        return incident in self._firing

    def apply(self, decision: Decision) -> list[Alert]:
        """Fold one decision; return the alerts to post for it (none, one, or a resolution of an
        outdated label set followed by the new firing alert)."""
        joined = self._nodes.apply(decision)
        alert = alert_from_decision(decision, device_url(self._base_url, decision))
        if alert is None:
            return []
        own = decision.kind in node_incidents.KINDS  # the node incident's own alert
        held_by = decision.incident if own else self._nodes.of(alert["labels"])
        if held_by is not None:
            alert["labels"][node_incidents.LABEL] = held_by
        out = self._apply(decision, alert, alert["labels"]["incident"])
        return [*out, *self._hold_back(set(joined), alert["startsAt"])] if joined else out

    def _hold_back(self, devices: set[tuple[str, str]], at: str) -> list[Alert]:
        """Post the firing alerts of ``devices`` again with their node incident's label."""
        out: list[Alert] = []
        for incident, alert in list(self._firing.items()):
            labels = alert["labels"]
            key = (labels.get("node", ""), labels.get("resourceID", ""))
            held_by = self._nodes.of(labels)
            if key not in devices or held_by is None or labels.get(node_incidents.LABEL):
                continue
            out.append(_resolved(alert, at))
            marked = _copy(alert)
            marked["labels"][node_incidents.LABEL] = held_by
            self._firing[incident] = marked
            out.append(marked)
        return out

    def _apply(self, decision: Decision, alert: Alert, incident: str) -> list[Alert]:
        previous = self._firing.get(incident)
        if decision.alert is AlertAction.FIRING:
            out: list[Alert] = []
            if previous is not None:
                if previous["labels"] == alert["labels"]:
                    alert["startsAt"] = previous["startsAt"]
                else:
                    out.append(_resolved(previous, alert["startsAt"]))
            self._firing[incident] = alert
            out.append(alert)
            return out
        if previous is not None:
            del self._firing[incident]
            alert["labels"] = dict(previous["labels"])
            if _time(previous["startsAt"]) <= _time(alert["endsAt"]):
                alert["startsAt"] = previous["startsAt"]
        return [alert]

    def firing(self) -> list[Alert]:
        """Copies of the alerts firing now (to post again), oldest incident first."""
        return [_copy(alert) for alert in self._firing.values()]

    def snapshot(self) -> AlertsSnapshot:
        """The state, to :meth:`restore` if a post fails and the decisions are read again."""
        firing = {incident: _copy(alert) for incident, alert in self._firing.items()}
        return AlertsSnapshot(firing, self._nodes.snapshot())

    def restore(self, snapshot: AlertsSnapshot) -> None:
        self._firing = {incident: _copy(alert) for incident, alert in snapshot.firing.items()}
        self._nodes.restore(snapshot.node_incidents)

    def clear(self) -> None:
        self._firing.clear()
        self._nodes.clear()


@dataclass(frozen=True, slots=True)
class AlertsSnapshot:
    """What :meth:`ActiveAlerts.snapshot` saves: the firing alerts by incident and the open node
    incidents' devices."""

    firing: dict[str, Alert]
    node_incidents: dict[tuple[str, str], str]


def _copy(alert: Alert) -> Alert:
    copied = dict(alert)
    copied["labels"] = dict(alert["labels"])
    copied["annotations"] = dict(alert["annotations"])
    return copied


def _resolved(alert: Alert, at: str) -> Alert:
    resolved = _copy(alert)
    resolved["endsAt"] = max(at, alert["startsAt"], key=_time)
    return resolved


def _time(text: str) -> datetime:
    return parse_time(text)
