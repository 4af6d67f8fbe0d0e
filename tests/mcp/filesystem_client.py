"""Drives `airlock mcp` in front of `@modelcontextprotocol/server-filesystem` (from npm) with the official Python
MCP SDK as the client, and checks each claim on the files the server would have touched.

Usage: python3 tests/mcp/filesystem_client.py <config.json>

The config names the `airlock` binary, the policy file, the database, the server's command line and the root
directory it serves (see tests/tests/gateway_filesystem/mcp_gateway_filesystem.rs). Prints `ok`/`FAILED` per check and
`N passed, N failed` last; exits 0 only when every check passed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

from harness import check, finish, gateway_command, Human, report_of, run_pending


def all_text_of(result: types.CallToolResult) -> str:
    """Every text block of the result, joined."""
    return "\n".join(block.text for block in result.content if block.type == "text")


async def main(config: dict[str, Any]) -> None:
    root = Path(config["root"])
    human = Human()
    command = gateway_command(config)
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
            assert all_text_of(result) == "hello there", all_text_of(result)

        await run_pending()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} <config.json>")
    anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
    finish()
