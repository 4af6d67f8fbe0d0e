"""agent-airlock's Rust core for Python.

``SecurityPolicy`` says which tools are refused, allowed, escalated and rate limited; ``InterruptApprovals``
pauses escalated calls with LangGraph's ``interrupt()`` and admits a resumed call once, only with a human's
approval bound to it (an ``OperatorKey`` is an approver's own credential, which signs each decision);
``RedbApprovalLedger`` and ``PostgresApprovalLedger`` hold the approvals, effect
records and audit log. The LangGraph wrappers are in ``airlock_rs.langgraph``.
"""

from ._native import (
    AirlockError,
    ApprovalError,
    CheckpointCommitments,
    ApprovalKeyError,
    InterruptApprovals,
    LedgerError,
    OperatorKey,
    PolicyError,
    PostgresApprovalLedger,
    RedbApprovalLedger,
    SchemaError,
    SecurityPolicy,
    ToolGuard,
)
from .checkpoint import AirlockCheckpointer

__all__ = [
    "AirlockCheckpointer",
    "AirlockError",
    "ApprovalError",
    "ApprovalKeyError",
    "CheckpointCommitments",
    "InterruptApprovals",
    "LedgerError",
    "OperatorKey",
    "PolicyError",
    "PostgresApprovalLedger",
    "RedbApprovalLedger",
    "SchemaError",
    "SecurityPolicy",
    "ToolGuard",
]
