"""Drives `airlock mcp` with the official Python MCP SDK as its client and checks that resources, prompts and
structured tool results go through the guard (`tests/mcp/upstream_server.py` upstream, started with
`SURFACES=1`): under `default = "deny"` only the allowed resources and prompts are listed and served, a
`[resources.…]` rate limit refuses the read past it, secrets in a resource's text, a prompt's messages and a
tool's structured content are masked, the tool's output schema and structured content reach the client, and a
refusal never echoes an unbounded URI. The upstream's own log shows what reached it.

Usage: python3 tests/mcp/surfaces_client.py <config.json>

The config names the `airlock` binary, the policy file, the database, the upstream's command line and its call
log (see tests/tests/mcp_gateway_surfaces.rs). The last line printed is `N passed, N failed`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from harness import check, finish, gateway_command, reached, run_pending, text_of

LEAKED_KEY = "AKIAIOSFODNN7QK4RW2Z"



async def refused(read: Any) -> str:
    """The message of the JSON-RPC error `read` fails with."""
    try:
        await read
    except MCPError as error:
        return error.message
    raise AssertionError("the request was served")


async def main(config: dict[str, Any]) -> None:
    log = Path(config["log"])
    command = gateway_command(config, "--env", "SURFACES=1")
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params, read_timeout_seconds=30) as client:

        @check("under default = deny, resources/list and prompts/list hold only what is allowed and does not poison, masked")
        async def _() -> None:
            resources = (await client.list_resources()).resources
            listed = sorted(str(resource.uri) for resource in resources)
            # config://poisoned is allowed, but its description tells the model what to do with another tool.
            assert listed == ["config://app", "config://leaky"], listed
            prompts = (await client.list_prompts()).prompts
            names = sorted(prompt.name for prompt in prompts)
            # `poisoned` is allowed, but its description overrides the model's instructions; `vetted`'s tag is
            # accepted by the policy (`allow_findings`).
            assert names == ["leaky", "summarise", "vetted"], names
            # The upstream describes the leaky ones with the key: the listings carry it masked.
            for entry in [*resources, *prompts]:
                shown = entry.model_dump_json()
                assert LEAKED_KEY not in shown, shown
            described = [entry.description or "" for entry in [*resources, *prompts] if "leaky" in entry.name]
            assert len(described) == 2 and all("cloud key (" in text for text in described), described

        @check("a resource no allow glob matches is refused under default = deny and never read upstream")
        async def _() -> None:
            message = await refused(client.read_resource("config://secrets"))
            assert "resource `config://secrets` is denied by the policy (`not in allow list`)" in message, message
            assert all(entry.get("resource") != "config://secrets" for entry in reached(log)), reached(log)

        @check("a prompt no allow glob matches is refused under default = deny and never reaches the upstream")
        async def _() -> None:
            message = await refused(client.get_prompt("admin_reset"))
            assert "prompt `admin_reset` is denied by the policy (`not in allow list`)" in message, message
            assert all(entry.get("prompt") != "admin_reset" for entry in reached(log)), reached(log)

        @check("a refused read shows the URI cut short, never the whole of it")
        async def _() -> None:
            uri = "config://" + "x" * 100_000
            message = await refused(client.read_resource(uri))
            assert "is denied by the policy" in message and len(message) < 1_000, len(message)

        @check("the [resources] rate limit refuses the read past it, before the upstream")
        async def _() -> None:
            for name in ["a.txt", "b.txt"]:
                note = await client.read_resource(f"note://{name}")
                assert [c.text for c in note.contents] == [f"note {name}"], note
            message = await refused(client.read_resource("note://c.txt"))
            assert "rate limit `note://**` (2/minute) reached" in message, message
            reads = [entry["resource"] for entry in reached(log) if "resource" in entry]
            assert "note://c.txt" not in reads and "note://b.txt" in reads, reads

        @check("a secret in a resource's text is masked, the rest of it kept")
        async def _() -> None:
            leaky = await client.read_resource("config://leaky")
            text = "\n".join(c.text for c in leaky.contents)
            assert LEAKED_KEY not in text, text
            assert "region = eu-west-1" in text, text
            assert {"resource": "config://leaky"} in reached(log), reached(log)

        @check("a secret in a prompt's messages is masked")
        async def _() -> None:
            prompt = await client.get_prompt("leaky")
            texts = [message.content.text for message in prompt.messages]
            assert len(texts) == 1 and LEAKED_KEY not in texts[0] and "eu-west-1" in texts[0], texts
            summary = await client.get_prompt("summarise", {"name": "a.txt"})
            assert [m.content.text for m in summary.messages] == ["Summarise the note a.txt in one line."], summary

        @check("a tool's output schema reaches the client")
        async def _() -> None:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            schema = tools["forecast"].output_schema
            assert schema is not None and set(schema["properties"]) == {"city", "sky", "note"}, schema

        @check("a tool's structured content reaches the client, masked like its text")
        async def _() -> None:
            result = await client.call_tool("forecast", {"city": "Oslo"})
            assert not result.is_error, result
            structured = result.structured_content
            assert structured is not None, result
            assert structured["city"] == "Oslo" and structured["sky"] == "clear", structured
            assert LEAKED_KEY not in json.dumps(structured), structured
            assert LEAKED_KEY not in text_of(result), text_of(result)

        await run_pending()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        anyio.run(main, json.load(file))
    finish()
