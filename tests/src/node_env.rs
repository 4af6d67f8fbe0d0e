//! Node.js packages for the tests that run an MCP server from npm (`@modelcontextprotocol/server-filesystem`),
//! so `cargo test --workspace` needs nothing beyond the Rust toolchain, Node.js and npm.
//!
//! A test names a folder holding a `package.json` and its pinned `package-lock.json`;
//! [`NodePackages::provision`] installs exactly what the lock file says with `npm ci` into a folder under the
//! cargo target directory named after a digest of both files, reused by every later run. As for the Python
//! environments (`python_env`), a marker is written only after `npm ci` succeeded, and processes that start
//! at once serialise on a lock file. Every failure says what is missing and what to install.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The file written last into a complete install; it holds the install's digest.
const MARKER: &str = "airlock-provisioned";

/// Where npm packages are installed.
#[derive(Clone, Debug)]
pub struct NodePackages {
    root: PathBuf,
}

/// A folder with the packages a lock file pins installed under `node_modules`.
#[derive(Clone, Debug)]
pub struct NodeInstall {
    dir: PathBuf,
}

impl NodePackages {
    /// Installs under `<target_tmpdir>/airlock-npm`; integration tests pass `env!("CARGO_TARGET_TMPDIR")`.
    pub fn under_target(target_tmpdir: impl AsRef<Path>) -> Self {
        NodePackages { root: target_tmpdir.as_ref().join("airlock-npm") }
    }

    /// The packages `project`'s `package-lock.json` pins: the existing install if a run already made it,
    /// else a new one. Blocks while another process installs the same.
    pub fn provision(&self, project: &Path) -> Result<NodeInstall, String> {
        let read = |name: &str| {
            let path = project.join(name);
            fs::read(&path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))
        };
        let (manifest, lock) = (read("package.json")?, read("package-lock.json")?);
        let mut hasher = Sha256::new();
        hasher.update(&manifest);
        hasher.update([0]);
        hasher.update(&lock);
        let digest: String = hasher.finalize().iter().take(8).map(|byte| format!("{byte:02x}")).collect();
        let dir = self.root.join(&digest);
        if is_ready(&dir, &digest) {
            return Ok(NodeInstall { dir });
        }

        fs::create_dir_all(&self.root)
            .map_err(|e| format!("cannot create `{}` for npm packages: {e}", self.root.display()))?;
        let lock_path = self.root.join(format!("{digest}.lock"));
        let lock_file = crate::exclusive_lock(&lock_path)?;
        if is_ready(&dir, &digest) {
            return Ok(NodeInstall { dir });
        }
        if dir.exists() {
            // An install that died before its marker: nothing in it can be trusted.
            fs::remove_dir_all(&dir)
                .map_err(|e| format!("cannot remove the incomplete install `{}`: {e}", dir.display()))?;
        }
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
        fs::write(dir.join("package.json"), &manifest)
            .and_then(|()| fs::write(dir.join("package-lock.json"), &lock))
            .map_err(|e| format!("cannot copy the package files into `{}`: {e}", dir.display()))?;

        let output = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .map_err(|e| {
                format!(
                    "cannot run `npm` ({e}): the tests that run an MCP server from npm need Node.js 20 or newer \
                     with npm (Debian/Ubuntu: `apt install nodejs npm`)"
                )
            })?;
        if !output.status.success() {
            return Err(format!(
                "`npm ci` in `{}` failed ({}): check the network, or point npm at a reachable registry \
                 (`npm_config_registry`, `HTTPS_PROXY`)\n{}",
                dir.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim(),
            ));
        }
        let pending = dir.join(format!("{MARKER}.tmp"));
        fs::write(&pending, &digest)
            .and_then(|()| fs::rename(&pending, dir.join(MARKER)))
            .map_err(|e| format!("cannot write the marker in `{}`: {e}", dir.display()))?;
        drop(lock_file);
        Ok(NodeInstall { dir })
    }
}

impl NodeInstall {
    /// The folder holding `node_modules`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a file inside an installed package, e.g. (`@modelcontextprotocol/server-filesystem`,
    /// `dist/index.js`).
    pub fn package_file(&self, package: &str, file: &str) -> PathBuf {
        self.dir.join("node_modules").join(package).join(file)
    }
}

/// The `node` program the tests run servers with, checked to be there.
pub fn node() -> Result<&'static str, String> {
    match Command::new("node").arg("--version").output() {
        Ok(output) if output.status.success() => Ok("node"),
        _ => Err("cannot run `node`: the tests that run an MCP server from npm need Node.js 20 or newer with npm \
                  (Debian/Ubuntu: `apt install nodejs npm`)"
            .to_owned()),
    }
}

fn is_ready(dir: &Path, digest: &str) -> bool {
    fs::read_to_string(dir.join(MARKER)).is_ok_and(|marker| marker == digest) && dir.join("node_modules").is_dir()
}
