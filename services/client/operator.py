"""Operator commands of ``devicestate``: quarantines (:mod:`.quarantine`), automation, breaker,
command outcomes, governance status and the device timeline (:mod:`.governance`), API tokens
(:mod:`.tokens`), and the inventory, capacity views and inventory conflicts (:mod:`.inventory`).

Every command talks to the API (``--api-url``, env ``DEVICESTATE_API_URL``, default
``http://DEVICESTATE_API_HOST:DEVICESTATE_API_PORT``) with the bearer token of ``--token`` or env
``DEVICESTATE_TOKEN``; ``devicestate token`` works offline. Exit codes: :mod:`.common`.
"""

from __future__ import annotations

import typer

from services.client.adoption import adoption_app
from services.client.governance import automation_app, breaker_app, command, governance, timeline
from services.client.inventory import register as register_inventory
from services.client.migrations import migrations_app
from services.client.quarantine import quarantine_app
from services.client.tokens import token_app
from services.client.workloads import workloads


def register(app: typer.Typer) -> None:
    """Add the operator commands to the ``devicestate`` app."""
    app.add_typer(quarantine_app, name="quarantine")
    app.add_typer(automation_app, name="automation")
    app.add_typer(breaker_app, name="breaker")
    app.command("governance")(governance)
    app.command("timeline")(timeline)
    app.command("command")(command)
    app.add_typer(token_app, name="token")
    register_inventory(app)  # inventory, capacity, conflicts (issue 4)
    app.add_typer(adoption_app, name="adoption")  # DRA adoption pools and gate (issue 16)
    app.command("workloads")(workloads)  # Pods' workloads and migration classes (issue 13)
    app.add_typer(migrations_app, name="migrations")  # the governor's migrations (issue 13)
