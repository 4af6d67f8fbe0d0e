"""What guarding a LangGraph tool call costs: airlock_rs beside the pure-Python agent_airlock 0.10.26 and a bare
ToolNode (BENCHMARKS.md, "LangGraph in Python"). Not a test: run it by hand in the environment of
python/requirements.txt with the wheel installed (README, "LangGraph (Python)"):

    python python/examples/bench.py [--calls 2000]

Three measures, each the median of five runs of `--calls` calls:

* the guard alone, per call: `ToolGuard.dispatch` (policy, ghost stripping, strict validation, rate limit,
  masking, FFI both ways: the arguments dict in, the admitted dict to the callback, its result back, the
  outcome out) minus calling the same callback directly; and the peer's
  `@Airlock(policy=...)` decorated function minus the bare function;
* the wrapper as ToolNode calls it, per call: `airlock_wrap_tool_call(request, execute)` with a
  `ToolCallRequest` and an `execute` that runs the function and builds the `ToolMessage` (as the node
  does), beside that `execute` alone and an `execute` running the peer's decorated function;
* the ToolNode call, per call: a one-node graph (START -> tools) invoked with one tool call, bare, with
  `airlock_wrap_tool_call`, and with the peer's decorated function as the tool.

Both guards get the same policy (a deny glob, a rate limit that never runs out) and the same arguments,
one of them undeclared (a ghost both strip). Audit and ledger are off for both: the peer has none in this
configuration, and ours would add a durable write per call (measured in BENCHMARKS.md §2 already).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

ARGS = {"query": "rate limits", "limit": 3, "verbose": True}


def search_docs(query: str, limit: int) -> str:
    """Search the documentation."""
    return f"{limit} hits for {query}"


def per_call(fn, calls: int) -> float:
    """The median over five runs of the mean seconds per call of `fn`."""
    fn()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls)
    return statistics.median(runs)


def graph_of(tool, **wrappers):
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([tool], **wrappers))
    builder.add_edge(START, "tools")
    return builder.compile()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    calls = parser.parse_args().calls

    import logging

    # The peer logs every stripped argument; printing that would be measured too.
    logging.disable(logging.CRITICAL)
    import agent_airlock
    from agent_airlock import Airlock, AirlockConfig
    from agent_airlock import SecurityPolicy as PeerPolicy
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from airlock_rs import SecurityPolicy, ToolGuard
    from airlock_rs.langgraph import _schema_of, airlock_wrap_tool_call

    rules = {"denied_tools": ["drop_*"], "rate_limits": {"search_*": "100000000/minute"}}
    ours = SecurityPolicy(**rules)
    peer = PeerPolicy(**rules)

    tool = StructuredTool.from_function(search_docs)
    guard = ToolGuard("search_docs", tool.description, json.dumps(_schema_of(tool)), ours)
    arguments = dict(ARGS)

    def callback(admitted: dict) -> str:
        # The admitted arguments arrive as a dict, the result goes back as it is (converted in Rust).
        return search_docs(**admitted)

    # As in BENCHMARKS.md §1: the peer's audit log off (ours is off too: no ledger given).
    peer_guarded = Airlock(config=AirlockConfig(enable_audit_log=False), policy=peer)(search_docs)

    def direct() -> None:
        callback({"query": "rate limits", "limit": 3})

    figures = {
        "bare function": per_call(lambda: search_docs("rate limits", 3), calls),
        "bare callback": per_call(direct, calls),
        "airlock_rs ToolGuard.dispatch": per_call(lambda: guard.dispatch("c1", arguments, callback), calls),
        "agent_airlock @Airlock": per_call(lambda: peer_guarded(**ARGS), calls),
    }
    ours_guard = figures["airlock_rs ToolGuard.dispatch"] - figures["bare callback"]
    peer_guard = figures["agent_airlock @Airlock"] - figures["bare function"]

    # The wrapper alone, as ToolNode calls it: a request and the node's `execute` (here: run the tool
    # function and wrap its result in a ToolMessage, as the node does).
    def request_of(args: dict) -> ToolCallRequest:
        return ToolCallRequest(
            tool_call={"name": "search_docs", "args": args, "id": "c1", "type": "tool_call"},
            tool=tool,
            state={"messages": []},
            runtime=None,
        )

    def execute(request: ToolCallRequest) -> ToolMessage:
        return ToolMessage(content=search_docs(**request.tool_call["args"]), tool_call_id="c1", name="search_docs")

    def execute_peer(request: ToolCallRequest) -> ToolMessage:
        return ToolMessage(content=peer_guarded(**request.tool_call["args"]), tool_call_id="c1", name="search_docs")

    wrap = airlock_wrap_tool_call(ours)
    declared = request_of({"query": "rate limits", "limit": 3})
    with_ghost = request_of(ARGS)
    wrapped = {
        "execute (bare node call)": per_call(lambda: execute(declared), calls),
        "airlock_wrap_tool_call(request, execute)": per_call(lambda: wrap(with_ghost, execute), calls),
        "execute with the @Airlock function": per_call(lambda: execute_peer(with_ghost), calls),
    }
    figures.update(wrapped)

    message = {"messages": [AIMessage(content="", tool_calls=[{"name": "search_docs", "args": ARGS, "id": "c1"}])]}
    bare = graph_of(StructuredTool.from_function(search_docs))
    # The bare node would pass the ghost to a function that takes none: give it the declared arguments only.
    bare_message = {
        "messages": [
            AIMessage(
                content="", tool_calls=[{"name": "search_docs", "args": {"query": "rate limits", "limit": 3}, "id": "c1"}]
            )
        ]
    }
    guarded = graph_of(StructuredTool.from_function(search_docs), wrap_tool_call=airlock_wrap_tool_call(ours))
    peer_tool = StructuredTool.from_function(peer_guarded, name="search_docs", description="Search the documentation.")
    peer_graph = graph_of(peer_tool)
    node_calls = max(calls // 10, 50)
    nodes = {
        "bare ToolNode": per_call(lambda: bare.invoke(bare_message), node_calls),
        "ToolNode + airlock_wrap_tool_call": per_call(lambda: guarded.invoke(message), node_calls),
        "ToolNode + @Airlock tool": per_call(lambda: peer_graph.invoke(message), node_calls),
    }

    print(f"agent_airlock {agent_airlock.__version__}; {calls} calls per run (guard), {node_calls} (graph)")
    for name, seconds in {**figures, **nodes}.items():
        print(f"{name:40s} {seconds * 1e6:10.1f} µs/call")
    print(f"{'guard cost, airlock_rs':40s} {ours_guard * 1e6:10.1f} µs/call")
    print(f"{'guard cost, agent_airlock':40s} {peer_guard * 1e6:10.1f} µs/call")
    if ours_guard > 0:
        print(f"{'ratio (peer / ours)':40s} {peer_guard / ours_guard:10.1f}×")
    bare_execute = wrapped["execute (bare node call)"]
    print(f"{'wrapper added, airlock_rs':40s} {(wrapped['airlock_wrap_tool_call(request, execute)'] - bare_execute) * 1e6:10.1f} µs/call")
    print(f"{'wrapper added, agent_airlock':40s} {(wrapped['execute with the @Airlock function'] - bare_execute) * 1e6:10.1f} µs/call")
    print(f"{'ToolNode added, airlock_rs':40s} {(nodes['ToolNode + airlock_wrap_tool_call'] - nodes['bare ToolNode']) * 1e6:10.1f} µs/call")
    print(f"{'ToolNode added, agent_airlock':40s} {(nodes['ToolNode + @Airlock tool'] - nodes['bare ToolNode']) * 1e6:10.1f} µs/call")


if __name__ == "__main__":
    main()
