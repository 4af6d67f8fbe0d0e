//! One append: the prepared records of a call and the chain that links them (signing key, clock), written
//! inside the transaction of whichever store holds the log (`redb.rs`, `postgres.rs`, the log's own group
//! commit in `log.rs`).

use std::sync::Arc;

use super::crypto::{self, DerivedKeys, GENESIS};
use super::record::{self, Body};
use super::store::Batch;
use super::{Anchor, AuditError, AuditOutcome, AuditReceipt, Commitment};
use crate::clock::{Clock, duration_nanos};

/// What chains records: the signing key and the clock that stamps them. Shared with the writer that
/// appends them, so records are dated and chained inside the transaction that writes them.
pub(crate) struct Chain {
    pub(super) signing: Option<DerivedKeys>,
    pub(super) clock: Arc<dyn Clock>,
}

/// Prepared records to append in one transaction, and how to chain them.
#[derive(Clone)]
pub(crate) struct AuditAppend {
    pub(super) chain: Arc<Chain>,
    pub(crate) entries: Vec<AuditEntry>,
}

/// A record as the appending thread prepares it: everything but its position, time and hashes.
#[derive(Clone)]
pub(crate) struct AuditEntry {
    pub(super) tool: String,
    pub(super) tool_call_id: String,
    pub(super) thread_id: Option<String>,
    pub(super) caller: Option<String>,
    pub(crate) outcome: AuditOutcome,
    pub(super) rule: Option<String>,
    pub(crate) detail: Option<String>,
    pub(super) arguments: Option<Commitment>,
    pub(super) result: Option<Commitment>,
    pub(super) raw_arguments: Option<String>,
    pub(super) raw_result: Option<String>,
}

pub(super) type Prepared = AuditEntry;

impl Chain {
    pub(super) fn sign_head(&self, seq: u64, hash: super::Digest) -> Anchor {
        match &self.signing {
            Some(keys) => Anchor::new(seq, hash, Some(keys.id.clone()), Some(keys.head_mac(seq, &hash))),
            None => Anchor::new(seq, hash, None, None),
        }
    }

    /// Chains `entries` after `head`, all stamped `time_ns`: the records to write, the new head, and a
    /// receipt per entry.
    pub(super) fn link(
        &self,
        head: Option<Anchor>,
        entries: &[Prepared],
        time_ns: u64,
    ) -> Result<(Batch, Vec<AuditReceipt>), AuditError> {
        let (mut seq, mut prev) = head.map_or((0, GENESIS), |head| (head.seq, head.hash));
        let mut records = Vec::with_capacity(entries.len());
        let mut receipts = Vec::with_capacity(entries.len());
        for entry in entries {
            seq = seq.checked_add(1).ok_or(AuditError::Exhausted)?;
            let body = Body {
                seq,
                prev,
                time_ns,
                tool: entry.tool.clone(),
                tool_call_id: entry.tool_call_id.clone(),
                thread_id: entry.thread_id.clone(),
                caller: entry.caller.clone(),
                outcome: entry.outcome,
                rule: entry.rule.clone(),
                detail: entry.detail.clone(),
                arguments: entry.arguments,
                result: entry.result,
                raw_arguments: entry.raw_arguments.clone(),
                raw_result: entry.raw_result.clone(),
                key_id: self.signing.as_ref().map(|keys| keys.id.clone()),
            };
            let bytes = body.encode();
            let hash = crypto::record_hash(&prev, &bytes);
            let mac = self.signing.as_ref().map(|keys| keys.record_mac(seq, &hash));
            records.push((seq, record::encode_frame(&hash, mac.as_ref(), &bytes)));
            receipts.push(AuditReceipt { seq, hash });
            prev = hash;
        }
        Ok((Batch { records, head: self.sign_head(seq, prev) }, receipts))
    }
}

impl AuditAppend {
    /// The records to write after `head` (read in the writing transaction), the new head, and the
    /// receipts, stamped now.
    pub(crate) fn link(&self, head: Option<Anchor>) -> Result<(Batch, Vec<AuditReceipt>), AuditError> {
        self.chain.link(head, &self.entries, duration_nanos(self.chain.clock.now()))
    }

    /// Emits each record as a `tracing` event, with its receipt or the error that lost it.
    pub(crate) fn trace(&self, result: &Result<Vec<AuditReceipt>, AuditError>) {
        for (index, entry) in self.entries.iter().enumerate() {
            let one = match result {
                Ok(receipts) => receipts.get(index).copied().ok_or(AuditError::Abandoned),
                Err(err) => Err(err.clone()),
            };
            trace(entry, &one);
        }
    }
}

/// The record as a `tracing` event: the same facts, commitments only (raw values never go to traces).
pub(super) fn trace(entry: &Prepared, result: &Result<AuditReceipt, AuditError>) {
    // Shown through `Display`, so digits are written only where a subscriber records the event.
    let arguments = entry.arguments.map(|c| tracing::field::display(c.digest));
    let result_digest = entry.result.map(|c| tracing::field::display(c.digest));
    match result {
        Ok(receipt) => tracing::info!(
            target: "agent_airlock::audit",
            seq = receipt.seq,
            tool = %entry.tool,
            tool_call_id = %entry.tool_call_id,
            thread_id = entry.thread_id.as_deref(),
            caller = entry.caller.as_deref(),
            outcome = %entry.outcome,
            rule = entry.rule.as_deref(),
            detail = entry.detail.as_deref(),
            arguments = arguments,
            result = result_digest,
            hash = %receipt.hash,
            "tool call audited"
        ),
        Err(err) => tracing::error!(
            target: "agent_airlock::audit",
            tool = %entry.tool,
            tool_call_id = %entry.tool_call_id,
            thread_id = entry.thread_id.as_deref(),
            caller = entry.caller.as_deref(),
            outcome = %entry.outcome,
            rule = entry.rule.as_deref(),
            detail = entry.detail.as_deref(),
            arguments = arguments,
            result = result_digest,
            error = %err,
            "tool call could not be audited"
        ),
    }
}
