#!/usr/bin/env bash
# Set everything up, then run the main job: the default simulation on bundled data.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
# shellcheck source=/dev/null
source "$root/scripts/env.sh"
trap flower_edge_remove_tmp EXIT
cd "$root"
"$root/.venv/bin/flower-edge" simulate "$@"
