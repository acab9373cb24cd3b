//! The hasher pipeline: the threads that have the core machine accept bytes already written
//! to the capture files, and what they share with the writing thread.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread;

use agentrun_core::Capture;
use agentrun_core::stream::StreamIndex;

use crate::mapped::FileWindow;

/// Chunks at least this large are hashed on the stream's hasher thread (see
/// `CaptureSession::write`); below it a thread hand-off costs more than the overlap saves, and
/// the chunk is accepted inline.
pub(super) const PIPELINE_CHUNK: usize = 64 * 1024;

/// Largest piece handed to a hasher thread at once: bounds each copy kept per stream.
pub(super) const PIPELINE_PIECE: usize = 1 << 20;

/// Pieces a stream may have written but not yet hashed. Deep enough that the hasher always has
/// work while the writing thread and the child share the other core (measured: 4 pieces cost
/// ~5 % more wall time per GiB than 16); the caller waits (backpressure) beyond it.
pub(super) const PIPELINE_DEPTH: usize = 16;

/// Bytes of copied pieces a stream may have waiting for its hasher: the memory a stream's
/// pipeline holds. (A spliced piece waits in the page cache, not in memory of its own.)
pub(super) const PIPELINE_COPIES: usize = 4 << 20;

/// Piece buffers a stream keeps for reuse.
pub(super) const SPARE_PIECES: usize = 2;

/// A capture fault found while accepting bytes, possibly on a hasher thread: the kind and
/// message of the error, kept to report it again for every later chunk of the stream.
pub(super) type StreamFault = (io::ErrorKind, String);

/// What the hasher threads share with the caller's thread: the core machine and each stream's
/// index file. Locked once per piece, never while a file is written.
#[derive(Debug)]
pub(super) struct Accepting {
    pub(super) capture: Capture,
    pub(super) indexes: Vec<IndexFile>,
    /// What each stream's machine accepted so far, for readers that must not take this lock
    /// ([`CaptureProgress`](super::CaptureProgress)).
    pub(super) counts: Arc<[StreamCounts]>,
}

/// The bytes and lines of one stream accepted so far, updated with every piece accepted.
#[derive(Debug, Default)]
pub(super) struct StreamCounts {
    pub(super) bytes: AtomicU64,
    pub(super) lines: AtomicU64,
}

/// A stream's index temp file.
#[derive(Debug)]
pub(super) struct IndexFile {
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// Index entries appended so far (the next entry's block number).
    pub(super) entries_written: u64,
    /// Set once writing the index failed: the index is rebuilt from the capture file at
    /// finish instead.
    pub(super) broken: bool,
    /// The encoded entries of the piece being accepted (reused, so no allocation per piece).
    pub(super) pending: Vec<u8>,
}

impl Accepting {
    /// `bytes` are on disk after the accepted ones: the machine takes them, and the index
    /// entries of every block they completed go to the index file. A failed index write is
    /// recorded in the machine and returned; the chunk itself stays accepted (it is on disk)
    /// and finish rebuilds the index from the capture file.
    pub(super) fn accept(&mut self, stream: StreamIndex, bytes: &[u8]) -> Option<StreamFault> {
        self.capture.handle_chunk(stream, bytes);
        let counts = &self.counts[stream.get()];
        counts
            .bytes
            .store(self.capture.stream_bytes(stream), Ordering::Relaxed);
        counts
            .lines
            .store(self.capture.stream_lines(stream), Ordering::Relaxed);
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
pub(super) fn lock(accepting: &Mutex<Accepting>) -> MutexGuard<'_, Accepting> {
    accepting.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a hasher is handed: bytes already written to the capture file, as a copy, or as where
/// the file holds them (spliced there from a pipe).
#[derive(Debug)]
pub(super) enum Piece {
    Copied(Vec<u8>),
    InFile { offset: u64, len: usize },
}

/// What a hasher hands back for a piece: its length, a copied piece's buffer for reuse, and
/// the fault accepting the piece found.
type Returned = (usize, Option<Vec<u8>>, Option<StreamFault>);

/// A stream's hasher thread: takes pieces already written to the capture file, in order, has
/// the core machine accept them, and hands each back with the fault accepting it found.
#[derive(Debug)]
pub(super) struct Hasher {
    pub(super) pieces: Option<mpsc::SyncSender<Piece>>,
    pub(super) returned: mpsc::Receiver<Returned>,
    /// Pieces handed over and not yet handed back (at most `PIPELINE_DEPTH`).
    pub(super) outstanding: usize,
    /// Bytes of the copied pieces among them (at most `PIPELINE_COPIES`, or one piece).
    pub(super) copied: usize,
    /// Bytes of all of them: written, not yet accepted.
    pub(super) pending: u64,
    pub(super) thread: Option<thread::JoinHandle<()>>,
}

/// What a stream reports when its hasher thread is gone: the pieces it held were written but
/// never accepted, so finish cuts them off.
pub(super) fn hasher_gone() -> io::Error {
    io::Error::other("the capture's hasher thread stopped")
}

impl Hasher {
    /// Starts the hasher of `stream`, whose capture file is `file` (read only where it holds
    /// spliced pieces: through a mapping if `map`, else copied out).
    pub(super) fn spawn(
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
    pub(super) fn send(&mut self, piece: Piece) -> io::Result<()> {
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
    pub(super) fn full(&self, copy: usize) -> bool {
        self.outstanding >= PIPELINE_DEPTH
            || (self.outstanding > 0 && self.copied + copy > PIPELINE_COPIES)
    }

    /// Waits for the oldest piece handed over: its buffer (if copied) and the fault accepting
    /// it found. `Err` if the thread is gone.
    pub(super) fn wait(&mut self) -> io::Result<(Option<Vec<u8>>, Option<StreamFault>)> {
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
    pub(super) file: File,
    /// Whether the file may be mapped (see `mapped::maps_safely`); else bytes are copied out.
    pub(super) map: bool,
    /// The mapped window last read, kept for the next piece (pieces arrive in file order).
    window: Option<FileWindow>,
    /// Where bytes are copied out when the file is not mapped.
    pub(super) copy: Vec<u8>,
}

impl ReadBack {
    /// Has the machine accept the `len` bytes the capture file holds at `offset`, read through
    /// a mapping (or, if mapping fails, copied out). Returns the fault accepting them found;
    /// `Err` if they could not be read, and then the bytes from the failure on are not
    /// accepted.
    // Reading a mapping is `unsafe`; the safety argument is at the read and in `mapped`.
    #[allow(unsafe_code)]
    pub(super) fn accept(
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

/// Write-back starts a stream may have handed to its write-back thread and not yet started;
/// beyond it a range waits in the stream and goes with the next one.
const WRITEBACK_QUEUE: usize = 4;

/// A stream's write-back thread: starts the kernel's write-back of ranges of the capture file
/// that are already hashed (see `start_writeback`). `fadvise(DONTNEED)` submits the dirty
/// pages in the calling thread and, on a disk slower than the output, waits there for room in
/// the device's queue (measured: 12 ms per 16 MiB on a disk writing about 100 MB/s); on a
/// thread of its own that wait no longer holds up the pump, and through the pipe the child.
#[derive(Debug)]
pub(super) struct Writeback {
    pub(super) ranges: Option<mpsc::SyncSender<(u64, u64)>>,
    pub(super) thread: Option<thread::JoinHandle<()>>,
}

impl Writeback {
    /// Starts the write-back thread of the capture file `file`.
    pub(super) fn spawn(file: File) -> io::Result<Self> {
        let (ranges, to_start) = mpsc::sync_channel::<(u64, u64)>(WRITEBACK_QUEUE);
        let thread = thread::Builder::new()
            .name("agentrun-capture-writeback".to_owned())
            .spawn(move || {
                for (offset, len) in to_start {
                    advise_writeback(&file, offset, len);
                }
            })?;
        Ok(Self {
            ranges: Some(ranges),
            thread: Some(thread),
        })
    }

    /// Hands the range `[offset, offset + len)` over; `false` if the thread still has earlier
    /// ones to start (or is gone), and then the caller keeps the range for later.
    pub(super) fn start(&self, offset: u64, len: u64) -> bool {
        self.ranges
            .as_ref()
            .is_some_and(|r| r.try_send((offset, len)).is_ok())
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        drop(self.ranges.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts asynchronous write-back of `[offset, offset + len)` of `file`. Best effort: a
/// failure only makes the final `fsync` longer.
pub(super) fn advise_writeback(file: &File, offset: u64, len: u64) {
    let _ = rustix::fs::fadvise(
        file,
        offset,
        std::num::NonZeroU64::new(len),
        rustix::fs::Advice::DontNeed,
    );
}
