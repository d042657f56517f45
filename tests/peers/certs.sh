#!/usr/bin/env bash
# certs.sh DIR: test PKI for the emulated BMCs. Idempotent: only missing files are made.
#   ca.crt/.key           test CA
#   leaf.crt/.key         CA-signed server cert, SAN IP:127.0.0.1 + DNS:localhost
#   named-leaf.crt/.key   CA-signed, SAN DNS:bmc.coroner.test only (serverName override test)
#   self-signed.crt/.key  plain `openssl req -x509` (CA:TRUE, as on a factory BMC); trusted by pin
#   other-ca.crt/.key     unrelated CA ("wrong CA" test)
#   <leaf>.sha256         lowercase hex SHA-256 of the certificate's DER (the pin format)
set -euo pipefail
dir=${1:?usage: certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077 # private keys stay private
days=3650 # long enough that tests never meet an expired cert

new_ca() { # NAME CN
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days $days -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

new_leaf() { # NAME CN SAN: a proper end-entity cert (rustls rejects CA:TRUE server certs)
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
    extendedKeyUsage=serverAuth "subjectAltName=$3" subjectKeyIdentifier=hash authorityKeyIdentifier=keyid >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAserial ca.srl -CAcreateserial \
    -out "$1.crt" -days $days -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

have() { [[ -s $1.crt && -s $1.key ]]; }

made=()
if ! have ca; then
  new_ca ca coroner-test-bmc-ca
  rm -f leaf.* named-leaf.* # signed by a CA that is gone
  made+=(ca)
fi
have leaf || { new_leaf leaf 127.0.0.1 IP:127.0.0.1,DNS:localhost; made+=(leaf); }
have named-leaf || { new_leaf named-leaf bmc.coroner.test DNS:bmc.coroner.test; made+=(named-leaf); }
if ! have self-signed; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout self-signed.key -out self-signed.crt -days $days \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null
  made+=(self-signed)
fi
have other-ca || { new_ca other-ca coroner-unrelated-ca; made+=(other-ca); }

for name in leaf named-leaf self-signed; do
  pin=$(openssl x509 -in "$name.crt" -outform der | sha256sum | cut -d' ' -f1)
  [[ "$(cat "$name.sha256" 2>/dev/null)" == "$pin" ]] || echo "$pin" >"$name.sha256"
done
chmod 644 ./*.crt ./*.sha256 # only keys need to stay private

echo "[certs] $dir: ${made[*]:-nothing new}"
