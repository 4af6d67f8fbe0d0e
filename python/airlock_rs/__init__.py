"""agent-airlock's Rust core for Python.

``SecurityPolicy`` says which tools are refused, allowed, escalated and rate limited; ``InterruptApprovals``
pauses escalated calls with LangGraph's ``interrupt()`` and admits a resumed call once, only with a human's
approval bound to it; ``RedbApprovalLedger`` and ``PostgresApprovalLedger`` hold the approvals, effect
records and audit log. The LangGraph wrappers are in ``airlock_rs.langgraph``.
"""

from ._native import (
    AirlockError,
    ApprovalError,
    ApprovalKeyError,
    InterruptApprovals,
    LedgerError,
    PolicyError,
    PostgresApprovalLedger,
    RedbApprovalLedger,
    SchemaError,
    SecurityPolicy,
    ToolGuard,
)

__all__ = [
    "AirlockError",
    "ApprovalError",
    "ApprovalKeyError",
    "InterruptApprovals",
    "LedgerError",
    "PolicyError",
    "PostgresApprovalLedger",
    "RedbApprovalLedger",
    "SchemaError",
    "SecurityPolicy",
    "ToolGuard",
]
