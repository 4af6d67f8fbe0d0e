//! Where keys come from: a file or an environment variable, never the command line (where `ps` and shell
//! history would show them).

use std::path::PathBuf;

use agent_airlock::approval::operators::OperatorKey;
use agent_airlock::keys::AuditKey;
use clap::Args;

use crate::Failure;

/// The operator's own signing key (from `airlock operators add`), which signs the decision.
#[derive(Args, Clone)]
pub(crate) struct SigningKeySource {
    /// The operator's signing key file; the decision is recorded under the name it holds.
    #[arg(long, env = "AIRLOCK_SIGNING_KEY", value_name = "FILE")]
    pub(crate) signing_key: PathBuf,
}

impl SigningKeySource {
    pub(crate) fn load(&self) -> Result<OperatorKey, Failure> {
        warn_if_others_can_read(&self.signing_key);
        OperatorKey::from_file(&self.signing_key).map_err(|e| e.to_string())
    }
}

/// Where the approval key comes from (hex). Never the command line.
#[derive(Args, Clone)]
pub(crate) struct KeySource {
    /// A file holding the key's secret as hex.
    #[arg(long, conflicts_with = "key_env")]
    pub(crate) key_file: Option<PathBuf>,
    /// An environment variable holding the key's secret as hex.
    #[arg(long, default_value = "AIRLOCK_APPROVAL_KEY")]
    pub(crate) key_env: String,
}

/// Where the audit key comes from (hex), if the log is keyed.
#[derive(Args, Clone)]
pub(crate) struct AuditKeySource {
    /// The audit key's id.
    #[arg(long, default_value = "audit-1")]
    pub(crate) audit_key_id: String,
    /// A file holding the audit key's secret as hex.
    #[arg(long)]
    pub(crate) audit_key_file: Option<PathBuf>,
    /// An environment variable holding the audit key's secret as hex.
    #[arg(long)]
    pub(crate) audit_key_env: Option<String>,
}

pub(crate) fn audit_key(source: &AuditKeySource) -> Result<Option<AuditKey>, Failure> {
    let id = source.audit_key_id.as_str();
    let key = match (&source.audit_key_file, &source.audit_key_env) {
        (Some(path), _) => {
            warn_if_others_can_read(path);
            AuditKey::from_file(id, path)
        }
        (None, Some(var)) => AuditKey::from_env(id, var),
        (None, None) => return Ok(None),
    };
    key.map(Some).map_err(|e| e.to_string())
}

/// Warns on stderr when the group or everyone may read a key file: anyone who can read it can forge
/// approvals (or audit entries).
pub(crate) fn warn_if_others_can_read(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            eprintln!(
                "airlock: warning: the key file `{0}` can be read by other users (mode {1:o}); restrict it with \
                 `chmod 600 {0}`",
                path.display(),
                meta.permissions().mode() & 0o777,
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}
