"""AlertmanagerClient against httpx's in-memory transport: retries, 4xx, giving up."""

from __future__ import annotations

import httpx
import orjson

from services.processes.alerts.sender import AlertmanagerClient, PostOutcome

ALERT = {"labels": {"alertname": "DeviceQuarantined", "incident": "quarantine/n/g/q"}}


class Script:
    """Answers requests with the given statuses in turn (the last one repeats); ``"error"``
    raises a connection error."""

    def __init__(self, *answers: int | str) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer == "error":
            raise httpx.ConnectError("connection refused", request=request)
        assert isinstance(answer, int)
        return httpx.Response(answer, text="nope" if answer >= 400 else "")


def client(script: Script, retries: int = 3) -> tuple[AlertmanagerClient, list[int]]:
    retried: list[int] = []
    return (
        AlertmanagerClient(
            "http://alertmanager:9093/",
            retries=retries,
            backoff_seconds=0.001,
            max_backoff_seconds=0.01,
            on_retry=lambda: retried.append(1),
            transport=httpx.MockTransport(script),
        ),
        retried,
    )


async def test_post_sends_a_json_list_to_the_v2_endpoint() -> None:
    script = Script(200)
    am, retried = client(script)
    async with am:
        assert await am.post([ALERT, ALERT]) is PostOutcome.SENT
    [request] = script.requests
    assert request.method == "POST"
    assert str(request.url) == "http://alertmanager:9093/api/v2/alerts"
    assert request.headers["content-type"] == "application/json"
    assert orjson.loads(request.content) == [ALERT, ALERT]
    assert retried == []


async def test_5xx_and_connection_errors_are_retried() -> None:
    script = Script(500, "error", 503, 200)
    am, retried = client(script)
    async with am:
        assert await am.post([ALERT]) is PostOutcome.SENT
    assert len(script.requests) == 4
    assert len(retried) == 3


async def test_429_is_retried() -> None:
    script = Script(429, 200)
    am, retried = client(script)
    async with am:
        assert await am.post([ALERT]) is PostOutcome.SENT
    assert len(retried) == 1


async def test_gives_up_after_the_configured_retries() -> None:
    script = Script(502)
    am, retried = client(script, retries=2)
    async with am:
        assert await am.post([ALERT]) is PostOutcome.UNAVAILABLE
    assert len(script.requests) == 3
    assert len(retried) == 2


async def test_zero_retries_means_one_attempt() -> None:
    script = Script("error")
    am, retried = client(script, retries=0)
    async with am:
        assert await am.post([ALERT]) is PostOutcome.UNAVAILABLE
    assert len(script.requests) == 1 and retried == []


async def test_4xx_is_not_retried() -> None:
    script = Script(400, 200)
    am, retried = client(script)
    async with am:
        assert await am.post([ALERT]) is PostOutcome.REJECTED
    assert len(script.requests) == 1 and retried == []
