"""Hostile input: control characters and lone surrogates in write fields (422 naming the field,
nothing appended to the governance topic), ``NaN``/``Infinity`` and undecodable text (4xx, never
500, no echo of the input), NUL in a URL (400 before any database access), request bodies over
the limit (413, Content-Length or chunked) and an ``expiresAt`` beyond the 366-day cap."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from services.processes.api.hardening import (
    EXTENDER_MAX_BODY_BYTES,
    MAX_BODY_BYTES,
    text_problem,
    validation_errors,
)
from tests.api.conftest import ApiFactory, Governor, bearer, read_commands

pytestmark = pytest.mark.integration

QID = "gpu-node-a/gpu.example.com/pool-a/gpu-2@42"
QUARANTINE = {"node": "gpu-node-a", "resourceID": "GPU-0", "reason": "XID 79 seen in dmesg"}
JSON = {"Content-Type": "application/json"}


def raw(body: dict[str, Any]) -> bytes:
    """JSON as Python writes it: ``\\uXXXX`` escapes (lone surrogates included) and ``NaN``."""
    return json.dumps(body).encode()


async def post_raw(
    client: httpx.AsyncClient, path: str, content: bytes, role: str = "admin", **headers: str
) -> httpx.Response:
    return await client.post(path, content=content, headers={**bearer(role), **JSON, **headers})


async def appended_nothing_but(
    client: httpx.AsyncClient, bootstrap: str, topic: str, reason: str
) -> None:
    """A valid command after the refused ones is the first (and only) record of the topic."""
    ok = await client.post(
        "/v1/automation/pause", json={"reason": reason}, headers=bearer("operator")
    )
    assert ok.status_code == 202, ok.text
    [(_, first)] = await read_commands(bootstrap, topic, 1)
    assert first.reason == reason


# --- 1. control characters in write fields ------------------------------------------------------

BAD_TEXT = [
    ("\x00", "a NUL character, U+0000"),
    ("\x01", "a control character, U+0001"),
    ("\x1f", "a control character, U+001F"),
    ("\x7f", "a control character, U+007F"),
    ("\x85", "a control character, U+0085"),
    ("\ud800", "a lone surrogate"),
]
WRITES = [
    ("/v1/quarantines", QUARANTINE, "reason"),
    ("/v1/quarantines", QUARANTINE, "node"),
    ("/v1/quarantines", QUARANTINE, "resourceID"),
    (f"/v1/quarantines/{QID}/extend", {"reason": "rma", "ttlSeconds": 60}, "reason"),
    (f"/v1/quarantines/{QID}/release", {"reason": "reseated"}, "reason"),
    ("/v1/automation/pause", {"reason": "maintenance"}, "reason"),
    ("/v1/automation/resume", {"reason": "done"}, "reason"),
    ("/v1/breaker/reset", {"reason": "incident closed"}, "reason"),
]


async def test_control_characters_in_any_write_field_are_422_naming_the_field(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    await governor.quarantine(QID, "gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    for path, body, field in WRITES:
        for char, what in BAD_TEXT:
            value = f"{body[field]}{char}x"
            response = await post_raw(gov_api, path, raw({**body, field: value}))
            assert response.status_code == 422, (path, field, char, response.text)
            [error] = response.json()["errors"]
            assert f"body.{field}: " in response.json()["detail"]
            assert error["loc"] == ["body", field]
            assert f"{field} contains {what}" in error["msg"], error
            assert "input" not in error and "ctx" not in error
    # Also at the start and the end of a reason (str.strip must not hide them).
    for value in ("\x1cwhy", "why\x1c", "why\x85", "\x00"):
        response = await post_raw(gov_api, "/v1/automation/pause", raw({"reason": value}))
        assert response.status_code == 422, (value, response.text)
    await appended_nothing_but(gov_api, kafka_bootstrap, governance_topic, "multi\r\n\tline")


async def test_quarantine_id_and_idempotency_key_with_control_characters_are_422(
    gov_api: httpx.AsyncClient, governor: Governor
) -> None:
    await governor.quarantine(QID, "gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    for action in ("extend", "release"):
        body = {"reason": "x", "ttlSeconds": 60} if action == "extend" else {"reason": "x"}
        response = await gov_api.post(
            f"/v1/quarantines/{QID}%01/{action}", json=body, headers=bearer("admin")
        )
        assert response.status_code == 422, response.text
        assert "quarantineID contains a control character, U+0001" in response.json()["detail"]
        too_long = await gov_api.post(
            f"/v1/quarantines/{'q' * 1400}/{action}", json=body, headers=bearer("admin")
        )
        assert too_long.status_code == 422
        assert "quarantineID is longer than" in too_long.json()["detail"]
    for key in ("a\x00b", "abc\n", "abc\x01", "a b", "k" * 129):
        response = await gov_api.post(
            "/v1/automation/pause",
            json={"reason": "x"},
            headers={**bearer("operator"), "Idempotency-Key": key},
        )
        assert response.status_code == 422, (key, response.text)
        assert "Idempotency-Key" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({**QUARANTINE, "reason": "r" * 1025}, "reason is longer than 1024 characters"),
        ({**QUARANTINE, "node": "n" * 254}, "node is longer than 253 bytes"),
        # 127 characters but 254 bytes of UTF-8.
        ({**QUARANTINE, "node": "é" * 127}, "node is longer than 253 bytes"),
        ({**QUARANTINE, "node": "gpu-nödé"}, "node is not a DNS-1123 subdomain"),
        ({**QUARANTINE, "node": "GPU-Node-A"}, "node is not a DNS-1123 subdomain"),
        ({**QUARANTINE, "node": "gpu-node-a-"}, "node is not a DNS-1123 subdomain"),
        # Invisible and bidi-control characters (Trojan Source): issue 11, item 10.
        ({**QUARANTINE, "resourceID": "GPU-\u202e0"}, "U+202E at position 4"),
        ({**QUARANTINE, "resourceID": "GPU-\u20280"}, "U+2028 at position 4"),
        ({**QUARANTINE, "resourceID": "GPU-\u200b0"}, "invisible or bidirectional-control"),
        ({**QUARANTINE, "ttlSeconds": 5e-324}, "greater than or equal to 1"),
        ({**QUARANTINE, "ttlSeconds": 0.5}, "greater than or equal to 1"),
        ({**QUARANTINE, "resourceID": "é" * 513}, "resourceID is longer than 1024 bytes"),
        ({**QUARANTINE, "node": "gpu\tnode"}, "node contains a control character, U+0009"),
        ({**QUARANTINE, "resourceID": "GPU\n0"}, "resourceID contains a control character"),
    ],
)
async def test_lengths_follow_the_domain_limits(
    gov_api: httpx.AsyncClient, body: dict[str, Any], needle: str
) -> None:
    response = await gov_api.post("/v1/quarantines", json=body, headers=bearer("operator"))
    assert response.status_code == 422, response.text
    assert needle in response.text


def test_text_problem() -> None:
    assert text_problem("reason", "two\nlines\r\n\tindented", multiline=True) is None
    assert text_problem("node", "a\nb") == "node contains a control character, U+000A at position 1"
    assert text_problem("reason", "a\x00", multiline=True) == (
        "reason contains a NUL character, U+0000 at position 1 (only tab, LF and CR are allowed)"
    )
    assert text_problem("x", "\u2028 and \u00a0 are text") is None
    assert text_problem("x", "ab", max_chars=1) == "x is longer than 1 characters"


# --- 2. NaN, Infinity, lone surrogates: 4xx, not 500 ----------------------------------------------


@pytest.mark.parametrize(
    ("path", "content"),
    [
        ("/v1/quarantines", b'{"node": "n", "resourceID": "r", "reason": "x", "ttlSeconds": NaN}'),
        (
            "/v1/quarantines",
            b'{"node": "n", "resourceID": "r", "reason": "x", "ttlSeconds": 1e999}',
        ),
        ("/v1/quarantines", b'{"node": "n", "resourceID": "r", "reason": "x", "extra": -Infinity}'),
        ("/v1/automation/pause", b'{"reason": NaN}'),
        ("/v1/automation/pause", b'{"reason": "x", "\\ud800": 1}'),
        ("/v1/automation/pause", b'{"reason": ["\\udfff"]}'),
        ("/v1/automation/pause", b'{"reason": "x", "why": "\\ud800"}'),
        ("/v1/automation/pause", b'{"reason": "x"'),
        ("/v1/breaker/reset", b"[NaN]"),
    ],
)
async def test_non_json_numbers_and_lone_surrogates_are_422_without_echo(
    gov_api: httpx.AsyncClient, path: str, content: bytes
) -> None:
    response = await post_raw(gov_api, path, content)
    assert response.status_code == 422, response.text
    assert isinstance(response.json()["detail"], str)
    for error in response.json()["errors"]:
        assert set(error) == {"loc", "msg", "type"}


async def test_nan_in_query_parameters_is_422(gov_api: httpx.AsyncClient) -> None:
    for wait in ("nan", "inf", "-inf"):
        response = await gov_api.post(
            f"/v1/automation/pause?wait={wait}", json={"reason": "x"}, headers=bearer("operator")
        )
        assert response.status_code == 422, response.text


def test_validation_errors_drop_input_and_make_loc_printable() -> None:
    errors = validation_errors(
        [
            {
                "type": "extra_forbidden",
                "loc": ("body", "\ud800" + "k" * 500),
                "msg": "Extra",
                "input": float("nan"),
                "ctx": {"x": object()},
            },
            {
                "type": "json_invalid",
                "loc": ("body", 7),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": "Expecting value"},
            },
        ]
    )
    assert errors[0]["loc"][0] == "body"
    assert errors[0]["loc"][1].startswith("\\ud800kkk") and len(errors[0]["loc"][1]) < 140
    assert errors[1] == {
        "loc": ["body", 7],
        "msg": "JSON decode error: Expecting value",
        "type": "json_invalid",
    }


@pytest.fixture
async def extender(make_inventory_api: ApiFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_inventory_api(scheduler_extender=True) as client:
        yield client


@pytest.mark.parametrize("quantity", ["NaN", "Infinity", "-Infinity", "sNaN", "1e999999999"])
async def test_extender_non_finite_quantity_is_200_with_error(
    extender: httpx.AsyncClient, quantity: str
) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": quantity}}}]
        },
    }
    response = await extender.post("/scheduler/filter", json={"Pod": pod, "NodeNames": ["n1"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["Error"].startswith("devicestate: invalid ExtenderArgs: ")
    assert "nvidia.com/gpu" in body["Error"] and "not a device count" in body["Error"]
    # A native resource's odd value is not the extender's business: ignored.
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": quantity}}
    response = await extender.post("/scheduler/filter", json={"Pod": pod, "NodeNames": ["n1"]})
    assert response.status_code == 200 and response.json()["Error"] == ""


# --- 3. NUL in the URL: 400 before the database -------------------------------------------------


async def test_nul_in_path_or_query_is_400_before_any_database_access(
    make_api: ApiFactory,
) -> None:
    # Nothing listens on port 9: a request that reached the database would be 503.
    dead = "postgresql+asyncpg://devicestate:devicestate@127.0.0.1:9/devicestate"
    async with make_api(database_url=dead) as client:
        assert (await client.get("/v1/nodes/a")).status_code == 503
        for url in (
            "/v1/nodes/a%00b",
            "/v1/nodes/a/devices/gpu%00",
            "/v1/devices?node=a%00b",
            "/v1/devices?node=a&resourceID=%00",
            "/v1/commands/a%00b",
            "/v1/quarantines/a%00b",
            "/v1/inventory/devices?node=%00",
        ):
            response = await client.get(url)
            assert response.status_code == 400, (url, response.text)
            assert "NUL character (%00)" in response.json()["detail"]
        response = await client.post(
            "/v1/quarantines/a%00b/release", json={"reason": "x"}, headers=bearer("admin")
        )
        assert response.status_code == 400
        assert "path contains a NUL" in response.json()["detail"]


# --- 4. body size -------------------------------------------------------------------------------


async def test_bodies_over_the_limit_are_413(
    gov_api: httpx.AsyncClient, kafka_bootstrap: str, governance_topic: str
) -> None:
    # Announced by Content-Length: refused before it is read.
    big = b'{"reason": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = await post_raw(gov_api, "/v1/automation/pause", big)
    assert response.status_code == 413
    assert "larger than 1048576 bytes" in response.json()["detail"]

    # Chunked (no Content-Length): counted while it streams; the rest is never read.
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"reason": "'
        for _ in range(300):  # 300 MiB if anybody read it all
            sent += 1 << 20
            yield b"x" * (1 << 20)

    response = await gov_api.post(
        "/v1/automation/pause", content=endless(), headers={**bearer("operator"), **JSON}
    )
    assert response.status_code == 413
    assert response.json()["detail"].startswith("the request body is larger than")
    assert sent <= 2 << 20

    # Just under the limit is read normally.
    body = b'{"reason": "at the limit"}'
    body = body + b" " * (MAX_BODY_BYTES - len(body))
    response = await post_raw(gov_api, "/v1/automation/pause", body, role="operator")
    assert response.status_code == 202, response.text
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert command.reason == "at the limit"


async def test_extender_bodies_have_a_larger_limit(extender: httpx.AsyncClient) -> None:
    args = {"Pod": {"spec": {"containers": []}}, "NodeNames": [], "Pad": "p" * (2 << 20)}
    response = await extender.post("/scheduler/filter", json=args)
    assert response.status_code == 200 and response.json()["Error"] == ""
    args["Pad"] = "p" * EXTENDER_MAX_BODY_BYTES
    assert (await extender.post("/scheduler/filter", json=args)).status_code == 413


# --- 5. expiresAt cap ---------------------------------------------------------------------------


async def test_expires_at_is_capped_like_ttl_seconds(
    gov_api: httpx.AsyncClient, governor: Governor
) -> None:
    await governor.quarantine(QID, "gpu-node-a", "gpu.example.com/pool-a/gpu-2")
    now = datetime.now(UTC)
    for path, body in (
        ("/v1/quarantines", QUARANTINE),
        (f"/v1/quarantines/{QID}/extend", {"reason": "rma"}),
    ):
        for far in ("9999-12-31T23:59:59.999999Z", (now + timedelta(days=367)).isoformat()):
            response = await gov_api.post(
                path, json={**body, "expiresAt": far}, headers=bearer("operator")
            )
            assert response.status_code == 422, response.text
            assert "more than 366 days from now" in response.text
        near = (now + timedelta(days=365)).isoformat()
        response = await gov_api.post(
            path, json={**body, "expiresAt": near}, headers=bearer("operator")
        )
        assert response.status_code == 202, response.text
