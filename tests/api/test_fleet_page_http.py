"""The fleet page's HTTP behaviour against the real PostgreSQL (the browser test is
tests/e2e/test_fleet_page.py): the auth rules of every GET, escaping of what the projection
holds, the breaker banner, and clear errors for bad parameters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import ApiFactory, Governor, bearer
from tests.api.test_auth import assert_401
from tests.conftest import T0

pytestmark = pytest.mark.integration

HOSTILE = '<script>alert("x")</script>'


async def test_the_page_follows_the_read_auth_rules(make_api: ApiFactory) -> None:
    async with make_api() as open_api:
        page = await open_api.get("/ui/fleet")
        assert page.status_code == 200, page.text
        assert page.headers["content-type"].startswith("text/html")
        assert "the governor has not recorded any state yet" in page.text
        assert "<script" not in page.text and "http" not in page.text.split("</style>")[0]
    async with make_api(api_anonymous_read=False) as closed_api:
        assert_401(await closed_api.get("/ui/fleet"), "anonymous reads are disabled")
        assert_401(await closed_api.get("/ui/fleet/devices/n/GPU-0"), "anonymous reads")
        assert (await closed_api.get("/ui/fleet", headers=bearer("viewer"))).status_code == 200


async def test_projection_text_is_escaped_and_the_breaker_shows(
    make_api: ApiFactory, governor: Governor
) -> None:
    async with make_api(clock=lambda: T0 + timedelta(seconds=10)) as api:
        await governor.fleet(
            T0, breaker_open=True, snapshot={"breakerOpenedAt": "2026-11-29T12:20:00Z"}
        )
        await governor.device("gpu-node-a", "gpu.example.com/pool/gpu-0", "Quarantined", T0)
        await governor.quarantine(
            "gpu-node-a/gpu.example.com/pool/gpu-0@7",
            "gpu-node-a",
            "gpu.example.com/pool/gpu-0",
            reason=HOSTILE,
            actor="olga & co",
            expires_at=T0 + timedelta(hours=2),
        )
        page = (await api.get("/ui/fleet")).text
        assert HOSTILE not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
        assert "olga &amp; co" in page
        assert 'data-breaker="open"' in page and 'class="banner bad"' in page
        assert "circuit breaker OPEN" in page
        # The resourceID keeps its "/" in the timeline link, as in the JSON API.
        assert 'href="/ui/fleet/devices/gpu-node-a/gpu.example.com/pool/gpu-0"' in page
        timeline = await api.get("/ui/fleet/devices/gpu-node-a/gpu.example.com/pool/gpu-0")
        assert timeline.status_code == 200, timeline.text
        assert "gpu.example.com/pool/gpu-0" in timeline.text


async def test_bad_parameters_are_clear_errors(make_api: ApiFactory) -> None:
    async with make_api() as api:
        cursor = await api.get("/ui/fleet", params={"cursor": "nope"})
        assert cursor.status_code == 422 and "malformed cursor" in cursor.json()["detail"]
        state = await api.get("/ui/fleet", params={"state": "Broken"})
        assert state.status_code == 422
        typo = await api.get("/ui/fleet", params={"stat": "Quarantined"})
        assert typo.status_code == 422 and "unknown query parameter" in typo.json()["detail"]
        unknown = await api.get("/ui/fleet/devices/gpu-node-z/GPU-0")
        assert unknown.status_code == 404 and "unknown" in unknown.json()["detail"]
