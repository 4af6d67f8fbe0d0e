"""The approver's credential (issue 23's operator keys) through the Python API: given once when
`InterruptApprovals` is made, so the single-approver path stays `approvals.approve(value)`; a request that
needs N people takes `approvals.approve(value, approver=credential)` per person; in operator mode
(`operators=FILE`) only decisions signed by keys the operators file lists count, so neither a name, nor an
unlisted key, nor whoever holds the approval key and the ledger can approve."""

from __future__ import annotations

import json
import os

import pytest
from conftest import RAN, TOOLS, airlock, call, graph, signing_key
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import ApprovalError, ApprovalKeyError, InterruptApprovals, OperatorKey, RedbApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_wrap_tool_call

KEY = bytes(range(32))


def operators_in(directory, *names):
    """Keys of `names` made with `airlock operators add`, and the operators file that lists them."""
    keys = {name: OperatorKey.from_file(signing_key(directory, name)) for name in names}
    return keys, os.path.join(str(directory), "operators.toml")


def guarded(ledger, interrupt_approvals, **policy):
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger, **policy)
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=interrupt_approvals))
    return graph(node, InMemorySaver())


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def pause(app, thread="t1"):
    out = app.invoke({"messages": [call("delete_file", {"path": "/tmp/x"})]}, config(thread))
    assert RAN == []
    return out["__interrupt__"][0].value


def resumed(app, resume, thread="t1") -> ToolMessage:
    message = app.invoke(Command(resume=resume), config(thread))["messages"][-1]
    assert isinstance(message, ToolMessage)
    return message


def approved_records(ledger):
    return [r for r in ledger.audit_records() if r["outcome"]["kind"] == "approved"]


def test_an_operator_key_reads_the_file_the_cli_writes_and_shows_no_secret(tmp_path):
    path = signing_key(tmp_path, "alice")
    key = OperatorKey.from_file(path)
    assert key.name == "alice"
    listed = open(os.path.join(str(tmp_path), "operators.toml")).read()
    assert key.public_key.startswith("ed25519:") and key.public_key in listed
    secret = [line for line in open(path).read().splitlines() if line.startswith("secret")][0]
    assert secret.split('"')[1] not in repr(key)
    made = OperatorKey.generate("bob")
    made.write(str(tmp_path / "bob.key"))
    assert OperatorKey.from_file(str(tmp_path / "bob.key")).public_key == made.public_key
    with pytest.raises(ApprovalKeyError):
        made.write(str(tmp_path / "bob.key"))  # never overwritten
    with pytest.raises(ApprovalKeyError):
        OperatorKey.from_file(str(tmp_path / "operators.toml"))
    with pytest.raises(ApprovalKeyError):
        InterruptApprovals(KEY, RedbApprovalLedger(str(tmp_path / "a.redb")), operators=str(tmp_path / "missing.toml"))
    with pytest.raises(TypeError):
        InterruptApprovals(KEY, RedbApprovalLedger(str(tmp_path / "b.redb")), approver=42)


def test_the_credential_given_once_signs_the_single_approver_path(tmp_path):
    keys, operators = operators_in(tmp_path, "alice")
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    approvals = InterruptApprovals(KEY, ledger, approver=keys["alice"], operators=operators)
    app = guarded(ledger, approvals)
    value = pause(app)
    message = resumed(app, approvals.approve(value))
    assert message.status == "success", message.content
    assert RAN == [("delete_file", {"path": "/tmp/x"})]
    assert any("alice" in (r["detail"] or "") for r in approved_records(ledger)), ledger.audit_records()


def test_in_operator_mode_nothing_but_a_listed_signature_approves(tmp_path):
    keys, operators = operators_in(tmp_path, "alice")
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    approvals = InterruptApprovals(KEY, ledger, approver=keys["alice"], operators=operators)
    app = guarded(ledger, approvals)
    # A name is no credential: refused before anything is recorded.
    value = pause(app, "t1")
    with pytest.raises(ApprovalError, match="sign"):
        approvals.approve(value, approver="alice")
    # Whoever holds the approval key and the ledger, without a listed key: a host of their own with no
    # operators file (unsigned), and a key of their own made under a listed name (signed, not listed).
    impostor = OperatorKey.generate("alice")
    for thread, forger in [
        ("t2", InterruptApprovals(KEY, ledger)),
        ("t3", InterruptApprovals(KEY, ledger, approver=impostor)),
    ]:
        resume = forger.approve(pause(app, thread))
        assert set(resume) == {"airlock_grant"}, "the forger got a resume value"
        message = resumed(app, resume, thread)
        assert message.status == "error", message.content
        assert RAN == [], "a grant no listed operator signed admits nothing"
    # The listed operator's approval of the first request still admits its call, once.
    assert resumed(app, approvals.approve(value), "t1").status == "success"
    assert len(RAN) == 1


def test_a_request_that_needs_two_people_takes_one_approve_per_credential(tmp_path):
    keys, operators = operators_in(tmp_path, "alice", "bob")
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    approvals = InterruptApprovals(KEY, ledger, approver=keys["alice"], operators=operators)
    app = guarded(ledger, approvals, approvals={"delete_file": 2})
    value = pause(app)
    assert approvals.verify(value)["airlock_approval"]["approvals"] == 2
    assert approvals.approve(value) is None, "alice's approval is recorded; it issues nothing"
    assert approvals.approve(value) is None, "the same credential again is still one approval"
    assert approvals.recorded_decision(value) is None
    resume = approvals.approve(value, approver=keys["bob"])
    assert set(resume) == {"airlock_grant"}
    assert approvals.recorded_decision(value) == resume
    message = resumed(app, resume)
    assert message.status == "success", message.content
    assert RAN == [("delete_file", {"path": "/tmp/x"})]
    # The audit record names the grant and the approver who completed it.
    approved = approved_records(ledger)
    assert approved and "bob" in approved[-1]["detail"], approved


def test_two_people_one_in_python_one_with_the_cli(tmp_path):
    keys, operators = operators_in(tmp_path, "alice", "bob")
    db = tmp_path / "airlock.redb"
    key_file = tmp_path / "approval.key"
    key_file.write_text(KEY.hex() + "\n")
    ledger = RedbApprovalLedger(str(db), multi_process=True)
    approvals = InterruptApprovals(KEY, ledger, approver=keys["alice"], operators=operators)
    app = guarded(ledger, approvals, approvals={"delete_file": 2})
    value = pause(app)
    assert approvals.approve(value) is None
    bob = airlock(
        "--db", str(db), "--multi-process", "--json", "approve", value["airlock_approval"]["request_id"],
        "--signing-key", signing_key(tmp_path, "bob"), "--yes", "--key-file", str(key_file),
    )
    assert bob.returncode == 0, bob.stderr
    printed = json.loads(bob.stdout)
    resume = approvals.recorded_decision(value)
    assert resume is not None and resume == printed
    assert resumed(app, resume).status == "success"
    assert len(RAN) == 1
    # The spent grant carries both operators' signatures, each by their own listed key.
    shown = airlock(
        "--db", str(db), "--multi-process", "--json", "requests", "show", value["airlock_approval"]["request_id"],
        "--key-file", str(key_file),
    )
    assert shown.returncode == 0, shown.stderr
    decision = json.dumps(json.loads(shown.stdout)["decision"])
    assert keys["alice"].public_key in decision and keys["bob"].public_key in decision, decision


def test_a_denial_is_signed_by_the_credential_and_refuses_the_call(tmp_path):
    keys, operators = operators_in(tmp_path, "alice", "bob")
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"))
    approvals = InterruptApprovals(KEY, ledger, approver=keys["alice"], operators=operators)
    app = guarded(ledger, approvals)
    value = pause(app)
    with pytest.raises(ApprovalError, match="sign"):
        approvals.deny(value, approver="mallory")
    message = resumed(app, approvals.deny(value, approver=keys["bob"], reason="not today"))
    assert message.status == "error" and "not today" in message.content, message.content
    assert RAN == []
