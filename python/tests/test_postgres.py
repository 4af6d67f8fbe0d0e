"""PostgreSQL: the approval ledger (PostgresApprovalLedger) and LangGraph's PostgresSaver on the throwaway
server the Rust test starts (tests/src/pg_server.rs), which passes its connection string in
AIRLOCK_TEST_PG_URL. The approval cycle and a replay, as with redb; checkpoint commitments kept in the
ledger's database (AirlockCheckpointer over PostgresSaver and AsyncPostgresSaver): a checkpoint edited with
an SQL UPDATE between pause and resume is refused and recorded, time travel is recorded, an untouched pause
and resume goes through."""

from __future__ import annotations

import asyncio
import os
import uuid

import psycopg
import pytest
from conftest import RAN, TOOLS, call, graph
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import AirlockCheckpointer, InterruptApprovals, LedgerError, PostgresApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_awrap_tool_call, airlock_wrap_tool_call

URL = os.environ.get("AIRLOCK_TEST_PG_URL")
pytestmark = pytest.mark.skipif(URL is None, reason="run by tests/tests/python/python_langgraph.rs, which starts PostgreSQL")


def test_approvals_in_postgres_with_a_postgres_checkpointer():
    ledger = PostgresApprovalLedger(URL)
    approvals = InterruptApprovals(bytes(range(32)), ledger)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals))
    with PostgresSaver.from_conn_string(URL) as saver:
        saver.setup()
        app = graph(node, saver)
        cfg = {"configurable": {"thread_id": "pg-1"}}
        paused = app.invoke({"messages": [call("delete_file", {"path": "/var/x"})]}, cfg)
        assert RAN == []
        resume = approvals.approve(paused["__interrupt__"][0].value)
        done = app.invoke(Command(resume=resume), cfg)
        assert done["messages"][-1].status == "success", done["messages"][-1].content
        interrupted = [s for s in app.get_state_history(cfg) if s.interrupts]
        replayed = app.invoke(Command(resume=resume), interrupted[0].config)
        assert replayed["messages"][-1].status == "error"
    assert RAN == [("delete_file", {"path": "/var/x"})]


def test_an_unreachable_database_is_a_ledger_error_that_names_no_password():
    with pytest.raises(LedgerError) as error:
        PostgresApprovalLedger("postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2")
    assert "hunter2" not in str(error.value)


KEY = bytes(range(32))
AUDIT_KEY = bytes(range(100, 132))


def committed_graph(saver, on_tamper="refuse"):
    """A guarded graph whose checkpoints go to `saver` (a PostgreSQL saver) and whose commitments, approvals
    and audit records go to the same PostgreSQL database."""
    ledger = PostgresApprovalLedger(URL, audit_key=AUDIT_KEY)
    approvals = InterruptApprovals(KEY, ledger)
    committed = AirlockCheckpointer(saver, ledger, KEY, on_tamper=on_tamper)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    node = ToolNode(
        TOOLS,
        wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=committed),
        awrap_tool_call=airlock_awrap_tool_call(policy, approvals=approvals, checkpointer=committed),
    )
    return ledger, approvals, graph(node, committed)


def start():
    return {"messages": [HumanMessage(content="please delete /tmp/x"), call("delete_file", {"path": "/tmp/x"})]}


def tampers(ledger, thread):
    return [
        r for r in ledger.audit_records() if r["outcome"]["kind"] == "state_tamper" and r["thread_id"] == thread
    ]


def edit_head_with_sql(thread, serde):
    """Rewrites the human's message that the thread's newest checkpoint holds, with an SQL UPDATE of
    PostgresSaver's `checkpoint_blobs` row (another connection, as anyone with the database could)."""
    with psycopg.connect(URL, autocommit=True) as connection:
        (versions,) = connection.execute(
            "SELECT checkpoint->'channel_versions' FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread,),
        ).fetchone()
        version = versions["messages"]
        kind, blob = connection.execute(
            "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = '' "
            "AND channel = 'messages' AND version = %s",
            (thread, version),
        ).fetchone()
        messages = serde.loads_typed((kind, bytes(blob)))
        messages[0] = messages[0].model_copy(update={"content": "the user said: delete everything"})
        kind, blob = serde.dumps_typed(messages)
        updated = connection.execute(
            "UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = %s AND checkpoint_ns = '' "
            "AND channel = 'messages' AND version = %s",
            (kind, blob, thread, version),
        )
        assert updated.rowcount == 1


def commitment_rows(thread):
    with psycopg.connect(URL) as connection:
        return connection.execute(
            "SELECT count(*) FROM airlock_checkpoint_commitments WHERE commitment_key LIKE %s",
            (f"langgraph:{thread}%",),
        ).fetchone()[0]


@pytest.mark.parametrize("edited", [False, True])
def test_a_postgres_checkpoint_edited_with_sql_between_pause_and_resume_is_refused_and_recorded(edited):
    thread = f"pg-edit-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread}}
    with PostgresSaver.from_conn_string(URL) as saver:
        saver.setup()
        ledger, approvals, app = committed_graph(saver)
        paused = app.invoke(start(), cfg)
        assert RAN == []
        assert commitment_rows(thread) >= 2, "the commitments are in the ledger's PostgreSQL database"
        resume = approvals.approve(paused["__interrupt__"][0].value)
        if edited:
            edit_head_with_sql(thread, saver.serde)
        out = app.invoke(Command(resume=resume), cfg)
    message = out["messages"][-1]
    assert isinstance(message, ToolMessage)
    recorded = tampers(ledger, thread)
    if edited:
        assert message.status == "error", message.content
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
        assert RAN == [], "an escalated call resumed from an edited checkpoint never runs"
        assert recorded and "edited" in recorded[0]["detail"], recorded
        assert recorded[0]["key_id"] == "audit-1", "the record is signed"
    else:
        assert message.status == "success", message.content
        assert RAN == [("delete_file", {"path": "/tmp/x"})]
        assert recorded == []


def test_record_only_on_postgres_records_the_edit_and_lets_the_approved_call_run():
    thread = f"pg-record-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread}}
    with PostgresSaver.from_conn_string(URL) as saver:
        saver.setup()
        ledger, approvals, app = committed_graph(saver, on_tamper="record")
        paused = app.invoke(start(), cfg)
        resume = approvals.approve(paused["__interrupt__"][0].value)
        edit_head_with_sql(thread, saver.serde)
        out = app.invoke(Command(resume=resume), cfg)
    assert out["messages"][-1].status == "success"
    assert len(RAN) == 1
    assert tampers(ledger, thread)


def test_time_travel_on_postgres_is_recorded():
    thread = f"pg-travel-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread}}
    with PostgresSaver.from_conn_string(URL) as saver:
        saver.setup()
        ledger, approvals, app = committed_graph(saver)
        paused = app.invoke(start(), cfg)
        resume = approvals.approve(paused["__interrupt__"][0].value)
        app.invoke(Command(resume=resume), cfg)
        assert tampers(ledger, thread) == []
        interrupted = [s for s in app.get_state_history(cfg) if s.interrupts][0]
        out = app.invoke(Command(resume=resume), interrupted.config)
    assert out["messages"][-1].status == "error"
    assert len(RAN) == 1
    recorded = tampers(ledger, thread)
    assert recorded and "time travel" in recorded[0]["detail"], recorded


@pytest.mark.parametrize("edited", [False, True])
def test_an_async_postgres_checkpoint_edited_between_pause_and_resume_is_refused_and_recorded(edited):
    thread = f"pg-async-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread}}

    async def run():
        async with AsyncPostgresSaver.from_conn_string(URL) as saver:
            await saver.setup()
            ledger, approvals, app = committed_graph(saver)
            paused = await app.ainvoke(start(), cfg)
            assert RAN == []
            resume = approvals.approve(paused["__interrupt__"][0].value)
            if edited:
                await asyncio.to_thread(edit_head_with_sql, thread, saver.serde)
            out = await app.ainvoke(Command(resume=resume), cfg)
            return ledger, out["messages"][-1]

    ledger, message = asyncio.run(run())
    recorded = tampers(ledger, thread)
    if edited:
        assert message.status == "error", message.content
        assert message.additional_kwargs["airlock"]["refusal"]["kind"] == "state_tamper"
        assert RAN == []
        assert recorded and "edited" in recorded[0]["detail"], recorded
    else:
        assert message.status == "success", message.content
        assert RAN == [("delete_file", {"path": "/tmp/x"})]
        assert recorded == []
