//! `airlock audit verify | export-head`: the hash chain checked, its head exported to keep elsewhere.

use std::path::PathBuf;

use agent_airlock::audit::{Anchor, AuditConfig, AuditLog, verify};
use clap::Subcommand;

use serde_json::json;

use crate::keys::{AuditKeySource, audit_key};
use crate::output::print_json;
use crate::{Cli, Failure, Storage};

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Check the hash chain, the signatures and the head; report the first bad record.
    Verify {
        /// A head exported earlier (`airlock audit export-head`), to detect truncation and rollback.
        #[arg(long)]
        anchor: Option<PathBuf>,
        #[command(flatten)]
        key: AuditKeySource,
        #[command(flatten)]
        file: AuditFile,
    },
    /// Write the current head to a file, to be kept apart from the database.
    ExportHead {
        /// Where to write it.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        key: AuditKeySource,
        #[command(flatten)]
        file: AuditFile,
    },
}

/// Which log: `--db`'s, or an append-only audit file.
#[derive(clap::Args)]
pub(crate) struct AuditFile {
    /// An append-only audit file (`airlock mcp --audit-file`) instead of the log in `--db`. It is read,
    /// never changed, and may be read while the gateway writes it (up to its last whole append).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
}

/// `airlock audit verify | export-head`.
pub(crate) fn run(cli: &Cli, command: &AuditCommand) -> Result<(), Failure> {
    let (key, anchor_path, file) = match command {
        AuditCommand::Verify { key, anchor, file } => (key, anchor.as_ref(), file),
        AuditCommand::ExportHead { key, file, .. } => (key, None, file),
    };
    let config = AuditConfig { key: audit_key(key)?, ..AuditConfig::default() };
    let log = match &file.file {
        Some(path) => AuditLog::read_append_only(path, config).map_err(|e| e.to_string())?,
        None => Storage::open(cli)?.audit(config)?,
    };
    match command {
        AuditCommand::Verify { .. } => {
            let anchor =
                anchor_path.map(|p| Anchor::read_from(p).map_err(|e| format!("{}: {e}", p.display()))).transpose()?;
            let report = verify(&log, anchor.as_ref()).map_err(|e| e.to_string())?;
            if cli.json {
                print_json(&json!({
                    "ok": true,
                    "records": report.records,
                    "head_seq": report.head.seq,
                    "head_signed": report.head_signed,
                    "anchor_seq": report.anchor_seq,
                }));
            } else {
                println!("{report}");
            }
        }
        AuditCommand::ExportHead { to, .. } => {
            let anchor = log.export_head_to(to).map_err(|e| e.to_string())?;
            if cli.json {
                print_json(&json!({"seq": anchor.seq, "path": to}));
            } else {
                println!("head #{} written to {}", anchor.seq, to.display());
            }
        }
    }
    Ok(())
}
