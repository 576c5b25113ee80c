"""The enforcement reconciler's DeviceTaintRule port (``enforcement.kube.TaintRuleApi``):
:class:`~tests.fakes.taint_rules.FakeTaintRules` and
:class:`~services.adapters.kube.taint_rules.KubernetesTaintRules` on the test kube-apiserver
(``resource.k8s.io/v1beta2``) pass the same tests.

DeviceTaintRules are cluster-scoped and the API server is shared by the session: every rule here
carries a label of its own test (``contract-run``) and the real fixture deletes them after it.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.adapters.kube.errors import KubeApiError
from services.adapters.kube.taint_rules import KubernetesTaintRules
from services.processes.enforcement.kube import TaintRuleApi
from tests.fakes.taint_rules import FakeTaintRules

RUN_LABEL = "devicestate.io/contract-run"
KIND_LABEL = "devicestate.io/contract-kind"


def rule(run: str, device: str = "gpu-0", **labels: str) -> dict[str, Any]:
    """A DeviceTaintRule of test ``run`` on ``device`` of gpu-node-a."""
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": f"contract-{device}-{uuid.uuid4().hex[:8]}",
            "labels": {RUN_LABEL: run, **labels},
        },
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": "gpu-node-a", "device": device},
            "taint": {
                "key": "devicestate.io/quarantined",
                "value": "system",
                "effect": "NoSchedule",
            },
        },
    }


def with_effect(stored: dict[str, Any], effect: str) -> dict[str, Any]:
    """``stored`` with another taint effect (its metadata, resourceVersion included, kept)."""
    changed = copy.deepcopy(stored)
    changed["spec"]["taint"]["effect"] = effect
    return changed


def names(rules: list[dict[str, Any]]) -> set[str]:
    return {r["metadata"]["name"] for r in rules}


class TaintRuleApiContract:
    """What the reconciler relies on from the API server. Subclasses provide ``rules``."""

    @pytest.fixture
    def run(self) -> str:
        return uuid.uuid4().hex[:12]

    async def test_create_stores_the_rule_with_uid_version_and_time_added(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        body = rule(run)
        created = await rules.create_rule(body, dry_run=False)
        assert created["metadata"]["name"] == body["metadata"]["name"]
        assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
        assert created["metadata"]["labels"] == body["metadata"]["labels"]
        assert created["spec"]["deviceSelector"] == body["spec"]["deviceSelector"]
        taint = created["spec"]["taint"]
        assert {k: taint[k] for k in ("key", "value", "effect")} == body["spec"]["taint"]
        assert taint["timeAdded"]  # set by the server when the body has none
        (listed,) = await rules.list_rules(f"{RUN_LABEL}={run}")
        assert listed["metadata"]["uid"] == created["metadata"]["uid"]
        assert listed["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    async def test_list_filters_by_label_equality_and_existence(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        marked = await rules.create_rule(rule(run, "gpu-0", **{KIND_LABEL: "a"}), dry_run=False)
        other = await rules.create_rule(rule(run, "gpu-1", **{KIND_LABEL: "b"}), dry_run=False)
        plain = await rules.create_rule(rule(run, "gpu-2"), dry_run=False)
        everything = names([marked, other, plain])
        assert names(await rules.list_rules(f"{RUN_LABEL}={run}")) == everything
        assert names(await rules.list_rules(f"{RUN_LABEL}={run},{KIND_LABEL}=a")) == names([marked])
        assert names(await rules.list_rules(f"{RUN_LABEL}={run},{KIND_LABEL}")) == names(
            [marked, other]
        )
        assert await rules.list_rules(f"{RUN_LABEL}={run},{KIND_LABEL}=c") == []
        assert await rules.list_rules(f"{RUN_LABEL}=another-{run}") == []

    async def test_a_second_create_of_a_name_is_409_already_exists(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        body = rule(run)
        await rules.create_rule(body, dry_run=False)
        for dry_run in (False, True):
            with pytest.raises(KubeApiError) as raised:
                await rules.create_rule(body, dry_run=dry_run)
            assert (raised.value.status, raised.value.reason) == (409, "AlreadyExists")

    async def test_replace_at_the_stored_version_changes_the_rule_and_its_version(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        created = await rules.create_rule(rule(run), dry_run=False)
        changed = with_effect(created, "NoExecute")
        replaced = await rules.replace_rule(created["metadata"]["name"], changed, dry_run=False)
        assert replaced["spec"]["taint"]["effect"] == "NoExecute"
        assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
        assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
        (listed,) = await rules.list_rules(f"{RUN_LABEL}={run}")
        assert listed["spec"]["taint"]["effect"] == "NoExecute"
        assert listed["metadata"]["resourceVersion"] == replaced["metadata"]["resourceVersion"]

    async def test_replace_from_a_fresh_manifest_keeps_uid_and_time_added(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        # What the reconciler sends: its own manifest and the stored resourceVersion only.
        body = rule(run)
        created = await rules.create_rule(body, dry_run=False)
        fresh = with_effect(body, "NoExecute")
        fresh["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        replaced = await rules.replace_rule(body["metadata"]["name"], fresh, dry_run=False)
        assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
        assert replaced["spec"]["taint"]["timeAdded"] == created["spec"]["taint"]["timeAdded"]
        assert replaced["spec"]["taint"]["effect"] == "NoExecute"

    async def test_replace_without_a_version_is_unconditional(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        body = rule(run)
        created = await rules.create_rule(body, dry_run=False)
        replaced = await rules.replace_rule(
            body["metadata"]["name"], with_effect(body, "NoExecute"), dry_run=False
        )
        assert replaced["spec"]["taint"]["effect"] == "NoExecute"
        assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]

    async def test_replace_at_an_older_version_is_409_conflict(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        created = await rules.create_rule(rule(run), dry_run=False)
        name = created["metadata"]["name"]
        await rules.replace_rule(name, with_effect(created, "NoExecute"), dry_run=False)
        for dry_run in (False, True):
            with pytest.raises(KubeApiError) as raised:
                await rules.replace_rule(name, created, dry_run=dry_run)
            assert (raised.value.status, raised.value.reason) == (409, "Conflict")

    async def test_replace_with_what_is_stored_keeps_the_version(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        # The API server skips a no-op update: nothing is written, resourceVersion stays.
        created = await rules.create_rule(rule(run), dry_run=False)
        name = created["metadata"]["name"]
        same = await rules.replace_rule(name, created, dry_run=False)
        assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
        again = await rules.replace_rule(name, created, dry_run=False)
        assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    async def test_replace_of_a_missing_rule_is_404_not_found(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        body = rule(run)
        with pytest.raises(KubeApiError) as raised:
            await rules.replace_rule(body["metadata"]["name"], body, dry_run=False)
        assert (raised.value.status, raised.value.reason) == (404, "NotFound")

    async def test_delete_removes_the_rule_and_a_second_delete_is_false(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        created = await rules.create_rule(rule(run), dry_run=False)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        assert await rules.delete_rule(name, uid, dry_run=False) is True
        assert await rules.list_rules(f"{RUN_LABEL}={run}") == []
        assert await rules.delete_rule(name, uid, dry_run=False) is False
        assert await rules.delete_rule(name, None, dry_run=True) is False

    async def test_delete_with_another_uid_is_409_and_keeps_the_rule(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        created = await rules.create_rule(rule(run), dry_run=False)
        name = created["metadata"]["name"]
        for dry_run in (False, True):
            with pytest.raises(KubeApiError) as raised:
                await rules.delete_rule(name, str(uuid.uuid4()), dry_run=dry_run)
            assert (raised.value.status, raised.value.reason) == (409, "Conflict")
        assert names(await rules.list_rules(f"{RUN_LABEL}={run}")) == {name}
        assert await rules.delete_rule(name, None, dry_run=False) is True

    async def test_dry_runs_answer_as_the_write_would_and_store_nothing(
        self, rules: TaintRuleApi, run: str
    ) -> None:
        body = rule(run)
        name = body["metadata"]["name"]
        would = await rules.create_rule(body, dry_run=True)
        assert would["metadata"]["name"] == name
        # As the server would store it (uid and timeAdded set), but never stored: no version.
        assert would["metadata"]["uid"] and would["spec"]["taint"]["timeAdded"]
        assert "resourceVersion" not in would["metadata"]
        assert would["spec"]["deviceSelector"] == body["spec"]["deviceSelector"]
        assert await rules.list_rules(f"{RUN_LABEL}={run}") == []
        assert await rules.delete_rule(name, None, dry_run=True) is False

        created = await rules.create_rule(body, dry_run=False)
        would = await rules.replace_rule(name, with_effect(created, "NoExecute"), dry_run=True)
        assert would["spec"]["taint"]["effect"] == "NoExecute"
        assert await rules.delete_rule(name, created["metadata"]["uid"], dry_run=True) is True
        (listed,) = await rules.list_rules(f"{RUN_LABEL}={run}")
        assert listed["spec"]["taint"]["effect"] == "NoSchedule"
        assert listed["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


class TestFakeTaintRules(TaintRuleApiContract):
    @pytest.fixture
    def rules(self) -> TaintRuleApi:
        return FakeTaintRules()


class TestKubernetesTaintRules(TaintRuleApiContract):
    @pytest.fixture
    async def rules(self, admin_client: client.ApiClient, run: str) -> AsyncIterator[TaintRuleApi]:
        yield KubernetesTaintRules(admin_client)
        await client.ResourceV1beta2Api(admin_client).delete_collection_device_taint_rule(
            label_selector=f"{RUN_LABEL}={run}"
        )
