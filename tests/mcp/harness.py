"""What the Python MCP client scripts under tests/mcp share: a list of named async checks run in order (each
prints `ok` or `FAILED` with its traceback, the last line is `N passed, N failed`, and the exit status is 0
only when every check passed), a scripted human who answers elicitations, readers of a tool result, a
raw JSON-RPC session for requests no SDK would send (a replayed call id), the gateway's command line from a
test's config, and what reached the upstream.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types

CALL_META = "agent-airlock/call"

_pending: list[tuple[str, Callable[[], Awaitable[None]]]] = []
_counts = {"passed": 0, "failed": 0}


def gateway_command(config: dict[str, Any], *options: str, db: str | None = None) -> list[str]:
    """`airlock --db DB mcp --policy POLICY [OPTIONS] -- UPSTREAM...` from the config the Rust test wrote (its
    `airlock`, `db`, `policy` and `upstream`), with another database where `db` is given."""
    database = config["db"] if db is None else db
    return [config["airlock"], "--db", database, "mcp", "--policy", config["policy"], *options, "--", *config["upstream"]]


def reached(log: Path) -> list[dict[str, Any]]:
    """Every request the upstream logged (its call log): tool calls, resource reads, prompt gets."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def check(name: str) -> Callable[[Callable[[], Awaitable[None]]], None]:
    """Registers a check; `run_pending` runs the registered ones in order."""

    def register(fn: Callable[[], Awaitable[None]]) -> None:
        _pending.append((name, fn))

    return register


async def run_pending() -> None:
    """Runs every registered check, each within 60 seconds, counting and reporting each outcome."""
    while _pending:
        name, fn = _pending.pop(0)
        try:
            with anyio.fail_after(60):
                await fn()
        except Exception:  # noqa: BLE001 - every failure is reported, then counted
            _counts["failed"] += 1
            print(f"FAILED {name}\n{traceback.format_exc()}", flush=True)
        else:
            _counts["passed"] += 1
            print(f"ok     {name}", flush=True)


def finish() -> None:
    """Prints the summary line and exits: 0 only when at least one check ran and none failed."""
    passed, failed = _counts["passed"], _counts["failed"]
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(0 if failed == 0 and passed > 0 else 1)


class Human:
    """The client's human: answers approval elicitations from a script, and remembers what was asked."""

    def __init__(self) -> None:
        self.answers: list[tuple[types.ElicitResult, float]] = []
        self.asked: list[dict[str, Any]] = []

    def will(self, action: str, content: dict[str, Any] | None = None, after_seconds: float = 0) -> None:
        self.answers.append((types.ElicitResult(action=action, content=content), after_seconds))

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        self.asked.append(params.model_dump(by_alias=True, exclude_none=True))
        if not self.answers:
            return types.ErrorData(code=types.INVALID_REQUEST, message="the test scripted no answer")
        answer, after_seconds = self.answers.pop(0)
        if after_seconds:
            # A human who answers late, whatever happened to the call meanwhile.
            with anyio.CancelScope(shield=True):
                await anyio.sleep(after_seconds)
        return answer


def text_of(result: types.CallToolResult) -> str:
    """The result's one text block."""
    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert block.type == "text", block
    return block.text


def report_of(result: types.CallToolResult) -> dict[str, Any]:
    """What the guard says about the call in the result's `_meta`."""
    meta = result.model_dump(by_alias=True).get("_meta") or {}
    assert CALL_META in meta, f"no `{CALL_META}` in the result's _meta: {meta}"
    return meta[CALL_META]


class RawSession:
    """A JSON-RPC peer over a server process's stdio, for requests no SDK would send."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The next request or response (notifications are skipped)."""
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            assert line, "the server closed its stdout"
            message = json.loads(line)
            if message.get("method", "").startswith("notifications/"):
                continue
            return message

    def initialize(self, client_name: str) -> dict[str, Any]:
        """The handshake, as a client that can answer elicitations; returns the server's result."""
        self.send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": client_name, "version": "0"},
                },
            }
        )
        response = self.receive()
        assert "result" in response, response
        self.send({"method": "notifications/initialized"})
        return response["result"]

    def call_and_answer(
        self, request_id: Any, tool: str, arguments: dict[str, Any], answer: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Sends one tools/call, answers the elicitation it triggers, and returns (elicitation, response)."""
        self.send({"id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        elicitation = self.receive()
        assert elicitation.get("method") == "elicitation/create", f"expected an elicitation, got {elicitation}"
        self.send({"id": elicitation["id"], "result": answer})
        response = self.receive()
        assert response.get("id") == request_id, response
        return elicitation, response

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
