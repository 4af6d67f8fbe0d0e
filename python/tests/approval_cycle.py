"""One side of the cross-process approval cycle (test_approvals.py): `pause` runs the graph until the
escalated call interrupts and prints the request's id; `resume` resumes the same thread, in a new process,
with the resume value `airlock approve` printed, and prints what happened."""

from __future__ import annotations

import json
import sqlite3
import sys

from conftest import RAN, TOOLS, call, graph
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from airlock_rs import AirlockCheckpointer, InterruptApprovals, RedbApprovalLedger, SecurityPolicy
from airlock_rs.langgraph import airlock_wrap_tool_call


def main() -> None:
    mode, db, sqlite_path, key_file = sys.argv[1:5]
    ledger = RedbApprovalLedger(db)
    key = bytes.fromhex(open(key_file).read().strip())
    approvals = InterruptApprovals(key, ledger)
    policy = SecurityPolicy(escalate_tools={"delete_file": "deletes a file"}, approval_ledger=ledger)
    saver = SqliteSaver(sqlite3.connect(sqlite_path, check_same_thread=False))
    # `committed`: the checkpoints go through AirlockCheckpointer, its commitments in the same ledger file.
    committed = AirlockCheckpointer(saver, ledger, key) if "--committed" in sys.argv else None
    node = ToolNode(TOOLS, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=committed))
    app = graph(node, committed or saver)
    config = {"configurable": {"thread_id": "cycle"}}
    if mode == "pause":
        out = app.invoke({"messages": [call("delete_file", {"path": "/srv/report.txt"})]}, config)
        value = out["__interrupt__"][0].value
        print(json.dumps({"request_id": value["airlock_approval"]["request_id"], "ran": RAN}))
    else:
        out = app.invoke(Command(resume=json.loads(sys.argv[5])), config)
        message = out["messages"][-1]
        refusal = (message.additional_kwargs.get("airlock") or {}).get("refusal") or {}
        print(json.dumps({"status": message.status, "content": message.content, "ran": RAN, "refusal": refusal.get("kind")}))


if __name__ == "__main__":
    main()
