//! The terminal result record and the model-facing rendering.
//!
//! [`ResultRecord::from_summary`] decides every preview once, at finalization; the record then
//! holds everything needed to render the model text and the final display again
//! ([`ResultRecord::render`], [`ResultRecord::display`]) without rerunning the tool or reading
//! artifacts, so a replay is identical to the live run by construction.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::capture::{CaptureFault, CaptureStatus, CaptureSummary, StreamSummary};
use crate::continuation::{Continuation, ModelRead, ReadSyntax};
use crate::digest::Digest;
use crate::limits::PreviewLimits;
use crate::preview::{cut_head, cut_tail};
use crate::process::{Exit, RunInfo, RunOutcome};
use crate::stream::StreamName;
use crate::uri::ArtifactUri;

/// The format tag of a record that references nothing but its output.
pub const RECORD_FORMAT_V1: &str = "agentrun.record.v1";

/// The format tag of a record that also keeps other artifacts ([`ResultRecord::keeps`]). A
/// reader that knows only v1 would ignore `keeps`, and its GC would remove what the record
/// keeps; the new tag makes such a reader refuse the record instead.
pub const RECORD_FORMAT_V2: &str = "agentrun.record.v2";

/// Every record format this version reads.
pub const RECORD_FORMATS: [&str; 2] = [RECORD_FORMAT_V1, RECORD_FORMAT_V2];

/// Largest record file agentrun writes, and the largest it reads: 128 MiB. A larger file in
/// `records/` is damaged or not agentrun's, and is refused by size before it is read.
///
/// Every field of a record is bounded where it enters, so every record the store writes fits.
/// In the written JSON, where escaping makes a control byte six bytes (`\u0001`):
///
/// * previews: all streams together render to at most
///   [`MAX_PAYLOAD_BYTES`](crate::limits::MAX_PAYLOAD_BYTES) (16 MiB), at most 96 MiB;
/// * the run's command: [`MAX_COMMAND_BYTES`](crate::process::MAX_COMMAND_BYTES) (1 MiB,
///   counting a byte per word), at most 10 MiB (an empty word costs ten);
/// * the final display: [`MAX_DISPLAY_BYTES`](crate::capture::MAX_DISPLAY_BYTES) (1 MiB), at
///   most 6 MiB;
/// * kept artifacts: [`MAX_KEEPS`] digests of 72 bytes, 4.5 MiB;
/// * faults: [`MAX_FAULTS`](crate::capture::MAX_FAULTS) + 1 messages of at most
///   [`MAX_FAULT_BYTES`](crate::capture::MAX_FAULT_BYTES), under 0.1 MiB.
///
/// A record with every one of these at its largest is 116.3 MiB (agentrun-fs tests write and
/// read one back), 9% below this bound.
pub const MAX_RECORD_BYTES: u64 = 128 << 20;

/// Most artifacts a record [keeps](ResultRecord::keeps) besides its output: 65536, far more
/// than one compaction refers to.
pub const MAX_KEEPS: usize = 1 << 16;

/// Why bytes are not a record this version can use ([`ResultRecord::from_json`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordParseError {
    /// The record names a format this version does not know: a newer agentrun wrote it, and
    /// it may reference artifacts in ways this version cannot see.
    #[error(
        "record format {format:?} is newer than this agentrun, which reads {}; use the agentrun \
         that wrote it",
        RECORD_FORMATS.join(" and ")
    )]
    UnknownFormat {
        /// The format the record names.
        format: String,
    },
    /// The bytes are not a record: not JSON, or a field is missing or malformed.
    #[error("not a valid record: {0}")]
    Invalid(#[from] serde_json::Error),
}

/// The head preview of one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadPreview {
    /// The preview as shown (lossily decoded raw prefix).
    pub text: String,
    /// Raw stream bytes the preview covers (it is exactly the stream's first `raw_bytes`).
    pub raw_bytes: u64,
    /// `\n` bytes in the preview: the continuation offset when truncated.
    pub newlines: u64,
    /// Whether the stream continues past the preview.
    pub truncated: bool,
}

/// The optional tail view of a truncated stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailPreview {
    /// The last lines as shown.
    pub text: String,
    /// Zero-based index of the tail's first line.
    pub first_line: u64,
    /// Lines shown.
    pub lines: u64,
}

/// One stream of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Stream name (`None` for single output).
    pub name: Option<StreamName>,
    /// Content address of the stream.
    pub sha256: Digest,
    /// Length in bytes.
    pub bytes: u64,
    /// Line count.
    pub lines: u64,
    /// Head preview.
    pub preview: HeadPreview,
    /// Tail view, when enabled and useful.
    pub tail: Option<TailPreview>,
    /// Where reading continues after the preview, decided when the capture finished (absent
    /// in records written before it existed: see [`continuation`](Self::continuation)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Continuation>,
    /// Where reading the stream from its start begins, decided when the capture finished from
    /// the length of line 0 (absent in records written before it existed: see
    /// [`start`](Self::start)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Continuation>,
}

impl StreamRecord {
    /// Where reading continues after the preview: the first line not shown in full, or the
    /// first byte not shown when that line is longer than a page, or the end. A record
    /// written before the continuation was stored continues at the line, as it was shown then.
    pub fn continuation(&self) -> Continuation {
        match self.continuation {
            Some(at) => at,
            None if self.preview.truncated => Continuation::Line(self.preview.newlines),
            None => Continuation::End,
        }
    }

    /// Where reading the stream from its start begins: line 0, or byte 0 when its first line
    /// is longer than a page (the preview then shows part of it and continues by byte).
    pub fn start(&self) -> Continuation {
        if let Some(start) = self.start {
            return start;
        }
        // An older record: its preview shows whether line 0 ended inside it; when it did not,
        // the stored continuation says whether line 0 is longer than a page.
        match self.continuation() {
            Continuation::Byte(_) if self.preview.newlines == 0 => Continuation::Byte(0),
            _ => Continuation::Line(0),
        }
    }
}

/// The retained output of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
// Exhaustive like `OutputDeclaration`, whose two shapes it mirrors.
pub enum RecordOutput {
    /// Single output: one artifact.
    Single {
        /// The artifact.
        stream: StreamRecord,
    },
    /// Named output: a manifest and its streams.
    Named {
        /// The manifest artifact.
        manifest: Digest,
        /// Streams in declaration order.
        streams: Vec<StreamRecord>,
    },
}

/// The terminal result of one invocation: what is persisted, replayed and rendered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultRecord {
    /// [`RECORD_FORMAT_V1`], or [`RECORD_FORMAT_V2`] when the record [`keeps`](Self::keeps)
    /// anything (set by [`set_keeps`](Self::set_keeps)).
    pub format: String,
    /// The invocation's identifier (unique within a store).
    pub run_id: String,
    /// How the capture ended: succeeded, or failed/cancelled (then the output is incomplete).
    /// It says nothing about the program's exit code, which is in [`run`](Self::run). Named
    /// `status` in records written before the rename, which still load.
    #[serde(alias = "status")]
    pub capture_status: CaptureStatus,
    /// Whether the output must be presented as incomplete.
    pub incomplete: bool,
    /// Capture faults.
    pub faults: Vec<CaptureFault>,
    /// Final display.
    pub display: String,
    /// The limits previews were cut with.
    pub limits: PreviewLimits,
    /// The retained output.
    pub output: RecordOutput,
    /// For a process run: the command, how it ended, when and how long (absent for other
    /// tools and in records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunInfo>,
    /// Artifacts the record keeps besides its output, rooted by GC with it so they are kept,
    /// and expire, together: every artifact a compaction retry refers to, in the one record of
    /// that compaction (empty in other records and absent from their JSON). Set it with
    /// [`set_keeps`](Self::set_keeps), which also sets the format an older reader refuses.
    /// The store writes at most [`MAX_KEEPS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keeps: Vec<Digest>,
}

/// The URIs that read a record's output, by name ([`ResultRecord::artifact_uris`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactUris(Vec<(String, ArtifactUri)>);

impl ArtifactUris {
    /// The URI named `name` (`manifest`, a stream name, or `output`).
    pub fn get(&self, name: &str) -> Option<&ArtifactUri> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, uri)| uri)
    }

    /// `(name, URI)` pairs, the manifest first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ArtifactUri)> {
        self.0.iter().map(|(n, uri)| (n.as_str(), uri))
    }
}

impl Serialize for ArtifactUris {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, uri) in &self.0 {
            map.serialize_entry(name, &uri.to_string())?;
        }
        map.end()
    }
}

impl ResultRecord {
    /// Builds the record of a finalized capture, cutting every preview within the limits and
    /// the payload bound.
    pub fn from_summary(run_id: String, summary: &CaptureSummary) -> Self {
        let limits = summary.limits;
        let streams: Vec<StreamRecord> = summary
            .streams
            .iter()
            .map(|s| stream_record(s, &limits, summary.streams.len()))
            .collect();
        let output = match summary.manifest() {
            None => RecordOutput::Single {
                stream: streams
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| empty_stream(None)),
            },
            Some(m) => RecordOutput::Named {
                manifest: Digest::of(&m.to_bytes()),
                streams,
            },
        };
        Self {
            format: RECORD_FORMAT_V1.to_owned(),
            run_id,
            capture_status: summary.status,
            incomplete: summary.incomplete(),
            faults: summary.faults.clone(),
            display: summary.display.clone(),
            limits,
            output,
            run: None,
            keeps: Vec::new(),
        }
    }

    /// Parses a record, refusing a format this version does not know: a record of a newer
    /// format is reported as such whether or not it parses (when it does, fields this version
    /// ignores may reference artifacts).
    pub fn from_json(bytes: &[u8]) -> Result<Self, RecordParseError> {
        #[derive(Deserialize)]
        struct Format {
            format: String,
        }
        let known = |format: &str| RECORD_FORMATS.contains(&format);
        // One parse for a record that parses (every record GC reads, in the common case); the
        // format alone is looked at only to say why one does not.
        match serde_json::from_slice::<Self>(bytes) {
            Ok(record) if known(&record.format) => Ok(record),
            Ok(record) => Err(RecordParseError::UnknownFormat {
                format: record.format,
            }),
            Err(e) => {
                let Format { format } = serde_json::from_slice(bytes)?;
                if known(&format) {
                    Err(e.into())
                } else {
                    Err(RecordParseError::UnknownFormat { format })
                }
            }
        }
    }

    /// Makes the record keep `keeps` besides its output, and tags it with the format that says
    /// so: [`RECORD_FORMAT_V2`] when `keeps` is not empty, else [`RECORD_FORMAT_V1`] (which
    /// older readers still read).
    pub fn set_keeps(&mut self, keeps: Vec<Digest>) {
        self.format = if keeps.is_empty() {
            RECORD_FORMAT_V1
        } else {
            RECORD_FORMAT_V2
        }
        .to_owned();
        self.keeps = keeps;
    }

    /// Streams in rendering order.
    pub fn streams(&self) -> &[StreamRecord] {
        match &self.output {
            RecordOutput::Single { stream } => std::slice::from_ref(stream),
            RecordOutput::Named { streams, .. } => streams,
        }
    }

    /// The stream of that name.
    pub fn stream(&self, name: &str) -> Option<&StreamRecord> {
        self.streams()
            .iter()
            .find(|s| s.name.as_ref().is_some_and(|n| n.as_str() == name))
    }

    /// The URI that reads a stream in full: `artifact://<digest>` for single output,
    /// `artifact://<manifest>/<name>` for a named stream.
    pub fn stream_uri(&self, stream: &StreamRecord) -> ArtifactUri {
        match (&self.output, &stream.name) {
            (RecordOutput::Named { manifest, .. }, Some(name)) => {
                ArtifactUri::stream(*manifest, name.clone())
            }
            _ => ArtifactUri::new(stream.sha256),
        }
    }

    /// The URI of the whole output (the manifest for named output).
    pub fn output_uri(&self) -> ArtifactUri {
        match &self.output {
            RecordOutput::Single { stream } => ArtifactUri::new(stream.sha256),
            RecordOutput::Named { manifest, .. } => ArtifactUri::new(*manifest),
        }
    }

    /// The URI of every stream by name (`output` for single output), after the manifest's
    /// (`manifest`, named output only): what a caller reads the output with. Serializes as a
    /// JSON object in that order.
    pub fn artifact_uris(&self) -> ArtifactUris {
        let mut uris = Vec::with_capacity(self.streams().len() + 1);
        if let RecordOutput::Named { manifest, .. } = &self.output {
            uris.push(("manifest".to_owned(), ArtifactUri::new(*manifest)));
        }
        for stream in self.streams() {
            let name = stream.name.as_ref().map_or("output", |n| n.as_str());
            uris.push((name.to_owned(), self.stream_uri(stream)));
        }
        ArtifactUris(uris)
    }

    /// The URI of every stream that holds bytes, in order: what a report lists as a run's
    /// retained output (an empty stream has nothing to read back).
    pub fn nonempty_stream_uris(&self) -> Vec<ArtifactUri> {
        self.streams()
            .iter()
            .filter(|s| s.bytes > 0)
            .map(|s| self.stream_uri(s))
            .collect()
    }

    /// Every artifact the record references: the GC roots it contributes (the output's, then
    /// [`keeps`](Self::keeps)).
    pub fn artifacts(&self) -> Vec<Digest> {
        let mut out: Vec<Digest> = self.streams().iter().map(|s| s.sha256).collect();
        if let RecordOutput::Named { manifest, .. } = &self.output {
            out.insert(0, *manifest);
        }
        out.extend(&self.keeps);
        out
    }

    /// The final display, identical for the live run and any replay.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The model-facing text: an incomplete marker when needed, how the program ended when it
    /// exited with a non-zero code or was killed by a signal, then per stream its heading
    /// (named output only), preview, hint when truncated (a call of the model's read tool,
    /// [`ModelRead`]), and optional tail view. Its length never exceeds
    /// `limits.max_payload_bytes`.
    pub fn render(&self) -> String {
        self.render_with(&ModelRead)
    }

    /// [`render`](Self::render) with the hints in another read syntax. A syntax whose calls
    /// are longer than the model's may exceed the payload bound by the difference.
    pub fn render_with(&self, syntax: &dyn ReadSyntax) -> String {
        let mut out = String::new();
        if self.incomplete {
            out.push_str(&self.status_line());
            out.push('\n');
        }
        if let Some(line) = self.ending_line() {
            out.push_str(&line);
            out.push('\n');
        }
        let named = matches!(self.output, RecordOutput::Named { .. });
        for (i, s) in self.streams().iter().enumerate() {
            if named {
                if i > 0 {
                    out.push('\n');
                }
                if let Some(name) = &s.name {
                    let _ = writeln!(out, "[{name}]");
                }
            }
            out.push_str(&s.preview.text);
            let more_follows = s.preview.truncated || (named && i + 1 < self.streams().len());
            if more_follows && !s.preview.text.is_empty() && !s.preview.text.ends_with('\n') {
                out.push('\n');
            }
            if s.preview.truncated {
                let _ = writeln!(
                    out,
                    "[Truncated. Read more: {}]",
                    syntax.read_call(&self.stream_uri(s), s.continuation())
                );
                if let Some(t) = &s.tail {
                    // Line numbers for people: 1-based and inclusive, so the first line not
                    // shown in full, zero-based `newlines` (the hint's offset), is line
                    // `newlines + 1`, and the last one left out, before the tail, is
                    // `first_line` (the tail's first line, zero-based, less one, plus one).
                    let _ = writeln!(
                        out,
                        "[Lines {}-{} not shown in full; the last {} lines follow]",
                        s.preview.newlines + 1,
                        t.first_line,
                        t.lines
                    );
                    out.push_str(&t.text);
                }
            }
        }
        out
    }

    /// How the program ended, when that is news for the model: a non-zero exit code or a
    /// signal it died of by itself. A run agentrun stopped (timeout, cancellation) is
    /// incomplete, and its status line says so instead.
    fn ending_line(&self) -> Option<String> {
        let run = self.run.as_ref()?;
        if run.outcome != RunOutcome::Completed {
            return None;
        }
        match run.exit? {
            Exit::Code(0) => None,
            Exit::Code(code) => Some(format!("[The program exited with code {code}]")),
            Exit::Signal(signal) => Some(match signal_name(signal) {
                Some(name) => format!("[The program was killed by signal {signal} ({name})]"),
                None => format!("[The program was killed by signal {signal}]"),
            }),
        }
    }

    fn status_line(&self) -> String {
        let mut line = format!(
            "[Incomplete output: the run {}",
            self.capture_status.as_str()
        );
        if self.capture_status == CaptureStatus::Succeeded {
            line = "[Incomplete output: capture failed".to_owned();
        }
        if let Some(f) = self.faults.first() {
            match &f.stream {
                Some(s) => {
                    let _ = write!(line, "; capture fault on {s}: {}", f.message);
                }
                None => {
                    let _ = write!(line, "; capture fault: {}", f.message);
                }
            }
            if self.faults.len() > 1 {
                let _ = write!(line, " (+{} more)", self.faults.len() - 1);
            }
        }
        line.push(']');
        line
    }
}

/// The name of the signals whose numbers POSIX systems share.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

fn empty_stream(name: Option<StreamName>) -> StreamRecord {
    StreamRecord {
        name,
        sha256: Digest::of(b""),
        bytes: 0,
        lines: 0,
        preview: HeadPreview {
            text: String::new(),
            raw_bytes: 0,
            newlines: 0,
            truncated: false,
        },
        tail: None,
        continuation: None,
        start: None,
    }
}

fn stream_record(s: &StreamSummary, limits: &PreviewLimits, streams: usize) -> StreamRecord {
    let budget = limits.stream_budget(streams);
    let whole = cut_head(&s.head, s.head_is_complete(), budget, limits.max_lines);
    // With the tail view on, a quarter of the budget goes to the tail, but only for a stream
    // that does not fit anyway: one that fits is shown whole and gets no hint.
    let tail_budget = if limits.tail_lines > 0 && (whole.raw_len as u64) < s.bytes {
        limits.tail_budget(streams)
    } else {
        0
    };
    let cut = if tail_budget == 0 {
        whole
    } else {
        cut_head(
            &s.head,
            s.head_is_complete(),
            budget - tail_budget,
            limits.max_lines,
        )
    };
    let truncated = (cut.raw_len as u64) < s.bytes;
    let preview = HeadPreview {
        text: String::from_utf8_lossy(&s.head[..cut.raw_len]).into_owned(),
        raw_bytes: cut.raw_len as u64,
        newlines: cut.newlines,
        truncated,
    };
    let tail = match (&s.tail, truncated) {
        (Some(window), true) => cut_tail(
            window,
            s.lines,
            cut.newlines,
            limits.tail_lines,
            tail_budget,
        )
        .map(|t| TailPreview {
            text: String::from_utf8_lossy(&window.bytes[t.window_offset..]).into_owned(),
            first_line: t.first_line,
            lines: t.lines,
        }),
        _ => None,
    };
    StreamRecord {
        name: s.name.clone(),
        sha256: s.digest,
        bytes: s.bytes,
        lines: s.lines,
        continuation: Some(continuation(s, &preview)),
        start: Some(start(s)),
        preview,
        tail,
    }
}

/// Where reading the stream from its start begins: line 0, or byte 0 when line 0 alone is
/// longer than a page (it ends in the retained head, at the first newline after it, or at the
/// end of the stream). The preview may be longer than a page, so it cannot tell.
fn start(s: &StreamSummary) -> Continuation {
    let line_end = match memchr::memchr(b'\n', &s.head) {
        Some(i) => (i + 1) as u64,
        None => s.newline_after_head.map_or(s.bytes, |at| at + 1),
    };
    Continuation::at_line(0, 0, line_end, 0)
}

/// Where reading continues after `preview`: the end of the first line not shown in full is in
/// the retained head, or at the first newline after it, or at the end of the stream.
fn continuation(s: &StreamSummary, preview: &HeadPreview) -> Continuation {
    let shown = &s.head[..preview.raw_bytes as usize];
    let line_start = memchr::memrchr(b'\n', shown).map_or(0, |i| i + 1);
    let line_end = match memchr::memchr(b'\n', &s.head[line_start..]) {
        Some(i) => (line_start + i + 1) as u64,
        None => s.newline_after_head.map_or(s.bytes, |at| at + 1),
    };
    Continuation::after(
        preview.raw_bytes,
        s.bytes,
        preview.newlines,
        line_start as u64,
        line_end,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Capture;
    use crate::stream::{OutputChannel, OutputDeclaration};

    fn run(
        decl: OutputDeclaration,
        limits: PreviewLimits,
        chunks: &[(&str, &[u8])],
    ) -> ResultRecord {
        let summary = summary(decl, limits, chunks, CaptureStatus::Succeeded);
        ResultRecord::from_summary("r1".into(), &summary)
    }

    fn summary(
        decl: OutputDeclaration,
        limits: PreviewLimits,
        chunks: &[(&str, &[u8])],
        status: CaptureStatus,
    ) -> crate::capture::CaptureSummary {
        let mut c = Capture::new(decl, limits).unwrap();
        for (name, bytes) in chunks {
            let ch = if name.is_empty() {
                OutputChannel::Single
            } else {
                OutputChannel::Named(StreamName::new(name).unwrap())
            };
            let ix = c.resolve(&ch).unwrap().unwrap();
            c.handle_chunk(ix, bytes);
        }
        c.finish(None, status)
    }

    /// The record of a single output of `bytes`, default limits.
    fn single_record(bytes: &[u8]) -> ResultRecord {
        run(
            OutputDeclaration::Single,
            PreviewLimits::default(),
            &[("", bytes)],
        )
    }

    #[test]
    fn single_output_has_no_heading_and_a_bare_uri_hint() {
        let limits = PreviewLimits {
            max_lines: 2,
            ..Default::default()
        };
        let r = run(OutputDeclaration::Single, limits, &[("", b"a\nb\nc\n")]);
        let d = Digest::of(b"a\nb\nc\n");
        assert_eq!(
            r.render(),
            format!("a\nb\n[Truncated. Read more: read(filePath=\"artifact://{d}\", offset=2)]\n")
        );
        let r = single_record(b"a\nb");
        assert_eq!(r.render(), "a\nb");
    }

    #[test]
    fn named_streams_truncate_independently_with_manifest_hints() {
        let limits = PreviewLimits {
            max_lines: 1,
            ..Default::default()
        };
        let r = run(
            OutputDeclaration::stdout_stderr(),
            limits,
            &[("stdout", b"o1\no2\n"), ("stderr", b"e1\n")],
        );
        let RecordOutput::Named { manifest, .. } = &r.output else {
            panic!()
        };
        assert_eq!(
            r.render(),
            format!(
                "[stdout]\no1\n[Truncated. Read more: read(filePath=\"artifact://{manifest}/stdout\", offset=1)]\n\n[stderr]\ne1\n"
            )
        );
        assert_eq!(r.artifacts()[0], *manifest);
    }

    #[test]
    fn cut_lines_are_re_read_from_their_start() {
        let limits = PreviewLimits {
            max_bytes: 5,
            ..Default::default()
        };
        let r = run(OutputDeclaration::Single, limits, &[("", b"ab\ncdefgh\n")]);
        let s = &r.streams()[0];
        assert_eq!((s.preview.text.as_str(), s.preview.newlines), ("ab\ncd", 1));
        assert!(r.render().ends_with("offset=1)]\n"));
    }

    #[test]
    fn a_line_longer_than_a_page_is_continued_at_the_first_byte_not_shown() {
        use crate::page::MAX_PAGE_BYTES;
        let long = vec![b'x'; MAX_PAGE_BYTES + 1];
        // Over-long first line, cut inside the head; over-long line after short ones, cut
        // past the head (the newline that ends it is found after the head); a line of exactly
        // a page (with its newline) is still read by lines.
        // (stream, whether it continues by byte at the first byte not shown, else at line 0)
        let cases = [
            ([&long[..], b"\nnext\n"].concat(), true),
            ([b"a\nb\n", &long[..], b"\n"].concat(), true),
            (
                [&vec![b'y'; MAX_PAGE_BYTES - 1][..], b"\nz"].concat(),
                false,
            ),
        ];
        let limits = PreviewLimits {
            max_bytes: 1000,
            ..Default::default()
        };
        for (bytes, by_byte) in cases {
            for chunk in [bytes.len(), 4096, 999] {
                let chunks: Vec<(&str, &[u8])> = bytes.chunks(chunk).map(|c| ("", c)).collect();
                let r = run(OutputDeclaration::Single, limits, &chunks);
                let s = &r.streams()[0];
                let want = if by_byte {
                    Continuation::Byte(s.preview.raw_bytes)
                } else {
                    Continuation::Line(0)
                };
                assert_eq!(s.continuation(), want, "chunks of {chunk}");
                let call = ModelRead.read_call(&r.stream_uri(s), want);
                assert!(
                    r.render()
                        .contains(&format!("[Truncated. Read more: {call}]")),
                    "{}",
                    &r.render()[r.render().len().saturating_sub(200)..]
                );
            }
        }
        let r = run(OutputDeclaration::Single, limits, &[("", &long)]);
        let hint = format!("byteOffset={}", r.streams()[0].preview.raw_bytes);
        assert!(r.render().contains(&hint) && !r.render().contains("offset=0"));
    }

    #[test]
    fn the_start_is_by_byte_when_line_0_is_longer_than_a_page_even_inside_the_preview() {
        use crate::page::MAX_PAGE_BYTES;
        let long = vec![b'x'; MAX_PAGE_BYTES + 1];
        // (stream, max_bytes, whether reading from the start is by byte)
        let cases = [
            // The preview (larger than a page) shows line 0 in full, and more.
            ([&long[..], b"\nnext\n"].concat(), 3 * MAX_PAGE_BYTES, true),
            ([&long[..], b"\nnext\n"].concat(), 1000, true),
            // Line 0 ends past the head.
            ([&long[..], b"\n"].concat(), 1000, true),
            (
                [b"a\n", &long[..], b"\n"].concat(),
                3 * MAX_PAGE_BYTES,
                false,
            ),
            (vec![b'y'; MAX_PAGE_BYTES], 3 * MAX_PAGE_BYTES, false),
            (Vec::new(), 1000, false),
        ];
        for (bytes, max_bytes, by_byte) in cases {
            let limits = PreviewLimits {
                max_bytes,
                max_lines: 100,
                ..Default::default()
            };
            let r = run(OutputDeclaration::Single, limits, &[("", &bytes)]);
            let want = if by_byte {
                Continuation::Byte(0)
            } else {
                Continuation::Line(0)
            };
            assert_eq!(r.streams()[0].start(), want, "{} bytes", bytes.len());
        }
    }

    #[test]
    fn a_record_written_before_the_continuation_was_stored_continues_by_line() {
        let limits = PreviewLimits {
            max_lines: 1,
            ..Default::default()
        };
        let r = run(OutputDeclaration::Single, limits, &[("", b"a\nb\n")]);
        let mut old = serde_json::to_value(&r).unwrap();
        let stream = &mut old["output"]["stream"];
        assert_eq!(
            stream["continuation"],
            serde_json::json!({"kind": "line", "at": 1})
        );
        stream.as_object_mut().unwrap().remove("continuation");
        let back = ResultRecord::from_json(old.to_string().as_bytes()).unwrap();
        assert_eq!(back.streams()[0].continuation(), Continuation::Line(1));
        assert_eq!(back.render(), r.render());
        let whole = single_record(b"a\n");
        let mut old = serde_json::to_value(&whole).unwrap();
        old["output"]["stream"]
            .as_object_mut()
            .unwrap()
            .remove("continuation");
        let back = ResultRecord::from_json(old.to_string().as_bytes()).unwrap();
        assert_eq!(back.streams()[0].continuation(), Continuation::End);
    }

    #[test]
    fn incomplete_output_says_so() {
        let limits = PreviewLimits::default();
        let cancelled = CaptureStatus::Cancelled;
        let s = summary(
            OutputDeclaration::Single,
            limits,
            &[("", b"partial")],
            cancelled,
        );
        let r = ResultRecord::from_summary("r".into(), &s);
        assert!(r.incomplete);
        assert_eq!(
            r.render(),
            "[Incomplete output: the run cancelled]\npartial"
        );
    }

    #[test]
    fn tail_view_shows_exact_last_lines() {
        let limits = PreviewLimits {
            max_lines: 2,
            tail_lines: 2,
            ..Default::default()
        };
        let data: Vec<u8> = (0..10)
            .flat_map(|i| format!("l{i}\n").into_bytes())
            .collect();
        let r = run(OutputDeclaration::Single, limits, &[("", &data)]);
        let text = r.render();
        assert!(text.starts_with("l0\nl1\n[Truncated. Read more:"), "{text}");
        assert!(
            text.ends_with(
                "offset=2)]\n[Lines 3-8 not shown in full; the last 2 lines follow]\nl8\nl9\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_tail_view_never_truncates_a_stream_that_fits() {
        let limits = PreviewLimits {
            max_bytes: 100,
            tail_lines: 3,
            ..Default::default()
        };
        let data = b"x".repeat(90);
        let r = run(OutputDeclaration::Single, limits, &[("", &data)]);
        assert!(!r.streams()[0].preview.truncated);
        assert_eq!(r.render().as_bytes(), data.as_slice());
    }

    #[test]
    fn record_round_trips_through_json_and_renders_the_same() {
        let r = run(
            OutputDeclaration::stdout_stderr(),
            PreviewLimits::default(),
            &[("stdout", b"x\xff\n")],
        );
        let json = serde_json::to_string(&r).unwrap();
        let back = ResultRecord::from_json(json.as_bytes()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.render(), r.render());
    }

    #[test]
    fn a_record_that_keeps_nothing_is_v1_and_one_that_keeps_artifacts_is_v2() {
        let mut r = single_record(b"listing\n");
        let v1 = serde_json::to_value(&r).unwrap();
        assert_eq!(v1["format"], RECORD_FORMAT_V1);
        assert!(v1.get("keeps").is_none(), "a v1 record has no keeps");
        let back = ResultRecord::from_json(v1.to_string().as_bytes()).unwrap();
        assert_eq!(back, r);

        let kept = vec![Digest::of(b"a"), Digest::of(b"b")];
        r.set_keeps(kept.clone());
        let v2 = serde_json::to_value(&r).unwrap();
        assert_eq!(v2["format"], RECORD_FORMAT_V2);
        assert_eq!(v2["keeps"].as_array().map(Vec::len), Some(2));
        let back = ResultRecord::from_json(v2.to_string().as_bytes()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.keeps, kept);
        assert!(back.artifacts().ends_with(&kept));

        // A record the agentrun before v2 wrote may keep artifacts under v1: read with them.
        let mut early = v2.clone();
        early["format"] = RECORD_FORMAT_V1.into();
        let back = ResultRecord::from_json(early.to_string().as_bytes()).unwrap();
        assert_eq!(back.keeps, kept);

        // Keeping nothing again goes back to v1.
        r.set_keeps(Vec::new());
        assert_eq!(r.format, RECORD_FORMAT_V1);
    }

    #[test]
    fn a_record_of_an_unknown_format_is_refused_by_name_even_when_it_parses() {
        let r = single_record(b"x");
        let mut future = serde_json::to_value(&r).unwrap();
        future["format"] = "agentrun.record.v3".into();
        future["pins"] = serde_json::json!([Digest::of(b"p").to_string()]);
        let err = ResultRecord::from_json(future.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(&err, RecordParseError::UnknownFormat { format } if format == "agentrun.record.v3"),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("agentrun.record.v3"), "{message}");
        assert!(message.contains(RECORD_FORMAT_V2), "{message}");
        // Unknown and unparseable as a record otherwise: still named for its format.
        let err = ResultRecord::from_json(br#"{"format": "agentrun.record.v9", "x": 1}"#);
        assert!(matches!(err, Err(RecordParseError::UnknownFormat { .. })));
        // No format at all is not a record.
        let mut none = serde_json::to_value(&r).unwrap();
        none.as_object_mut().unwrap().remove("format");
        let err = ResultRecord::from_json(none.to_string().as_bytes());
        assert!(matches!(err, Err(RecordParseError::Invalid(_))), "{err:?}");
    }

    #[test]
    fn the_model_is_told_how_the_program_ended() {
        let with_run = |outcome: RunOutcome, exit: Option<Exit>, status: CaptureStatus| {
            let limits = PreviewLimits::default();
            let s = summary(OutputDeclaration::Single, limits, &[("", b"out\n")], status);
            let mut r = ResultRecord::from_summary("r".into(), &s);
            r.run = Some(RunInfo {
                command: vec!["prog".into()],
                outcome,
                exit,
                started_unix_ms: 0,
                duration_ms: 1,
                cwd: None,
                label: None,
            });
            r.render()
        };
        let ok = CaptureStatus::Succeeded;
        assert_eq!(
            with_run(RunOutcome::Completed, Some(Exit::Code(0)), ok),
            "out\n"
        );
        assert_eq!(
            with_run(RunOutcome::Completed, Some(Exit::Code(3)), ok),
            "[The program exited with code 3]\nout\n"
        );
        assert_eq!(
            with_run(RunOutcome::Completed, Some(Exit::Signal(9)), ok),
            "[The program was killed by signal 9 (SIGKILL)]\nout\n"
        );
        assert_eq!(
            with_run(RunOutcome::Completed, Some(Exit::Signal(64)), ok),
            "[The program was killed by signal 64]\nout\n"
        );
        // A run agentrun stopped says so in its status line, not as a signal of its own.
        assert_eq!(
            with_run(
                RunOutcome::TimedOut,
                Some(Exit::Signal(15)),
                CaptureStatus::Cancelled
            ),
            "[Incomplete output: the run cancelled]\nout\n"
        );
    }

    #[test]
    fn the_capture_status_is_named_for_what_it_is_and_old_records_still_load() {
        let r = single_record(b"x");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["capture_status"], "succeeded");
        assert!(json.get("status").is_none());
        let mut old = json.clone();
        let status = old
            .as_object_mut()
            .unwrap()
            .remove("capture_status")
            .unwrap();
        old["status"] = status;
        let back = ResultRecord::from_json(old.to_string().as_bytes()).unwrap();
        assert_eq!(back, r);
    }
}
