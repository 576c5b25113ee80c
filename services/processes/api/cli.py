"""``devicestate api``: serve the directory API with uvicorn until SIGINT or SIGTERM."""

from __future__ import annotations

from typing import Annotated

import typer

from services.runtime.config import ApiProcessSettings

GRACEFUL_SHUTDOWN_SECONDS = 10
"""How long requests in flight may finish after SIGTERM/SIGINT before connections are closed."""


def api(
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to bind (default: DEVICESTATE_API_HOST)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", help="Port to bind (default: DEVICESTATE_API_PORT)."),
    ] = None,
) -> None:
    """Serve the device directory API (REST; OpenAPI at /openapi.json, docs at /docs).

    Reads the projection in DEVICESTATE_DATABASE_SCHEMA of DEVICESTATE_DATABASE_URL; appends
    operator commands to DEVICESTATE_GOVERNANCE_TOPIC. Bearer tokens come from
    DEVICESTATE_API_TOKENS / DEVICESTATE_API_TOKENS_FILE (JSON of names, roles and SHA-256
    digests; see `devicestate token --help`); an invalid token configuration stops it at once
    (exit 2), and so do wrong Kafka topics (exit 3, the log names the fix).
    On SIGTERM or SIGINT it stops accepting connections, lets requests in flight finish, then
    closes the pool.
    """
    import uvicorn

    from services.processes.api.app import create_app
    from services.processes.api.auth import TokenConfigError
    from services.runtime.logs import configure_logging

    settings = ApiProcessSettings()
    overrides = {k: v for k, v in {"api_host": host, "api_port": port}.items() if v is not None}
    if overrides:
        settings = settings.model_copy(update=overrides)
    configure_logging(settings)
    try:
        app = create_app(settings)
    except TokenConfigError as exc:
        typer.echo(f"error: invalid API token configuration: {exc}", err=True)
        raise typer.Exit(2) from None
    config = uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,  # keep the structured logging configured above
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        proxy_headers=False,
        access_log=settings.api_access_log,
    )
    server = uvicorn.Server(config)
    server.run()
    if not server.started:  # the lifespan failed (wrong Kafka topics: logged with their fix)
        raise typer.Exit(3)
