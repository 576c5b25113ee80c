"""``python -m devtools``: the same as ``devicestate-dev``."""

from devtools.cli import app

app()
