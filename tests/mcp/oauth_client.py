"""Drives `airlock mcp --listen --oauth-issuer …` (the gateway as an OAuth 2.1 resource server) with the official
Python MCP SDK over Streamable HTTP, each client sending `Authorization: Bearer <JWT>`. The tokens are minted
here with PyJWT from the keys the loopback issuer (tests/mcp/oauth_issuer.py) wrote; the upstream's own call log
shows what reached it.

Usage: python3 tests/mcp/oauth_client.py <config.json>

The config names the gateway's URL, the issuer's keys file, the upstream's call log and notes directory (see
tests/tests/gateway/mcp_gateway_oauth.rs). The last line printed is `N passed, N failed`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
from cryptography.hazmat.primitives import serialization
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from harness import Human, check, finish, run_pending, text_of

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


async def main(config: dict[str, Any]) -> None:
    url, log, notes = config["url"], Path(config["log"]), Path(config["notes"])
    issued = json.loads(Path(config["keys"]).read_text(encoding="utf-8"))
    issuer, keys = issued["issuer"], issued["keys"]
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    metadata_url = f"{origin}/.well-known/oauth-protected-resource/mcp"

    def claims(subject: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {"iss": issuer, "sub": subject, "aud": url, "iat": now, "nbf": now - 5, "exp": now + 600}
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not None}

    def mint(subject: str, kid: str = "rsa-1", alg: str = "RS256", signer: str | None = None, **overrides: Any) -> str:
        return jwt.encode(claims(subject, **overrides), keys[signer or kid], algorithm=alg, headers={"kid": kid})

    async def raw_initialize(token: str | None) -> httpx2.Response:
        headers = dict(HEADERS)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with httpx2.AsyncClient(timeout=30) as http:
            return await http.post(url, json=INITIALIZE, headers=headers)

    @check("the protected resource metadata (RFC 9728) is served without a token, at both well-known paths")
    async def _() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            for at in (metadata_url, f"{origin}/.well-known/oauth-protected-resource"):
                response = await http.get(at)
                assert response.status_code == 200, (at, response)
                metadata = response.json()
                assert metadata["resource"] == url, metadata
                assert metadata["authorization_servers"] == [issuer], metadata
                assert metadata["bearer_methods_supported"] == ["header"], metadata
                assert metadata["scopes_supported"] == ["mcp:tools"], metadata

    @check("a request without a token gets 401 and a challenge naming the metadata, without an error")
    async def _() -> None:
        response = await raw_initialize(None)
        assert response.status_code == 401, response
        assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"', response.headers

    now = int(time.time())
    # An HS256 token keyed with the issuer's public RSA key: the classic algorithm confusion.
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    payload = b64(json.dumps(claims("mallory")).encode())
    public = serialization.load_pem_private_key(keys["rsa-1"].encode(), None).public_key()
    secret = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    confused = f"{header}.{payload}.{b64(hmac.new(secret, f'{header}.{payload}'.encode(), hashlib.sha256).digest())}"
    refused_tokens = {
        "an expired token": mint("mallory", exp=now - 3600, nbf=now - 7200, iat=now - 7200),
        "a token not valid yet": mint("mallory", nbf=now + 3600),
        "a token for another audience": mint("mallory", aud="http://127.0.0.1:1/mcp"),
        "a token of another issuer": mint("mallory", iss="http://127.0.0.1:1"),
        "an unsigned token (alg: none)": jwt.encode(claims("mallory"), None, algorithm="none"),
        "a token signed with HS256 and the public key": confused,
        "a token signed by a key not in the JWKS": mint("mallory", kid="rogue"),
        "a token signed by another key under a published key id": mint("mallory", kid="rsa-1", signer="rogue"),
        "a token without a subject": mint("mallory", sub=None),
        "a token whose exp is a string": mint("mallory", exp=str(now + 600)),
        "not a JWT at all": "not-a-jwt",
    }
    for name, token in refused_tokens.items():

        @check(f"{name} is refused with 401 and error=\"invalid_token\"")
        async def _(token: str = token) -> None:
            response = await raw_initialize(token)
            assert response.status_code == 401, response
            challenge = response.headers["www-authenticate"]
            assert challenge.startswith('Bearer error="invalid_token"'), challenge
            assert f'resource_metadata="{metadata_url}"' in challenge, challenge
            assert token not in challenge and token not in response.text, "the token is echoed"

    @check("nothing a refused token sent reached the upstream")
    async def _() -> None:
        assert logged(log) == [], logged(log)

    alice = mint("alice", groups=["payments", "staff"], scope="mcp:tools read")
    bob = mint("bob", kid="ec-1", alg="ES256", groups=["support"])
    carol = mint("carol")

    def client_for(token: str, human: Human | None = None) -> tuple[httpx2.AsyncClient, Client]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))
        transport = streamable_http_client(url, http_client=http)
        return http, Client(transport, elicitation_callback=human, read_timeout_seconds=30)

    @check("two identities see different tool lists: transfer is offered to the payments team only")
    async def _() -> None:
        seen = {}
        for name, token in (("alice", alice), ("bob", bob), ("carol", carol)):
            http, client = client_for(token)
            async with http, client:
                seen[name] = sorted(tool.name for tool in (await client.list_tools()).tools)
        assert "transfer" in seen["alice"] and "read_note" in seen["alice"], seen
        assert "transfer" not in seen["bob"] and "read_note" in seen["bob"], seen
        assert "transfer" not in seen["carol"], seen
        assert "delete_everything" not in seen["alice"], seen

    @check("the groups condition admits a payments member's transfer and it reaches the upstream")
    async def _() -> None:
        http, client = client_for(alice)
        async with http, client:
            result = await client.call_tool("transfer", {"amount": 5, "to": "acct-1"})
        assert not result.is_error, text_of(result)
        assert text_of(result) == "transferred 5 to acct-1", text_of(result)
        assert [e for e in logged(log) if e.get("tool") == "transfer"] == [
            {"tool": "transfer", "arguments": {"amount": 5, "to": "acct-1"}}
        ], logged(log)

    @check("the groups condition refuses another identity's transfer, and one without groups; neither reaches the upstream")
    async def _() -> None:
        for token in (bob, carol):
            http, client = client_for(token)
            async with http, client:
                result = await client.call_tool("transfer", {"amount": 5, "to": "acct-2"})
            assert result.is_error and "payments team only" in text_of(result), text_of(result)
        assert [e["arguments"]["to"] for e in logged(log) if e.get("tool") == "transfer"] == ["acct-1"], logged(log)

    @check("rate limits count per identity: alice's spent budget is not bob's")
    async def _() -> None:
        (notes / "n.txt").write_text("hello", encoding="utf-8")
        for token, outcomes in ((alice, [False, True]), (bob, [False])):
            http, client = client_for(token)
            async with http, client:
                for refused in outcomes:
                    result = await client.call_tool("read_note", {"name": "n.txt"})
                    assert result.is_error == refused, text_of(result)
        # A new session of alice's does not buy a fresh budget.
        http, client = client_for(alice)
        async with http, client:
            again = await client.call_tool("read_note", {"name": "n.txt"})
        assert again.is_error and "rate limited" in text_of(again), text_of(again)
        assert len([e for e in logged(log) if e.get("tool") == "read_note"]) == 2, logged(log)

    @check("a session belongs to the caller who opened it: bob's token does not reach into alice's session")
    async def _() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {alice}"})
            assert opened.status_code == 200, opened
            session = opened.headers["mcp-session-id"]
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
            for token, status in ((bob, 404), (alice, 200)):
                headers = {**HEADERS, "Authorization": f"Bearer {token}", "Mcp-Session-Id": session,
                           "Mcp-Protocol-Version": "2025-11-25"}
                response = await http.post(url, json=listing, headers=headers)
                assert response.status_code == status, (token == bob, response, response.text)

    @check("an identity condition escalates alice's write only, and the human asked sees who asked")
    async def _() -> None:
        human = Human()
        human.will("accept", {"approve": True})
        http, client = client_for(alice, human)
        async with http, client:
            result = await client.call_tool("write_note", {"name": "a.txt", "text": "from alice"})
        assert not result.is_error, text_of(result)
        assert len(human.asked) == 1, human.asked
        assert f"asked by {issuer}#alice" in human.asked[0]["message"], human.asked[0]
        http, client = client_for(bob, Human())
        async with http, client:
            result = await client.call_tool("write_note", {"name": "b.txt", "text": "from bob"})
        assert not result.is_error, text_of(result)
        assert (notes / "a.txt").read_text(encoding="utf-8") == "from alice"

    await run_pending()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        anyio.run(main, json.load(file))
    finish()
