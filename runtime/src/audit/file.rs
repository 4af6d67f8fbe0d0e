//! The audit log in an append-only file of its own ([`AuditLog::open_append_only`](super::AuditLog::open_append_only)):
//! a batch of records and the head after it go out in one `write` and one `fdatasync`, where a redb file
//! commits a transaction (BENCHMARKS.md §8: that commit was most of the gateway's own latency).
//!
//! # Format
//!
//! ```text
//! "airlock-audit\0v1"  (16 bytes)
//! frame*               len: u32 LE ‖ kind: u8 ‖ seq: u64 LE ‖ payload (len bytes) ‖ crc32: u32 LE
//! ```
//!
//! The CRC covers everything before it in the frame. A record frame (kind 1) holds what the redb log keeps
//! under the record's key (the hash, the MAC and the body, see [`super`]); a head frame (kind 2) holds the
//! signed head. A batch is its record frames and then one head frame: it counts once its head frame is
//! whole, and the chain, the MACs and [`verify`](super::verify) are the redb log's.
//!
//! # A write cut short
//!
//! Batches are written one after the other, each made durable before the next starts, so a crash can only
//! cut the last one. Opening the file to write, what follows the last whole head frame is cut off (and kept
//! beside the file as `NAME.torn-OFFSET`, a `tracing` warning names it) when it looks like a cut write: whole
//! record frames, then the end of the file, a frame running past it, a last frame failing its CRC, or zeros.
//! Anything else (a bad frame with more data after it) is no crash: the file is refused as damaged and left
//! untouched. An edit can look like a cut write (a frame's length made to run past the end): then what follows
//! is cut off and kept aside like one, which leaves the log where truncating the file would, and that, on any
//! store, only an exported [`Anchor`] detects.
//!
//! # Writers and readers
//!
//! Any number of processes (and handles) append: each append takes the file's exclusive lock for its write,
//! first takes in the batches others wrote since its last (so the chain goes on from the file's real head),
//! and cuts off a write another writer's crash left cut short, as an open does. A gateway writing the file and
//! `airlock effects resolve` or the console recording a resolution in it append to one chain. A lock held
//! past [`LOCK_WAIT`] (a process stopped mid-append) fails the append with an error saying so. A writer whose
//! file its path no longer names (renamed by a log rotation, deleted, or replaced by a new log started there)
//! keeps appending to the file it has open, where the chain goes on (refusing would lose the records of calls
//! that still run), and says so once in a `tracing` warning: readers of the path no longer see them. A writer
//! remembers the grants spent in the file's records (the `approved` records naming them, in
//! [`spends`](super::spends): those it read and those it wrote), so a dispatcher can refuse a grant that another
//! host sharing the file, or another dispatcher sharing the handle, already spent (its ledger row set back to
//! live by whoever can write the database). Opened to read
//! ([`AuditLog::read_append_only`](super::AuditLog::read_append_only)), the file is never changed and no lock
//! is taken: each read takes in the whole batches written since the last, and a batch still being written is
//! left for a later read.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write as _};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::spends::{Closed, Spends};
use super::store::{AuditStore, Batch};
use super::{Anchor, AuditError};

const MAGIC: &[u8; 16] = b"airlock-audit\0v1";
/// `len ‖ kind ‖ seq`.
const FRAME_HEAD: u64 = 4 + 1 + 8;
const FRAME_TAIL: u64 = 4;
const RECORD: u8 = 1;
const HEAD: u8 = 2;
/// One offset in the index for this many record frames: a scan from a given `seq` reads at most this many
/// frames before it, and the index costs 16 bytes per this many records.
const INDEX_EVERY: u64 = 256;
const READ_BUFFER: usize = 64 * 1024;
/// How many names `NAME.torn-OFFSET[-N]` are tried for a torn tail before the open fails.
const MAX_ASIDE_NAMES: u32 = 1000;
/// How long an append (or an open) waits for the file's lock, which another writer holds for one write and
/// `fdatasync`, before it fails.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(30);
/// The longest pause between two tries for the lock.
const MAX_LOCK_PAUSE: Duration = Duration::from_millis(2);

pub(super) struct FileAuditStore {
    path: PathBuf,
    /// `path` made absolute at open, to ask under the lock whether it still names the open file
    /// ([`warn_if_moved`]) even if the process changed its working directory since.
    named: PathBuf,
    /// A handle for positional reads, so a scan holds no lock while it reads; a writer's file lock is taken
    /// through it (it shares the writing handle's open file, and so its lock).
    reader: File,
    writable: bool,
    state: Mutex<State>,
}

struct State {
    file: File,
    /// The end of the last whole batch: what a scan reads and where the next batch goes.
    len: u64,
    /// The last whole batch's head frame, as stored.
    head: Option<Vec<u8>>,
    /// Record frames before `len`.
    records: u64,
    /// `(seq, offset)` of every `INDEX_EVERY`-th record frame.
    index: Vec<(u64, u64)>,
    /// Where a bad frame that is no cut write starts, and what is wrong with it (a reader reports it; a
    /// writer refuses to open or to append).
    damage: Option<(u64, String)>,
    /// Whether the path no longer names the file, as last seen under the lock (warned of once).
    moved: bool,
    /// A writer's: the grants spent in the file's records (read at open, appended by others since, its own).
    spends: Option<Spends>,
}

impl FileAuditStore {
    /// Opens (or creates) the file to append to it, cutting a torn last batch off.
    pub(super) fn open(path: &Path) -> Result<FileAuditStore, AuditError> {
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|err| AuditError::io(path, "cannot be opened", err))?;
        let reader = file.try_clone().map_err(|err| AuditError::io(path, "cannot be opened", err))?;
        let held = Held::take(&reader, path, LOCK_WAIT)?;
        let named = std::path::absolute(path).map_err(|err| AuditError::io(path, "cannot be opened", err))?;
        let size = file_size(&file, path)?;
        if size < MAGIC.len() as u64 {
            // New, or its creation was cut short before the magic was whole.
            let mut start = vec![0; size as usize];
            read_exact_at(&file, &mut start, 0).map_err(|err| AuditError::io(path, "cannot be read", err))?;
            if !MAGIC.starts_with(&start) {
                return Err(not_ours(path));
            }
            let created = file
                .set_len(0)
                .and_then(|()| (&file).write_all(MAGIC))
                .and_then(|()| file.sync_all())
                .and_then(|()| if existed { Ok(()) } else { sync_parent(path) });
            created.map_err(|err| AuditError::io(path, "cannot be written", err))?;
        }
        let mut state = State::start(file, path)?;
        state.spends = Some(Spends::default());
        catch_up(&mut state, &reader, path, &named)?;
        drop(held);
        Ok(FileAuditStore { path: path.to_owned(), named, reader, writable: true, state: Mutex::new(state) })
    }

    /// Opens an existing file to read it, changing nothing and taking no lock: a log another process writes
    /// can be read, each read taking in the batches written since the last. Damage is reported by the scan
    /// that reaches it.
    pub(super) fn open_read_only(path: &Path) -> Result<FileAuditStore, AuditError> {
        let file = File::open(path).map_err(|err| AuditError::io(path, "cannot be opened", err))?;
        let reader = file.try_clone().map_err(|err| AuditError::io(path, "cannot be opened", err))?;
        let mut state = State::start(file, path)?;
        state.read_on(&reader, path)?;
        let named = path.to_owned();
        Ok(FileAuditStore { path: path.to_owned(), named, reader, writable: false, state: Mutex::new(state) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // State changes only after the write succeeded, with infallible operations: a poisoned lock is consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, with the batches another process appended since the last read taken in.
    fn current(&self) -> Result<MutexGuard<'_, State>, AuditError> {
        let mut state = self.lock();
        if state.damage.is_none() {
            state.read_on(&self.reader, &self.path)?;
        }
        Ok(state)
    }
}

/// The file's exclusive lock, held by a writer while it opens the file or appends a batch, released when
/// dropped (and by the system if the process dies holding it).
struct Held<'f>(&'f File);

impl Held<'_> {
    /// Takes the lock through `file`, waiting up to `wait` ([`LOCK_WAIT`]) for the writer holding it. Tried, not
    /// blocked on: a writer that never lets go (a process stopped mid-append) fails the wait with an error
    /// instead of hanging the caller.
    fn take<'f>(file: &'f File, path: &Path, wait: Duration) -> Result<Held<'f>, AuditError> {
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_micros(50);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Held(file)),
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_LOCK_PAUSE);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(AuditError::io(
                        path,
                        "is locked by another writer for longer than an append takes",
                        io::Error::from(io::ErrorKind::TimedOut),
                    ));
                }
                Err(std::fs::TryLockError::Error(err)) => return Err(AuditError::io(path, "cannot be locked", err)),
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; an unlock that fails leaves it to that.
        let _ = self.0.unlock();
    }
}

/// Under the file's lock: says so if the file is no longer at its path ([`warn_if_moved`]), takes in the batches
/// written since the last read, refuses a damaged file (or one shorter than what was read of it), and cuts off a
/// write cut short (a writer's crash, or a failed write this process could not cut back).
fn catch_up(state: &mut State, reader: &File, path: &Path, named: &Path) -> Result<(), AuditError> {
    // One `fstat` for both: whether the file is still at its path, and how far to read.
    let open = reader.metadata().map_err(|err| AuditError::io(path, "cannot be read", err))?;
    warn_if_moved(state, &open, path, named);
    let size = if state.damage.is_none() { state.read_to(reader, path, open.len())? } else { 0 };
    if let Some((offset, reason)) = &state.damage {
        return Err(AuditError::Damaged { path: path.display().to_string(), offset: *offset, reason: reason.clone() });
    }
    if size < state.len {
        // No write of the log shortens the file past a whole batch (a failed one is cut back to one).
        return Err(AuditError::Damaged {
            path: path.display().to_string(),
            offset: size,
            reason: format!("the file ends before the last whole batch already read from it (at byte {})", state.len),
        });
    }
    if state.len < size {
        cut_torn_tail(path, state, size)?;
    }
    Ok(())
}

/// Warns, once each time it happens, when `named` (`path` made absolute) no longer names the open file (`open`
/// is its metadata): it was renamed away (a log rotation), deleted, or replaced by another (a new log started at
/// the path). The writer goes on appending to the file it has open, where its chain is: refusing would lose the
/// records of the calls that still run (a tool's outcome is not withheld for want of its record), and following
/// the path would start another chain. Readers of the path no longer see those records, which is what the
/// warning says.
#[cfg(unix)]
fn warn_if_moved(state: &mut State, open: &std::fs::Metadata, path: &Path, named: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let now = match std::fs::metadata(named) {
        Ok(at_path) if (at_path.dev(), at_path.ino()) == (open.dev(), open.ino()) => None,
        Ok(_) => Some("another file is at the path now"),
        Err(_) => Some("nothing is at the path now"),
    };
    match (now, state.moved) {
        (Some(what), false) => tracing::warn!(
            target: "agent_airlock::audit",
            path = %path.display(),
            what,
            "the audit file was renamed, deleted or replaced while this process had it open: its records go on \
             into the file it has open, which readers of the path no longer see; restart it to append at the path"
        ),
        (None, true) => {
            tracing::info!(target: "agent_airlock::audit", path = %path.display(), "the audit file is at its path again")
        }
        _ => {}
    }
    state.moved = now.is_some();
}

/// Without Unix's file identities the check is not made (a Windows file in use cannot be renamed or deleted by
/// default).
#[cfg(not(unix))]
fn warn_if_moved(_state: &mut State, _open: &std::fs::Metadata, _path: &Path, _named: &Path) {}

fn file_size(file: &File, path: &Path) -> Result<u64, AuditError> {
    Ok(file.metadata().map_err(|err| AuditError::io(path, "cannot be read", err))?.len())
}

impl State {
    /// The state of a file whose magic is checked and which holds no batch yet.
    fn start(file: File, path: &Path) -> Result<State, AuditError> {
        let mut magic = [0; MAGIC.len()];
        if file_size(&file, path)? < MAGIC.len() as u64 {
            return Err(not_ours(path));
        }
        read_exact_at(&file, &mut magic, 0).map_err(|err| AuditError::io(path, "cannot be read", err))?;
        if &magic != MAGIC {
            return Err(not_ours(path));
        }
        Ok(State {
            file,
            len: MAGIC.len() as u64,
            head: None,
            records: 0,
            index: Vec::new(),
            damage: None,
            moved: false,
            spends: None,
        })
    }

    /// Reads the frames after the last whole batch up to the file's end: every whole batch is taken in, and
    /// what follows the last is judged a cut write (left for a later read, or cut at open) or damage. Returns
    /// the file's size.
    fn read_on(&mut self, file: &File, path: &Path) -> Result<u64, AuditError> {
        let size = file_size(file, path)?;
        self.read_to(file, path, size)
    }

    /// [`read_on`](Self::read_on) to `size`, the file's size as just read.
    fn read_to(&mut self, file: &File, path: &Path, size: u64) -> Result<u64, AuditError> {
        if size <= self.len {
            return Ok(size);
        }
        let mut frames = Frames::new(file, self.len, size);
        let (mut records, mut whole_index) = (self.records, self.index.len());
        // Records that may name a spend, taken in once their batch is whole.
        let mut spends = Vec::new();
        loop {
            let offset = frames.offset;
            match frames.next().map_err(|err| AuditError::io(path, "cannot be read", err))? {
                Next::Frame(Frame { kind: RECORD, seq, payload }) => {
                    if records % INDEX_EVERY == 0 {
                        self.index.push((seq, offset));
                    }
                    records += 1;
                    if self.spends.is_some() && Spends::may_name_a_spend(&payload) {
                        spends.push((seq, payload));
                    }
                }
                Next::Frame(Frame { payload, .. }) => {
                    // A head frame: the batch before it is whole.
                    self.len = frames.offset;
                    self.head = Some(payload);
                    self.records = records;
                    whole_index = self.index.len();
                    if let Some(known) = &mut self.spends {
                        spends.drain(..).for_each(|(seq, frame)| known.read(seq, &frame));
                    }
                }
                Next::End => break,
                Next::Bad(bad) => {
                    if !bad.is_cut_write(&mut frames).map_err(|err| AuditError::io(path, "cannot be read", err))? {
                        self.damage = Some((offset, bad.to_string()));
                    }
                    break;
                }
            }
        }
        self.index.truncate(whole_index);
        Ok(size)
    }
}

/// Cuts the file back to its last whole batch, keeping what is cut beside it.
fn cut_torn_tail(path: &Path, state: &mut State, size: u64) -> Result<(), AuditError> {
    let mut tail = vec![0; (size - state.len) as usize];
    read_exact_at(&state.file, &mut tail, state.len).map_err(|err| AuditError::io(path, "cannot be read", err))?;
    let kept =
        keep_aside(path, state.len, &tail).map_err(|err| AuditError::io(path, "cannot keep its torn tail", err))?;
    state
        .file
        .set_len(state.len)
        .and_then(|()| state.file.sync_all())
        .map_err(|err| AuditError::io(path, "cannot be cut back to its last whole batch", err))?;
    tracing::warn!(
        target: "agent_airlock::audit",
        path = %path.display(),
        offset = state.len,
        bytes = tail.len(),
        kept = %kept.display(),
        "the audit file ended in a write cut short (a crash): cut back to its last whole batch, the cut bytes kept aside"
    );
    Ok(())
}

/// Writes `tail` to a new file `NAME.torn-OFFSET[-N]` beside `path`, durably.
/// Readable by whom the log is (the cut bytes are the log's), and never an existing file or link followed.
fn keep_aside(path: &Path, offset: u64, tail: &[u8]) -> io::Result<PathBuf> {
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let permissions = std::fs::metadata(path)?.permissions();
    for n in 0..MAX_ASIDE_NAMES {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let aside = path.with_file_name(format!("{name}.torn-{offset}{suffix}"));
        match OpenOptions::new().write(true).create_new(true).open(&aside) {
            Ok(mut file) => {
                file.set_permissions(permissions)?;
                file.write_all(tail)?;
                file.sync_all()?;
                sync_parent(&aside)?;
                return Ok(aside);
            }
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::other("no free name for the torn tail"))
}

fn not_ours(path: &Path) -> AuditError {
    AuditError::Damaged {
        path: path.display().to_string(),
        offset: 0,
        reason: "it is not an agent-airlock audit file (its first bytes are not `airlock-audit\\0v1`)".to_owned(),
    }
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        // Makes the new name durable; a platform that cannot open a directory is no reason to fail.
        Some(dir) => match File::open(dir) {
            Ok(dir) => dir.sync_all().or(Ok(())),
            Err(_) => Ok(()),
        },
        None => Ok(()),
    }
}

/// Appends one frame to `out`.
fn put_frame(out: &mut Vec<u8>, kind: u8, seq: u64, payload: &[u8]) -> Result<(), AuditError> {
    let len = u32::try_from(payload.len()).map_err(|_| AuditError::Corrupt {
        seq,
        reason: format!("a record of {} bytes does not fit an audit file frame (4 GiB at most)", payload.len()),
    })?;
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

impl AuditStore for FileAuditStore {
    fn append(&self, build: &mut dyn FnMut(Option<Anchor>) -> Result<Batch, AuditError>) -> Result<(), AuditError> {
        if !self.writable {
            return Err(AuditError::io(
                &self.path,
                "was opened to read",
                io::Error::from(io::ErrorKind::ReadOnlyFilesystem),
            ));
        }
        let mut state = self.lock();
        // The in-process lock first: threads of this process share the file's lock, so only one may hold it.
        let _held = Held::take(&self.reader, &self.path, LOCK_WAIT)?;
        catch_up(&mut state, &self.reader, &self.path, &self.named)?;
        let head = state.head.as_deref().map(Anchor::decode_stored).transpose()?;
        let batch = build(head)?;
        let head = batch.head.encode_stored();
        let framing = (FRAME_HEAD + FRAME_TAIL) as usize;
        let size: usize =
            batch.records.iter().map(|(_, bytes)| bytes.len() + framing).sum::<usize>() + head.len() + framing;
        let mut out = Vec::with_capacity(size);
        let (mut records, mut index) = (state.records, Vec::new());
        for (seq, bytes) in &batch.records {
            if records % INDEX_EVERY == 0 {
                index.push((*seq, state.len + out.len() as u64));
            }
            put_frame(&mut out, RECORD, *seq, bytes)?;
            records += 1;
        }
        put_frame(&mut out, HEAD, batch.head.seq, &head)?;
        let written = (&state.file).write_all(&out).and_then(|()| state.file.sync_data());
        if let Err(err) = written {
            // Nothing of the batch counts: the file goes back to its last whole batch (or, if even that
            // fails, the next append or open, under the lock, cuts the torn write off).
            let _ = state.file.set_len(state.len).and_then(|()| state.file.sync_data());
            return Err(AuditError::io(&self.path, "cannot be written", err));
        }
        state.len += out.len() as u64;
        state.head = Some(head);
        state.records = records;
        state.index.extend(index);
        if let Some(spends) = &mut state.spends {
            for (seq, bytes) in batch.records.iter().filter(|(_, bytes)| Spends::may_name_a_spend(bytes)) {
                spends.read(*seq, bytes);
            }
        }
        Ok(())
    }

    fn head(&self) -> Result<Option<Anchor>, AuditError> {
        self.current()?.head.as_deref().map(Anchor::decode_stored).transpose()
    }

    fn scan(
        &self,
        from: u64,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<Option<Vec<u8>>, AuditError> {
        let (start, end, head, damage) = {
            let state = self.current()?;
            // From the start unless an indexed record at or before `from` is known (a log whose sequence
            // numbers were tampered with is read from its start by `verify`, which scans from 1).
            let at = state.index.partition_point(|(seq, _)| *seq <= from);
            let start = if from <= 1 || at == 0 { MAGIC.len() as u64 } else { state.index[at - 1].1 };
            (start, state.len, state.head.clone(), state.damage.clone())
        };
        let mut frames = Frames::new(&self.reader, start, end);
        loop {
            let offset = frames.offset;
            match frames.next().map_err(|err| AuditError::io(&self.path, "cannot be read", err))? {
                Next::Frame(Frame { kind: RECORD, seq, payload }) => {
                    if seq >= from && visit(seq, &payload).is_break() {
                        return Ok(head);
                    }
                }
                Next::Frame(_) => {}
                Next::End => break,
                Next::Bad(bad) => {
                    return Err(AuditError::Damaged {
                        path: self.path.display().to_string(),
                        offset,
                        reason: bad.to_string(),
                    });
                }
            }
        }
        if let Some((offset, reason)) = damage {
            return Err(AuditError::Damaged { path: self.path.display().to_string(), offset, reason });
        }
        Ok(head)
    }

    fn waits_for_disk(&self) -> bool {
        true
    }

    fn closed_before(&self, grant_id: &str, seq: u64) -> Option<Closed> {
        self.lock().spends.as_ref()?.closed_before(grant_id, seq)
    }

    fn knows_closings(&self) -> bool {
        self.lock().spends.is_some()
    }
}

fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut at = At { file, pos: offset, end: offset + buf.len() as u64 };
    at.read_exact(buf)
}

/// Positional reads of `[pos, end)` of a file, sharing no cursor with other handles.
struct At<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = read_at(self.file, &mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

struct Frame {
    kind: u8,
    seq: u64,
    payload: Vec<u8>,
}

enum Next {
    Frame(Frame),
    End,
    Bad(Bad),
}

/// Why the bytes at some offset are not a whole frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    /// Fewer bytes left than a frame's header.
    ShortHeader,
    /// The frame's length runs past the end.
    RunsPastEnd,
    /// The frame fails its CRC; whether it is the last thing in the file.
    Checksum { last: bool },
    /// The frame's kind is neither a record nor a head.
    Kind { kind: u8 },
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::ShortHeader => f.write_str("the file ends inside a frame's header"),
            Bad::RunsPastEnd => f.write_str("a frame's length runs past the end of the file"),
            Bad::Checksum { .. } => f.write_str("a frame fails its CRC (its bytes were changed)"),
            Bad::Kind { kind } => write!(f, "a frame of unknown kind {kind}"),
        }
    }
}

impl Bad {
    /// Whether the bytes from the bad frame to the end can be a write cut short by a crash: the file ends in
    /// or right after the frame, or nothing but zeros follows (a file extended before its data landed).
    fn is_cut_write(self, frames: &mut Frames<'_>) -> io::Result<bool> {
        match self {
            Bad::ShortHeader | Bad::RunsPastEnd | Bad::Checksum { last: true } => Ok(true),
            Bad::Checksum { last: false } => frames.rest_is_zero(),
            // A whole frame (its CRC holds) of a kind this build never writes: no crash makes one.
            Bad::Kind { .. } => Ok(false),
        }
    }
}

/// The frames of `[offset, end)` of a file, read through one buffer.
struct Frames<'a> {
    reader: BufReader<At<'a>>,
    /// Where the next frame starts.
    offset: u64,
    end: u64,
}

impl<'a> Frames<'a> {
    fn new(file: &'a File, offset: u64, end: u64) -> Frames<'a> {
        Frames { reader: BufReader::with_capacity(READ_BUFFER, At { file, pos: offset, end }), offset, end }
    }

    fn next(&mut self) -> io::Result<Next> {
        let left = self.end - self.offset;
        if left == 0 {
            return Ok(Next::End);
        }
        if left < FRAME_HEAD + FRAME_TAIL {
            return Ok(Next::Bad(Bad::ShortHeader));
        }
        let mut header = [0u8; FRAME_HEAD as usize];
        self.reader.read_exact(&mut header)?;
        let len = u64::from(u32::from_le_bytes([header[0], header[1], header[2], header[3]]));
        let whole = FRAME_HEAD + len + FRAME_TAIL;
        if whole > left {
            return Ok(Next::Bad(Bad::RunsPastEnd));
        }
        let kind = header[4];
        let seq = u64::from_le_bytes(header[5..13].try_into().unwrap_or_default());
        // `len` is at most what is left of the file, so this allocation is bounded by its size.
        let mut payload = vec![0; len as usize];
        self.reader.read_exact(&mut payload)?;
        let mut crc = [0u8; FRAME_TAIL as usize];
        self.reader.read_exact(&mut crc)?;
        let last = whole == left;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&header);
        hasher.update(&payload);
        if hasher.finalize() != u32::from_le_bytes(crc) {
            return Ok(Next::Bad(Bad::Checksum { last }));
        }
        if kind != RECORD && kind != HEAD {
            return Ok(Next::Bad(Bad::Kind { kind }));
        }
        self.offset += whole;
        Ok(Next::Frame(Frame { kind, seq, payload }))
    }

    /// Whether every byte after the frame just read (a bad one) is zero.
    fn rest_is_zero(&mut self) -> io::Result<bool> {
        let mut buf = [0u8; 8192];
        loop {
            let n = self.reader.read(&mut buf)?;
            if n == 0 {
                return Ok(true);
            }
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
    }
}

impl AuditError {
    fn io(path: &Path, what: &'static str, err: io::Error) -> AuditError {
        AuditError::File { path: path.display().to_string(), what, source: Arc::new(err) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::audit::{AuditConfig, AuditEvent, AuditLog, AuditOutcome, Tamper, TamperKind, VerifyError, verify};
    use crate::keys::AuditKey;
    use crate::message::RefusalKind;

    fn keyed() -> AuditConfig {
        AuditConfig {
            key: Some(AuditKey::new("k1", b"0123456789abcdef0123456789abcdef").unwrap()),
            ..Default::default()
        }
    }

    fn append(log: &AuditLog, call_id: &str) -> u64 {
        let arguments = serde_json::json!({"call": call_id});
        log.append(AuditEvent::new("tool", call_id, AuditOutcome::Executed).arguments(&arguments)).unwrap().seq
    }

    /// `batches` appends of one record each; the file's length after each.
    fn written(path: &Path, batches: usize) -> Vec<u64> {
        let log = AuditLog::open_append_only(path, keyed()).unwrap();
        (0..batches)
            .map(|i| {
                append(&log, &format!("call-{i}"));
                std::fs::metadata(path).unwrap().len()
            })
            .collect()
    }

    fn records(path: &Path) -> u64 {
        let log = AuditLog::open_append_only(path, keyed()).unwrap();
        verify(&log, None).unwrap().records
    }

    fn asides(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut found: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_string_lossy().contains(".torn-"))
            .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap()))
            .collect();
        found.sort();
        found
    }

    #[test]
    fn records_survive_reopening_and_verify_like_the_redb_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        {
            let log = AuditLog::open_append_only(&path, keyed()).unwrap();
            assert_eq!(log.head().unwrap().seq, 0);
            assert_eq!(verify(&log, None).unwrap().records, 0, "a new file verifies");
            assert_eq!((append(&log, "a"), append(&log, "b")), (1, 2));
        }
        assert_eq!(&std::fs::read(&path).unwrap()[..16], MAGIC);
        let log = AuditLog::open_append_only(&path, keyed()).unwrap();
        assert_eq!(append(&log, "c"), 3, "the chain goes on after the reopening");
        let report = verify(&log, None).unwrap();
        assert_eq!((report.records, report.signed_records), (3, 3));
        assert!(report.head_signed);
        let ids: Vec<_> = log.records(1, 10).unwrap().into_iter().map(|r| r.tool_call_id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert!(asides(dir.path()).is_empty(), "nothing was cut");

        // Signed with another key: every record is refused as forged by a verifier with the right one.
        let other = AuditConfig { key: Some(AuditKey::new("k1", &[7; 32]).unwrap()), ..Default::default() };
        drop(log);
        let log = AuditLog::read_append_only(&path, other).unwrap();
        assert!(matches!(verify(&log, None), Err(VerifyError::Tampered(Tamper { seq: 1, kind: TamperKind::Forged }))));
    }

    #[test]
    fn any_number_of_handles_write_one_chain_and_any_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let writer = AuditLog::open_append_only(&path, keyed()).unwrap();
        append(&writer, "a");
        // A second writer (another process, or another handle: each its own open file and lock) goes on
        // from the file's head, and the first takes in what the second wrote before its own next append.
        let second = AuditLog::open_append_only(&path, keyed()).unwrap();
        assert_eq!(second.head().unwrap().seq, 1);
        assert_eq!(append(&second, "b"), 2);
        assert_eq!(writer.head().unwrap().seq, 2, "a writer's reads take in what others appended");
        assert_eq!(append(&writer, "c"), 3);
        assert_eq!(append(&second, "d"), 4);
        let reader = AuditLog::read_append_only(&path, keyed()).unwrap();
        assert_eq!(verify(&reader, None).unwrap().records, 4);
        let ids: Vec<_> = reader.records(1, 10).unwrap().into_iter().map(|r| r.tool_call_id).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);

        // What is appended after the reader opened is read by its next read, a batch cut short is not.
        append(&writer, "e");
        assert_eq!(reader.head().unwrap().seq, 5);
        assert_eq!(verify(&reader, None).unwrap().records, 5);
        let mut half = Vec::new();
        put_frame(&mut half, RECORD, 6, b"a record whose batch is still being written").unwrap();
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&half[..20]).unwrap();
        assert_eq!(verify(&reader, None).unwrap().records, 5, "a batch being written is not read yet");
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&half[20..]).unwrap();
        assert_eq!(verify(&reader, None).unwrap().records, 5, "nor its records before its head");
        assert_eq!(verify(&second, None).unwrap().records, 5, "nor by a writer's read");
        let refused = reader.append(AuditEvent::new("tool", "b", AuditOutcome::Executed)).unwrap_err();
        assert!(refused.to_string().contains("was opened to read"), "{refused}");
        assert!(AuditLog::read_append_only(dir.path().join("missing.log"), keyed()).is_err());

        // Under the lock no batch is being written: what follows the last whole one is a writer's crash, cut
        // off (and kept aside) by the next append of any writer, which goes on from the last whole batch.
        assert_eq!(append(&second, "f"), 6);
        let aside = asides(dir.path());
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(aside[0].1, half);
        assert_eq!(append(&writer, "g"), 7);
        let report = verify(&reader, None).unwrap();
        assert_eq!((report.records, report.signed_records), (7, 7));
    }

    #[test]
    fn a_writer_waits_for_the_lock_and_fails_clearly_when_it_is_never_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let writer = AuditLog::open_append_only(&path, keyed()).unwrap();
        append(&writer, "a");
        // Another handle holds the lock for a while (another process's append): the append waits, then lands.
        let other = std::fs::File::open(&path).unwrap();
        other.lock().unwrap();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            other.unlock().unwrap();
            other
        });
        let started = std::time::Instant::now();
        assert_eq!(append(&writer, "b"), 2);
        assert!(started.elapsed() >= std::time::Duration::from_millis(100), "it waited for the lock");
        let other = releaser.join().unwrap();
        // A lock never let go (a process stopped mid-append): the wait ends in an error naming the file.
        other.lock().unwrap();
        let mine = std::fs::File::open(&path).unwrap();
        let started = std::time::Instant::now();
        let err = Held::take(&mine, &path, std::time::Duration::from_millis(200)).err().unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(200));
        let shown = err.to_string();
        assert!(shown.contains("audit.log") && shown.contains("locked by another writer"), "{shown}");
        drop(other);
        assert!(Held::take(&mine, &path, std::time::Duration::ZERO).is_ok(), "taken once let go");
        assert_eq!(append(&writer, "c"), 3);
    }

    #[test]
    fn a_scan_from_any_position_uses_the_index_and_finds_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open_append_only(&path, AuditConfig::default()).unwrap();
        // Two appends of 400 records each: the index has entries inside a batch and across batches.
        for batch in 0..2 {
            let entries: Vec<_> = (0..400)
                .map(|i| log.prepare(&AuditEvent::new("tool", &format!("{batch}-{i}"), AuditOutcome::Executed)))
                .collect();
            log.append_reply(entries).wait().unwrap();
        }
        for log in [log, AuditLog::read_append_only(&path, AuditConfig::default()).unwrap()] {
            for from in [0, 1, 2, 255, 256, 257, 399, 400, 401, 512, 513, 799, 800] {
                let got: Vec<_> = log.records(from, 3).unwrap().into_iter().map(|r| r.seq).collect();
                let want: Vec<_> = (from.max(1)..=800).take(3).collect();
                assert_eq!(got, want, "from {from}");
            }
            assert!(log.records(801, 3).unwrap().is_empty());
            assert_eq!(verify(&log, None).unwrap().records, 800);
        }
    }

    #[test]
    fn appends_handed_to_the_thread_are_each_answered_with_their_own_position() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(AuditLog::open_append_only(dir.path().join("audit.log"), keyed()).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    (0..10)
                        .map(|i| {
                            let entry =
                                log.prepare(&AuditEvent::new("tool", &format!("{t}-{i}"), AuditOutcome::Executed));
                            log.append_reply(vec![entry]).wait().unwrap()[0].seq
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut seqs: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=80).collect::<Vec<_>>(), "every append answered with its own position");
        assert_eq!(verify(&log, None).unwrap().records, 80);
        // Dropped, the log waits for its thread: the file's lock is free at once.
        let path = dir.path().join("audit.log");
        drop(Arc::into_inner(log).expect("the threads are done"));
        let log = AuditLog::open_append_only(&path, keyed()).expect("the lock went with the log");
        // Told to commit on the caller, the reply is ready when it is returned.
        assert!(log.commit_on_caller_when_idle());
        let entry = log.prepare(&AuditEvent::new("tool", "last", AuditOutcome::Executed));
        assert_eq!(log.append_reply(vec![entry]).wait().unwrap()[0].seq, 81);
    }

    /// Every way a crash can cut the last write: the file is cut back to the batch before it, the cut
    /// bytes are kept aside, and the log goes on.
    #[test]
    fn a_write_cut_short_is_cut_off_and_kept_aside() {
        type Cut = fn(&mut Vec<u8>, usize);
        let cuts: [(&str, Cut); 6] = [
            ("ends inside the last frame", |bytes, _| {
                bytes.truncate(bytes.len() - 5);
            }),
            ("ends inside a frame's header", |bytes, last| {
                bytes.truncate(last + 6);
            }),
            ("the head frame never written", |bytes, last| {
                // Only the record frame of the last batch: its head frame is the final bytes.
                let record = 17 + u32::from_le_bytes(bytes[last..last + 4].try_into().unwrap()) as usize;
                bytes.truncate(last + record);
            }),
            ("the last frame's bytes not all written", |bytes, _| {
                let at = bytes.len() - 10;
                bytes[at] ^= 0x40;
            }),
            ("the file extended before its data landed", |bytes, last| {
                bytes[last..].fill(0);
            }),
            ("zeros after the last batch", |bytes, _| {
                bytes.extend_from_slice(&[0; 4096]);
            }),
        ];
        for (what, cut) in cuts {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("audit.log");
            let lengths = written(&path, 3);
            let mut bytes = std::fs::read(&path).unwrap();
            let last = lengths[1] as usize;
            cut(&mut bytes, last);
            std::fs::write(&path, &bytes).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
            }
            let whole = if what == "zeros after the last batch" { 3 } else { 2 };
            assert_eq!(records(&path), whole, "{what}: the whole batches are kept");
            let kept = asides(dir.path());
            let at = lengths[whole as usize - 1];
            assert_eq!(kept.len(), 1, "{what}: the cut bytes are kept aside");
            assert_eq!(kept[0].0, format!("audit.log.torn-{at}"), "{what}");
            assert_eq!(kept[0].1, bytes[at as usize..], "{what}: every cut byte kept");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), at, "{what}");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode(&dir.path().join(&kept[0].0)), mode(&path), "{what}: kept as readable as the log");
            }
            let log = AuditLog::open_append_only(&path, keyed()).unwrap();
            assert_eq!(append(&log, "after"), whole + 1, "{what}: the log goes on");
            assert_eq!(verify(&log, None).unwrap().records, whole + 1, "{what}");
        }
    }

    /// A file of `batches` appends, batch `i` holding `i % 3 + 1` records; the whole batches' ends (offset, records).
    fn batches(path: &Path, batches: usize) -> Vec<(u64, u64)> {
        let log = AuditLog::open_append_only(path, keyed()).unwrap();
        let mut records = 0;
        (0..batches)
            .map(|batch| {
                let entries: Vec<_> = (0..batch % 3 + 1)
                    .map(|i| log.prepare(&AuditEvent::new("tool", &format!("{batch}-{i}"), AuditOutcome::Executed)))
                    .collect();
                records += entries.len() as u64;
                log.append_reply(entries).wait().unwrap();
                (std::fs::metadata(path).unwrap().len(), records)
            })
            .collect()
    }

    /// The records of the whole batches that end at or before `offset`.
    fn whole_before(ends: &[(u64, u64)], offset: u64) -> u64 {
        ends.iter().take_while(|(end, _)| *end <= offset).last().map_or(0, |(_, records)| *records)
    }

    /// A crash can stop the last write at any byte: cut at every byte of the file, the file opens with the whole
    /// batches before the cut, the rest kept aside, and takes the next append.
    #[test]
    fn a_cut_at_any_byte_keeps_the_whole_batches_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let original = dir.path().join("original.log");
        let ends = batches(&original, 4);
        let bytes = std::fs::read(&original).unwrap();
        for cut in MAGIC.len()..=bytes.len() {
            let case = tempfile::tempdir().unwrap();
            let path = case.path().join("audit.log");
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let log = AuditLog::open_append_only(&path, keyed()).unwrap_or_else(|err| panic!("cut at {cut}: {err}"));
            let kept = whole_before(&ends, cut as u64);
            assert_eq!(verify(&log, None).unwrap().records, kept, "cut at {cut}");
            let at = ends.iter().map(|(end, _)| *end).filter(|end| *end <= cut as u64).max().unwrap_or(16);
            match asides(case.path()).as_slice() {
                [] => assert_eq!(at, cut as u64, "cut at {cut}: nothing cut only at a batch's end"),
                [(_, aside)] => assert_eq!(aside.as_slice(), &bytes[at as usize..cut], "cut at {cut}"),
                more => panic!("cut at {cut}: {} files kept aside", more.len()),
            }
            assert_eq!(append(&log, "next"), kept + 1, "cut at {cut}");
        }
    }

    /// Whatever is done to the file's bytes, opening it never panics and either refuses it as damaged or keeps
    /// exactly the whole batches before the first byte changed (the rest kept aside), and the log verifies. Read
    /// only, the same file never panics either.
    #[test]
    fn any_edit_is_refused_or_cut_at_the_batch_it_touches() {
        use proptest::prelude::*;
        let dir = tempfile::tempdir().unwrap();
        let original = dir.path().join("original.log");
        let ends = batches(&original, 5);
        let bytes = std::fs::read(&original).unwrap();
        let len = bytes.len();
        #[derive(Debug, Clone)]
        enum Edit {
            Flip(usize, u8),
            Zero(usize, usize),
            Append(Vec<u8>),
            Insert(usize, Vec<u8>),
            Truncate(usize),
        }
        let edits = prop_oneof![
            (16..len, 1..=255u8).prop_map(|(at, x)| Edit::Flip(at, x)),
            (16..len, 1..64usize).prop_map(|(at, n)| Edit::Zero(at, n)),
            proptest::collection::vec(any::<u8>(), 1..64).prop_map(Edit::Append),
            (16..len, proptest::collection::vec(any::<u8>(), 1..32)).prop_map(|(at, b)| Edit::Insert(at, b)),
            (16..len).prop_map(Edit::Truncate),
        ];
        let config = proptest::test_runner::Config { cases: 256, ..proptest::test_runner::Config::default() };
        proptest::test_runner::TestRunner::new(config)
            .run(&edits, |edit| {
                let mut edited = bytes.clone();
                let first = match &edit {
                    Edit::Flip(at, x) => {
                        edited[*at] ^= x;
                        *at
                    }
                    Edit::Zero(at, n) => {
                        let end = (*at + n).min(len);
                        let Some(changed) = bytes[*at..end].iter().position(|&b| b != 0) else { return Ok(()) };
                        edited[*at..end].fill(0);
                        *at + changed
                    }
                    Edit::Append(tail) => {
                        edited.extend_from_slice(tail);
                        len
                    }
                    Edit::Insert(at, inserted) => {
                        edited.splice(*at..*at, inserted.iter().copied());
                        *at
                    }
                    Edit::Truncate(at) => {
                        edited.truncate(*at);
                        *at
                    }
                };
                let case = tempfile::tempdir().unwrap();
                let path = case.path().join("audit.log");
                std::fs::write(&path, &edited).unwrap();
                if let Ok(reader) = AuditLog::read_append_only(&path, keyed()) {
                    let _ = verify(&reader, None);
                    let _ = reader.records(0, 100);
                }
                match AuditLog::open_append_only(&path, keyed()) {
                    Ok(log) => {
                        let records =
                            verify(&log, None).map_err(|err| TestCaseError::fail(format!("{edit:?}: {err}")))?;
                        prop_assert_eq!(records.records, whole_before(&ends, first as u64), "{:?}", edit);
                        prop_assert_eq!(append(&log, "next"), records.records + 1);
                    }
                    Err(AuditError::Damaged { .. }) => {
                        prop_assert_eq!(std::fs::read(&path).unwrap(), edited, "a refused file is left as it is");
                    }
                    Err(other) => return Err(TestCaseError::fail(format!("{edit:?}: {other}"))),
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_cut_creation_is_started_again_and_another_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, &MAGIC[..7]).unwrap();
        let log = AuditLog::open_append_only(&path, keyed()).unwrap();
        assert_eq!(append(&log, "a"), 1);
        drop(log);

        for other in [&b"SQLite format 3\0 and more"[..], b"airlock-audit\0v2", b"not ours"] {
            std::fs::write(&path, other).unwrap();
            let err = AuditLog::open_append_only(&path, keyed()).unwrap_err();
            assert!(matches!(err, AuditError::Damaged { offset: 0, .. }), "{err}");
            assert!(err.to_string().contains("not an agent-airlock audit file"), "{err}");
            assert_eq!(std::fs::read(&path).unwrap(), other, "left untouched");
        }
    }

    /// Bytes changed before the last batch are no crash: the file is refused and left as it is, the
    /// reader reports where; changed with a CRC to match, `verify` finds the record.
    #[test]
    fn damage_before_the_last_batch_is_refused_and_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let lengths = written(&path, 4);
        let original = std::fs::read(&path).unwrap();
        // A byte in the body of record #2 (the second batch's record frame, past its header).
        let second = lengths[0] as usize;
        let at = second + 60;
        let mut bytes = original.clone();
        bytes[at] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();

        let err = AuditLog::open_append_only(&path, keyed()).unwrap_err();
        assert!(matches!(err, AuditError::Damaged { offset, .. } if offset == second as u64), "{err}");
        assert!(err.to_string().contains("fails its CRC"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing cut");
        assert!(asides(dir.path()).is_empty());
        let reader = AuditLog::read_append_only(&path, keyed()).unwrap();
        let err = verify(&reader, None).unwrap_err();
        assert!(err.to_string().contains(&format!("damaged at byte {second}")), "{err}");

        // The same edit with the frame's CRC recomputed: the file opens, and the chain names record #2.
        let len = u32::from_le_bytes(bytes[second..second + 4].try_into().unwrap()) as usize;
        let end = second + 13 + len;
        let crc = crc32fast::hash(&bytes[second..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let log = AuditLog::open_append_only(&path, keyed()).unwrap();
        let err = verify(&log, None).unwrap_err();
        assert!(matches!(&err, VerifyError::Tampered(Tamper { seq: 2, .. })), "{err}");
    }

    #[test]
    fn a_frame_of_unknown_kind_is_damage_even_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        written(&path, 2);
        let mut bytes = std::fs::read(&path).unwrap();
        let mut frame = Vec::new();
        put_frame(&mut frame, 9, 3, b"{}").unwrap();
        bytes.extend_from_slice(&frame);
        std::fs::write(&path, &bytes).unwrap();
        let err = AuditLog::open_append_only(&path, keyed()).unwrap_err();
        assert!(err.to_string().contains("unknown kind 9"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    #[test]
    fn damage_written_after_a_writer_opened_refuses_its_appends_and_is_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let writer = AuditLog::open_append_only(&path, keyed()).unwrap();
        append(&writer, "a");
        let mut frame = Vec::new();
        put_frame(&mut frame, 9, 2, b"{}").unwrap();
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&frame).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for _ in 0..2 {
            let err = writer.append(AuditEvent::new("tool", "b", AuditOutcome::Executed)).unwrap_err();
            assert!(matches!(&err, AuditError::Damaged { offset, .. } if *offset > 16), "{err}");
            assert!(err.to_string().contains("unknown kind 9"), "{err}");
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it was");
        }
        assert!(asides(dir.path()).is_empty());

        // A file cut back past a whole batch already read (by something other than this log) is refused too.
        let writer = AuditLog::open_append_only(dir.path().join("cut.log"), keyed()).unwrap();
        append(&writer, "a");
        append(&writer, "b");
        let cut = dir.path().join("cut.log");
        let whole = std::fs::read(&cut).unwrap();
        std::fs::OpenOptions::new().write(true).open(&cut).unwrap().set_len(whole.len() as u64 - 10).unwrap();
        let err = writer.append(AuditEvent::new("tool", "c", AuditOutcome::Executed)).unwrap_err();
        assert!(err.to_string().contains("ends before the last whole batch"), "{err}");
        assert_eq!(std::fs::read(&cut).unwrap(), whole[..whole.len() - 10], "left as it was");
    }

    /// The `tracing` events of a closure's thread: level and message.
    #[cfg(unix)]
    fn events_of(run: impl FnOnce()) -> Vec<String> {
        use tracing::{Event, Metadata, Subscriber, field, span};
        struct Events(Arc<std::sync::Mutex<Vec<String>>>);
        struct Message(String);
        impl field::Visit for Message {
            fn record_debug(&mut self, field: &field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        impl Subscriber for Events {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
                span::Id::from_u64(1)
            }
            fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
            fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
            fn event(&self, event: &Event<'_>) {
                let mut message = Message(String::new());
                event.record(&mut message);
                self.0.lock().unwrap().push(format!("{} {}", event.metadata().level(), message.0));
            }
            fn enter(&self, _: &span::Id) {}
            fn exit(&self, _: &span::Id) {}
        }
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        tracing::subscriber::with_default(Events(Arc::clone(&events)), run);
        events.lock().unwrap().clone()
    }

    /// A writer whose file its path no longer names goes on appending to the file it has open, where its chain
    /// is (a renamed file takes the records, and verifies), and warns once each time it finds it so.
    #[cfg(unix)]
    #[test]
    fn a_file_renamed_deleted_or_replaced_under_a_writer_keeps_its_records_and_is_warned_of() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let rotated = dir.path().join("audit.log.1");
        let warned = |events: &[String]| events.iter().filter(|e| e.contains("renamed, deleted or replaced")).count();
        let writer = AuditLog::open_append_only(&path, keyed()).unwrap();
        append(&writer, "a");

        // Rotated: renamed away. The records go on in the renamed file; one warning, not one per append.
        let events = events_of(|| {
            std::fs::rename(&path, &rotated).unwrap();
            assert_eq!((append(&writer, "b"), append(&writer, "c")), (2, 3));
        });
        assert_eq!(warned(&events), 1, "{events:?}");
        assert!(events.iter().any(|e| e.starts_with("WARN ")), "{events:?}");
        assert!(!path.exists(), "nothing was created at the path");
        assert_eq!(records(&rotated), 3);

        // Replaced: a new log started at the path by another writer. Each writer keeps its own chain.
        let events = events_of(|| {
            let second = AuditLog::open_append_only(&path, keyed()).unwrap();
            assert_eq!(append(&second, "x"), 1);
            assert_eq!(append(&writer, "d"), 4);
        });
        assert_eq!(warned(&events), 0, "still the same move: {events:?}");
        assert_eq!((records(&rotated), records(&path)), (4, 1));

        // Put back at its path: said once; moved again (deleted this time): warned again.
        let events = events_of(|| {
            std::fs::rename(&rotated, &path).unwrap();
            assert_eq!(append(&writer, "e"), 5);
            std::fs::remove_file(&path).unwrap();
            assert_eq!(append(&writer, "f"), 6);
        });
        assert!(events[0].contains("at its path again"), "{events:?}");
        assert_eq!(warned(&events), 1, "{events:?}");

        // A link that names the file is the file; one pointed elsewhere is not, and the records stay with the file.
        let target = dir.path().join("target.log");
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let linked = AuditLog::open_append_only(&link, keyed()).unwrap();
        let other = dir.path().join("other.log");
        let events = events_of(|| {
            assert_eq!(append(&linked, "g"), 1);
            std::fs::remove_file(&link).unwrap();
            drop(AuditLog::open_append_only(&other, keyed()).unwrap());
            std::os::unix::fs::symlink(&other, &link).unwrap();
            assert_eq!(append(&linked, "h"), 2);
        });
        assert_eq!(warned(&events), 1, "{events:?}");
        assert_eq!((records(&target), records(&other)), (2, 0));

        // Opened by a relative path, the path is asked for made absolute, so the check holds after the working
        // directory changes (changing it here would race the other tests).
        let relative = FileAuditStore::open(&path_relative_to_cwd(&dir.path().join("relative.log"))).unwrap();
        assert!(relative.named.is_absolute(), "{}", relative.named.display());
        assert_eq!(relative.named.canonicalize().unwrap(), dir.path().join("relative.log").canonicalize().unwrap());
    }

    /// `path` as a path relative to the working directory (`../..` up to the root, then down).
    #[cfg(unix)]
    fn path_relative_to_cwd(path: &Path) -> PathBuf {
        let cwd = std::env::current_dir().unwrap();
        let mut relative = PathBuf::new();
        for _ in cwd.components().skip(1) {
            relative.push("..");
        }
        relative.join(path.strip_prefix("/").unwrap())
    }

    /// A writer knows the grants spent in the file's records (in the file when it opened it, appended since by
    /// another writer, or by itself) and where: a spend at or after a given record is not "before" it. A
    /// read-only handle keeps none, a batch is taken in once it is whole, only an `approved` record naming a
    /// grant counts, and spends older than the memory's bound before the latest read are forgotten as it grows.
    #[test]
    fn a_writer_knows_the_grants_spent_in_records_it_read_and_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let clock = Arc::new(crate::ManualClock::new(Duration::from_secs(1_000)));
        let open = || AuditLog::open_append_only(&path, keyed()).unwrap().with_clock(Arc::clone(&clock));
        let grant = |n: u32| format!("{n:032x}");
        let spend = |log: &AuditLog, grant: &str| {
            let detail = format!("grant {grant} by alice");
            let event = AuditEvent::new("refund", "call_1", AuditOutcome::Approved).detail(Some(&detail));
            log.append(event).unwrap().seq
        };
        let first = open();
        append(&first, "a");
        assert_eq!(spend(&first, &grant(1)), 2);
        assert_eq!(
            first.closed_before(&grant(1), 3),
            Some(Closed::Spent { at: Duration::from_secs(1_000) }),
            "its own spends too"
        );
        assert_eq!(first.closed_before(&grant(1), 2), None, "not before the record itself");

        // Another writer reads the file's spends at open: before record 3, not before record 2 itself.
        clock.advance(Duration::from_secs(5));
        let second = open();
        assert_eq!(second.closed_before(&grant(1), 3), Some(Closed::Spent { at: Duration::from_secs(1_000) }));
        assert_eq!(second.closed_before(&grant(1), 2), None);
        assert_eq!(second.closed_before(&grant(2), 3), None);
        assert_eq!(second.closed_before("not a grant id", 3), None);
        // ...and the first takes in the second's before its own next append.
        assert_eq!(spend(&second, &grant(2)), 3);
        assert_eq!(append(&first, "b"), 4);
        assert_eq!(first.closed_before(&grant(2), 4), Some(Closed::Spent { at: Duration::from_secs(1_005) }));
        assert_eq!(first.closed_before(&grant(2), 3), None);
        // The first record of a grant's spend is the one kept.
        assert_eq!(spend(&second, &grant(1)), 5);
        let third = open();
        assert_eq!(third.closed_before(&grant(1), 100), Some(Closed::Spent { at: Duration::from_secs(1_000) }));
        assert_eq!(third.closed_before(&grant(1), 2), None);

        // Only an `approved` record naming a grant: not another outcome with that detail, not the outcome's
        // encoding in a name (escaped in the body), not an approval recorded without a grant.
        let detail = format!("grant {} by alice", grant(3));
        second.append(AuditEvent::new("refund", "call_1", AuditOutcome::Executed).detail(Some(&detail))).unwrap();
        let lookalike = r#""outcome":{"kind":"approved"}"#;
        second.append(AuditEvent::new(lookalike, lookalike, AuditOutcome::Executed).detail(Some(&detail))).unwrap();
        second.append(AuditEvent::new("refund", "call_1", AuditOutcome::Approved).detail(Some("by alice"))).unwrap();
        assert_eq!(append(&first, "c"), 9);
        assert_eq!(first.closed_before(&grant(3), 100), None);

        // A revocation an operator records: known to the writers from its record on, and kept over a spend
        // recorded after it (the first record of a grant's end is the one kept).
        let request = crate::ledger::RequestRecord {
            request_id: "r".repeat(32),
            key_id: "k1".to_owned(),
            tool: "refund".to_owned(),
            rule: "escalate".to_owned(),
            reason: "moves money".to_owned(),
            binding: "b".repeat(64),
            requested_at: Duration::from_secs(990),
            interrupt: serde_json::json!({"airlock_approval": {"call": {"thread_id": "t1", "tool_call_id": "call_9"}}}),
            caller: Some("mcp:alice".to_owned()),
        };
        let operator = open();
        assert_eq!(operator.append_revocation(&request, &grant(5), "bob").unwrap().seq, 10);
        assert_eq!(spend(&second, &grant(5)), 11);
        assert_eq!(append(&first, "d"), 12);
        let revoked = Some(Closed::Revoked { at: Duration::from_secs(1_005) });
        assert_eq!(first.closed_before(&grant(5), 11), revoked);
        assert_eq!(first.closed_before(&grant(5), 10), None);
        assert_eq!(second.closed_before(&grant(5), 12), revoked);
        let record = first.records(10, 1).unwrap().remove(0);
        assert_eq!(record.tool, "refund");
        assert_eq!(record.tool_call_id, "call_9");
        assert_eq!(record.thread_id.as_deref(), Some("t1"));
        assert_eq!(record.caller.as_deref(), Some("mcp:alice"));
        assert_eq!(record.outcome, AuditOutcome::Refused { refusal: RefusalKind::HumanDenied });
        assert_eq!(record.detail.as_deref(), Some(format!("grant {} revoked by bob", grant(5)).as_str()));
        // Not a revocation: a human's no without a grant, a spend's detail on a refusal, a revocation's detail
        // on another refusal or outcome; and a revocation of something that is not a grant id writes nothing.
        let human_denied = || AuditOutcome::Refused { refusal: RefusalKind::HumanDenied };
        let spend_detail = format!("grant {} by bob", grant(6));
        let revocation_detail = format!("grant {} revoked by bob", grant(6));
        for (outcome, detail) in [
            (human_denied(), "denied by bob"),
            (human_denied(), spend_detail.as_str()),
            (AuditOutcome::Refused { refusal: RefusalKind::Denied }, revocation_detail.as_str()),
            (AuditOutcome::Approved, revocation_detail.as_str()),
            (AuditOutcome::Executed, revocation_detail.as_str()),
        ] {
            operator.append(AuditEvent::new("refund", "call_9", outcome).detail(Some(detail))).unwrap();
        }
        for bad in ["", "not a grant", &format!("{:032X}", 0xab), &format!("{}0", grant(6)), &"é".repeat(16)] {
            let err = operator.append_revocation(&request, bad, "bob").expect_err(bad);
            assert!(matches!(err, AuditError::NotAGrant { .. }), "{err}");
        }
        assert_eq!(append(&first, "e"), 18, "five records, no revocation");
        assert_eq!(first.closed_before(&grant(6), 100), None);
        drop(operator);

        // A read-only handle keeps none.
        let reader = AuditLog::read_append_only(&path, keyed()).unwrap();
        assert_eq!(reader.closed_before(&grant(1), 100), None);

        // A batch is taken in once whole: half of one (another writer still writing it) names nothing yet.
        let before = std::fs::metadata(&path).unwrap().len();
        spend(&second, &grant(4));
        let bytes = std::fs::read(&path).unwrap();
        let batch = &bytes[before as usize..];
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(before).unwrap();
        let cut = batch.len() - 10;
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&batch[..cut]).unwrap();
        first.head().unwrap();
        assert_eq!(first.closed_before(&grant(4), 100), None, "its record is read, its batch not whole");
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&batch[cut..]).unwrap();
        first.head().unwrap();
        assert_eq!(first.closed_before(&grant(4), 100), Some(Closed::Spent { at: Duration::from_secs(1_005) }));

        // Bounded: spends older than the bound before the latest read go when the memory doubles.
        for n in 100..300 {
            spend(&second, &grant(n));
        }
        clock.advance(crate::approval::protocol::REMEMBER_AT_MOST + Duration::from_secs(1));
        for n in 300..400 {
            spend(&second, &grant(n));
        }
        drop((first, second, third));
        let store = FileAuditStore::open(&path).unwrap();
        let kept = store.lock().spends.as_ref().unwrap().len();
        assert!(kept < 300, "{kept} kept");
        assert_eq!(store.closed_before(&grant(100), u64::MAX), None, "an old spend forgotten");
        assert!(store.closed_before(&grant(399), u64::MAX).is_some(), "the latest kept");
    }
}
