"""A Pod's controller chain, from its ``metadata.ownerReferences`` up to the workload.

Source of facts: ``metav1.OwnerReference`` (apimachinery ``ObjectMeta``): a list of
``{apiVersion, kind, name, uid, controller, blockOwnerDeletion}``; at most one has
``controller: true``, and that one is the object's managing controller. A Pod names only its
direct owner: a Deployment's Pod names its ReplicaSet, whose own controller reference names the
Deployment; a JobSet's Pod names a Job owned by the JobSet; a LeaderWorkerSet's Pod names a
StatefulSet owned by the LeaderWorkerSet.

Pure: :func:`resolve_chain` is given the owner objects the watcher fetched (raw JSON dicts, or
the reason a GET failed) by owner UID, and says how far the chain is known and which owner to
fetch next. The chain is followed through every controller reference whose kind devicestate can
read (:data:`OWNER_RESOURCES`) until an object has none; its last link is the workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

OWNER_RESOURCES: Final[Mapping[str, str]] = {
    "ReplicaSet": "replicasets",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "JobSet": "jobsets",
    "LeaderWorkerSet": "leaderworkersets",
}
"""Owner kind -> its REST resource (plural), for a GET of
``/apis/<apiVersion>/namespaces/<ns>/<resource>/<name>`` with the reference's own
``apiVersion`` (apps/v1, batch/v1, jobset.x-k8s.io/v1alpha2, leaderworkerset.x-k8s.io/v1).
An owner of another kind ends the chain: it is the workload as far as known."""

WORKLOAD_KINDS: Final = frozenset(
    {"Job", "JobSet", "StatefulSet", "Deployment", "LeaderWorkerSet", "DaemonSet", "CronJob"}
)
"""Kinds that are a workload when they top a chain (a ReplicaSet alone is one too: a bare
ReplicaSet is its own workload)."""

MAX_CHAIN_LENGTH: Final = 6
"""Most links followed above a Pod (Pod -> Job -> JobSet is 2); an ownership loop stops here."""

BARE_POD: Final = "Pod"
"""The workload kind of a Pod without a controller reference."""


@dataclass(frozen=True, slots=True, order=True)
class OwnerLink:
    """One controller reference of the chain (``metav1.OwnerReference`` fields)."""

    kind: str
    name: str
    uid: str
    api_version: str


@dataclass(frozen=True, slots=True)
class FetchFailed:
    """A GET of an owner that did not give its object: ``reason`` says why (404, 403, 503...)."""

    reason: str


OwnerLookup: TypeAlias = Mapping[str, "Mapping[str, Any] | FetchFailed"]
"""Owner UID -> the owner object as the API server returned it, or why it could not be read."""


@dataclass(frozen=True, slots=True)
class OwnerChain:
    """How far a Pod's controller chain is known.

    ``links`` go from the Pod's direct controller up (empty: a bare Pod). ``complete`` is true
    when the last link's object was read and has no controller reference; otherwise ``reason``
    says where it stopped. ``missing`` is the next owner to fetch (``None``: nothing more can be
    learnt by a GET). ``top_object`` is the last link's object when it was read (its annotations
    may declare the migration class)."""

    links: tuple[OwnerLink, ...] = ()
    complete: bool = True
    reason: str | None = None
    missing: OwnerLink | None = None
    top_object: Mapping[str, Any] | None = None

    @property
    def workload(self) -> OwnerLink | None:
        """The topmost known controller (``None``: a bare Pod)."""
        return self.links[-1] if self.links else None

    @property
    def workload_kind(self) -> str:
        """The workload's kind, ``Pod`` for a bare Pod."""
        return self.links[-1].kind if self.links else BARE_POD


def string_fields(obj: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, ...] | None:
    """``obj``'s values of ``keys``, when every one is a non-empty string; else ``None``."""
    values = tuple(obj.get(key) for key in keys)
    if all(isinstance(v, str) and v for v in values):
        return values  # type: ignore[return-value]  # every one checked to be a str
    return None


_LINK_KEYS: Final = ("kind", "name", "uid", "apiVersion")


class BrokenReference(ValueError):
    """A controller reference that lacks a field or holds several controllers."""


def controller_ref(obj: Mapping[str, Any]) -> OwnerLink | None:
    """The ``controller: true`` entry of ``obj``'s ``metadata.ownerReferences``, or ``None``.

    Raises :class:`BrokenReference` when that entry lacks ``kind``, ``name``, ``uid`` or
    ``apiVersion`` (as non-empty strings), or when several entries say ``controller: true``."""
    metadata = obj.get("metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    if not isinstance(refs, list):
        return None
    controllers = [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
    if not controllers:
        return None
    if len(controllers) > 1:
        raise BrokenReference(f"{len(controllers)} ownerReferences say controller: true")
    ref = controllers[0]
    values = string_fields(ref, _LINK_KEYS)
    if values is None:
        raise BrokenReference("the controller ownerReference lacks kind, name, uid or apiVersion")
    return OwnerLink(*values)


def _label(link: OwnerLink) -> str:
    return f"{link.kind} {link.name}"


def resolve_chain(pod: Mapping[str, Any], owners: OwnerLookup) -> OwnerChain:
    """The controller chain of ``pod`` (its raw JSON) as far as ``owners`` (by UID) tell it.

    Stops, with ``complete`` false and a ``reason``, at: an owner not fetched yet (``missing``
    names it), a failed GET (:class:`FetchFailed`), an owner whose object has another UID (it was
    deleted and recreated under the same name: the reference is dangling), a kind devicestate
    does not read (:data:`OWNER_RESOURCES`), a broken reference, or :data:`MAX_CHAIN_LENGTH`."""
    links: list[OwnerLink] = []
    current: Mapping[str, Any] = pod
    top: Mapping[str, Any] | None = None
    while True:
        try:
            ref = controller_ref(current)
        except BrokenReference as exc:
            where = "the Pod" if not links else _label(links[-1])
            return OwnerChain(tuple(links), False, f"{where}: {exc}", None, top)
        if ref is None:
            return OwnerChain(tuple(links), True, None, None, top)
        if len(links) >= MAX_CHAIN_LENGTH or ref in links:
            reason = f"chain longer than {MAX_CHAIN_LENGTH} controllers (an ownership loop?)"
            return OwnerChain(tuple(links), False, reason, None, top)
        links.append(ref)
        top = None
        if ref.kind not in OWNER_RESOURCES:
            reason = f"{_label(ref)}: kind {ref.kind!r} is not read by devicestate"
            return OwnerChain(tuple(links), False, reason, None, None)
        found = owners.get(ref.uid)
        if found is None:
            return OwnerChain(tuple(links), False, f"{_label(ref)}: not read yet", ref, None)
        if isinstance(found, FetchFailed):
            return OwnerChain(tuple(links), False, f"{_label(ref)}: {found.reason}", None, None)
        metadata = found.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        if uid != ref.uid:
            reason = f"{_label(ref)}: gone (the object of that name has uid {uid!r})"
            return OwnerChain(tuple(links), False, reason, None, None)
        current = top = found
