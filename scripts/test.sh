#!/usr/bin/env bash
# Set everything up, then run the checks: ruff, ruff format --check, mypy (strict), pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
# shellcheck source=/dev/null
source "$root/scripts/env.sh"
trap flower_edge_remove_tmp EXIT
cd "$root"
bin="$root/.venv/bin"
echo "[test] ruff check";           "$bin/ruff" check .
echo "[test] ruff format --check";  "$bin/ruff" format --check .
echo "[test] mypy";                 "$bin/mypy"
echo "[test] pytest";               "$bin/pytest" "$@"
