#!/usr/bin/env bash
# Writes the certificates of the issuer client's unit tests (runtime/src/integrations/mcp_gateway/testdata/):
# a test CA, another CA the tests do not trust, and two server certificates the first CA signed, for
# `127.0.0.1` and for `issuer.test`, each with its P-256 key. Valid for 100 years from the day they were made;
# test data only (the keys are public in the repository). Re-run from the repository's root to replace them.
set -euo pipefail
out=runtime/src/integrations/mcp_gateway/testdata
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
days=36500
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name, file stem
  key "$scratch/$2.key"
  openssl req -x509 -new -key "$scratch/$2.key" -subj "/CN=$1" -days "$days" -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/$2.pem"
}
server() { # subjectAltName, file stem
  key "$out/$2.key.pem"
  openssl req -new -key "$out/$2.key.pem" -subj "/CN=issuer test server" -out "$scratch/$2.csr"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "$1" > "$scratch/$2.ext"
  openssl x509 -req -in "$scratch/$2.csr" -CA "$out/ca.pem" -CAkey "$scratch/ca.key" -CAcreateserial \
    -days "$days" -sha256 -extfile "$scratch/$2.ext" -out "$out/$2.pem" 2>/dev/null
}
ca "issuer test CA" ca
ca "another CA" other_ca
server "IP:127.0.0.1" server_127.0.0.1
server "DNS:issuer.test" server_issuer.test
rm -f "$out/ca.srl"
