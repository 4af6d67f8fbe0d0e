#!/usr/bin/env python3
"""Drives `airlock mcp` with sequential `read_note` calls over raw JSON-RPC lines, for a profiler to watch the
gateway's process alone (BENCHMARKS.md §8, "Where the gateway's CPU goes").

The upstream is the Python SDK server of `tests/mcp/upstream_server.py`, from the virtual environment the gateway
tests provision (`cargo test -p agent-airlock-tests --test gateway` creates it under `target/tmp/airlock-pyenv/`).
The gateway's store and scratch files are on /dev/shm. Anything after `--` is a command prefix for the gateway:

    # CPU per call (perf stat attached to the gateway after the warm-up):
    scripts/gateway_profile.py --cli target/release/airlock --calls 2000 --perf-stat /tmp/stat.csv
    # instructions per call (callgrind, counters zeroed after the warm-up and dumped after the calls):
    scripts/gateway_profile.py --cli target/release/airlock --calls 300 --callgrind-window -- \\
        valgrind --tool=callgrind --callgrind-out-file=/tmp/gw.%p.out
"""

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sdk_python():
    for python in sorted(glob.glob(os.path.join(ROOT, "target/tmp/airlock-pyenv/*/bin/python"))):
        # The SDK version upstream_server.py is written for (tests/mcp/requirements.txt) has `mcp.server.mcpserver`.
        if glob.glob(os.path.join(os.path.dirname(os.path.dirname(python)), "lib/python3*/site-packages/mcp/server/mcpserver")):
            return python
    sys.exit("no environment with the MCP SDK under target/tmp/airlock-pyenv: "
             "run `cargo test -p agent-airlock-tests --test gateway` once, or pass --python")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=os.path.join(ROOT, "target/release/airlock"))
    parser.add_argument("--python", help="an interpreter with the MCP SDK (default: the tests' environment)")
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--perf-stat", metavar="FILE", help="perf stat's CSV of the calls (task-clock, context switches)")
    parser.add_argument("--callgrind-window", action="store_true", help="zero callgrind's counters before the calls, dump after")
    parser.add_argument("--audit-file", action="store_true", help="the gateway's audit log in an append-only file (`--audit-file`)")
    parser.add_argument("prefix", nargs="*", help="a command prefix for the gateway (after --)")
    args = parser.parse_args()
    python = args.python or sdk_python()
    scratch = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.makedirs(os.path.join(scratch, "notes"))
    with open(os.path.join(scratch, "notes/bench.txt"), "w") as note:
        note.write("a short note")
    with open(os.path.join(scratch, "airlock.toml"), "w") as policy:
        policy.write('version = 1\ndefault = "allow"\n')
    command = args.prefix + [
        args.cli, "--db", os.path.join(scratch, "db.redb"), "mcp", "--policy", os.path.join(scratch, "airlock.toml"),
    ] + (["--audit-file", os.path.join(scratch, "audit.log")] if args.audit_file else []) + [
        "--", python, os.path.join(ROOT, "tests/mcp/upstream_server.py"), os.path.join(scratch, "log"),
        os.path.join(scratch, "notes"),
    ]
    errors = open(os.path.join(scratch, "stderr"), "w")
    gateway = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)

    def send(message):
        gateway.stdin.write((json.dumps(message) + "\n").encode())
        gateway.stdin.flush()

    def answer(request_id):
        while True:
            line = gateway.stdout.readline()
            if not line:
                sys.exit("the gateway closed its output; its stderr is in " + errors.name)
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    def call(count, first_id):
        for request_id in range(first_id, first_id + count):
            send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                  "params": {"name": "read_note", "arguments": {"name": "bench.txt"}}})
            result = answer(request_id)
            if "result" not in result or result["result"].get("isError"):
                sys.exit(f"the call failed: {result}")

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "gateway_profile", "version": "1"}}})
    answer(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    call(args.warm, 10)
    if args.callgrind_window:
        subprocess.run(["callgrind_control", "-z", str(gateway.pid)], check=True, capture_output=True)
    perf = None
    if args.perf_stat:
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "task-clock,context-switches", "-o", args.perf_stat,
                                 "-p", str(gateway.pid)])
        time.sleep(0.3)
    started = time.monotonic()
    call(args.calls, 1_000_000)
    took = time.monotonic() - started
    if perf:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    if args.callgrind_window:
        subprocess.run(["callgrind_control", "-d", str(gateway.pid)], check=True, capture_output=True)
    print(f"{args.calls} calls in {took:.2f} s: {took / args.calls * 1e6:.0f} us a call, end to end", file=sys.stderr)
    gateway.stdin.close()
    gateway.wait()


if __name__ == "__main__":
    main()
