"""A LangGraph agent whose tools come from `airlock mcp` (the gateway) through langchain-mcp-adapters, in front of
the upstream server `tests/mcp/upstream_server.py`. The agent's chat model is scripted (langchain-core's
`GenericFakeChatModel`, no model is downloaded): it asks for the tool calls a model would, and the graph's
`ToolNode` runs them through the gateway. Each claim is checked against the upstream's own call log.

Usage: python3 tests/mcp/langgraph_client.py <config.json>

Runs in the environment of tests/mcp/requirements-langgraph.txt (MCP SDK 1.x, as langchain-mcp-adapters needs),
so it shares no code with harness.py (SDK 2). The last line printed is `N passed, N failed`; the exit status is
0 only when every check passed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

COUNTS = {"passed": 0, "failed": 0}


def check(name: str, ok: bool, detail: Any = "") -> None:
    """Records one check's outcome."""
    if ok:
        COUNTS["passed"] += 1
        print(f"ok     {name}", flush=True)
    else:
        COUNTS["failed"] += 1
        print(f"FAILED {name}: {detail}", flush=True)


class ScriptedModel(GenericFakeChatModel):
    """A chat model that answers from a script; binding tools changes nothing (the script names them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedModel":  # noqa: ARG002 - the script decides
        return self


def upstream_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def agent(model: ScriptedModel, tools: list[Any]) -> Any:
    """The usual tool-calling graph: the model, then its tool calls through a ToolNode, until it stops asking."""

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", call_model)
    # A refused call comes back as an error result: the model reads it, as it would any tool error.
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    graph.add_edge("agent", END)
    return graph.compile()


async def main(config: dict[str, Any]) -> None:
    log = Path(config["log"])
    notes = Path(config["notes"])
    args = ["--db", config["db"], "mcp", "--policy", config["policy"], "--", *config["upstream"]]
    client = MultiServerMCPClient({"airlock": {"transport": "stdio", "command": config["airlock"], "args": args}})
    async with client.session("airlock") as session:
        tools = await load_mcp_tools(session)
        names = sorted(tool.name for tool in tools)
        check("the agent is offered the allowed tools only", "delete_everything" not in names and "write_note" in names, names)

        script = iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "id": "call_ok",
                            "name": "write_note",
                            # `mode` is an argument the tool does not declare: stripped before the upstream.
                            "args": {"name": "lg.txt", "text": "from langgraph", "mode": "0777"},
                        },
                        {"id": "call_denied", "name": "write_note", "args": {"name": "id.key", "text": "secret"}},
                    ],
                ),
                AIMessage(content="done"),
            ]
        )
        graph = agent(ScriptedModel(messages=script), tools)
        final = await graph.ainvoke({"messages": [HumanMessage(content="write the notes")]})
        results = {m.tool_call_id: m for m in final["messages"] if isinstance(m, ToolMessage)}

        allowed = results.get("call_ok")
        check(
            "an allowed tool call goes through the gateway and runs",
            allowed is not None and allowed.status != "error" and "wrote 14 characters to lg.txt" in str(allowed.content),
            allowed,
        )
        check(
            "its effect happened upstream",
            (notes / "lg.txt").exists() and (notes / "lg.txt").read_text(encoding="utf-8") == "from langgraph",
        )
        denied = results.get("call_denied")
        check(
            "a call the policy denies is refused, and the model reads why",
            denied is not None and denied.status == "error" and "never write key files" in str(denied.content),
            denied,
        )
        logged = upstream_log(log)
        check(
            "the upstream received exactly the allowed call, without the undeclared argument",
            logged == [{"tool": "write_note", "arguments": {"name": "lg.txt", "text": "from langgraph"}}],
            logged,
        )
        check("the graph ran to the model's last answer", final["messages"][-1].content == "done", final["messages"][-1])


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        config = json.load(file)
    try:
        asyncio.run(main(config))
    except Exception:  # noqa: BLE001 - reported, then counted
        COUNTS["failed"] += 1
        print(f"FAILED the agent run\n{traceback.format_exc()}", flush=True)
    passed, failed = COUNTS["passed"], COUNTS["failed"]
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(0 if failed == 0 and passed > 0 else 1)
