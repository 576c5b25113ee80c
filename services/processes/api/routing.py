"""The route class of every API route (:class:`ServiceRoute`): who may call it is checked before
anything else, and a query parameter the route does not take is refused.

FastAPI reads and parses a JSON body before it solves a route's dependencies, so a client without
a token sending a malformed body would learn 422 (and the shape the body needs) before 401. The
route class answers, in this order: 401/403 (:func:`route_access`: a role of
:data:`~services.processes.api.auth.ROLE_NEEDED`, read access, or open), then 422 naming any
query parameter the route does not declare (a typo such as ``?limt=5`` would otherwise be
ignored silently), then the route itself (body and parameter validation: 422).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.convertors import PathConvertor
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from services.domain.governance.inputs import ROLE_RANK, Role
from services.processes.api.auth import (
    ROLE_NEEDED,
    authorize,
    check_read,
    principal_of,
    read_access,
)

_PARAM = re.compile(r"\{[^}]*\}")

Access = Role | Literal["read", "open"]
"""What a route needs: a role (writes), read access (GETs: anonymous unless disabled), nothing."""


def _dependants(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _dependants(sub)


def _calls(dependant: Dependant) -> Iterator[Any]:
    return (each.call for each in _dependants(dependant))


def route_access(dependant: Dependant) -> Access:
    """The strongest access any dependency of ``dependant`` asks for."""
    roles = [ROLE_NEEDED[call] for call in _calls(dependant) if call in ROLE_NEEDED]
    if roles:
        return max(roles, key=ROLE_RANK.__getitem__)
    if any(call is read_access for call in _calls(dependant)):
        return "read"
    return "open"


def query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameters (their wire names) the route declares."""
    return frozenset(p.alias for each in _dependants(dependant) for p in each.query_params)


class ServiceRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` that authorises first and refuses unknown query
    parameters (see the module doc)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        access = route_access(self.dependant)
        known = query_names(self.dependant)

        async def guarded(request: Request) -> Response:
            if access != "open":
                principal = principal_of(request)
                if access == "read":
                    check_read(request, principal)
                else:
                    authorize(principal, access)
            unknown = sorted({name for name in request.query_params if name not in known})
            if unknown:
                takes = ", ".join(sorted(known)) or "none"
                raise HTTPException(
                    422,
                    f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(repr(_short(n)) for n in unknown)} (this endpoint takes: {takes})",
                )
            return await handler(request)

        return guarded

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is Match.FULL and self._greedy and scope.get("type") == "http":
            # ``GET /v1/quarantines/{id:path}`` matches ``/v1/quarantines/a/extend`` too; the
            # resource of that URL is the POST-only ``.../{id}/extend``: 405, not a read.
            path = scope["path"]
            for regex in self._more_literal(scope.get("router")):
                if regex.match(path) is not None:
                    return Match.PARTIAL, child
        return match, child

    def _more_literal(self, router: Any) -> tuple[re.Pattern[str], ...]:
        """The path patterns of the router's routes with more literal characters than this one,
        found once per router (and again if its routes change): walking every route on every
        request was the largest CPU cost of a point GET."""
        routes = getattr(router, "routes", ())
        cached: tuple[Any, int, tuple[re.Pattern[str], ...]] | None = getattr(
            self, "_more_literal_cache", None
        )
        if cached is not None and cached[0] is router and cached[1] == len(routes):
            return cached[2]
        mine = len(_PARAM.sub("", self.path_format))
        found = tuple(
            other.path_regex
            for other in iter_route_contexts(routes)
            if len(_PARAM.sub("", other.path_format or "")) > mine
        )
        self._more_literal_cache = (router, len(routes), found)
        return found

    @property
    def _greedy(self) -> bool:
        return any(isinstance(c, PathConvertor) for c in self.param_convertors.values())

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            # Starlette's 405 names the methods of the first route whose path matched; the
            # Allow header must list every method of the resource the document describes.
            allowed = ", ".join(sorted(allowed_methods(scope.get("router"), scope["path"])))
            response = JSONResponse(
                {"detail": f"method {scope['method']} not allowed here; allowed: {allowed}"},
                status_code=405,
                headers={"Allow": allowed},
            )
            await response(scope, receive, send)
            return
        await super().handle(scope, receive, send)


def allowed_methods(router: Any, path: str) -> set[str]:
    """The methods of the routes of ``router`` matching ``path`` with the most literal
    characters in their template: ``/v1/quarantines/a/extend`` is the ``.../{id}/extend``
    resource (POST), although the ``{id:path}`` of ``GET /v1/quarantines/{id}`` matches it too."""
    best, methods = -1, set[str]()
    for route in iter_route_contexts(getattr(router, "routes", ())):
        if not isinstance(route.original_route, Route) or not route.methods:
            continue
        if route.path_regex.match(path) is None:
            continue
        literal = len(_PARAM.sub("", route.path_format or ""))
        if literal > best:
            best, methods = literal, set(route.methods)
        elif literal == best:
            methods |= route.methods
    return methods


def _short(name: str) -> str:
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return name if len(name) <= 64 else name[:64] + "..."
