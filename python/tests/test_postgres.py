"""PostgreSQL: the approval ledger (PostgresApprovalLedger) and LangGraph's PostgresSaver on the throwaway
server the Rust test starts (tests/src/pg_server.rs), which passes its connection string in
AIRLOCK_TEST_PG_URL. The approval cycle and a replay, as with redb."""

from __future__ import annotations

import os

import pytest
from conftest import RAN, TOOLS, call, graph
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import InterruptApprovals, LedgerError, PostgresApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_wrap_tool_call

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
