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


def test_tool_guard_passes_dicts_across_the_ffi_without_json_text():
    """`ToolGuard.dispatch` takes the arguments as Python objects and hands the admitted ones back as the same
    object when the gates changed nothing (a copy when they stripped something); the result comes back as it
    is, masked; values JSON has no form for are refused, never passed through."""
    from airlock_rs import ToolGuard

    schema = json.dumps(
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "ratio": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
                "note": {"type": ["string", "null"]},
            },
            "required": ["query", "limit"],
        }
    )
    guard = ToolGuard("search_docs", "Search.", schema, SecurityPolicy())
    seen = []

    def run(admitted):
        seen.append(admitted)
        return f"found {admitted['query']} key {SECRET}"

    args = {"query": "q", "limit": 2**40, "ratio": 0.5, "tags": ("a", "b"), "opts": {"deep": False}, "note": None}
    out = guard.dispatch("c1", args, run)
    assert out["kind"] == "message" and out["status"] == "success", out
    assert SECRET not in out["content"] and "found q" in out["content"]
    assert seen[0] == {"query": "q", "limit": 2**40, "ratio": 0.5, "tags": ["a", "b"], "opts": {"deep": False}}

    plain = {"query": "q", "limit": 1}
    assert guard.dispatch("c2", plain, run)["status"] == "success"
    assert seen[-1] is plain, "unchanged arguments reach the callback as the same object"

    ghost = {"query": "q", "limit": 1, "opts": {"deep": True, "sneaky": 1}}
    out = guard.dispatch("c3", ghost, run)
    assert out["stripped_arguments"] == ["opts.sneaky"], out
    assert seen[-1] is not ghost and seen[-1] == {"query": "q", "limit": 1, "opts": {"deep": True}}
    assert ghost["opts"] == {"deep": True, "sneaky": 1}, "the caller's dict is never changed"

    # JSON text still works; the callback gets a dict.
    assert guard.dispatch("c4", '{"query": "t", "limit": 1}', run)["status"] == "success"
    assert seen[-1] == {"query": "t", "limit": 1}

    # Arguments JSON has no form for are refused, as arguments that are not JSON text are.
    runs = len(seen)
    nested: dict = {"query": "q", "limit": 1}
    deep = nested
    for _ in range(200):
        deep["opts"] = {}
        deep = deep["opts"]
    bad = [{"query": "q", "limit": 1, "ratio": float("nan")}, {"query": "q", "limit": 1, "opts": {1.5j: 1}}, nested]
    for n, arguments in enumerate(bad):
        out = guard.dispatch(f"c5-{n}", arguments, run)
        assert out["status"] == "error" and out["refusal"]["kind"] == "malformed_arguments", out
    assert len(seen) == runs, "a call whose arguments cannot be read never runs"

    # Objects JSON has no form for are recorded as their `str` (as `json.dumps(default=str)` does).
    out = guard.dispatch("c7", {"query": "q", "limit": 1}, lambda admitted: [{"type": "text", "text": object}])
    assert out["status"] == "success" and "class 'object'" in out["content"], out


def test_the_cheap_request_copy_is_what_override_makes():
    """The wrapper copies a request with the admitted arguments without `ToolCallRequest.override` (which
    costs a `dataclasses.replace` through a warning-checking `__setattr__`): the copy must equal what
    `override` makes, leave the original alone, and share every other field."""
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from airlock_rs import langgraph as glue

    assert glue._PLAIN_REQUEST, "this LangGraph's ToolCallRequest is the plain dataclass the copy relies on"
    tool_call = {"name": "search_docs", "args": {"query": "q", "limit": 1, "x": 1}, "id": "c1", "type": "tool_call"}
    request = ToolCallRequest(tool_call=tool_call, tool=TOOLS[0], state={"messages": []}, runtime=None)
    call = dict(tool_call, args={"query": "q", "limit": 1})
    copied = glue._with_tool_call(request, call)
    assert type(copied) is ToolCallRequest
    assert copied == request.override(tool_call=call)
    assert copied is not request and request.tool_call is tool_call and request.tool_call["args"]["x"] == 1
    assert copied.tool is request.tool and copied.state is request.state and copied.runtime is request.runtime

    class Custom(ToolCallRequest):
        pass

    custom = Custom(tool_call=tool_call, tool=TOOLS[0], state={}, runtime=None)
    assert type(glue._with_tool_call(custom, call)) is Custom, "a subclass goes through override"
