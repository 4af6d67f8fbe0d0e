//! The stored form of a record: a frame around the record's JSON body.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{AuditOutcome, AuditRecord, Commitment, Digest};

const FRAME_VERSION: u8 = 1;
const UNSIGNED: u8 = 0;
const SIGNED: u8 = 1;

/// The hashed part of a record. Field order is the encoding order: never reorder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Body {
    pub(super) seq: u64,
    pub(super) prev: Digest,
    pub(super) time_ns: u64,
    pub(super) tool: String,
    pub(super) tool_call_id: String,
    pub(super) thread_id: Option<String>,
    /// Who called, as the host authenticated them. Absent from the encoding when unnamed, so records
    /// written before callers were recorded keep their one canonical form (and their hashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) caller: Option<String>,
    pub(super) outcome: AuditOutcome,
    pub(super) rule: Option<String>,
    pub(super) detail: Option<String>,
    pub(super) arguments: Option<Commitment>,
    pub(super) result: Option<Commitment>,
    pub(super) raw_arguments: Option<String>,
    pub(super) raw_result: Option<String>,
    pub(super) key_id: Option<String>,
}

impl Body {
    pub(super) fn encode(&self) -> Vec<u8> {
        // A struct of strings, integers, options and unit-like enums: serialization cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(super) fn into_record(self, hash: Digest, mac: Option<Digest>) -> AuditRecord {
        AuditRecord {
            seq: self.seq,
            time: Duration::from_nanos(self.time_ns),
            tool: self.tool,
            tool_call_id: self.tool_call_id,
            thread_id: self.thread_id,
            caller: self.caller,
            outcome: self.outcome,
            rule: self.rule,
            detail: self.detail,
            arguments: self.arguments,
            result: self.result,
            raw_arguments: self.raw_arguments,
            raw_result: self.raw_result,
            key_id: self.key_id,
            prev: self.prev,
            hash,
            mac,
        }
    }
}

/// `version ‖ hash ‖ signed? ‖ [mac] ‖ body`.
pub(super) fn encode_frame(hash: &Digest, mac: Option<&Digest>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 32 + 1 + 32 + body.len());
    out.push(FRAME_VERSION);
    out.extend_from_slice(&hash.0);
    match mac {
        Some(mac) => {
            out.push(SIGNED);
            out.extend_from_slice(&mac.0);
        }
        None => out.push(UNSIGNED),
    }
    out.extend_from_slice(body);
    out
}

/// A frame split into its parts, the body not yet parsed.
pub(super) struct Frame<'a> {
    pub(super) hash: Digest,
    pub(super) mac: Option<Digest>,
    pub(super) body: &'a [u8],
}

pub(super) fn decode_frame(bytes: &[u8]) -> Result<Frame<'_>, String> {
    let (&version, rest) = bytes.split_first().ok_or("the record is empty")?;
    if version != FRAME_VERSION {
        return Err(format!("unknown record format version {version}"));
    }
    let (hash, rest) = split_digest(rest).ok_or("the record is too short for its hash")?;
    let (&signed, rest) = rest.split_first().ok_or("the record is too short for its signature flag")?;
    let (mac, body) = match signed {
        UNSIGNED => (None, rest),
        SIGNED => {
            let (mac, body) = split_digest(rest).ok_or("the record is too short for its MAC")?;
            (Some(mac), body)
        }
        other => return Err(format!("bad signature flag {other}")),
    };
    Ok(Frame { hash, mac, body })
}

fn split_digest(bytes: &[u8]) -> Option<(Digest, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<32>()?;
    Some((Digest(*head), rest))
}

/// Parses a body, insisting on its canonical encoding so one record has exactly one stored form.
pub(super) fn parse_body(bytes: &[u8]) -> Result<Body, String> {
    let body: Body = serde_json::from_slice(bytes).map_err(|err| format!("the record body is not valid: {err}"))?;
    if body.encode() != bytes {
        return Err("the record body is not in canonical form".to_owned());
    }
    Ok(body)
}

/// Decodes a stored record without checking its hash (for listing; [`super::verify`] checks).
pub(super) fn decode_record(seq: u64, bytes: &[u8]) -> Result<AuditRecord, super::AuditError> {
    let corrupt = |reason: String| super::AuditError::Corrupt { seq, reason };
    let frame = decode_frame(bytes).map_err(corrupt)?;
    let body = parse_body(frame.body).map_err(corrupt)?;
    Ok(body.into_record(frame.hash, frame.mac))
}
