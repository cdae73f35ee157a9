#!/usr/bin/env bash
# The slow tests on Flower's real deployment runtime (SuperLink + SuperNodes on 127.0.0.1):
# the user-facing deploy/app end to end over TLS with node authentication (real torch
# training), a SuperNode killed mid-training and restarted, the ServerApp killed after an
# aggregation and resumed from its checkpoint, the SuperLink restarted (SuperNodes survive with
# the default database, end with --in-memory), an authenticated SuperNode restarted at once
# (exit code 305, retried); and `flwr run .` of this repo's app on the simulation engine with
# 2, 6 and 20 SuperNodes. They take several minutes on a small machine,
# so the default test command (scripts/test.sh) leaves them out (marker "slow"); the
# deployment test that fits its budget (tests/test_deploy_runtime.py) runs there.
# Every process a test starts is stopped by its pid; ports are chosen free at run time.
set -euo pipefail
case "${1:-}" in
  -h | --help)
    echo "usage: bash deploy/ci.sh [PYTEST ARGS...]"
    echo "Set up (scripts/setup.sh), then run the slow deployment tests; extra arguments go to pytest."
    exit 0
    ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
# shellcheck source=/dev/null
source "$root/scripts/env.sh"
trap flower_edge_remove_tmp EXIT
cd "$root"
"$root/.venv/bin/pytest" -m "slow" \
  tests/test_deploy_e2e.py tests/test_faults_deployment.py tests/test_deploy_restarts.py \
  tests/test_sim_flwr_run_sizes.py "$@"
