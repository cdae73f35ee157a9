#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with torch (CPU wheel, 2.13.0) put in place
# before the project, then the project itself in editable mode with its dev extra.
# Both installs take constraints.txt (exact versions). A second run installs nothing: it only
# checks that torch imports and that pyproject.toml and constraints.txt have not changed since
# the last install (a stamp file holds their hash).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv"
  "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"
if ! "$vpy" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==2.13.0 (CPU wheel) before the project"
  "$vpy" -m pip install --quiet --disable-pip-version-check -c constraints.txt "torch==2.13.0"
fi
stamp="$venv/.flower-edge-stamp"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$vpy" -c "import flower_edge" >/dev/null 2>&1; then
  echo "[setup] installing flower-edge and its dependencies"
  "$vpy" -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
  echo "$want" > "$stamp"
fi
