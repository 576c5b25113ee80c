"""``Idempotency-Key`` per principal and request (issue 11, item 4), against the real Kafka broker
and PostgreSQL.

Exactly one command per key is checked on the governance topic itself: after the requests under
test, a sentinel command without a key is appended; the topic has one partition, so the records
read back up to the sentinel are every command the requests made. The governor is simulated by
writing its ``governance_commands`` rows (as in ``test_governance_api``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import structlog.testing

from services.domain.governance.inputs import CommandAction, OperatorCommand
from tests.api.conftest import ApiFactory, Governor, bearer, read_commands

pytestmark = pytest.mark.integration

QUARANTINE = {"node": "gpu-node-a", "resourceID": "GPU-0", "reason": "XID 79 seen in dmesg"}
SENTINEL = {"reason": "sentinel: end of the commands under test"}


def keyed(role: str, key: str) -> dict[str, str]:
    return {**bearer(role), "Idempotency-Key": key}


async def commands_until_sentinel(
    api: httpx.AsyncClient, bootstrap: str, topic: str, expected: int
) -> list[OperatorCommand]:
    """Append the sentinel, read the topic up to it, and return the commands before it; at most
    ``expected`` of them are awaited (the sentinel comes after, in order, on one partition)."""
    sentinel = await api.post("/v1/automation/pause", json=SENTINEL, headers=bearer("operator"))
    assert sentinel.status_code == 202, sentinel.text
    records = await read_commands(bootstrap, topic, expected + 1)
    commands = [command for _, command in records]
    assert commands[-1].command_id == sentinel.json()["commandID"]
    return commands[:-1]


async def test_a_key_is_scoped_to_its_principal(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    key = "shared-key-1"
    olga = await gov_api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
    assert olga.status_code == 202, olga.text
    assert olga.json()["commandID"] == f"olga~{key}"
    await governor.decide(f"olga~{key}", "quarantine", True, actor="olga")
    await governor.quarantine(f"manual/olga~{key}", "gpu-node-a", "GPU-0", kind="manual")

    # An admin reusing the operator's key for another device gets a command of their own.
    other_device = {**QUARANTINE, "resourceID": "GPU-1", "reason": "admin: fan failure"}
    ada = await gov_api.post("/v1/quarantines", json=other_device, headers=keyed("admin", key))
    assert ada.status_code == 202, ada.text
    body = ada.json()
    assert (body["commandID"], body["status"], body["actor"]) == (f"ada~{key}", "pending", "ada")

    commands = await commands_until_sentinel(gov_api, kafka_bootstrap, governance_topic, 2)
    assert [(c.command_id, c.actor, c.resource_id) for c in commands] == [
        (f"olga~{key}", "olga", "GPU-0"),
        (f"ada~{key}", "ada", "GPU-1"),
    ]
    # The operator's own retry still gets the operator's outcome.
    retry = await gov_api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
    assert retry.status_code == 201
    assert retry.json()["quarantineID"] == f"manual/olga~{key}"


async def test_the_same_key_with_another_body_is_409_naming_the_conflict(
    gov_api: httpx.AsyncClient, kafka_bootstrap: str, governance_topic: str
) -> None:
    key = "body-key-1"
    first = await gov_api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
    assert first.status_code == 202, first.text
    other = {**QUARANTINE, "resourceID": "GPU-7"}
    with structlog.testing.capture_logs() as logs:
        conflict = await gov_api.post("/v1/quarantines", json=other, headers=keyed("operator", key))
    assert conflict.status_code == 409
    assert conflict.json()["detail"] == (
        "Idempotency-Key 'body-key-1' was already used for a 'quarantine' command "
        "(POST /v1/quarantines) with a different request (method, path or body); a retry must "
        "repeat the request exactly, a new request needs a new key"
    )
    assert [(e["event"], e["actor"], e["command_id"]) for e in logs] == [
        ("idempotency key conflict", "olga", f"olga~{key}")
    ]
    # Another path (another action) with the key is a conflict too, before the governor decides.
    pause = await gov_api.post(
        "/v1/automation/pause", json={"reason": "x"}, headers=keyed("operator", key)
    )
    assert pause.status_code == 409
    assert (
        "already used for a 'quarantine' command (POST /v1/quarantines)" in (pause.json()["detail"])
    )
    commands = await commands_until_sentinel(gov_api, kafka_bootstrap, governance_topic, 1)
    assert [(c.command_id, c.resource_id) for c in commands] == [(f"olga~{key}", "GPU-0")]


async def test_the_same_body_replays_the_first_command(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    key = "replay-key-1"
    first = await gov_api.post(
        "/v1/quarantines", json={**QUARANTINE, "ttlSeconds": 3600}, headers=keyed("operator", key)
    )
    assert first.status_code == 202, first.text
    # The same JSON with its keys in another order and other whitespace is the same request.
    same = (
        '{ "ttlSeconds": 3600, "reason": "XID 79 seen in dmesg",\n'
        '  "resourceID": "GPU-0", "node": "gpu-node-a" }'
    )
    headers = {**keyed("operator", key), "Content-Type": "application/json"}
    undecided = await gov_api.post("/v1/quarantines", content=same, headers=headers)
    assert undecided.status_code == 202
    assert (undecided.json()["commandID"], undecided.json()["status"]) == (
        f"olga~{key}",
        "pending",
    )
    await governor.decide(f"olga~{key}", "quarantine", True)
    await governor.quarantine(f"manual/olga~{key}", "gpu-node-a", "GPU-0", kind="manual")
    decided = await gov_api.post("/v1/quarantines", content=same, headers=headers)
    assert decided.status_code == 201
    assert (decided.json()["commandID"], decided.json()["quarantineID"]) == (
        f"olga~{key}",
        f"manual/olga~{key}",
    )
    commands = await commands_until_sentinel(gov_api, kafka_bootstrap, governance_topic, 1)
    assert [c.command_id for c in commands] == [f"olga~{key}"]


async def test_the_key_survives_a_restart_of_the_api(
    make_api: ApiFactory, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    """The commandID is a function of (principal, key): a new API process (an empty registry)
    answers a decided key with its outcome, and another principal's key stays independent."""
    key = "restart-key-1"
    async with make_api() as api:
        first = await api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
        assert first.status_code == 202
    await governor.decide(f"olga~{key}", "quarantine", False, "already quarantined (q@1)")
    async with make_api() as api:
        again = await api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
        assert again.status_code == 409
        assert (again.json()["commandID"], again.json()["reason"]) == (
            f"olga~{key}",
            "already quarantined (q@1)",
        )
        ada = await api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("admin", key))
        assert (ada.status_code, ada.json()["commandID"]) == (202, f"ada~{key}")
        commands = await commands_until_sentinel(api, kafka_bootstrap, governance_topic, 2)
    assert [c.command_id for c in commands] == [f"olga~{key}", f"ada~{key}"]


async def test_the_request_fingerprint_survives_a_restart_of_the_api(
    make_api: ApiFactory, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    """The command carries its request's fingerprint and the governor records it with the
    decision: a restarted API (an empty registry; or another replica) answers another body with
    the key 409 naming the conflict, and the same body with the first command's outcome
    (issue 11, item 4)."""
    key = "restart-key-2"
    async with make_api() as api:
        first = await api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
        assert first.status_code == 202
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert command.request_fingerprint is not None
    await governor.decide(
        command.command_id, "quarantine", True, request_fingerprint=command.request_fingerprint
    )
    other = {**QUARANTINE, "resourceID": "GPU-1"}
    async with make_api() as api:
        conflict = await api.post("/v1/quarantines", json=other, headers=keyed("operator", key))
        assert conflict.status_code == 409, conflict.text
        assert f"Idempotency-Key '{key}'" in conflict.json()["detail"]
        again = await api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
        assert again.status_code == 201, again.text
        assert again.json()["commandID"] == f"olga~{key}"
        commands = await commands_until_sentinel(api, kafka_bootstrap, governance_topic, 1)
    assert [c.command_id for c in commands] == [f"olga~{key}"]


async def test_concurrent_requests_with_one_key_make_one_command_and_n_answers(
    gov_api: httpx.AsyncClient, kafka_bootstrap: str, governance_topic: str
) -> None:
    n, key = 12, "concurrent-key-1"
    with structlog.testing.capture_logs() as logs:
        answers = await asyncio.gather(
            *(
                gov_api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
                for _ in range(n)
            )
        )
    assert [a.status_code for a in answers] == [202] * n
    assert {a.json()["commandID"] for a in answers} == {f"olga~{key}"}
    assert {a.headers["location"] for a in answers} == {f"/v1/commands/olga~{key}"}
    # Every request is logged with its actor: one append and n - 1 repeats of it.
    events = [(e["event"], e["actor"], e["command_id"]) for e in logs]
    assert sorted(events) == sorted(
        [("command appended", "olga", f"olga~{key}")]
        + [("idempotent repeat", "olga", f"olga~{key}")] * (n - 1)
    )
    commands = await commands_until_sentinel(gov_api, kafka_bootstrap, governance_topic, 1)
    assert [(c.command_id, c.action) for c in commands] == [
        (f"olga~{key}", CommandAction.QUARANTINE)
    ]


async def test_concurrent_different_commands_with_one_key_make_one_command_and_409s(
    gov_api: httpx.AsyncClient, kafka_bootstrap: str, governance_topic: str
) -> None:
    key = "concurrent-key-2"
    bodies: list[dict[str, Any]] = [{**QUARANTINE, "resourceID": f"GPU-{i}"} for i in range(6)]
    answers = await asyncio.gather(
        *(gov_api.post("/v1/quarantines", json=b, headers=keyed("operator", key)) for b in bodies)
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [202] + [409] * 5
    [accepted] = [a for a in answers if a.status_code == 202]
    for refused in (a for a in answers if a.status_code == 409):
        assert "with a different request" in refused.json()["detail"]
    commands = await commands_until_sentinel(gov_api, kafka_bootstrap, governance_topic, 1)
    assert [c.command_id for c in commands] == [accepted.json()["commandID"]]


async def test_the_openapi_document_describes_the_key_and_its_409(
    gov_api: httpx.AsyncClient,
) -> None:
    spec = (await gov_api.get("/openapi.json")).json()
    for path in ("/v1/quarantines", "/v1/automation/pause", "/v1/breaker/reset"):
        post = spec["paths"][path]["post"]
        [header] = [p for p in post["parameters"] if p["name"] == "Idempotency-Key"]
        assert "scoped to the token's principal" in header["description"]
        assert "the same key with another request is 409" in header["description"]
        conflict = post["responses"]["409"]
        assert "already used for another request" in conflict["description"]
        refs = conflict["content"]["application/json"]["schema"]["anyOf"]
        assert {"$ref": "#/components/schemas/ErrorOut"} in refs


async def test_a_failed_append_answers_every_waiter_503_and_frees_the_key(
    make_api: ApiFactory,
) -> None:
    key = "unreachable-key-1"
    # Port 9 (discard) on loopback: nothing listens, connections are refused at once.
    async with make_api(kafka_bootstrap_servers="127.0.0.1:9") as api:
        answers = await asyncio.gather(
            *(
                api.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
                for _ in range(4)
            )
        )
        assert [a.status_code for a in answers] == [503] * 4
        for answer in answers:
            assert answer.json()["detail"].startswith("command not recorded, retry later:")
        # Nothing was appended, so the key is not bound to that request: another one is no 409.
        other = {**QUARANTINE, "resourceID": "GPU-3"}
        again = await api.post("/v1/quarantines", json=other, headers=keyed("operator", key))
        assert again.status_code == 503


async def test_another_replica_answers_409_once_the_first_body_is_decided(
    make_api: ApiFactory, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    """Two API replicas (two registries) and one key, two bodies, the first still undecided
    when the second arrives: the second replica cannot know the first body yet and appends
    (the governor decides the commandID once, for the first), but once the decision is recorded
    it answers 409 naming the conflict, not the first body's outcome as if it were its own
    (issue 11, item 4). A repeat of the second body on its replica gets the same 409."""
    key = "replica-key-1"
    other = {**QUARANTINE, "resourceID": "GPU-1"}
    async with make_api() as one, make_api() as two:
        first = await one.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
        assert first.status_code == 202, first.text
        [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)

        async def decide_soon() -> None:
            await asyncio.sleep(0.5)
            await governor.decide(
                command.command_id,
                "quarantine",
                True,
                request_fingerprint=command.request_fingerprint,
            )

        decider = asyncio.create_task(decide_soon())
        second = await two.post(
            "/v1/quarantines?wait=10", json=other, headers=keyed("operator", key)
        )
        await decider
        assert second.status_code == 409, second.text
        assert f"Idempotency-Key '{key}'" in second.json()["detail"]
        again = await two.post("/v1/quarantines", json=other, headers=keyed("operator", key))
        assert again.status_code == 409, again.text
        # The first body still gets its own outcome, on either replica.
        mine = await two.post("/v1/quarantines", json=QUARANTINE, headers=keyed("operator", key))
        assert mine.status_code == 201, mine.text
