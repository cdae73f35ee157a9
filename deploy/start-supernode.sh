#!/usr/bin/env bash
# Start one Flower SuperNode (one per device) in the foreground. Its ClientApp runs the
# flower-edge client of the submitted Flower App. The script stays the SuperNode's parent (so
# that it can retry, see --retry-305) and passes SIGTERM / SIGINT on to it.
#
# Usage: deploy/start-supernode.sh --superlink HOST:PORT (--insecure | --ca FILE) [--port PORT]
#                                  [--node-config 'k=v k2=v2'] [--auth-key FILE]
#                                  [--retry-305 SECONDS] [-- EXTRA flower-supernode ARGS]
#   --superlink HOST:PORT  the SuperLink (same port as deploy/start-superlink.sh --port)
#   --insecure             no TLS (the SuperLink runs with --insecure)
#   --ca FILE              CA certificate that signed the SuperLink's certificate (ca.crt)
#   --port PORT            this node's local Runtime API port (default: 9094); one per node
#                          when several SuperNodes share a machine
#   --node-config 'K=V ...'  node settings read by the ClientApp, e.g.
#                          'partition-id=0 num-partitions=4'
#   --auth-key FILE        this node's private key (OpenSSH ECDSA) for SuperNode authentication
#   --retry-305 SECONDS    when the SuperNode exits with Flower's exit code 305 (it could not
#                          activate: a node with this key is still online on the SuperLink,
#                          e.g. it was killed less than 60 s ago, or the key is not registered),
#                          start it again every 5 s for up to SECONDS (default: 75; 0 = never)
# Environment: FLOWER_EDGE_VENV (default: the repository's .venv, if present, else PATH).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${FLOWER_EDGE_VENV:-$root/.venv}"
[ -x "$venv/bin/flower-supernode" ] && export PATH="$venv/bin:$PATH"
export FLWR_TELEMETRY_ENABLED="${FLWR_TELEMETRY_ENABLED:-0}"
export FLWR_DISABLE_UPDATE_CHECK="${FLWR_DISABLE_UPDATE_CHECK:-1}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="${FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION:-1}"

usage() { sed -n '5,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=deploy/checks.sh
source "$here/checks.sh"
help() { sed -n '5,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
need() { [ "$#" -ge 2 ] && [ -n "$2" ] || { echo "start-supernode: $1 needs a value" >&2; usage; }; }
superlink=""; port="9094"; ca=""; insecure=0; node_config=""; key=""; retry=75
while [ "$#" -gt 0 ]; do
  case "$1" in
    --superlink) need "$@"; superlink="$2"; shift ;;
    --insecure) insecure=1 ;;
    --ca) need "$@"; ca="$2"; shift ;;
    --port) need "$@"; port="$2"; shift ;;
    --node-config) need "$@"; node_config="$2"; shift ;;
    --auth-key) need "$@"; key="$2"; shift ;;
    --retry-305) need "$@"; retry="$2"; shift ;;
    --) shift; break ;;
    -h|--help) help ;;
    *) echo "start-supernode: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
[ -n "$superlink" ] || { echo "start-supernode: --superlink HOST:PORT is required" >&2; exit 2; }
port_ok "$port" || { echo "start-supernode: --port must be 1-65535, got '$port'" >&2; exit 2; }
hostport_ok "$superlink" || { echo "start-supernode: --superlink must be HOST:PORT (port 1-65535), got '$superlink'" >&2; exit 2; }
case "$retry" in ''|*[!0-9]*) echo "start-supernode: --retry-305 must be whole seconds >= 0, got '$retry'" >&2; exit 2 ;; esac
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
if [ -n "$node_config" ]; then
  why="$(node_config_ok "$node_config")" || { echo "start-supernode: --node-config: $why" >&2; exit 2; }
  args+=(--node-config "$node_config")
fi
port_free 127.0.0.1 "$port" || { echo "start-supernode: --port $port is in use on 127.0.0.1 (another SuperNode?): give each node its own --port" >&2; exit 2; }

# Flower's exit code 305 (SUPERNODE_CONNECTION_ERROR) means "could not register / activate on
# the SuperLink". The process status is not 305 (exit statuses stop at 255), so it is read from
# the output. The usual cause on a restart: a node killed without a clean shutdown stays online
# on the SuperLink for HEARTBEAT_PATIENCE x 30 s = 60 s, and with --auth-key its key maps to that
# node, which cannot be activated twice. Waiting it out is the fix.
attempt_log="$(mktemp -t flower-edge-supernode.XXXXXX)"
child=0; stopping=0
stop() { stopping=1; [ "$child" = 0 ] || kill -s "$1" "$child" 2>/dev/null || true; }
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'rm -f "$attempt_log"' EXIT
# Flower 1.42: a ClientApp process can outlive its SuperNode, an orphan that retries its pull
# from the node's --port for ever (seen after a SuperLink restart: a ClientApp of the old run).
# When the node has ended, stop what is left of its ClientApps after 5 s (by pid; only this
# --port's, and only in this script's process group, where flower-supernode starts them: never
# another node's, even one started on this port since): SIGTERM, then SIGKILL 5 s later.
leftovers() { pgrep -g 0 -f "flwr-clientapp .*--runtime-api-address 127\.0\.0\.1:${port}( |\$)" || true; }
stop_leftovers() {
  local pids t
  command -v pgrep > /dev/null || return 0
  for t in 1 2 3 4 5; do pids="$(leftovers)"; [ -n "$pids" ] || return 0; sleep 1; done
  echo "start-supernode: stopping ClientApp process(es) left behind by this SuperNode: $(echo $pids)" >&2
  # shellcheck disable=SC2086
  kill -s TERM $pids 2>/dev/null || true
  for t in 1 2 3 4 5; do pids="$(leftovers)"; [ -n "$pids" ] || return 0; sleep 1; done
  # shellcheck disable=SC2086
  kill -s KILL $pids 2>/dev/null || true
}
give_up=$((SECONDS + retry))
while :; do
  flower-supernode "${args[@]}" "$@" > >(tee "$attempt_log") 2>&1 &
  child=$!
  rc=0; wait "$child" || rc=$?
  while kill -0 "$child" 2>/dev/null; do rc=0; wait "$child" || rc=$?; done
  child=0
  if [ "$stopping" = 0 ] && grep -q "Exit Code: 305" "$attempt_log"; then
    if [ "$SECONDS" -lt "$give_up" ]; then
      echo "start-supernode: exit code 305 (not activated: this key's node may still be online after a kill; it goes offline 60 s after its last heartbeat); retrying in 5 s, for $((give_up - SECONDS)) s more" >&2
      sleep 5 & wait $! || true
      [ "$stopping" = 0 ] && continue
    else
      echo "start-supernode: exit code 305 for ${retry} s: check that the key is registered (flwr supernode register KEY.pub CONNECTION) and that --ca matches the SuperLink" >&2
    fi
  fi
  stop_leftovers
  exit "$rc"
done
