//! The audit log: preparing records, group commit, reading.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};

use redb::Database;
use serde_json::Value;

use super::append::{AuditAppend, AuditEntry, Chain, Prepared, trace};
use super::crypto::{self, DerivedKeys, GENESIS};
use super::file::FileAuditStore;
use super::memory::MemoryAuditStore;
use super::record;
use super::redb::RedbAuditStore;
use super::store::{AuditStore, Batch};
use super::{
    Anchor, AnchorError, AuditConfig, AuditError, AuditEvent, AuditOutcome, AuditReceipt, AuditRecord, Closed,
    Commitment, CommitmentAlg, CommittedPart,
};
use crate::clock::{Clock, SystemClock, duration_nanos};
use crate::keys::decode_lower_hex;
use crate::ledger::RequestRecord;
use crate::message::RefusalKind;
use crate::store::redb::RedbWriter;
use crate::store::{Reply, ReplySender, StoreError, StoreHandle};

/// The most records one write transaction takes; a larger queue is written in several.
const MAX_GROUP: usize = 512;

/// A tamper-evident, hash-chained log of dispatch outcomes. Cheap to share behind an `Arc`; every method
/// takes `&self` and may be called from many threads at once.
///
/// [`append`](Self::append) blocks for one durable commit: call it from a blocking context (e.g.
/// `tokio::task::spawn_blocking`) where that matters, and never while holding a write transaction of the
/// same redb database (the append would wait for it forever). A dispatcher does not call it: it writes a
/// call's records together with the call's other writes and awaits them.
pub struct AuditLog {
    writer: Arc<Writer>,
    store_raw: bool,
    keys: HashMap<String, DerivedKeys>,
    /// On redb, the database's one writer; on PostgreSQL, the ledger's pool: where records are appended
    /// in the same transactions as the ledger's and the effect records' writes.
    handle: Option<StoreHandle>,
    /// A store that waits for a disk (a file) is written on the appending thread, not handed to a thread.
    on_caller: AtomicBool,
    /// For a store that waits for a disk: the thread async appends are handed to, started at the first.
    committer: Mutex<Option<Committer>>,
}

/// The thread a log's async appends are handed to, and its queue. Dropped (with the log), it closes the queue
/// and waits for the thread to write what is queued, so the store (and a file's lock) is released with the log.
struct Committer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            // A committer that panicked has answered its jobs as abandoned (their senders dropped).
            let _ = thread.join();
        }
    }
}

/// What appends records to a store: the store, the chain, and the group commit of blocking appenders.
struct Writer {
    store: Arc<dyn AuditStore>,
    chain: Arc<Chain>,
    group: GroupCommit,
}

/// Records handed to the committer thread, and where their receipts go.
type Job = (Vec<Prepared>, ReplySender<Vec<AuditReceipt>, AuditError>);

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("store_raw", &self.store_raw)
            .field("signing_key", &self.writer.chain.signing.as_ref().map(|k| &k.id))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct GroupCommit {
    queue: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    next_ticket: u64,
    pending: Vec<(u64, Vec<Prepared>)>,
    committing: bool,
    done: HashMap<u64, Result<Vec<AuditReceipt>, AuditError>>,
}

impl GroupCommit {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is only pushed to, drained and flagged under the lock; none of that can panic halfway.
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Hands every ticket of a group an error if the committing thread unwinds, so nobody waits forever.
struct CommitterGuard<'a> {
    group: &'a GroupCommit,
    tickets: Vec<u64>,
    finished: bool,
}

impl Drop for CommitterGuard<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut queue = self.group.lock();
        queue.committing = false;
        for ticket in self.tickets.drain(..) {
            queue.done.insert(ticket, Err(AuditError::Abandoned));
        }
        self.group.changed.notify_all();
    }
}

impl AuditLog {
    /// Opens (or creates) the redb file at `path` for the audit log alone. To share one file with the
    /// approval ledger and the effect records, open the [`Database`] once and use
    /// [`with_database`](Self::with_database). Fails with [`AuditError::AlreadyOpen`] if another process
    /// has the file open.
    pub fn open(path: impl AsRef<Path>, config: AuditConfig) -> Result<AuditLog, AuditError> {
        let db = Database::create(path).map_err(AuditError::storage)?;
        AuditLog::with_database(Arc::new(db), config)
    }

    /// The audit log in a shared redb database (its tables are created if missing).
    ///
    /// Appends go through the database's one writer thread, shared with a [`RedbLedger`](crate::ledger::RedbLedger)
    /// and [`RedbEffectStore`](crate::effect::RedbEffectStore) of the same `Arc<Database>`: concurrent
    /// writes of all three share commits, and a dispatcher writes a call's records in the same
    /// transaction as its grant spend and effect steps.
    pub fn with_database(db: Arc<Database>, config: AuditConfig) -> Result<AuditLog, AuditError> {
        let writer = RedbWriter::for_database(&db).map_err(|err| AuditError::Write(Arc::new(err)))?;
        let mut log = AuditLog::with_store(Arc::new(RedbAuditStore::new(db)?), config);
        log.handle = Some(StoreHandle::redb(writer));
        Ok(log)
    }

    /// The audit log in the PostgreSQL database of `ledger` (feature `postgres`), one chain shared by
    /// every host that connects to it. Its tables come with the ledger's schema.
    ///
    /// A dispatcher whose interrupt approvals use `ledger` writes a call's records in the same
    /// transaction as its grant spend and effect steps; the chain's head is advanced in that
    /// transaction. [`append`](Self::append) and the reads wait for the database.
    #[cfg(feature = "postgres")]
    pub fn with_postgres(ledger: &crate::ledger::PostgresLedger, config: AuditConfig) -> AuditLog {
        let shared = Arc::clone(ledger.shared());
        let mut log =
            AuditLog::with_store(Arc::new(super::postgres::PostgresAuditStore::new(Arc::clone(&shared))), config);
        log.handle = Some(StoreHandle::postgres(shared));
        log
    }

    /// An audit log in memory, lost when dropped.
    pub fn in_memory(config: AuditConfig) -> AuditLog {
        AuditLog::with_store(Arc::<MemoryAuditStore>::default(), config)
    }

    /// Opens (or creates) an append-only audit file at `path`, for the audit log alone: each append (or
    /// group of concurrent appends) is one `write` and one `fdatasync` of its records and the head after
    /// them, where a redb file commits a transaction (several times faster, BENCHMARKS.md §8). The chain,
    /// the MACs, the head and [`verify`](super::verify) are the same; the format is in the module source
    /// (`audit/file.rs`).
    ///
    /// What it gives up: a dispatcher whose ledger or effect records are in a database writes a call's
    /// records after the grant spend or effect step they go with, not in the same transaction. A crash in
    /// between leaves the spend without its record; a record that cannot be written (a full disk) leaves
    /// the spend standing and the call running, the failure traced as an error (in a shared redb file the
    /// spend would not have been made and the call would be refused).
    ///
    /// Any number of processes (and handles) may have the file open to append: each append takes the file's
    /// lock for its write, and goes on from the batches the others wrote (a gateway writing the file, and
    /// `airlock effects resolve` recording a resolution in it, append to one chain). An append waits up to
    /// 30 seconds for another writer's lock, then fails with [`AuditError::File`].
    ///
    /// A write cut short by a crash is cut off (at open, or by any writer's next append) and kept beside the
    /// file (`NAME.torn-OFFSET`); a file damaged otherwise (edited, a failing disk) is refused with
    /// [`AuditError::Damaged`], by the open or the append that finds it, and left as it is.
    ///
    /// Appends from a dispatcher are handed to a thread of the log's (the async caller is not blocked on
    /// the disk) unless [`commit_on_caller_when_idle`](Self::commit_on_caller_when_idle) was called.
    pub fn open_append_only(path: impl AsRef<Path>, config: AuditConfig) -> Result<AuditLog, AuditError> {
        Ok(AuditLog::with_store(Arc::new(FileAuditStore::open(path.as_ref())?), config))
    }

    /// Opens an append-only audit file ([`open_append_only`](Self::open_append_only)) to read and verify it,
    /// changing nothing and taking no lock: a log another process is writing can be read (up to its last
    /// whole append). Appending to it fails.
    pub fn read_append_only(path: impl AsRef<Path>, config: AuditConfig) -> Result<AuditLog, AuditError> {
        Ok(AuditLog::with_store(Arc::new(FileAuditStore::open_read_only(path.as_ref())?), config))
    }

    fn with_store(store: Arc<dyn AuditStore>, config: AuditConfig) -> AuditLog {
        let signing = config.key.as_ref().map(DerivedKeys::derive);
        let mut keys: HashMap<String, DerivedKeys> =
            config.retired_keys.iter().map(|key| (key.id().to_owned(), DerivedKeys::derive(key))).collect();
        if let Some(signing) = &signing {
            keys.insert(signing.id.clone(), signing.clone());
        }
        AuditLog {
            writer: Arc::new(Writer {
                store,
                chain: Arc::new(Chain { signing, clock: Arc::new(SystemClock) }),
                group: GroupCommit::default(),
            }),
            store_raw: config.store_raw,
            keys,
            handle: None,
            on_caller: AtomicBool::new(false),
            committer: Mutex::new(None),
        }
    }

    /// The clock that stamps records (tests use a [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(mut self, clock: impl Clock) -> AuditLog {
        let chain = Arc::new(Chain { signing: self.writer.chain.signing.clone(), clock: Arc::new(clock) });
        self.writer = Arc::new(Writer { store: Arc::clone(&self.writer.store), chain, group: GroupCommit::default() });
        self.committer = Mutex::new(None);
        self
    }

    /// Appends one record, durably, and emits it as a `tracing` event (target `agent_airlock::audit`).
    /// Concurrent appends share commits. Blocks for the commit: async code appends through a dispatcher,
    /// which awaits it instead.
    pub fn append(&self, event: AuditEvent<'_>) -> Result<AuditReceipt, AuditError> {
        let prepared = self.prepare(&event);
        let result = match self.write_through(vec![prepared.clone()]) {
            Ok(written) => written,
            Err(entries) => self.writer.submit(entries),
        }
        .and_then(|mut receipts| receipts.pop().ok_or(AuditError::Abandoned));
        trace(&prepared, &result);
        result
    }

    /// From now on, a write to this log's redb file (and to the ledger and effect records sharing it) that
    /// finds the file's writer thread idle is committed on the thread that makes it, instead of being handed
    /// to the writer and back: the same durable commit, answered after it, in the same order, without the two
    /// thread wake-ups. Writes that find the writer busy still share its commits. It blocks the writing
    /// thread for the commit, so it suits a process that serves one client on one thread (`airlock mcp` on
    /// stdio), whose executor has nothing else to run meanwhile; never an executor shared by many callers.
    /// On an append-only file ([`open_append_only`](Self::open_append_only)), a dispatcher's appends are
    /// then written on the appending thread instead of being handed to the log's thread.
    /// Returns whether it applies (a log in a redb file or an append-only file).
    pub fn commit_on_caller_when_idle(&self) -> bool {
        if self.writer.store.waits_for_disk() {
            self.on_caller.store(true, Ordering::Relaxed);
            return true;
        }
        match self.handle.as_ref().and_then(StoreHandle::redb_writer) {
            Some(writer) => {
                writer.commit_on_caller_when_idle();
                true
            }
            None => false,
        }
    }

    /// How and when a record of this log before `seq` recorded the spend of `grant_id` (an `approved` record
    /// naming it) or its revocation ([`append_revocation`](Self::append_revocation)): in an append-only file,
    /// written by any host or operator sharing it, through this handle or before it opened the file. Other stores
    /// answer `None` (their database's holder, who can set a spent or revoked grant back to live, can rewrite
    /// them too; the approvals remember their own spends).
    pub(crate) fn closed_before(&self, grant_id: &str, seq: u64) -> Option<Closed> {
        self.writer.store.closed_before(grant_id, seq)
    }

    /// Whether [`closed_before`](Self::closed_before) answers for this log (an append-only file): a spend
    /// whose record it could not append cannot be checked against it.
    pub(crate) fn knows_closings(&self) -> bool {
        self.writer.store.knows_closings()
    }

    /// Records that `revoked_by` revokes grant `grant_id` of `request`: a `refused` record (a human's no,
    /// [`RefusalKind::HumanDenied`]) of the request's tool, call and thread,
    /// detail `grant <id> revoked by <revoked_by>`. Written **before** the denial that revokes the grant in the
    /// ledger (`airlock deny --audit-file`), it makes every host that writes this append-only file refuse the
    /// grant from then on, even if the ledger's row is later set back to live by whoever holds the database: a
    /// dispatcher refuses a grant whose revocation (or spend) a record before its own admission's records. In a
    /// log of another store the record is written all the same, for the history, but no host reads it back.
    ///
    /// `grant_id` must be a grant id as the ledger issues them (32 lowercase hex characters), else nothing is
    /// written and the answer is [`AuditError::NotAGrant`].
    pub fn append_revocation(
        &self,
        request: &RequestRecord,
        grant_id: &str,
        revoked_by: &str,
    ) -> Result<AuditReceipt, AuditError> {
        if decode_lower_hex::<16>(grant_id).is_none() {
            return Err(AuditError::NotAGrant { grant_id: crate::echo::fragment(grant_id).to_string() });
        }
        let detail = super::spends::revocation_detail(grant_id, revoked_by);
        let thread = request.thread_id();
        let event = AuditEvent::new(
            &request.tool,
            request.tool_call_id(),
            AuditOutcome::Refused { refusal: RefusalKind::HumanDenied },
        )
        .thread_id(Some(thread).filter(|t| !t.is_empty()))
        .caller(request.caller.as_deref())
        .rule(Some(&request.rule))
        .detail(Some(&detail));
        self.append(event)
    }

    /// The store this log writes through, if its writes can share a transaction with other stores'.
    pub(crate) fn store_handle(&self) -> Option<StoreHandle> {
        self.handle.clone()
    }

    /// Appends `entries` in one write of the shared store's, waiting for it; gives them back if the log
    /// has no shared store (in memory).
    fn write_through(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<Result<Vec<AuditReceipt>, AuditError>, Vec<AuditEntry>> {
        let Some(handle) = &self.handle else { return Err(entries) };
        let append = self.appending(entries);
        if let Some(writer) = handle.redb_writer() {
            return Ok(writer
                .op(move |tables| super::redb::append_in(tables, &append))
                .wait()
                .map_err(AuditError::from_store));
        }
        #[cfg(feature = "postgres")]
        if let Some(shared) = handle.postgres_shared() {
            return Ok(crate::store::postgres::write(shared, move |tables| {
                super::postgres::append_in(tables, &append)
            })
            .wait()
            .map_err(AuditError::from_store));
        }
        Ok(Err(AuditError::Write(Arc::new(StoreError::Stopped))))
    }

    /// `entries`, to append in one transaction of this log's chain.
    pub(crate) fn appending(&self, entries: Vec<AuditEntry>) -> AuditAppend {
        AuditAppend { chain: Arc::clone(&self.writer.chain), entries }
    }

    /// Appends prepared records in one write, for a dispatcher: on the calling thread for logs whose
    /// appends do not wait for a disk (in memory) or that were told to commit on the caller, otherwise
    /// handed to the log's committer thread (an append-only file), so the async caller is not blocked.
    pub(crate) fn append_reply(&self, entries: Vec<AuditEntry>) -> Reply<Vec<AuditReceipt>, AuditError> {
        let entries = match self.write_through(entries) {
            Ok(written) => return Reply::ready_or(written, abandoned),
            Err(entries) => entries,
        };
        if !self.writer.store.waits_for_disk() || self.on_caller.load(Ordering::Relaxed) {
            return Reply::ready_or(self.writer.submit(entries), abandoned);
        }
        let (sender, reply) = Reply::channel_or(abandoned);
        let job = {
            let mut committer = self.committer.lock().unwrap_or_else(PoisonError::into_inner);
            if committer.is_none() {
                match self.start_committer() {
                    Ok(started) => *committer = Some(started),
                    Err(err) => {
                        sender.send(Err(err));
                        return reply;
                    }
                }
            }
            match committer.as_ref().and_then(|committer| committer.jobs.as_ref()) {
                Some(jobs) => jobs.send((entries, sender)).err().map(|mpsc::SendError(job)| job),
                None => Some((entries, sender)),
            }
        };
        if let Some((entries, sender)) = job {
            // The thread is gone (it panicked): written here.
            sender.send(self.writer.submit(entries));
        }
        reply
    }

    fn start_committer(&self) -> Result<Committer, AuditError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let writer = Arc::clone(&self.writer);
        let thread = std::thread::Builder::new()
            .name("airlock-audit".to_owned())
            .spawn(move || writer.commit_jobs(&queue))
            .map_err(|err| AuditError::Write(Arc::new(err)))?;
        Ok(Committer { jobs: Some(jobs), thread: Some(thread) })
    }

    /// The stored head: the last record's position and hash, signed if the log has a key. An empty log's
    /// head is `#0` with a zero hash.
    pub fn head(&self) -> Result<Anchor, AuditError> {
        match self.writer.store.head()? {
            Some(head) => Ok(head),
            None => Ok(self.empty_head()),
        }
    }

    /// The head, to keep outside the log (see [`Anchor`]). Same as [`head`](Self::head).
    pub fn export_head(&self) -> Result<Anchor, AuditError> {
        self.head()
    }

    /// Writes the head to `path` atomically, and returns it.
    pub fn export_head_to(&self, path: impl AsRef<Path>) -> Result<Anchor, ExportError> {
        let anchor = self.head()?;
        anchor.write_to(path)?;
        Ok(anchor)
    }

    /// Up to `limit` records from `from_seq` on, decoded but not verified (run [`verify`](super::verify)
    /// to check them).
    pub fn records(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, AuditError> {
        let mut out = Vec::new();
        let mut failure = None;
        if limit > 0 {
            self.writer.store.scan(from_seq, &mut |seq, bytes| {
                match record::decode_record(seq, bytes) {
                    Ok(record) => out.push(record),
                    Err(err) => {
                        failure = Some(err);
                        return std::ops::ControlFlow::Break(());
                    }
                }
                if out.len() >= limit { std::ops::ControlFlow::Break(()) } else { std::ops::ControlFlow::Continue(()) }
            })?;
        }
        match failure {
            Some(err) => Err(err),
            None => Ok(out),
        }
    }

    pub(super) fn store(&self) -> &dyn AuditStore {
        &*self.writer.store
    }

    pub(super) fn key(&self, id: &str) -> Option<&DerivedKeys> {
        self.keys.get(id)
    }

    /// The head of a log with no record, signed if the log has a key.
    pub(super) fn empty_head(&self) -> Anchor {
        self.writer.chain.sign_head(0, GENESIS)
    }

    pub(super) fn signing_key(&self) -> Option<&DerivedKeys> {
        self.writer.chain.signing.as_ref()
    }

    fn commit(&self, part: CommittedPart, value: Option<&Value>) -> (Option<Commitment>, Option<String>) {
        let Some(value) = value else { return (None, None) };
        let mut canonical = Vec::new();
        crypto::canonical_json(value, &mut canonical);
        let commitment = match &self.writer.chain.signing {
            Some(keys) => Commitment { alg: CommitmentAlg::HmacSha256, digest: keys.commitment(part, &canonical) },
            None => Commitment { alg: CommitmentAlg::Sha256, digest: crypto::plain_commitment(part, &canonical) },
        };
        // Canonical JSON is built from `&str`s and ASCII, so it is UTF-8.
        let raw = self.store_raw.then(|| String::from_utf8(canonical).unwrap_or_default());
        (Some(commitment), raw)
    }

    /// The record of `event`, with its commitments, ready to be chained.
    pub(crate) fn prepare(&self, event: &AuditEvent<'_>) -> Prepared {
        let (arguments, raw_arguments) = self.commit(CommittedPart::Arguments, event.arguments);
        let (result, raw_result) = self.commit(CommittedPart::Result, event.result);
        Prepared {
            tool: event.tool.to_owned(),
            tool_call_id: event.tool_call_id.to_owned(),
            thread_id: event.thread_id.map(str::to_owned),
            caller: event.caller.map(str::to_owned),
            outcome: event.outcome,
            rule: event.rule.map(str::to_owned),
            detail: event.detail.map(str::to_owned),
            arguments,
            result,
            raw_arguments,
            raw_result,
        }
    }
}

fn abandoned() -> AuditError {
    AuditError::Abandoned
}

impl Writer {
    /// The committer thread: takes every job queued (up to a group), writes them in one append, answers
    /// each; ends when the log is dropped.
    fn commit_jobs(&self, queue: &mpsc::Receiver<Job>) {
        while let Ok(first) = queue.recv() {
            let jobs = crate::store::take_queued(queue, first, MAX_GROUP);
            let (group, senders): (Vec<_>, Vec<_>) = jobs
                .into_iter()
                .enumerate()
                .map(|(ticket, (entries, sender))| ((ticket as u64, entries), sender))
                .unzip();
            // A panic in the store drops the senders unanswered: their replies say the append was abandoned.
            for ((_, result), sender) in self.write_group(group).into_iter().zip(senders) {
                sender.send(result);
            }
        }
    }

    /// Queues `entries` (written together, in order) and waits for the commit that writes them. The first
    /// waiting thread commits for everyone queued at that moment; the others wait for it and the next one
    /// takes the queue.
    fn submit(&self, entries: Vec<Prepared>) -> Result<Vec<AuditReceipt>, AuditError> {
        let mut queue = self.group.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket = queue.next_ticket.wrapping_add(1);
        queue.pending.push((ticket, entries));
        loop {
            if let Some(result) = queue.done.remove(&ticket) {
                return result;
            }
            if queue.committing {
                queue = self.group.changed.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            queue.committing = true;
            let take = queue.pending.len().min(MAX_GROUP);
            let group: Vec<(u64, Vec<Prepared>)> = queue.pending.drain(..take).collect();
            drop(queue);

            let mut guard = CommitterGuard {
                group: &self.group,
                tickets: group.iter().map(|(t, _)| *t).collect(),
                finished: false,
            };
            let results = self.write_group(group);
            guard.finished = true;
            drop(guard);

            queue = self.group.lock();
            queue.committing = false;
            queue.done.extend(results);
            self.group.changed.notify_all();
        }
    }

    /// Writes a group in one transaction; every ticket gets its receipts, or all get the same error.
    fn write_group(&self, group: Vec<(u64, Vec<Prepared>)>) -> Vec<(u64, Result<Vec<AuditReceipt>, AuditError>)> {
        let mut receipts = Vec::new();
        let written = self.store.append(&mut |head| {
            let time_ns = duration_nanos(self.chain.clock.now());
            let mut anchor = head;
            receipts.clear();
            let mut records = Vec::new();
            for (ticket, entries) in &group {
                let (batch, chained) = self.chain.link(anchor, entries, time_ns)?;
                records.extend(batch.records);
                anchor = Some(batch.head);
                receipts.push((*ticket, chained));
            }
            let head = anchor.unwrap_or_else(|| self.chain.sign_head(0, GENESIS));
            Ok(Batch { records, head })
        });
        match written {
            Ok(()) => receipts.into_iter().map(|(ticket, receipts)| (ticket, Ok(receipts))).collect(),
            Err(err) => group.into_iter().map(|(ticket, _)| (ticket, Err(err.clone()))).collect(),
        }
    }
}

impl AuditError {
    /// A fault of the shared writer, as an audit error.
    pub(crate) fn from_store(err: StoreError) -> AuditError {
        match err {
            StoreError::Storage(source) => match source.downcast_ref::<AuditError>() {
                Some(audit) => audit.clone(),
                None => AuditError::Write(source),
            },
            other => AuditError::Write(Arc::new(other)),
        }
    }
}

/// Why the head could not be exported to a file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The head could not be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The anchor file could not be written.
    #[error(transparent)]
    Anchor(#[from] AnchorError),
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use super::*;
    use crate::audit::AuditOutcome;

    /// A memory store that counts commits, can be slowed down, and can panic once.
    #[derive(Default)]
    struct Instrumented {
        inner: MemoryAuditStore,
        commits: AtomicUsize,
        delay: Option<Duration>,
        panic_next: AtomicBool,
    }

    impl AuditStore for Arc<Instrumented> {
        fn append(&self, build: &mut dyn FnMut(Option<Anchor>) -> Result<Batch, AuditError>) -> Result<(), AuditError> {
            if self.panic_next.swap(false, Ordering::SeqCst) {
                panic!("the disk caught fire");
            }
            if let Some(delay) = self.delay {
                std::thread::sleep(delay);
            }
            self.commits.fetch_add(1, Ordering::SeqCst);
            self.inner.append(build)
        }

        fn head(&self) -> Result<Option<Anchor>, AuditError> {
            self.inner.head()
        }

        fn scan(
            &self,
            from: u64,
            visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
        ) -> Result<Option<Vec<u8>>, AuditError> {
            self.inner.scan(from, visit)
        }
    }

    fn event(call_id: &str) -> AuditEvent<'_> {
        AuditEvent::new("tool", call_id, AuditOutcome::Executed)
    }

    #[test]
    fn concurrent_appends_share_commits() {
        let store = Arc::new(Instrumented { delay: Some(Duration::from_millis(5)), ..Instrumented::default() });
        let log = Arc::new(AuditLog::with_store(Arc::new(Arc::clone(&store)), AuditConfig::default()));
        let barrier = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let log = Arc::clone(&log);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..10 {
                        log.append(event(&format!("{t}-{i}"))).expect("appended");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("ran");
        }
        let commits = store.commits.load(Ordering::SeqCst);
        assert!(commits < 80, "80 appends took {commits} commits: none were grouped");
        assert_eq!(super::super::verify(&log, None).expect("intact").records, 80);
    }

    #[test]
    fn a_committer_that_panics_abandons_its_group_and_the_log_goes_on() {
        let store = Arc::new(Instrumented::default());
        store.panic_next.store(true, Ordering::SeqCst);
        let log = Arc::new(AuditLog::with_store(Arc::new(Arc::clone(&store)), AuditConfig::default()));
        let panicking = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || log.append(event("doomed")))
        };
        assert!(panicking.join().is_err(), "the committing thread unwinds");
        let receipt = log.append(event("next")).expect("the log is usable after a panicked commit");
        assert_eq!(receipt.seq, 1, "nothing of the abandoned group was written");
        assert_eq!(super::super::verify(&log, None).expect("intact").records, 1);
    }
}
