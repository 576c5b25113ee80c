#!/usr/bin/env bash
# The project's test command: set up .venv (scripts/bootstrap.sh), make sure the local stack (Kafka + PostgreSQL) runs, then
# pytest -q "$@". Arguments go to pytest, e.g. scripts/test.sh tests/stack -k status.
# The stack's connection settings (DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS, DEVICESTATE_DATABASE_URL)
# are exported unless already set. pytest's exit code 5 (no tests collected) counts as a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Idempotent and quick when nothing changed: makes the command work on a fresh machine.
bash scripts/bootstrap.sh

settings="$(.venv/bin/devicestate-dev stack up)"
while IFS='=' read -r name value; do
  [[ "$name" == DEVICESTATE_* ]] || continue
  if [[ -z "${!name:-}" ]]; then
    export "$name=$value"
  fi
done <<< "$settings"

set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "scripts/test.sh: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
