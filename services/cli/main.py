"""``devicestate``: the one entry point of the service.

Each sub-command lives next to what it runs (``services/processes/<part>/cli.py``,
``services/client/``, ``streams/cli.py``); this module only wires them together. The developer
commands (``stack``, ``testenv``, ``demo``) are ``devicestate-dev`` (:mod:`devtools.cli`).
Heavy imports (faust, the Kafka client, SQLAlchemy) happen inside the commands, so
``devicestate --help`` stays fast.
"""

from __future__ import annotations

import typer

from services.cli.topics import topics
from services.client.adoption import adoption_app
from services.client.directory import devices
from services.client.operator import register as register_operator_commands
from services.processes.alerts.cli import alerts
from services.processes.api.cli import api
from services.processes.enforcement.admission_cli import adoption_enforce
from services.processes.enforcement.cli import enforce
from services.processes.migration.cli import migrate
from services.processes.recovery.cli import recovery
from services.processes.replay.cli import replay
from services.processes.watcher.cli import watch
from streams.cli import worker

app = typer.Typer(
    name="devicestate",
    help="Event-sourced device health for Kubernetes GPU platforms: watch Pod "
    "allocatedResourcesStatus, dedup through Kafka and Faust into PostgreSQL, serve a device "
    "directory. Settings come from DEVICESTATE_* environment variables (see README).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.command("watch")(watch)
app.command("worker")(worker)
app.command("replay")(replay)
app.command("api")(api)
app.command("devices")(devices)
register_operator_commands(app)  # quarantine, automation, breaker, governance, timeline, ...
app.command("alerts")(alerts)
app.command("recovery")(recovery)
app.command("enforce")(enforce)
app.command("migrate")(migrate)
adoption_app.command("enforce")(adoption_enforce)  # `devicestate adoption enforce` (issue 16)
app.add_typer(topics)

if __name__ == "__main__":  # pragma: no cover
    app()
