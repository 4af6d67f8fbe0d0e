"""Drives `airlock mcp` in front of `@modelcontextprotocol/server-filesystem` (from npm) with the official Python
MCP SDK as the client, and checks each claim on the files the server would have touched.

Usage: python3 tests/mcp/filesystem_client.py <config.json>

The config names the `airlock` binary, the policy file, the database, the server's command line and the root
directory it serves (see tests/tests/mcp_gateway_filesystem.rs). Prints `ok`/`FAILED` per check and
`N passed, N failed` last; exits 0 only when every check passed.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

CALL_META = "agent-airlock/call"

passed = 0
failed = 0
pending: list[tuple[str, Callable[[], Awaitable[None]]]] = []


def check(name: str) -> Callable[[Callable[[], Awaitable[None]]], None]:
    def register(fn: Callable[[], Awaitable[None]]) -> None:
        pending.append((name, fn))

    return register


async def run_pending() -> None:
    global passed, failed
    while pending:
        name, fn = pending.pop(0)
        try:
            with anyio.fail_after(60):
                await fn()
        except Exception:  # noqa: BLE001 - every failure is reported, then counted
            failed += 1
            print(f"FAILED {name}\n{traceback.format_exc()}", flush=True)
        else:
            passed += 1
            print(f"ok     {name}", flush=True)


class Human:
    def __init__(self) -> None:
        self.answers: list[types.ElicitResult] = []
        self.asked: list[dict[str, Any]] = []

    def will(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.answers.append(types.ElicitResult(action=action, content=content))

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        self.asked.append(params.model_dump(by_alias=True, exclude_none=True))
        if not self.answers:
            return types.ErrorData(code=types.INVALID_REQUEST, message="the test scripted no answer")
        return self.answers.pop(0)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def report_of(result: types.CallToolResult) -> dict[str, Any]:
    meta = result.model_dump(by_alias=True).get("_meta") or {}
    assert CALL_META in meta, f"no `{CALL_META}` in the result's _meta: {meta}"
    return meta[CALL_META]


async def main(config: dict[str, Any]) -> None:
    root = Path(config["root"])
    human = Human()
    command = [config["airlock"], "--db", config["db"], "mcp", "--policy", config["policy"], "--", *config["upstream"]]
    # Launched the way a desktop client does: from another folder, with absolute paths.
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ), cwd="/")
    async with Client(server, elicitation_callback=human, read_timeout_seconds=30) as client:

        @check("only the allowed filesystem tools are offered")
        async def _() -> None:
            names = sorted(tool.name for tool in (await client.list_tools()).tools)
            assert names == ["edit_file", "list_directory", "read_text_file", "write_file"], names

        @check("an allowed write reaches the server and lands on disk; its ghost argument is reported stripped")
        async def _() -> None:
            path = str(root / "hello.txt")
            result = await client.call_tool("write_file", {"path": path, "content": "hi there", "mode": "0777"})
            assert result.is_error is not True, result
            assert report_of(result)["stripped_arguments"] == ["mode"], report_of(result)
            assert (root / "hello.txt").read_text() == "hi there"

        @check("a write the policy's condition denies never reaches the server")
        async def _() -> None:
            path = str(root / ".ssh" / "authorized_keys")
            result = await client.call_tool("write_file", {"path": path, "content": "ssh-ed25519 AAAA attacker"})
            assert result.is_error is True, result
            assert report_of(result)["refusal"]["kind"] == "denied", report_of(result)
            assert not (root / ".ssh" / "authorized_keys").exists()

        @check("a tool the policy does not allow is refused and has no effect")
        async def _() -> None:
            result = await client.call_tool(
                "move_file", {"source": str(root / "hello.txt"), "destination": str(root / "moved.txt")}
            )
            assert result.is_error is True, result
            assert (root / "hello.txt").exists() and not (root / "moved.txt").exists()

        @check("an escalated edit runs once, after the human approves it")
        async def _() -> None:
            human.will("accept", {"approve": True})
            edits = [{"oldText": "hi there", "newText": "hello there"}]
            result = await client.call_tool("edit_file", {"path": str(root / "hello.txt"), "edits": edits})
            assert result.is_error is not True, result
            assert len(human.asked) == 1, human.asked
            assert (root / "hello.txt").read_text() == "hello there"
            human.will("decline")
            edits = [{"oldText": "hello there", "newText": "pwned"}]
            result = await client.call_tool("edit_file", {"path": str(root / "hello.txt"), "edits": edits})
            assert result.is_error is True, result
            assert (root / "hello.txt").read_text() == "hello there"

        @check("results come back through the gateway")
        async def _() -> None:
            result = await client.call_tool("read_text_file", {"path": str(root / "hello.txt")})
            assert result.is_error is not True, result
            assert text_of(result) == "hello there", text_of(result)

        await run_pending()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} <config.json>")
    anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(0 if failed == 0 and passed > 0 else 1)
