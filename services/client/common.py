"""What every API command of ``devicestate`` shares: exit codes, the ``--api-url`` and
``--token`` options, the API client, error exits and output helpers.

Exit codes: 0 done; 1 the API refused (an error answer, or the governor rejected a command);
2 the API is unreachable or the arguments are invalid; 3 ``--wait`` ran out before the governor
decided (the command is logged and will be decided).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from services.client.directory import default_api_url
from services.client.http import ApiClient, ApiError
from services.client.tables import print_json as print_json  # the commands import it from here
from services.client.tables import table_of
from services.client.terminal import escape, visible

EXIT_REFUSED, EXIT_USAGE, EXIT_PENDING = 1, 2, 3

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api-url",
        envvar="DEVICESTATE_API_URL",
        help="Base URL of the API (default: http://DEVICESTATE_API_HOST:DEVICESTATE_API_PORT).",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="DEVICESTATE_TOKEN",
        help="Bearer token (writes need the operator role, breaker reset and --break-glass "
        "admin; reads need one only when the API refuses anonymous reads).",
        show_default=False,
    ),
]


def fail(message: str, code: int = EXIT_REFUSED) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    typer.echo(f"error: {visible(message)}", err=True)
    raise typer.Exit(code)


def api_client(api_url: str | None, token: str | None) -> ApiClient:
    """A client of the API at ``api_url`` (default: :func:`.directory.default_api_url`)."""
    return ApiClient(api_url or default_api_url(), token)


def fail_api_error(exc: ApiError) -> NoReturn:
    """Exit for an API error: 2 when the API is unreachable (no status), else 1."""
    fail(str(exc), EXIT_USAGE if exc.status is None else EXIT_REFUSED)


def get_json(api_url: str | None, token: str | None, path: str, **params: Any) -> Any:
    """``GET path`` (``params`` left out when ``None``) on the API: the JSON body; exits as
    :func:`fail_api_error` on an API error."""
    try:
        with api_client(api_url, token) as client:
            return client.get(path, **params)
    except ApiError as exc:
        fail_api_error(exc)


def make_table(columns: list[str], rows: list[list[str]]) -> Table:
    """A borderless table of plain text cells (markup escaped) that never fold
    (:func:`~services.client.tables.table_of`; print it with ``print_table``)."""
    return table_of(columns, [[escape(text) for text in row] for row in rows])


def cell(value: Any) -> str:
    """A table cell: ``-`` for a missing or empty value."""
    return "-" if value is None or value == "" else str(value)


class Output(StrEnum):
    """``-o`` of the read commands."""

    TABLE = "table"
    JSON = "json"


class WriteOutput(StrEnum):
    """``-o`` of the write commands: a line of text, or the API's answer as JSON."""

    TEXT = "text"
    JSON = "json"


WriteFormat = Annotated[
    WriteOutput, typer.Option("-o", "--output", help="text, or json (the API's answer).")
]


ReadFormat = Annotated[Output, typer.Option("-o", "--output", help="table or json.")]
