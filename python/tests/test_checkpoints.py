"""Checkpoint commitments (AirlockCheckpointer): a checkpoint edited with sqlite3 between pause and resume is
refused and recorded; time travel is recorded; an untouched pause and resume goes through."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RAN, TOOLS, ScriptedChat, airlock, call, graph, signing_key
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import AirlockCheckpointer, InterruptApprovals, RedbApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_awrap_tool_call, airlock_middleware, airlock_wrap_tool_call

KEY = bytes(range(32))
AUDIT_KEY = bytes(range(100, 132))
CFG = {"configurable": {"thread_id": "t1"}}


def build(tmp_path, inner, on_tamper="refuse"):
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"), audit_key=AUDIT_KEY)
    approvals = InterruptApprovals(KEY, ledger)
    saver = AirlockCheckpointer(inner, ledger, KEY, on_tamper=on_tamper)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=saver))
    return ledger, approvals, saver, graph(node, saver)


def build_in_a_subgraph(tmp_path, inner):
    """`build`, with the guarded ToolNode inside a subgraph (the parent graph's node `agent`), both graphs
    checkpointed through the one saver."""
    from langgraph.graph import START, MessagesState, StateGraph

    ledger, approvals, saver, _ = build(tmp_path, inner)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=saver))
    subgraph = StateGraph(MessagesState)
    subgraph.add_node("tools", node)
    subgraph.add_edge(START, "tools")
    outer = StateGraph(MessagesState)
    outer.add_node("agent", subgraph.compile())
    outer.add_edge(START, "agent")
    return ledger, approvals, saver, outer.compile(checkpointer=saver)


def build_async(tmp_path, inner):
    """`build` for a graph run with `ainvoke`: the node guarded through `awrap_tool_call` too."""
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"), audit_key=AUDIT_KEY)
    approvals = InterruptApprovals(KEY, ledger)
    saver = AirlockCheckpointer(inner, ledger, KEY)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(
        TOOLS,
        wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=saver),
        awrap_tool_call=airlock_awrap_tool_call(policy, approvals=approvals, checkpointer=saver),
    )
    return ledger, approvals, saver, node


def first_turn() -> dict:
    """The first turn of a test, made afresh (LangGraph gives messages ids in place): the model asks to delete a
    file (escalated)."""
    return {"messages": [HumanMessage(content="please delete /tmp/x"), call("delete_file", {"path": "/tmp/x"})]}


def pause(app):
    out = app.invoke(first_turn(), CFG)
    assert RAN == []
    return out["__interrupt__"][0].value


def tampers(ledger):
    return [r for r in ledger.audit_records() if r["outcome"]["kind"] == "state_tamper"]


def edit_head_with_sqlite(path, saver, namespace: str | None = None):
    """Rewrites the human's message in the newest checkpoint row (of `namespace`, if given), as anyone with the
    file could."""
    connection = sqlite3.connect(path)
    where, parameters = ("WHERE checkpoint_ns = ?", (namespace,)) if namespace is not None else ("", ())
    rowid, kind, blob = connection.execute(
        f"SELECT rowid, type, checkpoint FROM checkpoints {where} ORDER BY rowid DESC LIMIT 1", parameters
    ).fetchone()
    checkpoint = saver.serde.loads_typed((kind, blob))
    messages = checkpoint["channel_values"]["messages"]
    messages[0] = messages[0].model_copy(update={"content": "the user said: delete everything"})
    kind, blob = saver.serde.dumps_typed(checkpoint)
    connection.execute("UPDATE checkpoints SET type = ?, checkpoint = ? WHERE rowid = ?", (kind, blob, rowid))
    connection.commit()
    connection.close()


def test_an_untouched_pause_and_resume_goes_through_and_records_nothing(tmp_path):
    connection = sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False)
    ledger, approvals, saver, app = build(tmp_path, SqliteSaver(connection))
    value = pause(app)
    out = app.invoke(Command(resume=approvals.approve(value)), CFG)
    assert out["messages"][-1].status == "success", out["messages"][-1].content
    assert RAN == [("delete_file", {"path": "/tmp/x"})]
    assert tampers(ledger) == []


def test_a_checkpoint_edited_with_sqlite3_between_pause_and_resume_is_refused_and_recorded(tmp_path):
    path = tmp_path / "cp.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    ledger, approvals, saver, app = build(tmp_path, SqliteSaver(connection))
    value = pause(app)
    resume = approvals.approve(value)
    edit_head_with_sqlite(path, saver)
    out = app.invoke(Command(resume=resume), CFG)
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage) and message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
    assert RAN == [], "an escalated call resumed from an edited checkpoint never runs"
    recorded = tampers(ledger)
    assert recorded and recorded[0]["thread_id"] == "t1"
    assert "edited" in recorded[0]["detail"]
    assert recorded[0]["key_id"] == "audit-1", "the record is signed"


def test_a_write_inserted_with_sqlite3_between_pause_and_resume_is_refused_and_recorded(tmp_path):
    """LangGraph applies a checkpoint's app writes (task id all zeros) as its state when a run goes on from it:
    one inserted in the `writes` table rewrites the human's message as surely as an edited checkpoint."""
    path = tmp_path / "cp.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    ledger, approvals, saver, app = build(tmp_path, SqliteSaver(connection))
    value = pause(app)
    resume = approvals.approve(value)
    head = saver.get_tuple(CFG)
    human = head.checkpoint["channel_values"]["messages"][0]
    forged = [human.model_copy(update={"content": "the user said: delete everything"})]
    kind, blob = saver.serde.dumps_typed(forged)
    edit = sqlite3.connect(path)
    edit.execute(
        "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value)"
        " VALUES (?, ?, ?, ?, '', 100, 'messages', ?, ?)",
        ("t1", "", head.checkpoint["id"], "00000000-0000-0000-0000-000000000000", kind, blob),
    )
    edit.commit()
    edit.close()
    out = app.invoke(Command(resume=resume), CFG)
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage) and message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
    assert RAN == [], "an escalated call resumed from a checkpoint with an inserted write never runs"
    assert tampers(ledger)


def test_record_only_records_the_edit_and_lets_the_approved_call_run(tmp_path):
    path = tmp_path / "cp.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    ledger, approvals, saver, app = build(tmp_path, SqliteSaver(connection), on_tamper="record")
    value = pause(app)
    resume = approvals.approve(value)
    edit_head_with_sqlite(path, saver)
    out = app.invoke(Command(resume=resume), CFG)
    assert out["messages"][-1].status == "success"
    assert len(RAN) == 1
    assert tampers(ledger)


def test_time_travel_to_the_interrupted_checkpoint_is_recorded(tmp_path):
    ledger, approvals, saver, app = build(tmp_path, InMemorySaver())
    value = pause(app)
    resume = approvals.approve(value)
    app.invoke(Command(resume=resume), CFG)
    assert tampers(ledger) == []
    interrupted = [s for s in app.get_state_history(CFG) if s.interrupts][0]
    out = app.invoke(Command(resume=resume), interrupted.config)
    assert out["messages"][-1].status == "error"
    assert len(RAN) == 1
    recorded = tampers(ledger)
    assert recorded and "time travel" in recorded[0]["detail"]


def test_a_commitment_that_cannot_be_verified_is_a_warning_not_an_exception(tmp_path):
    ledger, approvals, saver, app = build(tmp_path, InMemorySaver())

    def broken(*args, **kwargs):
        raise RuntimeError("the ledger is gone")

    saver.commitments = type("Broken", (), {"record": broken, "verify": broken, "record_tamper": broken})()
    with pytest.warns(UserWarning, match="airlock"):
        out = app.invoke({"messages": [call("search_docs", {"query": "q", "limit": 1})]}, CFG)
    assert out["messages"][-1].status == "success"


def unvouched(ledger):
    return [r for r in tampers(ledger) if "nothing vouches" in (r["detail"] or "")]


@pytest.mark.parametrize("on_tamper", ["refuse", "record"])
def test_a_resume_from_a_checkpoint_no_commitment_vouches_for_is_refused_and_recorded(tmp_path, on_tamper):
    """The pause was written around the commitments (the saver wrapped after it, or the ledger's commitments for
    the thread lost): nothing says the checkpoint is the one the approver saw, so the approved call does not
    run (it did, before: `unrecorded` was admitted)."""
    inner = InMemorySaver()
    ledger, approvals, saver, _ = build(tmp_path, inner, on_tamper=on_tamper)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=saver))
    value = pause(graph(node, inner))
    resume = approvals.approve(value)
    out = graph(node, saver).invoke(Command(resume=resume), CFG)
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage)
    if on_tamper == "refuse":
        assert message.status == "error", message.content
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_unverified"
        assert "nothing vouches" in message.content
        assert RAN == []
    else:
        assert message.status == "success", message.content
        assert RAN == [("delete_file", {"path": "/tmp/x"})]
    assert len(unvouched(ledger)) == 1, tampers(ledger)


def test_a_resume_while_the_commitments_cannot_be_read_is_refused_not_run(tmp_path):
    ledger, approvals, saver, app = build(tmp_path, InMemorySaver())
    value = pause(app)
    resume = approvals.approve(value)
    working = saver.commitments

    def broken(*args, **kwargs):
        raise RuntimeError("the ledger is gone")

    saver.commitments = type(
        "Unreadable", (), {"record": working.record, "verify": broken, "record_tamper": working.record_tamper}
    )()
    with pytest.warns(UserWarning, match="cannot be verified"):
        out = app.invoke(Command(resume=resume), CFG)
    message = out["messages"][-1]
    assert message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_unverified"
    assert RAN == []
    # Readable again. The checkpoint the graph made after the refusal was made from one that could not be
    # verified: it is committed tainted, and nothing resumes from it (before, it was vouched for like any other,
    # so an edit made while the commitments could not be read went into vouched state one step later).
    saver.commitments = working
    newest = saver.get_tuple(CFG)
    assert working.verify("t1", "", newest.checkpoint["id"], saver.manifest(newest)) == "tainted"
    head = {"configurable": {"thread_id": "t1", "checkpoint_map": {"": newest.checkpoint["id"]}}}
    assert saver.resume_refusal(head) == "tampered"


def test_a_verification_that_failed_once_does_not_vouch_for_an_edit_made_meanwhile(tmp_path):
    """The resume value's write finds the commitments unreadable (once): the checkpoint, edited meanwhile, is not
    committed afresh as it is, so the verification before the call runs still finds the edit."""
    path = tmp_path / "cp.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    ledger, approvals, saver, app = build(tmp_path, SqliteSaver(connection))
    resume = approvals.approve(pause(app))
    edit_head_with_sqlite(path, saver)
    working = saver.commitments
    failures = [RuntimeError("the ledger is busy")]

    def flaky(*args, **kwargs):
        if failures:
            raise failures.pop()
        return working.verify(*args, **kwargs)

    saver.commitments = type(
        "Flaky", (), {"record": working.record, "verify": staticmethod(flaky), "record_tamper": working.record_tamper}
    )()
    with pytest.warns(UserWarning, match="cannot be verified"):
        out = app.invoke(Command(resume=resume), CFG)
    assert failures == [], "the first verification failed"
    message = out["messages"][-1]
    assert message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
    assert RAN == []
    assert tampers(ledger) and "edited" in tampers(ledger)[0]["detail"]


class FlakySqliteSaver(SqliteSaver):
    """A SqliteSaver whose next read of one checkpoint by id fails once `fail_next` is set: what a store
    locked by another writer ("database is locked") does to a read."""

    fail_next = False

    def get_tuple(self, config):
        if self.fail_next and config.get("configurable", {}).get("checkpoint_id"):
            self.fail_next = False
            raise sqlite3.OperationalError("database is locked")
        return super().get_tuple(config)


def test_a_checkpoint_the_saver_failed_to_read_is_not_committed_to_afresh(tmp_path):
    """The resume value's write finds the saver unreadable (locked while the checkpoint is edited): what it then
    holds is not committed as vouched for, so the verification before the call runs finds the edit (it was
    committed afresh, read as `unrecorded`, and the approved call ran)."""
    path = tmp_path / "cp.sqlite"
    inner = FlakySqliteSaver(sqlite3.connect(path, check_same_thread=False))
    ledger, approvals, saver, app = build(tmp_path, inner)
    resume = approvals.approve(pause(app))
    edit_head_with_sqlite(path, saver)
    inner.fail_next = True
    with pytest.warns(UserWarning, match="cannot be read back"):
        out = app.invoke(Command(resume=resume), CFG)
    assert inner.fail_next is False, "a read failed"
    message = out["messages"][-1]
    assert message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper", message.content
    assert RAN == []


def test_an_async_checkpoint_the_saver_failed_to_read_is_not_committed_to_afresh(tmp_path):
    """As `test_a_checkpoint_the_saver_failed_to_read_is_not_committed_to_afresh`, through `aput_writes`:
    AsyncSqliteSaver's next read of the checkpoint by id fails (locked) while it is edited."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    class FlakyAsyncSqliteSaver(AsyncSqliteSaver):
        fail_next = False

        async def aget_tuple(self, config):
            if self.fail_next and config.get("configurable", {}).get("checkpoint_id"):
                type(self).fail_next = False
                raise sqlite3.OperationalError("database is locked")
            return await super().aget_tuple(config)

    path = tmp_path / "cp.sqlite"

    async def run():
        async with FlakyAsyncSqliteSaver.from_conn_string(str(path)) as inner:
            ledger, approvals, saver, node = build_async(tmp_path, inner)
            app = graph(node, saver)
            paused = await app.ainvoke(first_turn(), CFG)
            resume = approvals.approve(paused["__interrupt__"][0].value)
            await asyncio.to_thread(edit_head_with_sqlite, path, saver)
            FlakyAsyncSqliteSaver.fail_next = True
            with pytest.warns(UserWarning, match="cannot be read back"):
                out = await app.ainvoke(Command(resume=resume), CFG)
            assert FlakyAsyncSqliteSaver.fail_next is False, "a read failed"
            return out["messages"][-1]

    message = asyncio.run(run())
    assert isinstance(message, ToolMessage) and message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper", message.content
    assert RAN == []


def test_an_async_resume_check_waits_for_a_write_half_done_by_another_task(tmp_path):
    """Another task's `aput_writes` has written to the saver and not yet committed to what it wrote: the check
    before an escalated call resumes waits for it (the async writes' lock) instead of finding the checkpoint
    edited (it took the sync lock, which no async write holds: a false `state_tamper`, held for good)."""
    from langgraph.checkpoint.memory import InMemorySaver

    class GatedSaver(InMemorySaver):
        """Holds each `aput_writes` after the write, until `gate` is set."""

        gate: asyncio.Event | None = None

        async def aput_writes(self, config, writes, task_id, task_path=""):
            await super().aput_writes(config, writes, task_id, task_path)
            if self.gate is not None:
                await self.gate.wait()

    async def run():
        inner = GatedSaver()
        ledger, approvals, saver, node = build_async(tmp_path, inner)
        app = graph(node, saver)
        await app.ainvoke(first_turn(), CFG)
        head = (await saver.aget_tuple(CFG)).config
        resumed = {"configurable": {"thread_id": "t1", "checkpoint_map": {"": head["configurable"]["checkpoint_id"]}}}
        inner.gate = asyncio.Event()
        write = asyncio.create_task(saver.aput_writes(head, [("messages", "a sibling's write")], "task-2"))
        await asyncio.sleep(0.05)
        assert not write.done(), "the write waits at the gate, committed to nothing yet"
        check = asyncio.create_task(saver.aresume_refusal(resumed))
        await asyncio.sleep(0.05)
        assert not check.done(), "the check waits for the write"
        inner.gate.set()
        await write
        return await check, ledger

    refusal, ledger = asyncio.run(run())
    assert refusal is None
    assert tampers(ledger) == []


def test_an_async_resume_from_a_checkpoint_no_commitment_vouches_for_is_refused(tmp_path):
    """As `test_a_resume_from_a_checkpoint_no_commitment_vouches_for_is_refused_and_recorded`, through
    `ainvoke` and `awrap_tool_call` over AsyncSqliteSaver."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "cp.sqlite"

    async def run():
        async with AsyncSqliteSaver.from_conn_string(str(path)) as inner:
            ledger, approvals, saver, node = build_async(tmp_path, inner)
            # Paused with the saver itself: no commitment is written.
            paused = await graph(node, inner).ainvoke(first_turn(), CFG)
            assert RAN == []
            resume = approvals.approve(paused["__interrupt__"][0].value)
            out = await graph(node, saver).ainvoke(Command(resume=resume), CFG)
            return ledger, out["messages"][-1]

    ledger, message = asyncio.run(run())
    assert isinstance(message, ToolMessage) and message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_unverified"
    assert RAN == []
    assert len(unvouched(ledger)) == 1, tampers(ledger)


def test_a_config_naming_no_checkpoint_or_one_gone_from_the_store_is_not_vouched_for(tmp_path):
    ledger, approvals, saver, app = build(tmp_path, InMemorySaver())
    pause(app)
    head = saver.get_tuple(CFG).checkpoint["id"]
    assert saver.resume_refusal({"configurable": {"thread_id": "t1", "checkpoint_map": {"": head}}}) is None
    assert saver.resume_refusal({"configurable": {"thread_id": "t1"}}) == "unverified"
    assert saver.resume_refusal({}) == "unverified"
    gone = {"configurable": {"thread_id": "t1", "checkpoint_map": {"": "1f0-not-in-the-store"}}}
    assert saver.resume_refusal(gone) == "unverified"
    assert saver.admits_resume(gone) is False
    assert len(unvouched(ledger)) == 1


@pytest.mark.parametrize("edited", [False, True])
def test_a_pause_in_one_process_and_a_resume_in_another_is_refused_only_after_an_edit(tmp_path, edited):
    db = tmp_path / "airlock.redb"
    sqlite_path = tmp_path / "checkpoints.sqlite"
    key_file = tmp_path / "approval.key"
    key_file.write_text(KEY.hex() + "\n")
    script = str(Path(__file__).parent / "approval_cycle.py")

    def run(*args: str) -> dict:
        done = subprocess.run(
            [sys.executable, script, *args, "--committed"], capture_output=True, text=True, env=dict(os.environ),
            timeout=120, cwd=Path(__file__).parent,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    paused = run("pause", str(db), str(sqlite_path), str(key_file))
    approved = airlock(
        "--db", str(db), "--json", "approve", paused["request_id"], "--signing-key", signing_key(key_file.parent, "ops"), "--yes", "--key-file", str(key_file)
    )
    assert approved.returncode == 0, approved.stderr
    if edited:
        edit_head_with_sqlite(sqlite_path, SqliteSaver(sqlite3.connect(":memory:")))
    resumed = run("resume", str(db), str(sqlite_path), str(key_file), approved.stdout)
    records = [r for r in RedbApprovalLedger(str(db)).audit_records() if r["outcome"]["kind"] == "state_tamper"]
    if edited:
        assert resumed["status"] == "error" and resumed["refusal"] == "state_tamper", resumed
        assert resumed["ran"] == []
        assert records, "the tamper is recorded in the ledger's audit log"
    else:
        assert resumed["status"] == "success", resumed
        assert resumed["ran"] == [["delete_file", {"path": "/srv/report.txt"}]]
        assert records == []


@pytest.mark.parametrize("edited", [False, True])
def test_an_async_sqlite_checkpoint_edited_between_pause_and_resume_is_refused_and_recorded(tmp_path, edited):
    """AirlockCheckpointer over AsyncSqliteSaver (its async methods), the graph run with `ainvoke` through
    `awrap_tool_call`."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "cp.sqlite"

    async def run():
        async with AsyncSqliteSaver.from_conn_string(str(path)) as inner:
            ledger, approvals, saver, node = build_async(tmp_path, inner)
            app = graph(node, saver)
            paused = await app.ainvoke(first_turn(), CFG)
            assert RAN == []
            resume = approvals.approve(paused["__interrupt__"][0].value)
            if edited:
                await asyncio.to_thread(edit_head_with_sqlite, path, saver)
            out = await app.ainvoke(Command(resume=resume), CFG)
            return ledger, out["messages"][-1]

    ledger, message = asyncio.run(run())
    assert isinstance(message, ToolMessage)
    if edited:
        assert message.status == "error", message.content
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
        assert RAN == []
        assert tampers(ledger) and "edited" in tampers(ledger)[0]["detail"]
    else:
        assert message.status == "success", message.content
        assert RAN == [("delete_file", {"path": "/tmp/x"})]
        assert tampers(ledger) == []


def search_turn(call_id: str) -> dict:
    """A turn in which the model calls an allowed tool: it runs, and the graph ends without a pause."""
    return {"messages": [call("search_docs", {"query": "q", "limit": 1}, call_id)]}


def delete_turn(call_id: str) -> dict:
    return {"messages": [call("delete_file", {"path": "/tmp/x"}, call_id)]}


@pytest.mark.parametrize("edited", [False, True])
def test_an_edit_made_between_turns_taints_the_checkpoints_made_from_it_and_refuses_a_later_resume(tmp_path, edited):
    """The head edited with sqlite3 while no call waits (between two turns): the next turn's checkpoints are made
    from the edited state. They are committed tainted, so an escalated call two turns later, approved and
    resumed from a checkpoint that holds just what was committed, is refused all the same (before, the first
    checkpoint made from the edit was vouched for, and the call ran)."""
    path = tmp_path / "cp.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    ledger, approvals, saver, app = build(tmp_path, SqliteSaver(connection))
    app.invoke({"messages": [HumanMessage(content="please search"), *search_turn("call-0")["messages"]]}, CFG)
    if edited:
        edit_head_with_sqlite(path, saver)
    app.invoke(search_turn("call-1"), CFG)
    paused = app.invoke(delete_turn("call-2"), CFG)
    out = app.invoke(Command(resume=approvals.approve(paused["__interrupt__"][0].value)), CFG)
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage) and message.tool_call_id == "call-2"
    assert [name for name, _ in RAN] == ["search_docs", "search_docs"] + ([] if edited else ["delete_file"])
    if not edited:
        assert message.status == "success", message.content
        assert tampers(ledger) == []
        return
    assert message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
    details = [r["detail"] for r in tampers(ledger)]
    assert "edited" in details[0] and "a checkpoint made from it" in details[0], details
    assert any("made from one found edited" in d and "escalated call resumed" in d for d in details), details
    # Found once: the tainted checkpoints made in between are not recorded one by one.
    assert len(details) == 2, details


def test_an_async_edit_made_between_turns_taints_the_checkpoints_made_from_it(tmp_path):
    """As above, through `aput` (AsyncSqliteSaver, the graph run with `ainvoke`)."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "cp.sqlite"

    async def run():
        async with AsyncSqliteSaver.from_conn_string(str(path)) as inner:
            ledger, approvals, saver, node = build_async(tmp_path, inner)
            app = graph(node, saver)
            first = {"messages": [HumanMessage(content="please search"), *search_turn("c0")["messages"]]}
            await app.ainvoke(first, CFG)
            await asyncio.to_thread(edit_head_with_sqlite, path, saver)
            await app.ainvoke(search_turn("c1"), CFG)
            paused = await app.ainvoke(delete_turn("c2"), CFG)
            resume = approvals.approve(paused["__interrupt__"][0].value)
            out = await app.ainvoke(Command(resume=resume), CFG)
            return ledger, out["messages"][-1]

    ledger, message = asyncio.run(run())
    assert isinstance(message, ToolMessage) and message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
    assert [name for name, _ in RAN] == ["search_docs", "search_docs"]
    assert any("made from one found edited" in r["detail"] for r in tampers(ledger))


def test_a_checkpoint_made_from_one_the_saver_failed_to_read_is_tainted(tmp_path):
    """Unverifiable is not vouched for one step later either: the parent could not be read back when the next
    checkpoint was made from it, so that checkpoint, and what the graph makes from it, is tainted."""
    connection = sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False)
    inner = FlakySqliteSaver(connection)
    ledger, approvals, saver, app = build(tmp_path, inner)
    app.invoke({"messages": [HumanMessage(content="please search"), *search_turn("call-0")["messages"]]}, CFG)
    inner.fail_next = True
    with pytest.warns(UserWarning, match="cannot be read back"):
        app.invoke(search_turn("call-1"), CFG)
    paused = app.invoke(delete_turn("call-2"), CFG)
    out = app.invoke(Command(resume=approvals.approve(paused["__interrupt__"][0].value)), CFG)
    message = out["messages"][-1]
    assert message.status == "error", message.content
    assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
    assert "delete_file" not in [name for name, _ in RAN]


def test_turns_through_a_subgraph_taint_nothing_and_record_nothing(tmp_path):
    """Several untouched turns through a subgraph (a namespace of its own each time), then an escalated call
    paused and resumed in it: nothing is tainted or recorded, and the approved call runs."""
    connection = sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False)
    ledger, approvals, saver, app = build_in_a_subgraph(tmp_path, SqliteSaver(connection))
    app.invoke({"messages": [HumanMessage(content="please search"), *search_turn("call-0")["messages"]]}, CFG)
    app.invoke(search_turn("call-1"), CFG)
    paused = app.invoke(delete_turn("call-2"), CFG)
    out = app.invoke(Command(resume=approvals.approve(paused["__interrupt__"][0].value)), CFG)
    message = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert message.status == "success", message.content
    assert [name for name, _ in RAN] == ["search_docs", "search_docs", "delete_file"]
    assert tampers(ledger) == []


def test_a_fork_from_an_intact_older_checkpoint_is_recorded_but_not_tainted(tmp_path):
    """Time travel to an older checkpoint that holds what was committed, and a new turn from there: recorded (as
    before), but what the fork makes holds no edit, so an escalated call approved in it runs."""
    ledger, approvals, saver, app = build(tmp_path, InMemorySaver())
    app.invoke({"messages": [HumanMessage(content="please search"), *search_turn("call-0")["messages"]]}, CFG)
    app.invoke(search_turn("call-1"), CFG)
    # The end of the first turn: three messages, nothing left to run.
    older = [s for s in app.get_state_history(CFG) if len(s.values.get("messages", [])) == 3 and not s.next][0]
    paused = app.invoke(delete_turn("call-2"), older.config)
    fork = {"configurable": {"thread_id": "t1"}}
    out = app.invoke(Command(resume=approvals.approve(paused["__interrupt__"][0].value)), fork)
    message = out["messages"][-1]
    assert message.status == "success", message.content
    assert RAN[-1] == ("delete_file", {"path": "/tmp/x"})
    assert any("time travel" in r["detail"] for r in tampers(ledger))


@pytest.mark.parametrize("edited", [False, True])
def test_create_agent_with_the_middleware_and_a_checkpointer_refuses_a_resume_from_an_edited_checkpoint(
    tmp_path, edited
):
    """`airlock_middleware(..., checkpointer=saver)` checks what an escalated call resumes from, as the ToolNode
    wrapper does (without it, a `create_agent` graph resumed an approved call from an edited checkpoint)."""
    from langchain.agents import create_agent

    path = tmp_path / "cp.sqlite"
    ledger = RedbApprovalLedger(str(tmp_path / "airlock.redb"), audit_key=AUDIT_KEY)
    approvals = InterruptApprovals(KEY, ledger)
    saver = AirlockCheckpointer(SqliteSaver(sqlite3.connect(path, check_same_thread=False)), ledger, KEY)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    model = ScriptedChat(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[{"name": "delete_file", "args": {"path": "/tmp/x"}, "id": "a1"}]),
                AIMessage(content="done"),
            ]
        )
    )
    middleware = airlock_middleware(policy, approvals=approvals, checkpointer=saver)
    agent = create_agent(model, tools=TOOLS, middleware=[middleware], checkpointer=saver)
    paused = agent.invoke({"messages": [HumanMessage(content="please delete /tmp/x")]}, CFG)
    assert RAN == []
    resume = approvals.approve(paused["__interrupt__"][0].value)
    if edited:
        edit_head_with_sqlite(path, saver)
    out = agent.invoke(Command(resume=resume), CFG)
    message = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    if edited:
        assert message.status == "error", message.content
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
        assert RAN == []
        assert tampers(ledger)
    else:
        assert message.status == "success", message.content
        assert RAN == [("delete_file", {"path": "/tmp/x"})]
        assert tampers(ledger) == []


@pytest.mark.parametrize("edited", [False, True])
def test_a_tool_node_inside_a_subgraph_resumes_from_its_committed_checkpoints_and_refuses_an_edit(tmp_path, edited):
    """The call's task runs under a checkpoint map of two namespaces (the parent's and the subgraph's), each
    committed through the same saver: an untouched resume goes through (nothing is refused as unvouched), and
    an edit of the parent's checkpoint is refused."""
    path = tmp_path / "cp.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    ledger, approvals, saver, app = build_in_a_subgraph(tmp_path, SqliteSaver(connection))
    paused = app.invoke(first_turn(), CFG)
    assert RAN == []
    value = paused["__interrupt__"][0].value
    assert value["airlock_approval"]["call"]["checkpoint_ns"].startswith("agent:"), value
    resume = approvals.approve(value)
    if edited:
        edit_head_with_sqlite(path, saver, namespace="")
    out = app.invoke(Command(resume=resume), CFG)
    message = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    if edited:
        assert message.status == "error", message.content
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper", message.content
        assert RAN == []
    else:
        assert message.status == "success", message.content
        assert RAN == [("delete_file", {"path": "/tmp/x"})]
        assert tampers(ledger) == []
