//! `airlock audit verify | export-head`: the hash chain checked, its head exported to keep elsewhere.

use std::path::PathBuf;

use agent_airlock::audit::{Anchor, AuditConfig, verify};
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
    },
    /// Write the current head to a file, to be kept apart from the database.
    ExportHead {
        /// Where to write it.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        key: AuditKeySource,
    },
}

/// `airlock audit verify | export-head`.
pub(crate) fn run(cli: &Cli, command: &AuditCommand) -> Result<(), Failure> {
    let storage = Storage::open(cli)?;
    let (key, anchor_path) = match command {
        AuditCommand::Verify { key, anchor } => (key, anchor.as_ref()),
        AuditCommand::ExportHead { key, .. } => (key, None),
    };
    let config = AuditConfig { key: audit_key(key)?, ..AuditConfig::default() };
    let log = storage.audit(config)?;
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
