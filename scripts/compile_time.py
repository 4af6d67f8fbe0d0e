#!/usr/bin/env python3
"""Compile time of 100 tools: `#[airlock_tool]` vs rmcp's `#[tool]`, side by side in one run.

Generates two crates in a scratch folder, builds their dependencies once, then rebuilds only the tools
crate (touching its source, CARGO_INCREMENTAL=0) several times each, alternating, and reports the median
and spread of each and their ratio. Usage: python3 scripts/compile_time.py [--tools 100] [--runs 5]
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
RMCP_VERSION = "=3.11.0"


def airlock_source(n: int) -> str:
    out = ["//! 100 guarded tools.", "#![allow(missing_docs)]", "use agent_airlock::airlock_tool;", ""]
    for i in range(n):
        out.append(f"""/// Tool number {i}: looks something up.
#[airlock_tool(rate = "10/minute")]
pub fn tool_{i}(
    /// The query.
    query: String,
    /// How many results.
    limit: Option<u32>,
    /// Whether to include archived rows.
    archived: bool,
) -> String {{
    format!("{{query}} {{limit:?}} {{archived}} {i}")
}}
""")
    return "\n".join(out)


def rmcp_source(n: int) -> str:
    out = [
        "//! 100 rmcp tools.",
        "#![allow(missing_docs, dead_code)]",
        "use rmcp::handler::server::router::tool::ToolRouter;",
        "use rmcp::handler::server::wrapper::Parameters;",
        "use rmcp::{schemars, tool, tool_router};",
        "use serde::Deserialize;",
        "",
        "#[derive(Clone)]",
        "pub struct Server { tool_router: ToolRouter<Self> }",
        "",
    ]
    for i in range(n):
        out.append(f"""#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Args{i} {{
    /// The query.
    pub query: String,
    /// How many results.
    pub limit: Option<u32>,
    /// Whether to include archived rows.
    pub archived: bool,
}}
""")
    out.append("#[tool_router]\nimpl Server {")
    out.append("    pub fn new() -> Self { Self { tool_router: Self::tool_router() } }")
    for i in range(n):
        out.append(f"""    /// Tool number {i}: looks something up.
    #[tool]
    fn tool_{i}(&self, Parameters(args): Parameters<Args{i}>) -> String {{
        format!("{{}} {{:?}} {{}} {i}", args.query, args.limit, args.archived)
    }}
""")
    out.append("}")
    return "\n".join(out)


def write_crate(base: pathlib.Path, name: str, deps: str, source: str) -> pathlib.Path:
    crate = base / name
    (crate / "src").mkdir(parents=True, exist_ok=True)
    (crate / "Cargo.toml").write_text(
        f'[package]\nname = "{name}"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n\n'
        f"[workspace]\n\n[dependencies]\n{deps}\n"
    )
    (crate / "src" / "lib.rs").write_text(source)
    return crate


def build(crate: pathlib.Path, target: pathlib.Path) -> float:
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), CARGO_INCREMENTAL="0")
    (crate / "src" / "lib.rs").touch()
    start = time.perf_counter()
    subprocess.run(["cargo", "build", "-q"], cwd=crate, env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="airlock-compile-") as scratch:
        base = pathlib.Path(scratch)
        airlock = write_crate(
            base,
            "airlock_tools",
            f'agent-airlock = {{ path = "{ROOT / "runtime"}" }}\nserde = {{ version = "1", features = ["derive"] }}',
            airlock_source(args.tools),
        )
        rmcp = write_crate(
            base,
            "rmcp_tools",
            f'rmcp = {{ version = "{RMCP_VERSION}", features = ["server", "macros"] }}\n'
            'serde = { version = "1", features = ["derive"] }\nschemars = "1"',
            rmcp_source(args.tools),
        )
        target = base / "target"
        # Dependencies once (and a warm-up build of each tools crate).
        for crate in (airlock, rmcp):
            build(crate, target)
        times = {"airlock": [], "rmcp": []}
        for _ in range(args.runs):
            times["airlock"].append(build(airlock, target))
            times["rmcp"].append(build(rmcp, target))
        print(f"{args.tools} tools, {args.runs} rebuilds of the tools crate each (deps prebuilt), {os.cpu_count()} cores")
        for name, values in times.items():
            print(
                f"  {name:8} median {statistics.median(values):6.2f} s  "
                f"min {min(values):6.2f} s  max {max(values):6.2f} s"
            )
        ratio = statistics.median(times["airlock"]) / statistics.median(times["rmcp"])
        print(f"  ratio airlock / rmcp (medians): {ratio:.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
