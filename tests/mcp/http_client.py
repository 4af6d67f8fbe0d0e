"""Drives `airlock mcp --listen` (the gateway serving Streamable HTTP, its upstream reached with `--upstream-url`)
with the official Python MCP SDK over HTTP, and checks each claim against the upstream's own call log.

Usage: python3 tests/mcp/http_client.py <config.json>

The config names the gateway's URL, the bearer token, and the upstream's call log and notes directory (see
tests/tests/gateway/mcp_gateway_http.rs). The last line printed is `N passed, N failed`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from harness import check, finish, run_pending, text_of

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


async def main(config: dict[str, Any]) -> None:
    url, token, log, notes = config["url"], config["token"], Path(config["log"]), Path(config["notes"])

    @check("a request without the bearer token is refused with 401 before any MCP is read")
    async def _() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            missing = await http.post(url, json=INITIALIZE, headers=HEADERS)
            wrong = await http.post(url, json=INITIALIZE, headers={**HEADERS, "Authorization": "Bearer not-it"})
        assert missing.status_code == 401, missing
        assert wrong.status_code == 401, wrong
        assert missing.headers.get("www-authenticate") == "Bearer", missing.headers

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(url, http_client=http), read_timeout_seconds=30) as client:

        @check("over HTTP, tools/list offers the upstream's allowed tools only")
        async def _() -> None:
            tools = sorted(tool.name for tool in (await client.list_tools()).tools)
            assert "write_note" in tools and "delete_everything" not in tools, tools

        @check("an allowed call reaches the HTTP upstream, its undeclared argument stripped")
        async def _() -> None:
            result = await client.call_tool("write_note", {"name": "web.txt", "text": "over http", "mode": "0777"})
            assert not result.is_error, text_of(result)
            assert text_of(result) == "wrote 9 characters to web.txt", text_of(result)
            assert (notes / "web.txt").read_text(encoding="utf-8") == "over http"
            assert logged(log) == [{"tool": "write_note", "arguments": {"name": "web.txt", "text": "over http"}}], logged(log)

        @check("a denied tool is refused and never reaches the HTTP upstream")
        async def _() -> None:
            result = await client.call_tool("delete_everything", {})
            assert result.is_error, result
            assert all(entry.get("tool") != "delete_everything" for entry in logged(log)), logged(log)
            assert (notes / "web.txt").exists()

        @check("resources pass through from the HTTP upstream")
        async def _() -> None:
            app = await client.read_resource("config://app")
            assert [c.text for c in app.contents] == ["colour = blue"], app

        @check("a per-thread rate limit counts the caller: a new session of the same client gets no fresh budget")
        async def _() -> None:
            for _ in range(2):
                result = await client.call_tool("read_note", {"name": "web.txt"})
                assert not result.is_error and text_of(result) == "over http", text_of(result)
            past = await client.call_tool("read_note", {"name": "web.txt"})
            assert past.is_error and "is rate limited (2/minute)" in text_of(past), text_of(past)
            # The same token in a new session (a client reconnecting): the same caller, the same spent budget.
            again = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with again, Client(streamable_http_client(url, http_client=again), read_timeout_seconds=30) as second:
                fresh = await second.call_tool("read_note", {"name": "web.txt"})
                assert fresh.is_error and "is rate limited (2/minute)" in text_of(fresh), text_of(fresh)
                # The session's own tools are still served: only the limited tool is refused.
                wrote = await second.call_tool("write_note", {"name": "second.txt", "text": "2"})
                assert not wrote.is_error, text_of(wrote)
            reads = [entry for entry in logged(log) if entry.get("tool") == "read_note"]
            assert len(reads) == 2, logged(log)

        await run_pending()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        anyio.run(main, json.load(file))
    finish()
