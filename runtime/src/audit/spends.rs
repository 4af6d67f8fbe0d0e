//! The grants an append-only audit file records as spent or revoked, as known to a writer (the records it read and
//! those it wrote): the `approved` records that name a grant (`grant <id> by <approver>`, written when a
//! dispatcher spends one) and the `refused` (`human_denied`) records that revoke one (`grant <id> revoked by
//! <operator>`, written by [`AuditLog::append_revocation`](super::AuditLog::append_revocation) before an operator's
//! denial revokes it in the ledger). Hosts that share the file (and so its lock and one order of records) can then
//! refuse a grant whose spend or revocation another of them, an operator, or this host before a restart, already
//! recorded: the database holder can set a spent or revoked grant's row back to live, not take a record out of a
//! file it cannot write.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use memchr::memmem;

use super::AuditOutcome;
use super::record::{decode_frame, parse_body};
use crate::approval::protocol::REMEMBER_AT_MOST;
use crate::keys::decode_lower_hex;
use crate::message::RefusalKind;

/// How an `approved` record's outcome is encoded in its body (canonical JSON, so in exactly this form): a body
/// without it is passed over unparsed. Inside a JSON string every `"` is escaped, so a tool name or an argument
/// cannot carry it.
const APPROVED: &[u8] = br#""outcome":{"kind":"approved"}"#;

/// How a `refused` record of a human's no is encoded (a revocation is one).
const HUMAN_DENIED: &[u8] = br#""outcome":{"kind":"refused","refusal":"human_denied"}"#;

/// How a grant's end is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Its spend was recorded (its call admitted), at this record time.
    Spent {
        /// The record's time.
        at: Duration,
    },
    /// An operator's revocation was recorded, at this record time.
    Revoked {
        /// The record's time.
        at: Duration,
    },
}

/// Grant id → where and when the file first records it spent or revoked.
#[derive(Debug, Default)]
pub(super) struct Spends {
    grants: HashMap<[u8; 16], Spend>,
    /// The latest record time read: a spend older than [`REMEMBER_AT_MOST`] before it is forgotten.
    newest: Duration,
    /// The number kept after the last sweep: the next comes at twice as many.
    after_sweep: usize,
}

#[derive(Debug, Clone, Copy)]
struct Spend {
    seq: u64,
    at: Duration,
    revoked: bool,
}

impl Spends {
    /// Whether record `frame` (as stored: the hash, the MAC and the body) may record a grant's spend or
    /// revocation: the others are not parsed.
    pub(super) fn may_name_a_spend(frame: &[u8]) -> bool {
        static APPROVAL: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(APPROVED));
        static DENIAL: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(HUMAN_DENIED));
        APPROVAL.find(frame).is_some() || DENIAL.find(frame).is_some()
    }

    /// Takes in record `seq` of the file (`frame` as stored) if it records a grant's spend or revocation. A
    /// record that cannot be read is passed over: the chain's verification reports it.
    pub(super) fn read(&mut self, seq: u64, frame: &[u8]) {
        let Some(body) = decode_frame(frame).ok().and_then(|frame| parse_body(frame.body).ok()) else { return };
        let detail = body.detail.as_deref();
        let (grant, revoked) = match body.outcome {
            AuditOutcome::Approved => (detail.and_then(granted), false),
            AuditOutcome::Refused { refusal: RefusalKind::HumanDenied } => (detail.and_then(revoked), true),
            _ => return,
        };
        let Some(grant) = grant else { return };
        let at = Duration::from_nanos(body.time_ns);
        self.newest = self.newest.max(at);
        if self.grants.len() >= self.after_sweep.max(64) * 2 {
            let oldest = self.newest.saturating_sub(REMEMBER_AT_MOST);
            self.grants.retain(|_, spend| spend.at >= oldest);
            self.after_sweep = self.grants.len();
        }
        self.grants.entry(grant).or_insert(Spend { seq, at, revoked });
    }

    /// How many spends are known.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.grants.len()
    }

    /// How and when the file recorded `grant_id` spent or revoked in a record before `seq`, if it did (the
    /// first such record, within the last [`REMEMBER_AT_MOST`] of the records read).
    pub(super) fn closed_before(&self, grant_id: &str, seq: u64) -> Option<Closed> {
        let grant = decode_lower_hex::<16>(grant_id)?;
        let spend = self.grants.get(&grant).filter(|spend| spend.seq < seq)?;
        Some(if spend.revoked { Closed::Revoked { at: spend.at } } else { Closed::Spent { at: spend.at } })
    }
}

/// The detail of a revocation's record: `grant <id> revoked by <operator>` (the operator's name escaped by the
/// caller where it must be).
pub(super) fn revocation_detail(grant_id: &str, revoked_by: &str) -> String {
    format!("grant {grant_id} revoked by {revoked_by}")
}

/// The grant an `approved` record's detail names: `grant <32 lowercase hex> by <approver>`.
fn granted(detail: &str) -> Option<[u8; 16]> {
    let rest = detail.strip_prefix("grant ")?;
    let (id, rest) = rest.split_at_checked(32)?;
    rest.starts_with(" by ").then(|| decode_lower_hex::<16>(id)).flatten()
}

/// The grant a revocation's detail names: `grant <32 lowercase hex> revoked by <operator>`.
fn revoked(detail: &str) -> Option<[u8; 16]> {
    let rest = detail.strip_prefix("grant ")?;
    let (id, rest) = rest.split_at_checked(32)?;
    rest.starts_with(" revoked by ").then(|| decode_lower_hex::<16>(id)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_spend_detail_names_a_grant() {
        let id = "0123456789abcdef0123456789abcdef";
        assert!(granted(&format!("grant {id} by alice")).is_some());
        assert!(granted(&format!("grant {id} by ")).is_some());
        for detail in [
            format!("grant {id}"),
            format!("grant {id}by alice"),
            format!("grant {} by alice", id.to_uppercase()),
            format!("grant {}0 by alice", id),
            format!("grant {} by alice", &id[..31]),
            format!("Grant {id} by alice"),
            "approved by alice".to_owned(),
            "grant é by alice".to_owned(),
        ] {
            assert!(granted(&detail).is_none(), "{detail}");
        }
        assert!(granted(&revocation_detail(id, "alice")).is_none(), "a revocation is no spend");
    }

    #[test]
    fn only_a_revocation_detail_names_a_revoked_grant() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(revoked(&revocation_detail(id, "alice")), decode_lower_hex::<16>(id));
        assert!(revoked(&format!("grant {id} revoked by ")).is_some());
        for detail in [
            format!("grant {id} by alice"),
            format!("grant {id} revoked"),
            format!("grant {id} revokedby alice"),
            format!("grant {} revoked by alice", id.to_uppercase()),
            format!("grant {}0 revoked by alice", id),
            format!("grant {} revoked by alice", &id[..31]),
            "denied by alice".to_owned(),
        ] {
            assert!(revoked(&detail).is_none(), "{detail}");
        }
    }
}
