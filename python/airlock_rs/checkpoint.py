"""Checkpoint commitments for LangGraph: detect a checkpoint edited in the store between pause and resume.

```python
saver = AirlockCheckpointer(SqliteSaver(connection), ledger, key)
node = ToolNode(tools, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=saver))
graph = builder.compile(checkpointer=saver)
```

``AirlockCheckpointer`` wraps any ``BaseCheckpointSaver``. Each time the saver writes a checkpoint or pending
writes, it reads back what the saver now holds and records a keyed digest of it for
``langgraph:<thread_id>[/<checkpoint_ns>]`` in the ledger (the Rust runtime's ``checkpoint`` module): the
hashes of each serialised part, the checkpoint's fields, every channel value, every pending write (the
app's own included: LangGraph applies them as state; its resume values excepted: those are checked by the
approvals); metadata excluded. Before it writes
again it verifies what the saver holds against the last commitment: a checkpoint edited in the store
(possibly by another process) or an older one resumed (time travel) is recorded as a ``state_tamper`` audit
record, and an escalated call resumed from it is refused (``on_tamper="record"``: recorded only). So is an
escalated call resumed from a checkpoint nothing vouches for: no commitment for its thread (the ledger's were
lost, or the saver was wrapped after the pause), the checkpoint gone from the saver, or the ledger or the saver
unreadable. What could not be verified is never committed to afresh. A checkpoint the graph makes from one found
edited (or one that could not be verified) holds the edit too: it is committed *tainted*, as is every checkpoint
made from it, and an escalated call resumed from any of them is refused as well.
A commitment that cannot be written is a warning, never an exception after the saver already wrote.

Writes through one ``AirlockCheckpointer`` are serialised (a verification must not see another task's
half-written step); two processes writing the same thread at once are not supported.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import warnings
from typing import Any, AsyncIterator, Iterator

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.types import RESUME

from ._native import CheckpointCommitments

__all__ = ["AirlockCheckpointer"]

#: The task id of writes the app makes itself (a resume value, a `Command`'s update) and of the delta writes
#: LangGraph keeps with a checkpoint. LangGraph applies all of them as the checkpoint's state when a run goes
#: on from it, so they are committed to, all but the resume values (`RESUME`), which the approvals check.
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"

#: Verdicts that say the checkpoint's content is not what was committed.
EDITED = ("unknown", "edited")
#: Verdicts that are a tamper when the graph resumes from the checkpoint. `tainted`: as committed, but made
#: from a checkpoint found edited or unverifiable (directly or through its ancestors), so holding that state.
TAMPERS = ("unknown", "edited", "not_head", "tainted")
#: What `_read` gives when the saver could not be read (an error, not an absent checkpoint): verified as
#: `unverified`, never committed to.
_UNREADABLE: Any = object()

#: Verdicts that say nothing vouches for the checkpoint: no commitment for its thread or no checkpoint in the
#: saver (`unrecorded`), or the commitments could not be read (`unverified`). Normal for a new thread's first
#: writes; an escalated call resumed from such a checkpoint is refused all the same (fails closed).
UNVOUCHED = ("unrecorded", "unverified")

#: Verdicts of a parent checkpoint whose child is committed tainted: what the child was made from is not what
#: was committed, or could not be checked, or is itself tainted. A fork from an intact older checkpoint
#: (`not_head`) is not; nor is a thread's first checkpoint, or one made from a checkpoint of a thread that had
#: none committed yet (`unrecorded`: the saver wrapped mid-thread).
TAINTING = ("unknown", "edited", "unverified", "tainted")


class AirlockCheckpointer(BaseCheckpointSaver):
    """``saver``, with every checkpoint it holds committed to in ``ledger`` under ``key`` (raw bytes, at least
    16: the approval key will do, the commitments use their own MAC domain)."""

    def __init__(self, saver: BaseCheckpointSaver, ledger: Any, key: bytes, *, on_tamper: str = "refuse") -> None:
        if on_tamper not in ("refuse", "record"):
            raise ValueError("on_tamper must be `refuse` or `record`")
        super().__init__(serde=saver.serde)
        self.saver = saver
        self.on_tamper = on_tamper
        self.commitments = CheckpointCommitments(key, ledger)
        self._lock = threading.RLock()
        self._alock: asyncio.Lock | None = None
        #: (thread, namespace, checkpoint id) found tampered, and already recorded.
        self.tampered: set[tuple[str, str, str]] = set()
        #: (thread, namespace, checkpoint id) an escalated call resumed from with nothing vouching for it.
        self.unvouched: set[tuple[str, str, str]] = set()

    # ---- what is committed ----

    def _hash(self, value: Any) -> str:
        kind, data = self.saver.serde.dumps_typed(value)
        return hashlib.sha256(kind.encode() + b"\0" + bytes(data)).hexdigest()

    def manifest(self, tup: CheckpointTuple) -> str:
        """The canonical parts of what the saver holds for one checkpoint, as JSON text (hashes only)."""
        checkpoint = tup.checkpoint
        fields = {k: self._hash(v) for k, v in checkpoint.items() if k != "channel_values"}
        channels = {k: self._hash(v) for k, v in (checkpoint.get("channel_values") or {}).items()}
        writes = sorted(
            [str(task_id), str(channel), self._hash(value)]
            for task_id, channel, value in (tup.pending_writes or [])
            if not (task_id == NULL_TASK_ID and channel == RESUME)
        )
        return json.dumps({"checkpoint": fields, "channel_values": channels, "pending_writes": writes})

    @staticmethod
    def _where(config: dict, checkpoint_id: str | None = None) -> tuple[str, str, str | None]:
        configurable = config.get("configurable", {})
        return (
            str(configurable.get("thread_id", "")),
            str(configurable.get("checkpoint_ns", "") or ""),
            checkpoint_id if checkpoint_id is not None else configurable.get("checkpoint_id"),
        )

    @staticmethod
    def _config(thread: str, ns: str, checkpoint_id: str) -> dict:
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}

    def _verdict(
        self, thread: str, ns: str, checkpoint_id: str | None, tup: CheckpointTuple | None, when: str, resumed: bool
    ) -> str:
        """Verifies what the saver holds for a checkpoint; reports an edit, and (when the graph goes on from
        the checkpoint: `resumed`) a checkpoint other than the head. Late writes of a step the graph already
        left go to a checkpoint that is no longer the head: those are not time travel."""
        if checkpoint_id is None or tup is None:
            return "unrecorded"
        if tup is _UNREADABLE:
            return "unverified"
        try:
            verdict = self.commitments.verify(thread, ns, checkpoint_id, self.manifest(tup))
        except Exception as error:  # noqa: BLE001 - the saver's write goes on; the failure is reported
            warnings.warn(f"airlock: the checkpoint commitment cannot be verified: {error}", stacklevel=3)
            return "unverified"
        if verdict in EDITED or (resumed and verdict == "not_head"):
            self._report(thread, ns, checkpoint_id, verdict, when)
        return verdict

    def _report(self, thread: str, ns: str, checkpoint_id: str, verdict: str, when: str) -> None:
        where = (thread, ns, checkpoint_id)
        found = self.unvouched if verdict in UNVOUCHED else self.tampered
        if where in found:
            return
        found.add(where)
        if verdict in EDITED:
            detail = "the checkpoint differs from the one committed (edited in the store)"
        elif verdict == "tainted":
            detail = "the checkpoint was made from one found edited or unverifiable (it holds that state)"
        elif verdict == "unrecorded":
            detail = "nothing vouches for the checkpoint (no commitment for its thread, or it is gone from the store)"
        else:
            detail = "the graph went on from a checkpoint other than the last committed (time travel or a fork)"
        try:
            self.commitments.record_tamper(thread, ns, checkpoint_id, f"{detail}; {when}")
        except Exception as error:  # noqa: BLE001
            warnings.warn(f"airlock: a state_tamper record cannot be written: {error}", stacklevel=3)

    def _commit(
        self,
        thread: str,
        ns: str,
        checkpoint_id: str | None,
        tup: CheckpointTuple | None,
        head: bool,
        tainted: bool = False,
    ) -> None:
        if checkpoint_id is None or tup is None or tup is _UNREADABLE:
            return
        try:
            self.commitments.record(thread, ns, checkpoint_id, self.manifest(tup), head=head, tainted=tainted)
        except Exception as error:  # noqa: BLE001 - never an exception after the saver already wrote
            warnings.warn(f"airlock: the checkpoint commitment cannot be written: {error}", stacklevel=3)

    def resume_refusal(self, config: dict) -> str | None:
        """Why an escalated call running under ``config`` (a task's config: its thread and checkpoint map) may
        not go on: ``"tampered"`` (a checkpoint it resumes from was edited, put in the store by someone else, or
        is older than the head), ``"unverified"`` (nothing vouches for one: see ``UNVOUCHED``; or the config
        names no checkpoint), or ``None``: it may. Records what it finds; with ``on_tamper="record"`` always
        ``None``. Under the sync writes' lock; a graph run with ``ainvoke`` asks :meth:`aresume_refusal`."""
        with self._lock:
            found = [self._resumed_from(where, self._read(self._config(*where))) for where in self._resumed(config)]
        return self._refusal(found)

    async def aresume_refusal(self, config: dict) -> str | None:
        """:meth:`resume_refusal` under the async writes' lock, reading the saver's async methods: a check made
        while another task's ``aput_writes`` has written to the saver but not yet committed would find that
        checkpoint edited."""
        async with self._async_lock():
            found = [
                self._resumed_from(where, await self._aread(self._config(*where))) for where in self._resumed(config)
            ]
        return self._refusal(found)

    @staticmethod
    def _resumed(config: dict) -> list[tuple[str, str, str]]:
        """(thread, namespace, checkpoint id) of each checkpoint a task's config resumes from."""
        configurable = config.get("configurable", {})
        thread = str(configurable.get("thread_id", ""))
        checkpoint_map = configurable.get("checkpoint_map") or {}
        return [(thread, str(ns), str(checkpoint_id)) for ns, checkpoint_id in checkpoint_map.items()]

    def _resumed_from(self, where: tuple[str, str, str], tup: CheckpointTuple | None) -> str | None:
        """What a resume from one checkpoint meets: ``"tampered"``, ``"unverified"`` or ``None``. Records it."""
        if where in self.tampered:
            return "tampered"
        if where in self.unvouched:
            return "unverified"
        verdict = self._verdict(*where, tup, "an escalated call resumed from it", True)
        if verdict == "tainted":
            self._report(*where, verdict, "an escalated call resumed from it")
        if verdict in TAMPERS:
            return "tampered"
        if verdict in UNVOUCHED:
            if verdict == "unrecorded":
                self._report(*where, verdict, "an escalated call resumed from it")
            return "unverified"
        return None

    def _refusal(self, found: list[str | None]) -> str | None:
        """The refusal for what a resume met at each checkpoint it resumes from (none: nothing to verify)."""
        if self.on_tamper == "record":
            return None
        if "tampered" in found:
            return "tampered"
        if "unverified" in found or not found:
            return "unverified"
        return None

    def admits_resume(self, config: dict) -> bool:
        """Whether an escalated call running under ``config`` may go on (``resume_refusal`` is ``None``)."""
        return self.resume_refusal(config) is None

    # ---- the saver, sync ----

    @property
    def config_specs(self) -> list:
        return self.saver.config_specs

    def get_tuple(self, config: dict) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    def list(self, config: dict | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return self.saver.list(config, **kwargs)

    def put(self, config: dict, checkpoint: Any, metadata: Any, new_versions: Any) -> dict:
        thread, ns, parent = self._where(config)
        with self._lock:
            made_from = None
            if parent is not None:
                made_from = self._verdict(thread, ns, parent, self._read(config), "a checkpoint made from it", True)
            written = self.saver.put(config, checkpoint, metadata, new_versions)
            thread, ns, checkpoint_id = self._where(written)
            self._commit(thread, ns, checkpoint_id, self._read(written), head=True, tainted=made_from in TAINTING)
        return written

    def put_writes(self, config: dict, writes: Any, task_id: str, task_path: str = "") -> None:
        thread, ns, checkpoint_id = self._where(config)
        with self._lock:
            # The app's own writes (a resume value) start a run from this checkpoint; a task's are its step's.
            resumed = task_id == NULL_TASK_ID
            verdict = self._verdict(thread, ns, checkpoint_id, self._read(config), "writes added to it", resumed)
            self.saver.put_writes(config, writes, task_id, task_path)
            # An edited checkpoint keeps its old commitment: what it holds now is not vouched for. Nor is what
            # could not be verified (the commitments or the saver unreadable): committing it would vouch for an
            # edit made meanwhile, and the next verification reports what changed instead.
            if verdict not in EDITED and verdict != "unverified":
                self._commit(thread, ns, checkpoint_id, self._read(config), head=False)

    def _read(self, config: dict) -> CheckpointTuple | None:
        """What the saver holds for the checkpoint `config` names; ``None`` if none, ``_UNREADABLE`` if the
        saver failed (a warning, never an exception after the saver already wrote)."""
        thread, ns, checkpoint_id = self._where(config)
        if checkpoint_id is None:
            return None
        try:
            return self.saver.get_tuple(self._config(thread, ns, checkpoint_id))
        except Exception as error:  # noqa: BLE001
            warnings.warn(f"airlock: the checkpoint cannot be read back: {error}", stacklevel=3)
            return _UNREADABLE

    def delete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self.saver.get_next_version(current, channel)

    # ---- the saver, async ----

    def _async_lock(self) -> asyncio.Lock:
        if self._alock is None:
            self._alock = asyncio.Lock()
        return self._alock

    async def aget_tuple(self, config: dict) -> CheckpointTuple | None:
        return await self.saver.aget_tuple(config)

    async def alist(self, config: dict | None, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        async for item in self.saver.alist(config, **kwargs):
            yield item

    async def _aread(self, config: dict) -> CheckpointTuple | None:
        thread, ns, checkpoint_id = self._where(config)
        if checkpoint_id is None:
            return None
        try:
            return await self.saver.aget_tuple(self._config(thread, ns, checkpoint_id))
        except Exception as error:  # noqa: BLE001
            warnings.warn(f"airlock: the checkpoint cannot be read back: {error}", stacklevel=2)
            return _UNREADABLE

    async def aput(self, config: dict, checkpoint: Any, metadata: Any, new_versions: Any) -> dict:
        thread, ns, parent = self._where(config)
        async with self._async_lock():
            made_from = None
            if parent is not None:
                held = await self._aread(config)
                made_from = self._verdict(thread, ns, parent, held, "a checkpoint made from it", True)
            written = await self.saver.aput(config, checkpoint, metadata, new_versions)
            thread, ns, checkpoint_id = self._where(written)
            tainted = made_from in TAINTING
            self._commit(thread, ns, checkpoint_id, await self._aread(written), head=True, tainted=tainted)
        return written

    async def aput_writes(self, config: dict, writes: Any, task_id: str, task_path: str = "") -> None:
        thread, ns, checkpoint_id = self._where(config)
        async with self._async_lock():
            resumed = task_id == NULL_TASK_ID
            verdict = self._verdict(thread, ns, checkpoint_id, await self._aread(config), "writes added to it", resumed)
            await self.saver.aput_writes(config, writes, task_id, task_path)
            if verdict not in EDITED and verdict != "unverified":
                self._commit(thread, ns, checkpoint_id, await self._aread(config), head=False)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.saver.adelete_thread(thread_id)
