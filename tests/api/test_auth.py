"""Bearer tokens and roles: configuration, 401/403, anonymous reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import typer
from typer.testing import CliRunner

from services.processes.api.app import create_app
from services.processes.api.auth import Authenticator, TokenConfigError, load_tokens
from services.runtime.config import Settings
from services.runtime.tokens import token_digest
from tests.api.conftest import NAMES, TOKENS, ApiFactory, bearer, tokens_json

DIGEST = token_digest("t0ken")


# --- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("{not json", "not JSON"),
        ('{"name": "a"}', "JSON array"),
        ('["a"]', "must be an object"),
        (
            f'[{{"name": "a", "role": "operator", "token": "x", "sha256": "{DIGEST}"}}]',
            "never the token",
        ),
        (f'[{{"name": "a", "role": "root", "sha256": "{DIGEST}"}}]', "viewer, operator, admin"),
        ('[{"name": "a", "role": "admin", "sha256": "abc"}]', "64 hex digits"),
        (f'[{{"name": "", "role": "admin", "sha256": "{DIGEST}"}}]', "'name'"),
        (f'[{{"name": "a b", "role": "admin", "sha256": "{DIGEST}"}}]', "'name'"),
        (
            f'[{{"name": "a", "role": "admin", "sha256": "{DIGEST}"}}, '
            f'{{"name": "a", "role": "viewer", "sha256": "{token_digest("other")}"}}]',
            "configured twice",
        ),
        (
            f'[{{"name": "a", "role": "admin", "sha256": "{DIGEST}"}}, '
            f'{{"name": "b", "role": "viewer", "sha256": "{DIGEST.upper()}"}}]',
            "same sha256",
        ),
    ],
)
def test_invalid_token_config_refuses_to_start_with_a_clear_error(config: str, needle: str) -> None:
    settings = Settings(api_tokens=config)
    with pytest.raises(TokenConfigError, match=needle):
        load_tokens(settings)
    with pytest.raises(TokenConfigError, match=needle):
        create_app(settings)


def test_tokens_come_from_the_setting_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(orjson.dumps([{"name": "root", "role": "admin", "sha256": DIGEST}]).decode())
    settings = Settings(api_tokens=tokens_json(), api_tokens_file=str(path))
    entries = load_tokens(settings)
    assert [(e.name, e.role.value) for e in entries] == [
        ("vic", "viewer"),
        ("olga", "operator"),
        ("ada", "admin"),
        ("root", "admin"),
    ]
    auth = Authenticator(entries, anonymous_read=True)
    principal = auth.identify("t0ken")
    assert principal is not None and (principal.name, principal.role.value) == ("root", "admin")
    assert auth.identify("t0ken ") is None
    assert auth.identify(TOKENS["operator"]) is not None


def test_same_name_in_setting_and_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(orjson.dumps([{"name": "olga", "role": "admin", "sha256": DIGEST}]).decode())
    with pytest.raises(TokenConfigError, match="'olga' is configured twice"):
        load_tokens(Settings(api_tokens=tokens_json(), api_tokens_file=str(path)))


def test_missing_token_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(TokenConfigError, match="cannot read"):
        load_tokens(Settings(api_tokens_file=str(missing)))


def test_empty_config_means_no_tokens() -> None:
    assert load_tokens(Settings(api_tokens="  ")) == ()


def test_devicestate_api_exits_with_the_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.processes.api.cli import api

    app = typer.Typer()
    app.command()(api)
    monkeypatch.setenv("DEVICESTATE_API_TOKENS", '[{"name": "x", "role": "god", "sha256": "00"}]')
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 2
    assert "invalid API token configuration" in result.output
    assert "'role' must be one of viewer, operator, admin" in result.output


# --- requests -------------------------------------------------------------------------------------

QUARANTINE = {"node": "gpu-node-a", "resourceID": "GPU-0", "reason": "XID 79 seen in dmesg"}


def assert_401(response: httpx.Response, needle: str) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert needle in response.json()["detail"]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/quarantines", QUARANTINE),
        ("POST", "/v1/quarantines/gpu-node-a/GPU-0@7/extend", {"reason": "r", "ttlSeconds": 60}),
        ("POST", "/v1/quarantines/gpu-node-a/GPU-0@7/release", {"reason": "r"}),
        ("POST", "/v1/automation/pause", {"reason": "maintenance"}),
        ("POST", "/v1/automation/resume", None),
        ("POST", "/v1/breaker/reset", {"reason": "false alarm"}),
    ],
)
async def test_writes_without_a_token_are_401(
    gov_api: httpx.AsyncClient, method: str, path: str, body: Any
) -> None:
    response = await gov_api.request(method, path, json=body)
    assert_401(response, "needs a bearer token")


@pytest.mark.integration
async def test_invalid_or_malformed_tokens_are_401(gov_api: httpx.AsyncClient) -> None:
    wrong = await gov_api.post(
        "/v1/quarantines", json=QUARANTINE, headers={"Authorization": "Bearer nope"}
    )
    assert_401(wrong, "invalid token")
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    basic = await gov_api.post(
        "/v1/quarantines", json=QUARANTINE, headers={"Authorization": "Basic dXNlcjpwdw=="}
    )
    assert_401(basic, "must be 'Bearer <token>'")
    # A token that is sent is checked even where anonymous reads are allowed.
    assert_401(
        await gov_api.get("/v1/devices", headers={"Authorization": "Bearer nope"}), "invalid"
    )


@pytest.mark.integration
async def test_viewer_cannot_write_and_operator_cannot_reset_the_breaker(
    gov_api: httpx.AsyncClient,
) -> None:
    viewer = await gov_api.post("/v1/quarantines", json=QUARANTINE, headers=bearer("viewer"))
    assert viewer.status_code == 403
    assert viewer.json()["detail"] == (
        "this request needs the operator role; token 'vic' has the viewer role"
    )
    operator = await gov_api.post(
        "/v1/breaker/reset", json={"reason": "false alarm"}, headers=bearer("operator")
    )
    assert operator.status_code == 403
    assert "needs the admin role" in operator.json()["detail"]
    assert NAMES["operator"] in operator.json()["detail"]


@pytest.mark.integration
@pytest.mark.parametrize(
    "path",
    ["/v1/devices", "/v1/nodes", "/v1/fleet", "/v1/governance", "/v1/quarantines", "/v1/workloads"],
)
async def test_anonymous_reads_follow_the_setting(make_api: ApiFactory, path: str) -> None:
    async with make_api() as open_api:
        assert (await open_api.get(path)).status_code == 200
    async with make_api(api_anonymous_read=False) as closed_api:
        assert_401(await closed_api.get(path), "anonymous reads are disabled")
        for role in ("viewer", "operator", "admin"):
            response = await closed_api.get(path, headers=bearer(role))
            assert response.status_code == 200, response.text
        # Probes and Prometheus carry no token: operations stay open.
        assert (await closed_api.get("/healthz")).status_code == 200
        assert (await closed_api.get("/metrics")).status_code == 200


@pytest.mark.integration
async def test_openapi_declares_the_bearer_scheme(gov_api: httpx.AsyncClient) -> None:
    spec = (await gov_api.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "/v1/quarantines/{quarantineID}/release" in spec["paths"]


async def test_openapi_security_and_errors_follow_each_route(make_api: ApiFactory) -> None:
    """Anonymous GETs declare the token optional, writes required, probes none; every operation
    documents 400 and 422 as ``ErrorOut``, reads 401, writes 401 and 403 (issue 11, item 10)."""
    async with make_api() as client:
        spec = (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    assert paths["/v1/fleet"]["get"]["security"] == [{}, {"bearer": []}]
    assert paths["/v1/quarantines"]["post"]["security"] == [{"bearer": []}]
    assert paths["/healthz"]["get"]["security"] == []
    error = {"$ref": "#/components/schemas/ErrorOut"}
    for path, item in paths.items():
        for method, operation in item.items():
            responses = operation["responses"]
            for status in ("400", "422"):
                assert responses[status]["content"]["application/json"]["schema"] == error, (
                    method,
                    path,
                    status,
                )
            if path.startswith("/v1/"):
                assert "401" in responses, (method, path)
            if method == "post" and path.startswith("/v1/"):
                assert {"403", "413"} <= set(responses), (method, path)
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    body = spec["components"]["schemas"]["QuarantineCreateIn"]["properties"]
    assert body["ttlSeconds"]["anyOf"][0]["minimum"] == 1
    assert body["node"]["pattern"].startswith("^[a-z0-9]")
    assert "pattern" in body["reason"] and body["reason"]["minLength"] == 1
    header = next(
        p for p in paths["/v1/quarantines"]["post"]["parameters"] if p["name"] == "Idempotency-Key"
    )
    assert header["schema"]["pattern"].startswith("^[A-Za-z0-9]")
    async with make_api(api_anonymous_read=False) as client:
        closed = (await client.get("/openapi.json")).json()
    assert closed["paths"]["/v1/fleet"]["get"]["security"] == [{"bearer": []}]


async def test_auth_comes_before_the_body_and_unknown_query_parameters_are_422(
    gov_api: httpx.AsyncClient,
) -> None:
    """401/403 before any 422 of the body; a query parameter the route does not take is 422
    naming it; OPTIONS lists every method of the resource (issue 11, item 10)."""
    malformed = {"content": b"{not json", "headers": {"Content-Type": "application/json"}}
    assert (await gov_api.post("/v1/quarantines", **malformed)).status_code == 401
    viewer = {**malformed, "headers": {**malformed["headers"], **bearer("viewer")}}
    assert (await gov_api.post("/v1/quarantines", **viewer)).status_code == 403
    typo = await gov_api.get("/v1/quarantines", params={"limt": "5"})
    assert typo.status_code == 422 and "'limt'" in typo.json()["detail"]
    options = await gov_api.options("/v1/quarantines")
    assert options.status_code == 405
    assert options.headers["allow"] == "GET, POST"
    read_of_action = await gov_api.get("/v1/quarantines/manual/x/extend")
    assert read_of_action.status_code == 405 and read_of_action.headers["allow"] == "POST"
