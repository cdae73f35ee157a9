# Argument checks shared by the deploy/ scripts (sourced, not run).
# port_ok PORT: a whole number in 1-65535. hostport_ok HOST:PORT: a non-empty host and a port_ok.
port_ok() {
  case "$1" in ''|*[!0-9]*) return 1 ;; esac
  [ $((10#$1)) -ge 1 ] && [ $((10#$1)) -le 65535 ]
}
hostport_ok() {
  case "$1" in *:*) ;; *) return 1 ;; esac
  [ -n "${1%:*}" ] && port_ok "${1##*:}"
}
# port_free HOST PORT: nothing listens on HOST:PORT (a trial bind, as the server would).
port_free() {
  "${PYTHON:-python3}" - "$1" "$2" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
PY
}
# node_config_ok 'K=V K2=V2': each token K=V with V a number, true/false or a quoted string (as
# Flower reads it); partition-id and num-partitions whole numbers, 0 <= partition-id < num.
# On failure prints the reason and returns 1.
node_config_ok() {
  local tok key val pid="" num=""
  for tok in $1; do
    key="${tok%%=*}"; val="${tok#*=}"
    if [ "$key" = "$tok" ] || [ -z "$key" ] || [ -z "$val" ]; then
      echo "entry '$tok' is not KEY=VALUE"; return 1
    fi
    case "$val" in
      true|false|\"*\"|\'*\') ;;
      *) [[ "$val" =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || {
           echo "value of '$key' must be a number, true/false or a quoted string, got '$val'"; return 1; } ;;
    esac
    [ "$key" = "partition-id" ] && pid="$val"
    [ "$key" = "num-partitions" ] && num="$val"
  done
  if [ -n "$pid" ] || [ -n "$num" ]; then
    [[ "$pid" =~ ^[0-9]+$ ]] && [[ "$num" =~ ^[0-9]+$ ]] || {
      echo "partition-id and num-partitions must both be given as whole numbers, got '${pid}' and '${num}'"; return 1; }
    [ "$num" -ge 1 ] && [ "$pid" -lt "$num" ] || {
      echo "need 0 <= partition-id < num-partitions, got partition-id=$pid num-partitions=$num"; return 1; }
  fi
}
