//! The redb engine: the tables of a redb file, every write committed with `Durability::Immediate`, and
//! concurrent writes grouped into shared commits by one writer thread.
//!
//! **Group commit.** Callers hand their write to the ledger's writer thread through a channel and wait
//! for the answer. The writer takes every write queued, applies them in order in *one* write transaction,
//! commits once, and only then answers each caller. While a commit is on its way to disk, new writes
//! queue up and form the next batch, so throughput grows with the number of concurrent callers while a
//! lone write costs one commit (plus a thread hand-off). Exactly-once is unchanged: the batch is applied
//! in order inside one transaction, so the second spend of a grant in a batch sees the first. Nobody hears
//! "spent" before the commit recording it returned. If the batch's transaction fails, each write is
//! retried alone, so a fault in one write does not fail its neighbours. A batch in which every write was
//! refused (a replayed spend, a second approval of a live grant) changed nothing: it is aborted instead of
//! committed, so a replay costs no disk flush.
//!
//! **A write that finds the writer idle.** Where the process serves one client on one thread (the stdio
//! gateway, `airlock mcp`), handing a lone write to the writer thread and back costs two thread wake-ups,
//! each of which may wait for a CPU: most of what the audit of a call adds on a tmpfs. A writer told so
//! ([`RedbWriter::commit_on_caller_when_idle`]) commits such a write on the caller's thread instead, when
//! nothing is queued or being committed: the same transaction (`commit_batch` with one write), the same
//! `Durability::Immediate`, answered only after the commit, and in the same order (every write queued
//! before it was answered first). A write that finds the writer busy is queued as before, so concurrent
//! writes still share commits. It blocks the caller's thread for the commit, which is why it is not the
//! default: an executor with other work to run must not wait on a disk.
//!
//! **One writer per database.** The writer belongs to the `Arc<Database>`, not to the ledger: a
//! [`RedbEffectStore`](crate::effect::RedbEffectStore) and an [`AuditLog`](crate::audit::AuditLog) opened on the same `Arc<Database>`
//! hand their writes to the same thread, so every write to the file is group-committed, and a
//! dispatcher's decision (a spend, an effect reservation and its audit record) is one write of one
//! transaction. Callers await the answer; nothing blocks an async executor.
//!
//! **Processes.** redb 4.6 offers three concurrency modes (`redb::ConcurrencyMode`, since 4.5):
//! `ExclusiveWriter` (the default: the whole file is locked by one process; any other open fails with
//! `DatabaseAlreadyOpen`), `SingleWriter` (one writing process, any number of read-only ones following
//! its commits) and `MultiWriter` (any number of processes open the file read-write; write transactions
//! are serialised across processes by a byte-range lock, each one starting from the latest commit).
//! [`ProcessSharing::Exclusive`] uses the first, and [`RedbOpenOptions::wait_if_open`] lets a short-lived
//! process wait its turn; [`ProcessSharing::MultiProcess`] uses `MultiWriter`, where every process
//! sharing the file must use it too. Either way a grant is spent once: a spend is a read and a write in
//! one write transaction, and write transactions never overlap.
//!
//! **Damage.** The file is opened with redb's integrity check (every page checksum of the committed trees
//! verified), so a truncated or altered file is refused with [`OpenError::Corrupt`] instead of being
//! trusted, and an existing empty file is refused rather than silently initialised as an empty ledger.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ::redb::{
    Builder, CommitError, ConcurrencyMode, Database, DatabaseError, Durability, ReadableDatabase, ReadableTable,
    SetDurabilityError, StorageError, Table, TableDefinition, TableError, TransactionError, WriteTransaction,
};

use super::reply::ReplySender;
use super::{Fault, Reply, StoreError};

pub(crate) const REQUESTS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_requests");
pub(crate) const STATUS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_status");
pub(crate) const GRANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("airlock_approval_grants");
/// Pending requests, keyed `scope NUL request id`, valued by their expiry in ms (`u64::MAX`: none), so the
/// pending limit counts one scope with a range read. Created on first write; a file written before it existed
/// has its older pending requests uncounted.
pub(crate) const PENDING: TableDefinition<&str, u64> = TableDefinition::new("airlock_approval_pending");
const META: TableDefinition<&str, u64> = TableDefinition::new("airlock_approval_meta");
const SCHEMA_KEY: &str = "schema_version";
/// The effect records: key → the JSON of an `EffectRecord`.
pub(crate) const EFFECTS: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("agent_airlock_effects");
/// The audit log's records: sequence number → stored record (see [`crate::audit`] for the format).
pub const RECORDS_TABLE: TableDefinition<'static, u64, &'static [u8]> =
    TableDefinition::new("agent_airlock_audit_records");
/// The audit log's head: one row under [`HEAD_KEY`], the JSON of an [`Anchor`](crate::audit::Anchor).
pub const HEAD_TABLE: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("agent_airlock_audit_head");
/// The key of the one row of [`HEAD_TABLE`].
pub const HEAD_KEY: &str = "head";

/// The version of the approval tables' layout this build reads and writes.
pub const APPROVALS_SCHEMA_VERSION: u64 = 1;

/// Most writes applied in one transaction.
const MAX_BATCH: usize = 1024;

/// How processes share the ledger file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessSharing {
    /// One process at a time (redb's `ExclusiveWriter`); others get [`OpenError::AlreadyOpen`], or wait
    /// with [`RedbOpenOptions::wait_if_open`].
    #[default]
    Exclusive,
    /// Any number of processes at once (redb's `MultiWriter`, Linux, macOS and Windows). Every process
    /// opening the file must choose this mode.
    MultiProcess,
}

/// How to open a ledger file.
#[derive(Debug, Clone)]
pub struct RedbOpenOptions {
    /// How processes share the file.
    pub sharing: ProcessSharing,
    /// How long to keep retrying while another process holds the file (or is still creating it).
    /// `None` fails at once.
    pub wait_if_open: Option<Duration>,
    /// Verify every page checksum at open (redb's `set_check_integrity_on_open`). On by default: without
    /// it, redb trusts a file that was closed cleanly, and a file altered afterwards may make it panic.
    /// Turning it off saves reading the whole file at open.
    pub verify_on_open: bool,
}

impl Default for RedbOpenOptions {
    fn default() -> Self {
        RedbOpenOptions { sharing: ProcessSharing::Exclusive, wait_if_open: None, verify_on_open: true }
    }
}

impl RedbOpenOptions {
    /// Waits up to `wait` for another process to release the file.
    pub fn wait_if_open(mut self, wait: Duration) -> Self {
        self.wait_if_open = Some(wait);
        self
    }

    /// Chooses how processes share the file.
    pub fn sharing(mut self, sharing: ProcessSharing) -> Self {
        self.sharing = sharing;
        self
    }
}

/// Why a ledger file could not be opened. Nothing was changed in the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Another process has the file open.
    #[error(
        "ledger file `{}` is open in another process (waited {} ms): redb lets one process open a file at a time unless every process opens it with `ProcessSharing::MultiProcess`",
        path.display(), waited.as_millis()
    )]
    AlreadyOpen {
        /// The file.
        path: PathBuf,
        /// How long this open waited.
        waited: Duration,
    },
    /// Another process has the file open under an incompatible redb locking protocol.
    #[error(
        "ledger file `{}` is open in another process using another redb locking protocol (another redb version, or another concurrency mode)",
        path.display()
    )]
    LockProtocolMismatch {
        /// The file.
        path: PathBuf,
    },
    /// The file exists and is empty.
    #[error(
        "ledger file `{}` is empty (0 bytes), so it is not a ledger: if a process crashed while creating it, delete it; otherwise restore it from a backup",
        path.display()
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is damaged.
    #[error("ledger file `{}` is corrupt ({detail}): restore it from a backup", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What redb found.
        detail: String,
    },
    /// The file uses a redb file format this build cannot read.
    #[error("ledger file `{}` needs a redb file-format upgrade (format version {version})", path.display())]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The file's format version.
        version: u8,
    },
    /// The approval tables have a layout this build does not know.
    #[error(
        "the ledger holds approval tables of schema version {found}; this build reads version {APPROVALS_SCHEMA_VERSION}"
    )]
    UnsupportedSchema {
        /// The version found.
        found: u64,
    },
    /// The file could not be read or created.
    #[error("cannot open ledger file `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// redb failed in another way.
    #[error("ledger storage failed while opening: {0}")]
    Storage(#[source] ::redb::Error),
    /// The writer thread could not be started.
    #[error("cannot start the ledger's writer thread: {0}")]
    WriterThread(#[source] std::io::Error),
}

/// Opens (or creates) a redb file as the ledger opens it: with `options.sharing`, the integrity check,
/// clear errors and the optional wait. Other stores sharing the file (audit log, effects) can open it
/// with this and hand the same `Arc<Database>` to [`RedbLedger::from_database`](crate::ledger::RedbLedger::from_database).
///
/// A missing file is created; an existing file must be a valid redb database (an empty file is refused).
pub fn open_database(path: impl AsRef<Path>, options: &RedbOpenOptions) -> Result<Database, OpenError> {
    let path = path.as_ref();
    let mut builder = Builder::new();
    builder.set_concurrency_mode(match options.sharing {
        ProcessSharing::Exclusive => ConcurrencyMode::ExclusiveWriter,
        ProcessSharing::MultiProcess => ConcurrencyMode::MultiWriter,
    });
    builder.set_check_integrity_on_open(options.verify_on_open);
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let attempt = match std::fs::metadata(path) {
            Ok(meta) if meta.len() == 0 => Err(OpenError::Empty { path: path.to_owned() }),
            Ok(_) => builder.open(path).map_err(|err| open_error(path, err, started.elapsed())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                builder.create(path).map_err(|err| open_error(path, err, started.elapsed()))
            }
            Err(source) => Err(OpenError::Io { path: path.to_owned(), source }),
        };
        match attempt {
            Ok(database) => return Ok(database),
            // A creator holds the lock while it writes the header, so an empty file may be one being made.
            Err(OpenError::AlreadyOpen { .. } | OpenError::Empty { .. })
                if options.wait_if_open.is_some_and(|wait| started.elapsed() < wait) =>
            {
                let wait = options.wait_if_open.unwrap_or_default();
                // The last attempt is made at the deadline.
                std::thread::sleep(pause.min(wait.saturating_sub(started.elapsed())));
                pause = (pause * 2).min(Duration::from_millis(25));
            }
            Err(err) => return Err(err),
        }
    }
}

fn open_error(path: &Path, error: DatabaseError, waited: Duration) -> OpenError {
    let path = path.to_owned();
    match error {
        DatabaseError::DatabaseAlreadyOpen => OpenError::AlreadyOpen { path, waited },
        DatabaseError::LockProtocolMismatch => OpenError::LockProtocolMismatch { path },
        DatabaseError::RepairAborted => {
            OpenError::Corrupt { path, detail: "it needs a repair, which was aborted".into() }
        }
        DatabaseError::UpgradeRequired(version) => OpenError::UnsupportedFormat { path, version },
        DatabaseError::Storage(StorageError::Corrupted(detail)) => OpenError::Corrupt { path, detail },
        DatabaseError::Storage(StorageError::Io(source)) => match source.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData => {
                OpenError::Corrupt { path, detail: source.to_string() }
            }
            _ => OpenError::Io { path, source },
        },
        other => OpenError::Storage(other.into()),
    }
}

/// How much grouping the writer achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    /// Write transactions committed (a batch that only read, e.g. refused replays, is not committed).
    pub commits: u64,
    /// Writes answered (spends, grants, denials, requests).
    pub writes: u64,
    /// The most writes one commit carried.
    pub largest_batch: u64,
}

#[derive(Debug, Default)]
struct SharedStats {
    commits: AtomicU64,
    writes: AtomicU64,
    largest_batch: AtomicU64,
}

/// Creates the approval tables and the effect records if they are missing, and checks the approval
/// tables' schema version.
pub(crate) fn prepare_schema(database: &Database) -> Result<(), OpenError> {
    let storage = |err: ::redb::Error| OpenError::Storage(err);
    // Usually the tables exist: a read answers without a commit.
    {
        let txn = database.begin_read().map_err(|e| storage(e.into()))?;
        match txn.open_table(META) {
            Ok(meta) => match meta.get(SCHEMA_KEY).map_err(|e| storage(e.into()))? {
                // Files from before effects shared the ledger's writes lack the effects table: create it.
                Some(found) if found.value() == APPROVALS_SCHEMA_VERSION && txn.open_table(EFFECTS).is_ok() => {
                    return Ok(());
                }
                Some(found) if found.value() == APPROVALS_SCHEMA_VERSION => {}
                Some(found) => {
                    return Err(OpenError::UnsupportedSchema { found: found.value() });
                }
                None => {}
            },
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(err) => return Err(storage(err.into())),
        }
    }
    let mut txn = database.begin_write().map_err(|e| storage(e.into()))?;
    txn.set_durability(Durability::Immediate).map_err(|e| storage(durability_error(e)))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
        let found = meta.get(SCHEMA_KEY).map_err(|e| storage(e.into()))?.map(|v| v.value());
        match found {
            Some(APPROVALS_SCHEMA_VERSION) => {}
            Some(found) => return Err(OpenError::UnsupportedSchema { found }),
            None => {
                meta.insert(SCHEMA_KEY, APPROVALS_SCHEMA_VERSION).map_err(|e| storage(e.into()))?;
            }
        }
        for table in [REQUESTS, STATUS, GRANTS, EFFECTS] {
            txn.open_table(table).map_err(|e| storage(e.into()))?;
        }
    }
    txn.commit().map_err(|e| storage(e.into()))
}

fn durability_error(error: SetDurabilityError) -> ::redb::Error {
    error.into()
}

/// The tables of one write transaction, opened when a job first touches them (a file holding only an
/// audit log never gets approval tables, and the other way round). Each subsystem reads and writes its own
/// tables here (the ledger's transitions, the effect steps, the audit append); the engine only opens them.
pub(crate) struct WriteTables<'txn> {
    txn: &'txn WriteTransaction,
    pub(crate) requests: Option<Table<'txn, &'static str, &'static [u8]>>,
    pub(crate) status: Option<Table<'txn, &'static str, &'static [u8]>>,
    pub(crate) grants: Option<Table<'txn, &'static str, &'static [u8]>>,
    pub(crate) pending: Option<Table<'txn, &'static str, u64>>,
    pub(crate) effects: Option<Table<'txn, &'static str, &'static [u8]>>,
    pub(crate) audit_records: Option<Table<'txn, u64, &'static [u8]>>,
    pub(crate) audit_head: Option<Table<'txn, &'static str, &'static [u8]>>,
    /// Whether any job of the batch wrote: a batch of refusals has nothing to commit. Every write sets it.
    pub(crate) wrote: bool,
}

/// Opens `definition` into `slot` on first use. Reads take `&self` (the transitions' tables are read
/// through `&self`), so a job opens the tables it uses before it runs (`open_ledger`, `open_effects`).
fn open_in<'txn, K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    txn: &'txn WriteTransaction,
    slot: &mut Option<Table<'txn, K, V>>,
    definition: TableDefinition<'static, K, V>,
) -> Result<(), StoreError> {
    if slot.is_none() {
        *slot = Some(txn.open_table(definition).map_err(StoreError::storage)?);
    }
    Ok(())
}

impl<'txn> WriteTables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Self {
        WriteTables {
            txn,
            requests: None,
            status: None,
            grants: None,
            pending: None,
            effects: None,
            audit_records: None,
            audit_head: None,
            wrote: false,
        }
    }

    /// Opens the approval tables and the effect records, which the ledger's transitions read through
    /// `&self`.
    pub(crate) fn open_ledger(&mut self) -> Result<(), StoreError> {
        open_in(self.txn, &mut self.requests, REQUESTS)?;
        open_in(self.txn, &mut self.status, STATUS)?;
        open_in(self.txn, &mut self.grants, GRANTS)?;
        open_in(self.txn, &mut self.pending, PENDING)?;
        open_in(self.txn, &mut self.effects, EFFECTS)
    }

    /// Opens the effect records alone.
    pub(crate) fn open_effects(&mut self) -> Result<(), StoreError> {
        open_in(self.txn, &mut self.effects, EFFECTS)
    }

    /// Opens the audit log's records and head.
    pub(crate) fn open_audit(&mut self) -> Result<(), StoreError> {
        open_in(self.txn, &mut self.audit_records, RECORDS_TABLE)?;
        open_in(self.txn, &mut self.audit_head, HEAD_TABLE)
    }
}

/// A table opened by `open_ledger`/`open_effects`/`open_audit` (every job opens the tables it uses first).
pub(crate) fn opened<'a, T>(slot: &'a Option<T>, table: &'static str) -> Result<&'a T, StoreError> {
    slot.as_ref().ok_or(StoreError::Corrupt {
        table,
        key: String::new(),
        detail: "the table was read before it was opened".to_owned(),
    })
}

/// A table opened by `open_ledger`/`open_effects`/`open_audit`, to write.
pub(crate) fn opened_mut<'a, T>(slot: &'a mut Option<T>, table: &'static str) -> Result<&'a mut T, StoreError> {
    slot.as_mut().ok_or(StoreError::Corrupt {
        table,
        key: String::new(),
        detail: "the table was written before it was opened".to_owned(),
    })
}

// ---- the writer ----

/// One write handed to the writer: run inside a batch's transaction (perhaps again, alone, if the batch
/// failed), then answered once the batch committed.
pub(crate) trait WriteJob: Send {
    /// Applies the write. `Err` is a fault, which aborts the transaction; a refusal by the rules is an
    /// outcome kept for [`answer`](Self::answer) (and writes nothing).
    fn run(&mut self, tables: &mut WriteTables<'_>) -> Result<(), StoreError>;
    /// Answers with the outcome of the last `run`, after the commit.
    fn answer(self: Box<Self>);
    /// Answers with a fault: nothing of this job was committed.
    fn fail(self: Box<Self>, error: StoreError);
}

/// A write as a closure: `run` returns the answer, or a refusal (an `E` that is not a fault), or a fault.
struct Op<R, E, F> {
    run: F,
    outcome: Option<Result<R, E>>,
    reply: ReplySender<R, E>,
}

impl<R, E, F> WriteJob for Op<R, E, F>
where
    R: Send,
    E: Fault,
    F: FnMut(&mut WriteTables<'_>) -> Result<R, E> + Send,
{
    fn run(&mut self, tables: &mut WriteTables<'_>) -> Result<(), StoreError> {
        match (self.run)(tables) {
            Err(err) if err.is_fault() => Err(err.into_store()),
            outcome => {
                self.outcome = Some(outcome);
                Ok(())
            }
        }
    }

    fn answer(self: Box<Self>) {
        let Op { outcome, reply, .. } = *self;
        // Without an outcome the sender is dropped unanswered, which reads as `WriterStopped`.
        if let Some(outcome) = outcome {
            reply.send(outcome);
        }
    }

    fn fail(self: Box<Self>, error: StoreError) {
        self.reply.send(Err(E::from_store(error)));
    }
}

/// The writer thread of one redb database: every write to the file from this process goes through it,
/// batched into shared durable commits (see the module docs). Shared by the ledger, the effect records and
/// the audit log of one `Arc<Database>`; the thread stops when the last of them is dropped, after the
/// queued writes.
pub(crate) struct RedbWriter {
    database: Arc<Database>,
    jobs: Option<mpsc::Sender<Box<dyn WriteJob>>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<SharedStats>,
    /// The writes sent to the thread and not yet answered.
    queued: Arc<AtomicUsize>,
    /// Held by whoever commits: the thread for each batch, a caller committing its own write.
    committing: Arc<Mutex<()>>,
    /// Whether a write that finds nothing queued is committed on the caller's thread.
    on_caller_when_idle: AtomicBool,
}

/// The live writers, by their database's address: stores opened on one `Arc<Database>` find the same writer.
///
/// Found by address, only the match upgraded: upgrading every live writer to compare its database held, for a
/// moment, another database's writer, and when its owner dropped the last other reference meanwhile, that writer
/// and its database (and the file's lock) went on living until the lookup let go: a store reopened at once could
/// find the file still open (`AlreadyOpen`: `audit_tamper::an_altered_anchor_is_refused` failed so once in CI on
/// 12-07, the only path found by which a database outlives its last store; a stress test did not reproduce it).
static WRITERS: Mutex<Vec<(usize, Weak<RedbWriter>)>> = Mutex::new(Vec::new());

impl RedbWriter {
    /// The writer of `database`, started if it has none yet.
    pub(crate) fn for_database(database: &Arc<Database>) -> Result<Arc<RedbWriter>, std::io::Error> {
        // Nothing under this lock can panic halfway: a poisoned list is whole.
        let mut writers = WRITERS.lock().unwrap_or_else(PoisonError::into_inner);
        writers.retain(|(_, writer)| writer.strong_count() > 0);
        // A live writer holds its database, so a matching address is this very database, which the caller holds
        // too: upgrading its writer can never keep a database alive that the caller is done with.
        let address = Arc::as_ptr(database) as usize;
        if let Some(writer) = writers.iter().filter(|(at, _)| *at == address).find_map(|(_, writer)| writer.upgrade()) {
            return Ok(writer);
        }
        let (jobs, queue) = mpsc::channel();
        let stats = Arc::new(SharedStats::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let committing = Arc::new(Mutex::new(()));
        let thread = {
            let database = Arc::clone(database);
            let stats = Arc::clone(&stats);
            let queued = Arc::clone(&queued);
            let committing = Arc::clone(&committing);
            std::thread::Builder::new()
                .name("airlock-redb-writer".into())
                .spawn(move || run_writer(&database, &queue, &stats, &queued, &committing))?
        };
        let writer = Arc::new(RedbWriter {
            database: Arc::clone(database),
            jobs: Some(jobs),
            thread: Some(thread),
            stats,
            queued,
            committing,
            on_caller_when_idle: AtomicBool::new(false),
        });
        writers.push((address, Arc::downgrade(&writer)));
        Ok(writer)
    }

    /// Queues `run` as one write; the reply answers once it is durable (or refused, or failed).
    pub(crate) fn op<R: Send + 'static, E: Fault>(
        &self,
        run: impl FnMut(&mut WriteTables<'_>) -> Result<R, E> + Send + 'static,
    ) -> Reply<R, E> {
        let (reply, answer) = Reply::fault_channel();
        let job: Box<dyn WriteJob> = Box::new(Op { run, outcome: None, reply });
        let job = match self.idle() {
            Some(_committing) => {
                commit_and_answer(&self.database, vec![job], &self.stats);
                return answer;
            }
            None => job,
        };
        if let Some(jobs) = &self.jobs {
            self.queued.fetch_add(1, Ordering::AcqRel);
            // A failed send drops the job and its sender, which answers `WriterStopped`.
            if jobs.send(job).is_err() {
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
        }
        answer
    }

    /// Commits a write that finds nothing queued on the caller's thread from now on (see the module docs):
    /// for a process serving one client on one thread, whose executor has nothing else to run meanwhile.
    pub(crate) fn commit_on_caller_when_idle(&self) {
        self.on_caller_when_idle.store(true, Ordering::Release);
    }

    /// The commit lock, if a write may be committed on the caller's thread now: allowed, and every write
    /// sent to the thread answered (so this one is committed after them, as the thread would).
    fn idle(&self) -> Option<MutexGuard<'_, ()>> {
        if !self.on_caller_when_idle.load(Ordering::Acquire) || self.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        let committing = match self.committing.try_lock() {
            Ok(guard) => guard,
            // Nothing is guarded by the lock but the right to commit.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // A write sent meanwhile goes first: the thread takes the lock after this commit.
        (self.queued.load(Ordering::Acquire) == 0).then_some(committing)
    }

    /// How many commits carried how many writes so far.
    pub(crate) fn stats(&self) -> WriterStats {
        WriterStats {
            commits: self.stats.commits.load(Ordering::Relaxed),
            writes: self.stats.writes.load(Ordering::Relaxed),
            largest_batch: self.stats.largest_batch.load(Ordering::Relaxed),
        }
    }
}

impl Drop for RedbWriter {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish what is queued and return.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run_writer(
    database: &Database,
    queue: &mpsc::Receiver<Box<dyn WriteJob>>,
    stats: &SharedStats,
    queued: &AtomicUsize,
    committing: &Mutex<()>,
) {
    while let Ok(first) = queue.recv() {
        let batch = super::take_queued(queue, first, MAX_BATCH);
        let writes = batch.len();
        let _committing = committing.lock().unwrap_or_else(PoisonError::into_inner);
        commit_and_answer(database, batch, stats);
        // Only once they are answered may a caller commit a write of its own.
        queued.fetch_sub(writes, Ordering::AcqRel);
    }
}

/// Commits `batch` in one transaction and answers each write; if the transaction fails, each write is
/// tried alone, so one write's fault does not fail its neighbours.
fn commit_and_answer(database: &Database, mut batch: Vec<Box<dyn WriteJob>>, stats: &SharedStats) {
    match commit_batch(database, &mut batch) {
        Ok(committed) => {
            record_batch(stats, batch.len(), committed);
            for job in batch {
                job.answer();
            }
        }
        Err(error) if batch.len() == 1 => {
            for job in batch {
                job.fail(error.clone());
            }
        }
        // One write's fault must not fail its neighbours: retry each alone.
        Err(_) => {
            for mut job in batch {
                match commit_batch(database, std::slice::from_mut(&mut job)) {
                    Ok(committed) => {
                        record_batch(stats, 1, committed);
                        job.answer();
                    }
                    Err(error) => job.fail(error),
                }
            }
        }
    }
}

fn record_batch(stats: &SharedStats, writes: usize, committed: bool) {
    let writes = writes as u64;
    stats.writes.fetch_add(writes, Ordering::Relaxed);
    if committed {
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.largest_batch.fetch_max(writes, Ordering::Relaxed);
    }
}

/// Applies the batch in one write transaction and commits it, durably, if any job wrote; a batch of
/// refusals (a replayed spend, a second approval of a live grant) read only committed state, which every
/// commit made durable, so it is aborted instead of paying for an empty durable commit. Returns whether a
/// commit happened; each job keeps its outcome until it is answered.
fn commit_batch(database: &Database, batch: &mut [Box<dyn WriteJob>]) -> Result<bool, StoreError> {
    let mut txn = database.begin_write().map_err(transaction_error)?;
    // Never `Durability::None`: a crash could resurrect a spent grant.
    txn.set_durability(Durability::Immediate).map_err(StoreError::storage)?;
    let wrote = {
        let mut tables = WriteTables::open(&txn);
        for job in batch.iter_mut() {
            job.run(&mut tables)?;
        }
        tables.wrote
    };
    if wrote {
        txn.commit().map_err(commit_error)?;
    } else {
        txn.abort().map_err(StoreError::storage)?;
    }
    Ok(wrote)
}

fn transaction_error(error: TransactionError) -> StoreError {
    StoreError::storage(::redb::Error::from(error))
}

fn commit_error(error: CommitError) -> StoreError {
    StoreError::storage(error)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::future::Future as _;
    use std::sync::mpsc;
    use std::thread::ThreadId;

    use super::*;

    /// A write that appends `value` under `key` (in the effect records' table) and says on which thread it
    /// ran and what it found there before.
    fn append(
        writer: &RedbWriter,
        key: &'static str,
        value: &'static str,
    ) -> Reply<(ThreadId, Option<String>), StoreError> {
        writer.op(move |tables| {
            tables.open_effects()?;
            let effects = opened_mut(&mut tables.effects, "effects")?;
            let before = effects
                .get(key)
                .map_err(StoreError::storage)?
                .map(|found| String::from_utf8_lossy(found.value()).into_owned());
            let now = format!("{}{value}", before.as_deref().unwrap_or(""));
            effects.insert(key, now.as_bytes()).map_err(StoreError::storage)?;
            tables.wrote = true;
            Ok((std::thread::current().id(), before))
        })
    }

    fn writer() -> (tempfile::TempDir, Arc<RedbWriter>) {
        let dir = tempfile::tempdir().unwrap();
        let database = Arc::new(open_database(dir.path().join("store.redb"), &RedbOpenOptions::default()).unwrap());
        let writer = RedbWriter::for_database(&database).unwrap();
        (dir, writer)
    }

    #[test]
    fn a_write_goes_to_the_writer_thread_by_default() {
        let (_dir, writer) = writer();
        let (ran_on, _) = append(&writer, "k", "a").wait().unwrap();
        assert_ne!(ran_on, std::thread::current().id());
        assert_eq!(writer.stats().commits, 1);
    }

    /// Told so, a writer with nothing queued commits a write on the caller's thread: the answer is there when
    /// `op` returns, durable (a commit of its own), with no hand-off to the writer thread and back.
    #[test]
    fn a_lone_write_is_committed_on_the_callers_thread_when_asked() {
        let (_dir, writer) = writer();
        writer.commit_on_caller_when_idle();
        let mut reply = append(&writer, "k", "a");
        let waker = std::task::Waker::noop();
        let answered = std::pin::Pin::new(&mut reply).poll(&mut std::task::Context::from_waker(waker));
        let std::task::Poll::Ready(Ok((ran_on, before))) = answered else { panic!("not answered on return") };
        assert_eq!(ran_on, std::thread::current().id());
        assert_eq!(before, None);
        let (_, before) = append(&writer, "k", "b").wait().unwrap();
        assert_eq!(before.as_deref(), Some("a"));
        assert_eq!(writer.stats(), WriterStats { commits: 2, writes: 2, largest_batch: 1 });
        let read = writer.database.begin_read().unwrap();
        let effects = read.open_table(EFFECTS).unwrap();
        assert_eq!(effects.get("k").unwrap().unwrap().value(), b"ab", "both writes are committed, in order");
    }

    /// A write that finds another being committed is queued for the writer thread, which commits it after
    /// that one: the order of writes is the order of their commits.
    #[test]
    fn a_write_that_finds_a_commit_under_way_waits_for_the_writer_thread() {
        let (_dir, writer) = writer();
        writer.commit_on_caller_when_idle();
        let (entered, entered_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let first = {
            let writer = Arc::clone(&writer);
            std::thread::spawn(move || {
                writer
                    .op(move |tables| {
                        let _ = entered.send(());
                        let _ = release_rx.recv();
                        tables.open_effects()?;
                        opened_mut(&mut tables.effects, "effects")?
                            .insert("k", b"a".as_slice())
                            .map_err(StoreError::storage)?;
                        tables.wrote = true;
                        Ok::<_, StoreError>(std::thread::current().id())
                    })
                    .wait()
                    .unwrap()
            })
        };
        entered_rx.recv().unwrap();
        // The first write is being committed on its caller's thread: this one is queued.
        let second = append(&writer, "k", "b");
        release.send(()).unwrap();
        let first_ran_on = first.join().unwrap();
        let (second_ran_on, before) = second.wait().unwrap();
        assert_ne!(first_ran_on, second_ran_on);
        assert_ne!(second_ran_on, std::thread::current().id(), "the queued write ran on the writer thread");
        assert_eq!(before.as_deref(), Some("a"), "it was committed after the write under way");
        // Once the writer thread is done with it (it answers before it counts the write done), the next lone
        // write is the caller's again.
        while writer.queued.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
        let (third_ran_on, before) = append(&writer, "k", "c").wait().unwrap();
        assert_eq!(third_ran_on, std::thread::current().id());
        assert_eq!(before.as_deref(), Some("ab"));
    }
}
