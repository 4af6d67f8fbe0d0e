"""An MCP upstream for the sandbox tests (`airlock mcp --sandbox`), speaking JSON-RPC on stdio by hand (the
standard library only): its one tool tries what a sandbox is to stop and reports what happened.

Usage: python3 tests/mcp/sandbox_upstream.py

Tools:
- `probe {port, elsewhere, allowed, write_inside, write_outside, processes}`: connects to 127.0.0.1:`port`, reads
  the files `elsewhere` and `allowed`, writes the files `write_inside` and `write_outside`, reads its own
  `NoNewPrivs` and limits from `/proc/self`, reads the gateway's (its parent's) `/proc/PID/environ`, and starts
  `processes` child processes at once; returns a JSON object: each attempt `"ok"` (or, for reads, `"ok:"` and
  the text) or `"denied: <exception>"`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

TOOLS = [
    {"name": "probe", "description": "Try what a sandbox is to stop.",
     "inputSchema": {"type": "object", "properties": {
         "port": {"type": "integer"}, "elsewhere": {"type": "string"}, "allowed": {"type": "string"},
         "write_inside": {"type": "string"}, "write_outside": {"type": "string"},
         "processes": {"type": "integer"}}}},
]


def write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def reply(id_: object, result: object) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}))


def attempt(action) -> str:
    try:
        result = action()
    except Exception as error:  # noqa: BLE001 - what failed is the report
        return f"denied: {type(error).__name__}: {error}"
    return "ok" if result is None else f"ok:{result}"


def connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read().strip()


def create(path: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write("written by the upstream\n")


def status_line(name: str) -> str:
    for line in read("/proc/self/status").splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise LookupError(name)


def limit(name: str) -> str:
    for line in read("/proc/self/limits").splitlines():
        if line.startswith(name):
            return " ".join(line[len(name):].split()[:2])
    raise LookupError(name)


def gateway_environ() -> str:
    with open(f"/proc/{os.getppid()}/environ", "rb") as file:
        names = [entry.split(b"=", 1)[0].decode() for entry in file.read().split(b"\0") if entry]
    return "AIRLOCK_ seen" if any(name.startswith("AIRLOCK_") for name in names) else f"{len(names)} names"


def spawn(count: int) -> None:
    children = []
    try:
        for _ in range(count):
            children.append(subprocess.Popen(["/bin/sleep", "5"]))
    finally:
        for child in children:
            child.kill()
            child.wait()


def probe(arguments: dict) -> dict:
    report = {
        "connect": attempt(lambda: connect(int(arguments["port"]))),
        "read_elsewhere": attempt(lambda: read(arguments["elsewhere"])),
        "read_allowed": attempt(lambda: read(arguments["allowed"])),
        "write_inside": attempt(lambda: create(arguments["write_inside"])),
        "write_outside": attempt(lambda: create(arguments["write_outside"])),
        "no_new_privs": attempt(lambda: status_line("NoNewPrivs")),
        "open_files": attempt(lambda: limit("Max open files")),
        "address_space": attempt(lambda: limit("Max address space")),
        "processes_limit": attempt(lambda: limit("Max processes")),
        "gateway_environ": attempt(gateway_environ),
    }
    if arguments.get("processes"):
        report["spawn"] = attempt(lambda: spawn(int(arguments["processes"])))
    return report


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        id_ = message.get("id")
        if id_ is None or method is None:
            continue
        if method == "initialize":
            reply(id_, {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                        "serverInfo": {"name": "sandbox-probe", "version": "0"}})
        elif method == "tools/list":
            reply(id_, {"tools": TOOLS})
        elif method == "tools/call":
            report = probe(message["params"].get("arguments") or {})
            reply(id_, {"content": [{"type": "text", "text": json.dumps(report)}], "isError": False})
        elif method == "ping":
            reply(id_, {})
        else:
            write(json.dumps({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no such method"}}))


if __name__ == "__main__":
    main()
