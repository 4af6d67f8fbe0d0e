"""Drives the guarded MCP example server with the official Python MCP SDK (PyPI `mcp`), over stdio.

Usage: python3 tests/mcp/guarded_server.py <path to the mcp_server binary>

Each check prints `ok` or `FAILED` with the reason; the last line is `N passed, N failed`. The exit status is
0 only when every check passed. The replay of one JSON-RPC request id needs a client that reuses ids, which
no SDK does, so that check speaks raw JSON-RPC to a second server process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from harness import CALL_META, check, finish, Human, RawSession, report_of, run_pending, text_of

APPROVAL_META = "agent-airlock/approval"

def server(path: str) -> StdioServerParameters:
    return StdioServerParameters(command=path, args=[])


async def main(path: str) -> None:
    human = Human()
    async with Client(server(path), elicitation_callback=human, read_timeout_seconds=30) as client:

        @check("negotiates a handshake-era protocol version (elicitation needs one)")
        async def _() -> None:
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS, client.protocol_version
            assert client.server_capabilities.tools is not None

        @check("tools/list offers allowed and escalated tools, never the denied one")
        async def _() -> None:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert sorted(tools) == ["delete_file", "echo", "list_files"], sorted(tools)
            for tool in tools.values():
                schema = tool.input_schema
                Draft202012Validator.check_schema(schema)
                assert schema["type"] == "object", schema
                assert schema["additionalProperties"] is False, schema
                assert "$schema" not in schema and "title" not in schema, schema
                assert tool.description, tool
            assert tools["list_files"].input_schema["properties"] == {}
            assert tools["list_files"].input_schema["required"] == []
            echo = tools["echo"].input_schema
            assert sorted(echo["properties"]) == ["text", "times"], echo
            assert echo["required"] == ["text"], echo
            assert echo["properties"]["text"] == {"type": "string", "description": "The text to echo."}, echo
            assert echo["properties"]["times"]["description"] == "How many times to repeat it.", echo
            # The schema accepts what the tool accepts, and rejects ghosts.
            Draft202012Validator(echo).validate({"text": "hi", "times": 2})
            Draft202012Validator(echo).validate({"text": "hi", "times": None})
            assert not Draft202012Validator(echo).is_valid({"text": "hi", "as_root": True})
            delete = tools["delete_file"].input_schema
            assert delete["required"] == ["path"], delete
            assert delete["properties"]["path"]["type"] == "string", delete
            assert tools["delete_file"].description == "Delete a file in the workspace."

        @check("an allowed tool runs")
        async def _() -> None:
            result = await client.call_tool("list_files", {})
            assert result.is_error is False, result
            assert json.loads(text_of(result)) == ["notes.txt", "report.md", "todo.txt"]
            report = report_of(result)
            assert report["status"] == "success", report
            assert report["stripped_arguments"] == [], report
            assert "refusal" not in report, report
            assert human.asked == []

        @check("ghost arguments are stripped before the tool runs and reported in _meta")
        async def _() -> None:
            result = await client.call_tool("echo", {"text": "hi", "as_root": True, "sudo": "yes", "times": None})
            assert result.is_error is False, result
            assert json.loads(text_of(result)) == {"text": "hi", "times": None}, text_of(result)
            assert sorted(report_of(result)["stripped_arguments"]) == ["as_root", "sudo"], report_of(result)

        @check("invalid arguments are a tool error naming the field")
        async def _() -> None:
            result = await client.call_tool("echo", {"text": 5})
            assert result.is_error is True, result
            assert "`text`" in text_of(result), text_of(result)
            assert report_of(result)["refusal"]["kind"] == "invalid_arguments", report_of(result)

        @check("a denied tool is a tool error with the refusal and its hint, and runs nothing")
        async def _() -> None:
            result = await client.call_tool("admin_shell", {"command": "rm -rf /"})
            assert result.is_error is True, result
            text = text_of(result)
            assert text.startswith("tool `admin_shell` is not permitted in this deployment"), text
            assert "\nhint: do not retry this tool" in text, text
            report = report_of(result)
            assert report["refusal"] == {"kind": "denied", "rule": "admin_*"}, report
            assert report["hints"], report
            assert human.asked == []

        @check("an unknown tool is a tool error that lists nothing")
        async def _() -> None:
            result = await client.call_tool("admin_secret_tool", {})
            assert result.is_error is True, result
            assert report_of(result)["refusal"]["kind"] == "unknown_tool", report_of(result)
            assert "echo" not in text_of(result) and "delete_file" not in text_of(result)

        @check("an escalated call runs when the human approves through elicitation")
        async def _() -> None:
            human.will("accept", {"approve": True})
            result = await client.call_tool("delete_file", {"path": "notes.txt", "force": True})
            assert result.is_error is False, result
            assert text_of(result) == "deleted notes.txt", text_of(result)
            assert len(human.asked) == 1, human.asked
            asked = human.asked[0]
            assert asked["mode"] == "form", asked
            assert "`delete_file`" in asked["message"] and "deletes a file" in asked["message"], asked
            schema = asked["requestedSchema"]
            assert schema["required"] == ["approve"] and schema["properties"]["approve"]["type"] == "boolean"
            approval = asked["_meta"][APPROVAL_META]
            # The human approves exactly what will run: ghosts already stripped.
            assert approval["tool"] == "delete_file", approval
            assert approval["arguments"] == {"path": "notes.txt"}, approval
            assert approval["reasons"] == [{"rule": "attribute", "reason": "deletes a file"}], approval
            assert approval["thread_id"].startswith("mcp-"), approval
            report = report_of(result)
            assert report["tool_call_id"] == approval["tool_call_id"], (report, approval)
            assert report["stripped_arguments"] == ["force"], report
            files = json.loads(text_of(await client.call_tool("list_files", {})))
            assert "notes.txt" not in files, files

        @check("an escalated call the human declines is refused and runs nothing")
        async def _() -> None:
            human.asked.clear()
            human.will("decline")
            result = await client.call_tool("delete_file", {"path": "report.md"})
            assert result.is_error is True, result
            assert text_of(result).startswith("a human declined this call to `delete_file`"), text_of(result)
            assert report_of(result)["refusal"]["kind"] == "human_denied", report_of(result)
            assert len(human.asked) == 1
            files = json.loads(text_of(await client.call_tool("list_files", {})))
            assert "report.md" in files, files

        @check("an accepted form without `approve` ticked is a no, and the human's note reaches the model")
        async def _() -> None:
            human.will("accept", {"approve": False, "note": "keep the report"})
            result = await client.call_tool("delete_file", {"path": "report.md"})
            assert result.is_error is True, result
            assert "keep the report" in text_of(result), text_of(result)
            human.will("cancel")
            result = await client.call_tool("delete_file", {"path": "report.md"})
            assert result.is_error is True, result
            assert report_of(result)["refusal"]["kind"] == "human_denied", report_of(result)

        @check("an approval is never reused: the same call again asks again")
        async def _() -> None:
            human.asked.clear()
            human.will("accept", {"approve": True})
            first = await client.call_tool("delete_file", {"path": "report.md"})
            assert first.is_error is False, first
            human.will("decline")
            again = await client.call_tool("delete_file", {"path": "report.md"})
            assert len(human.asked) == 2, human.asked
            assert human.asked[0]["_meta"][APPROVAL_META]["arguments"] == {"path": "report.md"}
            assert human.asked[1]["_meta"][APPROVAL_META]["arguments"] == {"path": "report.md"}
            assert again.is_error is True, again
            assert report_of(again)["refusal"]["kind"] == "human_denied", report_of(again)

        @check("a call the client cancels while its approval waits never runs, though the human approves later")
        async def _() -> None:
            human.asked.clear()
            human.will("accept", {"approve": True}, after_seconds=2)
            timed_out = False
            try:
                # The SDK gives up after the read timeout and sends `notifications/cancelled`.
                await client.call_tool("delete_file", {"path": "todo.txt"}, read_timeout_seconds=0.5)
            except Exception:  # noqa: BLE001 - the SDK's timeout error; its type is the SDK's business
                timed_out = True
            assert timed_out, "the call did not time out"
            await anyio.sleep(3)  # the human's late yes has come and gone
            assert len(human.asked) == 1, human.asked
            files = json.loads(text_of(await client.call_tool("list_files", {})))
            assert "todo.txt" in files, files

        await run_pending()

    async with Client(server(path), read_timeout_seconds=30) as plain:

        @check("a client without elicitation gets a refusal for an escalated call, never a silent run")
        async def _() -> None:
            assert plain.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            result = await plain.call_tool("delete_file", {"path": "todo.txt"})
            assert result.is_error is True, result
            assert "needs a human's approval and none can be asked here" in text_of(result), text_of(result)
            assert report_of(result)["refusal"]["kind"] == "approval_unavailable", report_of(result)
            files = json.loads(text_of(await plain.call_tool("list_files", {})))
            assert "todo.txt" in files, files

        await run_pending()

    @check("a replayed JSON-RPC request (same id, same arguments) asks the human again")
    async def _() -> None:
        await raw_replay(path)

    await run_pending()


def call_and_answer(session: RawSession, request_id: Any, answer: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Deletes `todo.txt` through one tools/call, answering its elicitation; returns (elicitation, response)."""
    return session.call_and_answer(request_id, "delete_file", {"path": "todo.txt"}, answer)


async def raw_replay(path: str) -> None:
    def run() -> None:
        session = RawSession([path])
        try:
            assert session.initialize("replay")["protocolVersion"] == "2025-11-25"
            first_ask, first = call_and_answer(session, 42, {"action": "accept", "content": {"approve": True}})
            assert first["result"]["isError"] is False, first
            assert first["result"]["content"][0]["text"] == "deleted todo.txt", first
            assert first["result"]["_meta"][CALL_META]["tool_call_id"] == "42", first
            # The same id and arguments again: the earlier yes does not carry over.
            second_ask, second = call_and_answer(session, 42, {"action": "decline"})
            assert second_ask["id"] != first_ask["id"], (first_ask, second_ask)
            assert second["result"]["isError"] is True, second
            assert second["result"]["_meta"][CALL_META]["refusal"]["kind"] == "human_denied", second
            # A string id "42" is a different call id from the number 42.
            _, third = call_and_answer(session, "42", {"action": "decline"})
            assert third["result"]["_meta"][CALL_META]["tool_call_id"] == '"42"', third
        finally:
            session.close()

    await anyio.to_thread.run_sync(run)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} <path to the mcp_server binary>")
    anyio.run(main, sys.argv[1])
    finish()
