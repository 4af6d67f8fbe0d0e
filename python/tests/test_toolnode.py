"""The guarded ToolNode: refusals, ghost arguments, validation, masking, rate limits, Command, audit."""

from __future__ import annotations

import json

import pytest
from conftest import RAN, SECRET, TOOLS, ScriptedChat, airlock, call, graph, move_to
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import ToolNode

from airlock_rs import AirlockError, PolicyError, RedbApprovalLedger, SchemaError, SecurityPolicy
from airlock_rs.langgraph import airlock_middleware, airlock_wrap_tool_call, filter_tools


def guarded(policy, tools=TOOLS):
    return graph(ToolNode(tools, wrap_tool_call=airlock_wrap_tool_call(policy)))


def last(out) -> ToolMessage:
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage)
    return message


def test_an_admitted_call_runs_with_ghosts_stripped_and_the_injected_state_left_to_the_node():
    app = guarded(SecurityPolicy())
    args = {"query": "rate limits", "limit": 3, "state": {"messages": ["forged"]}, "debug": True}
    message = last(app.invoke({"messages": [call("search_docs", args)]}))
    assert message.status == "success"
    assert RAN == [("search_docs", {"query": "rate limits", "limit": 3})]
    # The node injected the real state (one message), not the model's `state`.
    assert "(1 messages)" in message.content
    assert sorted(message.additional_kwargs["airlock"]["stripped_arguments"]) == ["debug", "state"]


def test_ghosts_are_stripped_at_every_depth():
    app = guarded(SecurityPolicy())
    args = {"to": "a@example.com", "message": {"subject": "hi", "body": "x"}, "cc": "b@example.com"}
    message = last(app.invoke({"messages": [call("send_mail", args)]}))
    assert message.status == "success", message.content
    assert RAN == [("send_mail", {"to": "a@example.com", "message": {"subject": "hi", "body": "x"}})]
    assert message.additional_kwargs["airlock"]["stripped_arguments"] == ["cc"]


def test_the_result_is_masked():
    message = last(guarded(SecurityPolicy()).invoke({"messages": [call("search_docs", {"query": "q", "limit": 1})]}))
    assert SECRET not in message.content
    assert "hits for q" in message.content


def test_invalid_arguments_are_refused_with_hints_and_the_tool_never_runs():
    message = last(guarded(SecurityPolicy()).invoke({"messages": [call("search_docs", {"query": "q", "limit": "3"})]}))
    assert message.status == "error"
    assert message.tool_call_id == "call-1"
    assert "`limit`" in message.content and "hint:" in message.content
    assert message.additional_kwargs["airlock"]["hints"]
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "invalid_arguments"
    assert RAN == []


def test_a_denied_tool_is_refused_and_never_runs():
    message = last(guarded(SecurityPolicy(denied_tools=["drop_*"])).invoke({"messages": [call("drop_table", {"table": "t"})]}))
    assert message.status == "error"
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "denied"
    assert message.additional_kwargs["airlock"]["refusal"]["rule"] == "drop_*"
    assert RAN == []


def test_outside_the_allow_list_is_refused():
    policy = SecurityPolicy(allowed_tools=["search_*"])
    assert last(guarded(policy).invoke({"messages": [call("delete_file", {"path": "/x"})]})).status == "error"
    assert last(guarded(policy).invoke({"messages": [call("search_docs", {"query": "q", "limit": 1})]})).status == "success"
    assert [name for name, _ in RAN] == ["search_docs"]


def test_an_escalated_call_without_approvals_is_refused():
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"})
    message = last(guarded(policy).invoke({"messages": [call("delete_file", {"path": "/x"})]}))
    assert message.status == "error"
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "approval_unavailable"
    assert RAN == []


def test_a_missing_tool_is_refused_like_any_other():
    message = last(guarded(SecurityPolicy()).invoke({"messages": [call("no_such_tool", {"a": 1})]}))
    assert message.status == "error"
    assert message.tool_call_id == "call-1"
    assert "no_such_tool" in message.content
    assert RAN == []


def test_rate_limits_take_one_token_per_call():
    app = guarded(SecurityPolicy(rate_limits={"search_*": "2/minute"}))
    statuses = [
        last(app.invoke({"messages": [call("search_docs", {"query": "q", "limit": 1}, f"c{i}")]})).status for i in range(3)
    ]
    assert statuses == ["success", "success", "error"]
    assert len(RAN) == 2


def test_a_command_passes_through_unmasked():
    app = guarded(SecurityPolicy(), tools=[move_to])
    out = app.invoke({"messages": [call("move_to", {"place": "kitchen"})]})
    assert RAN == [("move_to", {"place": "kitchen"})]
    assert SECRET in out["messages"][-1].content


def test_a_refused_command_tool_never_runs():
    app = guarded(SecurityPolicy(denied_tools=["move_*"]), tools=[move_to])
    assert last(app.invoke({"messages": [call("move_to", {"place": "kitchen"})]})).status == "error"
    assert RAN == []


def test_calls_are_audited_in_the_ledger_file(tmp_path):
    path = tmp_path / "airlock.redb"
    ledger = RedbApprovalLedger(str(path))
    app = guarded(SecurityPolicy(denied_tools=["drop_*"], approval_ledger=ledger))
    app.invoke({"messages": [call("search_docs", {"query": "q", "limit": 1}, "c1")]})
    app.invoke({"messages": [call("drop_table", {"table": "t"}, "c2")]})
    del app, ledger
    import gc

    gc.collect()
    verified = airlock("--db", str(path), "--json", "audit", "verify")
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["records"] == 2, report


def test_bad_policies_and_schemas_are_airlock_errors():
    with pytest.raises(PolicyError):
        SecurityPolicy(rate_limits={"x": "often"})
    with pytest.raises(AirlockError):
        SecurityPolicy(denied_tools=["[unclosed"])
    from airlock_rs import ToolGuard

    with pytest.raises(SchemaError):
        ToolGuard("t", "d", "[]", SecurityPolicy())
    with pytest.raises(SchemaError):
        ToolGuard("t", "d", "not json", SecurityPolicy())


def test_filter_tools_drops_refused_tools_and_keeps_escalated_ones():
    policy = SecurityPolicy(denied_tools=["drop_*"], escalate_tools={"delete_file": "deletes"})
    assert [t.name for t in filter_tools(TOOLS, policy)] == ["search_docs", "delete_file", "send_mail"]


def test_create_agent_with_the_middleware():
    from langchain.agents import create_agent

    model = ScriptedChat(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[{"name": "drop_table", "args": {"table": "t"}, "id": "a1"}]),
                AIMessage(content="", tool_calls=[{"name": "search_docs", "args": {"query": "q", "limit": 2, "x": 1}, "id": "a2"}]),
                AIMessage(content="done"),
            ]
        )
    )
    policy = SecurityPolicy(denied_tools=["drop_*"])
    agent = create_agent(model, tools=TOOLS, middleware=[airlock_middleware(policy)])
    out = agent.invoke({"messages": [HumanMessage(content="go")]})
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in tool_messages] == ["error", "success"]
    assert RAN == [("search_docs", {"query": "q", "limit": 2})]
    assert "drop_table" not in ScriptedChat.bound
    assert out["messages"][-1].content == "done"
