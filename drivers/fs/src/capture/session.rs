//! The live session: its directory, the stream files, and the writes (copied or spliced)
//! that feed the hasher pipeline.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use agentrun_core::index::HEADER_LEN;
use agentrun_core::process::RunInfo;
use agentrun_core::stream::StreamIndex;
use agentrun_core::{
    Capture, CaptureError, Digest, OutputChannel, OutputDeclaration, PreviewLimits,
};

use super::pipeline::*;
use crate::error::{IoContext, IoError};
use crate::layout;
use crate::lock::GcLock;
use crate::reserve::*;
use crate::store::{Store, StoreError};
use rustix::fs::OFlags;

/// Dirty capture bytes after which write-back to disk is started (see `start_writeback`).
pub(super) const WRITEBACK_STEP: u64 = 16 << 20;

/// Starts the kernel's write-back of the capture file up to what is accepted, in steps, so
/// the `fsync` before publication finds little left to write instead of the whole output.
/// `DONTNEED` starts asynchronous write-back of dirty pages (and drops pages already clean),
/// on the stream's write-back thread (see `Writeback`), or here if it cannot be started.
/// Best effort: a failure only makes the final `fsync` longer. Bytes still waiting for the
/// hasher are left alone: dropped from the page cache, they would have to be read back from
/// the disk.
fn start_writeback(files: &mut StreamFiles) {
    let accepted = files.written - files.hasher.as_ref().map_or(0, |h| h.pending);
    let pending = accepted.saturating_sub(files.writeback_started);
    if pending < WRITEBACK_STEP {
        return;
    }
    if files.writeback.is_none() {
        files.writeback = files.data.try_clone().and_then(Writeback::spawn).ok();
    }
    let started = match &files.writeback {
        Some(writeback) => writeback.start(files.writeback_started, pending),
        None => {
            advise_writeback(&files.data, files.writeback_started, pending);
            true
        }
    };
    if started {
        files.writeback_started = accepted;
    }
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
        // Best effort: without it the run still runs and is recorded, it is only not listed
        // as in progress (`Store::live_runs`).
        let live = crate::live::LiveInfo::new(
            capture
                .declaration()
                .indexes()
                .map(|ix| (ix.get(), label(capture.declaration(), ix)))
                .collect(),
        );
        let _ = live.write(&dir.path);
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
            accepting: Arc::new(Mutex::new(Accepting {
                counts: indexes.iter().map(|_| StreamCounts::default()).collect(),
                capture,
                indexes,
            })),
            checked: Vec::new(),
            streams,
            run: None,
            keeps: Vec::new(),
            protected: HashSet::new(),
            reserve: Some(reserve),
            live,
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
pub(super) struct CaptureDir {
    pub(super) path: PathBuf,
    _lock: File,
    /// Left in place when dropped: publication failed on a full disk, and what the directory
    /// holds is not taken back (GC removes it once its lock is free).
    pub(super) keep: bool,
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
pub(super) struct StreamFiles {
    label: String,
    pub(super) data_path: PathBuf,
    pub(super) data: File,
    /// Bytes written to the capture file (accepted, or waiting in the hasher).
    pub(super) written: u64,
    /// Capture-file bytes already handed to the kernel's write-back (see `start_writeback`).
    writeback_started: u64,
    /// The write-back thread, started with the first step of write-back.
    pub(super) writeback: Option<Writeback>,
    /// The hasher thread, started with the first large chunk.
    pub(super) hasher: Option<Hasher>,
    /// Piece buffers handed back by the hasher, to reuse.
    spare: Vec<Vec<u8>>,
    /// Whether pipes are spliced into the capture file; off once a splice failed (the copy
    /// path takes over and tells a pipe error from a capture one).
    pub(super) splice: bool,
    /// The buffer of `write_from_pipe`'s copy path.
    scratch: Vec<u8>,
    /// The first fault, once the stream failed.
    pub(super) failed: Option<StreamFault>,
}

impl StreamFiles {
    pub(super) fn create(
        dir: &Path,
        i: usize,
        label: String,
    ) -> Result<(Self, IndexFile), IoError> {
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
            writeback: None,
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
    pub(super) fn outstanding(&self) -> usize {
        self.hasher.as_ref().map_or(0, |h| h.outstanding)
    }

    /// Whether the hasher's pipeline has no room for a piece of `copy` bytes copied.
    fn pipeline_full(&self, copy: usize) -> bool {
        self.hasher.as_ref().is_some_and(|h| h.full(copy))
    }
}

/// What a capture has accepted so far ([`CaptureSession::progress`]): each stream's bytes and
/// lines, read without waiting for the capture (the counts are updated as each piece is
/// accepted, so they may lag the bytes written by a piece still being hashed). After the
/// capture is finished it keeps saying what it accepted last.
#[derive(Debug, Clone)]
pub struct CaptureProgress {
    names: Vec<String>,
    counts: Arc<[StreamCounts]>,
}

impl CaptureProgress {
    /// Each stream's counts so far, in declaration order.
    pub fn streams(&self) -> Vec<agentrun_core::StreamProgress> {
        self.names
            .iter()
            .zip(self.counts.iter())
            .map(|(name, c)| {
                agentrun_core::StreamProgress::new(
                    name.clone(),
                    c.lines.load(std::sync::atomic::Ordering::Relaxed),
                    c.bytes.load(std::sync::atomic::Ordering::Relaxed),
                )
            })
            .collect()
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
    pub(super) store: Store,
    pub(super) run_id: String,
    pub(super) accepting: Arc<Mutex<Accepting>>,
    /// Stream indexes already checked against the machine, so a write checks without taking
    /// the lock a hasher may hold. Only indexes of this session are added (one per stream).
    pub(super) checked: Vec<StreamIndex>,
    pub(super) streams: Vec<StreamFiles>,
    pub(super) run: Option<RunInfo>,
    /// Artifacts the record keeps besides the output ([`ResultRecord::keeps`](agentrun_core::ResultRecord::keeps)).
    pub(super) keeps: Vec<Digest>,
    /// The digests already in this capture's `protect` file, so a digest is written (and
    /// synced) once however often it is protected.
    pub(super) protected: HashSet<Digest>,
    /// The room set aside for publication; freed when it starts.
    pub(super) reserve: Option<Reserve>,
    /// What `live.json` says of this capture while it runs.
    pub(super) live: crate::live::LiveInfo,
    // Last, so the directory is removed after the files in it are closed (and the hasher
    // threads, which the streams join, have stopped).
    pub(super) dir: CaptureDir,
}

impl CaptureSession {
    /// Describes the process run this capture belongs to; the record will carry it
    /// ([`ResultRecord::run`](agentrun_core::ResultRecord::run)). A command longer than
    /// [`MAX_COMMAND_BYTES`](agentrun_core::process::MAX_COMMAND_BYTES) is refused
    /// ([`StoreError::CommandTooLong`]), as is a label or working directory past its bound
    /// ([`StoreError::RunFieldTooLong`]); the record then describes no run.
    pub fn describe_run(&mut self, run: RunInfo) -> Result<(), StoreError> {
        let bytes = agentrun_core::process::command_bytes(&run.command);
        if bytes > agentrun_core::process::MAX_COMMAND_BYTES {
            return Err(StoreError::CommandTooLong { bytes });
        }
        use agentrun_core::process::{MAX_CWD_BYTES, MAX_LABEL_BYTES};
        for (what, field, limit) in [
            ("label", &run.label, MAX_LABEL_BYTES),
            ("working directory", &run.cwd, MAX_CWD_BYTES),
        ] {
            if let Some(bytes) = field.as_ref().map(String::len).filter(|&n| n > limit) {
                return Err(StoreError::RunFieldTooLong { what, bytes, limit });
            }
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

    /// Names the command this capture is for while it runs, for listings of runs in
    /// progress ([`Store::live_runs`]); the record gets it from
    /// [`describe_run`](Self::describe_run). Best effort: a failure to say it only leaves the
    /// command out of those listings.
    pub fn announce_command(&mut self, command: &[String]) {
        self.live.command = Some(command.to_vec());
        let _ = self.live.write(&self.dir.path);
    }

    /// Like [`announce_command`](Self::announce_command), with the directory the run is in and
    /// its label, for the same listings.
    pub fn announce_run(&mut self, command: &[String], cwd: Option<&str>, label: Option<&str>) {
        self.live.command = Some(command.to_vec());
        self.live.cwd = cwd.map(str::to_owned);
        self.live.label = label.map(str::to_owned);
        let _ = self.live.write(&self.dir.path);
    }

    /// A handle on what this capture has accepted so far, to read from any thread while the
    /// capture goes on (a progress display); it never waits for the capture.
    pub fn progress(&self) -> CaptureProgress {
        CaptureProgress {
            names: self.live.streams.iter().map(|(_, n)| n.clone()).collect(),
            counts: self.accepting().counts.clone(),
        }
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
    pub(super) fn accepting(&self) -> MutexGuard<'_, Accepting> {
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
                // A hasher that is gone fails the stream; the bytes were taken all the same.
                let _ = self.send_piece(stream, Piece::InFile { offset, len });
                // After the hand-over, so the piece counts as waiting for the hasher: its
                // pages must stay in the page cache until the hasher has read them.
                start_writeback(&mut self.streams[stream.get()]);
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
    pub(super) fn settle(&mut self, stream: StreamIndex) -> Result<(), CaptureWriteError> {
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
    pub(super) fn fail(
        &mut self,
        stream: StreamIndex,
        what: &str,
        e: io::Error,
    ) -> CaptureWriteError {
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
pub(super) fn preallocate(path: &Path, room: u64) -> Result<(), IoError> {
    let file = layout::new_private_file().open(path).at("create", path)?;
    let _ = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, room);
    Ok(())
}
