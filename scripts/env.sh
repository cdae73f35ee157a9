# Sourced by the run and test scripts: Flower offline and quiet, state in a temporary folder.
export FLWR_TELEMETRY_ENABLED=0
export FLWR_DISABLE_UPDATE_CHECK=1
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
: "${FLOWER_EDGE_TMP:=$(mktemp -d -t flower-edge.XXXXXX)}"
export FLOWER_EDGE_TMP
export FLWR_HOME="${FLWR_HOME:-$FLOWER_EDGE_TMP/flwr-home}"
export RAY_TMPDIR="${RAY_TMPDIR:-$FLOWER_EDGE_TMP/ray}"
export RAY_DEDUP_LOGS=0
mkdir -p "$FLWR_HOME" "$RAY_TMPDIR"
