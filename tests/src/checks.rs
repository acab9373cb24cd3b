//! Property checks of output capture, previews, hints and reads (docs/output-streams.md), shared by
//! the fuzz targets, the corpus replay and the property tests. Every check panics only when a
//! property is violated; any input is otherwise fine.
//!
//! The checks compare the core against small reference models written here from the spec (line
//! splitting, the URI grammar, lossy decoding), not against the core's own helpers, so a bug in
//! a core helper cannot hide itself.

use agentrun_core::capture::{
    CaptureError, CaptureFault, CaptureSummary, DEFAULT_DISPLAY_BYTES, MAX_FAULT_BYTES, MAX_FAULTS,
};
use agentrun_core::index::{
    self, BLOCK_SIZE, ENTRY_LEN, HEADER_LEN, IndexEntry, IndexHeader, block_of_newline,
};
use agentrun_core::manifest::{Manifest, ManifestEntry};
use agentrun_core::page::{self, ByteRange, MAX_PAGE_BYTES, PageCursor, PageError, PageRequest};
use agentrun_core::record::{RECORD_FORMATS, RecordOutput, ResultRecord, StreamRecord};
use agentrun_core::stream::StreamIndex;
use agentrun_core::{
    ArtifactUri, Capture, CaptureStatus, Digest, FullOutput, OutputChannel, OutputDeclaration,
    PreviewLimits, StreamName,
};

// ---------------------------------------------------------------------------------------------
// Reference models
// ---------------------------------------------------------------------------------------------

/// The lines of `content` as stored: each ends after its `\n`; a final segment without `\n` is
/// a line; empty content has none.
pub fn reference_lines(content: &[u8]) -> Vec<&[u8]> {
    content.split_inclusive(|&b| b == b'\n').collect()
}

/// Byte offset where line `line` starts (`content.len()` for the line after the last).
pub fn reference_line_start(content: &[u8], line: u64) -> usize {
    reference_lines(content)
        .iter()
        .take(line as usize)
        .map(|l| l.len())
        .sum()
}

/// Whether `s` is in the public artifact URI grammar, checked byte by byte.
pub fn matches_uri_grammar(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("artifact://") else {
        return false;
    };
    let rest = rest.as_bytes();
    if rest.len() < 64
        || !rest[..64]
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return false;
    }
    match &rest[64..] {
        [] => true,
        [b'/', name @ ..] => is_stream_name(name),
        _ => false,
    }
}

fn is_stream_name(name: &[u8]) -> bool {
    (1..=64).contains(&name.len())
        && name != b"."
        && name != b".."
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The hint a truncated stream gets (docs/output-streams.md).
pub fn hint(uri: &str, offset: u64) -> String {
    format!("[Truncated. Read more: read(filePath=\"{uri}\", offset={offset})]")
}

// ---------------------------------------------------------------------------------------------
// URIs
// ---------------------------------------------------------------------------------------------

/// `ArtifactUri::parse` accepts exactly the grammar, and what it accepts renders back to the
/// identical string and re-parses equal.
pub fn check_uri(s: &str) {
    let parsed = ArtifactUri::parse(s);
    assert_eq!(
        parsed.is_ok(),
        matches_uri_grammar(s),
        "grammar disagreement on {s:?}: {parsed:?}"
    );
    if let Ok(uri) = parsed {
        let rendered = uri.to_string();
        assert_eq!(rendered, s, "Display does not round-trip");
        assert_eq!(ArtifactUri::parse(&rendered), Ok(uri.clone()));
        assert!(ArtifactUri::is_artifact_scheme(s));
        assert_eq!(uri.stream.is_some(), s.len() > "artifact://".len() + 64);
    }
}

// ---------------------------------------------------------------------------------------------
// Record files
// ---------------------------------------------------------------------------------------------

/// A record file as read back from a store ([`ResultRecord::from_json`]): any bytes give a
/// record or an error, never a panic. A record read names a format this version reads, and
/// written again it reads back as the same record, which renders the same.
pub fn check_record(bytes: &[u8]) {
    let Ok(record) = ResultRecord::from_json(bytes) else {
        return;
    };
    assert!(
        RECORD_FORMATS.contains(&record.format.as_str()),
        "read a record of format {:?}",
        record.format
    );
    let json = serde_json::to_vec(&record).expect("a record read serializes");
    let again = ResultRecord::from_json(&json).expect("a record written again reads back");
    assert_eq!(again, record);
    assert_eq!(again.render(), record.render());
    assert_eq!(again.display(), record.display());
}

// ---------------------------------------------------------------------------------------------
// Capture, previews, hints and recovery
// ---------------------------------------------------------------------------------------------

/// One delta of a [`PreviewCase`], in emission order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// A chunk for the declared stream at this index (0 for single output).
    Chunk(usize, Vec<u8>),
    /// A chunk addressed to a channel the declaration lacks; it must be rejected. `true` names
    /// an undeclared stream, `false` uses the unnamed channel (on a single declaration an
    /// undeclared name is used either way).
    Foreign(bool),
    /// Display text only: it must never enter a stream.
    Display(String),
}

/// One tool invocation to capture and render.
#[derive(Debug, Clone)]
pub struct PreviewCase {
    /// The declaration.
    pub declaration: OutputDeclaration,
    /// Valid limits (see [`PreviewLimits::validate`]).
    pub limits: PreviewLimits,
    /// The deltas, in emission order.
    pub deltas: Vec<Delta>,
    /// Terminal status.
    pub status: CaptureStatus,
    /// Line limits (1–2000) of the successive `read` pages that follow the hints, used in turn;
    /// empty means the default of 2000.
    pub page_limits: Vec<u64>,
}

/// What [`check_preview`] produced, for tests that look further.
#[derive(Debug, Clone)]
pub struct PreviewOutcome {
    /// The record of the streamed run.
    pub record: ResultRecord,
    /// Its rendering.
    pub rendered: String,
    /// Every stream's bytes in declaration order, as emitted.
    pub streams: Vec<Vec<u8>>,
}

fn channel_of(declaration: &OutputDeclaration, stream: usize) -> OutputChannel {
    match declaration {
        OutputDeclaration::Single => OutputChannel::Single,
        OutputDeclaration::Named(names) => OutputChannel::Named(names[stream].clone()),
    }
}

/// A chunk for a channel `declaration` does not declare is refused by the capture machine.
fn assert_foreign_refused(capture: &Capture, declaration: &OutputDeclaration, named: bool) {
    let channel = foreign_channel(declaration, named);
    assert!(
        matches!(
            capture.resolve(&channel),
            Err(CaptureError::OutputChannel(_))
        ),
        "chunk for {channel:?} accepted by {declaration:?}"
    );
}

fn foreign_channel(declaration: &OutputDeclaration, named: bool) -> OutputChannel {
    match declaration {
        OutputDeclaration::Named(_) if !named => OutputChannel::Single,
        OutputDeclaration::Single => OutputChannel::Named(StreamName::new("undeclared").unwrap()),
        OutputDeclaration::Named(names) => {
            let free = (0..)
                .map(|i| StreamName::new(&format!("undeclared{i}")).unwrap())
                .find(|n| !names.contains(n))
                .unwrap();
            OutputChannel::Named(free)
        }
    }
}

/// Captures `case` as a streaming tool would, then checks every property of capture and previews on
/// the record and its rendering:
///
/// * rejected deltas (undeclared channels) and display text never reach a stream, and a full
///   completion after streamed chunks is refused as mixed mode;
/// * digests, byte and line counts, the line index and the manifest are exact;
/// * a non-streaming (`Full`) completion of the same bytes yields the identical record;
/// * the rendering fits `max_payload_bytes`; an incomplete run says so;
/// * per stream, the preview is the longest exact byte prefix within the limits, never cut
///   inside a UTF-8 character; the hint appears exactly when truncated, with the exact offset
///   and URI; following it with `read` pages recovers the stream byte for byte;
/// * a tail view shows exactly the stream's last lines.
pub fn check_preview(case: &PreviewCase) -> PreviewOutcome {
    let declaration = &case.declaration;
    let n = declaration.channel_count();
    let mut capture = Capture::new(declaration.clone(), case.limits).expect("limits are valid");
    let mut streams = vec![Vec::new(); n];
    let mut polled_entries = vec![Vec::new(); n];
    let mut display = String::new();
    for delta in &case.deltas {
        match delta {
            Delta::Chunk(stream, bytes) => {
                let ix = capture
                    .resolve(&channel_of(declaration, *stream))
                    .expect("a declared channel resolves")
                    .expect("no capture fault happened");
                assert_eq!(ix.get(), *stream);
                capture.handle_chunk(ix, bytes);
                polled_entries[ix.get()]
                    .extend(std::iter::from_fn(|| capture.poll_index_entry(ix)));
                streams[ix.get()].extend_from_slice(bytes);
                assert_eq!(capture.stream_bytes(ix), streams[ix.get()].len() as u64);
            }
            Delta::Foreign(named) => assert_foreign_refused(&capture, declaration, *named),
            Delta::Display(text) => {
                capture.handle_display(text);
                display.push_str(text);
            }
        }
    }
    if streams.iter().any(|s| !s.is_empty()) {
        let err = capture.begin_full(FullOutput::Single(Vec::new()));
        assert_eq!(err, Err(CaptureError::MixedCompletion));
    }
    let summary = capture.finish(None, case.status);

    check_index_entries(&summary, &polled_entries, &streams);

    let record = ResultRecord::from_summary("check".into(), &summary);
    assert_eq!(
        record,
        full_completion_record(case, &streams, &display),
        "Full differs from streamed"
    );

    if display.len() <= DEFAULT_DISPLAY_BYTES {
        assert_eq!(record.display(), display);
    } else {
        assert!(display.ends_with(record.display()));
        assert!(record.display().len() <= DEFAULT_DISPLAY_BYTES);
    }

    assert_eq!(record.incomplete, case.status != CaptureStatus::Succeeded);
    let rendered = check_rendering(
        &record,
        declaration,
        &streams,
        &case.limits,
        &case.page_limits,
    );
    PreviewOutcome {
        record,
        rendered,
        streams,
    }
}

/// The capture's line index (the entries polled while capturing, then those left at finish) is
/// the one of each whole stream, whatever the chunking.
fn check_index_entries(
    summary: &CaptureSummary,
    polled_entries: &[Vec<IndexEntry>],
    streams: &[Vec<u8>],
) {
    for (i, s) in summary.streams.iter().enumerate() {
        let mut sidecar = s.index_header.encode().to_vec();
        for (block, entry) in polled_entries[i].iter().chain(&s.index_entries).enumerate() {
            sidecar.extend_from_slice(&entry.encode(block as u64));
        }
        assert_eq!(
            sidecar,
            index::encode_index_of(&streams[i], BLOCK_SIZE),
            "index of stream {i}"
        );
    }
}

/// Renders `record` (whose streams received exactly `streams`) and checks the rendering: it fits
/// the payload bound, an incomplete run says so first (with its status or first capture fault),
/// names, digests and counts are exact, and per stream the preview, hint, recovery through
/// `read` pages and tail view hold (see [`check_preview`]). Returns the rendering.
pub fn check_rendering(
    record: &ResultRecord,
    declaration: &OutputDeclaration,
    streams: &[Vec<u8>],
    limits: &PreviewLimits,
    page_limits: &[u64],
) -> String {
    let rendered = record.render();
    assert!(
        rendered.len() <= limits.max_payload_bytes,
        "rendered {} bytes over the payload bound {}",
        rendered.len(),
        limits.max_payload_bytes
    );
    if record.incomplete {
        let marker = match record.capture_status {
            CaptureStatus::Succeeded => "[Incomplete output: capture failed".to_owned(),
            status => format!("[Incomplete output: the run {}", status.as_str()),
        };
        assert!(rendered.starts_with(&marker), "{rendered}");
        if let Some(fault) = record.faults.first() {
            let status_line = rendered.lines().next().unwrap_or_default();
            assert!(
                rendered.contains(&fault.message),
                "first fault {fault:?} not in {status_line:?}"
            );
        }
    } else {
        assert!(!rendered.starts_with("[Incomplete output: "));
    }

    let manifest_digest = check_output_shape(record, declaration, streams);
    for (i, (s, content)) in record.streams().iter().zip(streams).enumerate() {
        let uri = match (&manifest_digest, &s.name) {
            (Some(m), Some(name)) => format!("artifact://{m}/{name}"),
            _ => format!("artifact://{}", Digest::of(content)),
        };
        assert_eq!(record.stream_uri(s).to_string(), uri);
        check_stream(
            s,
            content,
            limits,
            streams.len(),
            &rendered,
            &uri,
            page_limits,
        )
        .unwrap_or_else(|e| panic!("stream {i}: {e}"));
    }
    rendered
}

/// The record of the same invocation finished by a non-streaming tool: same displays, the whole
/// outputs supplied once.
fn full_completion_record(case: &PreviewCase, streams: &[Vec<u8>], display: &str) -> ResultRecord {
    let mut capture = Capture::new(case.declaration.clone(), case.limits).expect("valid limits");
    capture.handle_display(display);
    let outputs = match &case.declaration {
        OutputDeclaration::Single => FullOutput::Single(streams[0].clone()),
        OutputDeclaration::Named(names) => {
            FullOutput::Named(names.iter().cloned().zip(streams.iter().cloned()).collect())
        }
    };
    for (ix, bytes) in capture
        .begin_full(outputs)
        .expect("a fitting full output is accepted")
    {
        capture.handle_chunk(ix, &bytes);
    }
    ResultRecord::from_summary("check".into(), &capture.finish(None, case.status))
}

/// Checks names, digests and counts of every stream and, for named output, the manifest digest,
/// which it returns.
fn check_output_shape(
    record: &ResultRecord,
    declaration: &OutputDeclaration,
    streams: &[Vec<u8>],
) -> Option<Digest> {
    assert_eq!(record.streams().len(), streams.len());
    for (s, content) in record.streams().iter().zip(streams) {
        assert_eq!(s.sha256, Digest::of(content));
        assert_eq!(s.bytes, content.len() as u64);
        assert_eq!(s.lines, reference_lines(content).len() as u64);
    }
    match (declaration, &record.output) {
        (OutputDeclaration::Single, RecordOutput::Single { stream }) => {
            assert_eq!(stream.name, None);
            None
        }
        (
            OutputDeclaration::Named(names),
            RecordOutput::Named {
                manifest,
                streams: recs,
            },
        ) => {
            let entries = names
                .iter()
                .zip(streams)
                .map(|(name, content)| ManifestEntry {
                    name: name.clone(),
                    sha256: Digest::of(content),
                    bytes: content.len() as u64,
                    lines: reference_lines(content).len() as u64,
                })
                .collect();
            let manifest_bytes = Manifest::new(entries).to_bytes();
            assert_eq!(*manifest, Digest::of(&manifest_bytes));
            assert_eq!(
                Manifest::parse(&manifest_bytes).map(|m| m.names()),
                Ok(names.clone())
            );
            let rec_names: Vec<_> = recs.iter().map(|s| s.name.clone()).collect();
            assert_eq!(
                rec_names,
                names.iter().cloned().map(Some).collect::<Vec<_>>()
            );
            Some(*manifest)
        }
        (d, o) => panic!("output {o:?} does not fit declaration {d:?}"),
    }
}

/// The per-stream properties; an `Err` names the first violated one.
fn check_stream(
    s: &StreamRecord,
    content: &[u8],
    limits: &PreviewLimits,
    stream_count: usize,
    rendered: &str,
    uri: &str,
    page_limits: &[u64],
) -> Result<(), String> {
    let p = &s.preview;
    let raw = usize::try_from(p.raw_bytes).map_err(|e| e.to_string())?;
    if raw > content.len() {
        return Err(format!(
            "preview covers {raw} bytes of a {}-byte stream",
            content.len()
        ));
    }
    let (shown, rest) = content.split_at(raw);
    if p.text != lossy(shown) {
        return Err("preview text is not the lossy decoding of the stream prefix".into());
    }
    // Decoding the two sides of the cut separately gives the decoding of the whole stream
    // exactly when the cut splits no character (nor an invalid sequence the rendering shows
    // as one U+FFFD).
    if lossy(shown) + &lossy(rest) != lossy(content) {
        return Err(format!("preview cut at byte {raw} splits a UTF-8 sequence"));
    }
    let newlines = shown.iter().filter(|&&b| b == b'\n').count() as u64;
    if p.newlines != newlines {
        return Err(format!(
            "preview claims {} newlines, has {newlines}",
            p.newlines
        ));
    }
    if p.newlines > limits.max_lines {
        return Err("preview shows more than max_lines lines".into());
    }
    if p.truncated != (raw < content.len()) {
        return Err(format!(
            "truncated flag {} for {raw} of {} bytes",
            p.truncated,
            content.len()
        ));
    }

    // Longest prefix: unless the line limit stopped it, the next decoding unit (one character,
    // or one invalid sequence rendered as U+FFFD) would have exceeded the byte budget. The
    // budget is the preview's: the stream's share of the payload bound, less a quarter for the tail
    // when the stream is truncated anyway (a stream that fits the whole budget is shown whole).
    let budget = limits.stream_budget(stream_count);
    let head_budget = if limits.tail_lines > 0 && p.truncated {
        budget - budget / 4
    } else {
        budget
    };
    if p.text.len() > head_budget {
        return Err(format!(
            "preview renders {} bytes over its budget {head_budget}",
            p.text.len()
        ));
    }
    if p.truncated && p.newlines < limits.max_lines {
        let next = rest.utf8_chunks().next().expect("rest is not empty");
        let unit = next.valid().chars().next().map_or(3, char::len_utf8);
        if p.text.len() + unit <= head_budget {
            return Err(format!(
                "preview {:?} stops at byte {raw} though the next unit {next:?} fits",
                p.text
            ));
        }
    }

    let hint = hint(uri, p.newlines);
    if rendered.contains(&hint) != p.truncated {
        return Err(format!(
            "hint {hint:?} present: {}, truncated: {}",
            !p.truncated, p.truncated
        ));
    }

    if p.truncated {
        // Lines [0, newlines) are shown in full; the hint re-reads the cut line from its start.
        let start = reference_line_start(content, p.newlines);
        if start > raw {
            return Err("hint offset skips bytes the preview did not show".into());
        }
        let recovered = follow_pages(content, start, p.newlines, page_limits)?;
        if recovered != content {
            return Err("preview + pages do not reproduce the stream".into());
        }
    }

    if let Some(t) = &s.tail {
        let total = reference_lines(content).len() as u64;
        if !p.truncated || t.first_line <= p.newlines || t.lines == 0 || t.lines > limits.tail_lines
        {
            return Err(format!("tail {t:?} is not after a truncated head"));
        }
        if t.first_line + t.lines != total {
            return Err(format!("tail {t:?} does not end at the last line {total}"));
        }
        if t.text != lossy(&content[reference_line_start(content, t.first_line)..]) {
            return Err("tail text is not the stream's last lines".into());
        }
        let omission = format!(
            "[Lines {}-{} not shown in full; the last {} lines follow]\n{}",
            p.newlines + 1,
            t.first_line,
            t.lines,
            t.text
        );
        if !rendered.contains(&omission) {
            return Err("tail omission line or tail text missing from the rendering".into());
        }
    }
    Ok(())
}

/// `content[..start]` followed by the `read` pages from line `offset` on, each page checked
/// against the reference, following `next_offset` until the end.
fn follow_pages(
    content: &[u8],
    start: usize,
    mut offset: u64,
    page_limits: &[u64],
) -> Result<Vec<u8>, String> {
    let mut out = content[..start].to_vec();
    for &limit in page_limits.iter().chain(&[2000]).cycle() {
        let page = page::extract_page(content, PageRequest::new(offset, limit).unwrap())
            .map_err(|e| format!("read at offset {offset}: {e}"))?;
        out.extend_from_slice(&page.bytes);
        match page.next_offset {
            Some(next) if next > offset => offset = next,
            Some(next) => return Err(format!("next_offset {next} does not advance from {offset}")),
            None => break,
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Sequences of capture operations
// ---------------------------------------------------------------------------------------------

/// How a driver's write of one chunk went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum Write {
    /// The chunk is on disk: the machine is told about it.
    Written,
    /// Writing the chunk failed: the machine gets a capture fault for the stream instead.
    Failed,
    /// The chunk is on disk but writing its line-index entries failed: the machine is told
    /// about the chunk, then gets a capture fault for the stream.
    IndexFailed,
}

/// One operation a driver performs on the capture machine before the completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureOp {
    /// A chunk for the declared stream at this index, written as said.
    Chunk(usize, Vec<u8>, Write),
    /// A chunk addressed to a channel the declaration lacks (see [`Delta::Foreign`]).
    Foreign(bool),
    /// A capture fault of one stream (`Some` index) or of none.
    Fault(Option<usize>, String),
    /// Display text.
    Display(String),
}

/// How a [`CaptureCase`] ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A streamed completion, with an optional final display.
    Streamed(Option<String>),
    /// A full completion: `(stream, bytes, write fails)` per supplied output, in order; for a
    /// single declaration only the first is supplied (or an empty output when there is none).
    /// `misfit` supplies the outputs in the other shape (named outputs to a single declaration,
    /// a single output to named ones), which must be refused.
    Full {
        /// Final display.
        display: Option<String>,
        /// The outputs.
        outputs: Vec<(usize, Vec<u8>, bool)>,
        /// Supply them in the shape the declaration does not have.
        misfit: bool,
    },
}

/// A sequence of capture operations as a driver performs them, then a completion.
#[derive(Debug, Clone)]
pub struct CaptureCase {
    /// The declaration.
    pub declaration: OutputDeclaration,
    /// Valid limits.
    pub limits: PreviewLimits,
    /// Bound of the live display (at least 1).
    pub display_bound: usize,
    /// The operations, in order.
    pub ops: Vec<CaptureOp>,
    /// The completion.
    pub ending: Ending,
    /// Terminal status (a refused full completion ends the run failed, as the store does).
    pub status: CaptureStatus,
    /// Line limits of the `read` pages that follow the hints (see [`PreviewCase`]).
    pub page_limits: Vec<u64>,
}

/// What the machine must have been told, kept by the driver model of [`check_capture`].
struct CaptureModel {
    declaration: OutputDeclaration,
    streams: Vec<Vec<u8>>,
    polled: Vec<Vec<IndexEntry>>,
    failed: Vec<bool>,
    /// Whether a non-empty chunk was accepted (a full completion is then mixed mode).
    streamed: bool,
    faults: Vec<(Option<usize>, String)>,
    display: String,
}

/// The index `capture` issued for its stream `i` (an index is only good for its own capture).
fn index_in(capture: &Capture, i: usize) -> StreamIndex {
    let declaration = capture.declaration();
    declaration
        .resolve(&channel_of(declaration, i))
        .expect("a declared stream resolves")
}

impl CaptureModel {
    fn fault(&mut self, capture: &mut Capture, stream: Option<usize>, message: String) {
        let ix = stream.map(|i| {
            self.failed[i] = true;
            index_in(capture, i)
        });
        capture.handle_capture_error(ix, &message);
        self.faults.push((stream, message));
    }

    /// Tells the machine about a chunk written to stream `i` and drains its index entries.
    fn accept(&mut self, capture: &mut Capture, i: usize, bytes: &[u8]) {
        let ix = index_in(capture, i);
        capture.handle_chunk(ix, bytes);
        self.polled[i].extend(std::iter::from_fn(|| capture.poll_index_entry(ix)));
        self.streams[i].extend_from_slice(bytes);
        assert_eq!(capture.stream_bytes(ix), self.streams[i].len() as u64);
    }
}
/// Drives the capture machine through `case` as a driver does (resolve, write, tell the
/// machine or report the fault, drain index entries, display, complete) and checks it against a
/// model of what it was told:
///
/// * a declared channel resolves to its stream until that stream has a capture fault, then is
///   refused (`Ok(None)`); undeclared channels are refused; accepted byte counts are exact;
/// * a full completion is refused after streamed chunks (mixed mode), in the wrong shape or
///   naming a stream twice; once accepted, every channel and a second one are refused;
/// * faults are kept in order with their stream's name and a message cut to a character
///   boundary within [`MAX_FAULT_BYTES`], the first [`MAX_FAULTS`] of them, then one fault of
///   no stream counting the rest; the live display keeps the newest text within its bound; a
///   final display replaces it;
/// * digests, counts, the line index, previews, hints, recovery of every byte through `read`
///   pages and tail views are exact for the bytes each stream received ([`check_rendering`]);
/// * the record depends only on those bytes, the faults, the display and the status: the same
///   bytes streamed in one chunk per stream give the identical record.
pub fn check_capture(case: &CaptureCase) -> ResultRecord {
    let declaration = &case.declaration;
    let n = declaration.channel_count();
    let mut capture =
        Capture::with_display_bound(declaration.clone(), case.limits, case.display_bound)
            .expect("limits are valid");
    let mut model = CaptureModel {
        declaration: declaration.clone(),
        streams: vec![Vec::new(); n],
        polled: vec![Vec::new(); n],
        failed: vec![false; n],
        streamed: false,
        faults: Vec::new(),
        display: String::new(),
    };
    for op in &case.ops {
        match op {
            CaptureOp::Chunk(i, bytes, write) => {
                let resolved = capture
                    .resolve(&channel_of(declaration, *i))
                    .expect("a declared channel resolves");
                if model.failed[*i] {
                    assert_eq!(resolved, None, "stream {i} accepted after its fault");
                    continue;
                }
                assert_eq!(resolved, Some(index_in(&capture, *i)));
                // The store writes nothing for an empty chunk, so it cannot fail.
                if bytes.is_empty() {
                    continue;
                }
                if *write != Write::Failed {
                    model.accept(&mut capture, *i, bytes);
                    model.streamed = true;
                }
                if *write != Write::Written {
                    model.fault(&mut capture, Some(*i), format!("write {write:?} on {i}"));
                }
            }
            CaptureOp::Foreign(named) => assert_foreign_refused(&capture, declaration, *named),
            CaptureOp::Fault(stream, message) => {
                model.fault(&mut capture, *stream, message.clone());
            }
            CaptureOp::Display(text) => {
                capture.handle_display(text);
                model.display.push_str(text);
            }
        }
    }

    let (display, status) = match &case.ending {
        Ending::Streamed(display) => (display.clone(), case.status),
        Ending::Full {
            display,
            outputs,
            misfit,
        } => {
            let status = complete_full(&mut capture, &mut model, outputs, *misfit, case.status);
            (display.clone(), status)
        }
    };
    let summary = capture.finish(display.clone(), status);
    check_index_entries(&summary, &model.polled, &model.streams);

    let faults: Vec<CaptureFault> = model
        .faults
        .iter()
        .map(|(stream, message)| CaptureFault {
            stream: stream.and_then(|i| match declaration {
                OutputDeclaration::Single => None,
                OutputDeclaration::Named(names) => Some(names[i].clone()),
            }),
            message: message.clone(),
        })
        .collect();
    let kept = faults.len().min(MAX_FAULTS);
    let counted = faults.len() - kept;
    assert_eq!(summary.faults.len(), kept + usize::from(counted > 0));
    for (got, sent) in summary.faults.iter().zip(&faults[..kept]) {
        assert_eq!(got.stream, sent.stream);
        check_cut(&sent.message, &got.message, MAX_FAULT_BYTES, true);
    }
    if counted > 0 {
        let last = &summary.faults[kept];
        assert_eq!(last.stream, None);
        assert_eq!(
            last.message,
            format!("{counted} more capture faults happened; only the first {MAX_FAULTS} are kept")
        );
    }
    match &display {
        Some(text) => assert_eq!(&summary.display, text),
        None => check_cut(&model.display, &summary.display, case.display_bound, false),
    }

    let record = ResultRecord::from_summary("check".into(), &summary);
    assert_eq!(record.capture_status, status);
    assert_eq!(
        record.incomplete,
        status != CaptureStatus::Succeeded || !faults.is_empty()
    );
    check_rendering(
        &record,
        declaration,
        &model.streams,
        &case.limits,
        &case.page_limits,
    );

    // The same outcome reached by streaming each stream's bytes in one chunk.
    let mut again = Capture::new(declaration.clone(), case.limits).expect("limits are valid");
    for (i, bytes) in model.streams.iter().enumerate() {
        let ix = index_in(&again, i);
        again.handle_chunk(ix, bytes);
    }
    for (stream, message) in &model.faults {
        let ix = stream.map(|i| index_in(&again, i));
        again.handle_capture_error(ix, message);
    }
    let again = ResultRecord::from_summary(
        "check".into(),
        &again.finish(Some(summary.display.clone()), status),
    );
    assert_eq!(again, record, "record depends on how the bytes arrived");
    record
}

/// A full completion as the store performs it: refused (mixed mode, wrong shape, a stream
/// named twice) → a capture fault of no stream and a failed run; accepted → each output
/// written unless its stream already failed. Returns the run's status.
fn complete_full(
    capture: &mut Capture,
    model: &mut CaptureModel,
    outputs: &[(usize, Vec<u8>, bool)],
    misfit: bool,
    status: CaptureStatus,
) -> CaptureStatus {
    let declaration = model.declaration.clone();
    let supplied = match (&declaration, misfit) {
        (OutputDeclaration::Single, false) | (OutputDeclaration::Named(_), true) => {
            let bytes = outputs.first().map(|o| o.1.clone()).unwrap_or_default();
            FullOutput::Single(bytes)
        }
        (OutputDeclaration::Named(names), false) => FullOutput::Named(
            outputs
                .iter()
                .map(|(i, bytes, _)| (names[*i].clone(), bytes.clone()))
                .collect(),
        ),
        (OutputDeclaration::Single, true) => FullOutput::Named(vec![(
            StreamName::new("undeclared").unwrap(),
            outputs.first().map(|o| o.1.clone()).unwrap_or_default(),
        )]),
    };
    let mut seen = Vec::new();
    let duplicate = outputs.iter().find_map(|(i, _, _)| {
        let repeated = seen.contains(i);
        seen.push(*i);
        repeated.then_some(*i)
    });
    let expected = if model.streamed {
        Some(CaptureError::MixedCompletion)
    } else if misfit {
        None // a channel error: checked by its variant below
    } else if let (OutputDeclaration::Named(names), Some(i)) = (&declaration, duplicate) {
        Some(CaptureError::DuplicateFullOutput(names[i].clone()))
    } else {
        None
    };
    match capture.begin_full(supplied) {
        Err(error) => {
            match &expected {
                Some(e) => assert_eq!(&error, e),
                None => assert!(
                    misfit && matches!(error, CaptureError::OutputChannel(_)),
                    "full output refused: {error}"
                ),
            }
            model.fault(capture, None, error.to_string());
            CaptureStatus::Failed
        }
        Ok(feeds) => {
            assert!(
                expected.is_none() && !misfit,
                "full output accepted, expected {expected:?} (misfit {misfit})"
            );
            for (ix, bytes) in feeds {
                let i = (0..model.streams.len())
                    .find(|&i| index_in(capture, i) == ix)
                    .expect("a declared stream");
                let fails = match &declaration {
                    OutputDeclaration::Single => outputs.first().is_some_and(|o| o.2),
                    OutputDeclaration::Named(_) => {
                        outputs.iter().find(|o| o.0 == i).is_some_and(|o| o.2)
                    }
                };
                if model.failed[i] || bytes.is_empty() {
                    continue;
                }
                if fails {
                    model.fault(capture, Some(i), format!("full write on {i}"));
                } else {
                    model.accept(capture, i, &bytes);
                }
            }
            let channel = channel_of(&declaration, 0);
            assert_eq!(
                capture.resolve(&channel),
                Err(CaptureError::FullSuppliedTwice)
            );
            assert_eq!(
                capture.begin_full(FullOutput::Named(Vec::new())),
                Err(CaptureError::FullSuppliedTwice)
            );
            status
        }
    }
}

/// `kept` is what a bounded buffer kept of `sent`: all of it when it fits `bound`, else the
/// longest prefix (`head`) or suffix (otherwise) within `bound` that starts and ends on
/// character boundaries.
fn check_cut(sent: &str, kept: &str, bound: usize, head: bool) {
    if sent.len() <= bound {
        assert_eq!(kept, sent);
        return;
    }
    assert!(
        kept.len() <= bound,
        "{} bytes kept over {bound}",
        kept.len()
    );
    let next = if head {
        assert!(sent.starts_with(kept), "{kept:?} is not a prefix");
        sent[kept.len()..].chars().next()
    } else {
        assert!(sent.ends_with(kept), "{kept:?} is not a suffix");
        sent[..sent.len() - kept.len()].chars().next_back()
    };
    let next = next.expect("something was cut");
    assert!(
        kept.len() + next.len_utf8() > bound,
        "{next:?} would still fit the bound {bound}"
    );
}

// ---------------------------------------------------------------------------------------------
// Pages, byte ranges and decoders
// ---------------------------------------------------------------------------------------------

/// A line-page and a byte-range request on some content.
#[derive(Debug, Clone)]
pub struct PageCase {
    /// The artifact.
    pub content: Vec<u8>,
    /// Line offset.
    pub offset: u64,
    /// Line limit, possibly out of range (then the request is refused).
    pub limit: u64,
    /// Byte offset.
    pub byte_offset: u64,
    /// Byte limit, possibly out of range.
    pub byte_limit: u64,
    /// Size of the pieces the cursor is fed (at least 1).
    pub feed_size: usize,
    /// Block size of the line index built for the content (at least 1).
    pub block_size: u32,
}

/// Line pages and byte ranges are exact: whole stored lines `[offset, offset + lines)`, exact
/// continuation metadata, `OffsetPastEnd` past the last line; a [`PageCursor`] fed in any
/// pieces agrees with [`page::extract_page`]; the line index finds every line start and round
/// trips through its encoding.
pub fn check_page(case: &PageCase) {
    let content = &case.content;
    let lines = reference_lines(content);
    let total = lines.len() as u64;

    match PageRequest::new(case.offset, case.limit) {
        Err(e) => {
            assert!(
                !(1..=2000).contains(&case.limit),
                "valid limit {} refused",
                case.limit
            );
            assert_eq!(e, PageError::Limit(case.limit));
        }
        Ok(request) => {
            assert!((1..=2000).contains(&case.limit));
            let got = page::extract_page(content, request);
            if case.offset > total {
                assert_eq!(
                    got,
                    Err(PageError::OffsetPastEnd {
                        offset: case.offset,
                        total_lines: total
                    })
                );
                return check_index(case, total);
            }
            let first = case.offset as usize;
            let end = (first + case.limit as usize).min(lines.len());
            let expected: Vec<u8> = lines[first..end].concat();
            let Ok(p) = got else {
                assert!(expected.len() > MAX_PAGE_BYTES, "unexpected {got:?}");
                return check_index(case, total);
            };
            assert_eq!(p.bytes, expected);
            assert_eq!(
                (p.offset, p.lines, p.total_lines),
                (case.offset, (end - first) as u64, total)
            );
            assert_eq!(p.next_offset, ((end as u64) < total).then_some(end as u64));

            // The store feeds the page's bytes in arbitrary pieces.
            let start = reference_line_start(content, case.offset);
            let mut cursor = PageCursor::new(request, total, start as u64).unwrap();
            for piece in content[start..].chunks(case.feed_size.max(1)) {
                if cursor.handle_bytes(piece).unwrap() == page::CursorState::Complete {
                    break;
                }
            }
            assert_eq!(cursor.finish(), p);
        }
    }

    match ByteRange::new(case.byte_offset, case.byte_limit) {
        Err(e) => {
            assert!(case.byte_limit == 0 || case.byte_limit > MAX_PAGE_BYTES as u64);
            assert_eq!(e, PageError::ByteLimit(case.byte_limit));
        }
        Ok(range) => {
            let len = content.len() as u64;
            let got = page::extract_bytes(content, range);
            if case.byte_offset > len {
                assert_eq!(
                    got,
                    Err(PageError::ByteOffsetPastEnd {
                        offset: case.byte_offset,
                        total_bytes: len
                    })
                );
            } else {
                let end = (case.byte_offset + case.byte_limit).min(len);
                let p = got.expect("an in-range byte read succeeds");
                assert_eq!(p.bytes, &content[case.byte_offset as usize..end as usize]);
                assert_eq!((p.offset, p.total_bytes), (case.byte_offset, len));
                assert_eq!(p.next_byte_offset, (end < len).then_some(end));
            }
        }
    }
    check_index(case, total);
}

/// The sidecar of `case.content` decodes to its header and entries, the binary search finds the
/// requested line's start, and corrupting any one byte of the header or of an entry is caught.
fn check_index(case: &PageCase, total_lines: u64) {
    let content = &case.content;
    let sidecar = index::encode_index_of(content, case.block_size.max(1));
    let header = IndexHeader::decode(&sidecar).expect("a fresh index decodes");
    assert_eq!(header.total_lines(), total_lines);
    assert_eq!(header.digest, Digest::of(content));
    let entry = |b: u64| IndexEntry::decode(b, &sidecar[index::entry_offset(b) as usize..]);

    // Where does line `offset` start, found the way the store finds it?
    let n = case.offset;
    let via_index = if n == 0 {
        Some(0)
    } else {
        block_of_newline(&header, n, entry)
            .expect("entries decode")
            .map(|block| {
                let (start, end) = header.block_range(block);
                let k = n - entry(block).unwrap().newlines_before;
                let within = index::after_nth_newline(&content[start as usize..end as usize], k)
                    .expect("the block holds the newline");
                start as usize + within
            })
    };
    let newlines = content.iter().filter(|&&b| b == b'\n').count() as u64;
    let expected = (n <= newlines).then(|| reference_line_start(content, n));
    assert_eq!(via_index, expected, "line {n} start via the index");

    // One corrupted byte: at a content-chosen position of the header and of one entry.
    let mut bad = sidecar.clone();
    bad[case.feed_size % HEADER_LEN] ^= 0x5a;
    assert!(
        IndexHeader::decode(&bad).is_err(),
        "corrupt header accepted"
    );
    if header.block_count() > 0 {
        let block = case.offset % header.block_count();
        let at = index::entry_offset(block) as usize + case.feed_size % ENTRY_LEN;
        let mut bad = sidecar;
        bad[at] ^= 0x5a;
        let decoded = IndexEntry::decode(block, &bad[index::entry_offset(block) as usize..]);
        assert!(decoded.is_err(), "corrupt entry accepted");
    }
}

/// The binary decoders accept arbitrary bytes without panicking, and what they accept is
/// canonical: it encodes back to the same bytes.
pub fn check_decoders(bytes: &[u8]) {
    if let Ok(header) = IndexHeader::decode(bytes) {
        let encoded = header.encode();
        // Bytes 72..76 are reserved: covered by the checksum but not a field.
        assert_eq!(encoded[..72], bytes[..72]);
        assert_eq!(IndexHeader::decode(&encoded), Ok(header));
    }
    for block in [0, 1, u64::from(bytes.first().copied().unwrap_or(0))] {
        if let Ok(entry) = IndexEntry::decode(block, bytes) {
            assert_eq!(entry.encode(block)[..], bytes[..ENTRY_LEN]);
        }
    }
    if let Ok(manifest) = Manifest::parse(bytes) {
        assert_eq!(manifest.to_bytes(), bytes);
    }
}
