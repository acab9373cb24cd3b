//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`), kept here so the stable test suite
//! replays the committed corpora through exactly the same code (`tests/fuzz_corpus_replay.rs`).
//!
//! Each body turns a fuzz input into a case and runs the matching check of [`crate::checks`]
//! (or of the other check modules); it panics only when a property is violated. Two kinds:
//!
//! * The targets that drive a machine through a sequence of operations (`capture`,
//!   `compaction`, `lifecycle`, `auto_mode`) decode a structured input with `arbitrary`
//!   ([`crate::fuzz_inputs`]: `#[derive(Arbitrary)]` operation enums); their fuzz targets are
//!   typed (`fuzz_target!(|input: T| …)`, so `cargo fuzz fmt` prints an input as its
//!   operations) and their seeds are typed values ([`crate::fuzz_seeds`]) written by
//!   `cargo run -p agentrun-tests --bin make-fuzz-seeds`. The targets of the retry, stall,
//!   budget, fan-out and failure-classifier machines ([`crate::machine_fuzz`]) are typed the
//!   same way; their seeds are raw bytes (every input decodes to some operations).
//! * The byte-level targets (URIs, records, previews and UTF-8 truncation, pages and the binary
//!   decoders, the harness decoders, transcript documents, the sanitizer's texts) read their
//!   bytes in simple layouts documented here, so seeds can be written by hand
//!   (`scripts/make-fuzz-seeds.py`): a reader past the end of the input yields zeros.
//!
//! The `json_budget` and `line_scan` targets' bodies are in `agentrun_core::harness::fuzzing`,
//! in the core because they check private functions; the core compiles it for fuzzing and with its
//! `fuzz-bodies` feature, which this crate enables for its tests only, so the replay test adds
//! that row itself.
//!
//! Adding a target: its `[[bin]]` in `fuzz/Cargo.toml` (which `scripts/fuzz.sh` and CI read),
//! `fuzz/fuzz_targets/<name>.rs` calling its body here, a row in [`TARGETS`] and seeds in
//! `fuzz/corpus/<name>/` (for a typed target: its seeds in [`crate::fuzz_seeds`], written by
//! `make-fuzz-seeds` and checked by the replay test). The replay test fails for a target that
//! lacks any of them.

use agentrun_core::limits::MIN_PAYLOAD_BYTES;
use agentrun_core::{CaptureStatus, OutputDeclaration, PreviewLimits};

use crate::auto_mode_checks::AutoModeInput;
use crate::checks::{self, Delta, PageCase, PreviewCase};
use crate::compaction_checks::{self, Answer, CompactionInput, Script};
use crate::fuzz_inputs::{CaptureInput, decode};
use crate::harness_checks;
use crate::lifecycle_checks::{self, LifecycleInput};
use crate::machine_fuzz;

/// Most stream bytes one preview input may expand to. Keeps every run fast (paging a stream
/// with one-line pages is quadratic in its length) while still far above `max_bytes`.
pub const MAX_PREVIEW_STREAM_BYTES: usize = 64 * 1024;

/// A fuzz body: panics only when a property is violated.
pub type Body = fn(&[u8]);

/// Every fuzz target's body by target name (the `[[bin]]` name in `fuzz/Cargo.toml`), but
/// `json_budget` and `line_scan` (see the module documentation).
pub const TARGETS: &[(&str, Body)] = &[
    ("uri", uri),
    ("record", record),
    ("preview", preview),
    ("page", page),
    ("capture", capture),
    ("harness_claude", harness_claude),
    ("harness_grok", harness_grok),
    ("harness_agy", harness_agy),
    ("harness_codex", harness_codex),
    ("harness_muse", harness_muse),
    ("harness_opencode", harness_opencode),
    ("harness_qwen", harness_qwen),
    ("harness_pi", harness_pi),
    ("harness_gemini", harness_gemini),
    ("auto_mode_text", auto_mode_text),
    ("compaction", compaction),
    ("transcript", transcript),
    ("lifecycle", lifecycle),
    ("auto_mode", auto_mode),
    ("sanitize_phrase", sanitize_phrase),
    ("retry", machine_fuzz::retry),
    ("stall", machine_fuzz::stall),
    ("budget", machine_fuzz::budget),
    ("fanout", machine_fuzz::fanout),
    ("failure", machine_fuzz::failure),
    ("config", machine_fuzz::config),
];

/// The harness decoder targets: both bodies of one dialect on every input, arbitrary bytes as
/// lines and the input as a sequence of plausible events (see [`crate::harness_checks`]).
macro_rules! harness_bodies {
    ($($target:ident => $bytes:ident, $events:ident;)*) => {$(
        #[doc = concat!("Target `", stringify!($target), "`.")]
        pub fn $target(data: &[u8]) {
            harness_checks::$bytes(data);
            harness_checks::$events(data);
        }
    )*};
}

harness_bodies! {
    harness_claude => claude_bytes, claude_events;
    harness_grok => grok_bytes, grok_events;
    harness_agy => agy_bytes, agy_events;
    harness_codex => codex_bytes, codex_events;
    harness_muse => muse_bytes, muse_events;
    harness_opencode => opencode_bytes, opencode_events;
    harness_qwen => qwen_bytes, qwen_events;
    harness_pi => pi_bytes, pi_events;
    harness_gemini => gemini_bytes, gemini_events;
}

/// Reads fields off the front of a fuzz input.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `n` bytes (fewer at the end of the input).
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// URI target: the input, lossily decoded, is a candidate `artifact://` URI.
pub fn uri(data: &[u8]) {
    checks::check_uri(&String::from_utf8_lossy(data));
}

/// Record target: the input is the bytes of a record file.
pub fn record(data: &[u8]) {
    checks::check_record(data);
}

/// Preview target. Layout:
///
/// ```text
/// u8  max_lines   = 1 + b % 50          u16 max_bytes = 1 + v % 4096
/// u8  tail_lines  = b % 6               u16 max_payload_bytes = MIN_PAYLOAD_BYTES + v
/// u8  status      = b % 3 (succeeded, failed, cancelled)
/// u8  streams     = b % 9 (0: single output)
///     per named stream: u8 L; L == 0: name "s<i>", else name = the next 1 + L % 64 bytes
///     mapped onto [A-Za-z0-9._-] (a duplicate or "."/".." falls back to "s<i>" for all)
/// u8  pages       = 1 + b % 4, then per page u16 line limit = 1 + v % 2000
/// then deltas until the input ends, each u8 op:
///     op % 4 == 0, 1: chunk     u8 stream (% streams), u8 repeat = 1 + b % 32, u8 len, bytes
///     op % 4 == 2:    foreign   u8 named (odd), u8 len, bytes (dropped: never captured)
///     op % 4 == 3:    display   u8 len, bytes (lossily decoded)
/// ```
///
/// A chunk's bytes repeated `repeat` times make lines far longer than `max_bytes` from short
/// inputs; the arbitrary lengths split multi-byte characters across chunks.
pub fn preview(data: &[u8]) {
    checks::check_preview(&preview_case(data));
}

fn preview_case(data: &[u8]) -> PreviewCase {
    let mut input = Input(data);
    let limits = limits(&mut input);
    let status = status(&mut input);
    let declaration = declaration(&mut input);
    let streams = declaration.channel_count();
    let page_limits = page_limits(&mut input);

    let mut deltas = Vec::new();
    let mut total = 0;
    while !input.is_empty() && total < MAX_PREVIEW_STREAM_BYTES {
        match input.byte() % 4 {
            0 | 1 => {
                let stream = usize::from(input.byte()) % streams;
                let repeat = 1 + usize::from(input.byte() % 32);
                let len = usize::from(input.byte());
                let bytes = input.take(len).repeat(repeat);
                total += bytes.len();
                deltas.push(Delta::Chunk(stream, bytes));
            }
            2 => {
                let named = input.byte() % 2 == 1;
                let len = usize::from(input.byte());
                // The refused chunk's bytes: never captured, so nothing to keep.
                input.take(len);
                deltas.push(Delta::Foreign(named));
            }
            _ => {
                let len = usize::from(input.byte());
                deltas.push(Delta::Display(
                    String::from_utf8_lossy(input.take(len)).into_owned(),
                ));
            }
        }
    }
    PreviewCase {
        declaration,
        limits,
        deltas,
        status,
        page_limits,
    }
}

/// Capture target: random sequences of the operations a driver performs on the capture
/// machine ([`CaptureInput`]: chunks on several streams, write and index-write faults, faults
/// of no stream, display text, undeclared channels, then a streamed or full completion),
/// checked by [`checks::check_capture`].
pub fn capture(data: &[u8]) {
    if let Some(input) = decode::<CaptureInput>(data) {
        capture_input(&input);
    }
}

/// The capture target's body on a decoded input (the typed fuzz target calls it directly).
pub fn capture_input(input: &CaptureInput) {
    checks::check_capture(&input.case());
}

fn limits(input: &mut Input<'_>) -> PreviewLimits {
    PreviewLimits {
        max_lines: 1 + u64::from(input.byte() % 50),
        max_bytes: 1 + usize::from(input.u16() % 4096),
        tail_lines: u64::from(input.byte() % 6),
        max_payload_bytes: MIN_PAYLOAD_BYTES + usize::from(input.u16()),
    }
}

fn status(input: &mut Input<'_>) -> CaptureStatus {
    [
        CaptureStatus::Succeeded,
        CaptureStatus::Failed,
        CaptureStatus::Cancelled,
    ][usize::from(input.byte() % 3)]
}

fn page_limits(input: &mut Input<'_>) -> Vec<u64> {
    let pages = 1 + input.byte() % 4;
    (0..pages)
        .map(|_| 1 + u64::from(input.u16() % 2000))
        .collect()
}

fn declaration(input: &mut Input<'_>) -> OutputDeclaration {
    const NAME_BYTES: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    let count = usize::from(input.byte() % 9);
    if count == 0 {
        return OutputDeclaration::Single;
    }
    let names: Vec<String> = (0..count)
        .map(|i| match input.byte() {
            0 => format!("s{i}"),
            len => {
                let raw = input.take(1 + usize::from(len % 64));
                raw.iter()
                    .map(|&b| char::from(NAME_BYTES[usize::from(b) % NAME_BYTES.len()]))
                    .collect()
            }
        })
        .collect();
    OutputDeclaration::named(&names)
        .or_else(|_| OutputDeclaration::named((0..count).map(|i| format!("s{i}"))))
        .expect("generated names are valid")
}

/// Page target. Layout:
///
/// ```text
/// u8  flags       bit 0: line offset is a raw u64, else u16 % (lines + 3)
///                 bit 1: byte offset is a raw u64, else u16 % (bytes + 3)
/// u64 / u16 line offset      u16 line limit (raw: 0 and > 2000 are refused)
/// u64 / u16 byte offset      u32 byte limit (raw: 0 and > 2 MiB are refused)
/// u8  feed size   = 1 + b (pieces the page cursor is fed)
/// u8  block size  = 1 + b (line index blocks)
/// the rest: the artifact's content
/// ```
///
/// The whole input also goes through the index-header, index-entry and manifest decoders.
pub fn page(data: &[u8]) {
    checks::check_decoders(data);
    let mut input = Input(data);
    let flags = input.byte();
    let line_offset = if flags & 1 == 1 {
        Offset::Raw(input.u64())
    } else {
        Offset::Near(input.u16())
    };
    let limit = u64::from(input.u16());
    let byte_offset = if flags & 2 == 2 {
        Offset::Raw(input.u64())
    } else {
        Offset::Near(input.u16())
    };
    let byte_limit = u64::from(input.u32());
    let feed_size = 1 + usize::from(input.byte());
    let block_size = 1 + u32::from(input.byte());
    let content = input.take(usize::MAX).to_vec();
    let lines = checks::reference_lines(&content).len() as u64;
    checks::check_page(&PageCase {
        offset: line_offset.resolve(lines),
        limit,
        byte_offset: byte_offset.resolve(content.len() as u64),
        byte_limit,
        feed_size,
        block_size,
        content,
    });
}

/// An offset either taken as is or brought near the valid range, so most inputs exercise the
/// interesting boundaries rather than `OffsetPastEnd`.
enum Offset {
    Raw(u64),
    Near(u16),
}

impl Offset {
    fn resolve(self, end: u64) -> u64 {
        match self {
            Self::Raw(v) => v,
            Self::Near(v) => u64::from(v) % (end + 3),
        }
    }
}

/// Auto-mode text target: the input, lossily decoded, is both an appended instruction for the
/// sanitizer and an Evaluate answer for the verdict parser.
pub fn auto_mode_text(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    crate::auto_mode_checks::check_sanitizer(&text);
    crate::auto_mode_checks::check_verdict(&text);
}

/// A case of the phrase target, decoded from the input with `arbitrary`: in the input, the
/// three bytes first, then `before` (its length is taken from the last byte of the input),
/// then `after` (the rest); invalid UTF-8 cuts a string at its last valid character.
#[derive(Debug, arbitrary::Arbitrary)]
pub struct PhraseCase {
    /// Index into `agentrun_core::auto_mode::sanitize::fuzzing::PHRASES` (modulo its length).
    pub phrase: u8,
    /// Disguises (`fuzzing::flags`), combined.
    pub flags: u8,
    /// Picks the variants of each disguise and the two line breaks around the phrase.
    pub seed: u8,
    /// Noise before the phrase.
    pub before: String,
    /// Noise after the phrase.
    pub after: String,
}

/// Phrase target: a known injection phrase, disguised (case, look-alikes, marks, invisible
/// characters, separators, fullwidth or mathematical letters), between line breaks in
/// arbitrary noise, never survives sanitizing: neither verbatim nor once the output is
/// normalized the way the sanitizer matches.
pub fn sanitize_phrase(data: &[u8]) {
    use arbitrary::Arbitrary;
    let Ok(case) = PhraseCase::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return;
    };
    agentrun_core::auto_mode::sanitize::fuzzing::check_phrase_removed(
        &case.before,
        usize::from(case.phrase),
        case.flags,
        case.seed,
        &case.after,
    );
}

/// Compaction target: a generated transcript, the store it names artifacts in and a
/// summarizer script ([`CompactionInput`]), through pruning and the retry machine.
pub fn compaction(data: &[u8]) {
    if let Some(input) = decode::<CompactionInput>(data) {
        compaction_input(&input);
    }
}

/// The compaction target's body on a decoded input (the typed fuzz target calls it directly).
pub fn compaction_input(input: &CompactionInput) {
    let (t, store) = input.case();
    compaction_checks::check_prune(&t, &store);
    compaction_checks::check_machine(&t, &store, &input.script.script());
}

/// Lifecycle target: the run lifecycle on a virtual clock through arbitrary sequences of
/// driver events ([`LifecycleInput`]), checked by [`lifecycle_checks::check_lifecycle`].
pub fn lifecycle(data: &[u8]) {
    if let Some(input) = decode::<LifecycleInput>(data) {
        lifecycle_checks::check_lifecycle(&input);
    }
}

/// Auto-mode target: the phase machine through arbitrary sequences of turn and verification
/// results ([`AutoModeInput`]), checked against the phase table by
/// [`crate::auto_mode_checks::check_auto_mode`].
pub fn auto_mode(data: &[u8]) {
    if let Some(input) = decode::<AutoModeInput>(data) {
        crate::auto_mode_checks::check_auto_mode(&input);
    }
}

/// Transcript target: the input is a transcript document (bounded to
/// [`MAX_TRANSCRIPT_BYTES`]). Parsing never panics, the streaming read from a reader agrees
/// with the one from bytes and with the value conversion, and what parses is pruned and
/// compacted under every summarizer script of [`document_scripts`] (the artifacts a parsed
/// document names are in no store).
pub fn transcript(data: &[u8]) {
    let limits = agentrun_core::transcript::TranscriptLimits {
        max_bytes: MAX_TRANSCRIPT_BYTES,
        max_messages: 256,
        max_blocks: 1024,
    };
    let parsed = agentrun_core::transcript::Transcript::from_json(data, &limits);
    // The streaming read from a reader (as `agentrun compact` reads a file) agrees with the
    // one from bytes, and a transcript it accepts is the value conversion's.
    let mut de = serde_json::Deserializer::from_reader(data);
    let read =
        agentrun_core::transcript::Transcript::from_deserializer(&mut de, &limits).and_then(|t| {
            de.end()
                .map(|()| t)
                .map_err(|e| agentrun_core::transcript::TranscriptError::Json(e.to_string()))
        });
    // (The reader's caller checks the size itself; `from_json` refuses a longer input.)
    if data.len() <= limits.max_bytes {
        assert_eq!(
            parsed.is_ok(),
            read.is_ok(),
            "bytes: {parsed:?}, reader: {read:?}"
        );
    }
    if let (Ok(a), Ok(b)) = (&parsed, &read) {
        assert_eq!(a, b, "reader and bytes disagree");
        let value: serde_json::Value = serde_json::from_slice(data).expect("parsed, so JSON");
        assert_eq!(
            agentrun_core::transcript::Transcript::from_value(value, &limits).as_ref(),
            Ok(a),
            "streaming and value conversion disagree"
        );
    }
    if let Ok(t) = parsed {
        let empty = compaction_checks::ModelStore::default();
        compaction_checks::check_prune(&t, &empty);
        for script in document_scripts() {
            compaction_checks::check_machine(&t, &empty, &script);
        }
    }
}

/// Largest transcript document the transcript target parses.
pub const MAX_TRANSCRIPT_BYTES: usize = 64 * 1024;

/// The summarizer scripts a parsed document runs under: success; a context-length failure
/// then success; a context-length failure twice; an unrelated failure; a fit limit; a fit
/// failure with a failing retention.
pub fn document_scripts() -> [Script; 6] {
    let script = |answers, max_input_bytes, retention_ok| Script {
        answers,
        max_input_bytes,
        retention_ok,
    };
    [
        script([Answer::Summary; 2], None, true),
        script([Answer::ContextLength, Answer::Summary], None, true),
        script([Answer::ContextLength; 2], None, true),
        script([Answer::Other, Answer::Summary], None, true),
        script([Answer::Summary; 2], Some(708), true),
        script([Answer::DoesNotFit, Answer::Summary], None, false),
    ]
}
