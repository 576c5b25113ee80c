#!/usr/bin/env bash
# Set up a development environment from nothing, idempotently:
#   - .venv with Python 3.11 (created if missing; $PYTHON names another interpreter),
#   - the project installed editable with its dev extra, and the developer tools beside it:
#     pip install -e '.[dev]' -e ./devtools (skipped when neither pyproject.toml has changed since
#     the last successful install). `devicestate` is the product's command line, `devicestate-dev`
#     the developer tools' (stack, testenv, demo).
# Needs only python3.11 on the PATH and the package index. The servers (Kafka, PostgreSQL) are
# not started here: `devicestate-dev stack up` does that, and fetches what they need on first use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3.11}"
VENV=.venv
STAMP="$VENV/.devicestate-install-stamp"

say() { printf '[bootstrap] %s\n' "$*"; }

if [[ -x "$VENV/bin/python" ]]; then
  say "$VENV exists ($("$VENV/bin/python" --version))"
else
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "ERROR: $PYTHON was not found on the PATH (set PYTHON=/path/to/python3.11)" >&2
    exit 1
  fi
  say "creating $VENV with $("$PYTHON" --version) ($(command -v "$PYTHON"))"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  say "upgraded pip to $("$VENV/bin/python" -m pip --version | cut -d' ' -f2)"
fi

if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  say "ERROR: $VENV runs $("$VENV/bin/python" --version), the project needs 3.11;" \
      "remove $VENV and run again" >&2
  exit 1
fi

wanted="$(cat pyproject.toml devtools/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$wanted" && -x "$VENV/bin/devicestate" \
      && -x "$VENV/bin/devicestate-dev" ]]; then
  say "dependencies up to date (pyproject.toml files unchanged since the last install)"
else
  say "installing: pip install -e '.[dev]' -e ./devtools"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
    -e '.[dev]' -e ./devtools
  echo "$wanted" > "$STAMP"
  say "installed; $VENV/bin/devicestate is the command line, $VENV/bin/devicestate-dev the developer tools'"
fi
