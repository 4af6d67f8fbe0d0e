//! The environment an upstream server starts with: an allow-list, never the gateway's own.
//!
//! The upstream is code nobody here wrote (often `npx -y …`), and the gateway's environment holds the
//! deployment's secrets (`AIRLOCK_APPROVAL_KEY`, `AIRLOCK_GATEWAY_TOKEN`, `AIRLOCK_DB` with a database
//! password, …). So the child starts from an empty environment plus:
//!
//! - the variables a program needs to run at all and that hold no secret ([`INHERITED_VARIABLES`]: `PATH`,
//!   `HOME`, the locale, the temporary directory, …), copied from the gateway's;
//! - what the operator passes by name ([`UpstreamEnvironment::pass`], `--env NAME`: copied from the gateway's)
//!   or with a value ([`UpstreamEnvironment::set`], `--env NAME=VALUE`).
//!
//! An allow-list rather than "everything but ours": a secret the gateway was never told about (a cloud
//! credential in the operator's shell) does not leak either. Whatever is asked, no `AIRLOCK_*` variable and
//! none the gateway reads a secret from ([`UpstreamEnvironment::withhold`]) reaches the child: asking for one
//! is an error, and an inherited one is dropped.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// What every upstream inherits from the gateway's environment, when set: what finding programs, the home
/// folder, the locale, the terminal and the temporary directory need, and nothing that is usually a secret.
/// Every `LC_*` variable passes too.
pub const INHERITED_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "TMPDIR",
    "TMP",
    "TEMP",
    // What a program needs to start on Windows.
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
    "PROGRAMFILES",
];

/// The prefix of the gateway's own variables, none of which ever reaches an upstream.
pub const OWN_PREFIX: &str = "AIRLOCK_";

/// A variable an upstream may not be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvironmentError {
    /// The name is one of the gateway's own (`AIRLOCK_*`) or one it reads a secret from.
    #[error(
        "`{name}` is the gateway's own: no `AIRLOCK_*` variable and none the gateway reads a key or token from \
         reaches the upstream server"
    )]
    Withheld {
        /// The variable's name.
        name: String,
    },
    /// The name is empty or holds `=` or a NUL.
    #[error("`{name}` is not an environment variable's name (empty, or holding `=` or a NUL)")]
    BadName {
        /// The name as given.
        name: String,
    },
}

/// The environment an upstream starts with: the allow-list [`INHERITED_VARIABLES`], plus what `--env` passes;
/// never a variable of the gateway's own ([`OWN_PREFIX`]) or one its `--*-env` options name.
#[derive(Debug, Clone, Default)]
pub struct UpstreamEnvironment {
    /// Copied from the gateway's environment (`None`) or set (`Some`), by name.
    extra: BTreeMap<OsString, Option<OsString>>,
    /// Names never passed: those the gateway reads its secrets from.
    withheld: Vec<OsString>,
}

impl UpstreamEnvironment {
    /// The allow-list alone ([`INHERITED_VARIABLES`]).
    pub fn new() -> Self {
        UpstreamEnvironment::default()
    }

    /// Also copies `name` from the gateway's environment (if set there).
    pub fn pass(&mut self, name: impl Into<OsString>) -> &mut Self {
        self.extra.insert(name.into(), None);
        self
    }

    /// Also sets `name` to `value`.
    pub fn set(&mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> &mut Self {
        self.extra.insert(name.into(), Some(value.into()));
        self
    }

    /// Never passes `name` (one the gateway reads a key or token from), even if the allow-list holds it.
    pub fn withhold(&mut self, name: impl Into<OsString>) -> &mut Self {
        self.withheld.push(name.into());
        self
    }

    /// Adds `--env` arguments: `NAME` copies the gateway's value, `NAME=VALUE` sets one.
    pub fn parse_arg(&mut self, arg: &str) -> Result<&mut Self, EnvironmentError> {
        match arg.split_once('=') {
            Some((name, value)) => {
                self.check(OsStr::new(name))?;
                Ok(self.set(name, value))
            }
            None => {
                self.check(OsStr::new(arg))?;
                Ok(self.pass(arg))
            }
        }
    }

    /// Whether `name` may be given to an upstream.
    fn check(&self, name: &OsStr) -> Result<(), EnvironmentError> {
        let shown = name.to_string_lossy().into_owned();
        let bytes = name.as_encoded_bytes();
        if bytes.is_empty() || bytes.contains(&b'=') || bytes.contains(&0) {
            return Err(EnvironmentError::BadName { name: shown });
        }
        if self.is_withheld(name) {
            return Err(EnvironmentError::Withheld { name: shown });
        }
        Ok(())
    }

    /// Ours: `AIRLOCK_*` (in any case: Windows' names are case-insensitive) or a withheld name.
    fn is_withheld(&self, name: &OsStr) -> bool {
        let bytes = name.as_encoded_bytes();
        let own =
            bytes.len() >= OWN_PREFIX.len() && bytes[..OWN_PREFIX.len()].eq_ignore_ascii_case(OWN_PREFIX.as_bytes());
        own || self.withheld.iter().any(|withheld| withheld.as_encoded_bytes().eq_ignore_ascii_case(bytes))
    }

    /// The variables the child starts with, given the gateway's environment `parent` (`std::env::vars_os()`).
    /// An error if a variable asked for is the gateway's own.
    pub fn resolve(
        &self,
        parent: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Vec<(OsString, OsString)>, EnvironmentError> {
        for name in self.extra.keys() {
            self.check(name)?;
        }
        let mut out = BTreeMap::new();
        for (name, value) in parent {
            let inherited =
                name.to_str().is_some_and(|name| INHERITED_VARIABLES.contains(&name) || name.starts_with("LC_"));
            let passed = self.extra.get(&name).is_some_and(Option::is_none);
            if (inherited || passed) && !self.is_withheld(&name) {
                out.insert(name, value);
            }
        }
        for (name, value) in &self.extra {
            if let Some(value) = value {
                out.insert(name.clone(), value.clone());
            }
        }
        Ok(out.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/me"),
            ("LC_ALL", "C.UTF-8"),
            ("AIRLOCK_APPROVAL_KEY", "00ff"),
            ("AIRLOCK_DB", "postgresql://u:pw@db/airlock"),
            ("MY_KEY", "secret"),
            ("AWS_SECRET_ACCESS_KEY", "cloud"),
            ("KEEP", "kept"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter().map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())).collect()
    }

    #[test]
    fn only_the_allow_list_and_what_is_asked_for_pass() {
        let mut env = UpstreamEnvironment::new();
        env.withhold("MY_KEY").parse_arg("KEEP").unwrap().parse_arg("SET=a=b").unwrap();
        let resolved = env.resolve(parent()).unwrap();
        assert_eq!(names(&resolved), ["HOME=/home/me", "KEEP=kept", "LC_ALL=C.UTF-8", "PATH=/usr/bin", "SET=a=b"]);
    }

    #[test]
    fn the_gateways_own_names_are_refused() {
        let mut env = UpstreamEnvironment::new();
        env.withhold("MY_KEY").withhold("HOME");
        for name in ["AIRLOCK_APPROVAL_KEY", "airlock_db", "AIRLOCK_X=1", "MY_KEY", "my_key=x", "HOME"] {
            assert!(matches!(env.clone().parse_arg(name), Err(EnvironmentError::Withheld { .. })), "{name}");
        }
        for name in ["", "=x"] {
            assert!(matches!(env.clone().parse_arg(name), Err(EnvironmentError::BadName { .. })), "{name:?}");
        }
        // A withheld name on the allow-list is dropped, not copied.
        assert!(!names(&env.resolve(parent()).unwrap()).iter().any(|v| v.starts_with("HOME=")));
        // Set through the API, not `--env`: refused when resolved.
        let mut env = UpstreamEnvironment::new();
        env.set("AIRLOCK_GATEWAY_TOKEN", "t");
        assert!(env.resolve(parent()).is_err());
    }
}
