#!/usr/bin/env bash
# Start one Flower SuperNode (one per device) in the foreground (exec: the PID you get is the
# SuperNode's). Its ClientApp runs the flower-edge client of the submitted Flower App.
#
# Usage: deploy/start-supernode.sh --superlink HOST:PORT (--insecure | --ca FILE) [--port PORT]
#                                  [--node-config 'k=v k2=v2'] [--auth-key FILE]
#                                  [-- EXTRA flower-supernode ARGS]
#   --superlink HOST:PORT  the SuperLink (same port as deploy/start-superlink.sh --port)
#   --insecure             no TLS (the SuperLink runs with --insecure)
#   --ca FILE              CA certificate that signed the SuperLink's certificate (ca.crt)
#   --port PORT            this node's local Runtime API port (default: 9094); one per node
#                          when several SuperNodes share a machine
#   --node-config 'K=V ...'  node settings read by the ClientApp, e.g.
#                          'partition-id=0 num-partitions=4'
#   --auth-key FILE        this node's private key (OpenSSH ECDSA) for SuperNode authentication
# Environment: FLOWER_EDGE_VENV (default: the repository's .venv, if present, else PATH).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${FLOWER_EDGE_VENV:-$root/.venv}"
[ -x "$venv/bin/flower-supernode" ] && export PATH="$venv/bin:$PATH"
export FLWR_TELEMETRY_ENABLED="${FLWR_TELEMETRY_ENABLED:-0}"
export FLWR_DISABLE_UPDATE_CHECK="${FLWR_DISABLE_UPDATE_CHECK:-1}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="${FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION:-1}"

usage() { sed -n '5,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
need() { [ "$#" -ge 2 ] && [ -n "$2" ] || { echo "start-supernode: $1 needs a value" >&2; usage; }; }
superlink=""; port="9094"; ca=""; insecure=0; node_config=""; key=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --superlink) need "$@"; superlink="$2"; shift ;;
    --insecure) insecure=1 ;;
    --ca) need "$@"; ca="$2"; shift ;;
    --port) need "$@"; port="$2"; shift ;;
    --node-config) need "$@"; node_config="$2"; shift ;;
    --auth-key) need "$@"; key="$2"; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "start-supernode: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
[ -n "$superlink" ] || { echo "start-supernode: --superlink HOST:PORT is required" >&2; exit 2; }
case "$port" in ''|*[!0-9]*) echo "start-supernode: --port must be 1-65535, got '$port'" >&2; exit 2 ;; esac
if [ "$insecure" = 1 ] && [ -n "$ca" ]; then
  echo "start-supernode: give either --insecure or --ca FILE, not both" >&2; exit 2
fi
args=(--superlink "$superlink" --host 127.0.0.1 --port "$port")
if [ -n "$ca" ]; then
  [ -r "$ca" ] || { echo "start-supernode: cannot read CA certificate '$ca'" >&2; exit 2; }
  args+=(--root-certificates "$ca")
elif [ "$insecure" = 1 ]; then
  args+=(--insecure)
else
  echo "start-supernode: choose --ca FILE (TLS) or --insecure (no encryption)" >&2; exit 2
fi
if [ -n "$key" ]; then
  [ -r "$key" ] || { echo "start-supernode: cannot read private key '$key'" >&2; exit 2; }
  args+=(--auth-supernode-private-key "$key")
fi
[ -n "$node_config" ] && args+=(--node-config "$node_config")
exec flower-supernode "${args[@]}" "$@"
