"""The OpenAPI document the API serves (``/openapi.json``), made to match what the service does.

FastAPI's own document describes its defaults, not this service: 422 bodies as a list, a bearer
scheme on every route that reads a token (anonymous GETs included), nothing about the 400 of the
NUL guard, the 413 of the body limit or the 401/403 of the route class. :func:`build_openapi`
starts from FastAPI's document and, per operation (the route's access from
:func:`~services.processes.api.routing.route_access`):

- ``security``: none for open routes (probes, metrics, the scheduler extender); for reads, the
  bearer token optional while anonymous reads are allowed (``[{}, {"bearer": []}]``), else
  required; for writes, required;
- responses: 400 (a NUL in the path or query; a body that cannot be read), 401 wherever a token
  is read (a token that is sent is always checked), 403 for writes, 413 for bodies, 422 for every
  operation (unknown query parameters included), all with the ``ErrorOut`` schema;
- every string parameter without a pattern gets one that excludes NUL (answered 400).

The schemathesis run of ``tests/api/test_openapi_conformance.py`` holds the document to the
service for every role.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts

from services.processes.api.routing import route_access

NO_NUL_PATTERN: Final = "^[^\\u0000]*$"
"""The pattern of string parameters that declare none: the NUL guard answers 400 to a NUL."""
_ERROR_REF: Final = {"$ref": "#/components/schemas/ErrorOut"}
_BEARER: Final = {
    "type": "http",
    "scheme": "bearer",
    "description": "`Authorization: Bearer <token>`; roles viewer < operator < admin.",
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def build_openapi(app: FastAPI, *, anonymous_read: bool) -> dict[str, Any]:
    """The document of ``app`` (see the module doc); ``anonymous_read`` as configured."""
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    components["securitySchemes"] = {"bearer": _BEARER}
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    routes = {
        (route.path_format, method.lower()): route.original_route
        for route in iter_route_contexts(app.routes)
        if isinstance(route.original_route, APIRoute)
        for method in route.methods or ()
    }
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            route = routes.get((path, method))
            if route is not None:
                _describe(operation, route, anonymous_read)
    return schema


def _describe(operation: dict[str, Any], route: APIRoute, anonymous_read: bool) -> None:
    access = route_access(route.dependant)
    responses: dict[str, Any] = operation.setdefault("responses", {})
    has_body = "requestBody" in operation
    responses["400"] = _error(
        "A NUL character (`%00`) in the path or query"
        + (", or a body that cannot be read." if has_body else ".")
    )
    if has_body:
        responses["413"] = _error("The body is larger than the endpoint's limit.")
    responses["422"] = _error(
        "Invalid body or parameter, or a query parameter the endpoint does not take "
        "(`detail` names it; `errors` lists each problem)."
    )
    if access == "open":
        operation["security"] = []
    elif access == "read":
        operation["security"] = [{}, {"bearer": []}] if anonymous_read else [{"bearer": []}]
        responses["401"] = _error(
            "An invalid token (a token that is sent is always checked)"
            + ("." if anonymous_read else ", or none: anonymous reads are disabled.")
        )
    else:
        operation["security"] = [{"bearer": []}]
        responses["401"] = _error("No token or an invalid one.")
        responses["403"] = _error(f"The token's role is weaker than {access}.")
    for parameter in operation.get("parameters", ()):
        _no_nul(parameter.get("schema", {}))


def _no_nul(schema: dict[str, Any]) -> None:
    if "pattern" in schema:
        return
    if schema.get("type") == "string" and "enum" not in schema:
        schema["pattern"] = NO_NUL_PATTERN
    for option in schema.get("anyOf", ()):
        _no_nul(option)


def install_openapi(app: FastAPI, *, anonymous_read: bool) -> None:
    """Serve :func:`build_openapi` as ``app``'s document (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, anonymous_read=anonymous_read)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
