"""``devicestate token new|hash``: API bearer tokens and their ``DEVICESTATE_API_TOKENS`` entries,
offline (the entry holds only the token's SHA-256: :mod:`services.runtime.tokens`)."""

from __future__ import annotations

import re
import secrets
import sys
from typing import Annotated

import orjson
import typer

from services.client.common import (
    EXIT_USAGE,
    WriteFormat,
    WriteOutput,
    fail,
    print_json,
)
from services.domain.governance.inputs import Role
from services.runtime.tokens import token_entry

token_app = typer.Typer(
    help="Make API bearer tokens and their DEVICESTATE_API_TOKENS entries (offline). The API "
    "stores only the SHA-256 of each token.",
    no_args_is_help=True,
)


RoleOption = Annotated[Role, typer.Option("--role", help="viewer, operator or admin.")]


TOKEN_PREFIX = "dst_"


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}", name):
        fail("--name must be 1-128 characters of letters, digits and ._@:-", EXIT_USAGE)


@token_app.command("hash")
def token_hash(
    name: Annotated[str, typer.Option("--name", help="Name for the config entry.")] = "NAME",
    role: RoleOption = Role.VIEWER,
) -> None:
    """Read a token on stdin; print its SHA-256 (hex) and its api_tokens JSON entry."""
    _check_name(name)
    raw = typer.prompt("token", hide_input=True) if sys.stdin.isatty() else sys.stdin.read()
    token = raw.strip()
    if not token:
        fail("no token on stdin", EXIT_USAGE)
    entry = token_entry(name, role, token)
    typer.echo(entry["sha256"])
    typer.echo(orjson.dumps(entry).decode())


@token_app.command("new")
def token_new(
    name: Annotated[
        str, typer.Option("--name", help="Who uses it; recorded as the actor of its writes.")
    ],
    role: RoleOption,
    output: WriteFormat = WriteOutput.TEXT,
) -> None:
    """Generate a random token; print it ONCE, with its api_tokens entry.

    256 random bits (secrets.token_urlsafe); the entry holds only the token's SHA-256.
    """
    _check_name(name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    entry = token_entry(name, role, token)
    if output is WriteOutput.JSON:
        print_json({"token": token, "entry": entry})
        return
    typer.echo("token (shown only now; give it to its user through a secret store):")
    typer.echo(f"  {token}")
    typer.echo("entry for the JSON array of DEVICESTATE_API_TOKENS or DEVICESTATE_API_TOKENS_FILE:")
    typer.echo(f"  {orjson.dumps(entry).decode()}")
