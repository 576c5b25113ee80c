"""``devicestate quarantine|automation|breaker|governance|timeline|command|token`` against a
running API (uvicorn in a thread), the real broker and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner, Result

from services.adapters.projection.store import ProjectionStore
from services.client.writes import parse_duration
from services.domain.batch import LoggedBatch
from services.domain.events import format_time
from services.domain.governance.inputs import CommandAction, Role
from services.processes.api.auth import Authenticator, TokenConfigError, load_tokens
from services.runtime.config import Settings
from tests.api.conftest import TOKENS, Governor, read_commands
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

SYSTEM_QID = "gpu-node-a/gpu.example.com/pool-a/gpu-2@42"


def run(cli: typer.Typer, *args: str, role: str | None = None, stdin: str | None = None) -> Result:
    env = {"DEVICESTATE_TOKEN": TOKENS[role]} if role else {"DEVICESTATE_TOKEN": ""}
    return CliRunner().invoke(cli, list(args), env=env, input=stdin)


# --- offline ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("45s", 45),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1w", 604800),
        ("1.5h", 5400),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "0", "0s", "2h junk", "-5m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_token_hash_reads_stdin_and_prints_the_entry(cli: typer.Typer) -> None:
    result = run(cli, "token", "hash", "--name", "ci-bot", "--role", "operator", stdin="s3cret\n")
    assert result.exit_code == 0, result.output
    digest, entry = result.stdout.splitlines()
    assert digest == hashlib.sha256(b"s3cret").hexdigest()
    assert orjson.loads(entry) == {"name": "ci-bot", "role": "operator", "sha256": digest}
    empty = run(cli, "token", "hash", stdin="\n")
    assert empty.exit_code == 2
    assert "no token on stdin" in empty.output
    bad_role = run(cli, "token", "hash", "--role", "root", stdin="x")
    assert bad_role.exit_code == 2


def test_token_new_prints_a_token_once_that_its_entry_accepts(cli: typer.Typer) -> None:
    result = run(cli, "token", "new", "--name", "alice", "--role", "admin", "-o", "json")
    assert result.exit_code == 0, result.output
    made = orjson.loads(result.stdout)
    token, entry = made["token"], made["entry"]
    assert token.startswith("dst_") and len(token) > 40
    assert token not in orjson.dumps(entry).decode()
    entries = load_tokens(Settings(api_tokens=orjson.dumps([entry]).decode()))
    principal = Authenticator(entries, True).identify(token)
    assert principal is not None and (principal.name, principal.role) == ("alice", Role.ADMIN)
    text = run(cli, "token", "new", "--name", "bob", "--role", "viewer")
    assert text.exit_code == 0
    assert "shown only now" in text.stdout
    assert '"role":"viewer"' in text.stdout
    other = run(cli, "token", "new", "--name", "bob", "--role", "viewer")
    assert other.stdout != text.stdout  # random every time
    assert run(cli, "token", "new", "--name", "a b", "--role", "viewer").exit_code == 2
    with pytest.raises(TokenConfigError):  # a pasted token instead of the entry is refused
        load_tokens(Settings(api_tokens=orjson.dumps([{**entry, "token": token}]).decode()))


def test_unreachable_api_is_exit_2_with_a_message(cli: typer.Typer) -> None:
    result = run(cli, "governance", "--api-url", "http://127.0.0.1:9", role="viewer")
    assert result.exit_code == 2
    assert "cannot reach the API at http://127.0.0.1:9" in result.output


def test_bad_expiry_options_are_usage_errors(cli: typer.Typer) -> None:
    common = ["quarantine", "create", "n", "r", "-r", "why", "--api-url", "http://127.0.0.1:9"]
    for extra, needle in (
        (["--ttl", "soon"], "not a duration"),
        (["--expires-at", "2099-01-01T00:00:00"], "needs an offset"),
        (["--expires-at", "tomorrow"], "not an RFC 3339 time"),
        (["--ttl", "1h", "--expires-at", "2099-01-01T00:00:00Z"], "not both"),
    ):
        result = run(cli, *common, *extra, role="operator")
        assert result.exit_code == 2, result.output
        assert needle in result.output
    extend = run(cli, "quarantine", "extend", "q@1", "-r", "x", "--api-url", "http://h:1")
    assert extend.exit_code == 2 and "--ttl or --expires-at" in extend.output


# --- against the API ------------------------------------------------------------------------------


@pytest.mark.integration
async def test_quarantine_create_appends_a_command(
    cli: typer.Typer, api_url: str, kafka_bootstrap: str, governance_topic: str
) -> None:
    result = run(
        cli,
        "quarantine",
        "create",
        "gpu-node-b",
        "gpu.example.com/pool-a/gpu-2",
        "--reason",
        "XID 79",
        "--ttl",
        "2h",
        "--api-url",
        api_url,
        role="operator",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("pending: quarantine appended to the governance log")
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert (command.action, command.actor, command.role) == (
        CommandAction.QUARANTINE,
        "olga",
        Role.OPERATOR,
    )
    assert (command.node, command.resource_id, command.reason) == (
        "gpu-node-b",
        "gpu.example.com/pool-a/gpu-2",
        "XID 79",
    )
    assert command.expires_at is not None
    remaining = command.expires_at - datetime.now(UTC)
    assert timedelta(hours=1, minutes=59) < remaining <= timedelta(hours=2)
    assert command.command_id in result.stdout


@pytest.mark.integration
async def test_wait_reports_accepted_rejected_and_pending(
    cli: typer.Typer, api_url: str, governor: Governor
) -> None:
    # An Idempotency-Key is scoped to the token's principal (ada, the admin): ``ada~<key>``.
    await governor.decide("ada~key-accepted", "quarantine", True, actor="ada")
    await governor.quarantine("manual/ada~key-accepted", "gpu-node-a", "GPU-0", kind="manual")
    await governor.decide(
        "ada~key-rejected", "quarantine", False, "already quarantined (q@1)", actor="ada"
    )
    base = ["quarantine", "create", "gpu-node-a", "GPU-0", "-r", "xid", "--api-url", api_url]

    accepted = run(cli, *base, "--wait", "5", "--idempotency-key", "key-accepted", role="admin")
    assert accepted.exit_code == 0, accepted.output
    assert accepted.stdout.strip() == (
        "accepted: quarantine manual/ada~key-accepted (quarantine, command ada~key-accepted)"
    )
    rejected = run(cli, *base, "--wait", "5", "--idempotency-key", "key-rejected", role="admin")
    assert rejected.exit_code == 1
    assert "rejected: already quarantined (q@1) (quarantine, command ada~key-rejected)" in (
        rejected.output
    )
    as_json = run(cli, *base, "--idempotency-key", "key-rejected", "-o", "json", role="admin")
    assert as_json.exit_code == 1
    assert orjson.loads(as_json.stdout)["accepted"] is False
    pending = run(cli, *base, "--wait", "0.3", role="operator")
    assert pending.exit_code == 3, pending.output
    assert "not decided within 0.3 s" in pending.stdout

    shown = run(cli, "command", "ada~key-rejected", "--api-url", api_url)
    assert shown.exit_code == 0
    assert orjson.loads(shown.stdout)["reason"] == "already quarantined (q@1)"
    unknown = run(cli, "command", "nope", "--api-url", api_url)
    assert unknown.exit_code == 1
    assert "404 Not Found: command 'nope' has no outcome" in unknown.output


@pytest.mark.integration
async def test_api_refusals_are_printed_readably(cli: typer.Typer, api_url: str) -> None:
    anonymous = run(cli, "automation", "pause", "-r", "rollout", "--api-url", api_url)
    assert anonymous.exit_code == 1
    assert (
        "error: 401 Unauthorized: this request needs a bearer token with the operator role"
        in anonymous.output
    )
    viewer = run(cli, "breaker", "reset", "-r", "ok", "--api-url", api_url, role="operator")
    assert viewer.exit_code == 1
    assert "403 Forbidden: this request needs the admin role; token 'olga'" in viewer.output
    empty = run(cli, "automation", "pause", "-r", " ", "--api-url", api_url, role="operator")
    assert empty.exit_code == 1
    assert "422 Unprocessable" in empty.output
    assert "reason: reason must not be empty" in empty.output
    past = run(
        cli,
        "quarantine",
        "create",
        "n",
        "r",
        "-r",
        "x",
        "--expires-at",
        "2001-01-01T00:00:00Z",
        "--api-url",
        api_url,
        role="operator",
    )
    assert past.exit_code == 1
    assert "expiresAt: expiresAt 2001-01-01T00:00:00+00:00 is in the past" in past.output


@pytest.mark.integration
async def test_release_extend_with_slashes_and_break_glass(
    cli: typer.Typer,
    api_url: str,
    governor: Governor,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    await governor.quarantine(SYSTEM_QID, "gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    glass = ["quarantine", "release", SYSTEM_QID, "-r", "escalation", "--break-glass"]
    refused = run(cli, *glass, "--api-url", api_url, role="operator")
    assert refused.exit_code == 1
    assert "a break-glass release needs the admin role" in refused.output
    released = run(cli, *glass, "--api-url", api_url, role="admin")
    assert released.exit_code == 0, released.output
    # Within the API's 366-day cap on expiries.
    in_a_month = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    extended = run(
        cli,
        "quarantine",
        "extend",
        SYSTEM_QID,
        "-r",
        "RMA",
        "--expires-at",
        format_time(in_a_month),
        "--api-url",
        api_url,
        role="operator",
    )
    assert extended.exit_code == 0, extended.output
    missing = run(
        cli,
        "quarantine",
        "release",
        "gpu-node-a/x@1",
        "-r",
        "x",
        "--api-url",
        api_url,
        role="operator",
    )
    assert missing.exit_code == 1 and "404 Not Found" in missing.output
    commands = [c for _, c in await read_commands(kafka_bootstrap, governance_topic, 2)]
    assert [(c.action, c.actor, c.break_glass) for c in commands] == [
        (CommandAction.RELEASE, "ada", True),
        (CommandAction.EXTEND, "olga", False),
    ]
    assert commands[1].expires_at == in_a_month


@pytest.mark.integration
async def test_fleet_commands(
    cli: typer.Typer, api_url: str, kafka_bootstrap: str, governance_topic: str
) -> None:
    for args, role in (
        (["automation", "pause", "-r", "driver rollout"], "operator"),
        (["automation", "resume"], "operator"),
        (["breaker", "reset", "--reason", "power restored"], "admin"),
    ):
        result = run(cli, *args, "--api-url", api_url, role=role)
        assert result.exit_code == 0, result.output
    commands = [c for _, c in await read_commands(kafka_bootstrap, governance_topic, 3)]
    assert [(c.action, c.actor, c.reason) for c in commands] == [
        (CommandAction.PAUSE, "olga", "driver rollout"),
        (CommandAction.RESUME, "olga", ""),
        (CommandAction.RESET_BREAKER, "ada", "power restored"),
    ]


@pytest.mark.integration
async def test_quarantine_list(cli: typer.Typer, api_url: str, governor: Governor) -> None:
    await governor.quarantine(SYSTEM_QID, "gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    await governor.quarantine(
        "manual/c-1",
        "gpu-node-b",
        "GPU-3",
        kind="manual",
        status="released",
        created_at=T0 + timedelta(hours=1),
        reason="bad fan",
        actor="olga",
    )
    table = run(cli, "quarantine", "list", "--api-url", api_url)
    assert table.exit_code == 0, table.output
    assert SYSTEM_QID in table.stdout and "manual/c-1" in table.stdout
    assert "2 quarantines, 1 active or recovering" in table.stdout
    as_json = run(
        cli, "quarantine", "list", "--status", "released", "-o", "json", "--api-url", api_url
    )
    items: list[dict[str, Any]] = orjson.loads(as_json.stdout)
    assert [q["quarantineID"] for q in items] == ["manual/c-1"]
    by_node = run(
        cli, "quarantine", "list", "--node", "gpu-node-a", "-o", "json", "--api-url", api_url
    )
    assert [q["quarantineID"] for q in orjson.loads(by_node.stdout)] == [SYSTEM_QID]
    shown = run(cli, "quarantine", "show", SYSTEM_QID, "--api-url", api_url)
    assert orjson.loads(shown.stdout)["resourceID"] == "gpu.example.com/pool-a/gpu-2"


@pytest.mark.integration
async def test_timeline_and_governance(
    cli: typer.Typer,
    api_url: str,
    governor: Governor,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    from services.domain.events import Health

    await store.apply_batch(
        LoggedBatch(
            logged([observation(1), observation(2, Health.UNHEALTHY, at=60, message="XID 79")]),
            highwaters={(TOPIC, 0): 2},
        )
    )
    await governor.decision(
        5,
        0,
        "DeviceQuarantined",
        T0 + timedelta(seconds=60),
        "gpu-node-a",
        "GPU-0",
        summary="quarantined: pod-status-unhealthy",
    )
    result = run(cli, "timeline", "gpu-node-a", "GPU-0", "--api-url", api_url)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("2026-")]
    assert [line.split()[1:3] for line in lines] == [
        ["observation", "observed"],
        ["observation", "observed"],
        ["decision", "DeviceQuarantined"],
    ]
    assert "XID 79" in result.stdout and "quarantined: pod-status-unhealthy" in result.stdout
    as_json = run(cli, "timeline", "gpu-node-a", "GPU-0", "-o", "json", "--api-url", api_url)
    assert len(orjson.loads(as_json.stdout)["items"]) == 3
    missing = run(cli, "timeline", "gpu-node-a", "GPU-9", "--api-url", api_url)
    assert missing.exit_code == 1 and "404" in missing.output

    await governor.fleet(
        datetime.now(UTC) - timedelta(minutes=10),
        automation_paused=True,
        snapshot={"pausedBy": "olga", "pauseReason": "rollout"},
    )
    await governor.device("gpu-node-a", "GPU-0", "Quarantined", T0)
    status = run(cli, "governance", "--api-url", api_url)
    assert status.exit_code == 0, status.output
    assert "observations stale since" in status.stdout
    assert "PAUSED by olga: rollout" in status.stdout
    assert "1: 1 Quarantined" in status.stdout
    as_json = run(cli, "governance", "-o", "json", "--api-url", api_url)
    assert orjson.loads(as_json.stdout)["stale"] is True


async def test_governance_shows_a_stale_watch_and_the_node_incidents(
    cli: typer.Typer, api_url: str, governor: Governor
) -> None:
    """Issue 15: the watch line and one line per open node incident, from the real governor's
    fleet snapshot (tests/api/test_fleet_governance.py builds it through machine.step)."""
    from tests.api.test_fleet_governance import governed

    state = governed()
    await governor.fleet(state.fleet.watermark, snapshot=state.fleet.to_json())
    status = run(cli, "governance", "--api-url", api_url)
    assert status.exit_code == 0, status.output
    out = " ".join(status.stdout.split())  # the table may wrap long values
    assert "STALE: no event or bookmark since 2026-11-29T12:00:00Z" in out
    assert "gpu-node-a: 4 devices since 2026-11-29T12:00:10.300000Z" in out
    assert "node-fault/gpu-node-a/2026-11-29T12:00:10Z" in out


async def test_governance_says_how_many_records_the_merge_holds(
    cli: typer.Typer, api_url: str, governor: Governor
) -> None:
    """The new user saw 74 devices where 346 were coming: the rest waited in the event-time
    merge, and nothing said so."""
    from tests.api.test_fleet_governance import governed

    state = governed()
    snapshot = state.fleet.to_json()
    snapshot["order"] = {**(snapshot.get("order") or {}), "pending": [{}] * 1526}
    await governor.fleet(state.fleet.watermark, snapshot=snapshot)
    status = run(cli, "governance", "--api-url", api_url)
    assert status.exit_code == 0, status.output
    out = " ".join(status.stdout.split())
    assert "held 1526 forwarded record(s) wait for every partition's watermark" in out
