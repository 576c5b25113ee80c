"""Holes in a batch's offsets (:func:`services.domain.batch.first_holes`): a record handed out of
order inside a batch is refused like a batch that starts after a gap (:func:`find_gaps`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.domain.batch import LoggedBatch, find_gaps, first_holes

P = ("health", 0)


@given(start=st.integers(0, 10_000), length=st.integers(1, 50), data=st.data())
def test_the_first_missing_offset_is_found_in_any_order(
    start: int, length: int, data: st.DataObject
) -> None:
    contiguous = list(range(start, start + length))
    assert first_holes({P: data.draw(st.permutations(contiguous))}) == {}
    if length >= 3:
        missing = data.draw(st.sampled_from(contiguous[1:-1]))
        seen = [o for o in contiguous if o != missing] + [start]  # a repeat changes nothing
        holes = first_holes({P: data.draw(st.permutations(seen))})
        assert holes == {P: missing}, seen


def test_a_hole_past_the_recorded_offset_is_a_gap_and_one_before_it_is_not() -> None:
    batch = LoggedBatch(consumed_from={P: 5}, consumed_holes={P: 7})
    assert find_gaps(batch, {P: 4}) == {P: (4, 7)}
    assert find_gaps(batch, {P: 7}) == {}  # the hole was written already (a redelivery)
    assert find_gaps(LoggedBatch(consumed_from={P: 5}), {P: 4}) == {}
