"""DRA adoption pools through the API, on the real Kafka broker and PostgreSQL: a declaration is
an ``adoption-set`` command on the governance topic; the real governor (``machine.step``) decides
it and its decisions are written as the worker writes them; ``GET /v1/adoption`` folds them and
evaluates the gate over the inventory projection (``tests/api/inventory_scenario.py``)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_rows import decision_row
from services.adapters.projection.governance_tables import governance_decisions
from services.adapters.projection.store import ProjectionStore
from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved, FailureOrigin
from services.domain.batch import LoggedBatch
from services.domain.governance.adoption import Phase
from services.domain.governance.inputs import CommandAction
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.inventory.state import Conflict, ConflictKind
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample
from services.domain.log import LogPosition
from services.domain.node_labels import NodeLabelsChanged
from tests.api.conftest import Governor, InventoryWriter, bearer, read_commands
from tests.api.inventory_scenario import DRIVER, GPU, NODE_A, NODE_C, load_fleet
from tests.conftest import T0, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration

EAST = {
    "pool": "east",
    "phase": "canary",
    "selector": {"driver": DRIVER},
    "deviceClass": DRIVER,
    "reason": "canary of DRA on gpu-node-a",
}
PLAIN = {
    "pool": "plain",
    "phase": "plugin",
    "selector": {"nodes": [NODE_C]},
    "reason": "stays on the plugin",
}


def failure(
    uid: str, count: int, cls: FailureClass, node: str, minutes: float
) -> DRAFailureObserved:
    return DRAFailureObserved(
        source_uid=uid,
        occurrences=count,
        origin=FailureOrigin.EVENT,
        namespace="ml",
        pod_name="p",
        pod_uid=None,
        node_name=node,
        reason="FailedPrepareDynamicResources",
        message="m",
        failure_class=cls,
        why="w",
        observed_at=T0 + timedelta(minutes=minutes),
    )


async def write_failures(store: ProjectionStore, records: list[DRAFailureObserved]) -> None:
    items = [(LogPosition("failures", 0, i), r) for i, r in enumerate(records)]
    await store.apply_batch(
        LoggedBatch(event_times=[(p, r.observed_at) for p, r in items], failures=items)
    )


def ready_pod(
    pod: str, node: str, path: DevicePath, seconds: float, minutes: float
) -> PodLifecycleObserved:
    device_class = DRIVER if path is DevicePath.DRA else "example.com/gpu"
    stages = (StageSample(Stage.POD_READY, device_class, path, seconds),)
    return PodLifecycleObserved(
        node, "ml", pod, f"uid-{pod}", T0 + timedelta(minutes=minutes), stages
    )


async def write_ready(store: ProjectionStore, records: list[PodLifecycleObserved]) -> None:
    items = [(LogPosition("lifecycle", 0, i), r) for i, r in enumerate(records)]
    await store.apply_batch(
        LoggedBatch(event_times=[(p, r.observed_at) for p, r in items], lifecycles=items)
    )


async def govern(
    governor: Governor, bootstrap: str, topic: str, count: int, written: int = 0
) -> None:
    """Decide the topic's first ``count`` commands with the real governor and write its
    decisions as the worker does (those of the first ``written`` commands are written already)."""
    state, policy = GovernorState(), GovernancePolicy()
    rows = []
    for seq, (_, command) in enumerate(await read_commands(bootstrap, topic, count)):
        assert command.action in (CommandAction.ADOPTION_SET, CommandAction.ADOPTION_RETIRE)
        decided = step(state, command, seq, policy)
        rows += [decision_row(d) for d in decided if seq >= written]
    await governor._insert(governance_decisions, rows)


async def test_pools_are_declared_on_the_log_and_gated_on_the_inventory(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)
    for i in range(4):  # governed devices beside the quarantined gpu-5: 1 of 5 quarantined
        await governor.device(NODE_A, GPU[i], "Available", T0, source="dra")
    await governor.fleet(T0 + timedelta(hours=1))

    await write_failures(
        store,
        [
            failure("e1", 2, FailureClass.RETRYABLE, NODE_A, 55),
            failure("e2", 1, FailureClass.RETRYABLE, NODE_A, 59),
            failure("e3", 10, FailureClass.NON_RETRYABLE, NODE_A, 58),
            failure("e4", 7, FailureClass.RETRYABLE, NODE_A, 40),  # out of the window
            failure("e5", 7, FailureClass.RETRYABLE, "gpu-node-z", 55),  # no pool's node
        ],
    )
    # Bound-to-Ready: 20 DRA Pods on the canary's node at 10 s, 20 plugin Pods of the class's
    # extended resource elsewhere at 2 s (pod_lifecycle_stages), one old DRA Pod out of the window
    await write_ready(
        store,
        [
            *(ready_pod(f"d{i}", NODE_A, DevicePath.DRA, 10, 50) for i in range(20)),
            *(ready_pod(f"p{i}", NODE_C, DevicePath.DEVICE_PLUGIN, 2, 50) for i in range(20)),
            ready_pod("old", NODE_A, DevicePath.DRA, 900, -1),
        ],
    )
    empty = await gov_api.get("/v1/adoption", headers=bearer("viewer"))
    assert empty.status_code == 200, empty.text
    assert empty.json() == {"eventTime": "2026-11-29T13:00:00Z", "pools": []}

    for body in (EAST, PLAIN):
        response = await gov_api.post("/v1/adoption", json=body, headers=bearer("operator"))
        assert response.status_code == 202, response.text
        assert response.json()["action"] == "adoption-set"
    await govern(governor, kafka_bootstrap, governance_topic, 2)

    body = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()
    east, plain = body["pools"]
    assert (east["pool"], east["phase"], east["nodes"], east["verdict"]) == (
        "east",
        "canary",
        [NODE_A],
        "hold",
    )
    # The governor's own verdict, recorded on its event time: this governor was given only the
    # commands (no inventory facts, no watermark), so it holds ("pool-empty", "no-event-time").
    assert east["recorded"]["verdict"] == plain["recorded"]["verdict"] == "hold"
    assert east["recorded"]["decisionId"] == "0.2"  # accepted, declared, then the verdict
    assert east["selector"] == {
        "driver": DRIVER,
        "slicePool": None,
        "nodes": [],
        "labelSelector": None,
    }
    assert east["deviceClass"] == DRIVER
    [declared] = east["history"]
    assert (declared["actor"], declared["phase"], declared["reason"]) == (
        "olga",
        "canary",
        "canary of DRA on gpu-node-a",
    )
    reasons = {r["code"]: r for r in east["reasons"]}
    assert set(reasons) == {
        "ownership-conflict",
        "slice-capacity-divergence",
        "devices-quarantined",
        "leaked-claims",
        "claim-failures",
        "ready-latency",
        "tenant-boundary",
    }
    assert reasons["tenant-boundary"]["figures"]["claims"] == 0
    # dra_failures on the canary's node in the window (600 s before the governor's event
    # time): 2 + 1 retryable, 10 non-retryable (a figure only); one older, one on another node
    assert reasons["claim-failures"]["verdict"] == "expand"
    figures = reasons["claim-failures"]["figures"]
    assert (figures["failures"], figures["retryable"], figures["nonRetryable"]) == (3, 3, 10)
    assert reasons["devices-quarantined"]["verdict"] == "hold"
    assert reasons["devices-quarantined"]["figures"]["quarantined"] == 1
    assert reasons["devices-quarantined"]["figures"]["devices"] == 5
    assert reasons["leaked-claims"]["verdict"] == "expand"  # the claim has consumers reserved
    # From pod_lifecycle_stages: DRA p95 10 s on the pool against 2 s on the plugin path
    assert reasons["ready-latency"]["verdict"] == "hold"
    latency = reasons["ready-latency"]["figures"]
    assert (latency["draP95"], latency["pluginP95"], latency["ratio"]) == (10.0, 2.0, 5.0)
    assert (latency["draSamples"], latency["pluginSamples"]) == (20, 20)
    # What GET gives is a declaration POST takes back (the new user of stop 20 could not).
    again = {
        "pool": "east",
        "phase": east["phase"],
        "selector": east["selector"],
        "deviceClass": east["deviceClass"],
        "reason": "re-declared as read",
    }
    response = await gov_api.post("/v1/adoption", json=again, headers=bearer("operator"))
    assert response.status_code in (200, 202), response.text
    assert (plain["pool"], plain["phase"], plain["nodes"], plain["verdict"]) == (
        "plain",
        Phase.PLUGIN.value,
        [NODE_C],
        "expand",
    )

    # The plugin and DRA claim the same hardware on the canary's node: roll it back.
    await inventory_writer.conflicts(
        [Conflict(ConflictKind.PLUGIN_AND_DRA, NODE_A, "example.com/gpu", "both paths")]
    )
    body = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()
    east = body["pools"][0]
    assert east["verdict"] == "rollback"
    [ownership] = [r for r in east["reasons"] if r["code"] == "ownership-conflict"]
    assert ownership["figures"] == {"conflicts": 1, "rollbackAt": 1}


async def test_a_bad_declaration_is_a_422_and_a_viewer_may_not_declare(
    gov_api: httpx.AsyncClient,
) -> None:
    for selector in (
        {"driver": DRIVER, "nodes": [NODE_A]},
        {"slicePool": "x"},
        {"nodes": []},
        {"driver": None, "slicePool": None, "nodes": []},
        {"nodes": [NODE_A], "slicePool": "x"},
    ):
        both = {**EAST, "selector": selector}
        response = await gov_api.post("/v1/adoption", json=both, headers=bearer("operator"))
        assert response.status_code == 422, response.text
    # Not DNS subdomains: the rollback policy's name (devicestate-adoption-rollback-<pool>)
    # would be refused by the API server.
    for name in ("East_Pool", "a..b", "a.-b", "a-.b", "a" * 64):
        bad_name = {**EAST, "pool": name}
        response = await gov_api.post("/v1/adoption", json=bad_name, headers=bearer("operator"))
        assert response.status_code == 422, name
        # The rule in words, not the schema's regex (the OpenAPI document keeps the pattern).
        assert response.json()["detail"].startswith(f"body.pool: {name!r} is not a pool name: ")
        assert (
            "a pool name is a DNS subdomain of at most 63 characters: lower-case letters, "
            "digits, '-' and '.'" in response.json()["detail"]
        )
        assert "[a-z0-9]" not in response.text
    bad_phase = {**EAST, "phase": "half"}
    response = await gov_api.post("/v1/adoption", json=bad_phase, headers=bearer("operator"))
    assert response.status_code == 422
    no_reason = {k: v for k, v in EAST.items() if k != "reason"}
    response = await gov_api.post("/v1/adoption", json=no_reason, headers=bearer("operator"))
    assert response.status_code == 422
    response = await gov_api.post("/v1/adoption", json=EAST, headers=bearer("viewer"))
    assert response.status_code == 403


async def test_a_pool_is_retired_by_delete_and_declared_again_as_a_new_pool(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    await governor.fleet(T0 + timedelta(hours=1))
    reason = {"reason": "typo of a100-east"}
    unknown = await gov_api.request(
        "DELETE", "/v1/adoption/east", json=reason, headers=bearer("operator")
    )
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["detail"] == (
        "pool 'east' is not declared (GET /v1/adoption lists the pools)"
    )
    response = await gov_api.post("/v1/adoption", json=EAST, headers=bearer("operator"))
    assert response.status_code == 202, response.text
    await govern(governor, kafka_bootstrap, governance_topic, 1)

    # A canary's devices are on DRA: refused without force, before anything is appended.
    on_dra = await gov_api.request(
        "DELETE", "/v1/adoption/east", json=reason, headers=bearer("operator")
    )
    assert on_dra.status_code == 409, on_dra.text
    assert "is in canary: its devices are still on DRA" in on_dra.json()["detail"]
    viewer = await gov_api.request(
        "DELETE", "/v1/adoption/east?force=true", json=reason, headers=bearer("viewer")
    )
    assert viewer.status_code == 403
    no_reason = await gov_api.request(
        "DELETE", "/v1/adoption/east?force=true", headers=bearer("operator")
    )
    assert no_reason.status_code == 422

    keyed = {**bearer("operator"), "Idempotency-Key": "retire-east-1"}
    retired = await gov_api.request(
        "DELETE", "/v1/adoption/east?force=true", json=reason, headers=keyed
    )
    assert retired.status_code == 202, retired.text
    assert retired.json()["action"] == "adoption-retire"
    [_, (_, command)] = await read_commands(kafka_bootstrap, governance_topic, 2)
    assert command.retire is not None
    assert (command.retire.pool, command.retire.force) == ("east", True)
    await govern(governor, kafka_bootstrap, governance_topic, 2, written=1)
    await governor.decide(command.command_id, "adoption-retire", True)  # its outcome row

    body = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()
    assert body["pools"] == []
    # A retry of the request gets its command's outcome, not a 404 for the pool now gone.
    again = await gov_api.request(
        "DELETE", "/v1/adoption/east?force=true", json=reason, headers=keyed
    )
    assert again.status_code == 200, again.text
    assert again.json()["commandID"] == retired.json()["commandID"]
    # Without `force` it is another request: the key's first one was forced.
    unforced = await gov_api.request("DELETE", "/v1/adoption/east", json=reason, headers=keyed)
    assert unforced.status_code == 409, unforced.text
    assert "retire-east-1" in unforced.json()["detail"]
    gone = await gov_api.request(
        "DELETE", "/v1/adoption/east?force=true", json=reason, headers=bearer("operator")
    )
    assert gone.status_code == 404

    # Declared again: a new pool, its history from the new declaration only.
    plugin = {**EAST, "phase": "plugin", "reason": "the real plan"}
    response = await gov_api.post("/v1/adoption", json=plugin, headers=bearer("operator"))
    assert response.status_code == 202, response.text
    await govern(governor, kafka_bootstrap, governance_topic, 3, written=2)
    [pool] = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()["pools"]
    assert [h["phase"] for h in pool["history"]] == ["plugin"]
    assert pool["recorded"]["decisionId"].startswith("2.")  # the new pool's first verdict


async def write_labels(
    store: ProjectionStore, records: list[NodeLabelsChanged], offset: int = 0
) -> None:
    """``NodeLabelsChanged`` records through the health agent's batch (the inventory fold), at
    ``offset`` on (the store skips a partition's offsets it already applied)."""
    items = [(LogPosition("labels", 0, offset + i), r) for i, r in enumerate(records)]
    await store.apply_batch(
        LoggedBatch(event_times=[(p, r.observed_at) for p, r in items], inventory=items)
    )


async def label_rows(engine: AsyncEngine, schema: str) -> dict[str, object]:
    async with engine.connect() as conn:
        rows = await conn.execute(text(f'SELECT node, labels FROM "{schema}".node_labels'))
        return {str(node): labels for node, labels in rows}


async def test_a_pool_selected_by_node_labels_follows_the_node_labels_table(
    engine: AsyncEngine,
    fresh_schema: str,
    gov_api: httpx.AsyncClient,
    governor: Governor,
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)
    await governor.fleet(T0 + timedelta(hours=1))
    await write_labels(
        store,
        [
            NodeLabelsChanged(NODE_A, (("pool", "east"), ("zone", "a")), T0),
            NodeLabelsChanged(NODE_C, (("pool", "west"),), T0),
        ],
    )
    selector = {
        "labelSelector": {
            "matchLabels": {"pool": "east"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
        }
    }
    body = {**EAST, "pool": "labelled", "selector": selector}
    response = await gov_api.post("/v1/adoption", json=body, headers=bearer("operator"))
    assert response.status_code == 202, response.text
    await govern(governor, kafka_bootstrap, governance_topic, 1)
    [pool] = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()["pools"]
    assert pool["nodes"] == [NODE_A]
    assert pool["selector"]["labelSelector"] == {
        "matchLabels": {"pool": "east"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
    }
    # NODE_A relabelled out, NODE_C in: the pool follows on the next read.
    await write_labels(
        store,
        [
            NodeLabelsChanged(NODE_A, (("pool", "west"),), T0 + timedelta(minutes=1)),
            NodeLabelsChanged(NODE_C, (("pool", "east"), ("zone", "b")), T0 + timedelta(minutes=1)),
        ],
        offset=2,
    )
    [pool] = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()["pools"]
    assert pool["nodes"] == [NODE_C]
    # NODE_C deleted: its row goes, and it leaves the pool. A removal then a re-creation in one
    # batch keeps the new labels; labels then a removal in one batch keep none (log order).
    await write_labels(store, [NodeLabelsChanged(NODE_C, (), T0 + timedelta(minutes=2), True)], 4)
    [pool] = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()["pools"]
    assert pool["nodes"] == []
    assert NODE_C not in await label_rows(engine, fresh_schema)  # gone, not an empty set
    later = T0 + timedelta(minutes=3)
    await write_labels(
        store,
        [
            NodeLabelsChanged(NODE_A, (), later, removed=True),
            NodeLabelsChanged(NODE_A, (("pool", "east"), ("zone", "a")), later),
            NodeLabelsChanged(NODE_C, (("pool", "east"), ("zone", "b")), later),
            NodeLabelsChanged(NODE_C, (), later, removed=True),
        ],
        offset=5,
    )
    [pool] = (await gov_api.get("/v1/adoption", headers=bearer("viewer"))).json()["pools"]
    assert pool["nodes"] == [NODE_A]
    assert await label_rows(engine, fresh_schema) == {NODE_A: {"pool": "east", "zone": "a"}}


@pytest.mark.parametrize(
    ("label_selector", "message"),
    [
        ({}, "at least one of `matchLabels`, `matchExpressions`"),
        ({"matchLabels": {}, "matchExpressions": []}, "at least one of `matchLabels`"),
        ({"matchLabels": {"-bad": "v"}}, "pattern"),
        ({"matchLabels": {"k": "bad value"}}, "pattern"),
        ({"matchExpressions": [{"key": "k", "operator": "In", "values": []}]}, "at least 1"),
        ({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]}, "at most 0"),
        ({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}, "operator"),
        ({"matchLabels": {f"k{i}": "v" for i in range(33)}}, "at most 32"),
    ],
)
async def test_a_bad_label_selector_is_a_422_with_the_reason(
    gov_api: httpx.AsyncClient, label_selector: dict[str, object], message: str
) -> None:
    body = {**EAST, "selector": {"labelSelector": label_selector}}
    response = await gov_api.post("/v1/adoption", json=body, headers=bearer("operator"))
    assert response.status_code == 422, response.text
    assert message in response.text, response.text
    both = {**EAST, "selector": {"nodes": [NODE_A], "labelSelector": {"matchLabels": {"k": "v"}}}}
    response = await gov_api.post("/v1/adoption", json=both, headers=bearer("operator"))
    assert response.status_code == 422 and "`labelSelector` or `nodes`" in response.text
