//! `airlock policy check`: a policy file read and summarised, or its first mistake at its line and column.

use std::path::PathBuf;

use clap::Subcommand;

use serde_json::json;

use crate::Failure;
use crate::output::print_json;

#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
    /// Validate a policy file: print its rules, or the first error with its line and column (exit 1).
    Check {
        /// The policy file (TOML).
        file: PathBuf,
        /// Also start the MCP server given after `--`, list its tools and report every `[tools.…]` table
        /// that names none of them, with the closest name (exit 1).
        #[arg(long, requires = "server")]
        against: bool,
        /// The server's command line, after `--` (with `--against`).
        #[arg(last = true, value_name = "COMMAND")]
        server: Vec<std::ffi::OsString>,
    },
}

/// `airlock policy check FILE`: the summary, or `FILE:LINE:COLUMN: message` as the failure.
pub(crate) fn check(file: &std::path::Path, server: &[std::ffi::OsString], json: bool) -> Result<(), Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let policy = agent_airlock::Policy::from_toml(&text);
    if let (Ok(policy), false) = (&policy, server.is_empty()) {
        crate::mcp::check_against(policy, server).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    match policy {
        Ok(policy) if json => {
            print_json(
                &json!({"valid": true, "mode": format!("{:?}", policy.mode()).to_lowercase(), "summary": policy.summary()}),
            );
            Ok(())
        }
        Ok(policy) => {
            println!("{}: valid policy", file.display());
            println!("{}", policy.summary());
            Ok(())
        }
        Err(err) => Err(format!("{}:{}:{}: {}", file.display(), err.line, err.column, err.message)),
    }
}
