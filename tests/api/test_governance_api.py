"""The governance API against the real Kafka broker and PostgreSQL.

Writes are checked on the governance topic itself (read back with a consumer). The governor is
simulated by writing its projection rows (``governance_commands``, ``quarantines``, ...) from the
test, which is what the real one does after deciding a command.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.governance.inputs import CommandAction, Role
from tests.api.conftest import ApiFactory, Governor, bearer, read_commands
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration

SYSTEM_QID = "gpu-node-a/gpu.example.com/pool-a/gpu-2@42"
"""A system quarantine ID: ``<node>/<resourceID>@<statusVersion>``, slashes inside."""
QUARANTINE = {"node": "gpu-node-a", "resourceID": "GPU-0", "reason": "XID 79 seen in dmesg"}


def close_to_now(value: datetime | None, offset: timedelta, slack: float = 30.0) -> bool:
    assert value is not None
    return abs((value - (datetime.now(UTC) + offset)).total_seconds()) < slack


# --- commands on the topic ------------------------------------------------------------------------


async def test_operator_quarantine_is_a_command_on_the_governance_topic(
    gov_api: httpx.AsyncClient, kafka_bootstrap: str, governance_topic: str
) -> None:
    response = await gov_api.post(
        "/v1/quarantines", json={**QUARANTINE, "ttlSeconds": 7200}, headers=bearer("operator")
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "pending"
    assert body["accepted"] is None
    assert body["action"] == "quarantine"
    command_id = body["commandID"]
    assert response.headers["location"] == f"/v1/commands/{command_id}"

    [(key, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert key == b"gpu-node-a"
    assert command.command_id == command_id
    assert command.action is CommandAction.QUARANTINE
    assert (command.actor, command.role) == ("olga", Role.OPERATOR)
    assert command.reason == "XID 79 seen in dmesg"
    assert (command.node, command.resource_id) == ("gpu-node-a", "GPU-0")
    assert close_to_now(command.expires_at, timedelta(hours=2))
    assert close_to_now(command.requested_at, timedelta(0))
    assert command.break_glass is False

    # Until the governor decides it, this API says pending.
    pending = await gov_api.get(f"/v1/commands/{command_id}")
    assert pending.status_code == 202
    assert pending.json()["status"] == "pending"


async def test_fleet_commands_carry_actor_role_and_reason(
    gov_api: httpx.AsyncClient, kafka_bootstrap: str, governance_topic: str
) -> None:
    pause = await gov_api.post(
        "/v1/automation/pause", json={"reason": "driver rollout"}, headers=bearer("operator")
    )
    resume = await gov_api.post("/v1/automation/resume", headers=bearer("operator"))
    reset = await gov_api.post(
        "/v1/breaker/reset", json={"reason": "rack power restored"}, headers=bearer("admin")
    )
    assert [r.status_code for r in (pause, resume, reset)] == [202, 202, 202]
    commands = [c for _, c in await read_commands(kafka_bootstrap, governance_topic, 3)]
    assert [(c.action, c.actor, c.role, c.reason) for c in commands] == [
        (CommandAction.PAUSE, "olga", Role.OPERATOR, "driver rollout"),
        (CommandAction.RESUME, "olga", Role.OPERATOR, ""),
        (CommandAction.RESET_BREAKER, "ada", Role.ADMIN, "rack power restored"),
    ]
    assert all(c.node is None and c.resource_id is None for c in commands)


async def test_release_and_extend_address_the_quarantine_by_its_id(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    await governor.quarantine(SYSTEM_QID, "gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    unknown = await gov_api.post(
        "/v1/quarantines/gpu-node-a/GPU-9@1/release",
        json={"reason": "fixed"},
        headers=bearer("operator"),
    )
    assert unknown.status_code == 404
    assert "gpu-node-a/GPU-9@1" in unknown.json()["detail"]

    release = await gov_api.post(
        f"/v1/quarantines/{SYSTEM_QID}/release",
        json={"reason": "reseated the card"},
        headers=bearer("operator"),
    )
    assert release.status_code == 202, release.text
    assert release.json()["quarantineID"] == SYSTEM_QID
    # breakGlass needs the admin role ...
    glass = await gov_api.post(
        f"/v1/quarantines/{SYSTEM_QID}/release",
        json={"reason": "customer escalation", "breakGlass": True},
        headers=bearer("operator"),
    )
    assert glass.status_code == 403
    assert "a break-glass release needs the admin role" in glass.json()["detail"]
    # ... and a reason.
    empty = await gov_api.post(
        f"/v1/quarantines/{SYSTEM_QID}/release",
        json={"reason": "  ", "breakGlass": True},
        headers=bearer("admin"),
    )
    assert empty.status_code == 422
    assert "reason must not be empty" in empty.text
    admin = await gov_api.post(
        f"/v1/quarantines/{SYSTEM_QID}/release",
        json={"reason": "customer escalation", "breakGlass": True},
        headers=bearer("admin"),
    )
    assert admin.status_code == 202, admin.text
    # Percent-encoded slashes reach the same quarantine.
    encoded_id = SYSTEM_QID.replace("/", "%2F").replace("@", "%40")
    # An expiry with an offset, within the 366 days a command may ask for.
    until = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    until += timedelta(days=30)
    extend = await gov_api.post(
        f"/v1/quarantines/{encoded_id}/extend",
        json={"reason": "waiting for RMA", "expiresAt": f"{until:%Y-%m-%d}T02:00:00+02:00"},
        headers=bearer("operator"),
    )
    assert extend.status_code == 202, extend.text

    commands = [c for _, c in await read_commands(kafka_bootstrap, governance_topic, 3)]
    assert [(c.action, c.actor, c.break_glass) for c in commands] == [
        (CommandAction.RELEASE, "olga", False),
        (CommandAction.RELEASE, "ada", True),
        (CommandAction.EXTEND, "olga", False),
    ]
    assert {(c.node, c.resource_id) for c in commands} == {
        ("gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    }
    assert commands[1].reason == "customer escalation"
    assert commands[2].expires_at == until


async def test_a_released_quarantine_cannot_be_released_or_extended_again(
    gov_api: httpx.AsyncClient, governor: Governor
) -> None:
    await governor.quarantine(
        "manual/abc",
        "gpu-node-a",
        "GPU-0",
        kind="manual",
        status="released",
        released_at=T0 + timedelta(hours=1),
        released_by="olga",
    )
    for action, body in (
        ("release", {"reason": "x"}),
        ("extend", {"reason": "x", "ttlSeconds": 9}),
    ):
        response = await gov_api.post(
            f"/v1/quarantines/manual/abc/{action}", json=body, headers=bearer("operator")
        )
        assert response.status_code == 409
        assert response.json()["detail"] == (
            "quarantine 'manual/abc' was already released at 2026-11-29T13:00:00Z by olga"
        )


# --- waiting for the governor ---------------------------------------------------------------------


async def simulate_governor(
    governor: Governor,
    bootstrap: str,
    topic: str,
    *,
    accept: bool,
    reason: str = "",
) -> str:
    """Read the next command from the topic and decide it as the governor would."""
    [(_, command)] = await read_commands(bootstrap, topic, 1)
    if accept and command.action is CommandAction.QUARANTINE:
        qid = f"manual/{command.command_id}"
        await governor.quarantine(
            qid,
            command.node or "",
            command.resource_id or "",
            kind="manual",
            reason=command.reason,
            actor=command.actor,
        )
        await governor.decision(
            governor.seq + 1,
            0,
            "CommandAccepted",
            command.requested_at,
            command.node,
            None,
            commandID=command.command_id,
            quarantineID=qid,
        )
    await governor.decide(command.command_id, command.action.value, accept, reason, command.actor)
    return command.command_id


async def test_wait_returns_201_once_the_governor_accepts(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    response, command_id = await asyncio.gather(
        gov_api.post(
            "/v1/quarantines",
            params={"wait": 25},
            json=QUARANTINE,
            headers=bearer("operator"),
        ),
        simulate_governor(governor, kafka_bootstrap, governance_topic, accept=True),
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["commandID"] == command_id
    assert (body["status"], body["accepted"]) == ("accepted", True)
    assert body["quarantineID"] == f"manual/{command_id}"
    # The outcome stays readable, and the quarantine is listed.
    outcome = (await gov_api.get(f"/v1/commands/{command_id}")).json()
    assert (outcome["status"], outcome["actor"], outcome["quarantineID"]) == (
        "accepted",
        "olga",
        f"manual/{command_id}",
    )
    listed = (await gov_api.get("/v1/quarantines", params={"kind": "manual"})).json()
    assert [q["quarantineID"] for q in listed["items"]] == [f"manual/{command_id}"]


async def test_wait_returns_409_with_the_reason_when_rejected(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    response, command_id = await asyncio.gather(
        gov_api.post(
            "/v1/automation/pause",
            params={"wait": 25},
            json={"reason": "rollout"},
            headers=bearer("operator"),
        ),
        simulate_governor(
            governor, kafka_bootstrap, governance_topic, accept=False, reason="already paused"
        ),
    )
    assert response.status_code == 409, response.text
    body = response.json()
    assert (body["commandID"], body["accepted"], body["reason"]) == (
        command_id,
        False,
        "already paused",
    )
    assert body["detail"] == "pause-automation rejected: already paused"


async def test_wait_gives_202_when_undecided_in_time(gov_api: httpx.AsyncClient) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    response = await gov_api.post(
        "/v1/quarantines", params={"wait": 0.5}, json=QUARANTINE, headers=bearer("operator")
    )
    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    assert 0.5 <= loop.time() - started < 10


async def test_idempotency_key_scoped_to_the_principal_is_the_command_id_and_returns_a_known_outcome(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    key = "retry-3f1c9a"
    command_id = f"olga~{key}"
    first = await gov_api.post(
        "/v1/quarantines",
        json=QUARANTINE,
        headers={**bearer("operator"), "Idempotency-Key": key},
    )
    assert first.status_code == 202
    assert first.json()["commandID"] == command_id
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert command.command_id == command_id
    await governor.decide(command_id, "quarantine", True)
    await governor.quarantine(f"manual/{command_id}", "gpu-node-a", "GPU-0", kind="manual")
    retry = await gov_api.post(
        "/v1/quarantines",
        json=QUARANTINE,
        headers={**bearer("operator"), "Idempotency-Key": key},
    )
    assert retry.status_code == 201
    assert (retry.json()["commandID"], retry.json()["quarantineID"]) == (
        command_id,
        f"manual/{command_id}",
    )
    misuse = await gov_api.post(
        "/v1/automation/pause",
        json={"reason": "x"},
        headers={**bearer("operator"), "Idempotency-Key": key},
    )
    assert misuse.status_code == 409
    assert "already used for a 'quarantine' command" in misuse.json()["detail"]
    bad = await gov_api.post(
        "/v1/quarantines",
        json=QUARANTINE,
        headers={**bearer("operator"), "Idempotency-Key": "no/slashes"},
    )
    assert bad.status_code == 422
    assert "Idempotency-Key" in bad.json()["detail"]


async def test_unknown_command_is_404(gov_api: httpx.AsyncClient, governor: Governor) -> None:
    response = await gov_api.get("/v1/commands/0b7c")
    assert response.status_code == 404
    assert "not decided" in response.json()["detail"]
    await governor.decide("0b7c", "extend", False, "the device has no active quarantine")
    decided = (await gov_api.get("/v1/commands/0b7c")).json()
    assert (decided["status"], decided["reason"], decided["quarantineID"]) == (
        "rejected",
        "the device has no active quarantine",
        None,
    )


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/v1/quarantines", {**QUARANTINE, "reason": ""}, "reason must not be empty"),
        ("/v1/quarantines", {**QUARANTINE, "reason": "   "}, "reason must not be empty"),
        ("/v1/quarantines", {"node": "gpu-node-a", "resourceID": "GPU-0"}, "reason"),
        (
            "/v1/quarantines",
            {**QUARANTINE, "expiresAt": "2020-01-01T00:00:00Z"},
            "expiresAt 2020-01-01T00:00:00+00:00 is in the past",
        ),
        (
            "/v1/quarantines",
            {**QUARANTINE, "expiresAt": "2099-01-01T00:00:00"},
            "timezone",
        ),
        ("/v1/quarantines", {**QUARANTINE, "expiresAt": "tomorrow"}, "datetime"),
        (
            "/v1/quarantines",
            {
                **QUARANTINE,
                "expiresAt": f"{datetime.now(UTC).year + 1}-01-01T00:00:00Z",
                "ttlSeconds": 60,
            },
            "not both",
        ),
        ("/v1/quarantines", {**QUARANTINE, "ttlSeconds": 0}, "greater than or equal to 1"),
        ("/v1/quarantines", {**QUARANTINE, "ttlSeconds": 10**9}, "less than or equal"),
        ("/v1/quarantines", {**QUARANTINE, "node": "a/b"}, "not a DNS-1123 subdomain"),
        ("/v1/quarantines", {**QUARANTINE, "node": ""}, "node is empty"),
        ("/v1/quarantines", {**QUARANTINE, "force": True}, "Extra inputs"),
        ("/v1/quarantines?wait=31", QUARANTINE, "less than or equal to 30"),
        ("/v1/automation/pause", {}, "reason"),
        ("/v1/automation/pause", {"reason": ""}, "reason must not be empty"),
        (
            "/v1/quarantines",
            {**QUARANTINE, "reason": "xid 79 \u202eevomer ton od"},
            "reason contains a bidirectional-control character, U+202E at position 7",
        ),
        (
            "/v1/automation/pause",
            {"reason": "maintenance \u2066window\u2069"},
            "U+2066 at position 12",
        ),
        ("/v1/quarantines/q/extend", {"reason": "rma"}, "expiresAt or ttlSeconds"),
    ],
)
async def test_bad_bodies_are_422_with_a_message(
    gov_api: httpx.AsyncClient, path: str, body: dict[str, Any], needle: str
) -> None:
    response = await gov_api.post(path, json=body, headers=bearer("admin"))
    assert response.status_code == 422, response.text
    assert needle in response.text


# --- Kafka down ---------------------------------------------------------------------------------


async def test_kafka_unreachable_gives_503_on_writes_and_reads_keep_working(
    make_api: ApiFactory,
) -> None:
    # Port 9 (discard) on loopback: nothing listens, connections are refused at once.
    async with make_api(kafka_bootstrap_servers="127.0.0.1:9") as api:
        response = await api.post("/v1/quarantines", json=QUARANTINE, headers=bearer("operator"))
        assert response.status_code == 503
        assert response.json()["detail"].startswith("command not recorded, retry later:")
        assert "127.0.0.1:9" in response.json()["detail"]
        assert response.headers["retry-after"] == "5"
        assert (await api.get("/v1/devices")).status_code == 200
        assert (await api.get("/v1/governance")).status_code == 200
        assert (await api.get("/v1/quarantines")).status_code == 200


# --- reads -------------------------------------------------------------------------------------


async def test_quarantines_list_filters_and_pages(
    gov_api: httpx.AsyncClient, governor: Governor
) -> None:
    for i in range(5):
        await governor.quarantine(
            f"gpu-node-{'ab'[i % 2]}/GPU-{i}@{i + 1}",
            f"gpu-node-{'ab'[i % 2]}",
            f"GPU-{i}",
            created_at=T0 + timedelta(minutes=i),
            status="released" if i == 0 else "active",
            expires_at=T0 + timedelta(days=1) if i == 4 else None,
        )
    await governor.quarantine(
        "manual/cmd-1", "gpu-node-a", "GPU-0", kind="manual", created_at=T0 + timedelta(minutes=9)
    )
    everything = (await gov_api.get("/v1/quarantines")).json()
    ids = [q["quarantineID"] for q in everything["items"]]
    assert ids == [
        "manual/cmd-1",
        "gpu-node-a/GPU-4@5",
        "gpu-node-b/GPU-3@4",
        "gpu-node-a/GPU-2@3",
        "gpu-node-b/GPU-1@2",
        "gpu-node-a/GPU-0@1",
    ]
    newest = everything["items"][1]
    assert newest["expiresAt"] == "2026-11-30T12:00:00Z"
    assert newest["kind"] == "system"
    assert newest["fencingToken"] == 0

    async def ids_of(**params: Any) -> list[str]:
        response = await gov_api.get("/v1/quarantines", params=params)
        assert response.status_code == 200, response.text
        return [q["quarantineID"] for q in response.json()["items"]]

    assert await ids_of(status="released") == ["gpu-node-a/GPU-0@1"]
    assert await ids_of(kind="manual") == ["manual/cmd-1"]
    assert await ids_of(node="gpu-node-b") == ["gpu-node-b/GPU-3@4", "gpu-node-b/GPU-1@2"]
    assert await ids_of(node="gpu-node-a", resourceID="GPU-0") == [
        "manual/cmd-1",
        "gpu-node-a/GPU-0@1",
    ]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 4}
    while True:
        page = (await gov_api.get("/v1/quarantines", params=params)).json()
        seen += [q["quarantineID"] for q in page["items"]]
        if page["nextCursor"] is None:
            break
        params["cursor"] = page["nextCursor"]
    assert seen == ids
    one = await gov_api.get("/v1/quarantines/gpu-node-a/GPU-4@5")
    assert one.status_code == 200 and one.json()["resourceID"] == "GPU-4"
    assert (await gov_api.get("/v1/quarantines/nope@1")).status_code == 404
    bad = await gov_api.get("/v1/quarantines", params={"status": "frozen"})
    assert bad.status_code == 422 and "active" in bad.text
    assert "malformed cursor" in (await gov_api.get("/v1/quarantines?cursor=xyz")).text


async def test_timeline_merges_observations_and_decisions_in_time_order(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    from services.domain.events import Health

    events = [
        observation(1, at=0),
        observation(2, Health.UNHEALTHY, at=60, message="XID 79"),
        observation(3, at=600),
    ]
    await store.apply_batch(LoggedBatch(logged(events), highwaters={(TOPIC, 0): 3}))
    qid = "gpu-node-a/GPU-0@2"
    await governor.decision(
        10,
        0,
        "DeviceGovernanceChanged",
        T0 + timedelta(seconds=60),
        "gpu-node-a",
        "GPU-0",
        state="Quarantined",
    )
    await governor.decision(
        10,
        1,
        "DeviceQuarantined",
        T0 + timedelta(seconds=60),
        "gpu-node-a",
        "GPU-0",
        quarantineID=qid,
        incident=f"quarantine/{qid}",
        summary="quarantined",
    )
    await governor.decision(
        14,
        0,
        "RecoveryStageStarted",
        T0 + timedelta(seconds=620),
        "gpu-node-a",
        "GPU-0",
        stage="probe",
    )
    # Another device's decision stays out.
    await governor.decision(
        11, 0, "DeviceQuarantined", T0 + timedelta(seconds=70), "gpu-node-a", "GPU-1"
    )
    response = await gov_api.get("/v1/nodes/gpu-node-a/timeline/GPU-0")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["node"], body["resourceID"]) == ("gpu-node-a", "GPU-0")
    summary = [
        (i["kind"], i["time"], i["fields"].get("type") or i["fields"]["health"])
        for i in body["items"]
    ]
    assert summary == [
        ("observation", "2026-11-29T12:00:00Z", "Healthy"),
        ("observation", "2026-11-29T12:01:00Z", "Unhealthy"),
        ("decision", "2026-11-29T12:01:00Z", "DeviceGovernanceChanged"),
        ("decision", "2026-11-29T12:01:00Z", "DeviceQuarantined"),
        ("observation", "2026-11-29T12:10:00Z", "Healthy"),
        ("decision", "2026-11-29T12:10:20Z", "RecoveryStageStarted"),
    ]
    quarantined = body["items"][3]["fields"]
    assert quarantined["id"] == "10.1"
    assert quarantined["incident"] == f"quarantine/{qid}"
    assert quarantined["details"]["quarantineID"] == qid
    assert body["items"][1]["fields"]["message"] == "XID 79"
    assert body["items"][1]["fields"]["statusVersion"] == "2"
    limited = (await gov_api.get("/v1/nodes/gpu-node-a/timeline/GPU-0?limit=2")).json()
    assert [i["time"] for i in limited["items"]] == [
        "2026-11-29T12:10:00Z",
        "2026-11-29T12:10:20Z",
    ]
    unknown = await gov_api.get("/v1/nodes/gpu-node-a/timeline/GPU-77")
    assert unknown.status_code == 404


NOW = datetime(2026, 11, 29, 12, 30, tzinfo=UTC)


async def test_governance_status_and_staleness(make_api: ApiFactory, governor: Governor) -> None:
    clock = {"now": NOW}
    async with make_api(clock=lambda: clock["now"], tick_interval_seconds=15) as api:
        never = (await api.get("/v1/governance")).json()
        assert (never["governorSeen"], never["stale"], never["staleSince"]) == (False, True, None)
        assert never["message"] == "the governor has not recorded any state yet"
        assert never["devicesByState"]["Quarantined"] == 0

        watermark = NOW - timedelta(seconds=30)
        await governor.fleet(
            watermark,
            breaker_open=True,
            automation_paused=True,
            snapshot={
                "watermarks": {"0": "2026-11-29T12:29:30Z", "1": "2026-11-29T12:29:45Z"},
                "breakerOpenedAt": "2026-11-29T12:20:00Z",
                "breakerIncident": "breaker/2026-11-29T12:20:00Z",
                "pausedBy": "olga",
                "pauseReason": "driver rollout",
                "deferred": [["gpu-node-a", "GPU-1"]],
            },
        )
        await governor.device("gpu-node-a", "GPU-0", "Quarantined", T0)
        await governor.device("gpu-node-a", "GPU-1", "Deferred", T0)
        await governor.device("gpu-node-b", "GPU-0", "Available", T0)
        await governor.quarantine("gpu-node-a/GPU-0@2", "gpu-node-a", "GPU-0")
        await governor.quarantine("old@1", "gpu-node-a", "GPU-0", status="released")
        await governor.node("gpu-node-c", heartbeat_lost=True)
        await governor.node("gpu-node-a", heartbeat_lost=False)

        # 30 s behind: within 2 x 15 s + 5 s.
        fresh = (await api.get("/v1/governance")).json()
        assert fresh["governorSeen"] is True
        assert fresh["watermark"] == "2026-11-29T12:29:30Z"
        assert fresh["watermarkAgeSeconds"] == 30.0
        assert fresh["staleThresholdSeconds"] == 35.0
        assert (fresh["stale"], fresh["staleSince"]) == (False, None)
        assert fresh["watermarks"] == {"0": "2026-11-29T12:29:30Z", "1": "2026-11-29T12:29:45Z"}
        assert fresh["breaker"] == {
            "open": True,
            "openedAt": "2026-11-29T12:20:00Z",
            "incident": "breaker/2026-11-29T12:20:00Z",
        }
        assert fresh["automation"] == {
            "paused": True,
            "pausedBy": "olga",
            "reason": "driver rollout",
        }
        assert fresh["activeQuarantines"] == 1
        assert fresh["deferred"] == 1
        assert fresh["nodesHeartbeatLost"] == 1
        assert fresh["devices"] == 3
        assert fresh["devicesByState"] == {
            "Available": 1,
            "UnknownTolerated": 0,
            "Restricted": 0,
            "Deferred": 1,
            "Quarantined": 1,
            "Recovering": 0,
        }
        assert "circuit breaker OPEN" in fresh["message"]

        # 36 s behind: stale since the watermark.
        clock["now"] = NOW + timedelta(seconds=6)
        stale = (await api.get("/v1/governance")).json()
        assert stale["stale"] is True
        assert stale["staleSince"] == "2026-11-29T12:29:30Z"
        assert stale["message"].startswith(
            "observations stale since 2026-11-29T12:29:30Z: the watermark is 36 s behind"
        )

        metrics = (await api.get("/metrics")).text
        assert "devicestate_api_governance_up 1.0" in metrics
        assert "devicestate_quarantines_active 1.0" in metrics
        assert 'devicestate_devices_by_governance_state{state="Quarantined"} 1.0' in metrics
        assert 'devicestate_devices_by_governance_state{state="Recovering"} 0.0' in metrics
        assert "devicestate_governor_watermark_age_seconds 36.0" in metrics
        assert "devicestate_breaker_open 1.0" in metrics
        assert "devicestate_automation_paused 1.0" in metrics


async def test_metrics_without_a_governor_have_no_watermark_age(gov_api: httpx.AsyncClient) -> None:
    metrics = (await gov_api.get("/metrics")).text
    assert "devicestate_quarantines_active 0.0" in metrics
    assert "devicestate_breaker_open 0.0" in metrics
    assert "devicestate_governor_watermark_age_seconds" not in metrics


async def test_devices_carry_their_governance_and_filter_by_state(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    events = [observation(1, resource_id=f"GPU-{i}", pod_uid=f"uid-{i}") for i in range(3)]
    await store.apply_batch(LoggedBatch(logged(events), highwaters={(TOPIC, 0): 3}))
    await governor.device(
        "gpu-node-a",
        "GPU-1",
        "Quarantined",
        T0 + timedelta(minutes=1),
        observed_health="Unhealthy",
        effective_health="Unhealthy",
        effective_reason="pod-status-unhealthy",
        quarantine_id="gpu-node-a/GPU-1@1",
    )
    await governor.device("gpu-node-a", "GPU-2", "Available", T0)
    listed = (await gov_api.get("/v1/devices")).json()["items"]
    assert [d["governance"] for d in listed] == [
        None,
        {
            "state": "Quarantined",
            "stateSince": "2026-11-29T12:01:00Z",
            "effectiveHealth": "Unhealthy",
            "effectiveReason": "pod-status-unhealthy",
            "quarantineID": "gpu-node-a/GPU-1@1",
        },
        {
            "state": "Available",
            "stateSince": "2026-11-29T12:00:00Z",
            "effectiveHealth": "Healthy",
            "effectiveReason": None,
            "quarantineID": None,
        },
    ]
    quarantined = (await gov_api.get("/v1/devices", params={"state": "Quarantined"})).json()
    assert [d["resourceID"] for d in quarantined["items"]] == ["GPU-1"]
    one = (await gov_api.get("/v1/nodes/gpu-node-a/devices/GPU-1")).json()
    assert one["governance"]["state"] == "Quarantined"
    assert one["health"] == "Healthy"  # observed health is unchanged
    node = (await gov_api.get("/v1/nodes/gpu-node-a")).json()
    assert [d["governance"] and d["governance"]["state"] for d in node["devices"]] == [
        None,
        "Quarantined",
        "Available",
    ]
    bad = await gov_api.get("/v1/devices", params={"state": "quarantined"})
    assert bad.status_code == 422 and "Quarantined" in bad.text
    # Keyset pagination still walks every device once with the join.
    page = (await gov_api.get("/v1/devices", params={"limit": 2})).json()
    rest = (
        await gov_api.get("/v1/devices", params={"limit": 2, "cursor": page["nextCursor"]})
    ).json()
    assert [d["resourceID"] for d in page["items"] + rest["items"]] == ["GPU-0", "GPU-1", "GPU-2"]


async def test_openapi_documents_the_governance_routes(gov_api: httpx.AsyncClient) -> None:
    spec = (await gov_api.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in (
        "/v1/quarantines",
        "/v1/quarantines/{quarantineID}",
        "/v1/quarantines/{quarantineID}/extend",
        "/v1/quarantines/{quarantineID}/release",
        "/v1/automation/pause",
        "/v1/automation/resume",
        "/v1/breaker/reset",
        "/v1/commands/{commandID}",
        "/v1/nodes/{node}/timeline/{resourceID}",
        "/v1/governance",
    ):
        assert path in paths, path
    assert "Idempotency-Key" in spec["info"]["description"]


async def test_governance_status_names_a_silent_partition_and_a_clamped_clock(
    make_api: ApiFactory, governor: Governor
) -> None:
    """Issue 10: the event-time merge waits for every partition; the status says which one is
    silent and how many records wait, and when event time was clamped to the broker's clock."""
    async with make_api(clock=lambda: NOW, tick_interval_seconds=15) as api:
        pending = [{"type": "WatcherTick"}] * 4
        order = {
            "partitions": 3,
            "watermarks": {"0": "2026-11-29T12:29:30Z", "2": "2026-11-29T12:29:40Z"},
            "pending": pending,
            "clamped": 0,
        }
        await governor.fleet(None, snapshot={"order": order})
        silent = (await api.get("/v1/governance")).json()
        assert silent["message"].startswith(
            "no watermark yet from device-health partition(s) 1: the governor holds 4 record(s)"
        )
        assert silent["pending"] == 4 and silent["watermarks"] == order["watermarks"]


async def test_governance_status_counts_the_pending_records_the_governor_row_counts(
    make_api: ApiFactory, governor: Governor
) -> None:
    """Issue 12: the governor's fleet row counts the records the merge holds (``pendingCount``);
    the records themselves are rows of their own (``governor_pending``)."""
    async with make_api(clock=lambda: NOW, tick_interval_seconds=15) as api:
        order = {"partitions": 2, "watermarks": {"0": "2026-11-29T12:29:30Z"}, "pendingCount": 7}
        await governor.fleet(None, snapshot={"order": order})
        counted = (await api.get("/v1/governance")).json()
        assert counted["pending"] == 7 and "the governor holds 7 record(s)" in counted["message"]


async def test_governance_status_says_when_event_time_was_clamped(
    make_api: ApiFactory, governor: Governor
) -> None:
    async with make_api(clock=lambda: NOW, tick_interval_seconds=15) as api:
        order = {"partitions": 1, "watermarks": {"0": "2026-11-29T12:29:50Z"}, "pending": []}
        order |= {"clamped": 2, "lastClampedAt": "2026-11-29T12:30:30Z"}
        await governor.fleet(NOW - timedelta(seconds=10), snapshot={"order": order})
        clamped = (await api.get("/v1/governance")).json()
        assert clamped["clamped"] == 2 and clamped["lastClampedAt"] == "2026-11-29T12:30:30Z"
        assert "event time clamped to the broker's clock for 2 record(s)" in clamped["message"]
