#!/usr/bin/env bash
# The main job end to end on a fresh machine: set up .venv (scripts/bootstrap.sh), then
# `devicestate-dev demo`, which starts Kafka and PostgreSQL (devicestate-dev stack up), migrates, runs the
# worker and the API, publishes the bundled recorded watch stream and prints the directory.
# Arguments go to `devicestate-dev demo` (e.g. --input PATH, --keep-running).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
exec .venv/bin/devicestate-dev demo "$@"
