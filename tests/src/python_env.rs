//! Python virtual environments for the tests that drive the system with a Python program (the official MCP
//! SDK today), so `cargo test --workspace` needs nothing beyond the Rust toolchain, Python and pip.
//!
//! A test names a pinned requirements file; [`PythonEnv::provision`] returns a virtual environment with
//! exactly those packages. The environment lives under the cargo target directory, in a folder named after a
//! digest of the requirements and the base interpreter, and is reused by every later run: a marker file is
//! written into it only after `pip install` succeeded, so a run that died half-way is rebuilt, never trusted.
//! Processes that start at once serialise on a lock file next to it; the second one waits and then finds
//! the environment ready. Every failure says what is missing and what to install.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

/// The file written last into a complete environment; it holds the environment's digest.
const MARKER: &str = "airlock-provisioned";

/// How much of a failed command's stderr a failure message repeats.
const STDERR_TAIL: usize = 3_000;

/// Where and from which interpreter virtual environments are built.
#[derive(Clone, Debug)]
pub struct PythonEnv {
    root: PathBuf,
    base_python: OsString,
    pip_env: Vec<(OsString, Option<OsString>)>,
}

/// A provisioned virtual environment.
#[derive(Clone, Debug)]
pub struct Venv {
    dir: PathBuf,
    python: PathBuf,
    created: bool,
}

impl PythonEnv {
    /// Environments under `<target_tmpdir>/airlock-pyenv`, built from `$PYTHON` (default `python3`, or
    /// `python` on Windows). Integration tests pass `env!("CARGO_TARGET_TMPDIR")`, which cargo points into
    /// the target directory, wherever `CARGO_TARGET_DIR` puts it.
    pub fn under_target(target_tmpdir: impl AsRef<Path>) -> Self {
        Self::in_dir(target_tmpdir.as_ref().join("airlock-pyenv"))
    }

    /// Environments directly under `root`.
    pub fn in_dir(root: impl Into<PathBuf>) -> Self {
        let default = if cfg!(windows) { "python" } else { "python3" };
        let base_python = std::env::var_os("PYTHON").filter(|p| !p.is_empty()).unwrap_or_else(|| default.into());
        Self { root: root.into(), base_python, pip_env: Vec::new() }
    }

    /// Builds environments from this interpreter instead of `$PYTHON`.
    pub fn with_base_python(mut self, python: impl Into<OsString>) -> Self {
        self.base_python = python.into();
        self
    }

    /// Sets an environment variable for `pip install` (a mirror's `PIP_INDEX_URL`, for instance).
    pub fn with_pip_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.pip_env.push((key.into(), Some(value.into())));
        self
    }

    /// Removes an environment variable for `pip install`.
    pub fn without_pip_env(mut self, key: impl Into<OsString>) -> Self {
        self.pip_env.push((key.into(), None));
        self
    }

    /// A virtual environment holding what `requirements` pins: the existing one if a run already built it,
    /// else a new one. Blocks while another process builds the same environment.
    pub fn provision(&self, requirements: &Path) -> Result<Venv, String> {
        let pinned = fs::read(requirements)
            .map_err(|e| format!("cannot read the requirements file `{}`: {e}", requirements.display()))?;
        let digest = self.digest(&pinned);
        let dir = self.root.join(&digest);
        let venv = |created| Venv { python: venv_python(&dir), dir: dir.clone(), created };
        if is_ready(&dir, &digest) {
            return Ok(venv(false));
        }

        fs::create_dir_all(&self.root)
            .map_err(|e| format!("cannot create `{}` for Python environments: {e}", self.root.display()))?;
        let lock_path = self.root.join(format!("{digest}.lock"));
        let lock = crate::exclusive_lock(&lock_path)?;
        // Whoever held the lock before may have built it meanwhile.
        if is_ready(&dir, &digest) {
            return Ok(venv(false));
        }
        if dir.exists() {
            // A build that died before its marker: nothing in it can be trusted.
            fs::remove_dir_all(&dir)
                .map_err(|e| format!("cannot remove the incomplete environment `{}`: {e}", dir.display()))?;
        }

        self.create(&dir)?;
        self.install(&venv_python(&dir), &dir, requirements)?;

        let pending = dir.join(format!("{MARKER}.tmp"));
        fs::write(&pending, &digest)
            .and_then(|()| fs::rename(&pending, dir.join(MARKER)))
            .map_err(|e| format!("cannot write the marker in `{}`: {e}", dir.display()))?;
        drop(lock);
        Ok(venv(true))
    }

    /// Names an environment after what it holds: the requirements and the interpreter it is built from.
    fn digest(&self, pinned: &[u8]) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.base_python.as_encoded_bytes());
        hasher.update([0]);
        hasher.update(pinned);
        hasher.finalize().iter().take(8).map(|byte| format!("{byte:02x}")).collect()
    }

    fn create(&self, dir: &Path) -> Result<(), String> {
        let python = self.base_python.to_string_lossy();
        let mut command = Command::new(&self.base_python);
        command.arg("-m").arg("venv").arg(dir);
        isolate(&mut command);
        let output = command.output().map_err(|e| {
            format!(
                "cannot run `{python}` ({e}): the Python-driven tests need Python 3.10 or newer with `venv` and \
                 `pip`; install it (Debian/Ubuntu: `apt install python3 python3-venv`), or set `PYTHON` to \
                 its path"
            )
        })?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "`{python} -m venv {}` failed ({}): the Python-driven tests need the `venv` module with `ensurepip` \
             (Debian/Ubuntu: `apt install python3-venv`)\n{}",
            dir.display(),
            output.status,
            stderr_tail(&output),
        ))
    }

    fn install(&self, python: &Path, dir: &Path, requirements: &Path) -> Result<(), String> {
        let mut command = Command::new(python);
        command
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
            .args(["--retries", "2", "--timeout", "30", "--requirement"])
            .arg(requirements);
        isolate(&mut command);
        for (key, value) in &self.pip_env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let output = command
            .output()
            .map_err(|e| format!("cannot run the environment's interpreter `{}`: {e}", python.display()))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = stderr_tail(&output);
        let cause = if UNREACHABLE.iter().any(|sign| stderr.contains(sign)) {
            "the package index could not be reached"
        } else {
            "pip could not install them"
        };
        Err(format!(
            "cannot provision the Python packages pinned in `{}` into `{}` ({}): {cause}; check the network, or \
             point pip at a reachable index or proxy (`PIP_INDEX_URL`, `HTTPS_PROXY`)\n{stderr}",
            requirements.display(),
            dir.display(),
            output.status,
        ))
    }
}

impl Venv {
    /// The environment's interpreter.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// The environment's folder (its `sys.prefix`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this call built the environment (false when an earlier run had).
    pub fn created(&self) -> bool {
        self.created
    }

    /// A command running the environment's interpreter, with what could bring in packages from outside the
    /// environment (`PYTHONPATH`, `PYTHONHOME`, the user's site-packages) switched off.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.python);
        isolate(&mut command);
        command
    }
}

/// What pip prints when it cannot reach the index.
const UNREACHABLE: &[&str] = &[
    "NewConnectionError",
    "Failed to establish a new connection",
    "Connection refused",
    "Temporary failure in name resolution",
    "Name or service not known",
    "ConnectTimeoutError",
    "ProxyError",
    "Network is unreachable",
    "No route to host",
];

fn isolate(command: &mut Command) {
    for key in ["PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PIP_USER", "VIRTUAL_ENV"] {
        command.env_remove(key);
    }
    command.env("PYTHONNOUSERSITE", "1");
}

fn is_ready(dir: &Path, digest: &str) -> bool {
    fs::read_to_string(dir.join(MARKER)).is_ok_and(|marker| marker == digest) && venv_python(dir).is_file()
}

fn venv_python(dir: &Path) -> PathBuf {
    if cfg!(windows) { dir.join("Scripts").join("python.exe") } else { dir.join("bin").join("python") }
}

fn stderr_tail(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr);
    let text = text.trim();
    match text.char_indices().rev().nth(STDERR_TAIL) {
        Some((start, _)) => format!("…{}", &text[start..]),
        None => text.to_owned(),
    }
}
