//! Checkpoint commitments: detect a host's checkpoint changed between a pause and a resume.
//!
//! A graph runtime (LangGraph) keeps its state in a checkpoint store the approval protocol does not trust.
//! Approvals are bound to the call, so a forged resume admits nothing; but the *state* a resumed graph
//! goes on from could still be edited in the store (a message rewritten, a channel changed), or a run
//! could be sent back to an older checkpoint (time travel). Each time the host's saver writes, the host
//! records here a keyed digest of what the saver now holds for the thread — its **manifest**, the hashes
//! of each serialised part (the checkpoint's fields, every channel value, every pending write; metadata
//! excluded), as JSON. Before it writes again, and before an escalated call resumes, it verifies that
//! what the store holds is still what it committed: [`Verdict::Edited`] or [`Verdict::NotHead`] is a
//! tamper to record (an audit record of [`AuditOutcome::StateTamper`](crate::audit::AuditOutcome)) and,
//! for an escalated call, a refusal. A checkpoint the graph then makes from a tampered one (or from one
//! that could not be verified) is committed [tainted](CheckpointCommitments::record_tainted), and so is every
//! checkpoint made from that: the edit is in their state too, so a resume from any of them is refused
//! ([`Verdict::Tainted`]) rather than vouched for one step after the edit was found.
//!
//! Each checkpoint of a scope (`langgraph:<thread_id>[/<checkpoint_ns>]`, `%`, `/` and `#` escaped in both
//! parts) has its own latest commitment, and the scope has a head: the checkpoint the graph last went on to.
//! A digest covers the scope, the checkpoint id, the canonical manifest and the digest it follows (the checkpoint's previous commitment,
//! or the head's for a new checkpoint), under the approval key's checkpoint domain, so nobody without the
//! key can write a commitment that verifies. [`CommitmentStore`] says where they are kept (a table of
//! the airlock redb database, a table of the ledger's PostgreSQL database, or memory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redb::{Database, ReadableDatabase as _, TableDefinition};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical;
use crate::keys::{ApprovalKey, MAC_LEN, decode_lower_hex};

/// The redb table of commitment heads: scope → JSON of [`Commitment`].
const COMMITMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_checkpoint_commitments");

/// The last commitment of one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commitment {
    /// The checkpoint committed to.
    pub checkpoint_id: String,
    /// The keyed digest, lowercase hex.
    pub digest: String,
    /// The digest this one follows, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// The checkpoint descends from one that was found tampered with or could not be verified: what it holds
    /// is as committed, but it is no state to resume an escalated call from. Covered by the digest, so it
    /// cannot be cleared without the key; a commitment written before this field existed reads as untainted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tainted: bool,
}

/// What [`CheckpointCommitments::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Nothing was committed for the scope yet.
    Unrecorded,
    /// The scope has commitments, but none for this checkpoint: it was put in the store by someone else.
    Unknown,
    /// The checkpoint is the head and holds what was committed.
    Matches,
    /// The checkpoint holds something other than what was committed: edited in the store.
    Edited,
    /// The checkpoint holds what was committed, but another is the head: this one is older (time travel)
    /// or a fork.
    NotHead {
        /// The checkpoint last committed.
        head: String,
    },
    /// The checkpoint holds what was committed, but it was committed as made from a checkpoint found
    /// tampered with (or one that could not be verified), directly or through its ancestors
    /// ([`CheckpointCommitments::record_tainted`]): the tamper was recorded then; a resume from here is one
    /// from that state.
    Tainted,
}

impl Verdict {
    /// Whether the verdict is a tamper to record. [`Verdict::Tainted`] is not: its tamper was recorded when
    /// the checkpoint it descends from was found; it is one to refuse a resume for all the same.
    pub fn is_tamper(&self) -> bool {
        matches!(self, Verdict::Unknown | Verdict::Edited | Verdict::NotHead { .. })
    }
}

/// A commitment that cannot be recorded or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitmentError {
    /// The manifest has no canonical JSON form (a float that is not finite, say).
    #[error("the checkpoint manifest has no canonical form: {0}")]
    Manifest(String),
    /// The store failed.
    #[error("the checkpoint commitments cannot be stored: {0}")]
    Store(String),
    /// The scope holds a `#`, which separates a scope from a checkpoint id in the store's keys (build
    /// scopes with [`CheckpointCommitments::langgraph_scope`], which escapes it).
    #[error("a checkpoint scope cannot hold `#` (it separates the scope from the checkpoint id)")]
    Scope,
}

/// Where commitments are kept: each under a key naming its scope and checkpoint, the head under the
/// scope's own key.
pub trait CommitmentStore: Send + Sync + 'static {
    /// The commitment stored under `key`, if any.
    fn get(&self, key: &str) -> Result<Option<Commitment>, CommitmentError>;
    /// Stores `commitment` under every key of `keys`, at once.
    fn put(&self, keys: &[&str], commitment: &Commitment) -> Result<(), CommitmentError>;
}

/// Commitments in memory, for one process (tests, hosts without a database).
#[derive(Debug, Default)]
pub struct MemoryCommitments(Mutex<HashMap<String, Commitment>>);

impl CommitmentStore for MemoryCommitments {
    fn get(&self, key: &str) -> Result<Option<Commitment>, CommitmentError> {
        Ok(self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(key).cloned())
    }

    fn put(&self, keys: &[&str], commitment: &Commitment) -> Result<(), CommitmentError> {
        let mut map = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for key in keys {
            map.insert((*key).to_owned(), commitment.clone());
        }
        Ok(())
    }
}

/// Heads in a table of the airlock redb database (the file the ledger and the audit log share), so a
/// resume in another process verifies against what the pausing process committed.
#[derive(Clone)]
pub struct RedbCommitments(Arc<Database>);

impl std::fmt::Debug for RedbCommitments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbCommitments").finish_non_exhaustive()
    }
}

impl RedbCommitments {
    /// Heads in `database`.
    pub fn new(database: Arc<Database>) -> Self {
        RedbCommitments(database)
    }
}

fn store_error(error: impl std::fmt::Display) -> CommitmentError {
    CommitmentError::Store(error.to_string())
}

impl CommitmentStore for RedbCommitments {
    fn get(&self, key: &str) -> Result<Option<Commitment>, CommitmentError> {
        let read = self.0.begin_read().map_err(store_error)?;
        let table = match read.open_table(COMMITMENTS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(err) => return Err(store_error(err)),
        };
        match table.get(key).map_err(store_error)? {
            Some(bytes) => serde_json::from_slice(bytes.value()).map(Some).map_err(store_error),
            None => Ok(None),
        }
    }

    fn put(&self, keys: &[&str], commitment: &Commitment) -> Result<(), CommitmentError> {
        let bytes = serde_json::to_vec(commitment).map_err(store_error)?;
        let write = self.0.begin_write().map_err(store_error)?;
        {
            let mut table = write.open_table(COMMITMENTS).map_err(store_error)?;
            for key in keys {
                table.insert(*key, bytes.as_slice()).map_err(store_error)?;
            }
        }
        write.commit().map_err(store_error)
    }
}

/// Commitments in the airlock tables of a PostgreSQL database (`airlock_checkpoint_commitments`, feature
/// `postgres`): the database a [`PostgresLedger`](crate::ledger::PostgresLedger) and its audit log use, so a
/// resume on another host verifies against what the pausing host committed. Each read and each write is
/// one transaction (a write of several keys, the checkpoint's and the head, commits them together).
#[cfg(feature = "postgres")]
#[derive(Clone)]
pub struct PostgresCommitments(Arc<crate::store::postgres::Shared>);

#[cfg(feature = "postgres")]
impl std::fmt::Debug for PostgresCommitments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCommitments").finish_non_exhaustive()
    }
}

#[cfg(feature = "postgres")]
impl PostgresCommitments {
    /// Commitments in `ledger`'s database, through its pool.
    pub fn new(ledger: &crate::ledger::PostgresLedger) -> Self {
        PostgresCommitments(Arc::clone(ledger.shared()))
    }
}

#[cfg(feature = "postgres")]
impl CommitmentStore for PostgresCommitments {
    fn get(&self, key: &str) -> Result<Option<Commitment>, CommitmentError> {
        let key = key.to_owned();
        let text = crate::store::postgres::write(&self.0, move |tables| {
            tables.text("SELECT commitment FROM airlock_checkpoint_commitments WHERE commitment_key = $1", &key)
        })
        .wait()
        .map_err(store_error)?;
        match text.flatten() {
            Some(text) => serde_json::from_str(&text).map(Some).map_err(store_error),
            None => Ok(None),
        }
    }

    fn put(&self, keys: &[&str], commitment: &Commitment) -> Result<(), CommitmentError> {
        let text = serde_json::to_string(commitment).map_err(store_error)?;
        let keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
        crate::store::postgres::write(&self.0, move |tables| {
            for key in &keys {
                tables.execute(
                    "INSERT INTO airlock_checkpoint_commitments (commitment_key, commitment) VALUES ($1, $2) \
                     ON CONFLICT (commitment_key) DO UPDATE SET commitment = EXCLUDED.commitment",
                    &[key, &text],
                )?;
            }
            Ok::<_, crate::store::StoreError>(())
        })
        .wait()
        .map_err(store_error)
    }
}

/// Records and verifies checkpoint commitments under an approval key.
#[derive(Clone)]
pub struct CheckpointCommitments {
    key: ApprovalKey,
    store: Arc<dyn CommitmentStore>,
}

impl std::fmt::Debug for CheckpointCommitments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointCommitments").field("key_id", &self.key.id()).finish_non_exhaustive()
    }
}

impl CheckpointCommitments {
    /// Commitments keyed by `key`, their heads in `store`.
    pub fn new(key: ApprovalKey, store: impl CommitmentStore) -> Self {
        CheckpointCommitments { key, store: Arc::new(store) }
    }

    /// The scope of a LangGraph thread and checkpoint namespace: `langgraph:<thread_id>[/<checkpoint_ns>]`,
    /// with `%`, `/` and `#` in either part written `%25`, `%2F` and `%23`, so that no two threads and
    /// namespaces share a scope (thread `a/b` is not thread `a`'s namespace `b`) and no scope holds a `#`.
    pub fn langgraph_scope(thread_id: &str, checkpoint_ns: &str) -> String {
        let mut scope = String::with_capacity("langgraph:".len() + thread_id.len() + checkpoint_ns.len() + 1);
        scope.push_str("langgraph:");
        push_scope_part(&mut scope, thread_id);
        if !checkpoint_ns.is_empty() {
            scope.push('/');
            push_scope_part(&mut scope, checkpoint_ns);
        }
        scope
    }

    fn mac(
        &self,
        scope: &str,
        checkpoint_id: &str,
        manifest: &Value,
        previous: Option<&str>,
        tainted: bool,
    ) -> Result<crate::keys::Mac, CommitmentError> {
        let canonical = canonical::to_canonical_vec(manifest).map_err(|e| CommitmentError::Manifest(e.to_string()))?;
        let mut mac = self.key.checkpoint_mac();
        // A taint is a fifth field; an untainted commitment has four, as before the taint existed, so the
        // commitments written then still verify. Length-prefixed, so no two field lists share an encoding.
        let taint: &[&[u8]] = if tainted { &[TAINT_FIELD] } else { &[] };
        for field in
            [scope.as_bytes(), checkpoint_id.as_bytes(), canonical.as_slice(), previous.unwrap_or("").as_bytes()]
                .iter()
                .chain(taint)
        {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        Ok(mac)
    }

    /// Commits to `manifest` as what `checkpoint_id` holds in `scope` now, chained after the checkpoint's
    /// previous commitment (or, for a new checkpoint, the head's). With `head`, the checkpoint becomes
    /// the scope's head (a new checkpoint the graph went on to); otherwise the head stays (late writes to a
    /// checkpoint the graph already left).
    ///
    /// A checkpoint committed as [tainted](Self::record_tainted) stays so: its later commitments (late writes)
    /// are tainted too.
    pub fn record(
        &self,
        scope: &str,
        checkpoint_id: &str,
        manifest: &Value,
        head: bool,
    ) -> Result<Commitment, CommitmentError> {
        self.commit(scope, checkpoint_id, manifest, head, false)
    }

    /// [`record`](Self::record)s a checkpoint the graph made from one that was found tampered with, could not
    /// be verified, or is itself tainted: the commitment says so ([`Commitment::tainted`], under the digest),
    /// and [`verify`](Self::verify) answers [`Verdict::Tainted`] for it, so that the state an edit went into
    /// is not vouched for one checkpoint later.
    pub fn record_tainted(
        &self,
        scope: &str,
        checkpoint_id: &str,
        manifest: &Value,
        head: bool,
    ) -> Result<Commitment, CommitmentError> {
        self.commit(scope, checkpoint_id, manifest, head, true)
    }

    fn commit(
        &self,
        scope: &str,
        checkpoint_id: &str,
        manifest: &Value,
        head: bool,
        tainted: bool,
    ) -> Result<Commitment, CommitmentError> {
        let own = entry_key(scope, checkpoint_id)?;
        let (previous, tainted) = match self.store.get(&own)? {
            // The caller verified the checkpoint before it wrote to it (an edited one is not committed to
            // afresh), so its earlier commitment's taint is its own.
            Some(earlier) => (Some(earlier.digest), tainted || earlier.tainted),
            None => (self.store.get(scope)?.map(|head| head.digest), tainted),
        };
        let digest = hex::encode(self.mac(scope, checkpoint_id, manifest, previous.as_deref(), tainted)?.finish());
        let commitment = Commitment { checkpoint_id: checkpoint_id.to_owned(), digest, previous, tainted };
        if head {
            self.store.put(&[own.as_str(), scope], &commitment)?;
        } else {
            self.store.put(&[own.as_str()], &commitment)?;
        }
        Ok(commitment)
    }

    /// Whether `checkpoint_id`, holding `manifest` now, holds what was last committed for it, whether it
    /// is the scope's head, and whether it was committed [tainted](Self::record_tainted). The digests are
    /// compared in constant time.
    pub fn verify(&self, scope: &str, checkpoint_id: &str, manifest: &Value) -> Result<Verdict, CommitmentError> {
        let own_key = entry_key(scope, checkpoint_id)?;
        let Some(head) = self.store.get(scope)? else { return Ok(Verdict::Unrecorded) };
        let Some(own) = self.store.get(&own_key)? else { return Ok(Verdict::Unknown) };
        let Some(expected) = decode_lower_hex::<MAC_LEN>(&own.digest) else { return Ok(Verdict::Edited) };
        let mac = self.mac(scope, checkpoint_id, manifest, own.previous.as_deref(), own.tainted)?;
        if !mac.verify(&expected) {
            return Ok(Verdict::Edited);
        }
        Ok(if own.tainted {
            Verdict::Tainted
        } else if head.checkpoint_id == checkpoint_id {
            Verdict::Matches
        } else {
            Verdict::NotHead { head: head.checkpoint_id }
        })
    }
}

/// The fifth field of a tainted commitment's digest.
const TAINT_FIELD: &[u8] = b"tainted";

/// Where one checkpoint's own commitment is kept: `<scope>#<checkpoint_id>`. A scope holds no `#`, so this
/// key is no scope's head key and no other scope's and checkpoint's entry key.
fn entry_key(scope: &str, checkpoint_id: &str) -> Result<String, CommitmentError> {
    if scope.contains('#') {
        return Err(CommitmentError::Scope);
    }
    Ok(format!("{scope}#{checkpoint_id}"))
}

fn push_scope_part(scope: &mut String, part: &str) {
    for c in part.chars() {
        match c {
            '%' => scope.push_str("%25"),
            '/' => scope.push_str("%2F"),
            '#' => scope.push_str("%23"),
            c => scope.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn commitments() -> CheckpointCommitments {
        CheckpointCommitments::new(ApprovalKey::new("k", &[7; 32]).expect("a key"), MemoryCommitments::default())
    }

    #[test]
    fn no_two_threads_and_namespaces_share_a_scope_or_a_key() {
        let scope = CheckpointCommitments::langgraph_scope;
        assert_eq!(scope("t1", ""), "langgraph:t1");
        assert_eq!(scope("t1", "inner"), "langgraph:t1/inner");
        assert_ne!(scope("a/b", ""), scope("a", "b"));
        assert_ne!(scope("a/b", "c"), scope("a", "b/c"));
        assert_ne!(scope("a%2Fb", ""), scope("a/b", ""));
        assert!(!scope("t#c1", "n#s").contains('#'));
        // A head written for thread `t#c1` is not thread `t`'s entry for checkpoint `c1`.
        let c = commitments();
        let manifest = json!({"channel_values": {}, "pending_writes": []});
        c.record(&scope("t#c1", ""), "x", &manifest, true).unwrap();
        assert_eq!(c.verify(&scope("t", ""), "c1", &manifest).unwrap(), Verdict::Unrecorded);
        c.record(&scope("t", ""), "c1", &manifest, true).unwrap();
        assert_eq!(c.verify(&scope("t#c1", ""), "x", &manifest).unwrap(), Verdict::Matches);
        // A scope built by hand with a `#` is refused, never stored under a key another scope owns.
        assert!(matches!(c.record("langgraph:t#c1", "x", &manifest, true), Err(CommitmentError::Scope)));
        assert!(matches!(c.verify("langgraph:t#c1", "x", &manifest), Err(CommitmentError::Scope)));
    }

    #[test]
    fn what_was_committed_verifies_and_anything_else_does_not() {
        let c = commitments();
        let scope = CheckpointCommitments::langgraph_scope("t1", "");
        let manifest = json!({"channel_values": {"messages": "aa"}, "pending_writes": []});
        assert_eq!(c.verify(&scope, "c1", &manifest).unwrap(), Verdict::Unrecorded);
        c.record(&scope, "c1", &manifest, true).unwrap();
        assert_eq!(c.verify(&scope, "c1", &manifest).unwrap(), Verdict::Matches);
        let edited = json!({"channel_values": {"messages": "ab"}, "pending_writes": []});
        assert_eq!(c.verify(&scope, "c1", &edited).unwrap(), Verdict::Edited);
        assert_eq!(c.verify(&scope, "c9", &edited).unwrap(), Verdict::Unknown);
        let second = c.record(&scope, "c2", &edited, true).unwrap();
        assert!(second.previous.is_some(), "chained");
        assert_eq!(c.verify(&scope, "c1", &manifest).unwrap(), Verdict::NotHead { head: "c2".into() });
        assert_eq!(c.verify(&scope, "c2", &edited).unwrap(), Verdict::Matches);
        // Late writes to the checkpoint the graph left: committed, the head stays.
        let later = json!({"channel_values": {"messages": "aa"}, "pending_writes": [["task", "x", "00"]]});
        c.record(&scope, "c1", &later, false).unwrap();
        assert_eq!(c.verify(&scope, "c1", &later).unwrap(), Verdict::NotHead { head: "c2".into() });
        assert_eq!(c.verify(&scope, "c1", &manifest).unwrap(), Verdict::Edited);
        assert_eq!(c.verify(&scope, "c2", &edited).unwrap(), Verdict::Matches);
    }

    #[test]
    fn a_tainted_checkpoint_verifies_as_tainted_stays_so_and_its_taint_cannot_be_cleared_or_forged() {
        let store = Arc::new(MemoryCommitments::default());
        let c = CheckpointCommitments { key: ApprovalKey::new("k", &[7; 32]).unwrap(), store: store.clone() };
        let scope = CheckpointCommitments::langgraph_scope("t1", "");
        let first = json!({"channel_values": {"messages": "aa"}, "pending_writes": []});
        c.record(&scope, "c1", &first, true).unwrap();
        // c1 found edited; the graph went on from it to c2.
        let second = json!({"channel_values": {"messages": "ab"}, "pending_writes": []});
        let tainted = c.record_tainted(&scope, "c2", &second, true).unwrap();
        assert!(tainted.tainted);
        assert_eq!(c.verify(&scope, "c2", &second).unwrap(), Verdict::Tainted, "the head, and tainted");
        assert!(!Verdict::Tainted.is_tamper(), "recorded when the edit was found, not again");
        assert_eq!(c.verify(&scope, "c2", &first).unwrap(), Verdict::Edited, "the content is still checked");
        // Late writes to it, recorded the plain way, keep the taint.
        let later = json!({"channel_values": {"messages": "ab"}, "pending_writes": [["task", "x", "00"]]});
        assert!(c.record(&scope, "c2", &later, false).unwrap().tainted);
        assert_eq!(c.verify(&scope, "c2", &later).unwrap(), Verdict::Tainted);
        // A checkpoint made from it the plain way is not (the caller taints it when its parent is tainted).
        c.record(&scope, "c3", &later, true).unwrap();
        assert_eq!(c.verify(&scope, "c3", &later).unwrap(), Verdict::Matches);

        // Whoever writes the store cannot clear the taint, nor set it on an untainted commitment: either way
        // the digest no longer verifies.
        let key = entry_key(&scope, "c2").unwrap();
        let mut cleared = store.get(&key).unwrap().unwrap();
        cleared.tainted = false;
        store.put(&[key.as_str()], &cleared).unwrap();
        assert_eq!(c.verify(&scope, "c2", &later).unwrap(), Verdict::Edited);
        let key = entry_key(&scope, "c3").unwrap();
        let mut set = store.get(&key).unwrap().unwrap();
        set.tainted = true;
        store.put(&[key.as_str()], &set).unwrap();
        assert_eq!(c.verify(&scope, "c3", &later).unwrap(), Verdict::Edited);
    }

    #[test]
    fn an_untainted_commitment_is_stored_and_digested_as_before_the_taint_existed() {
        let c = commitments();
        let manifest = json!({"channel_values": {"messages": "aa"}, "pending_writes": []});
        let commitment = c.record("s", "c1", &manifest, true).unwrap();
        let text = serde_json::to_string(&commitment).unwrap();
        assert!(!text.contains("tainted"), "{text}");
        // Read as a commitment of an earlier build would be.
        let earlier: Commitment = serde_json::from_str(&text).unwrap();
        assert!(!earlier.tainted);
        // The digest over the four fields alone, length-prefixed, as the earlier builds computed it.
        let mut mac = ApprovalKey::new("k", &[7; 32]).unwrap().checkpoint_mac();
        let canonical = canonical::to_canonical_vec(&manifest).unwrap();
        for field in [b"s".as_slice(), b"c1", canonical.as_slice(), b""] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        assert_eq!(commitment.digest, hex::encode(mac.finish()));
    }

    #[test]
    fn another_key_does_not_verify_a_commitment() {
        let store = Arc::new(MemoryCommitments::default());
        let ours = CheckpointCommitments { key: ApprovalKey::new("k", &[7; 32]).unwrap(), store: store.clone() };
        let theirs = CheckpointCommitments { key: ApprovalKey::new("k", &[8; 32]).unwrap(), store };
        let manifest = json!({"a": "b"});
        theirs.record("s", "c1", &manifest, true).unwrap();
        assert_eq!(ours.verify("s", "c1", &manifest).unwrap(), Verdict::Edited);
    }

    #[test]
    fn heads_in_redb_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("airlock.redb");
        let manifest = json!({"a": "b"});
        {
            let db = Arc::new(Database::create(&path).unwrap());
            let c = CheckpointCommitments::new(ApprovalKey::new("k", &[7; 32]).unwrap(), RedbCommitments::new(db));
            c.record("s", "c1", &manifest, true).unwrap();
        }
        let db = Arc::new(Database::create(&path).unwrap());
        let c = CheckpointCommitments::new(ApprovalKey::new("k", &[7; 32]).unwrap(), RedbCommitments::new(db));
        assert_eq!(c.verify("s", "c1", &manifest).unwrap(), Verdict::Matches);
        assert_eq!(c.verify("s", "c1", &json!({"a": "c"})).unwrap(), Verdict::Edited);
    }
}
