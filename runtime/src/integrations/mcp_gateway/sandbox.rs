//! The upstream's sandbox (Linux): no network, a file system view limited to named paths, resource limits
//! and no new privileges (`airlock mcp --sandbox`).
//!
//! The upstream is code nobody here wrote. Without a sandbox it can do whatever the gateway's user can: read
//! `~/.ssh`, reach the network, read the gateway's own environment from `/proc`. With one, it starts in:
//!
//! - **a new user and network namespace** ([`SandboxPlan::network`] false, the default): the network
//!   namespace has only a loopback interface, down, so no socket reaches anything, the host's loopback
//!   services included. The user namespace (always made, the network allowed or not) maps the gateway's
//!   user and group to themselves and nothing else: the server keeps its user's file permissions but holds
//!   no capability outside its namespaces (a gateway run as root gives it no root power over the host:
//!   no `setns` back into the host's network, no mounts, no modules);
//! - **Landlock**: the server reads (and executes) only beneath the read paths and writes only beneath the
//!   read-write paths; everything else is refused by the kernel, whatever the files' permissions. It also
//!   cannot signal or `ptrace` a process outside its sandbox (the gateway's `/proc/PID/environ` included),
//!   nor reach an abstract Unix socket outside it. The read paths are what a program needs to start
//!   ([`SYSTEM_READ_PATHS`], [`SYSTEM_WRITE_PATHS`]), the program's own installation (see
//!   [`Sandbox::plan`]), and what the operator names;
//! - **resource limits** ([`SandboxLimits`]): address space, open files, processes (counted within the
//!   sandbox's user namespace), and no core dumps;
//! - **`no_new_privs`**: no set-user-ID program or file capability raises its privileges.
//!
//! The gateway cannot do this to a child without `unsafe` (`pre_exec`), so it starts a launcher instead
//! ([`SandboxLauncher`]: the `airlock` binary itself, `airlock mcp sandbox-exec PLAN -- COMMAND…`), which
//! puts itself in the sandbox with safe calls ([`exec_sandboxed`]) and then `exec`s the server: the same
//! process, so the gateway's stop sequence (stdin closed, SIGTERM, SIGKILL) reaches the server itself.
//!
//! Where the kernel has no Landlock, or refuses the namespaces, the launcher refuses to start the server
//! unless [`Sandbox::allow_degraded`] says to run with what the kernel offers (each missing part is then
//! named on standard error).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What every sandboxed server may read (and execute), when they exist: the system's programs, libraries and
/// configuration, and `/proc` (runtimes read `/proc/self/…`; another process's private files there need
/// `ptrace` rights, which Landlock refuses outside the sandbox). `/etc` is whole: a gateway run as root lets
/// its server read what root can under it.
pub const SYSTEM_READ_PATHS: &[&str] =
    &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/dev/urandom", "/dev/random"];

/// What every sandboxed server may write, when it exists: `/dev/null` alone.
pub const SYSTEM_WRITE_PATHS: &[&str] = &["/dev/null"];

/// The default limit of the server's address space: 8 GiB (a runtime reserves far more virtual memory than it
/// uses; this stops a runaway allocation, not a large heap).
pub const DEFAULT_ADDRESS_SPACE: u64 = 8 << 30;

/// The default limit of the server's open files.
pub const DEFAULT_OPEN_FILES: u64 = 1024;

/// The default limit of the server's processes and threads, counted within its user namespace.
pub const DEFAULT_PROCESSES: u64 = 256;

/// The resource limits a sandboxed server starts with, soft and hard alike (it cannot raise them); `None` is
/// no limit beyond the gateway's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLimits {
    /// Bytes of address space (`RLIMIT_AS`), [`DEFAULT_ADDRESS_SPACE`] by default.
    pub address_space: Option<u64>,
    /// Open file descriptors (`RLIMIT_NOFILE`), [`DEFAULT_OPEN_FILES`] by default.
    pub open_files: Option<u64>,
    /// Processes and threads (`RLIMIT_NPROC`), [`DEFAULT_PROCESSES`] by default; counted within the
    /// sandbox's user namespace, and not applied by the kernel to uid 0 (a gateway run as root).
    pub processes: Option<u64>,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            address_space: Some(DEFAULT_ADDRESS_SPACE),
            open_files: Some(DEFAULT_OPEN_FILES),
            processes: Some(DEFAULT_PROCESSES),
        }
    }
}

/// How to sandbox an upstream server: [`Sandbox::new`] is no network, the system paths read-only, nothing
/// writable but `/dev/null`, the default limits, and no start without Landlock.
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    network: bool,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    limits: SandboxLimits,
    allow_degraded: bool,
}

impl Sandbox {
    /// The strict default (see [`Sandbox`]).
    pub fn new() -> Self {
        Sandbox::default()
    }

    /// Whether the server keeps the gateway's network (no new network namespace).
    #[must_use]
    pub fn allow_network(mut self, allow: bool) -> Self {
        self.network = allow;
        self
    }

    /// The server may also read (and execute) what is beneath `path`.
    #[must_use]
    pub fn read(mut self, path: impl Into<PathBuf>) -> Self {
        self.read.push(path.into());
        self
    }

    /// The server may also read, write, create and remove what is beneath `path`.
    #[must_use]
    pub fn write(mut self, path: impl Into<PathBuf>) -> Self {
        self.write.push(path.into());
        self
    }

    /// The resource limits.
    #[must_use]
    pub fn limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Start the server even where the kernel lacks Landlock or refuses the namespaces, with what it
    /// offers; each missing part is named on standard error.
    #[must_use]
    pub fn allow_degraded(mut self, allow: bool) -> Self {
        self.allow_degraded = allow;
        self
    }

    /// What the launcher is to do for `program`, started in `current_dir` (the gateway's when `None`) with
    /// the `PATH` and `HOME` of the server's environment: every path made absolute, the program found on
    /// `path` as a shell would, and the read paths completed with [`SYSTEM_READ_PATHS`] and the program's
    /// installation: for a program in a `bin` folder, the folder above it (`/opt/node/bin/node` gives
    /// `/opt/node`, a virtual environment's `venv/bin/python` gives `venv`), for the path as found and as
    /// symbolic links resolve it (so a venv's interpreter brings its base installation), unless that folder
    /// is `/` or `home`; for any other program, the program's file alone.
    ///
    /// A path the operator named that does not exist is an error; a system path that does not exist is
    /// left out.
    pub fn plan(
        &self,
        program: &OsStr,
        current_dir: Option<&Path>,
        path: Option<&OsStr>,
        home: Option<&OsStr>,
    ) -> Result<SandboxPlan, SandboxError> {
        let base = match current_dir {
            Some(dir) => absolute(dir)?,
            None => std::env::current_dir().map_err(|source| SandboxError::Path { path: ".".into(), source })?,
        };
        let found = find_program(program, &base, path)
            .ok_or_else(|| SandboxError::Program { program: program.to_string_lossy().into_owned() })?;
        let resolved =
            std::fs::canonicalize(&found).map_err(|source| SandboxError::Path { path: found.clone(), source })?;
        let home = home.map(|home| std::fs::canonicalize(home).unwrap_or_else(|_| PathBuf::from(home)));

        let mut read = Vec::new();
        for system in SYSTEM_READ_PATHS {
            push_existing(&mut read, Path::new(system));
        }
        for program in [&found, &resolved] {
            push_existing(&mut read, &installation(program, home.as_deref()));
        }
        for named in &self.read {
            push_unique(&mut read, canonical(&base, named)?);
        }
        let mut write = Vec::new();
        for system in SYSTEM_WRITE_PATHS {
            push_existing(&mut write, Path::new(system));
        }
        for named in &self.write {
            push_unique(&mut write, canonical(&base, named)?);
        }
        Ok(SandboxPlan {
            program: found,
            network: self.network,
            read,
            write,
            limits: self.limits,
            allow_degraded: self.allow_degraded,
        })
    }
}

/// What the launcher does: everything resolved, given to it as one argument ([`SandboxPlan::to_arg`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPlan {
    /// The program to `exec`, found on the `PATH`.
    pub program: PathBuf,
    /// Whether the server keeps the network (no new network namespace).
    pub network: bool,
    /// Absolute paths the server may read and execute beneath.
    pub read: Vec<PathBuf>,
    /// Absolute paths the server may read, write, create and remove beneath.
    pub write: Vec<PathBuf>,
    /// The resource limits.
    pub limits: SandboxLimits,
    /// Whether to start with what the kernel offers.
    pub allow_degraded: bool,
}

impl SandboxPlan {
    /// The plan as the launcher's argument (JSON).
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The plan from the launcher's argument.
    pub fn from_arg(arg: &str) -> Result<SandboxPlan, SandboxError> {
        serde_json::from_str(arg).map_err(|error| SandboxError::Plan(error.to_string()))
    }

    /// One line for the operator: the network, the paths, the limits.
    pub fn describe(&self) -> String {
        let paths = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        let limit = |limit: Option<u64>| limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        format!(
            "{}; read: {}; read-write: {}; address space {} bytes, {} open files, {} processes{}",
            if self.network { "the gateway's network" } else { "no network" },
            paths(&self.read),
            paths(&self.write),
            limit(self.limits.address_space),
            limit(self.limits.open_files),
            limit(self.limits.processes),
            if self.allow_degraded { "; degraded allowed" } else { "" },
        )
    }
}

/// How the gateway starts a sandboxed server: `program args… PLAN -- COMMAND…`, where `program args…` is a
/// launcher that calls [`exec_sandboxed`] with the plan and the command (`airlock mcp sandbox-exec` in the
/// `airlock` binary: `SandboxLauncher::new(std::env::current_exe()?, ["mcp", "sandbox-exec"], sandbox)`).
#[derive(Debug, Clone)]
pub struct SandboxLauncher {
    pub(super) program: PathBuf,
    pub(super) args: Vec<OsString>,
    pub(super) sandbox: Sandbox,
}

impl SandboxLauncher {
    /// The launcher `program` with its leading `args`, and the sandbox it is to set up.
    pub fn new(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        sandbox: Sandbox,
    ) -> Self {
        SandboxLauncher { program: program.into(), args: args.into_iter().map(Into::into).collect(), sandbox }
    }
}

/// A sandbox that could not be planned or set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A path could not be resolved.
    #[error("the sandbox's path `{}`: {source}", path.display())]
    Path {
        /// The path as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The program is not an executable file, nor found on the `PATH`.
    #[error("the sandbox: `{program}` is not an executable file, nor found on the server's `PATH`")]
    Program {
        /// The program as given.
        program: String,
    },
    /// The launcher's argument is not a plan.
    #[error("the sandbox's plan is not valid: {0}")]
    Plan(String),
    /// The kernel does not offer a part of the sandbox, and degraded sandboxes are not allowed.
    #[error("the sandbox cannot be set up: {0} (pass `--sandbox-allow-degraded` to start without it)")]
    Unavailable(String),
    /// A step failed.
    #[error("the sandbox: {0}")]
    Setup(String),
}

/// `path` made absolute against `base`, symbolic links resolved; it must exist.
fn canonical(base: &Path, path: &Path) -> Result<PathBuf, SandboxError> {
    std::fs::canonicalize(base.join(path)).map_err(|source| SandboxError::Path { path: path.to_owned(), source })
}

fn absolute(path: &Path) -> Result<PathBuf, SandboxError> {
    std::path::absolute(path).map_err(|source| SandboxError::Path { path: path.to_owned(), source })
}

fn push_unique(paths: &mut Vec<PathBuf>, path: PathBuf) {
    if !paths.contains(&path) {
        paths.push(path);
    }
}

fn push_existing(paths: &mut Vec<PathBuf>, path: &Path) {
    if path.exists() {
        push_unique(paths, path.to_owned());
    }
}

/// What a program needs of its own installation: the folder above its `bin` folder (not `/` nor `home`),
/// else the program's file alone.
fn installation(program: &Path, home: Option<&Path>) -> PathBuf {
    let prefix = program
        .parent()
        .filter(|dir| dir.file_name() == Some(OsStr::new("bin")))
        .and_then(Path::parent)
        .filter(|prefix| prefix.parent().is_some() && Some(*prefix) != home);
    prefix.unwrap_or(program).to_owned()
}

/// `program` as `execvp` would find it: a name with a `/` against `base`, any other on `path`.
fn find_program(program: &OsStr, base: &Path, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.as_encoded_bytes().contains(&b'/') {
        let candidate = base.join(program);
        return is_executable(&candidate).then_some(candidate);
    }
    std::env::split_paths(path?).map(|dir| base.join(dir).join(program)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// Puts this process in the sandbox `plan` describes, then `exec`s `plan.program` with `argv0` and `args`;
/// returns only if something failed (nothing was started). To be called by a launcher that is a fresh,
/// single-threaded process (a user namespace cannot be entered by a process with threads), with the
/// server's environment, working directory and standard streams.
///
/// In order: a user namespace mapping this user and group to themselves, and a network namespace unless
/// the plan keeps the network; the resource limits (no core dumps either); `no_new_privs`; the Landlock
/// ruleset. Landlock handles the file system rights of ABI 9 and the scopes of ABI 6 where the kernel has
/// them (an older kernel enforces what it knows, e.g. before ABI 9 connecting to a named Unix socket is not
/// restricted).
#[cfg(target_os = "linux")]
pub fn exec_sandboxed(plan: &SandboxPlan, argv0: &OsStr, args: &[OsString]) -> SandboxError {
    use std::os::unix::process::CommandExt as _;

    if let Err(error) = enter(plan) {
        return error;
    }
    let error = std::process::Command::new(&plan.program).arg0(argv0).args(args).exec();
    SandboxError::Setup(format!("cannot start `{}`: {error}", plan.program.display()))
}

/// Not Linux: no sandbox.
#[cfg(not(target_os = "linux"))]
pub fn exec_sandboxed(_plan: &SandboxPlan, _argv0: &OsStr, _args: &[OsString]) -> SandboxError {
    SandboxError::Unavailable("the sandbox needs Linux (namespaces and Landlock)".to_owned())
}

#[cfg(target_os = "linux")]
fn enter(plan: &SandboxPlan) -> Result<(), SandboxError> {
    let degraded = |what: String| -> Result<(), SandboxError> {
        if plan.allow_degraded {
            eprintln!("airlock mcp: warning: the sandbox is degraded: {what}");
            Ok(())
        } else {
            Err(SandboxError::Unavailable(what))
        }
    };
    if let Err(why) = namespaces(plan.network) {
        degraded(why)?;
    }
    limits(&plan.limits)?;
    rustix::thread::set_no_new_privs(true).map_err(|e| SandboxError::Setup(format!("no_new_privs: {e}")))?;
    landlock(plan, degraded)
}

/// A user namespace (this user and group mapped to themselves) and, unless `network`, a network namespace.
#[cfg(target_os = "linux")]
fn namespaces(network: bool) -> Result<(), String> {
    use rustix::thread::UnshareFlags;

    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let mut flags = UnshareFlags::NEWUSER;
    if !network {
        flags |= UnshareFlags::NEWNET;
    }
    // `unshare` is deprecated for `unshare_unsafe` because `CLONE_FILES` can leave another thread with
    // descriptors it no longer owns; these flags share no descriptor table, and the launcher has no thread.
    #[allow(deprecated)]
    rustix::thread::unshare(flags).map_err(|e| {
        format!("the kernel refused a new user{} namespace ({e})", if network { "" } else { " and network" })
    })?;
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text).map_err(|e| format!("/proc/self/{file}: {e}"))
    };
    write("setgroups", "deny".to_owned())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

#[cfg(target_os = "linux")]
fn limits(limits: &SandboxLimits) -> Result<(), SandboxError> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    for (resource, name, value) in [
        (Resource::As, "address space", limits.address_space),
        (Resource::Nofile, "open files", limits.open_files),
        (Resource::Nproc, "processes", limits.processes),
        (Resource::Core, "core dumps", Some(0)),
    ] {
        let Some(value) = value else { continue };
        // Never above the gateway's own hard limit, which only a privileged process could raise.
        let value = getrlimit(resource).maximum.map_or(value, |hard| hard.min(value));
        setrlimit(resource, Rlimit { current: Some(value), maximum: Some(value) })
            .map_err(|e| SandboxError::Setup(format!("the {name} limit ({value}): {e}")))?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn landlock(plan: &SandboxPlan, degraded: impl Fn(String) -> Result<(), SandboxError>) -> Result<(), SandboxError> {
    use landlock::{
        ABI, Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr as _, RulesetCreatedAttr as _,
        RulesetStatus, Scope,
    };

    let failed = |e: landlock::RulesetError| SandboxError::Setup(format!("Landlock: {e}"));
    let files = ABI::V9;
    let rule = |path: &Path, access: BitFlags<AccessFs>| -> Result<PathBeneath<PathFd>, SandboxError> {
        let fd = PathFd::new(path).map_err(|e| SandboxError::Setup(format!("Landlock: {}: {e}", path.display())))?;
        // A file takes only the rights that apply to files.
        let access = if path.is_dir() { access } else { access & AccessFs::from_file(files) };
        Ok(PathBeneath::new(fd, access))
    };
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(files))
        .and_then(|ruleset| ruleset.scope(Scope::from_all(ABI::V6)))
        .and_then(Ruleset::create)
        .map_err(failed)?;
    for path in &plan.read {
        ruleset = ruleset.add_rule(rule(path, AccessFs::from_read(files))?).map_err(failed)?;
    }
    for path in &plan.write {
        ruleset = ruleset.add_rule(rule(path, AccessFs::from_all(files))?).map_err(failed)?;
    }
    let status = ruleset.restrict_self().map_err(failed)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        degraded("the kernel has no Landlock: the file system is not restricted".to_owned())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_brings_its_installation_not_home_nor_the_root() {
        let home = Path::new("/home/me");
        assert_eq!(installation(Path::new("/opt/node/bin/node"), Some(home)), Path::new("/opt/node"));
        assert_eq!(installation(Path::new("/srv/venv/bin/python"), Some(home)), Path::new("/srv/venv"));
        assert_eq!(installation(Path::new("/home/me/bin/tool"), Some(home)), Path::new("/home/me/bin/tool"));
        assert_eq!(installation(Path::new("/bin/sh"), Some(home)), Path::new("/bin/sh"));
        assert_eq!(installation(Path::new("/srv/server"), None), Path::new("/srv/server"));
    }

    #[test]
    fn the_plan_resolves_the_program_and_every_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("env/bin")).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        let program = root.join("env/bin/server");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = std::env::join_paths([Path::new("/nonexistent"), &root.join("env/bin")]).unwrap();
        let sandbox = Sandbox::new().read("data").write(".");
        let plan = sandbox.plan(OsStr::new("server"), Some(&root), Some(&path), None).unwrap();
        assert_eq!(plan.program, program);
        assert!(!plan.network);
        assert!(plan.read.contains(&root.join("env")), "{plan:?}");
        assert!(plan.read.contains(&root.join("data")), "{plan:?}");
        assert!(plan.read.contains(&PathBuf::from("/usr")), "{plan:?}");
        assert!(plan.write.contains(&root), "{plan:?}");
        assert_eq!(plan.limits, SandboxLimits::default());
        assert_eq!(SandboxPlan::from_arg(&plan.to_arg()).unwrap(), plan);

        let missing = Sandbox::new().read("nope").plan(OsStr::new("server"), Some(&root), Some(&path), None);
        assert!(matches!(missing, Err(SandboxError::Path { .. })), "{missing:?}");
        let unknown = Sandbox::new().plan(OsStr::new("no-such-server"), Some(&root), Some(&path), None);
        assert!(matches!(unknown, Err(SandboxError::Program { .. })), "{unknown:?}");
    }
}
