//! Capture sessions: the file side of [`agentrun_core::Capture`].
//!
//! A [`CaptureSession`] owns `captures/<run_id>/`:
//!
//! * `lock`: held with an exclusive `flock` for the session's life; GC treats a directory
//!   whose lock it can take as left by a dead process and removes it;
//! * `s<i>` and `s<i>.idx`: the capture file and index temp file of declared stream `i`;
//! * `m` and `m.idx`: the manifest of named output, written at finish;
//! * `protect`: the digests being published, roots for any GC that runs while the lock is
//!   held.
//!
//! Every chunk is appended to its capture file **before** the core machine accepts it, so the
//! machine's digest, counts and index describe exactly the bytes on disk (a failed write is
//! cut back to the accepted length). Large chunks go through a writer thread per stream, one
//! piece at a time: piece N is written while piece N-1, already on disk, is hashed, so the two
//! costs overlap instead of adding up, and the core machine never sees a byte that is not on
//! disk. Memory stays bounded: per stream at most two pieces (the one being written and the
//! one being hashed) are kept; index entries go to the index file as soon as a block completes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use agentrun_core::capture::CaptureSummary;
use agentrun_core::digest::StreamingDigest;
use agentrun_core::index::{BlockIndexer, HEADER_LEN, IndexEntry};
use agentrun_core::process::RunInfo;
use agentrun_core::stream::StreamIndex;
use agentrun_core::{
    Capture, CaptureCompletion, CaptureError, CaptureStatus, Digest, OutputChannel,
    OutputDeclaration, PreviewLimits, ResultRecord,
};

use crate::atomic::{self, fsync_dir, publish_object, write_atomic};
use crate::error::{IoContext, IoError};
use crate::layout::{self, RECORD_SUFFIX};
use crate::lock::GcLock;
use crate::store::{Store, StoreError};

/// Chunks at least this large go through the stream's writer thread (see `CaptureSession::write`);
/// below it a thread hand-off costs more than the overlap saves, and the chunk is written inline.
const PIPELINE_CHUNK: usize = 64 * 1024;

/// Largest piece handed to a writer thread at once: bounds the copy kept per stream.
const PIPELINE_PIECE: usize = 1 << 20;

/// A stream's writer thread: appends each piece it is handed to the capture file, in order,
/// and hands it back with the result. One piece is in flight at a time.
#[derive(Debug)]
struct Writer {
    pieces: Option<mpsc::SyncSender<Vec<u8>>>,
    written: mpsc::Receiver<(Vec<u8>, io::Result<()>)>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Writer {
    fn spawn(mut file: File) -> io::Result<Self> {
        let (pieces, to_write) = mpsc::sync_channel::<Vec<u8>>(1);
        let (done, written) = mpsc::sync_channel(1);
        let thread = thread::Builder::new()
            .name("agentrun-capture-writer".to_owned())
            .spawn(move || {
                for piece in to_write {
                    let result = file.write_all(&piece);
                    if done.send((piece, result)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            pieces: Some(pieces),
            written,
            thread: Some(thread),
        })
    }

    fn send(&self, piece: Vec<u8>) -> io::Result<()> {
        self.pieces
            .as_ref()
            .and_then(|p| p.send(piece).ok())
            .ok_or_else(|| io::Error::other("the capture writer thread is gone"))
    }

    /// Waits for the piece in flight: its bytes, and whether they are on disk.
    fn wait(&self) -> (Vec<u8>, io::Result<()>) {
        self.written.recv().unwrap_or_else(|_| {
            (
                Vec::new(),
                Err(io::Error::other("the capture writer thread is gone")),
            )
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.pieces.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Dirty capture bytes after which write-back to disk is started (see `start_writeback`).
const WRITEBACK_STEP: u64 = 16 << 20;

/// Starts the kernel's write-back of the capture file up to `written` in steps, so the `fsync`
/// before publication finds little left to write instead of the whole output. `DONTNEED`
/// starts asynchronous write-back of dirty pages (and drops pages already clean); it never
/// blocks on the disk. Best effort: a failure only makes the final `fsync` longer.
fn start_writeback(files: &mut StreamFiles, written: u64) {
    let pending = written - files.writeback_started;
    if pending < WRITEBACK_STEP {
        return;
    }
    let _ = rustix::fs::fadvise(
        &files.data,
        files.writeback_started,
        std::num::NonZeroU64::new(pending),
        rustix::fs::Advice::DontNeed,
    );
    files.writeback_started = written;
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
        let capture = Capture::new(declaration, limits)?;
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
            Ok(lock) => CaptureDir { path, _lock: lock },
            Err(e) => {
                let _ = fs::remove_dir_all(&path);
                return Err(e.into());
            }
        };
        let streams = capture
            .declaration()
            .indexes()
            .map(|ix| StreamFiles::create(&dir.path, ix.get(), label(capture.declaration(), ix)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CaptureSession {
            store: self.clone(),
            run_id,
            capture,
            streams,
            run: None,
            keeps: Vec::new(),
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
}

impl Drop for CaptureDir {
    fn drop(&mut self) {
        // Removed while the lock is still held (the field drops after this), so a concurrent
        // GC never sees a lock-free directory that is still in use.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// One stream's capture file and index temp file.
#[derive(Debug)]
struct StreamFiles {
    label: String,
    data_path: PathBuf,
    data: File,
    index_path: PathBuf,
    index: File,
    /// Index entries appended so far (the next entry's block number).
    entries_written: u64,
    /// Capture-file bytes already handed to the kernel's write-back (see `start_writeback`).
    writeback_started: u64,
    /// Set once writing the index failed: the index is rebuilt from the capture file at
    /// finish instead.
    index_broken: bool,
    /// The writer thread, started with the first large chunk.
    writer: Option<Writer>,
    /// Whether a piece is in flight in the writer (written, not yet hashed).
    in_flight: bool,
    /// A piece buffer to reuse.
    spare: Vec<u8>,
    /// The first write error, once the stream failed.
    failed: Option<(io::ErrorKind, String)>,
}

impl StreamFiles {
    fn create(dir: &Path, i: usize, label: String) -> Result<Self, IoError> {
        let data_path = dir.join(format!("s{i}"));
        let index_path = dir.join(format!("s{i}.idx"));
        let data = layout::new_private_file()
            .open(&data_path)
            .at("create", &data_path)?;
        let mut index = layout::new_private_file()
            .open(&index_path)
            .at("create", &index_path)?;
        // Room for the header, which is only known at finish; entries follow it.
        index
            .write_all(&[0u8; HEADER_LEN])
            .at("write", &index_path)?;
        Ok(Self {
            label,
            data_path,
            data,
            index_path,
            index,
            entries_written: 0,
            writeback_started: 0,
            index_broken: false,
            writer: None,
            in_flight: false,
            spare: Vec::new(),
            failed: None,
        })
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
    capture: Capture,
    streams: Vec<StreamFiles>,
    run: Option<RunInfo>,
    /// Artifacts the record keeps besides the output ([`ResultRecord::keeps`]).
    keeps: Vec<Digest>,
    // Last, so the directory is removed after the files in it are closed.
    dir: CaptureDir,
}

impl CaptureSession {
    /// Describes the process run this capture belongs to; the record will carry it
    /// ([`ResultRecord::run`]).
    pub fn describe_run(&mut self, run: RunInfo) {
        self.run = Some(run);
    }

    /// Makes the record keep these artifacts too (GC roots them with the output). The caller
    /// must have them protected by this session ([`protect_more`](Self::protect_more)) or
    /// published through it ([`finish_kept_by`](Self::finish_kept_by)).
    pub(crate) fn keep(&mut self, digests: impl IntoIterator<Item = Digest>) {
        for digest in digests {
            if !self.keeps.contains(&digest) {
                self.keeps.push(digest);
            }
        }
    }

    /// Adds digests to this live capture's protection: no GC removes them while the session
    /// lives, so a record written by it may reference them.
    pub(crate) fn protect_more(&self, digests: &[Digest]) -> Result<(), StoreError> {
        let _gc = GcLock::shared(&self.store.layout)?;
        protect(&self.dir.path, digests)
    }

    /// Ends the capture like [`finish`](Self::finish) (streamed, succeeded) but writes no
    /// record: what it publishes is protected by `keeper`, a live session whose record will
    /// keep it. Returns the digest of the output (single output only).
    pub(crate) fn finish_kept_by(self, keeper: &CaptureSession) -> Result<Digest, StoreError> {
        let record = self.finalize(None, CaptureStatus::Succeeded, Some(&keeper.dir.path))?;
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

    /// The stream a chunk for `channel` goes to. A channel that does not fit the declaration is
    /// [`CaptureWriteError::Rejected`]; a stream that already failed gives its
    /// [`CaptureWriteError::Io`] again.
    pub fn resolve(&self, channel: &OutputChannel) -> Result<StreamIndex, CaptureWriteError> {
        let ix = self
            .capture
            .declaration()
            .resolve(channel)
            .map_err(CaptureError::from)?;
        match self.streams[ix.get()].failed_error() {
            Some(e) => Err(e),
            None => Ok(ix),
        }
    }

    /// Appends `bytes` to stream `stream`: capture file first, then the core machine, then the
    /// index entries of every block the chunk completed. Blocks until the bytes are written
    /// (backpressure, never dropping), except that the last piece of a large chunk may still
    /// be in the writer thread when this returns: a write error is reported by this call or,
    /// for that piece, by the next call on the stream; either way the fault is recorded (the
    /// record says incomplete) and [`finish`](Self::finish) publishes only bytes on disk.
    ///
    /// # Panics
    ///
    /// A `stream` that is not one of this session's (an index from another session with more
    /// streams) is [`CaptureWriteError::Rejected`] with [`CaptureError::ForeignStream`], and
    /// nothing is written.
    pub fn write(&mut self, stream: StreamIndex, bytes: &[u8]) -> Result<(), CaptureWriteError> {
        self.capture.check_stream(stream)?;
        if let Some(e) = self.streams[stream.get()].failed_error() {
            return Err(e);
        }
        if bytes.is_empty() {
            return Ok(());
        }
        if bytes.len() < PIPELINE_CHUNK {
            self.settle(stream)?;
            let accepted = self.capture.stream_bytes(stream);
            if let Err(e) = self.streams[stream.get()].data.write_all(bytes) {
                return Err(self.cut_back(stream, accepted, "writing the capture file", e));
            }
            return self.accept(stream, bytes);
        }
        for piece in bytes.chunks(PIPELINE_PIECE) {
            // The previous piece must be on disk before the next one starts, and is hashed
            // while the next one is written.
            let previous = self.take_written(stream)?;
            let files = &mut self.streams[stream.get()];
            let mut buf = std::mem::take(&mut files.spare);
            buf.clear();
            buf.extend_from_slice(piece);
            let sent = match &files.writer {
                Some(writer) => writer.send(buf),
                None => files
                    .data
                    .try_clone()
                    .and_then(Writer::spawn)
                    .and_then(|writer| writer.send(buf).map(|()| writer))
                    .map(|writer| files.writer = Some(writer)),
            };
            if let Err(e) = sent {
                return Err(self.fail(stream, "starting the capture writer", e));
            }
            self.streams[stream.get()].in_flight = true;
            if let Some(previous) = previous {
                let accepted = self.accept(stream, &previous);
                self.streams[stream.get()].spare = previous;
                accepted?;
            }
        }
        Ok(())
    }

    /// Waits for the piece in flight on `stream`, if any: `Some(bytes)` once they are on disk
    /// (not yet hashed); a write error cuts the file back and fails the stream.
    fn take_written(&mut self, stream: StreamIndex) -> Result<Option<Vec<u8>>, CaptureWriteError> {
        let files = &mut self.streams[stream.get()];
        let Some(writer) = files.writer.as_ref().filter(|_| files.in_flight) else {
            return Ok(None);
        };
        let (piece, result) = writer.wait();
        files.in_flight = false;
        if files.failed.is_some() {
            // The stream failed meanwhile: the piece is not accepted (finish cuts the file
            // back to the accepted bytes).
            return Ok(None);
        }
        match result {
            Ok(()) => Ok(Some(piece)),
            Err(e) => {
                let accepted = self.capture.stream_bytes(stream);
                Err(self.cut_back(stream, accepted, "writing the capture file", e))
            }
        }
    }

    /// Hashes the piece in flight on `stream` once it is on disk, so the machine describes
    /// every byte written.
    fn settle(&mut self, stream: StreamIndex) -> Result<(), CaptureWriteError> {
        if let Some(previous) = self.take_written(stream)? {
            let accepted = self.accept(stream, &previous);
            self.streams[stream.get()].spare = previous;
            accepted?;
        }
        Ok(())
    }

    /// A write failed: a partial write may have appended part of the chunk, so the file is cut
    /// back to exactly the accepted bytes (finish checks this again), and the stream fails.
    fn cut_back(
        &mut self,
        stream: StreamIndex,
        accepted: u64,
        what: &str,
        e: io::Error,
    ) -> CaptureWriteError {
        let _ = self.streams[stream.get()].data.set_len(accepted);
        self.fail(stream, what, e)
    }

    /// `bytes` are on disk after the accepted ones: the machine takes them, and the index
    /// entries of every block they completed go to the index file.
    fn accept(&mut self, stream: StreamIndex, bytes: &[u8]) -> Result<(), CaptureWriteError> {
        self.capture.handle_chunk(stream, bytes);
        let written = self.capture.stream_bytes(stream);
        start_writeback(&mut self.streams[stream.get()], written);
        while let Some(entry) = self.capture.poll_index_entry(stream) {
            let files = &mut self.streams[stream.get()];
            if files.index_broken {
                continue; // rebuilt at finish; keep draining so memory stays bounded
            }
            match files.index.write_all(&entry.encode(files.entries_written)) {
                Ok(()) => files.entries_written += 1,
                Err(e) => {
                    // The chunk itself is on disk and accepted; only the index is lost, and
                    // finish rebuilds it from the capture file. The stream still stops, as
                    // for any capture fault, so the failure is not silent.
                    files.index_broken = true;
                    let err = self.fail(stream, "writing the line index", e);
                    while self.capture.poll_index_entry(stream).is_some() {}
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Records a capture fault in the machine and in the stream's state.
    fn fail(&mut self, stream: StreamIndex, what: &str, e: io::Error) -> CaptureWriteError {
        let message = format!("{what} failed: {e}");
        self.capture.handle_capture_error(Some(stream), &message);
        let files = &mut self.streams[stream.get()];
        files.failed = Some((e.kind(), message));
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
            self.capture.check_stream(ix)?;
            // The piece in flight is on disk or failed; either way it is accounted for before
            // the stream stops accepting bytes.
            let _ = self.settle(ix);
            let files = &mut self.streams[ix.get()];
            if files.failed.is_none() {
                files.failed = Some((io::ErrorKind::Other, message.to_owned()));
            }
        }
        self.capture.handle_capture_error(stream, message);
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
        self.capture.handle_display(text);
    }

    /// Ends the capture: finalizes every stream, publishes the artifacts (and the manifest of
    /// named output), persists the record, then removes the capture directory.
    ///
    /// A [`CaptureCompletion::Full`] after streamed chunks is refused with
    /// [`StoreError::Capture`] (mixed completion modes). Capture faults do not fail `finish`:
    /// the record is marked incomplete and the accepted bytes are published.
    pub fn finish(mut self, completion: CaptureCompletion) -> Result<ResultRecord, StoreError> {
        let (display, status) = match completion {
            CaptureCompletion::Streamed { display, status } => (display, status),
            CaptureCompletion::Full {
                display,
                status,
                outputs,
            } => match self.capture.begin_full(outputs) {
                Ok(feeds) => {
                    for (ix, bytes) in feeds {
                        // A write fault is recorded in the machine (the record will say
                        // incomplete); the other outputs are still captured.
                        let _ = self.write(ix, &bytes);
                    }
                    (display, status)
                }
                Err(error) => {
                    // The completion is refused, but what was streamed must not be lost with
                    // it: keep it as a failed, incomplete run and say where it is.
                    self.capture.handle_capture_error(None, &error.to_string());
                    let run_id = self.run_id.clone();
                    self.finalize(display, CaptureStatus::Failed, None)?;
                    return Err(StoreError::CompletionRejected { error, run_id });
                }
            },
        };
        self.finalize(display, status, None)
    }

    /// Publishes the output and writes the record, or with `keeper` (the directory of a live
    /// capture whose record will keep the output) publishes under the keeper's protection and
    /// writes no record.
    fn finalize(
        mut self,
        display: Option<String>,
        status: CaptureStatus,
        keeper: Option<&Path>,
    ) -> Result<ResultRecord, StoreError> {
        // The pieces still in the writers: on disk and hashed, or the fault recorded.
        for ix in self.capture.declaration().indexes() {
            let _ = self.settle(ix);
        }
        let CaptureSession {
            store,
            run_id,
            capture,
            mut streams,
            run: run_info,
            keeps,
            dir,
        } = self;
        let summary = capture.finish(display, status);
        for (files, s) in streams.iter_mut().zip(&summary.streams) {
            seal_stream(files, s)?;
        }
        let manifest = write_manifest(&dir.path, &summary)?;

        let layout = &store.layout;
        let gc = GcLock::shared(layout)?;
        let mut digests: Vec<Digest> = summary.streams.iter().map(|s| s.digest).collect();
        digests.extend(manifest.as_ref().map(|(d, _, _)| *d));
        protect(keeper.unwrap_or(&dir.path), &digests)?;
        for (files, s) in streams.iter().zip(&summary.streams) {
            publish_object(layout, &s.digest, &files.data_path, &files.index_path)?;
        }
        if let Some((digest, data, index)) = &manifest {
            publish_object(layout, digest, data, index)?;
        }
        // The record goes last: once it exists, everything it references is published. It is
        // written before the GC lock and the capture lock (the protection) are released.
        let mut record = ResultRecord::from_summary(run_id.clone(), &summary);
        record.run = run_info;
        record.keeps = keeps;
        if keeper.is_some() {
            drop(gc);
            drop(streams);
            drop(dir);
            return Ok(record);
        }
        let json = serde_json::to_vec_pretty(&record).map_err(io::Error::other);
        let json = json.at("serialize the record of", &layout.record(&run_id))?;
        write_atomic(
            &layout.records(),
            &format!("{run_id}{RECORD_SUFFIX}"),
            &json,
        )?;
        crate::fault::point("after the record, before the capture directory is removed");
        drop(gc);
        drop(streams);
        drop(dir);
        Ok(record)
    }
}

/// Makes a stream's capture file and index temp file final and durable.
fn seal_stream(
    files: &mut StreamFiles,
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
    let complete =
        files.entries_written + s.index_entries.len() as u64 == s.index_header.block_count();
    if files.index_broken || !complete {
        rebuild_index(files, s.digest)?;
    } else {
        for (k, entry) in s.index_entries.iter().enumerate() {
            let block = files.entries_written + k as u64;
            files
                .index
                .write_all(&entry.encode(block))
                .at("write", &files.index_path)?;
        }
        files
            .index
            .write_all_at(&header, 0)
            .at("write", &files.index_path)?;
    }
    atomic::sync_file(&files.data, &files.data_path)?;
    atomic::sync_file(&files.index, &files.index_path)?;
    Ok(())
}

/// Rewrites a stream's index from its capture file, after the incremental index was lost to a
/// write error. Also checks that the file still hashes to the digest the machine computed.
fn rebuild_index(files: &mut StreamFiles, digest: Digest) -> Result<(), StoreError> {
    let path = files.data_path.clone();
    let mut data = File::open(&path).at("open", &path)?;
    let mut indexer = BlockIndexer::default();
    let mut hasher = StreamingDigest::default();
    let mut buf = vec![0u8; agentrun_core::index::BLOCK_SIZE as usize];
    let mut entries: Vec<IndexEntry> = Vec::new();
    let idx_path = files.index_path.clone();
    let mut index = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&idx_path)
        .at("open", &idx_path)?;
    index.write_all(&[0u8; HEADER_LEN]).at("write", &idx_path)?;
    let mut block = 0u64;
    loop {
        let n = data.read(&mut buf).at("read", &path)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        indexer.update(&buf[..n]);
        entries.extend(std::iter::from_fn(|| indexer.poll_entry()));
        for e in entries.drain(..) {
            index.write_all(&e.encode(block)).at("write", &idx_path)?;
            block += 1;
        }
    }
    if hasher.finish() != digest {
        let e = io::Error::other("the capture file no longer matches the bytes accepted");
        return Err(IoError::at("rebuild the index of", &path, e).into());
    }
    let (rest, header) = indexer.finish(digest);
    for e in rest {
        index.write_all(&e.encode(block)).at("write", &idx_path)?;
        block += 1;
    }
    index.seek(SeekFrom::Start(0)).at("seek", &idx_path)?;
    index.write_all(&header.encode()).at("write", &idx_path)?;
    atomic::sync_file(&index, &idx_path)?;
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
    atomic::write_new_file(&data, &bytes)?;
    atomic::write_new_file(&index, &sidecar)?;
    Ok(Some((digest, data, index)))
}

/// Appends the digests about to be published to the capture's `protect` file.
fn protect(dir: &Path, digests: &[Digest]) -> Result<(), StoreError> {
    let path = dir.join("protect");
    let mut f = layout::append_private_file(&path)?;
    let text: String = digests.iter().map(|d| format!("{d}\n")).collect();
    f.write_all(text.as_bytes()).at("write", &path)?;
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

    fn read_stream(store: &Store, record: &ResultRecord, name: &str) -> Vec<u8> {
        let uri = record.stream_uri(record.stream(name).unwrap());
        store.read_page(&uri, PageRequest::default()).unwrap().bytes
    }

    #[test]
    fn a_stream_index_of_another_session_is_a_typed_error_not_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
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
    fn a_fault_recorded_by_the_caller_marks_the_record_and_keeps_the_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let mut s = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        let stdout = s.resolve(&named("stdout")).unwrap();
        // A large chunk leaves its last piece in the writer thread: it must be kept.
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
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
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

    /// A session whose next large chunk goes to a writer on a read-only file, after `kept`
    /// went through a working writer.
    fn session_with_a_broken_writer(store: &Store, kept: &[u8]) -> (CaptureSession, StreamIndex) {
        let mut s = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let ix = s.resolve(&OutputChannel::Single).unwrap();
        s.write(ix, kept).unwrap();
        s.settle(ix).unwrap();
        let read_only = File::open(&s.streams[0].data_path).unwrap();
        s.streams[0].writer = Some(Writer::spawn(read_only).unwrap());
        (s, ix)
    }

    fn assert_only_kept(store: &Store, record: &ResultRecord, kept: &[u8]) {
        assert!(record.incomplete);
        let stream = &record.streams()[0];
        assert_eq!(stream.sha256, Digest::of(kept));
        assert_eq!((stream.bytes, stream.lines), (kept.len() as u64, 1));
        assert!(!stream.preview.text.contains('x'));
        let mut stored = Vec::new();
        store.copy_to(&record.output_uri(), &mut stored).unwrap();
        assert_eq!(stored, kept);
    }

    #[test]
    fn a_failed_piece_is_reported_by_the_next_write_and_never_hashed() {
        // Large chunks are hashed only once the writer thread has them on disk; a failed
        // write must leave the digest, counts and preview describing only the bytes on disk.
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let kept = vec![b'k'; PIPELINE_CHUNK + 1];
        let (mut s, ix) = session_with_a_broken_writer(&store, &kept);
        let lost = vec![b'x'; 2 * PIPELINE_CHUNK];
        // The last piece may still be in flight when the call returns: its error comes with
        // the next call on the stream.
        let first = s.write(ix, &lost);
        let second = s.write(ix, b"more\n");
        assert!(first.is_err() || second.is_err(), "{first:?} {second:?}");
        assert!(matches!(second, Err(CaptureWriteError::Io { .. })));
        let record = s.finish(done()).unwrap();
        assert_only_kept(&store, &record, &kept);
    }

    #[test]
    fn a_piece_still_in_flight_at_finish_is_settled_first() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let kept = vec![b'k'; 10];
        let (mut s, ix) = session_with_a_broken_writer(&store, &kept);
        // One piece: nothing waits for it before finish.
        s.write(ix, &vec![b'x'; PIPELINE_CHUNK]).unwrap();
        let record = s.finish(done()).unwrap();
        assert_only_kept(&store, &record, &kept);
        assert_eq!(record.faults.len(), 1);
    }

    #[test]
    fn pieces_large_and_small_arrive_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let mut s = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let ix = s.resolve(&OutputChannel::Single).unwrap();
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
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let mut s = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let path = s.streams[0].index_path.clone();
        s.streams[0].index = File::open(&path).unwrap();
        let content: Vec<u8> = (0..30_000)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        // The index error comes from this call or, with the chunk's piece still in the
        // writer, when finish settles it: either way it is recorded.
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
