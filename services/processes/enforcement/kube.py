"""The port of the enforcement reconciler to the Kubernetes API: DeviceTaintRules
(``resource.k8s.io/v1beta2``, cluster-scoped), raw JSON dicts in and out.

The real one is :class:`~services.adapters.kube.taint_rules.KubernetesTaintRules` (dry-run
semantics there); tests use an in-memory fake or the real test API server.
"""

from __future__ import annotations

from typing import Any, Protocol


class TaintRuleApi(Protocol):
    """DeviceTaintRules (cluster-scoped). Anything but a success raises
    :class:`~services.adapters.kube.errors.KubeApiError`, except that :meth:`delete_rule`
    returns ``False`` when the rule is already gone."""

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]: ...

    async def create_rule(self, body: dict[str, Any], dry_run: bool) -> dict[str, Any]: ...

    async def replace_rule(
        self, name: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]: ...

    async def delete_rule(self, name: str, uid: str | None, dry_run: bool) -> bool: ...
