"""Event times outside [1970-01-01, 9000-01-01) are refused at decode (the new user of this
stop: one observation dated year 1 overflowed the governor's flap-window arithmetic and stopped
the worker and the replay for good). A refused record is dead-lettered with this reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from services.domain.codec import EventDecodeError, check_event_time
from services.domain.event_codec import decode_event, encode_event
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import HealthTransition
from services.domain.node_events import WatcherTick, decode_node_event, encode_node_event

OUT_OF_RANGE = ("0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9999-12-31T23:59:59.999999Z")


def _with(payload: bytes, **fields: str) -> bytes:
    obj: dict[str, Any] = orjson.loads(payload)
    obj.update(fields)
    return orjson.dumps(obj)


@pytest.mark.parametrize("when", OUT_OF_RANGE)
def test_an_observation_out_of_range_is_refused_with_the_reason(
    observation: Any, when: str
) -> None:
    payload = _with(encode_event(observation(5)), observedAt=when)
    with pytest.raises(EventDecodeError, match=r"field 'observedAt'.*out of range"):
        decode_event(payload)


@pytest.mark.parametrize("when", OUT_OF_RANGE)
def test_a_tick_out_of_range_is_refused(when: str) -> None:
    tick = WatcherTick(0, datetime(2026, 11, 29, tzinfo=UTC), datetime(2026, 11, 29, tzinfo=UTC))
    for field in ("observedAt", "watchSeenAt"):
        with pytest.raises(EventDecodeError, match=rf"field '{field}'.*out of range"):
            decode_node_event(_with(encode_node_event(tick), **{field: when}))


def test_a_forwarded_transition_out_of_range_is_refused_by_the_governor_s_decoder(
    observation: Any,
) -> None:
    """Records already on the governance topic (forwarded before this check) must not stop the
    governor or a replay either: its decoder refuses them, and they are dead-lettered."""
    obs = observation(5)
    transition = HealthTransition(
        node=obs.node,
        resource_id=obs.resource_id,
        resource_name=obs.resource_name,
        source=obs.source,
        health=obs.health,
        status_version=5,
        observed_at=obs.observed_at,
        partition=0,
        offset=0,
    )
    payload = _with(encode_input(transition), observedAt="0001-01-01T00:00:00Z")
    with pytest.raises(EventDecodeError, match="out of range"):
        decode_input(payload)


def test_the_range_s_ends() -> None:
    assert check_event_time(datetime(1970, 1, 1, tzinfo=UTC))
    assert check_event_time(datetime(8999, 12, 31, tzinfo=UTC))
    with pytest.raises(ValueError, match="out of range"):
        check_event_time(datetime(9000, 1, 1, tzinfo=UTC))
