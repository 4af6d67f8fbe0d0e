"""The guarded ToolNode: refusals, ghost arguments, validation, masking, rate limits, Command, audit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
from conftest import RAN, SECRET, TOOLS, ScriptedChat, airlock, call, graph, move_to, tool_messages
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.types import Command
from pydantic import BaseModel

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
    assert "no_such_tool" in message.content and "hint:" in message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "unknown_tool"
    assert RAN == []



def test_a_missing_tool_is_audited_and_its_name_echoed_escaped_and_cut(tmp_path):
    """The model's name for a tool the node lacks is its text, not ours: echoed as every refusal echoes model
    text (control and bidirectional characters escaped, at most 64 characters), and the refusal recorded."""
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    name = "evil\u202e\x1b[2J" + "x" * 500
    message = last(guarded(SecurityPolicy(approval_ledger=ledger)).invoke({"messages": [call(name, {"a": 1})]}))
    assert message.status == "error" and message.additional_kwargs["airlock"]["refusal"]["kind"] == "unknown_tool"
    assert "\u202e" not in message.content and "\x1b" not in message.content, message.content
    assert "evil\\u{202e}" in message.content and "x" * 100 not in message.content, message.content
    refused = [r for r in ledger.audit_records() if r["tool_call_id"] == "call-1"]
    assert len(refused) == 1, ledger.audit_records()
    assert RAN == []


def test_the_audit_log_can_be_an_append_only_file_of_its_own(tmp_path):
    """`audit_file=`: every call's record goes to an append-only file, which `airlock audit verify --file` reads
    while the ledger still has it open."""
    log = tmp_path / "audit.log"
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"), audit_file=str(log))
    app = guarded(SecurityPolicy(approval_ledger=ledger))
    ran = last(app.invoke({"messages": [call("search_docs", {"query": "q", "limit": 1}, "a1")]}))
    refused = last(app.invoke({"messages": [call("no_such_tool", {}, "a2")]}))
    assert (ran.status, refused.status) == ("success", "error")
    assert [(r["tool_call_id"], r["outcome"]["kind"]) for r in ledger.audit_records()] == [
        ("a1", "executed"),
        ("a2", "refused"),
    ]
    verified = airlock("--json", "audit", "verify", "--file", str(log))
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["records"] == 2
    # Another ledger (another process's, say) naming the same file appends to the same chain.
    other = RedbApprovalLedger(str(tmp_path / "other.redb"), audit_file=str(log))
    other_app = guarded(SecurityPolicy(approval_ledger=other))
    assert last(other_app.invoke({"messages": [call("search_docs", {"query": "q", "limit": 1}, "b1")]})).status == "success"
    assert last(app.invoke({"messages": [call("search_docs", {"query": "q", "limit": 1}, "a3")]})).status == "success"
    assert [r["tool_call_id"] for r in ledger.audit_records()] == ["a1", "a2", "b1", "a3"]
    verified = airlock("--json", "audit", "verify", "--file", str(log))
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["records"] == 4


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


@tool
def two_notes(topic: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list:
    """Write two notes; returns both messages."""
    RAN.append(("two_notes", {"topic": topic}))
    return [
        ToolMessage(content=f"first on {topic} {SECRET}", tool_call_id=tool_call_id),
        ToolMessage(content=[{"type": "text", "text": f"second {SECRET}"}], tool_call_id="aside"),
    ]


@tool
def note_and_move(topic: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list:
    """Write a note and update the state; returns the message and a command."""
    RAN.append(("note_and_move", {"topic": topic}))
    return [
        ToolMessage(content=f"noted {topic} {SECRET}", tool_call_id=tool_call_id),
        Command(update={"messages": [AIMessage(content=f"moved {SECRET}")]}),
    ]


def test_a_list_of_messages_and_commands_is_masked_message_by_message_and_audited(tmp_path):
    """A tool may return a list of messages and commands: each message is masked (a command passes through as
    one alone does), and the audit records the messages' masked contents as one array, never nothing; the node
    never fails after the tool ran."""
    from airlock_rs import ToolGuard

    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    policy = SecurityPolicy(approval_ledger=ledger)
    app = graph(ToolNode([two_notes, note_and_move], wrap_tool_call=airlock_wrap_tool_call(policy)))

    out = app.invoke({"messages": [call("two_notes", {"topic": "x"}, "n1")]})
    notes = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in notes] == ["n1", "aside"]
    assert notes[0].content == "first on x [AWS_ACCESS_KEY]", notes[0].content
    assert notes[1].content == [{"type": "text", "text": "second [AWS_ACCESS_KEY]"}], notes[1].content
    assert all(m.additional_kwargs["airlock"] == {"stripped_arguments": []} for m in notes)

    out = app.invoke({"messages": [call("note_and_move", {"topic": "y"}, "n2")]})
    assert SECRET not in str(tool_messages(out)["n2"].content), out["messages"]
    assert tool_messages(out)["n2"].content == "noted y [AWS_ACCESS_KEY]"
    # The command is the tool's, untouched.
    assert f"moved {SECRET}" in [m.content for m in out["messages"]]
    assert RAN == [("two_notes", {"topic": "x"}), ("note_and_move", {"topic": "y"})]

    # What the audit log committed to is the array of masked contents: the digest a tool returning that array
    # gets.
    schema = json.dumps({"type": "object", "properties": {}})
    same = ToolGuard("same", "d", schema, policy)
    same.dispatch("s1", {}, lambda _: [f"first on x {SECRET}", [{"type": "text", "text": f"second {SECRET}"}]])
    same.dispatch("s2", {}, lambda _: [f"noted y {SECRET}"])
    results = {r["tool_call_id"]: r["result"] for r in ledger.audit_records()}
    assert results["n1"] is not None and results["n1"] == results["s1"], results
    assert results["n2"] is not None and results["n2"] == results["s2"], results


def test_a_list_with_an_error_message_is_a_failure_masked_like_one():
    @tool
    def half_done(tool_call_id: Annotated[str, InjectedToolCallId]) -> list:
        """Fails half way."""
        return [ToolMessage(content=f"failed with {SECRET}", tool_call_id=tool_call_id, status="error")]

    app = graph(ToolNode([half_done], wrap_tool_call=airlock_wrap_tool_call(SecurityPolicy())))
    message = last(app.invoke({"messages": [call("half_done", {}, "h1")]}))
    assert message.status == "error" and message.content == "failed with [AWS_ACCESS_KEY]", message.content


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


def test_filter_tools_reads_the_name_of_tools_given_as_dicts():
    """A provider's own tool (run by the provider: no node sees its calls) and an OpenAI-style function are
    dicts; a denied one must not be offered."""
    web_search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    drop = {"type": "function", "function": {"name": "drop_table", "parameters": {"type": "object"}}}
    fetch = {"type": "function", "function": {"name": "fetch_page", "parameters": {"type": "object"}}}
    policy = SecurityPolicy(denied_tools=["web_search", "drop_*"])
    offered = filter_tools([web_search, drop, fetch, *TOOLS], policy)
    assert offered == [fetch, *[t for t in TOOLS if t.name != "drop_table"]], offered


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


def test_a_denied_guard_refuses_whatever_the_arguments_are():
    """A tool the policy denies is refused before any gate reads its arguments (the guard then neither converts a
    dict nor has text parsed; the Rust tests count what such a refusal reads): every form of arguments, readable
    or not, gets the same refusal, and the callback never runs."""
    from airlock_rs import ToolGuard

    schema = json.dumps({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    guard = ToolGuard("drop_table", "d", schema, SecurityPolicy(denied_tools=["drop_*"]))
    ran = []
    deep: dict = {}
    inner = deep
    for _ in range(500):
        inner["q"] = {}
        inner = inner["q"]
    outs = [
        guard.dispatch("c", arguments, ran.append)
        for arguments in ({"q": "x"}, {"q": float("nan")}, deep, '{"q": "x"}', '{"q": ', "", object())
    ]
    assert ran == [], "a denied call never runs"
    assert all(out == outs[0] for out in outs), outs
    assert outs[0]["status"] == "error" and outs[0]["refusal"]["kind"] == "denied", outs[0]
    assert "drop_table" in outs[0]["content"], outs[0]


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


class Recipient(BaseModel):
    address: str
    name: str


@tool
def notify(recipients: list[Recipient], note: str, state: Annotated[dict, InjectedState]) -> str:
    """Notify people."""
    RAN.append(("notify", {"recipients": [r.model_dump() for r in recipients], "note": note}))
    return f"notified {len(recipients)} ({len(state['messages'])} messages)"


def test_ghosts_inside_nested_models_and_lists_are_stripped_and_the_injected_state_is_the_nodes():
    app = guarded(SecurityPolicy(), tools=[notify])
    args = {
        "recipients": [{"address": "a@example.com", "name": "A", "bcc": "evil@example.com"}],
        "note": "hi",
        "state": {"messages": ["forged", "forged"]},
        "debug": True,
    }
    message = last(app.invoke({"messages": [call("notify", args)]}))
    assert message.status == "success", message.content
    assert RAN == [("notify", {"recipients": [{"address": "a@example.com", "name": "A"}], "note": "hi"})]
    assert "(1 messages)" in message.content, "the node injected the real state, not the model's"
    stripped = message.additional_kwargs["airlock"]["stripped_arguments"]
    assert "debug" in stripped and "state" in stripped, stripped
    assert any("bcc" in path and "recipients" in path for path in stripped), stripped
    assert len(stripped) == 3, stripped


@tool
def flaky(x: int) -> str:
    """Fails."""
    RAN.append(("flaky", {"x": x}))
    raise ValueError("boom")


def test_a_tool_that_raises_is_the_tools_own_exception_never_a_panic(tmp_path):
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    policy = SecurityPolicy(approval_ledger=ledger)
    # The node's own error handling sees the tool's exception, as without the guard.
    handled = graph(ToolNode([flaky], wrap_tool_call=airlock_wrap_tool_call(policy), handle_tool_errors=True))
    message = last(handled.invoke({"messages": [call("flaky", {"x": 1}, "f1")]}))
    assert message.status == "error" and "boom" in message.content, message.content
    unhandled = graph(ToolNode([flaky], wrap_tool_call=airlock_wrap_tool_call(policy), handle_tool_errors=False))
    with pytest.raises(ValueError, match="boom"):
        unhandled.invoke({"messages": [call("flaky", {"x": 2}, "f2")]})
    assert RAN == [("flaky", {"x": 1}), ("flaky", {"x": 2})]
    failed = [r for r in ledger.audit_records() if r["outcome"]["kind"] == "failed"]
    assert len(failed) == 2, ledger.audit_records()


def test_nothing_python_passes_makes_the_rust_side_panic():
    """Hostile values at the FFI boundary are Python exceptions or refusals, never `PanicException` (which is
    not an `Exception`, so would escape a host's `except Exception`)."""
    from airlock_rs import ToolGuard

    schema = json.dumps({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    guard = ToolGuard("t", "d", schema, SecurityPolicy())

    class Hostile:
        def __str__(self):
            raise RuntimeError("no str for you")

    outcomes = []
    for n, (arguments, run) in enumerate(
        [
            ({"q": "x"}, lambda admitted: Hostile()),  # a result with no JSON form and no str
            ({"q": Hostile()}, lambda admitted: "ok"),  # an argument with neither
            ({Hostile(): 1}, lambda admitted: "ok"),  # a key that is not a string
            ({"q": "x"}, lambda admitted: (_ for _ in ()).throw(KeyboardInterrupt())),  # a BaseException
            ({"q": "x" * 1_000_000}, lambda admitted: "ok"),
            ("{" * 10_000, lambda admitted: "ok"),  # JSON text nested past any limit
            ({"q": "\ud800"}, lambda admitted: "ok"),  # a lone surrogate: not UTF-8
        ]
    ):
        try:
            outcomes.append(guard.dispatch(f"c{n}", arguments, run))
        except BaseException as error:  # noqa: BLE001 - what crossed the boundary is the point
            assert isinstance(error, (Exception, KeyboardInterrupt)), type(error)
            assert type(error).__name__ != "PanicException", error
            outcomes.append(error)
    assert outcomes[0]["status"] == "error", outcomes[0]
    assert outcomes[1]["status"] == "error" or isinstance(outcomes[1], Exception), outcomes[1]
    for bad in (None, 1, "x", ["q"], {"q": 1}):
        try:
            guard.dispatch("typed", bad, lambda admitted: "ok")
        except Exception as error:  # noqa: BLE001
            assert type(error).__name__ != "PanicException"


def test_a_tool_that_dispatches_another_guarded_call_runs_it_never_a_panic(tmp_path):
    """A tool's body runs inside its guard's dispatch; a guarded call made from there (a tool calling another
    tool) runs too, with or without a store to wait on, and so does one nested in that."""
    from airlock_rs import ToolGuard

    schema = json.dumps({"type": "object", "properties": {"q": {"type": "string"}}})
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    for policy in (SecurityPolicy(), SecurityPolicy(approval_ledger=ledger)):
        inner = ToolGuard("inner", "d", schema, policy)
        middle = ToolGuard("middle", "d", schema, policy)
        outer = ToolGuard("outer", "d", schema, policy)

        def through_middle(admitted):
            return middle.dispatch("m", admitted, lambda a: inner.dispatch("i", a, lambda b: f"inner {b['q']}"))

        out = outer.dispatch("o", {"q": "x"}, lambda admitted: through_middle(admitted)["content"])
        assert out["status"] == "success", out
        assert json.loads(out["content"])["content"] == "inner x", out
    kinds = [(r["tool"], r["outcome"]["kind"]) for r in ledger.audit_records()]
    assert kinds == [("inner", "executed"), ("middle", "executed"), ("outer", "executed")], kinds

    lookup = ToolGuard("lookup", "d", schema, SecurityPolicy())

    @tool
    def ask_lookup(q: str) -> str:
        """Look something up through another guarded tool."""
        RAN.append(("ask_lookup", {"q": q}))
        return lookup.dispatch("l1", {"q": q}, lambda a: f"found {a['q']}")["content"]

    message = last(guarded(SecurityPolicy(), tools=[ask_lookup]).invoke({"messages": [call("ask_lookup", {"q": "y"})]}))
    assert message.status == "success" and message.content == "found y", message.content


def test_the_readme_example_runs():
    """README, "LangGraph (Python)": the second of its two commands."""
    example = Path(__file__).parent.parent / "examples" / "langgraph_agent.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "AKIA" not in done.stdout, "the result's secret is masked"
    calls = [line for line in done.stdout.splitlines() if line[:1] == "c" and line[1:2].isdigit()]
    assert [line.split("]")[0] if "[" in line else line.split(":")[0] + ": paused" for line in calls] == [
        "c1: [success",
        "c2: [error",
        "c3: [error",
        "c4: paused",
        "c4: [success",
    ], calls
    assert calls[-1] == "c4: [success] deleted /tmp/x", calls


@tool
def refund(payment_id: str, amount: int) -> str:
    """Refund a payment."""
    RAN.append(("refund", {"payment_id": payment_id, "amount": amount}))
    if amount < 0:
        raise ValueError("the bank timed out")
    return f"refunded {amount}"


def test_an_effect_key_runs_once_and_a_failed_run_waits_for_an_operator(tmp_path):
    """`effects`: a second call with the key of one that ran is refused as a duplicate; a call whose tool
    failed (the node made the error message: `handle_tool_errors`) may have had its effect, so a retry is
    refused until an operator says whether it happened."""
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    policy = SecurityPolicy(effects={"refund": "refund:{payment_id}"}, approval_ledger=ledger)
    app = graph(ToolNode([refund], wrap_tool_call=airlock_wrap_tool_call(policy), handle_tool_errors=True))

    def refund_call(payment_id, amount, call_id):
        return last(app.invoke({"messages": [call("refund", {"payment_id": payment_id, "amount": amount}, call_id)]}))

    assert refund_call("p1", 5, "r1").status == "success"
    again = refund_call("p1", 5, "r2")
    assert again.status == "error" and again.additional_kwargs["airlock"]["refusal"]["kind"] == "duplicate", again
    failed = refund_call("p2", -1, "r3")
    assert failed.status == "error" and "timed out" in failed.content, failed.content
    retry = refund_call("p2", 5, "r4")
    assert retry.status == "error", retry.content
    assert retry.additional_kwargs["airlock"]["refusal"]["kind"] == "effect_unresolved", retry
    assert RAN == [("refund", {"payment_id": "p1", "amount": 5}), ("refund", {"payment_id": "p2", "amount": -1})]
    with pytest.raises(PolicyError, match="approval_ledger"):
        SecurityPolicy(effects={"refund": "refund:{payment_id}"})
