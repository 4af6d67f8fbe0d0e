//! The audit log: every dispatch outcome appended to a tamper-evident, hash-chained log.
//!
//! # What a record holds
//!
//! Time (from the log's [`Clock`](crate::Clock)), tool, tool call id, thread id, the caller (who asked, as
//! the host authenticated them: an OAuth token's `ISSUER#SUBJECT`), [`AuditOutcome`], the rule
//! that decided, a short detail, and **commitments** to the canonical JSON of the arguments and of the
//! result — not the values themselves unless [`AuditConfig::store_raw`] is set.
//!
//! # Commitments: keyed when a key is configured
//!
//! Tool arguments are often low-entropy (`{"payment_id": "pi_123", "amount": 500}`): a plain SHA-256 of
//! them can be brute-forced by hashing every plausible value, so an unkeyed digest is only a privacy fig
//! leaf. With an [`AuditKey`] the commitment is `HMAC-SHA256(commitment subkey, tag ‖ canonical JSON)`:
//! whoever holds the key (the operator) can still prove that given values are the ones committed
//! ([`AuditLog::check_commitment`]), nobody else can test guesses. Without a key the commitment is
//! `SHA-256(tag ‖ canonical JSON)`, which detects alteration but hides nothing from a determined reader.
//! Tags: `agent-airlock/audit/v1/arguments\0` and `agent-airlock/audit/v1/result\0`.
//!
//! # Chain, MACs and the head
//!
//! Record `n` (sequence numbers start at 1) is stored under key `n` in [`RECORDS_TABLE`] as
//!
//! ```text
//! 0x01 ‖ hash (32 bytes) ‖ 0x00 | 0x01 ‖ [mac (32 bytes) if 0x01] ‖ body
//! ```
//!
//! where `body` is the record's JSON (fixed field order, no whitespace; it contains `seq` and `prev`),
//! `hash = SHA-256("agent-airlock/audit/v1/record\0" ‖ prev ‖ body)` and `prev` is the hash of record
//! `n - 1` (32 zero bytes for record 1). With a key, `mac = HMAC(record subkey, tag ‖ seq ‖ hash)`, so a
//! rewrite of the chain by someone without the key is pinned to the first forged record.
//!
//! The head (last `seq` and `hash`) is kept in [`HEAD_TABLE`], updated in the same write transaction as
//! the records, and signed with the head subkey when a key is configured. Truncation at the head (deleting
//! the last records and rewinding the head) is detected by the signature as long as the attacker has no
//! older signed head to roll back to (a backup of the file is one), and in every case by an [`Anchor`]:
//! the head exported with [`AuditLog::export_head`] and kept somewhere the attacker cannot write.
//!
//! Subkeys are `HMAC(secret, "agent-airlock/audit/v1/subkey\0" ‖ purpose)`, purpose ∈ `commitment`,
//! `record`, `head`. MACs are compared in constant time.
//!
//! # Verification
//!
//! [`verify`] walks the log and reports the **first** bad record ([`Tamper`]): altered, deleted (a gap),
//! reordered, chain broken, forged, truncated at the head. Its [`VerifyReport`] prints as plain text for a
//! command line.
//!
//! # Appends
//!
//! [`AuditLog::append`] is durable when it returns (redb, [`Durability::Immediate`](::redb::Durability)):
//! one write transaction writes the records and the head. Concurrent appends are grouped: while one
//! thread commits, the others queue, and the next commit writes all of them at once. On redb the
//! grouping is done by the database's one writer thread, shared with the approval ledger and the effect
//! records of the same `Arc<Database>`, so a dispatcher appends a call's record in the same transaction
//! as its grant spend or effect settlement, and awaits it instead of blocking.
//!
//! In an append-only file of its own ([`AuditLog::open_append_only`]), an append is one `write` and one
//! `fdatasync` of the records and the head, framed with CRCs (format and crash handling in `audit/file.rs`).
//!
//! The same facts go out as `tracing` events with target `agent_airlock::audit`.

mod anchor;
mod append;
mod crypto;
mod file;
mod log;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
mod redb;
mod spends;
mod store;
mod verify;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::RefusalKind;

#[cfg(feature = "postgres")]
pub(crate) use self::postgres::append_in as append_in_postgres;
pub(crate) use crate::keys::AuditKey;
pub use crate::store::redb::{HEAD_KEY, HEAD_TABLE, RECORDS_TABLE};
pub use anchor::{Anchor, AnchorError};
pub(crate) use append::{AuditAppend, AuditEntry};
pub use log::{AuditLog, ExportError};
pub(crate) use redb::append_in;
pub(crate) use spends::Closed;
pub use verify::{Tamper, TamperKind, VerifyError, VerifyReport, verify};

/// How the audit log records and protects what it records.
#[derive(Debug, Clone, Default)]
pub struct AuditConfig {
    /// Store the canonical JSON of arguments and results in the records as well as their commitments.
    /// Off by default: the log then holds no argument or result values.
    pub store_raw: bool,
    /// The key that makes commitments unguessable and signs records and the head. Without one, records
    /// are hash-chained but unsigned.
    pub key: Option<AuditKey>,
    /// Keys used before `key`: records signed under them still verify. Never used to sign.
    pub retired_keys: Vec<AuditKey>,
}

/// What happened to a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditOutcome {
    /// A gate refused the call before the tool ran (a human's no is `refused` with
    /// [`RefusalKind::HumanDenied`]).
    Refused {
        /// Which gate refused.
        refusal: RefusalKind,
    },
    /// The call needs a human's approval: the dispatcher returned an interrupt.
    Interrupted,
    /// A human approved the call (recorded when the approval is given or spent).
    Approved,
    /// The tool ran and returned a result or a host command.
    Executed,
    /// The tool returned an error.
    Failed {
        /// Whether the tool said its side effect certainly did not happen.
        not_executed: bool,
    },
    /// The tool panicked.
    Panicked,
    /// The call was cancelled (its future dropped) while the tool ran.
    Cancelled,
    /// The call's effect was already committed: refused as a duplicate.
    Duplicate,
    /// The call's effect is ambiguous: refused until an operator resolves it.
    Ambiguous,
    /// The call's effect is reserved by a call still running: refused.
    InFlight,
    /// A host resumed from a checkpoint other than the one last committed for its thread: edited in the
    /// store, or an older one (time travel). Recorded by `checkpoint::CheckpointCommitments`' hosts.
    StateTamper,
    /// An operator said whether an ambiguous effect happened (`airlock effects resolve`, the console).
    /// The record's `tool` is empty and its `tool_call_id` is the effect key; its `detail` names the
    /// operator.
    EffectResolved {
        /// What the operator said.
        resolution: crate::effect::Resolution,
    },
}

impl fmt::Display for AuditOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditOutcome::Refused { refusal } => {
                let kind = serde_json::to_value(refusal).ok();
                match kind.as_ref().and_then(Value::as_str) {
                    Some(kind) => write!(f, "refused ({kind})"),
                    None => write!(f, "refused ({refusal:?})"),
                }
            }
            AuditOutcome::Interrupted => f.write_str("interrupted"),
            AuditOutcome::Approved => f.write_str("approved"),
            AuditOutcome::Executed => f.write_str("executed"),
            AuditOutcome::Failed { not_executed: true } => f.write_str("failed (not executed)"),
            AuditOutcome::Failed { not_executed: false } => f.write_str("failed"),
            AuditOutcome::Panicked => f.write_str("panicked"),
            AuditOutcome::Cancelled => f.write_str("cancelled"),
            AuditOutcome::Duplicate => f.write_str("duplicate"),
            AuditOutcome::Ambiguous => f.write_str("ambiguous"),
            AuditOutcome::InFlight => f.write_str("in flight"),
            AuditOutcome::StateTamper => f.write_str("state tamper"),
            AuditOutcome::EffectResolved { resolution: crate::effect::Resolution::Committed } => {
                f.write_str("effect resolved (committed)")
            }
            AuditOutcome::EffectResolved { resolution: crate::effect::Resolution::Failed } => {
                f.write_str("effect resolved (failed)")
            }
        }
    }
}

/// One dispatch outcome to append. Borrowed: nothing is copied until the record is encoded.
#[derive(Debug, Clone, Copy)]
pub struct AuditEvent<'a> {
    /// The registered tool name (or the name the model asked for, if unknown).
    pub tool: &'a str,
    /// The model's id for the call.
    pub tool_call_id: &'a str,
    /// The host's thread (conversation) id, if it has one.
    pub thread_id: Option<&'a str>,
    /// Who called, as the host authenticated them ([`CallContext::caller`](crate::CallContext::caller)).
    pub caller: Option<&'a str>,
    /// What happened.
    pub outcome: AuditOutcome,
    /// The policy rule or attribute that decided, if one did.
    pub rule: Option<&'a str>,
    /// A short explanation without argument values (e.g. the escalation reason). Stored as is.
    pub detail: Option<&'a str>,
    /// The admitted arguments, committed to (and stored if `store_raw`).
    pub arguments: Option<&'a Value>,
    /// The result the tool returned (or its error text as a JSON string), committed to.
    pub result: Option<&'a Value>,
}

impl<'a> AuditEvent<'a> {
    /// An event with no thread, rule, detail, arguments or result.
    pub fn new(tool: &'a str, tool_call_id: &'a str, outcome: AuditOutcome) -> Self {
        AuditEvent {
            tool,
            tool_call_id,
            thread_id: None,
            caller: None,
            outcome,
            rule: None,
            detail: None,
            arguments: None,
            result: None,
        }
    }

    /// Sets the thread id.
    pub fn thread_id(mut self, thread_id: Option<&'a str>) -> Self {
        self.thread_id = thread_id;
        self
    }

    /// Sets who called.
    pub fn caller(mut self, caller: Option<&'a str>) -> Self {
        self.caller = caller;
        self
    }

    /// Sets the deciding rule.
    pub fn rule(mut self, rule: Option<&'a str>) -> Self {
        self.rule = rule;
        self
    }

    /// Sets the detail text.
    pub fn detail(mut self, detail: Option<&'a str>) -> Self {
        self.detail = detail;
        self
    }

    /// Sets the arguments.
    pub fn arguments(mut self, arguments: &'a Value) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// Sets the result.
    pub fn result(mut self, result: &'a Value) -> Self {
        self.result = Some(result);
        self
    }
}

/// Which committed value of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommittedPart {
    /// The call's arguments.
    Arguments,
    /// The tool's result.
    Result,
}

/// The digits of [`Digest::to_hex`]. `hex::encode` collects a `String` a `char` at a time, which was most of the
/// cost of the several digests an audited call writes and traces.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// A SHA-256 or HMAC-SHA256 output. Shown and serialized as lower-case hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            out.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
            out.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
        }
        out
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(text: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Digest::from_hex(&text).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
    }
}

/// A commitment to a value: its digest and how it was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Commitment {
    /// `sha256`, or `hmac-sha256` under the record's key.
    pub alg: CommitmentAlg,
    /// The digest.
    pub digest: Digest,
}

/// How a [`Commitment`] was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CommitmentAlg {
    /// `SHA-256(tag ‖ canonical JSON)`: detects alteration, hides nothing from a guesser.
    #[serde(rename = "sha256")]
    Sha256,
    /// `HMAC-SHA256(commitment subkey of the record's key, tag ‖ canonical JSON)`.
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
}

/// One record of the log, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// Position in the log, from 1.
    pub seq: u64,
    /// When it was appended, since the Unix epoch.
    #[serde(rename = "time_ns", serialize_with = "crate::effect::duration_nanos::serialize")]
    pub time: Duration,
    /// The tool.
    pub tool: String,
    /// The model's id for the call.
    pub tool_call_id: String,
    /// The host's thread id.
    pub thread_id: Option<String>,
    /// Who called, as the host authenticated them (absent in records written before callers were
    /// recorded, and for hosts that name none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// What happened.
    pub outcome: AuditOutcome,
    /// The rule that decided.
    pub rule: Option<String>,
    /// A short explanation.
    pub detail: Option<String>,
    /// Commitment to the canonical JSON of the arguments.
    pub arguments: Option<Commitment>,
    /// Commitment to the canonical JSON of the result.
    pub result: Option<Commitment>,
    /// The canonical JSON of the arguments, if the log stores raw values.
    pub raw_arguments: Option<String>,
    /// The canonical JSON of the result, if the log stores raw values.
    pub raw_result: Option<String>,
    /// The id of the key that signed the record and keyed its commitments.
    pub key_id: Option<String>,
    /// The hash of the previous record.
    pub prev: Digest,
    /// This record's hash.
    pub hash: Digest,
    /// This record's MAC, if it was signed.
    pub mac: Option<Digest>,
}

impl fmt::Display for AuditRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} t={}.{:09} {} `{}` call `{}`",
            self.seq,
            self.time.as_secs(),
            self.time.subsec_nanos(),
            self.outcome,
            self.tool,
            self.tool_call_id
        )?;
        if let Some(thread) = &self.thread_id {
            write!(f, " thread `{thread}`")?;
        }
        if let Some(caller) = &self.caller {
            write!(f, " caller `{caller}`")?;
        }
        if let Some(rule) = &self.rule {
            write!(f, " rule `{rule}`")?;
        }
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        if let Some(arguments) = &self.arguments {
            write!(f, " args={}", arguments.digest)?;
        }
        if let Some(result) = &self.result {
            write!(f, " result={}", result.digest)?;
        }
        write!(f, " hash={}", self.hash)
    }
}

/// Where an appended record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditReceipt {
    /// The record's position.
    pub seq: u64,
    /// The record's hash.
    pub hash: Digest,
}

/// Why the audit log could not be opened, appended to or read.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Another process has the database file open.
    #[error("the audit database is already open in another process")]
    AlreadyOpen,
    /// The storage failed.
    #[error("audit storage failed: {0}")]
    Storage(Arc<::redb::Error>),
    /// A stored record or head cannot be decoded (run [`verify`] for the full diagnosis).
    #[error("audit record #{seq} cannot be decoded: {reason}")]
    Corrupt {
        /// The record (0 for the head).
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A revocation named something that is not a grant id ([`AuditLog::append_revocation`]): nothing was
    /// written.
    #[error("`{grant_id}` is not an approval grant id (32 lowercase hex characters); nothing was recorded")]
    NotAGrant {
        /// What was given, cut and escaped.
        grant_id: String,
    },
    /// The log is full: the next sequence number would overflow.
    #[error("the audit log has no sequence number left")]
    Exhausted,
    /// The thread committing this append's group panicked; whether the record was written is unknown.
    #[error("the audit append was abandoned: the committing thread panicked")]
    Abandoned,
    /// The database's shared writer failed or stopped (see the source); the record was not written.
    #[error("audit storage failed: {0}")]
    Write(Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The append-only audit file could not be opened, read or written.
    #[error("the audit file {path} {what}: {source}")]
    File {
        /// The file.
        path: String,
        /// What could not be done.
        what: &'static str,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// The append-only audit file holds bytes that no write of the log and no crash can leave (an edit, a
    /// failing disk, another file): it is left as it is, to be kept and looked at.
    #[error(
        "the audit file {path} is damaged at byte {offset}: {reason}; a write cut short by a crash cannot \
         leave that, so the file is left untouched: keep it (it is evidence) and start the log in a new file"
    )]
    Damaged {
        /// The file.
        path: String,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
}

impl AuditError {
    pub(crate) fn storage(err: impl Into<::redb::Error>) -> AuditError {
        match err.into() {
            ::redb::Error::DatabaseAlreadyOpen => AuditError::AlreadyOpen,
            other => AuditError::Storage(Arc::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Digest;

    #[test]
    fn a_digest_is_shown_as_the_lower_case_hex_of_every_byte_and_read_back() {
        // Every byte value, high and low nibble, in eight digests.
        for chunk in (0..=255u8).collect::<Vec<_>>().chunks(32) {
            let digest = Digest(chunk.try_into().expect("32 bytes"));
            let text = digest.to_hex();
            assert_eq!(text, hex::encode(digest.0));
            assert_eq!(digest.to_string(), text);
            assert_eq!(Digest::from_hex(&text), Some(digest));
            assert_eq!(Digest::from_hex(&text.to_uppercase()), Some(digest));
        }
    }
}
