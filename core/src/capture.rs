//! The capture state machine: deltas or a full completion in, a summary out.
//!
//! A [`Capture`] follows one tool invocation's output from the first delta to the terminal
//! completion. It never touches a file: the driver (agentrun-fs's `CaptureSession`) writes
//! each accepted chunk to the stream's capture file and then tells the machine about it.
//!
//! # Driving order
//!
//! 1. [`Capture::new`] with the tool's [`OutputDeclaration`] and [`PreviewLimits`].
//! 2. For every delta:
//!    1. [`Capture::resolve`] the delta's [`OutputChannel`]; an error rejects the whole delta
//!       (undeclared stream, named chunk on single output, …) and changes nothing.
//!    2. Append the chunk to that stream's capture file. On a write error call
//!       [`Capture::handle_capture_error`] and stop writing that stream.
//!    3. Otherwise [`Capture::handle_chunk`]; then drain [`Capture::poll_index_entry`] for the
//!       stream and append each entry to its index file.
//!    4. If the delta has display text, [`Capture::handle_display`].
//!
//!    The machine must only describe bytes that are on disk, so a driver that overlaps writing
//!    and hashing (for throughput) hashes a chunk only once its write succeeded, for example
//!    while the next chunk is being written.
//! 3. For a non-streaming tool, instead of deltas: [`Capture::begin_full`] (rejects mixed
//!    mode), then each supplied output goes through step 2.1–2.3.
//! 4. [`Capture::finish`] with the final display and status consumes the machine and returns a
//!    [`CaptureSummary`]: digests, counts, bounded previews and the last index entries.
//!
//! Memory stays bounded whatever the output size: per stream the machine keeps a preview prefix
//! of at most `max_bytes` bytes, an optional tail window of the same size, and the index
//! entries not yet drained.

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, StreamingDigest};
use crate::index::{BlockIndexer, IndexEntry, IndexHeader};
use crate::limits::{LimitsError, PreviewLimits};
use crate::manifest::{Manifest, ManifestEntry};
use crate::stream::{
    BoundDeclaration, OutputChannel, OutputChannelError, OutputDeclaration, StreamIndex, StreamName,
};

/// Default bound of the live display, in bytes.
pub const DEFAULT_DISPLAY_BYTES: usize = 64 * 1024;

/// Longest final display a completion may give, in bytes: 1 MiB. The display is a short
/// summary for a UI (the output itself is kept in full), and it goes into the record, whose
/// size is bounded ([`MAX_RECORD_BYTES`](crate::record::MAX_RECORD_BYTES)).
pub const MAX_DISPLAY_BYTES: usize = 1 << 20;

/// Longest capture-fault message kept, in bytes.
pub const MAX_FAULT_BYTES: usize = 256;

/// Most capture faults a capture keeps. Later ones still mark the output incomplete and end
/// their stream; they are counted, and one last fault says how many were not kept.
pub const MAX_FAULTS: usize = 32;

/// Terminal status of a tool invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CaptureStatus {
    /// The tool finished normally.
    Succeeded,
    /// The tool failed; what it produced is kept, marked incomplete.
    Failed,
    /// The invocation was cancelled; what it produced is kept, marked incomplete.
    Cancelled,
}

impl CaptureStatus {
    /// Lowercase name, as in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Outputs supplied once by a tool that does not stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FullOutput {
    /// The single output.
    Single(Vec<u8>),
    /// Named outputs; streams left out are retained empty.
    Named(Vec<(StreamName, Vec<u8>)>),
}

/// How an invocation ends. The two variants make the completion modes unambiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureCompletion {
    /// Finalize the chunks already accepted; nothing is resent.
    Streamed {
        /// Final display; replaces the live display. `None` keeps the live display.
        display: Option<String>,
        /// Terminal status.
        status: CaptureStatus,
    },
    /// Supply the whole output once. Rejected after any accepted chunk (mixed mode).
    Full {
        /// Final display; replaces the live display.
        display: Option<String>,
        /// Terminal status.
        status: CaptureStatus,
        /// The outputs.
        outputs: FullOutput,
    },
}

/// Why the capture machine refused an input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The chunk's channel does not fit the declaration.
    #[error(transparent)]
    OutputChannel(#[from] OutputChannelError),
    /// A full completion after streamed chunks.
    #[error(
        "mixed completion modes: chunks were already streamed, so the output cannot be \
         resupplied in full; finish with a streamed completion instead"
    )]
    MixedCompletion,
    /// A second full completion, or a chunk after a full completion.
    #[error("the full output was already supplied; a completion supplies it exactly once")]
    FullSuppliedTwice,
    /// The final display of a completion is longer than [`MAX_DISPLAY_BYTES`].
    #[error(
        "the final display is {bytes} bytes; it may be at most {MAX_DISPLAY_BYTES} (1 MiB): \
         give a short summary, the output itself is kept in full"
    )]
    DisplayTooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// A full completion names a stream twice.
    #[error("full output supplies stream \"{0}\" twice")]
    DuplicateFullOutput(StreamName),
    /// The limits cannot be honoured.
    #[error(transparent)]
    Limits(#[from] LimitsError),
    /// A stream index that this capture did not issue: it came from another capture (or
    /// capture session), whatever its number of streams. Nothing was recorded or written.
    #[error(
        "stream index {index} is not a stream of this capture (it was issued by another \
         capture; this one has {streams} stream(s)); resolve the channel on this capture and \
         use the index it returns"
    )]
    ForeignStream {
        /// Position of the refused index within its own capture's declaration.
        index: usize,
        /// How many streams this capture has.
        streams: usize,
    },
}

/// Something that went wrong while capturing; the output is then incomplete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureFault {
    /// Affected stream, when the fault is specific to one.
    pub stream: Option<StreamName>,
    /// What happened (at most [`MAX_FAULT_BYTES`]).
    pub message: String,
}

/// The display shown live in a UI: appended text, bounded, newest text kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveDisplay {
    text: String,
    cap: usize,
    dropped: bool,
}

impl LiveDisplay {
    /// A display keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
            dropped: false,
        }
    }

    /// Appends text, dropping the oldest text beyond the bound (on a character boundary).
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        if self.text.len() > self.cap {
            let mut cut = self.text.len() - self.cap;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.dropped = true;
        }
    }

    /// The current text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether older text was dropped to respect the bound.
    pub fn dropped(&self) -> bool {
        self.dropped
    }
}

/// A window over the end of a stream, for the optional tail view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailWindow {
    /// The last bytes of the stream (at most the window size).
    pub bytes: Vec<u8>,
    /// Stream offset of `bytes[0]`.
    pub start: u64,
    /// Lines before `bytes[0]` (the number of `\n` in the stream before it).
    pub newlines_before: u64,
}

/// The end of a stream, kept for the tail view: at least the last `cap` bytes (all of a
/// shorter stream), at most `2 * cap`.
#[derive(Debug)]
struct TailCapture {
    cap: usize,
    window: TailWindow,
}

impl TailCapture {
    fn push(&mut self, chunk: &[u8]) {
        let w = &mut self.window;
        if chunk.len() >= self.cap {
            // Only the chunk's own end can be in the window: drop the rest unseen, without
            // copying the chunk (time stays linear in the output whatever the window size).
            // Newlines are not counted here: the block indexer counts every byte once, and
            // `finish` takes the lines before the window from its total.
            let (dropped, kept) = chunk.split_at(chunk.len() - self.cap);
            w.start += (w.bytes.len() + dropped.len()) as u64;
            w.bytes.clear();
            w.bytes.extend_from_slice(kept);
            return;
        }
        w.bytes.extend_from_slice(chunk);
        // Trim lazily to twice the window so each byte is moved O(1) times on average.
        if w.bytes.len() > 2 * self.cap {
            self.trim();
        }
    }

    /// Drops all but the last `cap` bytes.
    fn trim(&mut self) {
        let w = &mut self.window;
        let drop = w.bytes.len().saturating_sub(self.cap);
        w.start += drop as u64;
        w.bytes.drain(..drop);
    }

    /// The window, given the stream's newline count: the lines before the window are what
    /// the window does not hold.
    fn finish(mut self, newlines: u64) -> TailWindow {
        self.trim();
        self.window.newlines_before = newlines - count_newlines(&self.window.bytes);
        self.window
    }
}

fn count_newlines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

#[derive(Debug)]
struct StreamCapture {
    digest: StreamingDigest,
    indexer: BlockIndexer,
    head: Vec<u8>,
    head_cap: usize,
    head_line_cap: u64,
    head_newlines: u64,
    /// Stream offset of the first `\n` after the retained head: with the head, where the
    /// first line a preview does not show in full ends, for its continuation.
    newline_after_head: Option<u64>,
    tail: Option<TailCapture>,
}

impl StreamCapture {
    fn new(limits: &PreviewLimits, streams: usize) -> Self {
        let head_cap = limits.retained_head_bytes(streams);
        Self {
            digest: StreamingDigest::default(),
            indexer: BlockIndexer::default(),
            head: Vec::new(),
            head_cap,
            head_line_cap: limits.max_lines,
            head_newlines: 0,
            newline_after_head: None,
            tail: (limits.tail_lines > 0).then(|| TailCapture {
                cap: limits.tail_window_bytes(streams),
                window: TailWindow::default(),
            }),
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let before = self.indexer.total_bytes();
        self.digest.update(chunk);
        self.indexer.update(chunk);
        // Keep the head until it holds max_lines lines or max_bytes bytes: no preview can
        // show more. A later line limit would never reach further.
        let mut rest = chunk;
        while self.head.len() < self.head_cap
            && self.head_newlines < self.head_line_cap
            && !rest.is_empty()
        {
            let room = self.head_cap - self.head.len();
            let take = match memchr::memchr(b'\n', &rest[..room.min(rest.len())]) {
                Some(i) => {
                    self.head_newlines += 1;
                    i + 1
                }
                None => room.min(rest.len()),
            };
            self.head.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        // Bytes left over are past the head (it is full): look for the first newline there
        // until one is found (memchr, so even a stream without one costs little).
        if self.newline_after_head.is_none()
            && let Some(i) = memchr::memchr(b'\n', rest)
        {
            let at = chunk.len() - rest.len() + i;
            self.newline_after_head = Some(before + at as u64);
        }
        if let Some(tail) = &mut self.tail {
            tail.push(chunk);
        }
    }
}

/// Per-stream facts at finalization.
#[derive(Debug, Clone)]
pub struct StreamSummary {
    /// Stream name (`None` for single output).
    pub name: Option<StreamName>,
    /// SHA-256 of the stream.
    pub digest: Digest,
    /// Length in bytes.
    pub bytes: u64,
    /// Line count.
    pub lines: u64,
    /// The retained head (a prefix of the stream, within the limits).
    pub head: Vec<u8>,
    /// The retained tail window, when the tail view is on.
    pub tail: Option<TailWindow>,
    /// Stream offset of the first `\n` after the retained head (`None`: there is none).
    pub newline_after_head: Option<u64>,
    /// Index entries not yet drained, in block order (the last partial block included).
    pub index_entries: Vec<IndexEntry>,
    /// The index header.
    pub index_header: IndexHeader,
}

impl StreamSummary {
    /// Whether the retained head is the whole stream.
    pub fn head_is_complete(&self) -> bool {
        self.head.len() as u64 == self.bytes
    }
}

/// Everything known at finalization: the input to publication and to the result record.
#[derive(Debug, Clone)]
pub struct CaptureSummary {
    /// The declaration.
    pub declaration: OutputDeclaration,
    /// The limits the capture ran with.
    pub limits: PreviewLimits,
    /// Terminal status.
    pub status: CaptureStatus,
    /// Final display (the final display given at completion, else the live display).
    pub display: String,
    /// Capture faults, in the order they happened: at most [`MAX_FAULTS`], then one saying
    /// how many more were not kept.
    pub faults: Vec<CaptureFault>,
    /// Streams in declaration order.
    pub streams: Vec<StreamSummary>,
}

impl CaptureSummary {
    /// Whether the output must be presented as incomplete.
    pub fn incomplete(&self) -> bool {
        self.status != CaptureStatus::Succeeded || !self.faults.is_empty()
    }

    /// The manifest of named output (`None` for single output).
    pub fn manifest(&self) -> Option<Manifest> {
        match &self.declaration {
            OutputDeclaration::Single => None,
            OutputDeclaration::Named(_) => Some(Manifest::new(
                self.streams
                    .iter()
                    .filter_map(|s| {
                        Some(ManifestEntry {
                            name: s.name.clone()?,
                            sha256: s.digest,
                            bytes: s.bytes,
                            lines: s.lines,
                        })
                    })
                    .collect(),
            )),
        }
    }
}

/// The capture state machine; see the module documentation for the driving order.
#[derive(Debug)]
#[must_use = "a capture machine does nothing unless fed and finished"]
pub struct Capture {
    declaration: BoundDeclaration,
    limits: PreviewLimits,
    streams: Vec<StreamCapture>,
    failed: Vec<bool>,
    display: LiveDisplay,
    faults: Vec<CaptureFault>,
    /// Faults past [`MAX_FAULTS`]: counted, not kept.
    faults_not_kept: u64,
    accepted_chunk: bool,
    full_started: bool,
}

impl Capture {
    /// Starts capturing for `declaration` under `limits` (validated here).
    pub fn new(declaration: OutputDeclaration, limits: PreviewLimits) -> Result<Self, LimitsError> {
        Self::with_display_bound(declaration, limits, DEFAULT_DISPLAY_BYTES)
    }

    /// Like [`Capture::new`] with a custom live-display bound, at most [`MAX_DISPLAY_BYTES`]
    /// (the live display becomes the record's display when no final one is given).
    pub fn with_display_bound(
        declaration: OutputDeclaration,
        limits: PreviewLimits,
        display_bytes: usize,
    ) -> Result<Self, LimitsError> {
        limits.validate()?;
        if display_bytes > MAX_DISPLAY_BYTES {
            return Err(LimitsError::DisplayBoundTooLarge(display_bytes));
        }
        let n = declaration.channel_count();
        Ok(Self {
            streams: (0..n).map(|_| StreamCapture::new(&limits, n)).collect(),
            failed: vec![false; n],
            declaration: BoundDeclaration::new(declaration),
            limits,
            display: LiveDisplay::new(display_bytes),
            faults: Vec::new(),
            faults_not_kept: 0,
            accepted_chunk: false,
            full_started: false,
        })
    }

    /// The declaration, bound to this capture: its `resolve` and `indexes` issue indexes
    /// that only this capture accepts.
    pub fn declaration(&self) -> &BoundDeclaration {
        &self.declaration
    }

    /// The limits.
    pub fn limits(&self) -> &PreviewLimits {
        &self.limits
    }

    /// Resolves a delta's channel. Once a stream had a capture fault, its further chunks are
    /// refused too (`Ok(None)`), so the caller stops writing it.
    pub fn resolve(&self, channel: &OutputChannel) -> Result<Option<StreamIndex>, CaptureError> {
        if self.full_started {
            return Err(CaptureError::FullSuppliedTwice);
        }
        let ix = self.declaration.resolve(channel)?;
        Ok((!self.failed[ix.get()]).then_some(ix))
    }

    /// Checks that this capture issued `stream` (through [`Capture::resolve`] or its
    /// declaration's `resolve` and `indexes`). An index of another capture is refused even
    /// when that capture has as many streams: it would otherwise address this capture's
    /// stream at the same position. The other methods taking a [`StreamIndex`] panic on a
    /// foreign index; a driver that can be handed an index from elsewhere checks it here
    /// first.
    pub fn check_stream(&self, stream: StreamIndex) -> Result<(), CaptureError> {
        if self.declaration.issued(stream) {
            Ok(())
        } else {
            Err(CaptureError::ForeignStream {
                index: stream.get(),
                streams: self.streams.len(),
            })
        }
    }

    /// The position of `stream`, which this capture must have issued.
    ///
    /// # Panics
    ///
    /// On an index of another capture: writing its bytes into this capture's stream at the
    /// same position would be wrong data (see [`Capture::check_stream`]).
    fn own(&self, stream: StreamIndex) -> usize {
        assert!(
            self.declaration.issued(stream),
            "{}",
            CaptureError::ForeignStream {
                index: stream.get(),
                streams: self.streams.len(),
            }
        );
        stream.get()
    }

    /// Records a chunk the caller has appended to stream `stream`'s capture file.
    ///
    /// # Panics
    ///
    /// On a `stream` this capture did not issue (see [`Capture::check_stream`]).
    pub fn handle_chunk(&mut self, stream: StreamIndex, chunk: &[u8]) {
        let position = self.own(stream);
        if chunk.is_empty() {
            return;
        }
        if !self.full_started {
            self.accepted_chunk = true;
        }
        self.streams[position].push(chunk);
    }

    /// Appends delta display text to the live display (never to a stream).
    pub fn handle_display(&mut self, text: &str) {
        self.display.push(text);
    }

    /// Records a capture failure (for example a failed write). The output becomes incomplete;
    /// a stream-specific fault also stops that stream's capture. The message is cut to
    /// [`MAX_FAULT_BYTES`]; the first [`MAX_FAULTS`] faults are kept, later ones counted (the
    /// summary then ends with a fault saying how many were not kept).
    ///
    /// # Panics
    ///
    /// On a `stream` this capture did not issue (see [`Capture::check_stream`]).
    pub fn handle_capture_error(&mut self, stream: Option<StreamIndex>, message: &str) {
        let position = stream.map(|ix| self.own(ix));
        let mut message = message.to_owned();
        if message.len() > MAX_FAULT_BYTES {
            let mut cut = MAX_FAULT_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        if let Some(position) = position {
            self.failed[position] = true;
        }
        if self.faults.len() == MAX_FAULTS {
            self.faults_not_kept += 1;
            return;
        }
        let stream = position.and_then(|p| self.declaration.name_at(p).cloned());
        self.faults.push(CaptureFault { stream, message });
    }

    /// The next completed index entry of `stream`, in block order.
    ///
    /// # Panics
    ///
    /// On a `stream` this capture did not issue (see [`Capture::check_stream`]).
    #[must_use]
    pub fn poll_index_entry(&mut self, stream: StreamIndex) -> Option<IndexEntry> {
        let position = self.own(stream);
        self.streams[position].indexer.poll_entry()
    }

    /// Bytes accepted so far on `stream`.
    ///
    /// # Panics
    ///
    /// On a `stream` this capture did not issue (see [`Capture::check_stream`]).
    pub fn stream_bytes(&self, stream: StreamIndex) -> u64 {
        self.streams[self.own(stream)].indexer.total_bytes()
    }

    /// Lines accepted so far on `stream` (a last line without its newline counts).
    ///
    /// # Panics
    ///
    /// On a `stream` this capture did not issue (see [`Capture::check_stream`]).
    pub fn stream_lines(&self, stream: StreamIndex) -> u64 {
        self.streams[self.own(stream)].indexer.lines()
    }

    /// The live display.
    pub fn display(&self) -> &LiveDisplay {
        &self.display
    }

    /// Starts a non-streaming completion: checks it is not mixed with streamed chunks and that
    /// the outputs fit the declaration, and returns them as `(stream, bytes)` in the order to
    /// feed them (through steps 2.1–2.3 of the driving order).
    pub fn begin_full(
        &mut self,
        outputs: FullOutput,
    ) -> Result<Vec<(StreamIndex, Vec<u8>)>, CaptureError> {
        if self.accepted_chunk {
            return Err(CaptureError::MixedCompletion);
        }
        if self.full_started {
            return Err(CaptureError::FullSuppliedTwice);
        }
        let feeds = match outputs {
            FullOutput::Single(bytes) => {
                vec![(self.declaration.resolve(&OutputChannel::Single)?, bytes)]
            }
            FullOutput::Named(outputs) => {
                let mut feeds: Vec<(StreamIndex, Vec<u8>)> = Vec::new();
                for (name, bytes) in outputs {
                    let ix = self
                        .declaration
                        .resolve(&OutputChannel::Named(name.clone()))?;
                    if feeds.iter().any(|(i, _)| *i == ix) {
                        return Err(CaptureError::DuplicateFullOutput(name));
                    }
                    feeds.push((ix, bytes));
                }
                feeds
            }
        };
        self.full_started = true;
        Ok(feeds)
    }

    /// Checks a completion's final display before it is given to [`Capture::finish`]: at most
    /// [`MAX_DISPLAY_BYTES`].
    pub fn check_final_display(display: &str) -> Result<(), CaptureError> {
        if display.len() > MAX_DISPLAY_BYTES {
            return Err(CaptureError::DisplayTooLong {
                bytes: display.len(),
            });
        }
        Ok(())
    }

    /// Finalizes: consumes the machine and returns what publication and the record need. A
    /// final display is expected to have passed [`Capture::check_final_display`].
    pub fn finish(self, display: Option<String>, status: CaptureStatus) -> CaptureSummary {
        let declaration = self.declaration.into_declaration();
        let streams = self
            .streams
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let digest = s.digest.finish();
                let lines = s.indexer.lines();
                let newlines = s.indexer.newlines();
                let (index_entries, index_header) = s.indexer.finish(digest);
                StreamSummary {
                    name: declaration.name_at(i).cloned(),
                    digest,
                    bytes: index_header.total_bytes,
                    lines,
                    head: s.head,
                    tail: s.tail.map(|tail| tail.finish(newlines)),
                    newline_after_head: s.newline_after_head,
                    index_entries,
                    index_header,
                }
            })
            .collect();
        let mut faults = self.faults;
        if self.faults_not_kept > 0 {
            faults.push(CaptureFault {
                stream: None,
                message: format!(
                    "{} more capture faults happened; only the first {MAX_FAULTS} are kept",
                    self.faults_not_kept
                ),
            });
        }
        CaptureSummary {
            limits: self.limits,
            status,
            display: display.unwrap_or(self.display.text),
            faults,
            streams,
            declaration,
        }
    }
}

#[cfg(test)]
mod tests;
