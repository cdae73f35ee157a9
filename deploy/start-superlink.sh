#!/usr/bin/env bash
# Start a Flower SuperLink for flower-edge in the foreground (exec: the PID you get is the
# SuperLink's). One HTTP port serves the Fleet API (SuperNodes), the Control API (`flwr run`)
# and the Runtime API (the ServerApp).
#
# Usage: deploy/start-superlink.sh (--insecure | --certs DIR) [--auth] [--host HOST] [--port PORT]
#                                  [--database FILE | --in-memory] [-- EXTRA flower-superlink ARGS]
#   --insecure       plain HTTP, no TLS (loopback experiments only)
#   --certs DIR      TLS with DIR/ca.crt, DIR/server.pem, DIR/server.key (deploy/gen-certs.sh)
#   --auth           SuperNode authentication: only SuperNodes whose public key was registered
#                    with `flwr supernode register KEY.pub CONNECTION` may connect (needs --certs)
#   --host HOST      address to listen on (default: 127.0.0.1; 0.0.0.0 for devices on a network)
#   --port PORT      port to listen on (default: 9092)
#   --database FILE  keep the SuperLink's state (registered and online SuperNodes, runs) in the
#                    SQLite file FILE (default: ./superlink-PORT.db), so that SuperNodes survive
#                    a SuperLink restart: restart it with the same FILE and port
#   --in-memory      keep no state (Flower's default): a restart ends every SuperNode (HTTP 401
#                    on its next heartbeat)
# Environment: FLOWER_EDGE_VENV (default: the repository's .venv, if present, else PATH).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${FLOWER_EDGE_VENV:-$root/.venv}"
[ -x "$venv/bin/flower-superlink" ] && export PATH="$venv/bin:$PATH"
export FLWR_TELEMETRY_ENABLED="${FLWR_TELEMETRY_ENABLED:-0}"
export FLWR_DISABLE_UPDATE_CHECK="${FLWR_DISABLE_UPDATE_CHECK:-1}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="${FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION:-1}"

# the comment from its Usage line, without its '# ' marks (it ends at the first line of code)
header() { sed -n '5,/^[^#]/{/^#/s/^# \{0,1\}//p;}' "$0"; }
usage() { header >&2; exit 2; }
# shellcheck source=deploy/checks.sh
source "$here/checks.sh"
help() { header; exit 0; }
need() { [ "$#" -ge 2 ] && [ -n "$2" ] || { echo "start-superlink: $1 needs a value" >&2; usage; }; }
host="127.0.0.1"; port="9092"; certs=""; insecure=0; auth=0; database=""; in_memory=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --insecure) insecure=1 ;;
    --certs) need "$@"; certs="$2"; shift ;;
    --auth) auth=1 ;;
    --host) need "$@"; host="$2"; shift ;;
    --port) need "$@"; port="$2"; shift ;;
    --database) need "$@"; database="$2"; shift ;;
    --in-memory) in_memory=1 ;;
    --) shift; break ;;
    -h|--help) help ;;
    *) echo "start-superlink: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
port_ok "$port" || { echo "start-superlink: --port must be 1-65535, got '$port'" >&2; exit 2; }
port_free "$host" "$port" || { echo "start-superlink: $host:$port is in use (another SuperLink?): stop it or give --port" >&2; exit 2; }
if [ "$insecure" = 1 ] && [ -n "$certs" ]; then
  echo "start-superlink: give either --insecure or --certs DIR, not both" >&2; exit 2
fi
args=(--host "$host" --port "$port" --disable-runtime-dependency-installation)
if [ -n "$certs" ]; then
  for f in ca.crt server.pem server.key; do
    [ -r "$certs/$f" ] || { echo "start-superlink: missing $certs/$f (run deploy/gen-certs.sh -o $certs)" >&2; exit 2; }
  done
  args+=(--ssl-ca-certfile "$certs/ca.crt" --ssl-certfile "$certs/server.pem" --ssl-keyfile "$certs/server.key")
elif [ "$insecure" = 1 ]; then
  args+=(--insecure)
else
  echo "start-superlink: choose --certs DIR (TLS) or --insecure (no encryption)" >&2; exit 2
fi
if [ "$auth" = 1 ]; then
  [ -n "$certs" ] || { echo "start-superlink: --auth needs TLS (--certs DIR)" >&2; exit 2; }
  args+=(--enable-supernode-auth)
fi
if [ "$in_memory" = 1 ]; then
  [ -z "$database" ] || { echo "start-superlink: give either --database FILE or --in-memory, not both" >&2; exit 2; }
  echo "start-superlink: state in memory: SuperNodes end if this SuperLink restarts" >&2
else
  database="${database:-superlink-$port.db}"
  mkdir -p "$(dirname "$database")" 2>/dev/null || {
    echo "start-superlink: cannot create the folder of --database '$database'" >&2; exit 2
  }
  echo "start-superlink: state in $database (restart with the same --database and --port and the SuperNodes stay connected)" >&2
  args+=(--database "$database")
fi
exec flower-superlink "${args[@]}" "$@"
