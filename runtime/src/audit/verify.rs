//! The verifier: walks the log from the first record and reports the first one that is not what the
//! writer wrote.

use std::fmt;
use std::ops::ControlFlow;

use serde_json::Value;

use super::crypto::{self, GENESIS};
use super::record::{decode_frame, parse_body};
use super::{Anchor, AuditError, AuditLog, AuditRecord, CommitmentAlg, CommittedPart, Digest};

/// What a successful verification checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records checked: all of them, from #1 to the head.
    pub records: u64,
    /// The head the records end at.
    pub head: Anchor,
    /// Records whose MAC was verified (records written before a key was configured have none).
    pub signed_records: u64,
    /// Whether the head's signature was verified.
    pub head_signed: bool,
    /// The anchor's position, if an anchor was given and matched.
    pub anchor_seq: Option<u64>,
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "audit log intact: {} records, head #{} {}", self.records, self.head.seq, self.head.hash)?;
        writeln!(f, "  record signatures: {} of {} verified", self.signed_records, self.records)?;
        if self.head_signed {
            writeln!(f, "  head signature: verified (key `{}`)", self.head.key_id.as_deref().unwrap_or_default())?;
        } else {
            writeln!(
                f,
                "  head signature: none (no audit key): records deleted at the end are detected only against an anchor"
            )?;
        }
        match self.anchor_seq {
            Some(seq) => write!(f, "  anchor: #{seq} matches"),
            None => write!(f, "  anchor: none given"),
        }
    }
}

/// Why a log did not verify.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The log was tampered with: the first bad record.
    #[error("{0}")]
    Tampered(Tamper),
    /// A record or the head is signed with a key the verifier was not given (add it to
    /// [`AuditConfig::retired_keys`](super::AuditConfig::retired_keys)).
    #[error("record #{seq} is signed with key `{key_id}`, which the verifier does not have")]
    UnknownKey {
        /// The record (or the head's position).
        seq: u64,
        /// The key's id.
        key_id: String,
    },
    /// The anchor's own signature does not verify: it was altered or made with another key.
    #[error("the anchor's signature does not verify: it was altered or made with another key")]
    BadAnchor,
    /// The log could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
}

/// The first bad record of a tampered log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tamper {
    /// Where the problem is: the first bad record, or for head problems the position after the last record.
    pub seq: u64,
    /// What is wrong.
    pub kind: TamperKind,
}

/// What is wrong with a tampered log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TamperKind {
    /// The record cannot be decoded, or is not in its canonical encoding.
    Malformed {
        /// What is wrong with it.
        reason: String,
    },
    /// Records `first..=last` are missing: deleted.
    Missing {
        /// The first missing position.
        first: u64,
        /// The last missing position.
        last: u64,
    },
    /// The record stored at this position says it belongs elsewhere: records were swapped or moved.
    Misplaced {
        /// The position the record claims.
        claims: u64,
    },
    /// The record's content does not match its hash: altered.
    Altered,
    /// The record's `prev` is not the hash of the record before it: a record before it was altered and
    /// re-hashed, or records were removed or reordered and re-hashed.
    ChainBroken,
    /// The record's MAC does not verify: written or rewritten by someone without the key.
    Forged,
    /// The record is not signed although an earlier one is, or names a key but carries no MAC:
    /// signatures were stripped.
    Unsigned,
    /// There are records but no head.
    HeadMissing,
    /// The head says the log ends at `head_seq`, past the last record: records at the end were deleted.
    TruncatedBelowHead {
        /// The head's position.
        head_seq: u64,
    },
    /// The head does not match the last record.
    HeadMismatch {
        /// The head's position.
        head_seq: u64,
    },
    /// The log has a key but the head is not signed: rewritten by someone without the key (or nothing
    /// was appended since the key was configured).
    HeadUnsigned,
    /// The head's signature does not verify: the head was rewritten without the key.
    HeadForged,
    /// The anchor says the log reached `anchor_seq`, past the last record: records at the end were
    /// deleted and the head rewound.
    TruncatedBelowAnchor {
        /// The anchor's position.
        anchor_seq: u64,
    },
    /// The record at the anchor's position has another hash than the anchor: the log was rewritten.
    AnchorMismatch,
}

impl fmt::Display for Tamper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = self.seq;
        write!(f, "audit log tampered at record #{seq}: ")?;
        match &self.kind {
            TamperKind::Malformed { reason } => write!(f, "the record cannot be decoded ({reason})"),
            TamperKind::Missing { first, last } if first == last => write!(f, "record #{first} is missing (deleted)"),
            TamperKind::Missing { first, last } => write!(f, "records #{first} to #{last} are missing (deleted)"),
            TamperKind::Misplaced { claims } => {
                write!(f, "the record stored here says it is #{claims} (records swapped or moved)")
            }
            TamperKind::Altered => f.write_str("the record's content does not match its hash (altered)"),
            TamperKind::ChainBroken => write!(
                f,
                "the record does not follow record #{}: a record before it was altered and re-hashed, or records \
                 were removed or reordered",
                seq.saturating_sub(1)
            ),
            TamperKind::Forged => {
                f.write_str("the record's signature does not verify (written or rewritten without the audit key)")
            }
            TamperKind::Unsigned => f.write_str("the record is not signed although it should be (signatures stripped)"),
            TamperKind::HeadMissing => f.write_str("the log has records but no head"),
            TamperKind::TruncatedBelowHead { head_seq } => write!(
                f,
                "the log ends at #{} but its head says #{head_seq}: records at the end were deleted",
                seq.saturating_sub(1)
            ),
            TamperKind::HeadMismatch { head_seq } => {
                write!(f, "the head (#{head_seq}) does not match the last record (#{})", seq.saturating_sub(1))
            }
            TamperKind::HeadUnsigned => f.write_str(
                "the head is not signed although the log has a key: rewritten without the key, or nothing was \
                 appended since the key was configured",
            ),
            TamperKind::HeadForged => {
                f.write_str("the head's signature does not verify: the head was rewritten without the audit key")
            }
            TamperKind::TruncatedBelowAnchor { anchor_seq } => write!(
                f,
                "the log ends at #{} but the anchor says it reached #{anchor_seq}: records at the end were deleted \
                 and the head rewound",
                seq.saturating_sub(1)
            ),
            TamperKind::AnchorMismatch => {
                f.write_str("the record's hash differs from the anchor's: the log was rewritten up to here")
            }
        }
    }
}

/// Checks the whole log: every record's encoding, position, hash, link to its predecessor and signature,
/// then the head against the last record and its signature, then `anchor` (an exported head kept
/// elsewhere) if given. Reports the first bad record.
///
/// Without a key, a log rewritten from some record on with recomputed hashes is consistent: only an anchor
/// taken before the rewrite detects it. With a key, the first forged record is reported.
pub fn verify(log: &AuditLog, anchor: Option<&Anchor>) -> Result<VerifyReport, VerifyError> {
    let mut walk = Walk {
        log,
        expected: 1,
        prev: GENESIS,
        signed_records: 0,
        signed_seen: false,
        anchor_seq: anchor.map(|a| a.seq),
        hash_at_anchor: None,
        failure: None,
    };
    let head = log.store().scan(1, &mut |seq, bytes| match walk.check(seq, bytes) {
        Ok(()) => ControlFlow::Continue(()),
        Err(err) => {
            walk.failure = Some(err);
            ControlFlow::Break(())
        }
    })?;
    if let Some(failure) = walk.failure {
        return Err(failure);
    }
    let records = walk.expected - 1;
    let last_hash = walk.prev;
    let tamper = |kind| VerifyError::Tampered(Tamper { seq: records + 1, kind });

    // The head.
    let head = match head {
        Some(bytes) => {
            Anchor::decode_stored(&bytes).map_err(|err| tamper(TamperKind::Malformed { reason: err.to_string() }))?
        }
        // The head of the empty log, not read again: a writer may have appended since the scan's snapshot.
        None if records == 0 => log.empty_head(),
        None => return Err(tamper(TamperKind::HeadMissing)),
    };
    if head.seq > records {
        return Err(tamper(TamperKind::TruncatedBelowHead { head_seq: head.seq }));
    }
    if head.seq != records || head.hash != last_hash {
        return Err(tamper(TamperKind::HeadMismatch { head_seq: head.seq }));
    }
    let must_sign = records > 0 && (log.signing_key().is_some() || walk.signed_seen);
    let head_signed = match (&head.key_id, &head.mac) {
        (Some(key_id), Some(mac)) if records > 0 => {
            let keys =
                log.key(key_id).ok_or_else(|| VerifyError::UnknownKey { seq: head.seq, key_id: key_id.clone() })?;
            if !keys.verify_head_mac(head.seq, &head.hash, mac) {
                return Err(tamper(TamperKind::HeadForged));
            }
            true
        }
        _ if must_sign => return Err(tamper(TamperKind::HeadUnsigned)),
        _ => false,
    };

    // The anchor.
    let mut anchor_seq = None;
    if let Some(anchor) = anchor {
        if let (Some(key_id), Some(mac)) = (&anchor.key_id, &anchor.mac) {
            let keys =
                log.key(key_id).ok_or_else(|| VerifyError::UnknownKey { seq: anchor.seq, key_id: key_id.clone() })?;
            if !keys.verify_head_mac(anchor.seq, &anchor.hash, mac) {
                return Err(VerifyError::BadAnchor);
            }
        }
        if anchor.seq > records {
            return Err(tamper(TamperKind::TruncatedBelowAnchor { anchor_seq: anchor.seq }));
        }
        let recorded = if anchor.seq == 0 { Some(GENESIS) } else { walk.hash_at_anchor };
        if recorded != Some(anchor.hash) {
            return Err(VerifyError::Tampered(Tamper { seq: anchor.seq, kind: TamperKind::AnchorMismatch }));
        }
        anchor_seq = Some(anchor.seq);
    }

    Ok(VerifyReport { records, head, signed_records: walk.signed_records, head_signed, anchor_seq })
}

struct Walk<'a> {
    log: &'a AuditLog,
    expected: u64,
    prev: Digest,
    signed_records: u64,
    signed_seen: bool,
    anchor_seq: Option<u64>,
    hash_at_anchor: Option<Digest>,
    failure: Option<VerifyError>,
}

impl Walk<'_> {
    fn check(&mut self, seq: u64, bytes: &[u8]) -> Result<(), VerifyError> {
        let tamper = |seq, kind| VerifyError::Tampered(Tamper { seq, kind });
        if seq > self.expected {
            return Err(tamper(self.expected, TamperKind::Missing { first: self.expected, last: seq - 1 }));
        }
        if seq < self.expected {
            return Err(tamper(seq, TamperKind::Malformed { reason: "no record is numbered 0".to_owned() }));
        }
        let frame = decode_frame(bytes).map_err(|reason| tamper(seq, TamperKind::Malformed { reason }))?;
        let body = parse_body(frame.body).map_err(|reason| tamper(seq, TamperKind::Malformed { reason }))?;
        if body.seq != seq {
            return Err(tamper(seq, TamperKind::Misplaced { claims: body.seq }));
        }
        if crypto::record_hash(&body.prev, frame.body) != frame.hash {
            return Err(tamper(seq, TamperKind::Altered));
        }
        if body.prev != self.prev {
            return Err(tamper(seq, TamperKind::ChainBroken));
        }
        match (&body.key_id, &frame.mac) {
            (Some(key_id), Some(mac)) => {
                let keys =
                    self.log.key(key_id).ok_or_else(|| VerifyError::UnknownKey { seq, key_id: key_id.clone() })?;
                if !keys.verify_record_mac(seq, &frame.hash, mac) {
                    return Err(tamper(seq, TamperKind::Forged));
                }
                self.signed_seen = true;
                self.signed_records += 1;
            }
            (None, None) if !self.signed_seen => {}
            (_, None) => return Err(tamper(seq, TamperKind::Unsigned)),
            (None, Some(_)) => {
                return Err(tamper(seq, TamperKind::Malformed { reason: "a signature without a key id".to_owned() }));
            }
        }
        if Some(seq) == self.anchor_seq {
            self.hash_at_anchor = Some(frame.hash);
        }
        self.prev = frame.hash;
        self.expected = seq + 1;
        Ok(())
    }
}

impl AuditLog {
    /// Whether `value` is the value `record` committed to as its `part`: lets the holder of the key prove
    /// what arguments a call had without the log storing them. `Ok(false)` if the record has no such
    /// commitment.
    pub fn check_commitment(
        &self,
        record: &AuditRecord,
        part: CommittedPart,
        value: &Value,
    ) -> Result<bool, VerifyError> {
        let commitment = match part {
            CommittedPart::Arguments => record.arguments,
            CommittedPart::Result => record.result,
        };
        let Some(commitment) = commitment else { return Ok(false) };
        let mut canonical = Vec::new();
        crypto::canonical_json(value, &mut canonical);
        match commitment.alg {
            CommitmentAlg::Sha256 => Ok(crypto::plain_commitment(part, &canonical) == commitment.digest),
            CommitmentAlg::HmacSha256 => {
                let key_id = record.key_id.clone().unwrap_or_default();
                let keys = self.key(&key_id).ok_or(VerifyError::UnknownKey { seq: record.seq, key_id })?;
                Ok(keys.verify_commitment(part, &canonical, &commitment.digest))
            }
        }
    }
}
