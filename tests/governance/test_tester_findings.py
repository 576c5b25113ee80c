"""Regressions from the fresh tester's session: values PostgreSQL cannot store never reach the
governor, and an expiry the log's clock has already passed is rejected, not silently expired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import DecisionKind
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import (
    CommandAction,
    HealthTransition,
    OperatorCommand,
    Role,
    WatermarkAdvanced,
)
from tests.governance.harness import GovernanceRun

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def command(reason: str, expires_at: datetime | None = None) -> OperatorCommand:
    return OperatorCommand(
        command_id="c1",
        action=CommandAction.QUARANTINE,
        actor="ops",
        role=Role.OPERATOR,
        requested_at=T0,
        reason=reason,
        node="n1",
        resource_id="GPU-1",
        expires_at=expires_at,
    )


@pytest.mark.parametrize("reason", ["nul \x00 in reason", "nested \x00"])
def test_a_nul_in_any_field_is_a_decode_error_not_a_poisoned_batch(reason: str) -> None:
    with pytest.raises(EventDecodeError, match="NUL"):
        decode_input(encode_input(command(reason)))
    raw = orjson.loads(encode_input(command("fine")))
    raw["node"] = "n\x001"
    with pytest.raises(EventDecodeError, match="'node'"):
        decode_input(orjson.dumps(raw))


def test_control_characters_other_than_nul_are_kept() -> None:
    decoded = decode_input(encode_input(command("line one\nline two\t!")))
    assert isinstance(decoded, OperatorCommand)
    assert decoded.reason == "line one\nline two\t!"


def test_an_expiry_already_passed_on_the_log_clock_is_rejected_with_the_reason() -> None:
    run = GovernanceRun()
    run.feed(WatermarkAdvanced(0, 1, T0 + timedelta(hours=1)))  # the log runs an hour ahead
    run.feed(
        HealthTransition(
            "n1",
            "GPU-1",
            "nvidia.com/gpu",
            DeviceSource.DEVICE_PLUGIN,
            Health.HEALTHY,
            5,
            T0,
            0,
            0,
        )
    )
    (decision,) = run.feed(command("maintenance", expires_at=T0 + timedelta(minutes=10)))
    assert decision.kind is DecisionKind.COMMAND_REJECTED
    assert "already passed on the governor's clock" in decision.details["reason"]
    assert "3600 s ahead" in decision.details["reason"]
