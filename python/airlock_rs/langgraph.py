"""agent-airlock in LangGraph: guard every call a ``ToolNode`` (or ``create_agent``) runs.

```python
node = ToolNode(tools, wrap_tool_call=airlock_wrap_tool_call(policy, approvals=approvals),
                awrap_tool_call=airlock_awrap_tool_call(policy, approvals=approvals))
```

Each call goes through the Rust dispatcher built once per tool from ``tool.tool_call_schema`` (what the
model fills in; injected state, store and runtime are not in it): the policy, ghost arguments stripped at
every depth, strict validation with hints, escalation, rate limits, effects, masking of the result's
content and the audit record. The node's own ``execute`` then runs with the admitted arguments. A refusal
is a ``ToolMessage`` with ``status="error"`` and ``execute`` never runs. A ``Command`` a tool returns passes
through as it is; of a list of messages and commands a tool returns, each message is masked and each command
passes through.

Several calls of one message run in one task (``ToolNode``): each resume value goes to the call it answers,
and an answered call waits until every escalated sibling is answered too (:class:`_TaskAnswers`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Callable

from langchain_core.messages import ToolMessage
from langgraph.types import Command, interrupt

from ._native import InterruptApprovals, SecurityPolicy, ToolFailed, ToolGuard

try:
    import dataclasses

    from langgraph.prebuilt.tool_node import ToolCallRequest as _ToolCallRequest

    # What `_with_tool_call` relies on: a dataclass of exactly these fields in `__dict__`, no `__post_init__`,
    # whose `override(tool_call=...)` is `dataclasses.replace`.
    _PLAIN_REQUEST = (
        dataclasses.is_dataclass(_ToolCallRequest)
        and [f.name for f in dataclasses.fields(_ToolCallRequest)] == ["tool_call", "tool", "state", "runtime"]
        and not hasattr(_ToolCallRequest, "__post_init__")
        and not hasattr(_ToolCallRequest, "__slots__")
    )
except ImportError:  # pragma: no cover - another LangGraph: always `override`
    _ToolCallRequest = None
    _PLAIN_REQUEST = False

__all__ = [
    "airlock_awrap_tool_call",
    "airlock_middleware",
    "airlock_wrap_tool_call",
    "filter_tools",
]

#: The key under which a refusal's details, the stripped arguments and the hints reach the host
#: (``ToolMessage.additional_kwargs``); the model reads ``content``.
METADATA_KEY = "airlock"


def _schema_of(tool: Any) -> dict:
    """The JSON Schema of what the model fills in: ``tool_call_schema`` leaves injected arguments out."""
    schema = getattr(tool, "tool_call_schema", None)
    if isinstance(schema, dict):
        schema = dict(schema)
    elif schema is not None and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    else:
        schema = {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    # Pydantic's titles say nothing the validator needs; the description is the tool's.
    schema.pop("title", None)
    schema.pop("description", None)
    return schema


class _Guards:
    """One ``ToolGuard`` per tool, built the first time the tool is called, then reused."""

    def __init__(self, policy: SecurityPolicy, approvals: InterruptApprovals | None) -> None:
        if not isinstance(policy, SecurityPolicy):
            raise TypeError("policy must be an airlock_rs.SecurityPolicy")
        if approvals is not None and not isinstance(approvals, InterruptApprovals):
            raise TypeError("approvals must be an airlock_rs.InterruptApprovals or None")
        self.policy = policy
        self.approvals = approvals
        self._guards: dict[tuple[str, int], ToolGuard] = {}
        self._lock = threading.Lock()

    def for_tool(self, tool: Any) -> ToolGuard:
        key = (tool.name, id(tool))
        guard = self._guards.get(key)
        if guard is None:
            with self._lock:
                guard = self._guards.get(key)
                if guard is None:
                    schema = json.dumps(_schema_of(tool))
                    guard = ToolGuard(tool.name, tool.description or tool.name, schema, self.policy, self.approvals)
                    self._guards[key] = guard
        return guard


def _call_site(request: Any) -> dict:
    """The thread, checkpoint namespace and checkpoint map the call runs under: what its approval binds."""
    config = _task_config(request)
    configurable = config.get("configurable", {}) if isinstance(config, dict) else {}
    thread = configurable.get("thread_id")
    checkpoint_map = configurable.get("checkpoint_map") or {}
    return {
        "thread_id": None if thread is None else str(thread),
        "checkpoint_ns": str(configurable.get("checkpoint_ns", "") or ""),
        "checkpoint_map": {str(k): str(v) for k, v in checkpoint_map.items()},
    }


#: What a lookup in :class:`_TaskAnswers` gives when there is nothing (``None`` is a value LangGraph never resumes
#: with, but a forged resume value may be anything else).
_NOTHING = object()


class _TaskAnswers:
    """The resume values of one LangGraph task, each routed to the call it answers.

    ``ToolNode`` runs every call of one message in one task, and LangGraph hands that task's resume values to its
    ``interrupt()`` calls by index, one counter for the whole task, in whatever order its calls reach it: a plain
    call, or a sibling that asks first, would take another call's answer. So no call asks ``interrupt()`` for its
    own answer. The task's answers are read where LangGraph keeps them (the task's scratchpad: those kept from
    earlier runs, then the new one), and each goes to the call whose request the ledger says it decides
    (``InterruptApprovals.addressee``); one that decides no call of this task (made up, or for another call) goes
    to an escalated call that has no answer of its own, whose dispatcher refuses it. Before a call resumes or
    pauses, every answer is taken through ``interrupt()`` once, in LangGraph's order (:meth:`drain`): the new one
    is kept with the task, and a pause then raises at the next index, with that index's id.

    A call answered while a sibling's request still waits unanswered does not run: it pauses with that request,
    so that the sibling's pause cannot discard its result (and spend its approval for nothing). Once every
    escalated call of the message has its answer, all of them run in one pass.

    A tool that calls ``interrupt()`` itself, in a task where a guarded call waits for an answer, shares the
    counter and is not supported.
    """

    def __init__(self, scratchpad: Any, approvals: InterruptApprovals, site: dict) -> None:
        # Not the scratchpad itself: it holds the key this is kept under (see `_task_answers`).
        self._kept = list(scratchpad.resume)
        self._fresh = scratchpad.get_null_resume(False)
        self._approvals = approvals
        self._thread = site["thread_id"]
        self._namespace = site["checkpoint_ns"]
        self._prepare_lock = threading.Lock()
        self._lock = threading.Lock()
        self._prepared = False
        self._drained = False
        self._values: list = []
        self._addressees: list = []
        self._claimed: list[bool] = []
        self._waiting: list[dict] = []

    def prepare(self) -> None:
        """Reads the task's answers and the ledger (blocking): which call each answer decides, and which
        requests of this task's calls wait."""
        with self._prepare_lock:
            if self._prepared:
                return
            values = list(self._kept)
            if self._fresh is not None:
                values.append(self._fresh)
            addressees = [self._approvals.addressee(value) for value in values]
            waiting = self._approvals.waiting(self._thread, self._namespace)
            with self._lock:
                self._values = values
                self._addressees = addressees
                self._claimed = [False] * len(values)
                self._waiting = waiting
                self._prepared = True

    def _ours(self, addressee: dict | None) -> bool:
        return (
            addressee is not None
            and addressee.get("thread_id") == self._thread
            and addressee.get("checkpoint_ns") == self._namespace
        )

    def _answered(self, tool_call_id: str) -> bool:
        return any(self._ours(a) and a.get("tool_call_id") == tool_call_id for a in self._addressees)

    def own(self, tool_call_id: str) -> Any:
        """The answer addressed to the call ``tool_call_id`` (taken), or ``_NOTHING``."""
        with self._lock:
            for n, addressee in enumerate(self._addressees):
                if not self._claimed[n] and self._ours(addressee) and addressee.get("tool_call_id") == tool_call_id:
                    self._claimed[n] = True
                    return self._values[n]
        return _NOTHING

    def stray(self) -> Any:
        """The oldest answer that decides no call of this task (taken), or ``_NOTHING``."""
        with self._lock:
            for n, addressee in enumerate(self._addressees):
                if not self._claimed[n] and not self._ours(addressee):
                    self._claimed[n] = True
                    return self._values[n]
        return _NOTHING

    def waiting_for(self, tool_call_id: str) -> dict | None:
        """The interrupt value of the call's request that waits with no answer here, or ``None``."""
        with self._lock:
            for entry in reversed(self._waiting):
                if entry["tool_call_id"] == tool_call_id and not self._answered(tool_call_id):
                    return entry["value"]
        return None

    def unanswered_sibling(self, tool_call_id: str) -> dict | None:
        """The interrupt value of the oldest request of another call of this task that waits with no answer
        here, or ``None``."""
        with self._lock:
            for entry in self._waiting:
                other = entry["tool_call_id"]
                if other != tool_call_id and not self._answered(other):
                    return entry["value"]
        return None

    def drain(self) -> None:
        """Takes every answer through ``interrupt()``, in LangGraph's order, once per task run: the new one is
        then kept with the task (as its ``interrupt()`` keeps it), and the next ``interrupt()`` pauses."""
        with self._lock:
            if self._drained:
                return
            self._drained = True
            for _ in self._values:
                interrupt(None)

    def pause(self, value: Any) -> Any:
        """Pauses the task with ``value`` (raises ``GraphInterrupt``)."""
        self.drain()
        return interrupt(value)


_TASK_ANSWERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TASK_ANSWERS_LOCK = threading.Lock()


def _task_answers(approvals: InterruptApprovals | None, site: dict) -> _TaskAnswers | None:
    """The answers of the task this call runs in, when it is being resumed with any; ``None`` otherwise (or
    outside a graph, or under a LangGraph whose scratchpad is not where this looks: then a pause asks
    ``interrupt()`` directly, as LangGraph's own nodes do).

    Keyed by the task's ``get_null_resume`` (a function LangGraph makes for each task run; its scratchpad takes
    no weak reference), so that the calls of one task run share one.
    """
    if approvals is None:
        return None
    try:
        from langgraph.config import get_config

        scratchpad = get_config()["configurable"].get("__pregel_scratchpad")
        if scratchpad is None:
            return None
        if not scratchpad.resume and scratchpad.get_null_resume(False) is None:
            return None
        key = scratchpad.get_null_resume
        with _TASK_ANSWERS_LOCK:
            answers = _TASK_ANSWERS.get(key)
            if answers is None:
                answers = _TaskAnswers(scratchpad, approvals, site)
                _TASK_ANSWERS[key] = answers
        return answers
    except Exception:  # noqa: BLE001 - outside a graph, or another LangGraph: ask `interrupt()` directly
        return None


def _refused(request: Any, text: str, hints: list[str] | None = None, **detail: Any) -> ToolMessage:
    call = request.tool_call
    content = text
    if hints:
        content = text + "\n" + "\n".join(f"hint: {hint}" for hint in hints)
    return ToolMessage(
        content=content,
        tool_call_id=call.get("id") or "",
        name=call.get("name"),
        status="error",
        additional_kwargs={METADATA_KEY: {"hints": list(hints or []), **detail}},
    )


def _message_from(request: Any, outcome: dict, executed: dict) -> Any:
    """The node's answer: the tool's own message with its content masked, a ``Command`` untouched, a list of
    them (each message masked, each ``Command`` untouched), or the dispatcher's refusal."""
    produced = executed.get("result")
    if isinstance(produced, Command):
        return produced
    stripped = list(outcome.get("stripped_arguments") or [])
    if outcome.get("refusal") is not None or produced is None:
        return _refused(
            request,
            outcome["content"],
            outcome.get("hints"),
            refusal=outcome.get("refusal"),
            stripped_arguments=stripped,
        )
    if isinstance(produced, list):
        return _masked_list(produced, outcome["content"], stripped)
    message = produced
    content = outcome["content"]
    if not isinstance(message.content, str):
        try:
            content = json.loads(content)
        except ValueError:
            pass
    if content == message.content:
        # Nothing masked: the message `execute` just made for this call is ours to annotate (its own dict of
        # extras, made with it).
        extra = message.additional_kwargs
        if isinstance(extra, dict):
            extra[METADATA_KEY] = {"stripped_arguments": stripped}
        else:
            message.additional_kwargs = {METADATA_KEY: {"stripped_arguments": stripped}}
        return message
    return _with_content(message, content, stripped)


def _with_content(message: ToolMessage, content: Any, stripped: list) -> ToolMessage:
    extra = dict(message.additional_kwargs or {})
    extra[METADATA_KEY] = {"stripped_arguments": stripped}
    return message.model_copy(update={"content": content, "additional_kwargs": extra})


def _masked_list(produced: list, masked: str, stripped: list) -> list:
    """A tool's list of messages and commands, each message's content replaced by its masked one (the
    dispatcher masked them together: the array :func:`_result_content` gave it). Should the masked text not
    be that array again (a result too large to mask becomes the notice saying so), every message gets the
    text itself: never a content the masker did not see."""
    positions = [n for n, item in enumerate(produced) if isinstance(item, ToolMessage)]
    if not positions:
        return produced
    try:
        contents = json.loads(masked)
    except ValueError:
        contents = None
    if not isinstance(contents, list) or len(contents) != len(positions):
        contents = [masked] * len(positions)
    answer = list(produced)
    for n, content in zip(positions, contents):
        answer[n] = _with_content(produced[n], content, stripped)
    return answer


def _result_content(result: Any) -> Any:
    """What the dispatcher masks and records of the node's answer: a message's content (a ``Command`` is
    recorded as nothing: it passes through unmasked). A message with ``status="error"`` (the node caught the
    tool's exception: ``handle_tool_errors``) is a failure, recorded as one, its text masked.

    Of a list (a tool may return several messages and commands), the array of its messages' contents, in
    order, masked and recorded as one result (its commands left out, and a list of commands alone recorded as
    nothing, as one command is); any message of it with ``status="error"`` makes it a failure whose text is
    that array as JSON."""
    if isinstance(result, ToolMessage):
        if result.status == "error":
            content = result.content
            raise ToolFailed(content if isinstance(content, str) else json.dumps(content, default=str))
        return result.content
    if isinstance(result, list):
        messages = [item for item in result if isinstance(item, ToolMessage)]
        if not messages:
            return None
        contents = [message.content for message in messages]
        if any(message.status == "error" for message in messages):
            raise ToolFailed(json.dumps(contents, default=str))
        return contents
    return None


def _with_tool_call(request: Any, call: dict) -> Any:
    """``request.override(tool_call=call)``, without its cost: ``override`` is ``dataclasses.replace``, which
    runs ``ToolCallRequest.__init__`` and its ``__setattr__`` (an import and a deprecation check per field).
    For the plain ``ToolCallRequest`` dataclass the same new object is its fields copied with ``tool_call``
    replaced; anything else (a subclass, another LangGraph) goes through ``override``."""
    if type(request) is _ToolCallRequest and _PLAIN_REQUEST:
        copied = object.__new__(_ToolCallRequest)
        fields = copied.__dict__
        fields.update(request.__dict__)
        fields["tool_call"] = call
        return copied
    return request.override(tool_call=call)


class _Call:
    """One call of one tool: what the node passed, and what its ``execute`` produced."""

    def __init__(self, guards: _Guards, request: Any) -> None:
        self.request = request
        self.guard = guards.for_tool(request.tool)
        self.approvals = guards.approvals
        self.site = _call_site(request)
        call = request.tool_call
        self.tool_call_id = call.get("id") or ""
        args = call.get("args")
        self.arguments = args if isinstance(args, dict) else {}

    def admitted_request(self, admitted: dict) -> Any:
        if admitted is self.arguments and admitted is self.request.tool_call.get("args"):
            # Nothing stripped or dropped: the node's own request carries exactly the admitted arguments.
            return self.request
        call = dict(self.request.tool_call)
        call["args"] = admitted
        return _with_tool_call(self.request, call)

    def dispatch(self, run: Callable[[dict], Any], resume: Any = None) -> dict:
        return self.guard.dispatch(self.tool_call_id, self.arguments, run, resume=resume, **self.site)


def _tampered(request: Any, checkpointer: Any, resume: Any) -> ToolMessage | None:
    """A refusal if the call resumes from a checkpoint its commitments say was changed, or that nothing vouches
    for."""
    if resume is None or checkpointer is None:
        return None
    return _state_refusal(request, checkpointer.resume_refusal(_task_config(request)))


async def _atampered(request: Any, checkpointer: Any, resume: Any) -> ToolMessage | None:
    """:func:`_tampered` for the async wrapper: checked on the loop, under the lock its ``aput_writes`` take."""
    if resume is None or checkpointer is None:
        return None
    return _state_refusal(request, await checkpointer.aresume_refusal(_task_config(request)))


def _task_config(request: Any) -> dict:
    """The config of the task the call runs in (its thread, namespace and checkpoint map)."""
    runtime = getattr(request, "runtime", None)
    return getattr(runtime, "config", None) or {}


def _state_refusal(request: Any, refusal: str | None) -> ToolMessage | None:
    """The refusal of a call resumed from a checkpoint found ``"tampered"`` or ``"unverified"``."""
    if refusal is None:
        return None
    if refusal == "tampered":
        kind = "state_tamper"
        why = (
            "the checkpoint this call resumes from is not the one committed when it paused (edited in the store, "
            "or an older one)"
        )
    else:
        kind = "state_unverified"
        why = (
            "nothing vouches for the checkpoint this call resumes from (no commitment recorded for it, gone from the "
            "store, or the ledger or the store could not be read)"
        )
    return _refused(
        request,
        f"refused: {why}; nothing was run",
        ["do not retry this call; tell the user the approval must be asked for again"],
        refusal={"kind": kind, "rule": None, "retry_after_secs": None},
        stripped_arguments=[],
    )


def _answer_before_dispatch(answers: _TaskAnswers, call: _Call) -> Any:
    """The answer a call resumes with, or ``None`` to dispatch it afresh (a plain call, or one escalated for the
    first time); pauses (raises) a call that must wait: its own request unanswered, or a sibling's."""
    mine = answers.own(call.tool_call_id)
    if mine is not _NOTHING:
        if (waiting := answers.unanswered_sibling(call.tool_call_id)) is not None:
            # Run now, and the sibling's pause would discard this call's result.
            return answers.pause(waiting)
        answers.drain()
        return mine
    waiting = answers.waiting_for(call.tool_call_id)
    if waiting is None:
        return None
    # Paused before and not answered: pause again with the same request (no second one is recorded), unless an
    # answer made for no call of this task is waiting, which this call tries (and its dispatcher refuses).
    stray = answers.stray()
    if stray is _NOTHING:
        return answers.pause(waiting)
    answers.drain()
    return stray


def _answer_to_pause(answers: _TaskAnswers | None, value: Any) -> Any:
    """Pauses a call whose dispatcher just recorded a request (raises), or the stray answer it is to try."""
    if answers is None:
        return interrupt(value)
    stray = answers.stray()
    if stray is _NOTHING:
        return answers.pause(value)
    answers.drain()
    return stray


def _unknown_tool(request: Any, policy: SecurityPolicy) -> ToolMessage:
    """A call of a tool the node does not have, refused by the dispatcher (audited, the model's name escaped and
    cut as every refusal echoes it)."""
    call = request.tool_call
    outcome = policy.refuse_unknown_tool(call.get("id") or "", str(call.get("name") or ""), **_call_site(request))
    return _refused(
        request,
        outcome["content"],
        outcome.get("hints"),
        refusal=outcome.get("refusal"),
        stripped_arguments=[],
    )


def airlock_wrap_tool_call(
    policy: SecurityPolicy, *, approvals: InterruptApprovals | None = None, checkpointer: Any = None
) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """A ``wrap_tool_call`` for ``ToolNode`` that guards every call under ``policy``. With ``approvals``, an
    escalated call pauses the graph with ``interrupt()``; without, it is refused. With ``checkpointer`` (the
    graph's ``AirlockCheckpointer``), an escalated call resumed from a tampered checkpoint is refused."""
    guards = _Guards(policy, approvals)

    def wrap_tool_call(request: Any, execute: Callable[[Any], Any]) -> Any:
        if request.tool is None:
            return _unknown_tool(request, guards.policy)
        call = _Call(guards, request)
        executed: dict = {}

        def run(arguments: dict) -> Any:
            try:
                executed["result"] = execute(call.admitted_request(arguments))
            except BaseException as error:  # noqa: BLE001 - re-raised below, after the dispatcher recorded it
                executed["error"] = error
                raise
            return _result_content(executed["result"])

        answers = _task_answers(guards.approvals, call.site)
        resume = None
        if answers is not None:
            answers.prepare()
            resume = _answer_before_dispatch(answers, call)
        if (refused := _tampered(request, checkpointer, resume)) is not None:
            return refused
        outcome = call.dispatch(run, resume)
        if outcome["kind"] == "interrupt":
            # The request is recorded: pause (a stray answer, made for no call of this task, is tried here
            # instead, and refused). A resume arriving here admits the call below.
            resume = _answer_to_pause(answers, outcome["value"])
            if (refused := _tampered(request, checkpointer, resume)) is not None:
                return refused
            outcome = call.dispatch(run, resume)
        if "error" in executed:
            raise executed["error"]
        if outcome["kind"] != "message":
            return _refused(request, "refused: the call could not be decided", refusal=None, stripped_arguments=[])
        return _message_from(request, outcome, executed)

    return wrap_tool_call


#: The threads the async wrapper's blocking work runs in: the dispatcher (its waits on the ledger, and its wait
#: for the tool, which runs on the graph's loop meanwhile) and the checkpoint check. Not the loop's default
#: executor: a sync tool runs there (`run_in_executor(None, ...)`), and a dispatcher blocked in every thread of
#: that pool, each waiting for a tool queued behind it, would never be answered.
_GUARD_THREADS = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="airlock-guard")


async def _in_guard_thread(function: Callable[..., Any], *args: Any) -> Any:
    """``asyncio.to_thread`` (the caller's context copied in), on the guard's own threads."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    return await loop.run_in_executor(_GUARD_THREADS, lambda: context.run(function, *args))


def airlock_awrap_tool_call(
    policy: SecurityPolicy, *, approvals: InterruptApprovals | None = None, checkpointer: Any = None
) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """The ``awrap_tool_call`` counterpart of :func:`airlock_wrap_tool_call`, for ``ainvoke``/``astream``.

    The dispatcher runs in a thread of the guard's own (its waits on the ledger block no event loop, and no
    thread of the loop's default executor, where sync tools run); the node's async ``execute`` runs on the
    graph's loop, in the call's context."""
    guards = _Guards(policy, approvals)

    async def awrap_tool_call(request: Any, execute: Callable[[Any], Any]) -> Any:
        if request.tool is None:
            return await _in_guard_thread(_unknown_tool, request, guards.policy)
        call = _Call(guards, request)
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        executed: dict = {}

        def run(arguments: dict) -> Any:
            async def admitted() -> Any:
                return await execute(call.admitted_request(arguments))

            answered: concurrent.futures.Future = concurrent.futures.Future()

            def start() -> None:
                # A task made inside `context` runs in a copy of it: the node's config, for the tool.
                task = context.run(loop.create_task, admitted())

                def done(task: asyncio.Task) -> None:
                    if task.cancelled():
                        answered.set_exception(asyncio.CancelledError())
                    elif task.exception() is not None:
                        answered.set_exception(task.exception())
                    else:
                        answered.set_result(task.result())

                task.add_done_callback(done)

            loop.call_soon_threadsafe(start)
            try:
                result = answered.result()
            except BaseException as error:  # noqa: BLE001 - re-raised on the loop, after the dispatcher recorded it
                executed["error"] = error
                raise
            executed["result"] = result
            return _result_content(result)

        answers = _task_answers(guards.approvals, call.site)
        resume = None
        if answers is not None:
            await _in_guard_thread(answers.prepare)
            resume = _answer_before_dispatch(answers, call)
        if (refused := await _atampered(request, checkpointer, resume)) is not None:
            return refused
        outcome = await _in_guard_thread(call.dispatch, run, resume)
        if outcome["kind"] == "interrupt":
            resume = _answer_to_pause(answers, outcome["value"])
            if (refused := await _atampered(request, checkpointer, resume)) is not None:
                return refused
            outcome = await _in_guard_thread(call.dispatch, run, resume)
        if "error" in executed:
            raise executed["error"]
        if outcome["kind"] != "message":
            return _refused(request, "refused: the call could not be decided", refusal=None, stripped_arguments=[])
        return _message_from(request, outcome, executed)

    return awrap_tool_call


def _tool_name(tool: Any) -> str:
    """The name a model calls ``tool`` by: a tool object's ``name``; of a dict (a provider's own tool, as
    ``{"type": "web_search_20250305", "name": "web_search"}``, or OpenAI's ``{"type": "function", "function":
    {"name": ...}}``), its ``name`` or its function's; anything else, its ``str``."""
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and "name" in function:
            return str(function["name"])
        if "name" in tool:
            return str(tool["name"])
        return str(tool)
    return str(getattr(tool, "name", tool))


def filter_tools(tools: list, policy: SecurityPolicy) -> list:
    """The tools the policy does not refuse outright (escalated ones kept: a human can approve them), for
    ``model.bind_tools(...)``: tool objects and tools given as dicts alike."""
    return [tool for tool in tools if policy.refuses(_tool_name(tool)) is None]


def airlock_middleware(
    policy: SecurityPolicy, *, approvals: InterruptApprovals | None = None, checkpointer: Any = None
) -> Any:
    """The same guard for ``create_agent(..., middleware=[airlock_middleware(policy)])``: the model is offered
    only the tools the policy does not refuse, and every call runs through the dispatcher. With
    ``checkpointer`` (the ``AirlockCheckpointer`` given to ``create_agent(checkpointer=...)``), an escalated
    call resumed from a checkpoint edited in the store, an older one, or one nothing vouches for is refused, as
    with :func:`airlock_wrap_tool_call`."""
    from langchain.agents.middleware import AgentMiddleware

    wrap = airlock_wrap_tool_call(policy, approvals=approvals, checkpointer=checkpointer)
    awrap = airlock_awrap_tool_call(policy, approvals=approvals, checkpointer=checkpointer)

    class AirlockMiddleware(AgentMiddleware):
        name = "airlock"

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(request.override(tools=filter_tools(list(request.tools), policy)))

        async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return await handler(request.override(tools=filter_tools(list(request.tools), policy)))

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return wrap(request, handler)

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return await awrap(request, handler)

    return AirlockMiddleware()
