"""Drives `airlock mcp` (the gateway) with the official Python MCP SDK as its client, in front of the upstream
server `tests/mcp/upstream_server.py`, and checks each claim against the upstream's own call log.

Usage: python3 tests/mcp/gateway_client.py <config.json>

The config names the `airlock` binary, the policy file, the database, the upstream's command line, its call
log and its notes directory (see tests/tests/gateway/mcp_gateway.rs). Each check prints `ok` or `FAILED` with the
reason; the last line is `N passed, N failed`; the exit status is 0 only when every check passed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from harness import CALL_META, check, finish, gateway_command, Human, RawSession, report_of, run_pending, text_of


class UpstreamLog:
    """The upstream's own record of the calls that reached it."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        entries = [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]
        return [entry for entry in entries if tool is None or entry.get("tool") == tool]


def passing(passed: list[str] | None) -> list[str]:
    """The upstream sees only what is passed by name: `--env NAME` for each variable it is to read."""
    return [arg for name in (passed or []) for arg in ("--env", name)]


def gateway(config: dict[str, Any], db: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    command = gateway_command(config, *passing(list(env or {})), db=db)
    return StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **(env or {})})


async def main(config: dict[str, Any]) -> None:
    log = UpstreamLog(config["log"])
    notes = Path(config["notes"])
    human = Human()
    async with Client(gateway(config, config["db"]), elicitation_callback=human, read_timeout_seconds=30) as client:

        @check("tools/list offers the allowed upstream tools, never the denied one")
        async def _() -> None:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert sorted(tools) == ["flaky", "read_note", "rug_pull", "transfer", "write_note"], sorted(tools)
            assert tools["write_note"].description == "Write a note; replaces one with the same name."
            assert sorted(tools["write_note"].input_schema["properties"]) == ["name", "text"]

        @check("a denied tool is refused and never reaches the upstream")
        async def _() -> None:
            result = await client.call_tool("delete_everything", {})
            assert result.is_error is True, result
            assert report_of(result)["refusal"]["kind"] == "denied", report_of(result)
            assert log.calls("delete_everything") == [], log.calls()

        @check("an allowed call runs upstream; a ghost argument is stripped and never reaches it")
        async def _() -> None:
            result = await client.call_tool("write_note", {"name": "a.txt", "text": "hello", "sudo": True})
            assert result.is_error is False, result
            assert text_of(result) == "wrote 5 characters to a.txt", text_of(result)
            assert report_of(result)["stripped_arguments"] == ["sudo"], report_of(result)
            assert log.calls("write_note") == [{"tool": "write_note", "arguments": {"name": "a.txt", "text": "hello"}}]
            assert (notes / "a.txt").read_text() == "hello"

        @check("arguments the upstream's schema rejects are refused before the upstream sees them")
        async def _() -> None:
            result = await client.call_tool("write_note", {"name": "b.txt", "text": 5})
            assert result.is_error is True, result
            assert report_of(result)["refusal"]["kind"] == "invalid_arguments", report_of(result)
            assert "text" in text_of(result), text_of(result)
            assert len(log.calls("write_note")) == 1, log.calls()

        @check("an escalated call asks the client's human, and an approved call runs exactly once")
        async def _() -> None:
            human.will("accept", {"approve": True})
            result = await client.call_tool("transfer", {"amount": 500, "to": "acct_7"})
            assert result.is_error is False, result
            assert text_of(result) == "transferred 500 to acct_7", text_of(result)
            assert len(human.asked) == 1, human.asked
            assert "acct_7" in human.asked[0]["message"], human.asked[0]
            assert len(log.calls("transfer")) == 1, log.calls()
            assert (notes / "transfers.log").read_text() == "500 -> acct_7\n"

        @check("a call the human declines never reaches the upstream")
        async def _() -> None:
            human.will("decline")
            result = await client.call_tool("transfer", {"amount": 900, "to": "acct_8"})
            assert result.is_error is True, result
            assert report_of(result)["refusal"]["kind"] == "human_denied", report_of(result)
            assert len(log.calls("transfer")) == 1, log.calls()

        @check("an upstream error result leaves the effect ambiguous: the same effect is not run again")
        async def _() -> None:
            first = await client.call_tool("flaky", {"name": "c.txt"})
            assert first.is_error is True, first
            assert "the disk went away half-way" in text_of(first), text_of(first)
            again = await client.call_tool("flaky", {"name": "c.txt"})
            assert again.is_error is True, again
            assert report_of(again)["refusal"]["kind"] == "effect_unresolved", report_of(again)
            assert len(log.calls("flaky")) == 1, log.calls()

        @check("a pinned tool the upstream changes (a rug pull) is hidden and its calls refused")
        async def _() -> None:
            result = await client.call_tool("read_note", {"name": "a.txt"})
            assert text_of(result) == "hello", result
            assert len(log.calls("read_note")) == 1
            await client.call_tool("rug_pull", {})
            with anyio.fail_after(10):
                while "read_note" in {tool.name for tool in (await client.list_tools()).tools}:
                    await anyio.sleep(0.1)
            result = await client.call_tool("read_note", {"name": "a.txt"})
            assert result.is_error is True, result
            assert len(log.calls("read_note")) == 1, log.calls()

        await run_pending()

    # A second gateway, on its own database, in front of an upstream that changed before it started.
    rugged = str(Path(config["db"]).with_name("rugged.redb"))
    async with Client(gateway(config, rugged, {"RUG_PULL": "1"}), read_timeout_seconds=30) as client:

        @check("a pinned tool that changed before the gateway started is never offered nor forwarded")
        async def _() -> None:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "read_note" not in names and "write_note" in names, names
            before = len(log.calls("read_note"))
            result = await client.call_tool("read_note", {"name": "a.txt"})
            assert result.is_error is True, result
            assert len(log.calls("read_note")) == before, log.calls()

        await run_pending()

    @check("a replayed tools/call (same id, same arguments) after an approval asks again and does not run")
    async def _() -> None:
        await raw_replay(config, log)

    await run_pending()


def transfer_and_answer(session: RawSession, request_id: Any, answer: dict[str, Any]) -> dict[str, Any]:
    return session.call_and_answer(request_id, "transfer", {"amount": 7, "to": "acct_9"}, answer)[1]


async def raw_replay(config: dict[str, Any], log: UpstreamLog) -> None:
    def run() -> None:
        replay_db = str(Path(config["db"]).with_name("replay.redb"))
        session = RawSession(gateway_command(config, db=replay_db))
        try:
            session.initialize("replay")
            before = len(log.calls("transfer"))
            first = transfer_and_answer(session, 42, {"action": "accept", "content": {"approve": True}})
            assert first["result"]["isError"] is False, first
            assert len(log.calls("transfer")) == before + 1, log.calls()
            second = transfer_and_answer(session, 42, {"action": "decline"})
            assert second["result"]["isError"] is True, second
            assert second["result"]["_meta"][CALL_META]["refusal"]["kind"] == "human_denied", second
            assert len(log.calls("transfer")) == before + 1, log.calls()
        finally:
            session.close()

    await anyio.to_thread.run_sync(run)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} <config.json>")
    anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
    finish()
