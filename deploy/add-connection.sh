#!/usr/bin/env bash
# Add (or replace) a SuperLink connection in the Flower CLI's configuration
# ($FLWR_HOME/config.toml, by default ~/.flwr/config.toml) so that
# `flwr run APP NAME` submits to that SuperLink. Uses flwr's own writer.
#
# Usage: deploy/add-connection.sh NAME HOST:PORT (--insecure | --ca FILE) [--default]
#   NAME        connection name used by `flwr run APP NAME`
#   HOST:PORT   the SuperLink (deploy/start-superlink.sh --host/--port)
#   --insecure  no TLS
#   --ca FILE   CA certificate that signed the SuperLink's certificate (stored as an absolute path)
#   --default   also make it the default connection (`flwr run APP` without NAME)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${FLOWER_EDGE_VENV:-$root/.venv}"
py="python3"; [ -x "$venv/bin/python" ] && py="$venv/bin/python"
usage() { sed -n '6,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=deploy/checks.sh
source "$here/checks.sh"
case "${1:-}" in -h|--help) sed -n '6,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ "$#" -ge 2 ] || { echo "add-connection: give NAME and HOST:PORT" >&2; usage; }
name="$1"; address="$2"; shift 2
case "$name" in
  ''|*[!A-Za-z0-9_.-]*) echo "add-connection: NAME must be letters, digits, '.', '_' or '-', got '$name'" >&2; exit 2 ;;
esac
hostport_ok "$address" || { echo "add-connection: ADDRESS must be HOST:PORT (port 1-65535), got '$address'" >&2; exit 2; }
ca=""; insecure=0; default=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --insecure) insecure=1 ;;
    --ca) [ "$#" -ge 2 ] || usage
      [ -r "$2" ] || { echo "add-connection: cannot read --ca '$2'" >&2; exit 2; }
      ca="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift ;;
    --default) default=1 ;;
    *) echo "add-connection: unknown option '$1'" >&2; usage ;;
  esac
  shift
done
if [ "$insecure" = "$([ -n "$ca" ] && echo 1 || echo 0)" ]; then
  echo "add-connection: give exactly one of --insecure and --ca FILE" >&2; exit 2
fi
[ -z "$ca" ] || [ -r "$ca" ] || { echo "add-connection: cannot read '$ca'" >&2; exit 2; }
exec "$py" - "$name" "$address" "$ca" "$insecure" "$default" <<'PY'
import sys

from flwr.cli.flower_config import (
    read_flower_config,
    set_default_superlink_connection,
    write_superlink_connection,
)
from flwr.cli.typing import SuperLinkConnection

name, address, ca, insecure, default = sys.argv[1:]
if ":" not in address:
    sys.exit(f"add-connection: address must be HOST:PORT, got '{address}'")
write_superlink_connection(
    SuperLinkConnection(
        name=name,
        address=address,
        root_certificates=ca or None,
        insecure=True if insecure == "1" else None,
    )
)
if default == "1":
    set_default_superlink_connection(name)
print(f"add-connection: '{name}' -> {address} in {read_flower_config()[1]}")
PY
