# Sourced by the run and test scripts: Flower offline and quiet, state in a temporary folder.
export FLWR_TELEMETRY_ENABLED=0
export FLWR_DISABLE_UPDATE_CHECK=1
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
# A folder made here is this shell's own: the run and test scripts remove it when they exit
# (flower_edge_remove_tmp); a FLOWER_EDGE_TMP given by the caller is left alone.
if [ -z "${FLOWER_EDGE_TMP:-}" ]; then
    FLOWER_EDGE_TMP="$(mktemp -d -t flower-edge.XXXXXX)"
    FLOWER_EDGE_TMP_OWNED="$FLOWER_EDGE_TMP"
fi
export FLOWER_EDGE_TMP
flower_edge_remove_tmp() {
    if [ -n "${FLOWER_EDGE_TMP_OWNED:-}" ] && [ "$FLOWER_EDGE_TMP_OWNED" = "${FLOWER_EDGE_TMP:-}" ]; then
        rm -rf -- "$FLOWER_EDGE_TMP_OWNED"
    fi
}
export FLWR_HOME="${FLWR_HOME:-$FLOWER_EDGE_TMP/flwr-home}"
export RAY_TMPDIR="${RAY_TMPDIR:-$FLOWER_EDGE_TMP/ray}"
export RAY_DEDUP_LOGS=0
mkdir -p "$FLWR_HOME" "$RAY_TMPDIR"
