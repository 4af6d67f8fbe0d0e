"""Drives `airlock mcp` in `mode = "observe"` with the official Python MCP SDK as its client (the upstream is
`tests/mcp/upstream_server.py` with `SURFACES=1`) and checks that resources and prompts the policy alone would
refuse (a deny glob, `default = "deny"`, a `[resources.…]` rate limit) are listed and served, and that what
comes back is still masked. The test (tests/tests/gateway/mcp_gateway_surfaces.rs) then reads the gateway's
audit log for the would-refuse records.

Usage: python3 tests/mcp/surfaces_observe_client.py <config.json>

The last line printed is `N passed, N failed`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from harness import check, finish, gateway_command, reached, run_pending

LEAKED_KEY = "AKIAIOSFODNN7QK4RW2Z"



async def main(config: dict[str, Any]) -> None:
    log = Path(config["log"])
    command = gateway_command(config, "--env", "SURFACES=1")
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params, read_timeout_seconds=30) as client:

        @check("observe mode lists what the policy would hide, not what poisons")
        async def _() -> None:
            listed = {str(resource.uri) for resource in (await client.list_resources()).resources}
            assert {"config://secrets", "config://leaky", "config://app"} <= listed, listed
            names = {prompt.name for prompt in (await client.list_prompts()).prompts}
            assert {"admin_reset", "leaky"} <= names, names
            # What poisons is left out in observe mode too, as a tool is.
            assert "config://poisoned" not in listed and "poisoned" not in names, (listed, names)

        @check("a resource a deny glob matches is read from the upstream, its secret masked")
        async def _() -> None:
            leaky = await client.read_resource("config://leaky")
            text = "\n".join(c.text for c in leaky.contents)
            assert LEAKED_KEY not in text and "region = eu-west-1" in text, text
            assert {"resource": "config://leaky"} in reached(log), reached(log)

        @check("a prompt no allow glob matches under default = deny is given, its messages masked")
        async def _() -> None:
            prompt = await client.get_prompt("leaky")
            texts = [message.content.text for message in prompt.messages]
            assert len(texts) == 1 and LEAKED_KEY not in texts[0] and "eu-west-1" in texts[0], texts
            assert any(entry.get("prompt") == "leaky" for entry in reached(log)), reached(log)

        @check("a read past the [resources] rate limit is served")
        async def _() -> None:
            for name in ["a.txt", "b.txt", "c.txt"]:
                note = await client.read_resource(f"note://{name}")
                assert [c.text for c in note.contents] == [f"note {name}"], note
            reads = [entry["resource"] for entry in reached(log) if "resource" in entry]
            assert "note://c.txt" in reads, reads

        await run_pending()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        anyio.run(main, json.load(file))
    finish()
