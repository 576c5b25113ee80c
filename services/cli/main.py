"""``devicestate``: the one entry point of the service.

Each sub-command lives next to what it runs (``services/<part>/cli.py``); this module only wires
them together. Heavy imports (faust, aiokafka, SQLAlchemy) happen inside the commands, so
``devicestate --help`` stays fast.
"""

from __future__ import annotations

import typer

from services.alerts.cli import alerts
from services.api.cli import api
from services.demo.run import demo
from services.directory_client.cli import devices
from services.enforcement.cli import enforce
from services.operator_cli.cli import register as register_operator_commands
from services.recovery.cli import recovery
from services.replay.cli import replay
from services.stack.cli import app as stack_app
from services.testenv.cli import app as testenv_app
from services.watcher.cli import watch
from streams.cli import worker

app = typer.Typer(
    name="devicestate",
    help="Event-sourced device health for Kubernetes GPU platforms: watch Pod "
    "allocatedResourcesStatus, dedup through Kafka and Faust into PostgreSQL, serve a device "
    "directory. Settings come from DEVICESTATE_* environment variables (see README).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(stack_app, name="stack")
app.add_typer(testenv_app, name="testenv")
app.command("watch")(watch)
app.command("worker")(worker)
app.command("replay")(replay)
app.command("api")(api)
app.command("devices")(devices)
app.command("demo")(demo)
register_operator_commands(app)  # quarantine, automation, breaker, governance, timeline, ...
app.command("alerts")(alerts)
app.command("recovery")(recovery)
app.command("enforce")(enforce)

if __name__ == "__main__":  # pragma: no cover
    app()
