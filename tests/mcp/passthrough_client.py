"""Drives `airlock mcp` with the official Python MCP SDK as its client and checks that resources and prompts
pass through to the upstream (`tests/mcp/upstream_server.py`) unchanged, except those the policy denies,
which are neither listed nor forwarded (the upstream's own log shows what reached it).

Usage: python3 tests/mcp/passthrough_client.py <config.json>

The config names the `airlock` binary, the policy file, the database, the upstream's command line and its call
log (see tests/tests/gateway/mcp_gateway_passthrough.rs). The last line printed is `N passed, N failed`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from harness import check, finish, gateway_command, reached, run_pending



async def main(config: dict[str, Any]) -> None:
    log = Path(config["log"])
    command = gateway_command(config)
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params, read_timeout_seconds=30) as client:

        @check("resources/list passes the upstream's resources through, without the denied one")
        async def _() -> None:
            listed = sorted(str(resource.uri) for resource in (await client.list_resources()).resources)
            assert listed == ["config://app"], listed
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            assert templates == ["note://{name}"], templates

        @check("resources/read returns the upstream's contents, for a fixed URI and a template's")
        async def _() -> None:
            app = await client.read_resource("config://app")
            assert [c.text for c in app.contents] == ["colour = blue"], app
            note = await client.read_resource("note://hello.txt")
            assert [c.text for c in note.contents] == ["hello from the notes"], note
            assert {"resource": "config://app"} in reached(log), reached(log)

        @check("a denied resource is refused and never read upstream")
        async def _() -> None:
            try:
                await client.read_resource("config://secrets")
            except MCPError as error:
                assert "denied by the policy (`config://secrets`)" in error.message, error.message
            else:
                raise AssertionError("the denied resource was read")
            assert all(entry.get("resource") != "config://secrets" for entry in reached(log)), reached(log)

        @check("the upstream's own error for an unknown resource comes through")
        async def _() -> None:
            try:
                await client.read_resource("config://nothing")
            except MCPError as error:
                assert "config://nothing" in error.message, error.message
                assert "denied" not in error.message, error.message
            else:
                raise AssertionError("an unknown resource was read")
            assert {"resource": "config://nothing"} in reached(log), reached(log)

        @check("prompts/list and prompts/get pass through, without the denied prompt")
        async def _() -> None:
            names = sorted(prompt.name for prompt in (await client.list_prompts()).prompts)
            assert names == ["summarise"], names
            prompt = await client.get_prompt("summarise", {"name": "hello.txt"})
            texts = [message.content.text for message in prompt.messages]
            assert texts == ["Summarise the note hello.txt in one line."], texts
            assert {"prompt": "summarise", "arguments": {"name": "hello.txt"}} in reached(log), reached(log)

        @check("a denied prompt is refused and never reaches the upstream")
        async def _() -> None:
            try:
                await client.get_prompt("admin_reset")
            except MCPError as error:
                assert "prompt `admin_reset` is denied by the policy (`admin_*`)" in error.message, error.message
            else:
                raise AssertionError("the denied prompt was given")
            assert all(entry.get("prompt") != "admin_reset" for entry in reached(log)), reached(log)

        @check("tools still go through the guard")
        async def _() -> None:
            tools = sorted(tool.name for tool in (await client.list_tools()).tools)
            assert "delete_everything" not in tools and "read_note" in tools, tools

        await run_pending()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        anyio.run(main, json.load(file))
    finish()
