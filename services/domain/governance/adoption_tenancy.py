"""The adoption gate's ``tenant-boundary`` signal (issue 16 item 2): ResourceClaims on a pool that
hold devices for administrative access in a Namespace that does not allow it.

KEP-5018 (DRA admin access): a request with ``exactly.adminAccess: true`` gets devices even when
they are in use, for monitoring or maintenance; the API server admits such a claim only in a
Namespace labelled ``resource.kubernetes.io/admin-access: "true"``, and checks the label only
when the claim is created and when it is allocated. A Namespace that loses its label afterwards
keeps its admitted claims and their devices: a tenant holds privileged access to the pool's
hardware that its Namespace no longer grants. The claim's fact says so (``tenant_boundary``,
from the claim's allocation results' ``adminAccess`` and the watcher's view of the Namespace's
label).

Verdict: ``hold`` at ``tenant_hold`` claims (default 1), ``rollback`` at ``tenant_rollback``
(default 0: never). A rollback would not cure it: the device plugin path has no admin access at
all, so moving the pool back would only hide the finding; the pool holds until the claim is gone
or its Namespace is labelled again (``docs/dra-adoption.md``, "Tenant boundaries"). Pure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from services.domain.governance.adoption import PoolState
from services.domain.governance.adoption_facts import InventoryFacts
from services.domain.governance.adoption_types import Reason, Thresholds, count_verdict, pool_claims

MAX_NAMED: Final = 5
"""Most claim names a reason's figures and detail carry (the count is always whole)."""


def rule_tenant_boundary(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """The pool's allocated claims (as :func:`~.adoption_gate.pool_claims` selects them) that got
    devices for administrative access in a Namespace without the admin-access label. Figures:
    ``claims`` (count), ``names`` (the first :data:`MAX_NAMED` ``namespace/name``, sorted, joined
    by ``", "``), ``holdAt``, ``rollbackAt``."""
    found = [c for c in pool_claims(state, facts, nodes) if c.tenant_boundary]
    names = ", ".join(f"{c.namespace}/{c.name}" for c in found[:MAX_NAMED])
    more = f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
    return Reason(
        "tenant-boundary",
        count_verdict(len(found), t.tenant_hold, t.tenant_rollback),
        f"{len(found)} claims with admin access in namespaces without the "
        "resource.kubernetes.io/admin-access label" + (f": {names}{more}" if found else ""),
        {
            "claims": len(found),
            "names": names,
            "holdAt": t.tenant_hold,
            "rollbackAt": t.tenant_rollback,
        },
    )
