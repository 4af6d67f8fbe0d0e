"""What the Python MCP client scripts under tests/mcp share: a list of named async checks run in order (each
prints `ok` or `FAILED` with its traceback, the last line is `N passed, N failed`, and the exit status is 0
only when every check passed), a scripted human who answers elicitations, and readers of a tool result.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types

CALL_META = "agent-airlock/call"

_pending: list[tuple[str, Callable[[], Awaitable[None]]]] = []
_counts = {"passed": 0, "failed": 0}


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
