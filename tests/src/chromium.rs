//! Debian's Chromium for the browser tests: the binary a machine has, or, on a machine of this project's
//! kind (Debian, the tests run as root), one this function installs with `apt-get install chromium`, once,
//! under a lock. Elsewhere it fails naming the command to run. Never a browser that a test tool downloads.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's package puts the browser.
const DEBIAN_CHROMIUM: &str = "/usr/bin/chromium";

/// The browser to drive: `AIRLOCK_CHROMIUM` if set (it must exist), else Debian's `/usr/bin/chromium`,
/// installed first if it is missing and this process may install packages.
pub fn provision() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("AIRLOCK_CHROMIUM").map(PathBuf::from) {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("`AIRLOCK_CHROMIUM` names `{}`, which is not a file", path.display()))
        };
    }
    let path = PathBuf::from(DEBIAN_CHROMIUM);
    if path.is_file() {
        return Ok(path);
    }
    if !may_install() {
        return Err(format!(
            "the browser tests need Chromium at `{DEBIAN_CHROMIUM}`: install Debian's with \
             `sudo apt-get install chromium` (or set `AIRLOCK_CHROMIUM` to a Chromium binary)"
        ));
    }
    // One installer at a time; a waiting one finds the browser installed.
    let lock_path = std::env::temp_dir().join("airlock-chromium-install.lock");
    let lock = crate::exclusive_lock(&lock_path)?;
    if !path.is_file() {
        eprintln!("Chromium is missing: installing Debian's package (`apt-get install chromium`)");
        apt_get(&["update", "-qq"])?;
        apt_get(&["install", "-y", "-qq", "chromium"])?;
    }
    drop(lock);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("`apt-get install chromium` ran but `{DEBIAN_CHROMIUM}` is still missing"))
    }
}

/// Whether this process can install Debian packages: root, with `apt-get`.
fn may_install() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0");
    root && Path::new("/usr/bin/apt-get").is_file()
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| format!("cannot run `apt-get`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`apt-get {}` failed ({status}): install Debian's Chromium with `sudo apt-get install chromium`",
            args.join(" ")
        ))
    }
}
