"""A loopback OAuth authorization server for the gateway's OAuth tests: its own signing keys, its RFC 8414
discovery document and its JWKS, served over HTTP on 127.0.0.1. It issues no tokens itself: the client script
mints them with the private keys this process writes (PyJWT), as an authorization server would.

Usage: python3 tests/mcp/oauth_issuer.py <directory>

Writes `<directory>/keys.json`: `{"issuer": URL, "keys": {kid: PEM private key}}` with an RSA key `rsa-1` and a
P-256 key `ec-1`, both published in the JWKS, and an RSA key `rogue` that is not. Each request it serves is
appended to `<directory>/requests.log` (one path per line), so a test can count the gateway's fetches. The
last thing it prints is `issuer URL`; it then serves until killed.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

DIRECTORY = Path(sys.argv[1])
DIRECTORY.mkdir(parents=True, exist_ok=True)
LOCK = threading.Lock()


def pem(key: object) -> str:
    return key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


private = {
    "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ec-1": ec.generate_private_key(ec.SECP256R1()),
    "rogue": rsa.generate_private_key(public_exponent=65537, key_size=2048),
}


def public_jwk(kid: str, alg: str) -> dict[str, object]:
    key = private[kid].public_key()  # type: ignore[attr-defined]
    jwk = json.loads(RSAAlgorithm.to_jwk(key) if alg.startswith("RS") else ECAlgorithm.to_jwk(key))
    jwk.update({"kid": kid, "alg": alg, "use": "sig"})
    return jwk


JWKS = {"keys": [public_jwk("rsa-1", "RS256"), public_jwk("ec-1", "ES256")]}

server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
ISSUER = f"http://127.0.0.1:{server.server_address[1]}"
DISCOVERY = {
    "issuer": ISSUER,
    "jwks_uri": f"{ISSUER}/jwks.json",
    "authorization_endpoint": f"{ISSUER}/authorize",
    "token_endpoint": f"{ISSUER}/token",
    "response_types_supported": ["code"],
    "code_challenge_methods_supported": ["S256"],
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        with LOCK, (DIRECTORY / "requests.log").open("a", encoding="utf-8") as log:
            log.write(self.path + "\n")
        documents = {"/.well-known/oauth-authorization-server": DISCOVERY, "/jwks.json": JWKS}
        document = documents.get(self.path)
        if document is None:
            self.send_error(404)
            return
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


server.RequestHandlerClass = Handler
(DIRECTORY / "keys.json").write_text(
    json.dumps({"issuer": ISSUER, "keys": {kid: pem(key) for kid, key in private.items()}}), encoding="utf-8"
)
print(f"issuer {ISSUER}", flush=True)
server.serve_forever()
