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
