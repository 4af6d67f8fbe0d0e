"""Shared pieces of the airlock_rs tests: tools, a graph around a guarded ToolNode, a scripted chat model.

Run by tests/tests/python/python_langgraph.rs (`cargo test`), which installs the wheel into a pinned virtual
environment and sets AIRLOCK_CLI to the `airlock` binary it built. No model is downloaded: the chat model
replays the tool calls a test scripts.
"""

from __future__ import annotations

import os
import subprocess
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.types import Command

#: Every tool body appends here, so a test can tell whether `execute` ran.
RAN: list[tuple[str, dict]] = []

#: A secret shaped like an AWS access key id: what the default masking must hide in a result.
SECRET = "AKIAIOSFODNN7QK4RW2Z"


@pytest.fixture(autouse=True)
def _clear_ran():
    RAN.clear()
    yield


@tool
def search_docs(query: str, limit: int, state: Annotated[dict, InjectedState]) -> str:
    """Search the documentation."""
    RAN.append(("search_docs", {"query": query, "limit": limit}))
    return f"{limit} hits for {query} ({len(state['messages'])} messages); key {SECRET}"


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    RAN.append(("delete_file", {"path": path}))
    return f"deleted {path}"


@tool
def drop_table(table: str) -> str:
    """Drop a table."""
    RAN.append(("drop_table", {"table": table}))
    return "dropped"


@tool
def move_to(place: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
    """Move the agent somewhere; returns a state update."""
    RAN.append(("move_to", {"place": place}))
    return Command(update={"messages": [ToolMessage(content=f"at {place} {SECRET}", tool_call_id=tool_call_id)]})


@tool
def send_mail(to: str, message: dict) -> str:
    """Send a mail; `message` has a subject and a body."""
    RAN.append(("send_mail", {"to": to, "message": message}))
    return "sent"


TOOLS = [search_docs, delete_file, drop_table, send_mail]


def call(name: str, args: dict, call_id: str = "call-1") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def calls(*named: tuple[str, dict, str]) -> AIMessage:
    """One message calling several tools: `(name, args, call_id)` each, in order."""
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in named])


def tool_messages(out) -> dict[str, ToolMessage]:
    """The tool messages of a graph's output, by call id."""
    return {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}


def graph(node: ToolNode, checkpointer: Any = None):
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    return builder.compile(checkpointer=checkpointer)


class ScriptedChat(GenericFakeChatModel):
    """A chat model that answers with the messages it was given, one per turn, and accepts `bind_tools`."""

    bound: list = []

    def bind_tools(self, tools, **kwargs):  # noqa: D401 - the scripted model ignores the tools
        type(self).bound = [getattr(t, "name", t) for t in tools]
        return self


def airlock(*args: str) -> subprocess.CompletedProcess:
    cli = os.environ["AIRLOCK_CLI"]
    return subprocess.run([cli, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


def signing_key(directory, name: str) -> str:
    """The signing key file of operator `name` in `directory`, made with `airlock operators add`."""
    key = os.path.join(str(directory), f"{name}.key")
    if not os.path.exists(key):
        added = airlock(
            "operators", "add", name, "--key-out", key, "--operators", os.path.join(str(directory), "operators.toml")
        )
        assert added.returncode == 0, added.stderr
    return key
