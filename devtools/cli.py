"""``devicestate-dev``: the developer commands (``stack``, ``testenv``, ``demo``).

Installed by ``scripts/bootstrap.sh`` from ``devtools/pyproject.toml`` (the distribution
``devicestate-devtools``), never by the product's wheel.
"""

from __future__ import annotations

import typer

from devtools.demo.run import demo
from devtools.stack.cli import app as stack_app
from devtools.testenv.cli import app as testenv_app

app = typer.Typer(
    name="devicestate-dev",
    help="Developer tools of devicestate: the local Kafka + PostgreSQL stack, the test "
    "kube-apiserver, and the demo on a bundled recorded watch stream.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(stack_app, name="stack")
app.add_typer(testenv_app, name="testenv")
app.command("demo")(demo)

if __name__ == "__main__":  # pragma: no cover
    app()
