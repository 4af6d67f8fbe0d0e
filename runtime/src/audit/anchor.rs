//! The head of the log (`seq` and `hash`, signed when a key is configured), stored in the log and
//! exportable as an anchor kept elsewhere.

use std::fmt;
use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{AuditError, Digest};

/// The head of an audit log at some moment: its last sequence number and hash, and a MAC over both under
/// the log's key if it has one. Kept somewhere an attacker with access to the log cannot write (another
/// machine, a write-once store, a ticket), it lets [`verify`](super::verify) detect a log truncated or
/// rewritten behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    format: AnchorFormat,
    /// The last record's sequence number (0 for an empty log).
    pub seq: u64,
    /// The last record's hash (32 zero bytes for an empty log).
    pub hash: Digest,
    /// The key whose head subkey made `mac`.
    #[serde(default)]
    pub key_id: Option<String>,
    /// `HMAC(head subkey, tag ‖ seq ‖ hash)`.
    #[serde(default)]
    pub mac: Option<Digest>,
}

/// Why an anchor could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnchorError {
    /// The file could not be read or written.
    #[error("anchor file: {0}")]
    Io(#[from] std::io::Error),
    /// The text is not an anchor.
    #[error("not an audit anchor: {0}")]
    Parse(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum AnchorFormat {
    #[serde(rename = "agent-airlock-audit-anchor/v1")]
    V1,
}

impl Anchor {
    pub(super) fn new(seq: u64, hash: Digest, key_id: Option<String>, mac: Option<Digest>) -> Anchor {
        Anchor { format: AnchorFormat::V1, seq, hash, key_id, mac }
    }

    /// One line of JSON: `{"format":"agent-airlock-audit-anchor/v1","seq":…,"hash":"…","key_id":…,"mac":…}`.
    pub fn to_json(&self) -> String {
        // Strings, integers and options only: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses what [`to_json`](Self::to_json) wrote.
    pub fn from_json(text: &str) -> Result<Anchor, AnchorError> {
        serde_json::from_str(text.trim()).map_err(|err| AnchorError::Parse(err.to_string()))
    }

    /// Writes the anchor to `path` atomically (a temporary file, fsync, rename, fsync of the directory).
    pub fn write_to(&self, path: impl AsRef<Path>) -> Result<(), AnchorError> {
        let path = path.as_ref();
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(self.to_json().as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            // Makes the rename durable; not every platform can open a directory, which is no reason to fail.
            if let Ok(dir) = std::fs::File::open(dir) {
                let _ = dir.sync_all();
            }
        }
        Ok(())
    }

    /// Reads an anchor written by [`write_to`](Self::write_to).
    pub fn read_from(path: impl AsRef<Path>) -> Result<Anchor, AnchorError> {
        Anchor::from_json(&std::fs::read_to_string(path)?)
    }

    pub(crate) fn encode_stored(&self) -> Vec<u8> {
        self.to_json().into_bytes()
    }

    pub(crate) fn decode_stored(bytes: &[u8]) -> Result<Anchor, AuditError> {
        serde_json::from_slice(bytes)
            .map_err(|err| AuditError::Corrupt { seq: 0, reason: format!("the stored head is not valid: {err}") })
    }
}

impl fmt::Display for Anchor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.seq, self.hash)?;
        match &self.key_id {
            Some(key_id) if self.mac.is_some() => write!(f, " (signed with key `{key_id}`)"),
            _ => f.write_str(" (unsigned)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_and_names_its_format() {
        let anchor = Anchor::new(7, Digest([3; 32]), Some("k1".into()), Some(Digest([9; 32])));
        let text = anchor.to_json();
        assert!(text.starts_with(r#"{"format":"agent-airlock-audit-anchor/v1","seq":7,"#), "{text}");
        assert_eq!(Anchor::from_json(&text).expect("parses"), anchor);
        assert!(Anchor::from_json(&text.replace("anchor/v1", "anchor/v9")).is_err());
        assert!(Anchor::from_json("{}").is_err());
    }

    #[test]
    fn file_round_trips() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("head.anchor");
        let anchor = Anchor::new(1, Digest([1; 32]), None, None);
        anchor.write_to(&path).expect("written");
        assert_eq!(Anchor::read_from(&path).expect("read"), anchor);
        assert_eq!(std::fs::read_dir(dir.path()).expect("listed").count(), 1, "no temporary file left behind");
    }
}
