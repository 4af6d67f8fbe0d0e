//! `airlock mcp --sandbox …`: the upstream server in a sandbox (Linux), and the hidden launcher
//! `airlock mcp sandbox-exec PLAN -- COMMAND…` the gateway starts instead of the server, which puts itself in
//! the sandbox and then becomes the server (`agent_airlock::integrations::mcp_gateway::exec_sandboxed`).

use std::ffi::OsString;
use std::path::PathBuf;

use agent_airlock::integrations::mcp_gateway::{
    DEFAULT_OPEN_FILES, DEFAULT_PROCESSES, Sandbox, SandboxLauncher, SandboxLimits, SandboxPlan, UpstreamCommand,
    exec_sandboxed,
};
use clap::Args;

/// The sandbox's options of `airlock mcp`.
#[derive(Args)]
pub(crate) struct SandboxArgs {
    /// Start the upstream server in a sandbox (Linux): no network, reading only the system's programs and
    /// libraries (`/usr`, `/lib`, `/etc`, …), its own installation and the `--sandbox-read` paths, writing
    /// only the `--sandbox-write` paths, with resource limits and no new privileges. Refuses to start where
    /// the kernel has no Landlock or refuses the namespaces (see `--sandbox-allow-degraded`).
    #[arg(long, conflicts_with = "upstream_url")]
    sandbox: bool,
    /// Keep the gateway's network for the sandboxed server (no new network namespace).
    #[arg(long, requires = "sandbox")]
    sandbox_net: bool,
    /// A file or folder the sandboxed server may read (and execute) beneath; repeat for more.
    #[arg(long = "sandbox-read", value_name = "PATH", requires = "sandbox")]
    sandbox_read: Vec<PathBuf>,
    /// A file or folder the sandboxed server may read, write, create and remove beneath; repeat for more.
    #[arg(long = "sandbox-write", value_name = "PATH", requires = "sandbox")]
    sandbox_write: Vec<PathBuf>,
    /// The sandboxed server's address space, in bytes (suffixes K, M, G, T: powers of 1024) or `unlimited`.
    #[arg(long, value_name = "BYTES", value_parser = parse_limit, default_value = "8G", requires = "sandbox")]
    sandbox_address_space: Limit,
    /// The sandboxed server's open files, or `unlimited`.
    #[arg(long, value_name = "N", value_parser = parse_limit, default_value_t = Limit(Some(DEFAULT_OPEN_FILES)), requires = "sandbox")]
    sandbox_open_files: Limit,
    /// The sandboxed server's processes and threads (counted in its own user namespace), or `unlimited`.
    #[arg(long, value_name = "N", value_parser = parse_limit, default_value_t = Limit(Some(DEFAULT_PROCESSES)), requires = "sandbox")]
    sandbox_processes: Limit,
    /// Start the sandboxed server with what the kernel offers where it has no Landlock or refuses the
    /// namespaces (each missing part is named on standard error), instead of refusing to start.
    #[arg(long, requires = "sandbox")]
    sandbox_allow_degraded: bool,
}

/// A resource limit: a number, or none (`unlimited`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit(Option<u64>);

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("unlimited"),
        }
    }
}

/// `unlimited`, or a number with an optional K, M, G or T suffix (powers of 1024).
fn parse_limit(text: &str) -> Result<Limit, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(Limit(None));
    }
    let (digits, shift) = match text.char_indices().last() {
        Some((at, unit)) if unit.is_ascii_alphabetic() => {
            let shift = match unit.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("`{text}`: the suffix is K, M, G or T")),
            };
            (&text[..at], shift)
        }
        _ => (text, 0),
    };
    let number: u64 = digits.parse().map_err(|_| format!("`{text}` is not a number or `unlimited`"))?;
    number.checked_mul(1 << shift).map(|n| Limit(Some(n))).ok_or_else(|| format!("`{text}` is too large"))
}

impl SandboxArgs {
    /// `command` in the sandbox the options describe, if `--sandbox` was given: launched by this binary.
    pub(crate) fn apply(&self, command: UpstreamCommand) -> Result<UpstreamCommand, String> {
        if !self.sandbox {
            return Ok(command);
        }
        let mut sandbox = Sandbox::new()
            .allow_network(self.sandbox_net)
            .allow_degraded(self.sandbox_allow_degraded)
            .limits(SandboxLimits {
                address_space: self.sandbox_address_space.0,
                open_files: self.sandbox_open_files.0,
                processes: self.sandbox_processes.0,
            });
        for path in &self.sandbox_read {
            sandbox = sandbox.read(path);
        }
        for path in &self.sandbox_write {
            sandbox = sandbox.write(path);
        }
        let me = std::env::current_exe().map_err(|e| format!("the sandbox's launcher (this program): {e}"))?;
        let command = command.sandbox(SandboxLauncher::new(me, ["mcp", "sandbox-exec"], sandbox));
        // Every path is checked, and shown, before anything starts.
        if let Some(plan) = command.sandbox_plan() {
            let plan = plan.map_err(|e| e.to_string())?;
            eprintln!("airlock mcp: sandbox: {}", agent_airlock::approval::display::escape(&plan.describe()));
        }
        Ok(command)
    }
}

/// `airlock mcp sandbox-exec PLAN -- COMMAND…`: returns only if the sandbox or the server could not start.
pub(crate) fn launch(plan: &str, command: &[OsString]) -> Result<(), String> {
    let plan = SandboxPlan::from_arg(plan).map_err(|e| e.to_string())?;
    let (argv0, args) = command.split_first().ok_or("give the server's command after `--`")?;
    Err(exec_sandboxed(&plan, argv0, args).to_string())
}

#[cfg(test)]
mod tests {
    use agent_airlock::integrations::mcp_gateway::DEFAULT_ADDRESS_SPACE;

    use super::*;

    #[test]
    fn limits_take_a_suffix_or_unlimited() {
        assert_eq!(parse_limit("8G"), Ok(Limit(Some(DEFAULT_ADDRESS_SPACE))));
        assert_eq!(parse_limit("512m"), Ok(Limit(Some(512 << 20))));
        assert_eq!(parse_limit("1024"), Ok(Limit(Some(1024))));
        assert_eq!(parse_limit("unlimited"), Ok(Limit(None)));
        for bad in ["", "G", "12X", "-1", "99999999999T"] {
            assert!(parse_limit(bad).is_err(), "{bad}");
        }
    }
}
