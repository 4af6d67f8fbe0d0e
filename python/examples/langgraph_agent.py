"""An example graph: a scripted agent turn through a guarded ToolNode, then an escalated call paused with
interrupt(), approved, and resumed (README, "LangGraph (Python)"). No model is downloaded: the tool calls
are scripted.

    python python/examples/langgraph_agent.py
"""

from __future__ import annotations

import os
import tempfile
from typing import Annotated

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.types import Command

from airlock_rs import InterruptApprovals, RedbApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_awrap_tool_call, airlock_wrap_tool_call


@tool
def search_docs(query: str, limit: int, state: Annotated[dict, InjectedState]) -> str:
    """Search the documentation."""
    return f"{limit} hits for {query!r}; the key is AKIAIOSFODNN7QK4RW2Z"


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def drop_table(table: str) -> str:
    """Drop a table."""
    return f"dropped {table}"


def main() -> None:
    folder = tempfile.mkdtemp()
    ledger = RedbApprovalLedger(os.path.join(folder, "airlock.redb"))
    policy = SecurityPolicy(
        denied_tools=["drop_*"],
        escalate_tools={"delete_file": "deletes a file"},
        rate_limits={"search_*": "30/minute"},
        approval_ledger=ledger,
    )
    # The approval key lives outside the checkpoints (here: random per run).
    approvals = InterruptApprovals(os.urandom(32), ledger)
    tools = [search_docs, delete_file, drop_table]
    node = ToolNode(
        tools,
        wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals),
        awrap_tool_call=airlock_awrap_tool_call(policy, approvals=approvals),
    )
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "demo"}}

    turn = AIMessage(
        content="",
        tool_calls=[
            {"name": "search_docs", "args": {"query": "rate limits", "limit": 3, "debug": True}, "id": "c1"},
            {"name": "search_docs", "args": {"query": "rate limits", "limit": "three"}, "id": "c2"},
            {"name": "drop_table", "args": {"table": "users"}, "id": "c3"},
        ],
    )
    for message in graph.invoke({"messages": [turn]}, config)["messages"][1:]:
        print(f"{message.tool_call_id}: [{message.status}] {message.content}")

    paused = graph.invoke(
        {"messages": [AIMessage(content="", tool_calls=[{"name": "delete_file", "args": {"path": "/tmp/x"}, "id": "c4"}])]},
        config,
    )
    request = paused["__interrupt__"][0].value
    print(f"c4: paused for approval: {request['airlock_approval']['reason']} ({request['airlock_approval']['tool']})")
    resumed = graph.invoke(Command(resume=approvals.approve(request, approver="ops@example")), config)
    last = resumed["messages"][-1]
    print(f"c4: [{last.status}] {last.content}")


if __name__ == "__main__":
    main()
