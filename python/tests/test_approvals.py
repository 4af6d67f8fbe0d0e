"""Approvals across LangGraph's own interrupt(): a human's approval bound to the call, spent once.

The seed's four attacks each admit nothing: a resume value forged without the key; a request altered in
the store; the same resume replayed, and time travel to the interrupted checkpoint; a resume from an
older checkpoint after the head row was deleted. And the whole cycle across processes: one Python process
pauses, the operator approves with the `airlock` CLI, another Python process resumes.
"""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import RAN, TOOLS, airlock, call, calls, graph, signing_key, tool_messages
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import (
    ApprovalError,
    ApprovalKeyError,
    InterruptApprovals,
    RedbApprovalLedger,
    SecurityPolicy,
    ToolGuard,
)
from airlock_rs.langgraph import airlock_wrap_tool_call

KEY = bytes(range(32))
HERE = Path(__file__).parent


@pytest.fixture()
def ledger(tmp_path):
    return RedbApprovalLedger(str(tmp_path / "airlock.redb"))


def guarded(ledger, approvals, checkpointer=None):
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals))
    return graph(node, checkpointer or InMemorySaver())


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def pause(app, thread="t1", path="/tmp/x", call_id="call-1"):
    out = app.invoke({"messages": [call("delete_file", {"path": path}, call_id)]}, config(thread))
    assert RAN == [], "an escalated call must not run before it is approved"
    interrupts = out["__interrupt__"]
    assert len(interrupts) == 1
    value = interrupts[0].value
    assert set(value) == {"airlock_approval"}
    return value


def tool_message(out) -> ToolMessage:
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage), out
    return message


def test_the_interrupt_value_names_the_call_and_its_binding(ledger):
    approvals = InterruptApprovals(KEY, ledger)
    raw = pause(guarded(ledger, approvals))
    # The arguments are kept encrypted in the value (and so in the checkpoint store); the key opens them.
    assert "arguments" not in raw["airlock_approval"] and "/tmp/x" not in str(raw)
    value = approvals.verify(raw)["airlock_approval"]
    assert "/tmp/x" in value["shown"], value["shown"]
    assert value["tool"] == "delete_file"
    assert value["rule"] == "delete_file"
    assert value["reason"] == "deletes a file"
    assert value["arguments"] == {"path": "/tmp/x"}
    assert value["call"]["thread_id"] == "t1"
    assert value["call"]["tool_call_id"] == "call-1"
    assert value["call"]["checkpoint_ns"].startswith("tools:")
    assert value["call"]["checkpoint"], "the checkpoint map is bound"
    assert len(value["binding"]) == 64 and len(value["seal"]) == 64


def test_an_approved_call_runs_once_on_resume(ledger):
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    value = pause(app)
    out = app.invoke(Command(resume=approvals.approve(value)), config("t1"))
    message = tool_message(out)
    assert message.status == "success", message.content
    assert RAN == [("delete_file", {"path": "/tmp/x"})]


def test_a_denied_call_never_runs(ledger):
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    value = pause(app)
    out = app.invoke(Command(resume=approvals.deny(value, reason="not today")), config("t1"))
    assert tool_message(out).status == "error"
    assert RAN == []



def test_with_an_audit_file_a_denial_records_the_grant_it_revokes_in_that_file(tmp_path):
    """`audit_file=`: denying an approved request writes the revocation to the hosts' append-only file (before the
    ledger's denial: the Rust tests show the order), so a host writing that file refuses the grant even if the
    ledger's row is set back to live."""
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"), audit_file=str(tmp_path / "audit.log"))
    approvals = InterruptApprovals(KEY, ledger, approver="alice")
    app = guarded(ledger, approvals)
    value = pause(app)
    grant_id = approvals.approve(value)["airlock_grant"]["grant_id"]
    denied = approvals.deny(value, reason="changed my mind")
    revocations = [r for r in ledger.audit_records() if " revoked by " in (r.get("detail") or "")]
    assert [r["detail"] for r in revocations] == [f"grant {grant_id} revoked by alice"], ledger.audit_records()
    assert revocations[0]["outcome"]["kind"] == "refused", revocations[0]
    out = app.invoke(Command(resume=denied), config("t1"))
    assert tool_message(out).status == "error"
    assert RAN == []


PLAIN = ("drop_table", {"table": "t"}, "plain-1")
ESCALATED = ("delete_file", {"path": "/tmp/x"}, "escalated-1")


@pytest.mark.parametrize("order", [(PLAIN, ESCALATED), (ESCALATED, PLAIN)], ids=["plain-first", "escalated-first"])
def test_one_message_with_a_plain_and_an_escalated_call_resumes_the_escalated_one(ledger, order):
    """ToolNode runs both calls of the message in one task, whose resume values LangGraph hands out by the order
    the calls ask: the plain call must not take the approval (nor ask for one), and the escalated call runs once
    with it; both answers reach the messages."""
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    paused = app.invoke({"messages": [calls(*order)]}, config("t1"))
    interrupts = paused["__interrupt__"]
    assert len(interrupts) == 1 and ("delete_file", {"path": "/tmp/x"}) not in RAN
    out = app.invoke(Command(resume=approvals.approve(interrupts[0].value)), config("t1"))
    assert "__interrupt__" not in out, out["__interrupt__"]
    assert RAN.count(("delete_file", {"path": "/tmp/x"})) == 1, RAN
    messages = tool_messages(out)
    assert messages["plain-1"].status == "success" and messages["plain-1"].content == "dropped"
    assert messages["escalated-1"].status == "success", messages["escalated-1"].content
    assert messages["escalated-1"].content == "deleted /tmp/x"


@pytest.mark.parametrize("by_id", [True, False], ids=["resume-map", "resume-value"])
def test_several_escalated_calls_in_one_message_are_each_resumed_by_their_own_answer(ledger, by_id):
    """Each interrupt is answered in turn (by its id, or as the one pending); no call runs before every one is
    answered (its result would be lost to a sibling's pause, and its approval spent), then each runs once."""
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    paths = ["/tmp/a", "/tmp/b", "/tmp/c"]
    message = calls(*[("delete_file", {"path": path}, f"call-{n}") for n, path in enumerate(paths)], PLAIN)
    out = app.invoke({"messages": [message]}, config("t1"))
    asked = set()
    while "__interrupt__" in out:
        assert len(asked) < len(paths), "asked again for an answered call"
        (pending,) = out["__interrupt__"]
        assert not [r for r in RAN if r[0] == "delete_file"], "nothing runs before every call is answered"
        call_id = approvals.verify(pending.value)["airlock_approval"]["call"]["tool_call_id"]
        assert call_id not in asked
        asked.add(call_id)
        answer = approvals.approve(pending.value)
        out = app.invoke(Command(resume={pending.id: answer} if by_id else answer), config("t1"))
    assert asked == {"call-0", "call-1", "call-2"}
    assert sorted(r[1]["path"] for r in RAN if r[0] == "delete_file") == paths, RAN
    messages = tool_messages(out)
    for n, path in enumerate(paths):
        assert messages[f"call-{n}"].status == "success" and messages[f"call-{n}"].content == f"deleted {path}"
    assert messages["plain-1"].status == "success"


def test_attack_1_a_resume_value_forged_without_the_key_admits_nothing(ledger):
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    value = pause(app)
    # Someone with write access to the checkpoints but not the key: a made-up approval, a real one with its
    # token changed, one approved under another key, and a real approval of another call.
    genuine_elsewhere = approvals.approve(pause(app, thread="t2", call_id="other"))
    tampered = copy.deepcopy(genuine_elsewhere)
    grant = tampered[next(iter(tampered))]
    token_field = next(k for k, v in grant.items() if isinstance(v, str) and len(v) == 64)
    grant[token_field] = ("0" if grant[token_field][0] != "0" else "1") + grant[token_field][1:]
    forged_key = InterruptApprovals(b"\x01" * 32, ledger)
    with pytest.raises(ApprovalError):
        forged_key.approve(value)
    attempts = [
        {"airlock_grant": {"token": "00" * 32}},
        "approved",
        {"approved": True},
        tampered,
        genuine_elsewhere,
    ]
    for i, forged in enumerate(attempts):
        thread = "t1" if i == 0 else f"t1-{i}"
        if i:
            pause(app, thread=thread)
        out = app.invoke(Command(resume=forged), config(thread))
        assert tool_message(out).status == "error", forged
        assert RAN == [], forged


def deeply_nested(depth: int) -> list:
    value: list = []
    inner = value
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return value


#: Resume values JSON has no form for: none is an approval.
NOT_JSON = [float("nan"), {1, 2}, {"answer": {(1, 2): 3}}]


def test_a_resume_value_with_no_json_form_is_refused_as_no_approval_never_an_exception(ledger):
    """Any resume value but an approval is a no: one JSON cannot write (`nan`, a set, a tuple key, nesting past
    any limit) is refused and audited like any other non-approval, not raised out of the node."""
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    for n, bad in enumerate(NOT_JSON):
        pause(app, thread=f"t{n}")
        message = tool_message(app.invoke(Command(resume=bad), config(f"t{n}")))
        assert message.status == "error" and "was not approved" in message.content, (bad, message.content)
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "approval_invalid", bad
    # The guard itself, as a host other than LangGraph calls it (LangGraph's own saver cannot keep a tuple key
    # or a value nested this deep).
    policy = SecurityPolicy(escalate_tools={"t": "x"}, approval_ledger=ledger)
    guard = ToolGuard("t", "d", json.dumps({"type": "object", "properties": {}}), policy, approvals)
    for n, bad in enumerate([*NOT_JSON, {(1, 2): 3}, deeply_nested(100_000)]):
        out = guard.dispatch(f"g{n}", {}, lambda _: "ran", resume=bad, thread_id="g")
        assert out["kind"] == "message" and out["refusal"]["kind"] == "approval_invalid", (n, out)
    assert RAN == []
    refused = [r for r in ledger.audit_records() if r["outcome"] == {"kind": "refused", "refusal": "approval_invalid"}]
    assert len(refused) == len(NOT_JSON) * 2 + 2, ledger.audit_records()


def test_attack_2_a_request_altered_in_the_store_is_not_approved(ledger):
    approvals = InterruptApprovals(KEY, ledger)
    value = pause(guarded(ledger, approvals))
    for field, forged in [("sealed_arguments", "00" * 64), ("reason", "harmless"), ("tool", "search_docs")]:
        altered = copy.deepcopy(value)
        altered["airlock_approval"][field] = forged
        with pytest.raises(ApprovalError, match="seal"):
            approvals.approve(altered)
    assert RAN == []


def test_attack_3_a_replayed_resume_and_time_travel_admit_nothing(ledger):
    approvals = InterruptApprovals(KEY, ledger)
    app = guarded(ledger, approvals)
    value = pause(app)
    resume = approvals.approve(value)
    app.invoke(Command(resume=resume), config("t1"))
    assert len(RAN) == 1
    # Time travel: back to the checkpoint the call was interrupted in, and resume from it again.
    interrupted = [s for s in app.get_state_history(config("t1")) if s.interrupts]
    assert interrupted, "the interrupted checkpoint is in the history"
    out = app.invoke(Command(resume=resume), interrupted[0].config)
    assert tool_message(out).status == "error"
    assert len(RAN) == 1, "a spent approval admits nothing"


def test_attack_4_a_resume_from_an_older_checkpoint_after_deleting_the_head_admits_nothing(ledger, tmp_path):
    approvals = InterruptApprovals(KEY, ledger)
    connection = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    app = guarded(ledger, approvals, SqliteSaver(connection))
    value = pause(app)
    head_before = connection.execute("SELECT max(rowid) FROM checkpoints").fetchone()[0]
    writes_before = connection.execute("SELECT max(rowid) FROM writes").fetchone()[0]
    resume = approvals.approve(value)
    app.invoke(Command(resume=resume), config("t1"))
    assert len(RAN) == 1
    # Delete every row the resume wrote (the checkpoints after the interrupt, the tool's pending writes):
    # the interrupted checkpoint is the head again, as it was before the approval.
    connection.execute("DELETE FROM checkpoints WHERE rowid > ?", (head_before,))
    connection.execute("DELETE FROM writes WHERE rowid > ?", (writes_before,))
    connection.commit()
    assert app.get_state(config("t1")).interrupts
    out = app.invoke(Command(resume=resume), config("t1"))
    assert tool_message(out).status == "error"
    assert len(RAN) == 1


def test_an_escalated_call_takes_one_rate_token_across_its_pause_and_resume(ledger):
    """The pause takes no token (a human may take longer than the window); the admitted resume takes one;
    once the bucket is empty a new call is refused at once, before a human is asked."""
    approvals = InterruptApprovals(KEY, ledger)
    policy = SecurityPolicy(
        escalate_tools={"delete_file": "deletes a file"}, rate_limits={"delete_file": "1/hour"}, approval_ledger=ledger
    )
    app = graph(ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals)), InMemorySaver())
    value = pause(app)
    assert tool_message(app.invoke(Command(resume=approvals.approve(value)), config("t1"))).status == "success"
    out = app.invoke({"messages": [call("delete_file", {"path": "/tmp/y"}, "call-2")]}, config("t2"))
    assert "__interrupt__" not in out, "no human is asked for a call the rate limit refuses anyway"
    message = tool_message(out)
    assert message.status == "error" and message.additional_kwargs["airlock"]["refusal"]["kind"] == "rate_limited"
    assert RAN == [("delete_file", {"path": "/tmp/x"})]


def test_a_short_key_is_refused(ledger):
    with pytest.raises(ApprovalKeyError):
        InterruptApprovals(b"short", ledger)


def test_pause_approve_with_the_cli_and_resume_in_another_process(tmp_path):
    db = tmp_path / "airlock.redb"
    sqlite_path = tmp_path / "checkpoints.sqlite"
    key_file = tmp_path / "approval.key"
    key_file.write_text(KEY.hex() + "\n")
    script = str(HERE / "approval_cycle.py")
    env = dict(os.environ)

    def run(*args: str) -> dict:
        done = subprocess.run(
            [sys.executable, script, *args], capture_output=True, text=True, env=env, timeout=120, cwd=HERE
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    paused = run("pause", str(db), str(sqlite_path), str(key_file))
    assert paused["ran"] == []
    request_id = paused["request_id"]
    approved = airlock(
        "--db", str(db), "--json", "approve", request_id, "--signing-key", signing_key(key_file.parent, "ops@example"), "--yes", "--key-file", str(key_file)
    )
    assert approved.returncode == 0, approved.stderr
    resumed = run("resume", str(db), str(sqlite_path), str(key_file), approved.stdout)
    assert resumed["status"] == "success", resumed
    assert resumed["ran"] == [["delete_file", {"path": "/srv/report.txt"}]]
    # The resume did not leave a second request behind: nothing is pending.
    pending = airlock("--db", str(db), "--json", "requests", "list", "--pending", "--key-file", str(key_file))
    assert pending.returncode == 0, pending.stderr
    assert json.loads(pending.stdout) == []
    # The same resume value in a third process: nothing runs again.
    again = run("resume", str(db), str(sqlite_path), str(key_file), approved.stdout)
    assert again["ran"] == []


def test_the_approval_binds_every_field_of_the_call(ledger):
    """Each field the binding covers, changed alone, makes the approval admit nothing: the thread, the
    checkpoint namespace, the checkpoint map, the tool call id, the arguments, the tool. Then the call it was
    given for runs, once."""
    approvals = InterruptApprovals(KEY, ledger)
    policy = SecurityPolicy(escalate_tools={"delete_*": "deletes"}, approval_ledger=ledger)
    schema = json.dumps({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    delete_file = ToolGuard("delete_file", "Delete a file.", schema, policy, approvals)
    delete_dir = ToolGuard("delete_dir", "Delete a folder.", schema, policy, approvals)
    site = {"thread_id": "t1", "checkpoint_ns": "tools:1", "checkpoint_map": {"": "cp-1", "tools:1": "cp-2"}}
    ran = []

    def run(admitted):
        ran.append(admitted)
        return "done"

    paused = delete_file.dispatch("call-1", {"path": "/x"}, run, **site)
    assert paused["kind"] == "interrupt", paused
    resume = approvals.approve(paused["value"])
    for guard, call_id, arguments, where in [
        (delete_file, "call-1", {"path": "/x"}, dict(site, thread_id="t2")),
        (delete_file, "call-1", {"path": "/x"}, dict(site, checkpoint_ns="tools:2")),
        (delete_file, "call-1", {"path": "/x"}, dict(site, checkpoint_map={"": "cp-1", "tools:1": "cp-3"})),
        (delete_file, "call-2", {"path": "/x"}, site),
        (delete_file, "call-1", {"path": "/y"}, site),
        (delete_dir, "call-1", {"path": "/x"}, site),
    ]:
        out = guard.dispatch(call_id, arguments, run, resume=resume, **where)
        assert out["kind"] == "message" and out["status"] == "error", (where, call_id, arguments, out)
        assert ran == [], (where, call_id, arguments)
    out = delete_file.dispatch("call-1", {"path": "/x"}, run, resume=resume, **site)
    assert out["status"] == "success", out
    again = delete_file.dispatch("call-1", {"path": "/x"}, run, resume=resume, **site)
    assert again["status"] == "error", again
    assert ran == [{"path": "/x"}], "spent once"



@pytest.mark.parametrize("amount", [2**68 + 12345, 2**64, -(2**63) - 1], ids=["2^68+12345", "2^64", "-2^63-1"])
def test_an_integer_beyond_64_bits_is_refused_never_rounded(ledger, amount):
    """A Python int that fits neither i64 nor u64 would reach the gates only as the nearest double (2^68 for
    2^68 + 12345): the approval would bind and show that number while the tool got the exact int. It is
    refused, and nothing pauses or runs; an int and a float that fit still pause and run as given."""
    approvals = InterruptApprovals(KEY, ledger)
    policy = SecurityPolicy(escalate_tools={"pay": "moves money"}, approval_ledger=ledger)
    schema = json.dumps({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]})
    pay = ToolGuard("pay", "Pay an amount.", schema, policy, approvals)
    site = {"thread_id": "t1", "checkpoint_ns": "tools:1", "checkpoint_map": {"": "cp-1"}}
    ran = []

    def run(admitted):
        ran.append(admitted["amount"])
        return "paid"

    out = pay.dispatch("call-1", {"amount": amount}, run, **site)
    assert out["kind"] == "message" and out["status"] == "error", out
    assert out["refusal"]["kind"] == "malformed_arguments", out
    assert str(amount) in out["content"] and "rounded" in out["content"], out["content"]
    assert ran == []

    for n, fits in enumerate([12345, 2.5]):
        paused = pay.dispatch(f"call-{n + 2}", {"amount": fits}, run, **site)
        assert paused["kind"] == "interrupt", paused
        assert approvals.verify(paused["value"])["airlock_approval"]["arguments"] == {"amount": fits}
        resume = approvals.approve(paused["value"])
        out = pay.dispatch(f"call-{n + 2}", {"amount": fits}, run, resume=resume, **site)
        assert out["status"] == "success", out
    assert ran == [12345, 2.5]


HOLD = """
import sys, time
from airlock_rs import RedbApprovalLedger
ledger = RedbApprovalLedger(sys.argv[1])
print("open", flush=True)
time.sleep(1.5)
"""


def test_the_gil_is_released_while_the_rust_side_waits_on_the_ledger(tmp_path):
    """Opening a ledger file another process holds waits for it (`wait_secs`) in Rust: meanwhile this
    process's other Python threads run."""
    path = str(tmp_path / "held.redb")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, path], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert holder.stdout.readline().strip() == "open"
        ticks: list[float] = []
        stop = threading.Event()

        def tick():
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.005)

        ticker = threading.Thread(target=tick)
        ticker.start()
        started = time.monotonic()
        RedbApprovalLedger(path, wait_secs=30)
        waited = time.monotonic() - started
        stop.set()
        ticker.join()
    finally:
        holder.wait(timeout=30)
    assert waited > 0.5, f"the ledger was not held: opened after {waited:.2f} s"
    during = [t for t in ticks if started + 0.05 < t < started + waited - 0.05]
    assert len(during) >= 20, f"another thread ran {len(during)} times in {waited:.2f} s of waiting"
