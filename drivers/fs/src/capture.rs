//! Capture sessions: the file side of [`agentrun_core::Capture`].
//!
//! A [`CaptureSession`] owns `captures/<run_id>/`:
//!
//! * `lock`: held with an exclusive `flock` for the session's life; GC treats a directory
//!   whose lock it can take as left by a dead process and removes it;
//! * `s<i>` and `s<i>.idx`: the capture file and index temp file of declared stream `i`;
//! * `m` and `m.idx`: the manifest of named output, written at finish;
//! * `protect`: the digests being published, roots for any GC that runs while the lock is
//!   held;
//! * `reserve`: room allocated when the capture starts that becomes the record, so that a
//!   disk the output (or anything else) fills still has room for it (see `Reserve`).
//!
//! Every chunk is appended to its capture file **before** the core machine accepts it, so the
//! machine's digest, counts and index describe exactly the bytes on disk (a failed write is
//! cut back to the bytes written before it). The caller's thread writes; the machine's work on
//! a large chunk (SHA-256, line index, preview) runs on a hasher thread per stream, up to
//! [`PIPELINE_DEPTH`] pieces behind the writes. Reading the pipe and writing the file on one
//! core and hashing on another overlap instead of adding up: hashing every byte is the largest
//! cost of retaining output. Memory stays bounded: per stream at most [`PIPELINE_COPIES`]
//! bytes of copies wait for the hasher; index entries go to the index file as soon as a block
//! completes.
//!
//! A pipe can also be drained straight into a stream ([`CaptureSession::write_from_pipe`]):
//! the kernel moves its bytes into the capture file (`splice`), and the hasher reads them
//! where they lie, through a mapping of the file (see `mapped`), so they are copied once
//! instead of three times.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread;
use std::time::SystemTime;

use agentrun_core::capture::CaptureSummary;
use agentrun_core::digest::StreamingDigest;
use agentrun_core::index::{BlockIndexer, HEADER_LEN, IndexEntry};
use agentrun_core::process::RunInfo;
use agentrun_core::record::MAX_RECORD_BYTES;
use agentrun_core::stream::StreamIndex;
use agentrun_core::{
    Capture, CaptureCompletion, CaptureError, CaptureStatus, Digest, OutputChannel,
    OutputDeclaration, PreviewLimits, ResultRecord,
};

use crate::atomic::{self, Published, fsync_dir, publish_object, write_atomic};
use crate::error::{IoContext, IoError};
use crate::layout::{self, RECORD_SUFFIX};
use crate::lock::GcLock;
use crate::mapped::FileWindow;
use crate::reserve::*;
use crate::store::{Store, StoreError};
use rustix::fs::OFlags;

/// Chunks at least this large are hashed on the stream's hasher thread (see
/// `CaptureSession::write`); below it a thread hand-off costs more than the overlap saves, and
/// the chunk is accepted inline.
const PIPELINE_CHUNK: usize = 64 * 1024;

/// Largest piece handed to a hasher thread at once: bounds each copy kept per stream.
const PIPELINE_PIECE: usize = 1 << 20;

/// Pieces a stream may have written but not yet hashed. Deep enough that the hasher always has
/// work while the writing thread and the child share the other core (measured: 4 pieces cost
/// ~5 % more wall time per GiB than 16); the caller waits (backpressure) beyond it.
const PIPELINE_DEPTH: usize = 16;

/// Bytes of copied pieces a stream may have waiting for its hasher: the memory a stream's
/// pipeline holds. (A spliced piece waits in the page cache, not in memory of its own.)
const PIPELINE_COPIES: usize = 4 << 20;

/// Piece buffers a stream keeps for reuse.
const SPARE_PIECES: usize = 2;

/// A capture fault found while accepting bytes, possibly on a hasher thread: the kind and
/// message of the error, kept to report it again for every later chunk of the stream.
type StreamFault = (io::ErrorKind, String);

/// What the hasher threads share with the caller's thread: the core machine and each stream's
/// index file. Locked once per piece, never while a file is written.
#[derive(Debug)]
struct Accepting {
    capture: Capture,
    indexes: Vec<IndexFile>,
}

/// A stream's index temp file.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    file: File,
    /// Index entries appended so far (the next entry's block number).
    entries_written: u64,
    /// Set once writing the index failed: the index is rebuilt from the capture file at
    /// finish instead.
    broken: bool,
    /// The encoded entries of the piece being accepted (reused, so no allocation per piece).
    pending: Vec<u8>,
}

impl Accepting {
    /// `bytes` are on disk after the accepted ones: the machine takes them, and the index
    /// entries of every block they completed go to the index file. A failed index write is
    /// recorded in the machine and returned; the chunk itself stays accepted (it is on disk)
    /// and finish rebuilds the index from the capture file.
    fn accept(&mut self, stream: StreamIndex, bytes: &[u8]) -> Option<StreamFault> {
        self.capture.handle_chunk(stream, bytes);
        let index = &mut self.indexes[stream.get()];
        // One write for all the entries of the piece: a piece of megabytes completes dozens
        // of blocks, and a write call per 16-byte entry costs the hasher thread (the slowest
        // stage of the capture path) a few percent of its time.
        index.pending.clear();
        let mut entries = 0;
        while let Some(entry) = self.capture.poll_index_entry(stream) {
            if !index.broken {
                let block = index.entries_written + entries;
                index.pending.extend_from_slice(&entry.encode(block));
                entries += 1;
            } // else rebuilt at finish; keep draining so memory stays bounded
        }
        let mut fault = None;
        if entries > 0 {
            match index.file.write_all(&index.pending) {
                Ok(()) => index.entries_written += entries,
                Err(e) => {
                    // Some of the entries may be in the file: the index is rebuilt at finish.
                    index.broken = true;
                    fault = Some((e.kind(), format!("writing the line index failed: {e}")));
                }
            }
        }
        if let Some((_, message)) = &fault {
            self.capture.handle_capture_error(Some(stream), message);
        }
        fault
    }
}

/// Locks the shared part of a session. A hasher thread that panicked leaves the lock poisoned;
/// the machine is then checked against the capture files at finish (see `seal_stream`).
fn lock(accepting: &Mutex<Accepting>) -> MutexGuard<'_, Accepting> {
    accepting.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a hasher is handed: bytes already written to the capture file, as a copy, or as where
/// the file holds them (spliced there from a pipe).
#[derive(Debug)]
enum Piece {
    Copied(Vec<u8>),
    InFile { offset: u64, len: usize },
}

/// What a hasher hands back for a piece: its length, a copied piece's buffer for reuse, and
/// the fault accepting the piece found.
type Returned = (usize, Option<Vec<u8>>, Option<StreamFault>);

/// A stream's hasher thread: takes pieces already written to the capture file, in order, has
/// the core machine accept them, and hands each back with the fault accepting it found.
#[derive(Debug)]
struct Hasher {
    pieces: Option<mpsc::SyncSender<Piece>>,
    returned: mpsc::Receiver<Returned>,
    /// Pieces handed over and not yet handed back (at most `PIPELINE_DEPTH`).
    outstanding: usize,
    /// Bytes of the copied pieces among them (at most `PIPELINE_COPIES`, or one piece).
    copied: usize,
    /// Bytes of all of them: written, not yet accepted.
    pending: u64,
    thread: Option<thread::JoinHandle<()>>,
}

/// What a stream reports when its hasher thread is gone: the pieces it held were written but
/// never accepted, so finish cuts them off.
fn hasher_gone() -> io::Error {
    io::Error::other("the capture's hasher thread stopped")
}

impl Hasher {
    /// Starts the hasher of `stream`, whose capture file is `file` (read only where it holds
    /// spliced pieces: through a mapping if `map`, else copied out).
    fn spawn(
        accepting: Arc<Mutex<Accepting>>,
        stream: StreamIndex,
        file: File,
        map: bool,
    ) -> io::Result<Self> {
        let (pieces, to_hash) = mpsc::sync_channel::<Piece>(PIPELINE_DEPTH);
        let (done, returned) = mpsc::sync_channel(PIPELINE_DEPTH);
        let thread = thread::Builder::new()
            .name("agentrun-capture-hash".to_owned())
            .spawn(move || {
                let mut read_back = ReadBack {
                    file,
                    map,
                    window: None,
                    copy: Vec::new(),
                };
                // Once a piece could not be read, no later one is accepted either: the machine
                // must never skip bytes.
                let mut stopped = false;
                for piece in to_hash {
                    let returned = match piece {
                        Piece::Copied(buf) if stopped => (buf.len(), Some(buf), None),
                        Piece::InFile { len, .. } if stopped => (len, None, None),
                        Piece::Copied(buf) => {
                            let fault = lock(&accepting).accept(stream, &buf);
                            (buf.len(), Some(buf), fault)
                        }
                        Piece::InFile { offset, len } => {
                            match read_back.accept(&accepting, stream, offset, len) {
                                Ok(fault) => (len, None, fault),
                                Err(fault) => {
                                    stopped = true;
                                    let (_, message) = &fault;
                                    lock(&accepting)
                                        .capture
                                        .handle_capture_error(Some(stream), message);
                                    (len, None, Some(fault))
                                }
                            }
                        }
                    };
                    if done.send(returned).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            pieces: Some(pieces),
            returned,
            outstanding: 0,
            copied: 0,
            pending: 0,
            thread: Some(thread),
        })
    }

    /// Hands a written piece over; `Err` if the thread is gone.
    fn send(&mut self, piece: Piece) -> io::Result<()> {
        let (copied, len) = match &piece {
            Piece::Copied(buf) => (buf.len(), buf.len()),
            Piece::InFile { len, .. } => (0, *len),
        };
        let sent = self.pieces.as_ref().and_then(|p| p.send(piece).ok());
        sent.ok_or_else(hasher_gone)?;
        self.outstanding += 1;
        self.copied += copied;
        self.pending += len as u64;
        Ok(())
    }

    /// Whether the pipeline is full for a piece of `copy` bytes copied (0 for a spliced one).
    fn full(&self, copy: usize) -> bool {
        self.outstanding >= PIPELINE_DEPTH
            || (self.outstanding > 0 && self.copied + copy > PIPELINE_COPIES)
    }

    /// Waits for the oldest piece handed over: its buffer (if copied) and the fault accepting
    /// it found. `Err` if the thread is gone.
    fn wait(&mut self) -> io::Result<(Option<Vec<u8>>, Option<StreamFault>)> {
        let returned = self.returned.recv().map_err(|_| hasher_gone());
        match &returned {
            Ok((len, buf, _)) => {
                self.outstanding -= 1;
                self.copied -= buf.as_ref().map_or(0, Vec::len);
                self.pending -= *len as u64;
            }
            Err(_) => (self.outstanding, self.copied, self.pending) = (0, 0, 0),
        }
        returned.map(|(_, buf, fault)| (buf, fault))
    }
}

/// A hasher's view of its capture file: where it reads spliced pieces back.
struct ReadBack {
    file: File,
    /// Whether the file may be mapped (see `mapped::maps_safely`); else bytes are copied out.
    map: bool,
    /// The mapped window last read, kept for the next piece (pieces arrive in file order).
    window: Option<FileWindow>,
    /// Where bytes are copied out when the file is not mapped.
    copy: Vec<u8>,
}

impl ReadBack {
    /// Has the machine accept the `len` bytes the capture file holds at `offset`, read through
    /// a mapping (or, if mapping fails, copied out). Returns the fault accepting them found;
    /// `Err` if they could not be read, and then the bytes from the failure on are not
    /// accepted.
    // Reading a mapping is `unsafe`; the safety argument is at the read and in `mapped`.
    #[allow(unsafe_code)]
    fn accept(
        &mut self,
        accepting: &Mutex<Accepting>,
        stream: StreamIndex,
        mut offset: u64,
        mut len: usize,
    ) -> Result<Option<StreamFault>, StreamFault> {
        let mut fault = None;
        while len > 0 {
            if self.map && !self.window.as_ref().is_some_and(|w| w.holds(offset)) {
                // The old window goes first, so at most one is mapped.
                self.window = None;
                self.window = FileWindow::map(&self.file, offset).ok();
            }
            let bytes: &[u8] = match &self.window {
                // SAFETY: the session wrote these bytes (the splice returned their count)
                // before handing them over, and never cuts the file below them while this
                // thread runs (see `mapped`).
                Some(window) => unsafe { window.bytes(offset, len) },
                None => {
                    self.copy.resize(len.min(PIPELINE_PIECE), 0);
                    if let Err(e) = self.file.read_exact_at(&mut self.copy, offset) {
                        let message = format!("reading back the capture file failed: {e}");
                        return Err((e.kind(), message));
                    }
                    &self.copy
                }
            };
            fault = fault.or(lock(accepting).accept(stream, bytes));
            offset += bytes.len() as u64;
            len -= bytes.len();
        }
        Ok(fault)
    }
}

impl Drop for Hasher {
    fn drop(&mut self) {
        drop(self.pieces.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Dirty capture bytes after which write-back to disk is started (see `start_writeback`).
const WRITEBACK_STEP: u64 = 16 << 20;

/// Starts the kernel's write-back of the capture file up to what is accepted, in steps, so
/// the `fsync` before publication finds little left to write instead of the whole output.
/// `DONTNEED` starts asynchronous write-back of dirty pages (and drops pages already clean);
/// it never blocks on the disk. Best effort: a failure only makes the final `fsync` longer.
/// Bytes still waiting for the hasher are left alone: dropped from the page cache, they would
/// have to be read back from the disk.
fn start_writeback(files: &mut StreamFiles) {
    let accepted = files.written - files.hasher.as_ref().map_or(0, |h| h.pending);
    let pending = accepted.saturating_sub(files.writeback_started);
    if pending < WRITEBACK_STEP {
        return;
    }
    let _ = rustix::fs::fadvise(
        &files.data,
        files.writeback_started,
        std::num::NonZeroU64::new(pending),
        rustix::fs::Advice::DontNeed,
    );
    files.writeback_started = accepted;
}

/// How many fresh run ids to try when a capture directory name is already taken.
const RUN_ID_ATTEMPTS: usize = 16;

/// Why a chunk was not captured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureWriteError {
    /// The chunk does not fit the declaration (undeclared stream, named chunk on single output,
    /// …). Nothing was written.
    #[error("chunk rejected: {0}")]
    Rejected(#[from] CaptureError),
    /// Writing the capture file failed. The fault is recorded, so the record will be marked
    /// incomplete; the stream accepts no further chunks (they get this error too), and what
    /// was accepted before is still published at finish.
    #[error("capturing stream {stream} failed: {source}")]
    Io {
        /// The stream (`output` for single output).
        stream: String,
        /// The write error.
        source: io::Error,
    },
}

impl Store {
    /// Starts capturing one tool invocation's output under a fresh run id.
    ///
    /// Creates `captures/<run_id>/` with its lock held and one capture file per declared
    /// channel. Invalid limits are refused before anything is created.
    pub fn begin_capture(
        &self,
        declaration: OutputDeclaration,
        limits: PreviewLimits,
    ) -> Result<CaptureSession, StoreError> {
        // Validated before anything is created; made again below if the room is short.
        let capture = Capture::new(declaration.clone(), limits)?;
        // Shared GC lock while the directory exists without its lock taken: a GC in that
        // window would take it for a crashed run's leftovers.
        let _gc = GcLock::shared(&self.layout)?;
        let (run_id, path) = self.create_capture_dir()?;
        crate::fault::point("after creating a capture directory, before locking it");
        let lock_path = path.join("lock");
        let lock = layout::new_private_file()
            .open(&lock_path)
            .and_then(|f| f.lock().map(|()| f))
            .at("create and lock", &lock_path);
        let dir = match lock {
            Ok(lock) => CaptureDir {
                path,
                _lock: lock,
                keep: false,
            },
            Err(e) => {
                let _ = fs::remove_dir_all(&path);
                return Err(e.into());
            }
        };
        // The stream files first (their index headers take a block each), then the reserve,
        // which may take all the room that is left, then the best-effort room past the ends
        // of the files publication writes.
        let mut streams = Vec::new();
        let mut indexes = Vec::new();
        for ix in capture.declaration().indexes() {
            let label = label(capture.declaration(), ix);
            let (data, index) = StreamFiles::create(&dir.path, ix.get(), label).map_err(|e| {
                if is_no_space(&e.source) {
                    // Not even an index header fits: the run is refused as for its reserve.
                    StoreError::NoSpace {
                        path: self.layout.root().to_owned(),
                        needed: MIN_RESERVE,
                        source: e.source,
                    }
                } else {
                    e.into()
                }
            })?;
            streams.push(data);
            indexes.push(index);
        }
        let (reserve, shrunk) = take_reserve(&dir.path, streams.len(), limits)?;
        // Stream numbers and labels depend only on the declaration, so the files created
        // above serve a capture made again with smaller budgets.
        let capture = match shrunk {
            None => capture,
            Some((limits, display)) => Capture::with_display_bound(declaration, limits, display)?,
        };
        for name in ["m", "m.idx", "protect"] {
            preallocate(&dir.path.join(name), MANIFEST_ROOM)?;
        }
        Ok(CaptureSession {
            store: self.clone(),
            run_id,
            accepting: Arc::new(Mutex::new(Accepting { capture, indexes })),
            checked: Vec::new(),
            streams,
            run: None,
            keeps: Vec::new(),
            protected: HashSet::new(),
            reserve: Some(reserve),
            dir,
        })
    }

    /// Creates `captures/<run_id>` exclusively under a fresh run id.
    fn create_capture_dir(&self) -> Result<(String, PathBuf), StoreError> {
        let mut last = None;
        for _ in 0..RUN_ID_ATTEMPTS {
            let run_id = layout::new_run_id();
            let path = self.layout.capture(&run_id);
            match fs::DirBuilder::new().mode(layout::DIR_MODE).create(&path) {
                Ok(()) => return Ok((run_id, path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(IoError::at("create directory", &path, e).into()),
            }
        }
        let e = last.unwrap_or_else(|| io::Error::other("no free run id"));
        Err(IoError::at("find a free run id in", &self.layout.captures(), e).into())
    }
}

fn label(declaration: &OutputDeclaration, ix: StreamIndex) -> String {
    declaration
        .name(ix)
        .map_or_else(|| "output".to_owned(), |n| n.to_string())
}

/// The capture directory; removed (best effort) when dropped, which also releases its lock.
/// Whatever is left behind by a failed removal is cleaned by GC once the lock is free.
#[derive(Debug)]
struct CaptureDir {
    path: PathBuf,
    _lock: File,
    /// Left in place when dropped: publication failed on a full disk, and what the directory
    /// holds is not taken back (GC removes it once its lock is free).
    keep: bool,
}

impl Drop for CaptureDir {
    fn drop(&mut self) {
        // Removed while the lock is still held (the field drops after this), so a concurrent
        // GC never sees a lock-free directory that is still in use.
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// One stream's capture file, as the caller's thread writes it.
#[derive(Debug)]
struct StreamFiles {
    label: String,
    data_path: PathBuf,
    data: File,
    /// Bytes written to the capture file (accepted, or waiting in the hasher).
    written: u64,
    /// Capture-file bytes already handed to the kernel's write-back (see `start_writeback`).
    writeback_started: u64,
    /// The hasher thread, started with the first large chunk.
    hasher: Option<Hasher>,
    /// Piece buffers handed back by the hasher, to reuse.
    spare: Vec<Vec<u8>>,
    /// Whether pipes are spliced into the capture file; off once a splice failed (the copy
    /// path takes over and tells a pipe error from a capture one).
    splice: bool,
    /// The buffer of `write_from_pipe`'s copy path.
    scratch: Vec<u8>,
    /// The first fault, once the stream failed.
    failed: Option<StreamFault>,
}

impl StreamFiles {
    fn create(dir: &Path, i: usize, label: String) -> Result<(Self, IndexFile), IoError> {
        let data_path = dir.join(format!("s{i}"));
        let index_path = dir.join(format!("s{i}.idx"));
        let data = layout::new_private_file()
            .open(&data_path)
            .at("create", &data_path)?;
        // The first block of output is allocated now, before the record's reserve takes what
        // is left of a nearly full disk: a run's first bytes always fit. Any non-empty stream
        // fills that block itself, so nothing is wasted. Best effort, like `preallocate`.
        let _ = rustix::fs::fallocate(
            &data,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            FIRST_DATA_ROOM,
        );
        let mut index = layout::new_private_file()
            .open(&index_path)
            .at("create", &index_path)?;
        // Room for the header, which is only known at finish; entries follow it.
        index
            .write_all(&[0u8; HEADER_LEN])
            .at("write", &index_path)?;
        // Room past the end for the last entries, which are written at finish, perhaps on a
        // full disk. Best effort, like `preallocate`.
        let _ = rustix::fs::fallocate(
            &index,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            MANIFEST_ROOM,
        );
        let files = Self {
            label,
            data_path,
            data,
            written: 0,
            writeback_started: 0,
            hasher: None,
            spare: Vec::new(),
            splice: true,
            scratch: Vec::new(),
            failed: None,
        };
        let index = IndexFile {
            path: index_path,
            file: index,
            entries_written: 0,
            broken: false,
            pending: Vec::new(),
        };
        Ok((files, index))
    }

    /// The error for a chunk sent after the stream failed.
    fn failed_error(&self) -> Option<CaptureWriteError> {
        self.failed
            .as_ref()
            .map(|(kind, msg)| CaptureWriteError::Io {
                stream: self.label.clone(),
                source: io::Error::new(
                    *kind,
                    format!("the stream is no longer captured after an earlier write error: {msg}"),
                ),
            })
    }

    /// Pieces written and not yet accepted.
    fn outstanding(&self) -> usize {
        self.hasher.as_ref().map_or(0, |h| h.outstanding)
    }

    /// Whether the hasher's pipeline has no room for a piece of `copy` bytes copied.
    fn pipeline_full(&self, copy: usize) -> bool {
        self.hasher.as_ref().is_some_and(|h| h.full(copy))
    }
}

/// One tool invocation's live capture. Create with [`Store::begin_capture`], feed with
/// [`write`](Self::write) / [`write_channel`](Self::write_channel) and
/// [`display`](Self::display), end with [`finish`](Self::finish).
///
/// Dropping a session without finishing it removes its capture directory: nothing is
/// published and no record is written.
#[derive(Debug)]
#[must_use = "dropping a capture session discards what it captured; call finish"]
pub struct CaptureSession {
    store: Store,
    run_id: String,
    accepting: Arc<Mutex<Accepting>>,
    /// Stream indexes already checked against the machine, so a write checks without taking
    /// the lock a hasher may hold. Only indexes of this session are added (one per stream).
    checked: Vec<StreamIndex>,
    streams: Vec<StreamFiles>,
    run: Option<RunInfo>,
    /// Artifacts the record keeps besides the output ([`ResultRecord::keeps`]).
    keeps: Vec<Digest>,
    /// The digests already in this capture's `protect` file, so a digest is written (and
    /// synced) once however often it is protected.
    protected: HashSet<Digest>,
    /// The room set aside for publication; freed when it starts.
    reserve: Option<Reserve>,
    // Last, so the directory is removed after the files in it are closed (and the hasher
    // threads, which the streams join, have stopped).
    dir: CaptureDir,
}

impl CaptureSession {
    /// Describes the process run this capture belongs to; the record will carry it
    /// ([`ResultRecord::run`]). A command longer than
    /// [`MAX_COMMAND_BYTES`](agentrun_core::process::MAX_COMMAND_BYTES) is refused
    /// ([`StoreError::CommandTooLong`]), and the record then describes no run.
    pub fn describe_run(&mut self, run: RunInfo) -> Result<(), StoreError> {
        let bytes = agentrun_core::process::command_bytes(&run.command);
        if bytes > agentrun_core::process::MAX_COMMAND_BYTES {
            return Err(StoreError::CommandTooLong { bytes });
        }
        self.run = Some(run);
        Ok(())
    }

    /// Sets aside room for `text_bytes` more bytes of text in the record, beyond the previews
    /// and display [`Store::begin_capture`] already made room for: the command that
    /// [`describe_run`](Self::describe_run) will add at the end, say. Call it before the run
    /// starts: on a file system without that room it is [`StoreError::NoSpace`], and nothing
    /// has run yet. The first few KiB come out of room every reserve already holds, so a
    /// short command never needs more of the disk.
    pub fn reserve_record_room(&mut self, text_bytes: usize) -> Result<(), StoreError> {
        if let Some(reserve) = self.reserve.as_mut() {
            let wanted = text_bytes as u64 * COMMAND_JSON_GROWTH;
            let from_room = wanted.min(reserve.command_room);
            let len = reserve.len + (wanted - from_room);
            reserve.grow_to(len)?;
            reserve.command_room -= from_room;
        }
        Ok(())
    }

    /// Grows the reserve by `bytes`, best effort (see [`minimal_record`] for what a record
    /// that does not fit keeps).
    fn grow_reserve(&mut self, bytes: u64) {
        if let Some(reserve) = self.reserve.as_mut() {
            let _ = reserve.grow_to(reserve.len + bytes);
        }
    }

    /// Makes the record keep these artifacts too (GC roots them with the output). The caller
    /// must have them protected by this session ([`protect_more`](Self::protect_more)) or
    /// published through it ([`finish_kept_by`](Self::finish_kept_by)).
    pub(crate) fn keep(&mut self, digests: impl IntoIterator<Item = Digest>) {
        // A set, not a search of the list per digest: a record may keep tens of thousands.
        let mut seen: HashSet<Digest> = self.keeps.iter().copied().collect();
        let before = self.keeps.len();
        for digest in digests {
            if seen.insert(digest) {
                self.keeps.push(digest);
            }
        }
        // Room for the record's list of them. Best effort: kept artifacts are part of the
        // minimal record, and a record that then finds the disk full fails publication
        // without taking any object back.
        let added = (self.keeps.len() - before) as u64 * KEEP_JSON_BYTES;
        self.grow_reserve(added);
    }

    /// Adds digests to this live capture's protection: no GC removes them while the session
    /// lives, so a record written by it may reference them. All of them in one write and one
    /// sync: protect a whole batch at once rather than one digest per call.
    pub(crate) fn protect_more(&mut self, digests: &[Digest]) -> Result<(), StoreError> {
        let _gc = GcLock::shared(&self.store.layout)?;
        self.protect_new(digests)
    }

    /// [`protect_more`](Self::protect_more) with the GC lock already held: appends the digests
    /// not protected yet. A GC reads `protect` under the exclusive lock, so it sees all of
    /// them or none, and none of them can be removed after this returns.
    fn protect_new(&mut self, digests: &[Digest]) -> Result<(), StoreError> {
        let mut new = Vec::new();
        let mut seen = HashSet::new();
        for digest in digests {
            if !self.protected.contains(digest) && seen.insert(*digest) {
                new.push(*digest);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        protect(&self.dir.path, &new)?;
        self.protected.extend(new);
        Ok(())
    }

    /// Ends the capture like [`finish`](Self::finish) (streamed, succeeded) but writes no
    /// record: what it publishes is protected by `keeper`, a live session whose record will
    /// keep it (a digest the keeper protects already costs no further write). Returns the
    /// digest of the output (single output only).
    pub(crate) fn finish_kept_by(self, keeper: &mut CaptureSession) -> Result<Digest, StoreError> {
        let record = self.finalize(None, CaptureStatus::Succeeded, Some(keeper))?;
        Ok(record.output_uri().digest)
    }

    /// The run id; the record is persisted as `records/<run_id>.json`.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The capture directory (`captures/<run_id>`).
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// The shared part: the core machine and the index files.
    fn accepting(&self) -> MutexGuard<'_, Accepting> {
        lock(&self.accepting)
    }

    /// The stream a chunk for `channel` goes to. A channel that does not fit the declaration is
    /// [`CaptureWriteError::Rejected`]; a stream that already failed gives its
    /// [`CaptureWriteError::Io`] again.
    pub fn resolve(&self, channel: &OutputChannel) -> Result<StreamIndex, CaptureWriteError> {
        let resolved = self.accepting().capture.declaration().resolve(channel);
        let ix = resolved.map_err(CaptureError::from)?;
        match self.streams[ix.get()].failed_error() {
            Some(e) => Err(e),
            None => Ok(ix),
        }
    }

    /// Refuses an index that is not one of this session's streams.
    fn check_stream(&mut self, stream: StreamIndex) -> Result<(), CaptureError> {
        if !self.checked.contains(&stream) {
            self.accepting().capture.check_stream(stream)?;
            self.checked.push(stream);
        }
        Ok(())
    }

    /// Appends `bytes` to stream `stream`: capture file first, then the core machine, then the
    /// index entries of every block the chunk completed. Blocks until the bytes are written
    /// (backpressure, never dropping). A large chunk is accepted by the stream's hasher thread
    /// and may still be in it when this returns; a fault found there (the line index could
    /// not be written) is reported by a later call on the stream. Either way a fault is
    /// recorded (the record says incomplete) and [`finish`](Self::finish) publishes only bytes
    /// on disk that the machine accepted.
    ///
    /// A `stream` that is not one of this session's (an index from another session) is
    /// [`CaptureWriteError::Rejected`] with [`CaptureError::ForeignStream`], and nothing is
    /// written.
    pub fn write(&mut self, stream: StreamIndex, bytes: &[u8]) -> Result<(), CaptureWriteError> {
        self.check_stream(stream)?;
        if let Some(e) = self.streams[stream.get()].failed_error() {
            return Err(e);
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if bytes.len() < PIPELINE_CHUNK {
            // After the pieces before it, so the machine takes the bytes in order.
            self.settle(stream)?;
            self.write_file(stream, bytes)?;
            let fault = self.accepting().accept(stream, bytes);
            return self.returned_fault(stream, fault);
        }
        for piece in bytes.chunks(PIPELINE_PIECE) {
            let buf = self.free_piece(stream, piece.len())?;
            self.write_file(stream, piece)?;
            self.hand_over(stream, piece, buf)?;
        }
        Ok(())
    }

    /// Appends `bytes` to the capture file. A failed write may have appended part of them, so
    /// the file is cut back to the bytes written before (finish checks this again), and the
    /// stream fails.
    fn write_file(&mut self, stream: StreamIndex, bytes: &[u8]) -> Result<(), CaptureWriteError> {
        let files = &mut self.streams[stream.get()];
        if let Err(e) = files.data.write_all(bytes) {
            let _ = files.data.set_len(files.written);
            return Err(self.fail(stream, "writing the capture file", e));
        }
        files.written += bytes.len() as u64;
        start_writeback(files);
        Ok(())
    }

    /// Moves what `pipe` holds, at most `max` bytes, into `stream`: what a `read` of the pipe
    /// and then [`write`](Self::write) would do, but where the kernel allows it the bytes go
    /// from the pipe into the capture file without a copy through user space (`splice`), and
    /// the stream's hasher reads them there.
    ///
    /// Returns what `read` would: the bytes taken (at most 1 MiB at once), `0` at end of file,
    /// [`io::ErrorKind::WouldBlock`] when a non-blocking pipe is empty, or the pipe's error. A
    /// fault on the capture side is recorded as by `write` (the stream fails, the record says
    /// incomplete) and the bytes are still taken from the pipe, so the writer at its other end
    /// never blocks on a stream no longer captured. A `stream` of another session is an
    /// [`io::ErrorKind::InvalidInput`] error carrying the [`CaptureWriteError`], and nothing
    /// is taken.
    pub fn write_from_pipe(
        &mut self,
        stream: StreamIndex,
        pipe: BorrowedFd<'_>,
        max: usize,
    ) -> io::Result<usize> {
        self.check_stream(stream)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, CaptureWriteError::from(e)))?;
        let max = max.clamp(1, PIPELINE_PIECE);
        if let Some(taken) = self.splice_from(stream, pipe, max) {
            return taken;
        }
        // The copy path: it tells a pipe error from a capture one, and drains a failed stream.
        let mut buf = std::mem::take(&mut self.streams[stream.get()].scratch);
        buf.resize(max, 0);
        let read = rustix::io::read(pipe, &mut buf[..]).map_err(io::Error::from);
        if let Ok(n @ 1..) = read {
            // A capture fault is recorded by `write`; the bytes are taken either way.
            let _ = self.write(stream, &buf[..n]);
        }
        self.streams[stream.get()].scratch = buf;
        read
    }

    /// The splice path of [`write_from_pipe`](Self::write_from_pipe): `Some` with its result,
    /// or `None` to take the copy path (the stream failed, its hasher could not start, or a
    /// splice failed: the kernel cannot splice into this file system, or the pipe or the file
    /// has an error that the copy path will tell apart).
    fn splice_from(
        &mut self,
        stream: StreamIndex,
        pipe: BorrowedFd<'_>,
        max: usize,
    ) -> Option<io::Result<usize>> {
        let files = &self.streams[stream.get()];
        if !files.splice || files.failed.is_some() {
            return None;
        }
        // A place in the pipeline first, so the hasher never falls further behind.
        if files.pipeline_full(0) && self.take_returned(stream).is_err() {
            return None;
        }
        if self.start_hasher(stream).is_err() {
            self.streams[stream.get()].splice = false;
            return None;
        }
        let files = &mut self.streams[stream.get()];
        let offset = files.written;
        // Non-blocking only if the pipe is: a blocking pipe waits, as `read` would.
        let nonblocking = rustix::fs::fcntl_getfl(pipe).is_ok_and(|f| f.contains(OFlags::NONBLOCK));
        let flags = if nonblocking {
            rustix::pipe::SpliceFlags::NONBLOCK
        } else {
            rustix::pipe::SpliceFlags::empty()
        };
        // No offsets: the bytes go where the file position is, after every byte written, and
        // the position moves past them, as for `write`.
        match rustix::pipe::splice(pipe, None, &files.data, None, max, flags) {
            Ok(0) => Some(Ok(0)),
            Ok(len) => {
                files.written += len as u64;
                start_writeback(files);
                // A hasher that is gone fails the stream; the bytes were taken all the same.
                let _ = self.send_piece(stream, Piece::InFile { offset, len });
                Some(Ok(len))
            }
            Err(rustix::io::Errno::AGAIN) => Some(Err(io::ErrorKind::WouldBlock.into())),
            Err(rustix::io::Errno::INTR) => Some(Err(io::ErrorKind::Interrupted.into())),
            Err(_) => {
                files.splice = false;
                None
            }
        }
    }

    /// A buffer for the next piece, of `len` bytes, once the pipeline has room for it
    /// (waiting for the hasher otherwise).
    fn free_piece(
        &mut self,
        stream: StreamIndex,
        len: usize,
    ) -> Result<Vec<u8>, CaptureWriteError> {
        while self.streams[stream.get()].pipeline_full(len) {
            self.take_returned(stream)?;
        }
        Ok(self.streams[stream.get()].spare.pop().unwrap_or_default())
    }

    /// Hands `piece`, already on disk, to the stream's hasher (copied into `buf`), starting the
    /// thread if needed. Without a thread to be had the piece is accepted here instead.
    fn hand_over(
        &mut self,
        stream: StreamIndex,
        piece: &[u8],
        mut buf: Vec<u8>,
    ) -> Result<(), CaptureWriteError> {
        if self.start_hasher(stream).is_err() {
            // No pieces are outstanding without a hasher: the order holds.
            let fault = self.accepting().accept(stream, piece);
            return self.returned_fault(stream, fault);
        }
        buf.clear();
        buf.extend_from_slice(piece);
        self.send_piece(stream, Piece::Copied(buf))
    }

    /// Starts the stream's hasher thread if it is not running.
    fn start_hasher(&mut self, stream: StreamIndex) -> io::Result<()> {
        let files = &mut self.streams[stream.get()];
        if files.hasher.is_none() {
            let file = files.data.try_clone()?;
            let map = crate::mapped::maps_safely(&file);
            let accepting = Arc::clone(&self.accepting);
            files.hasher = Some(Hasher::spawn(accepting, stream, file, map)?);
        }
        Ok(())
    }

    /// Hands a piece already on disk to the running hasher; a hasher that is gone fails the
    /// stream.
    fn send_piece(&mut self, stream: StreamIndex, piece: Piece) -> Result<(), CaptureWriteError> {
        let files = &mut self.streams[stream.get()];
        let sent = files
            .hasher
            .as_mut()
            .map_or_else(|| Err(hasher_gone()), |h| h.send(piece));
        if let Err(e) = sent {
            files.hasher = None;
            return Err(self.fail(stream, "hashing the capture file", e));
        }
        Ok(())
    }

    /// Waits for the oldest piece in the stream's hasher and keeps its buffer for reuse.
    fn take_returned(&mut self, stream: StreamIndex) -> Result<(), CaptureWriteError> {
        let files = &mut self.streams[stream.get()];
        let Some(hasher) = files.hasher.as_mut() else {
            return Ok(());
        };
        match hasher.wait() {
            Ok((piece, fault)) => {
                if let Some(buf) = piece.filter(|_| files.spare.len() < SPARE_PIECES) {
                    files.spare.push(buf);
                }
                self.returned_fault(stream, fault)
            }
            Err(e) => {
                // Dropping the hasher joins its (stopped) thread.
                files.hasher = None;
                Err(self.fail(stream, "hashing the capture file", e))
            }
        }
    }

    /// Waits until every piece written to `stream` is accepted, so the machine describes every
    /// byte written. Reports the stream's first new fault.
    fn settle(&mut self, stream: StreamIndex) -> Result<(), CaptureWriteError> {
        let mut settled = Ok(());
        while self.streams[stream.get()].outstanding() > 0 {
            if let Err(e) = self.take_returned(stream) {
                settled = settled.and(Err(e));
            }
        }
        settled
    }

    /// A fault found while accepting (already recorded in the machine) ends the stream.
    fn returned_fault(
        &mut self,
        stream: StreamIndex,
        fault: Option<StreamFault>,
    ) -> Result<(), CaptureWriteError> {
        let Some((kind, message)) = fault else {
            return Ok(());
        };
        let files = &mut self.streams[stream.get()];
        files.failed.get_or_insert_with(|| (kind, message.clone()));
        Err(CaptureWriteError::Io {
            stream: files.label.clone(),
            source: io::Error::new(kind, message),
        })
    }

    /// Records a capture fault in the machine and in the stream's state.
    fn fail(&mut self, stream: StreamIndex, what: &str, e: io::Error) -> CaptureWriteError {
        let message = format!("{what} failed: {e}");
        self.accepting()
            .capture
            .handle_capture_error(Some(stream), &message);
        let files = &mut self.streams[stream.get()];
        files.failed.get_or_insert_with(|| (e.kind(), message));
        CaptureWriteError::Io {
            stream: files.label.clone(),
            source: e,
        }
    }

    /// Records a capture fault the caller found outside this session (output it knows it
    /// could not capture, a child whose end is unknown): the record is marked incomplete and
    /// carries `message` (cut to [`agentrun_core::capture::MAX_FAULT_BYTES`]). A fault on a
    /// stream also ends that stream's capture, after what was already written to it is
    /// settled (kept and published). A `stream` of another session is rejected like in
    /// [`write`](Self::write), and nothing is recorded.
    pub fn record_fault(
        &mut self,
        stream: Option<StreamIndex>,
        message: &str,
    ) -> Result<(), CaptureWriteError> {
        if let Some(ix) = stream {
            self.check_stream(ix)?;
            // The pieces written are accepted (or their fault recorded) before the stream
            // stops accepting bytes.
            let _ = self.settle(ix);
            let files = &mut self.streams[ix.get()];
            files
                .failed
                .get_or_insert_with(|| (io::ErrorKind::Other, message.to_owned()));
        }
        self.accepting()
            .capture
            .handle_capture_error(stream, message);
        Ok(())
    }

    /// [`resolve`](Self::resolve) then [`write`](Self::write).
    pub fn write_channel(
        &mut self,
        channel: &OutputChannel,
        bytes: &[u8],
    ) -> Result<(), CaptureWriteError> {
        let ix = self.resolve(channel)?;
        self.write(ix, bytes)
    }

    /// Appends text to the live display (never to a stream).
    pub fn display(&mut self, text: &str) {
        self.accepting().capture.handle_display(text);
    }

    /// Ends the capture: finalizes every stream, publishes the artifacts (and the manifest of
    /// named output), persists the record, then removes the capture directory.
    ///
    /// A [`CaptureCompletion::Full`] after streamed chunks is refused with
    /// [`StoreError::Capture`] (mixed completion modes). Capture faults do not fail `finish`:
    /// the record is marked incomplete and the accepted bytes are published.
    pub fn finish(mut self, completion: CaptureCompletion) -> Result<ResultRecord, StoreError> {
        let display_error = |display: &Option<String>| {
            display
                .as_deref()
                .and_then(|d| Capture::check_final_display(d).err())
        };
        let (display, status) = match completion {
            CaptureCompletion::Streamed { display, status } => (display, status),
            CaptureCompletion::Full {
                display,
                status,
                outputs,
            } => {
                let begun = self.accepting().capture.begin_full(outputs);
                match begun {
                    Ok(feeds) => {
                        for (ix, bytes) in feeds {
                            // A write fault is recorded in the machine (the record will say
                            // incomplete); the other outputs are still captured.
                            let _ = self.write(ix, &bytes);
                        }
                        (display, status)
                    }
                    Err(error) => {
                        let fits = display_error(&display).is_none();
                        let display = display.filter(|_| fits);
                        return self.reject_completion(error, display);
                    }
                }
            }
        };
        if let Some(error) = display_error(&display) {
            // Refused like a completion that does not fit, after the outputs: what was
            // streamed, or given in full, is kept.
            return self.reject_completion(error, None);
        }
        self.finalize(display, status, None)
    }

    /// Refuses a completion, but keeps what was streamed before it: as a failed, incomplete
    /// run (with `display`, else the live display), whose run id the error names.
    fn reject_completion(
        self,
        error: CaptureError,
        display: Option<String>,
    ) -> Result<ResultRecord, StoreError> {
        self.accepting()
            .capture
            .handle_capture_error(None, &error.to_string());
        let run_id = self.run_id.clone();
        self.finalize(display, CaptureStatus::Failed, None)?;
        Err(StoreError::CompletionRejected { error, run_id })
    }

    /// Publishes the output and writes the record, or with `keeper` (a live capture whose
    /// record will keep the output) publishes under the keeper's protection and writes no
    /// record.
    fn finalize(
        mut self,
        display: Option<String>,
        status: CaptureStatus,
        keeper: Option<&mut CaptureSession>,
    ) -> Result<ResultRecord, StoreError> {
        // The pieces still in the hashers: accepted, or their fault recorded. Then the threads
        // stop, and the machine is this thread's alone.
        let all: Vec<StreamIndex> = self.accepting().capture.declaration().indexes().collect();
        for ix in all {
            let _ = self.settle(ix);
            self.streams[ix.get()].hasher = None;
        }
        // A final display is text the reserve did not count yet: room for it, best effort (a
        // record that then does not fit is written without it, see `minimal_record`).
        if let Some(text) = &display {
            self.grow_reserve(text.len() as u64 * JSON_GROWTH);
        }
        let CaptureSession {
            store,
            run_id,
            accepting,
            checked: _,
            mut streams,
            run: run_info,
            keeps,
            protected: _,
            mut reserve,
            mut dir,
        } = self;
        // A hasher that panicked may have left the machine half way through a piece: then
        // every stream is checked against its capture file before anything is published.
        let poisoned = accepting.is_poisoned();
        let accepting = Arc::try_unwrap(accepting).map_err(|_| {
            let e = io::Error::other("a capture hasher thread is still running");
            IoError::at("finish the capture in", &dir.path, e)
        })?;
        let Accepting {
            capture,
            mut indexes,
        } = accepting
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let summary = capture.finish(display, status);
        let layout = &store.layout;
        let kept_by_keeper = keeper.is_some();
        // The objects this capture put in place for the first time, with their mtime: should
        // the record not be written after all for a reason other than a full disk, they are
        // taken out again (`unpublish`), so no object is left that nothing points at.
        let mut fresh: Vec<(Digest, Option<SystemTime>)> = Vec::new();
        let publishing_since = SystemTime::now();
        // The object being published when publication failed: its index may be in place.
        let mut attempted = None;
        let mut gc = None;
        // Every step that writes gets a piece of the reserve back if it finds the disk full,
        // and is tried again (`with_room`); the reserve itself becomes the record.
        let published = (|| {
            for ((files, index), s) in streams.iter_mut().zip(&mut indexes).zip(&summary.streams) {
                index.broken |= poisoned;
                with_room(&mut reserve, || seal_stream(files, index, s))?;
            }
            let manifest = with_room(&mut reserve, || write_manifest(&dir.path, &summary))?;
            gc = Some(GcLock::shared(layout)?);
            let mut digests: Vec<Digest> = summary.streams.iter().map(|s| s.digest).collect();
            digests.extend(manifest.as_ref().map(|(d, _, _)| *d));
            match keeper {
                Some(keeper) => with_room(&mut reserve, || keeper.protect_new(&digests))?,
                None => with_room(&mut reserve, || protect(&dir.path, &digests))?,
            }
            // Each digest once: two streams with the same bytes (both empty, say) are one
            // object, and a second publication would count this capture's own object as a
            // dedupe hit.
            let mut seen = HashSet::new();
            let mut publish =
                |reserve: &mut Option<Reserve>, digest: &Digest, data: &Path, index: &Path| {
                    if !seen.insert(*digest) {
                        return Ok::<(), StoreError>(());
                    }
                    attempted = Some(*digest);
                    let published =
                        with_room(reserve, || Ok(publish_object(layout, digest, data, index)?))?;
                    if published == Published::New {
                        let mtime = fs::metadata(layout.object(digest)).and_then(|m| m.modified());
                        fresh.push((*digest, mtime.ok()));
                    }
                    attempted = None;
                    Ok(())
                };
            for ((files, index), s) in streams.iter().zip(&indexes).zip(&summary.streams) {
                publish(&mut reserve, &s.digest, &files.data_path, &index.path)?;
            }
            if let Some((digest, data, index)) = &manifest {
                publish(&mut reserve, digest, data, index)?;
            }
            // The record goes last: once it exists, everything it references is published.
            // It is written before the GC lock and the capture lock (the protection) are
            // released.
            let mut record = ResultRecord::from_summary(run_id.clone(), &summary);
            record.run = run_info;
            record.set_keeps(keeps);
            if kept_by_keeper {
                return Ok(record);
            }
            let name = format!("{run_id}{RECORD_SUFFIX}");
            let json = record_json(layout, &run_id, &record)?;
            let written = match reserve.as_ref() {
                Some(room) => room.become_record(&layout.records(), &name, &json),
                None => write_atomic(&layout.records(), &name, &json),
            };
            match written {
                Ok(()) => {}
                // The full record needed more than the room set aside (previews of control
                // bytes, a long display): the minimal one fits it.
                Err(e) if is_no_space(&e.source) => {
                    record = minimal_record(&record);
                    let json = record_json(layout, &run_id, &record)?;
                    match reserve.as_ref() {
                        Some(room) => room.become_record(&layout.records(), &name, &json)?,
                        None => write_atomic(&layout.records(), &name, &json)?,
                    }
                }
                Err(e) => return Err(e.into()),
            }
            // The reserve is the record now.
            reserve = None;
            crate::fault::point("after the record, before the capture directory is removed");
            Ok(record)
        })();
        if let Some(reserve) = reserve.take() {
            reserve.release();
        }
        match &published {
            // On a full disk nothing is taken back and the capture directory is kept: what
            // was published, and what was not yet, stays on disk. A later `agentrun gc`
            // removes it once nothing holds its lock.
            Err(e) if store_no_space(e) => dir.keep = true,
            // A keeper's objects stay protected by it; its caller decides about them.
            Err(_) if !kept_by_keeper => {
                drop(gc.take());
                unpublish(layout, &dir.path, &fresh, attempted, publishing_since);
            }
            _ => {}
        }
        drop(gc);
        drop((streams, indexes));
        drop(dir);
        published
    }
}

/// Runs a publication step; each time it finds the disk full, a piece of the reserve is given
/// back and it is tried again, until the reserve has nothing more to give (every step can be
/// run again after a failure).
fn with_room<T>(
    reserve: &mut Option<Reserve>,
    mut step: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    loop {
        match step() {
            Err(e) if store_no_space(&e) && reserve.as_mut().is_some_and(Reserve::give_back) => {}
            done => return done,
        }
    }
}

/// The record's JSON, refused if its own reader would refuse it.
fn record_json(
    layout: &layout::Layout,
    run_id: &str,
    record: &ResultRecord,
) -> Result<Vec<u8>, StoreError> {
    let json = serde_json::to_vec_pretty(record).map_err(io::Error::other);
    let json = json.at("serialize the record of", &layout.record(run_id))?;
    // Every field is bounded where it enters, so this never refuses; it guarantees that no
    // record is written that its own reader would refuse.
    if json.len() as u64 > MAX_RECORD_BYTES {
        return Err(StoreError::RecordTooLarge {
            path: layout.record(run_id),
            size: json.len() as u64,
            limit: MAX_RECORD_BYTES,
        });
    }
    Ok(json)
}

/// Takes back the objects a capture published for the first time (`fresh`, each with the
/// mtime it had then) when its record could not be written: no record points at them, and on
/// a full disk they hold the room the next run needs. Best effort; what is left is an ordinary
/// unreferenced object that GC removes after the grace period.
///
/// Under the exclusive GC lock, so no publication is half done meanwhile. The objects are kept
/// if anything else may refer to one of them: another live capture protects it (a compaction
/// that confirmed it, a capture about to publish it), a record written since publication
/// began names it (a capture that found it as a dedupe hit, and finished), or its mtime
/// changed (a dedupe hit refreshes it). The index of `attempted`, the object whose
/// publication failed, is removed if that object is not there.
fn unpublish(
    layout: &layout::Layout,
    own: &Path,
    fresh: &[(Digest, Option<SystemTime>)],
    attempted: Option<Digest>,
    since: SystemTime,
) {
    if fresh.is_empty() && attempted.is_none() {
        return;
    }
    let Ok(_gc) = GcLock::exclusive(layout) else {
        return;
    };
    // No publication is half done now: an index without its object is an orphan.
    if let Some(digest) = attempted
        && matches!(fs::symlink_metadata(layout.object(&digest)), Err(e) if e.kind() == io::ErrorKind::NotFound)
    {
        let _ = fs::remove_file(layout.index(&digest));
        let _ = fsync_dir(&layout.object_dir(&digest));
    }
    let Ok(mut protected) = crate::gc::live_protected(layout, own) else {
        return;
    };
    // Coarse timestamps (a second on some file systems) are allowed for.
    let since = since
        .checked_sub(std::time::Duration::from_secs(2))
        .unwrap_or(since);
    let Some(recent) = recent_record_artifacts(layout, since) else {
        return;
    };
    protected.extend(recent);
    // A protected manifest roots its streams, so one of them protected elsewhere keeps all.
    if fresh.iter().any(|(digest, _)| protected.contains(digest)) {
        return;
    }
    for (digest, mtime) in fresh {
        let object = layout.object(digest);
        let unchanged = fs::symlink_metadata(&object)
            .and_then(|m| m.modified())
            .ok()
            .is_some_and(|now| Some(now) == *mtime);
        if !unchanged {
            continue;
        }
        // The object before its index, as GC does: an object is never visible without it.
        if fs::remove_file(&object).is_ok() {
            let _ = fs::remove_file(layout.index(digest));
        }
    }
    if let Some(dir) = fresh.first().map(|(d, _)| layout.object_dir(d)) {
        let _ = fsync_dir(&dir);
    }
}

/// Every artifact named by a record modified at or after `since`; `None` if one of those
/// records cannot be read (then nothing may be taken back).
fn recent_record_artifacts(layout: &layout::Layout, since: SystemTime) -> Option<HashSet<Digest>> {
    let mut artifacts = HashSet::new();
    for entry in fs::read_dir(layout.records()).ok()? {
        let path = entry.ok()?.path();
        if !path.to_str().is_some_and(|p| p.ends_with(RECORD_SUFFIX)) {
            continue;
        }
        let modified = fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .ok()?;
        if modified < since {
            continue;
        }
        let file = crate::record_file::read(&path).ok()?;
        let record = ResultRecord::from_json(&file.bytes).ok()?;
        artifacts.extend(record.artifacts());
    }
    Some(artifacts)
}

/// Makes a stream's capture file and index temp file final and durable.
fn seal_stream(
    files: &mut StreamFiles,
    index: &mut IndexFile,
    s: &agentrun_core::capture::StreamSummary,
) -> Result<(), StoreError> {
    // The file must hold exactly the accepted bytes: a failed write may have left extra bytes.
    let len = files.data.metadata().at("inspect", &files.data_path)?.len();
    if len < s.bytes {
        return Err(StoreError::CaptureFileTruncated {
            path: files.data_path.clone(),
            expected: s.bytes,
        });
    }
    if len > s.bytes {
        let f = OpenOptions::new().write(true).open(&files.data_path);
        f.and_then(|f| f.set_len(s.bytes))
            .at("truncate", &files.data_path)?;
    }
    let header = s.index_header.encode();
    crate::fault::fail_io("sealing a stream").at("write", &index.path)?;
    let complete =
        index.entries_written + s.index_entries.len() as u64 == s.index_header.block_count();
    if index.broken || !complete {
        rebuild_index(&files.data_path, index, s.digest)?;
    } else {
        let mut tail = Vec::with_capacity(s.index_entries.len() * agentrun_core::index::ENTRY_LEN);
        for (k, entry) in s.index_entries.iter().enumerate() {
            tail.extend_from_slice(&entry.encode(index.entries_written + k as u64));
        }
        let written = index
            .file
            .write_all(&tail)
            .and_then(|()| index.file.write_all_at(&header, 0));
        if let Err(e) = written {
            // Part of the entries may be in the file: sealing again rebuilds the index.
            index.broken = true;
            return Err(IoError::at("write", &index.path, e).into());
        }
    }
    atomic::sync_file(&files.data, &files.data_path)?;
    atomic::sync_file(&index.file, &index.path)?;
    Ok(())
}

/// Rewrites a stream's index from its capture file, after the incremental index was lost to a
/// write error (or a hasher thread stopped half way). Also checks that the file still hashes
/// to the digest the machine computed: nothing is published under a digest its bytes do not
/// have.
fn rebuild_index(path: &Path, index_file: &IndexFile, digest: Digest) -> Result<(), StoreError> {
    let mut data = File::open(path).at("open", path)?;
    let mut indexer = BlockIndexer::default();
    let mut hasher = StreamingDigest::default();
    let mut buf = vec![0u8; agentrun_core::index::BLOCK_SIZE as usize];
    let mut entries: Vec<IndexEntry> = Vec::new();
    let idx_path = &index_file.path;
    // Rewritten in place and cut to length at the end, not truncated first: on a full disk
    // the blocks it has are the room it needs.
    let mut index = OpenOptions::new()
        .write(true)
        .open(idx_path)
        .at("open", idx_path)?;
    index.write_all(&[0u8; HEADER_LEN]).at("write", idx_path)?;
    let mut block = 0u64;
    loop {
        let n = data.read(&mut buf).at("read", path)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        indexer.update(&buf[..n]);
        entries.extend(std::iter::from_fn(|| indexer.poll_entry()));
        for e in entries.drain(..) {
            index.write_all(&e.encode(block)).at("write", idx_path)?;
            block += 1;
        }
    }
    if hasher.finish() != digest {
        let e = io::Error::other("the capture file no longer matches the bytes accepted");
        return Err(IoError::at("rebuild the index of", path, e).into());
    }
    let (rest, header) = indexer.finish(digest);
    for e in rest {
        index.write_all(&e.encode(block)).at("write", idx_path)?;
        block += 1;
    }
    let len = HEADER_LEN as u64 + block * agentrun_core::index::ENTRY_LEN as u64;
    index.set_len(len).at("truncate", idx_path)?;
    index.seek(SeekFrom::Start(0)).at("seek", idx_path)?;
    index.write_all(&header.encode()).at("write", idx_path)?;
    atomic::sync_file(&index, idx_path)?;
    Ok(())
}

/// Writes the manifest of named output and its index into the capture directory.
fn write_manifest(
    dir: &Path,
    summary: &CaptureSummary,
) -> Result<Option<(Digest, PathBuf, PathBuf)>, StoreError> {
    let Some(manifest) = summary.manifest() else {
        return Ok(None);
    };
    let bytes = manifest.to_bytes();
    let digest = Digest::of(&bytes);
    let data = dir.join("m");
    let index = dir.join("m.idx");
    let sidecar = agentrun_core::index::encode_index_of(&bytes, agentrun_core::index::BLOCK_SIZE);
    crate::fault::fail_io("writing the manifest").at("write", &data)?;
    write_in_place(&data, &bytes)?;
    write_in_place(&index, &sidecar)?;
    Ok(Some((digest, data, index)))
}

/// Room allocated at the start of each stream's capture file when a capture starts (one
/// page): see [`StreamFiles::create`].
const FIRST_DATA_ROOM: u64 = 4 << 10;

/// Room allocated beyond the end of the manifest, its index and the `protect` file when a
/// capture starts, so that writing them on a full disk needs no block of its own.
const MANIFEST_ROOM: u64 = 16 << 10;

/// Creates `path` (owner-only, empty) with `room` bytes allocated past its end
/// (`FALLOC_FL_KEEP_SIZE`): later writes use those blocks. Best effort: without them a write
/// on a full disk gets room from the reserve (see `with_room`).
fn preallocate(path: &Path, room: u64) -> Result<(), IoError> {
    let file = layout::new_private_file().open(path).at("create", path)?;
    let _ = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, room);
    Ok(())
}

/// Makes `path` (created by [`preallocate`], or created now) hold exactly `bytes`, synced:
/// written from its start into the blocks it has, so that writing it again after a full disk
/// replaces what an attempt left.
fn write_in_place(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .mode(layout::FILE_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .at("open", path)?;
    file.write_all_at(bytes, 0).at("write", path)?;
    file.set_len(bytes.len() as u64).at("truncate", path)?;
    atomic::sync_file(&file, path)
}

/// Appends the digests about to be published to the capture's `protect` file.
fn protect(dir: &Path, digests: &[Digest]) -> Result<(), StoreError> {
    let path = dir.join("protect");
    let mut f = layout::append_private_file(&path)?;
    let text: String = digests.iter().map(|d| format!("{d}\n")).collect();
    let before = f.metadata().at("inspect", &path)?.len();
    let written =
        crate::fault::fail_io("protecting the digests").and_then(|()| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        // No half line is left for GC to read: an attempt again appends whole lines.
        let _ = f.set_len(before);
        return Err(IoError::at("write", &path, e).into());
    }
    atomic::sync_file(&f, &path)?;
    fsync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use agentrun_core::{PageRequest, StreamName};

    use super::*;

    fn named(name: &str) -> OutputChannel {
        OutputChannel::Named(StreamName::new(name).unwrap())
    }

    fn done() -> CaptureCompletion {
        CaptureCompletion::Streamed {
            display: None,
            status: CaptureStatus::Succeeded,
        }
    }

    /// A store in a fresh temporary directory (kept while the directory lives).
    fn temp_store() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        (tmp, store)
    }

    /// A fresh single-output capture and its stream.
    fn single(store: &Store) -> (CaptureSession, StreamIndex) {
        let s = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let ix = s.resolve(&OutputChannel::Single).unwrap();
        (s, ix)
    }

    fn read_stream(store: &Store, record: &ResultRecord, name: &str) -> Vec<u8> {
        let uri = record.stream_uri(record.stream(name).unwrap());
        store.read_page(&uri, PageRequest::default()).unwrap().bytes
    }

    #[test]
    fn a_stream_index_of_another_session_is_a_typed_error_not_a_panic() {
        let (_tmp, store) = temp_store();
        let other = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        let stderr = other.resolve(&named("stderr")).unwrap();
        let mut single = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        single
            .write_channel(&OutputChannel::Single, b"kept\n")
            .unwrap();
        let err = single.write(stderr, b"lost\n").unwrap_err();
        assert!(
            matches!(
                err,
                CaptureWriteError::Rejected(CaptureError::ForeignStream {
                    index: 1,
                    streams: 1
                })
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("not a stream of this capture"),
            "{err}"
        );
        let err = single.record_fault(Some(stderr), "x").unwrap_err();
        assert!(matches!(err, CaptureWriteError::Rejected(_)), "{err:?}");
        // Nothing was written or recorded: the capture finishes complete.
        let record = single.finish(done()).unwrap();
        assert!(!record.incomplete, "{record:?}");
        // A session with as many streams refuses it too, instead of writing it to its own
        // stderr.
        let mut twin = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        let err = twin.write(stderr, b"lost\n").unwrap_err();
        assert!(
            matches!(
                err,
                CaptureWriteError::Rejected(CaptureError::ForeignStream {
                    index: 1,
                    streams: 2
                })
            ),
            "{err:?}"
        );
        let record = twin.finish(done()).unwrap();
        assert!(!record.incomplete, "{record:?}");
        assert!(read_stream(&store, &record, "stderr").is_empty());
        drop(other);
    }

    #[test]
    fn a_failed_publication_takes_back_only_what_nothing_else_refers_to() {
        let (_tmp, store) = temp_store();
        let layout = &store.layout;
        let since = SystemTime::now();
        let published = |content: &[u8]| {
            let (mut s, ix) = single(&store);
            s.write(ix, content).unwrap();
            let record = s.finish(done()).unwrap();
            let digest = record.output_uri().digest;
            let mtime = fs::metadata(layout.object(&digest))
                .unwrap()
                .modified()
                .ok();
            (record, digest, mtime)
        };
        let (_, referenced, referenced_mtime) = published(b"a record of now names it\n");
        let (old, alone, alone_mtime) = published(b"only its record, removed\n");
        fs::remove_file(layout.record(&old.run_id)).unwrap();
        let (old, guarded, guarded_mtime) = published(b"a live capture protects it\n");
        fs::remove_file(layout.record(&old.run_id)).unwrap();
        let mut live = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        live.protect_more(&[guarded]).unwrap();
        let own = store.layout.captures().join("a-failed-capture");
        // Each on its own, as a failed publication of that object alone would.
        for (digest, mtime) in [
            (referenced, referenced_mtime),
            (alone, alone_mtime),
            (guarded, guarded_mtime),
        ] {
            unpublish(layout, &own, &[(digest, mtime)], None, since);
        }
        assert!(layout.object(&referenced).exists(), "a record names it");
        assert!(
            layout.object(&guarded).exists(),
            "a live capture protects it"
        );
        assert!(!layout.object(&alone).exists(), "nothing refers to it");
        assert!(!layout.index(&alone).exists());
        // A changed mtime (a dedupe hit refreshed it) keeps it too.
        let (old, refreshed, _) = published(b"deduplicated since\n");
        fs::remove_file(layout.record(&old.run_id)).unwrap();
        let before = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
        unpublish(
            layout,
            &own,
            &[(refreshed, Some(before))],
            None,
            SystemTime::now(),
        );
        assert!(layout.object(&refreshed).exists());
        drop(live);
    }

    #[test]
    fn a_fault_recorded_by_the_caller_marks_the_record_and_keeps_the_bytes() {
        let (_tmp, store) = temp_store();
        let mut s = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        let stdout = s.resolve(&named("stdout")).unwrap();
        // A large chunk may still be in the hasher thread: it must be kept.
        let big = vec![b'x'; PIPELINE_CHUNK + 10];
        s.write(stdout, &big).unwrap();
        s.record_fault(Some(stdout), "output may be missing")
            .unwrap();
        assert!(s.write(stdout, b"after").is_err(), "the stream is closed");
        s.record_fault(None, "exit unknown").unwrap();
        let record = s.finish(done()).unwrap();
        assert!(record.incomplete);
        let faults: Vec<_> = record
            .faults
            .iter()
            .map(|f| (f.stream.as_ref().map(|n| n.as_str()), f.message.as_str()))
            .collect();
        assert_eq!(
            faults,
            [
                (Some("stdout"), "output may be missing"),
                (None, "exit unknown")
            ]
        );
        assert_eq!(read_stream(&store, &record, "stdout"), big);
    }

    #[test]
    fn a_write_fault_is_reported_recorded_and_the_accepted_bytes_are_kept() {
        let (_tmp, store) = temp_store();
        let mut s = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        s.write_channel(&named("stdout"), b"kept\n").unwrap();
        // Swap the capture file for a read-only handle: the next write fails as on a full disk.
        let path = s.streams[0].data_path.clone();
        s.streams[0].data = File::open(&path).unwrap();
        let err = s.write_channel(&named("stdout"), b"lost\n").unwrap_err();
        assert!(
            matches!(&err, CaptureWriteError::Io { stream, .. } if stream == "stdout"),
            "{err:?}"
        );
        // Later chunks for that stream are refused too, never silently dropped.
        let err = s.write_channel(&named("stdout"), b"more\n").unwrap_err();
        assert!(err.to_string().contains("earlier write error"), "{err}");
        let err = s.resolve(&named("stdout")).unwrap_err();
        assert!(matches!(err, CaptureWriteError::Io { .. }));
        // Other streams go on.
        s.write_channel(&named("stderr"), b"e\n").unwrap();
        let record = s.finish(done()).unwrap();
        assert!(record.incomplete);
        assert_eq!(record.faults[0].stream.as_ref().unwrap().as_str(), "stdout");
        assert!(
            record
                .render()
                .starts_with("[Incomplete output: capture failed")
        );
        assert_eq!(read_stream(&store, &record, "stdout"), b"kept\n");
        assert_eq!(read_stream(&store, &record, "stderr"), b"e\n");
        assert_eq!(store.record(&record.run_id).unwrap(), record);
    }

    /// A session whose capture file refuses writes (as on a full disk) after `kept` was
    /// written and accepted.
    fn session_with_a_broken_file(store: &Store, kept: &[u8]) -> (CaptureSession, StreamIndex) {
        let (mut s, ix) = single(store);
        s.write(ix, kept).unwrap();
        break_capture_file(&mut s);
        (s, ix)
    }

    /// Swaps stream 0's capture file for a read-only handle: the next write fails.
    fn break_capture_file(s: &mut CaptureSession) {
        let read_only = File::open(&s.streams[0].data_path).unwrap();
        s.streams[0].data = read_only;
    }

    fn assert_only_kept(store: &Store, record: &ResultRecord, kept: &[u8]) {
        assert!(record.incomplete);
        let stream = &record.streams()[0];
        assert_eq!(stream.sha256, Digest::of(kept));
        // A last line without its newline counts too.
        let newlines = kept.iter().filter(|&&b| b == b'\n').count() as u64;
        let lines = newlines + u64::from(kept.last().is_some_and(|&b| b != b'\n'));
        assert_eq!((stream.bytes, stream.lines), (kept.len() as u64, lines));
        assert!(!stream.preview.text.contains('x'));
        let mut stored = Vec::new();
        store.copy_to(&record.output_uri(), &mut stored).unwrap();
        assert_eq!(stored, kept);
    }

    #[test]
    fn a_failed_large_write_is_reported_and_never_hashed() {
        // A failed write must leave the digest, counts and preview describing only the bytes
        // on disk, however large the chunk.
        let (_tmp, store) = temp_store();
        let kept = vec![b'k'; PIPELINE_CHUNK + 1];
        let (mut s, ix) = session_with_a_broken_file(&store, &kept);
        let lost = vec![b'x'; 2 * PIPELINE_CHUNK];
        let first = s.write(ix, &lost);
        assert!(
            matches!(first, Err(CaptureWriteError::Io { .. })),
            "{first:?}"
        );
        let second = s.write(ix, b"more\n").unwrap_err();
        assert!(
            second.to_string().contains("earlier write error"),
            "{second}"
        );
        let record = s.finish(done()).unwrap();
        assert_only_kept(&store, &record, &kept);
        assert_eq!(record.faults.len(), 1, "{:?}", record.faults);
    }

    #[test]
    fn pieces_waiting_for_the_hasher_are_kept_when_a_later_write_fails() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        let kept: Vec<u8> = (0..PIPELINE_PIECE * 3 + 5)
            .map(|i| {
                if i % 80 == 79 {
                    b'\n'
                } else {
                    b'0' + (i % 10) as u8
                }
            })
            .collect();
        s.write(ix, &kept).unwrap();
        break_capture_file(&mut s);
        assert!(s.write(ix, &vec![b'x'; PIPELINE_CHUNK]).is_err());
        let record = s.finish(done()).unwrap();
        assert_only_kept(&store, &record, &kept);
    }

    /// Writes `pieces` pieces of `len` bytes with the hasher held, then one more, which must
    /// wait for the hasher; checks how many pieces were waiting before it.
    fn writes_wait_for_the_hasher_after(pieces: usize, len: usize) {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        // Hold the machine: the hasher blocks on its first piece, and the writes go on only
        // while the pipeline has room.
        let accepting = Arc::clone(&s.accepting);
        let guard = lock(&accepting);
        let writer = thread::spawn(move || {
            for _ in 0..pieces {
                s.write(ix, &vec![b'p'; len]).unwrap();
            }
            let waiting = s.streams[0].outstanding();
            // One more piece than the pipeline holds: this write waits for the hasher.
            s.write(ix, &vec![b'q'; len]).unwrap();
            (s, waiting)
        });
        // The writer is blocked (the hasher cannot take the lock) until the guard goes.
        thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !writer.is_finished(),
            "the write beyond the pipeline's depth must wait"
        );
        drop(guard);
        let (s, waiting) = writer.join().unwrap();
        assert_eq!(waiting, pieces);
        drop(accepting);
        let record = s.finish(done()).unwrap();
        assert!(!record.incomplete);
        assert_eq!(record.streams()[0].bytes, ((pieces + 1) * len) as u64);
    }

    #[test]
    fn the_writes_run_ahead_of_the_hasher_by_a_bounded_number_of_pieces() {
        writes_wait_for_the_hasher_after(PIPELINE_DEPTH, PIPELINE_CHUNK);
    }

    #[test]
    fn the_copies_waiting_for_the_hasher_are_bounded_in_bytes() {
        writes_wait_for_the_hasher_after(PIPELINE_COPIES / PIPELINE_PIECE, PIPELINE_PIECE);
    }

    /// A hasher thread that takes one piece and stops, as if it had died.
    fn dying_hasher() -> Hasher {
        let (pieces, to_hash) = mpsc::sync_channel::<Piece>(PIPELINE_DEPTH);
        let (done, returned) = mpsc::sync_channel(PIPELINE_DEPTH);
        let thread = thread::spawn(move || {
            let _ = to_hash.recv();
            drop(done);
        });
        Hasher {
            pieces: Some(pieces),
            returned,
            outstanding: 0,
            copied: 0,
            pending: 0,
            thread: Some(thread),
        }
    }

    #[test]
    fn a_hasher_that_stops_is_a_fault_and_its_pieces_are_cut_off() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        let kept = b"kept\n".to_vec();
        s.write(ix, &kept).unwrap();
        s.streams[0].hasher = Some(dying_hasher());
        // Its error comes from this call or from finish; either way it is recorded.
        let _ = s.write(ix, &vec![b'x'; 2 * PIPELINE_PIECE]);
        let record = s.finish(done()).unwrap();
        assert_only_kept(&store, &record, &kept);
        assert!(
            record.faults[0].message.contains("hasher thread stopped"),
            "{:?}",
            record.faults
        );
    }

    #[test]
    fn a_hasher_that_panics_half_way_never_gets_a_wrong_digest_published() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        s.write(ix, b"on disk\n").unwrap();
        // The file gets bytes the machine never sees, and the machine takes as many other
        // bytes, then its thread panics with the lock held: the machine no longer describes
        // the file, though the lengths agree.
        s.streams[0].data.write_all(b"written\n").unwrap();
        let accepting = Arc::clone(&s.accepting);
        let panicked = thread::spawn(move || {
            let mut acc = lock(&accepting);
            acc.capture.handle_chunk(ix, b"hashed!\n");
            panic!("a hasher bug");
        })
        .join();
        assert!(panicked.is_err());
        let err = s.finish(done()).unwrap_err();
        assert!(
            err.to_string()
                .contains("no longer matches the bytes accepted"),
            "{err}"
        );
        assert!(store.verify().unwrap().is_healthy());
    }

    /// Drains `read` (a pipe's read end, or any file) into stream `ix` through
    /// `write_from_pipe` until end of file, polling while it is empty.
    fn drain(s: &mut CaptureSession, ix: StreamIndex, read: &impl std::os::fd::AsFd) -> u64 {
        let mut taken = 0u64;
        loop {
            match s.write_from_pipe(ix, read.as_fd(), 1 << 20) {
                Ok(0) => return taken,
                Ok(n) => taken += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Sends `content` through a non-blocking pipe, written in odd sizes by another thread,
    /// into stream `ix` with `write_from_pipe`; returns the bytes taken.
    fn pipe_through(s: &mut CaptureSession, ix: StreamIndex, content: &[u8]) -> u64 {
        let (read, write) = rustix::pipe::pipe().unwrap();
        rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK).unwrap();
        let sent = content.to_vec();
        let writer = thread::spawn(move || {
            for piece in sent.chunks(300_001) {
                rustix::io::write(&write, piece).unwrap();
            }
        });
        let taken = drain(s, ix, &read);
        writer.join().unwrap();
        taken
    }

    /// Bytes of many lines, `len` long, that differ from block to block.
    fn lines_of(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                if i % 97 == 96 {
                    b'\n'
                } else {
                    b'0' + (i / 97 % 10) as u8
                }
            })
            .collect()
    }

    #[test]
    fn a_pipe_spliced_into_a_stream_keeps_every_byte_across_mapped_windows() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        // More than two mapped windows, written in odd sizes, so pieces straddle windows.
        let content = lines_of(2 * crate::mapped::WINDOW as usize + 777_777);
        s.write(ix, b"before\n").unwrap();
        assert_eq!(pipe_through(&mut s, ix, &content), content.len() as u64);
        s.write(ix, b"after\n").unwrap();
        assert!(
            s.streams[0].splice,
            "the kernel splices pipes into ext4/tmpfs files"
        );
        let all = [&b"before\n"[..], &content, b"after\n"].concat();
        let record = s.finish(done()).unwrap();
        assert!(!record.incomplete, "{:?}", record.faults);
        assert_eq!(record.streams()[0].sha256, Digest::of(&all));
        let mut stored = Vec::new();
        store.copy_to(&record.output_uri(), &mut stored).unwrap();
        assert_eq!(stored, all);
        assert!(store.verify().unwrap().is_healthy());
    }

    #[test]
    fn a_source_the_kernel_cannot_splice_is_read_and_written_instead() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        // A regular file is not a pipe: splice refuses it, the copy path takes over.
        let content = lines_of(3 * PIPELINE_PIECE + 5);
        let mut source = tempfile::tempfile().unwrap();
        source.write_all(&content).unwrap();
        source.seek(SeekFrom::Start(0)).unwrap();
        assert_eq!(drain(&mut s, ix, &source), content.len() as u64);
        assert!(!s.streams[0].splice);
        let record = s.finish(done()).unwrap();
        assert!(!record.incomplete);
        assert_eq!(record.streams()[0].sha256, Digest::of(&content));
    }

    #[test]
    fn a_failed_stream_still_drains_its_pipe() {
        let (_tmp, store) = temp_store();
        let kept = b"kept\n".to_vec();
        let (mut s, ix) = session_with_a_broken_file(&store, &kept);
        let (read, write) = rustix::pipe::pipe().unwrap();
        rustix::io::write(&write, &[b'x'; 60_000]).unwrap();
        drop(write);
        // Every byte is taken from the pipe (its writer never blocks), none is kept.
        assert_eq!(drain(&mut s, ix, &read), 60_000);
        let record = s.finish(done()).unwrap();
        assert_only_kept(&store, &record, &kept);
    }

    #[test]
    fn an_empty_pipe_would_block_and_a_closed_one_is_at_end_of_file() {
        use std::os::fd::AsFd;
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        let (read, write) = rustix::pipe::pipe().unwrap();
        rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK).unwrap();
        let err = s.write_from_pipe(ix, read.as_fd(), 1024).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(write);
        assert_eq!(s.write_from_pipe(ix, read.as_fd(), 1024).unwrap(), 0);
        let record = s.finish(done()).unwrap();
        assert_eq!(record.streams()[0].bytes, 0);
    }

    #[test]
    fn spliced_pieces_are_copied_back_where_the_file_is_not_mapped() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        // The hasher of a file system that is not mapped (see `mapped::maps_safely`).
        let file = s.streams[0].data.try_clone().unwrap();
        let hasher = Hasher::spawn(Arc::clone(&s.accepting), ix, file, false).unwrap();
        s.streams[0].hasher = Some(hasher);
        let content = lines_of(3 * PIPELINE_PIECE + 11);
        assert_eq!(pipe_through(&mut s, ix, &content), content.len() as u64);
        assert!(s.streams[0].splice);
        let record = s.finish(done()).unwrap();
        assert!(!record.incomplete);
        assert_eq!(record.streams()[0].sha256, Digest::of(&content));
    }

    #[test]
    fn a_blocking_pipe_is_waited_for_as_read_would() {
        use std::os::fd::AsFd;
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        let (read, write) = rustix::pipe::pipe().unwrap();
        let writer = thread::spawn(move || {
            thread::sleep(std::time::Duration::from_millis(20));
            rustix::io::write(&write, b"late\n").unwrap();
        });
        // Empty and blocking: the call waits for the bytes instead of `WouldBlock`.
        assert_eq!(s.write_from_pipe(ix, read.as_fd(), 1024).unwrap(), 5);
        writer.join().unwrap();
        let record = s.finish(done()).unwrap();
        assert_eq!(record.streams()[0].bytes, 5);
    }

    #[test]
    fn pieces_large_and_small_arrive_in_order() {
        let (_tmp, store) = temp_store();
        let (mut s, ix) = single(&store);
        let mut all = Vec::new();
        for (i, len) in [
            PIPELINE_PIECE * 2 + 7,
            3,
            PIPELINE_CHUNK,
            1,
            PIPELINE_CHUNK - 1,
        ]
        .into_iter()
        .enumerate()
        {
            let chunk: Vec<u8> = (0..len).map(|k| b'a' + ((i + k) % 26) as u8).collect();
            s.write(ix, &chunk).unwrap();
            all.extend_from_slice(&chunk);
        }
        let record = s.finish(done()).unwrap();
        assert!(!record.incomplete);
        assert_eq!(record.streams()[0].sha256, Digest::of(&all));
        let mut stored = Vec::new();
        store.copy_to(&record.output_uri(), &mut stored).unwrap();
        assert_eq!(stored, all);
    }

    #[test]
    fn a_lost_index_is_rebuilt_from_the_capture_file() {
        let (_tmp, store) = temp_store();
        let mut s = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        {
            let mut acc = lock(&s.accepting);
            let path = acc.indexes[0].path.clone();
            acc.indexes[0].file = File::open(&path).unwrap();
        }
        let content: Vec<u8> = (0..30_000)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        // The index error comes from this call or, with the chunk's piece still in the
        // hasher, when finish settles it: either way it is recorded.
        let _ = s.write_channel(&OutputChannel::Single, &content[..100_000]);
        let record = s.finish(done()).unwrap();
        assert!(record.incomplete);
        assert!(
            record.faults[0].message.contains("line index"),
            "{:?}",
            record.faults
        );
        let uri = record.output_uri();
        let page = store
            .read_page(&uri, PageRequest::new(15_000, 5).unwrap())
            .unwrap();
        let want = agentrun_core::page::extract_page(
            &content[..100_000],
            PageRequest::new(15_000, 5).unwrap(),
        );
        assert_eq!(page, want.unwrap());
        assert!(store.verify().unwrap().is_healthy());
    }
}
