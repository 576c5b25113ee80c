"""A device's sightings in one Pod status: one ``resources[]`` item of one container's
``allocatedResourcesStatus`` entry (KEP-4680), before :mod:`services.domain.pod_reader` merges
the sightings of one resourceID into one observation; what several sightings of one resourceID
reconcile to (the rare case: shared devices, a device listed twice, conflicting reports)."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from services.domain.events import ContainerRef, Health
from services.domain.pod_status import Problem, ProblemCode


@dataclass(frozen=True, slots=True)
class Sighting:
    """One ``resources[]`` item as one container reports it, before merging per resourceID."""

    container: ContainerRef
    entry_name: str
    resource_id: str
    health: Health
    raw_health: str | None
    message: str | None
    flags: frozenset[str]

    @property
    def order(self) -> tuple[str, ContainerRef, str]:
        # Deterministic choice among duplicates, whatever the order of resources[] (not stable).
        return (self.entry_name, self.container, self.message or "")


def reconcile(
    resource_id: str, sightings: list[Sighting], problems: list[Problem]
) -> tuple[Sighting, tuple[ContainerRef, ...], Set[str], str | None] | None:
    """Several sightings of ``resource_id``: the first (in order), the containers, the flags
    and the message of their observation, or ``None`` when their health conflicts."""
    healths = {(s.health, s.raw_health) for s in sightings}
    if len(healths) > 1:
        shown = ", ".join(sorted(raw or health.value for health, raw in healths))
        problems.append(
            Problem(
                ProblemCode.CONFLICTING_HEALTH,
                f"resourceID {resource_id!r} reported with conflicting health ({shown}) "
                "in one Pod: no observation",
            )
        )
        return None
    sightings = sorted(sightings, key=lambda s: s.order)
    first = sightings[0]
    flags = set().union(*(s.flags for s in sightings))
    places = [(s.entry_name, s.container) for s in sightings]
    if len(set(places)) < len(places) or len({s.entry_name for s in sightings}) > 1:
        # Several devices behind one resourceID (e.g. a shared CDI device listed first): flag,
        # never merge silently (see the DRA notes on resourceID).
        flags.add(ProblemCode.DUPLICATE_RESOURCE_ID.value)
        problems.append(
            Problem(
                ProblemCode.DUPLICATE_RESOURCE_ID,
                f"resourceID {resource_id!r} reported {len(places)} times under "
                f"{sorted({s.entry_name for s in sightings})}",
            )
        )
    messages = {s.message for s in sightings if s.message is not None}
    if len(messages) > 1:
        flags.add(ProblemCode.CONFLICTING_MESSAGE.value)
        problems.append(
            Problem(
                ProblemCode.CONFLICTING_MESSAGE,
                f"resourceID {resource_id!r} reported with {len(messages)} different messages",
            )
        )
    message = next((s.message for s in sightings if s.message is not None), None)
    return first, tuple(sorted({s.container for s in sightings})), flags, message
