"""Poison isolation: the records of a batch the database refuses (issue 11 item 3).

A batch whose write fails with a refusal of its data (:func:`is_poison`: PostgreSQL's data
exceptions and integrity violations, never a transient error) would fail the same way on every
attempt and every restart. Both agents look for the record that carries the refused values, send
it to the dead-letter topic with the database's error, and write the rest:

- :func:`isolate` (the health agent, :mod:`streams.dedup`): the batch is written again in halves,
  each half in its own transaction, in log order, down to the single records that fail; such a
  record is handed to ``on_poison`` at its place in the order (the agent dead-letters it and
  records its offset with the next write, so the partition positions stay contiguous);
- :func:`first_refused` (the governor, :mod:`streams.governor`): a fold cannot be cut into
  independent halves, so the search is over fold prefixes, each tried in a transaction that is
  rolled back: the first fold whose rows cannot be written is the poison, and the batch is folded
  again from its starting state without it.

Both are pure over the callables they are given (no database, no Kafka): O(k log n) writes for k
poison records among n.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from services.adapters.projection.errors import is_refused
from streams.batchwrite import BatchNotWritten

T = TypeVar("T")


def is_poison(exc: BaseException) -> bool:
    """A batch write failed because PostgreSQL refused its data (:func:`~services.adapters.
    projection.errors.is_refused`), not for a transient reason (retried) nor a bug (the worker
    stops): a :class:`~streams.batchwrite.BatchNotWritten` wrapping such an error, or the error
    itself."""
    cause = exc.__cause__ if isinstance(exc, BatchNotWritten) else exc
    return cause is not None and is_refused(cause)


async def isolate(
    items: Sequence[T],
    error: BaseException,
    write: Callable[[Sequence[T]], Awaitable[object]],
    on_poison: Callable[[T, BaseException], Awaitable[object]],
    poison: Callable[[BaseException], bool] = is_poison,
) -> list[T]:
    """Writing ``items`` (in one call) failed with ``error``, a ``poison`` error: write them again
    by bisection, each ``write(part)`` its own transaction, in order. A single item whose write
    fails with a ``poison`` error is handed to ``await on_poison(item, error)`` instead, before the
    items after it are written. Returns the poison items, in order.

    Raises whatever ``write`` or ``on_poison`` raise that is not ``poison`` (the items written
    before it stay written), and ``error`` itself when it is not ``poison``. ``items`` must not be
    empty."""
    if not items:
        raise ValueError("isolate: no items")
    if not poison(error):
        raise error
    found: list[T] = []

    async def settle(part: Sequence[T], failed: BaseException | None) -> None:
        if failed is None:
            try:
                await write(part)
                return
            except Exception as exc:
                if not poison(exc):
                    raise
                failed = exc
        if len(part) == 1:
            await on_poison(part[0], failed)
            found.append(part[0])
            return
        middle = len(part) // 2
        await settle(part[:middle], None)
        await settle(part[middle:], None)

    await settle(items, error)
    return found


async def first_refused(count: int, writable: Callable[[int], Awaitable[bool]]) -> int | None:
    """The index of the item that makes a prefix unwritable, by binary search: the prefix of
    ``count`` items is known refused, ``await writable(n)`` tries the prefix of ``n`` items (in
    a transaction rolled back). Returns ``i`` such that the prefix of ``i`` items is writable and
    that of ``i + 1`` is not; ``None`` when even the empty prefix is refused (what the database
    refuses is not any item's). At most ``ceil(log2(count)) + 1`` calls of ``writable``."""
    if count <= 0:
        return None
    low, high = 0, count  # prefix ``high`` refused; prefix ``low`` writable once checked
    while high - low > 1:
        middle = (low + high) // 2
        if await writable(middle):
            low = middle
        else:
            high = middle
    if low == 0 and not await writable(0):
        return None
    return high - 1


class Tried(Exception):
    """Raised by a trial write's commit hook: the rows were writable; the transaction is rolled
    back (see :func:`refused_item`)."""


async def refused_item(
    items: Sequence[T],
    error: BaseException,
    trial: Callable[[int], Awaitable[object]],
    poison: Callable[[BaseException], bool] = is_poison,
) -> tuple[T, BaseException] | None:
    """Writing all of ``items`` failed with the ``poison`` ``error``: find the item that makes it
    fail (:func:`first_refused`). ``await trial(n)`` writes what the first ``n`` items make and
    must raise: :class:`Tried` (or an error wrapping it) when that was writable (rolled back), a
    ``poison`` error when it was refused. Returns the item and the database's refusal of the
    first prefix holding it; ``None`` when no item is to blame. Raises any other error of
    ``trial``."""
    refusals: dict[int, BaseException] = {len(items): error}

    async def writable(count: int) -> bool:
        try:
            await trial(count)
        except Exception as exc:
            if isinstance(exc, Tried) or isinstance(exc.__cause__, Tried):
                return True
            if not poison(exc):
                raise
            refusals[count] = exc
            return False
        raise AssertionError("a trial write must not commit")

    index = await first_refused(len(items), writable)
    if index is None:
        return None
    return items[index], refusals[index + 1]
