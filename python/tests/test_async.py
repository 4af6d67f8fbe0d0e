"""Async graphs: `ainvoke` through `awrap_tool_call`, with an async tool, refusals and an interrupt."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import RAN, SECRET, call, calls, graph, tool_messages
from langchain_core.messages import ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import InterruptApprovals, RedbApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_awrap_tool_call, airlock_wrap_tool_call


@tool
async def fetch(url: str) -> str:
    """Fetch a URL."""
    await asyncio.sleep(0)
    # The tool runs in the node's context: its config is there.
    thread = get_config()["configurable"].get("thread_id")
    RAN.append(("fetch", {"url": url}))
    return f"body of {url} in {thread} {SECRET}"


@tool
async def wipe(disk: str) -> str:
    """Wipe a disk."""
    RAN.append(("wipe", {"disk": disk}))
    return "wiped"


def app(policy, approvals=None, checkpointer=None):
    node = ToolNode(
        [fetch, wipe],
        wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals),
        awrap_tool_call=airlock_awrap_tool_call(policy, approvals=approvals),
    )
    return graph(node, checkpointer)


def test_ainvoke_admits_masks_and_refuses():
    graph_ = app(SecurityPolicy(denied_tools=["wipe"]), checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "a1"}}

    async def run():
        ok = await graph_.ainvoke({"messages": [call("fetch", {"url": "http://x", "extra": 1}, "c1")]}, cfg)
        refused = await graph_.ainvoke({"messages": [call("wipe", {"disk": "sda"}, "c2")]}, cfg)
        return ok["messages"][-1], refused["messages"][-1]

    ok, refused = asyncio.run(run())
    assert isinstance(ok, ToolMessage) and ok.status == "success", ok.content
    assert "in a1" in ok.content and SECRET not in ok.content
    assert ok.additional_kwargs["airlock"]["stripped_arguments"] == ["extra"]
    assert refused.status == "error"
    assert RAN == [("fetch", {"url": "http://x"})]


@tool
async def fetch_both(url: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list:
    """Fetch a URL and its mirror; returns a message for each and a state update."""
    RAN.append(("fetch_both", {"url": url}))
    return [
        ToolMessage(content=f"body of {url} {SECRET}", tool_call_id=tool_call_id),
        ToolMessage(content=f"mirror of {url} {SECRET}", tool_call_id="mirror"),
        Command(update={"messages": []}),
    ]


def test_an_async_tool_returning_a_list_has_each_message_masked():
    node = ToolNode([fetch_both], awrap_tool_call=airlock_awrap_tool_call(SecurityPolicy()))
    out = asyncio.run(graph(node).ainvoke({"messages": [call("fetch_both", {"url": "http://x"}, "b1")]}))
    messages = tool_messages(out)
    assert messages["b1"].content == "body of http://x [AWS_ACCESS_KEY]", messages["b1"].content
    assert messages["mirror"].content == "mirror of http://x [AWS_ACCESS_KEY]", messages["mirror"].content
    assert RAN == [("fetch_both", {"url": "http://x"})]


def test_an_async_interrupt_is_approved_and_resumed_once(tmp_path):
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    approvals = InterruptApprovals(bytes(range(32)), ledger)
    policy = SecurityPolicy(escalate_tools={"wipe": "destroys data"}, approval_ledger=ledger)
    graph_ = app(policy, approvals, InMemorySaver())
    cfg = {"configurable": {"thread_id": "a2"}}

    async def run():
        paused = await graph_.ainvoke({"messages": [call("wipe", {"disk": "sdb"})]}, cfg)
        assert RAN == []
        value = paused["__interrupt__"][0].value
        resume = approvals.approve(value)
        done = await graph_.ainvoke(Command(resume=resume), cfg)
        history = [s async for s in graph_.aget_state_history(cfg) if s.interrupts]
        replayed = await graph_.ainvoke(Command(resume=resume), history[0].config)
        return done["messages"][-1], replayed["messages"][-1]

    done, replayed = asyncio.run(run())
    assert done.status == "success", done.content
    assert replayed.status == "error"
    assert RAN == [("wipe", {"disk": "sdb"})]


@tool
def count_words(text: str) -> int:
    """Count the words of a text (a sync tool: LangGraph runs it in the loop's default executor)."""
    RAN.append(("count_words", {"text": text}))
    return len(text.split())


def test_a_sync_tool_runs_when_the_default_executor_has_one_thread():
    """The dispatcher waits for the tool in a thread while the tool runs; were that thread the loop's default
    executor's only one, the sync tool, queued behind it there, would never run."""
    node = ToolNode([count_words], awrap_tool_call=airlock_awrap_tool_call(SecurityPolicy()))
    graph_ = graph(node)
    outcome: dict = {}

    async def run():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(1))
        out = await asyncio.wait_for(graph_.ainvoke({"messages": [call("count_words", {"text": "a b c"})]}), 20)
        outcome["message"] = out["messages"][-1]

    # In a thread of its own, so that a deadlock fails this test instead of hanging it.
    runner = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    runner.start()
    runner.join(30)
    assert not runner.is_alive() and "message" in outcome, "the call never completed"
    message = outcome["message"]
    assert message.status == "success" and message.content == "3", message
    assert RAN == [("count_words", {"text": "a b c"})]


@pytest.mark.parametrize("wipe_first", [False, True], ids=["plain-first", "escalated-first"])
def test_an_async_message_with_a_plain_and_an_escalated_call_resumes_the_escalated_one(tmp_path, wipe_first):
    """As test_approvals.py's sync test: in one task, only the escalated call takes the approval."""
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    approvals = InterruptApprovals(bytes(range(32)), ledger)
    policy = SecurityPolicy(escalate_tools={"wipe": "destroys data"}, approval_ledger=ledger)
    graph_ = app(policy, approvals, InMemorySaver())
    cfg = {"configurable": {"thread_id": "a3"}}
    named = [("fetch", {"url": "http://x"}, "plain-1"), ("wipe", {"disk": "sdc"}, "escalated-1")]
    message = calls(*(reversed(named) if wipe_first else named))

    async def run():
        paused = await graph_.ainvoke({"messages": [message]}, cfg)
        (pending,) = paused["__interrupt__"]
        assert ("wipe", {"disk": "sdc"}) not in RAN
        return await graph_.ainvoke(Command(resume=approvals.approve(pending.value)), cfg)

    out = asyncio.run(run())
    assert "__interrupt__" not in out, out["__interrupt__"]
    assert RAN.count(("wipe", {"disk": "sdc"})) == 1, RAN
    messages = tool_messages(out)
    assert messages["plain-1"].status == "success" and "body of http://x" in messages["plain-1"].content
    assert messages["escalated-1"].status == "success" and messages["escalated-1"].content == "wiped"
