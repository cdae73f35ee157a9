#!/usr/bin/env bash
# Generate development TLS certificates and SuperNode authentication keys, the way Flower's
# "flower-authentication" example does: a self-signed CA, a server certificate signed by it
# (SANs: localhost, 127.0.0.1, ::1 plus any extra host names or IPs given), and one ECDSA P-384
# key pair (OpenSSH format) per SuperNode for node authentication.
#
# Usage: deploy/gen-certs.sh [-o OUTDIR] [-n NUM_SUPERNODES] [-s EXTRA_SAN]... [-b BITS]
#   -o OUTDIR          where to write (default: ./certificates); existing files are replaced
#   -n NUM_SUPERNODES  node key pairs to make (default: 4); 0 = none
#   -s EXTRA_SAN       extra subjectAltName for the server certificate, e.g. -s 192.168.1.10
#                      or -s superlink.example.org (repeatable)
#   -b BITS            RSA key size of the CA and server keys (default: 4096; >= 2048)
#
# Output: ca.crt ca.key server.pem server.key and keys/supernode-<i>{,.pub}.
# For prototyping only: for production use your organisation's PKI.
set -euo pipefail

out="certificates"
nodes=4
bits=4096
sans=()
# the comment above, without its '# ' marks (it ends at the first line that is not a comment)
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p;}' "$0"; }
case "${1:-}" in --help) usage; exit 0 ;; esac
while getopts "o:n:s:b:h" opt; do
  case "$opt" in
    o) out="$OPTARG" ;;
    n) nodes="$OPTARG" ;;
    s) sans+=("$OPTARG") ;;
    b) bits="$OPTARG" ;;
    h) usage; exit 0 ;;
    *) echo "usage: $0 [-o OUTDIR] [-n NUM_SUPERNODES] [-s EXTRA_SAN]... [-b BITS]" >&2; exit 2 ;;
  esac
done
case "$nodes" in ''|*[!0-9]*) echo "gen-certs: -n must be a whole number >= 0, got '$nodes'" >&2; exit 2 ;; esac
case "$bits" in ''|*[!0-9]*) bits=0 ;; esac
[ "$bits" -ge 2048 ] || { echo "gen-certs: -b must be a whole number >= 2048" >&2; exit 2; }
command -v openssl >/dev/null || { echo "gen-certs: openssl not found" >&2; exit 1; }
if [ "$nodes" -gt 0 ]; then
  command -v ssh-keygen >/dev/null || { echo "gen-certs: ssh-keygen not found (needed for node keys; use -n 0 to skip)" >&2; exit 1; }
fi

mkdir -p "$out/keys" 2>/dev/null || { echo "gen-certs: cannot create -o '$out'" >&2; exit 2; }
rm -f "$out"/ca.* "$out"/server.* "$out"/keys/supernode-*
conf="$out/certificate.conf"
{
  printf '[req]\ndefault_bits = %s\nprompt = no\ndefault_md = sha256\n' "$bits"
  printf 'req_extensions = req_ext\ndistinguished_name = dn\n\n'
  printf '[dn]\nC = DE\nST = HH\nO = flower-edge\nCN = localhost\n\n'
  printf '[req_ext]\nsubjectAltName = @alt_names\n\n[alt_names]\n'
  printf 'DNS.1 = localhost\nIP.1 = 127.0.0.1\nIP.2 = ::1\n'
  d=2; i=3
  for san in "${sans[@]+"${sans[@]}"}"; do
    if [[ "$san" =~ ^[0-9.]+$ || "$san" == *:* ]]; then printf 'IP.%d = %s\n' "$i" "$san"; i=$((i + 1))
    else printf 'DNS.%d = %s\n' "$d" "$san"; d=$((d + 1)); fi
  done
} > "$conf"

openssl genrsa -out "$out/ca.key" "$bits" 2>/dev/null
openssl req -new -x509 -key "$out/ca.key" -sha256 -subj "/C=DE/ST=HH/O=flower-edge CA" \
  -days 365 -out "$out/ca.crt"
openssl genrsa -out "$out/server.key" "$bits" 2>/dev/null
openssl req -new -key "$out/server.key" -out "$out/server.csr" -config "$conf"
openssl x509 -req -in "$out/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
  -out "$out/server.pem" -days 365 -sha256 -extfile "$conf" -extensions req_ext 2>/dev/null
rm -f "$out/server.csr"
chmod 600 "$out/ca.key" "$out/server.key"

for ((n = 1; n <= nodes; n++)); do
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "supernode-$n" -f "$out/keys/supernode-$n"
done
echo "gen-certs: wrote $out/{ca.crt,ca.key,server.pem,server.key} and $nodes node key pair(s) in $out/keys/"
