//! The structured inputs of the fuzz targets that drive a machine through a sequence of
//! operations, decoded from the fuzz input with `arbitrary` (`#[derive(Arbitrary)]`), and the
//! encoder that writes typed seeds back to bytes.
//!
//! A sequence target's body decodes its input with [`decode`], exactly as libFuzzer's typed
//! targets (`fuzz_target!(|input: T| …)`) do, so the stable corpus replay and the fuzzer see
//! the same case. The byte-level targets (URI, record, preview, page, the harness decoders,
//! the sanitizer texts, the JSON budget) keep their own byte layouts (see
//! [`crate::fuzz_bodies`]).
//!
//! The encoding is the one `arbitrary` (1.x) reads; every field type here is chosen so that it
//! reads strictly front to back (integers little-endian, `bool` as a byte's low bit, an enum
//! variant as a `u32` scaled onto the variant count, `Option` and each `Vec` element behind a
//! continuation byte). Byte strings and texts are `Vec<u8>` (texts decoded lossily) rather
//! than `String`, whose length `arbitrary` takes from the end of the input. [`Encode`] writes
//! that encoding; the seed tests check `decode(encode(x)) == x` for every seed, so a change of
//! the format fails there rather than silently turning the seeds into other cases.

use agentrun_core::limits::MIN_PAYLOAD_BYTES;
use agentrun_core::{CaptureStatus, OutputDeclaration, PreviewLimits};
use arbitrary::{Arbitrary, Unstructured};

use crate::checks::{CaptureCase, CaptureOp, Ending, Write};
use crate::compaction_checks::{
    Answer, ArgsInput, ArtifactsInput, BlockInput, CompactionInput, ContentInput, MessageInput,
    ScriptInput, TextInput, ToolInput,
};

/// Decodes a fuzz input as `libfuzzer_sys::fuzz_target!` does for a typed target: an input
/// shorter than the type's least encoded size is rejected (`None`), any other is decoded with
/// `arbitrary_take_rest` (which, for the types here, never fails: past the end every field
/// reads as zeros).
pub fn decode<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    if data.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(Unstructured::new(data)).ok()
}

/// Writes a value in the encoding `arbitrary` decodes it from (see the module documentation).
pub trait Encode {
    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);
}

/// The bytes of `value` (a seed file's content).
pub fn encode<T: Encode>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    value.encode(&mut out);
    out
}

/// Writes enum variant `index` of `count`: the `u32` that `derive(Arbitrary)` scales onto
/// `index` (`(u32 * count) >> 32`).
pub fn encode_variant(index: u32, count: u32, out: &mut Vec<u8>) {
    assert!(index < count, "variant {index} of {count}");
    let value = (u64::from(index) << 32).div_ceil(u64::from(count));
    let value = u32::try_from(value).expect("below 2^32 for index < count");
    out.extend_from_slice(&value.to_le_bytes());
}

impl Encode for u8 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
}

impl Encode for u16 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Encode for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        self.is_some().encode(out);
        if let Some(v) = self {
            v.encode(out);
        }
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in self {
            true.encode(out);
            v.encode(out);
        }
        false.encode(out);
    }
}

impl<T: Encode, const N: usize> Encode for [T; N] {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in self {
            v.encode(out);
        }
    }
}

/// `Encode` for a struct: its fields in declaration order (the order `derive(Arbitrary)` reads).
macro_rules! encode_fields {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl Encode for $ty {
            fn encode(&self, out: &mut Vec<u8>) {
                let $ty { $($field),* } = self;
                $($field.encode(out);)*
            }
        }
    };
}
pub(crate) use encode_fields;

// ---------------------------------------------------------------------------------------------
// Capture
// ---------------------------------------------------------------------------------------------

/// Most stream bytes one capture input may expand to, all streams together: paging every
/// stream with one-line pages is quadratic in its length, and far less already reaches every
/// preview bound.
pub const MAX_CAPTURE_STREAM_BYTES: usize = 32 * 1024;

/// Preview limits, mapped into their valid ranges.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct LimitsInput {
    /// `max_lines = 1 + v % 50`.
    pub max_lines: u8,
    /// `max_bytes = 1 + v % 4096`.
    pub max_bytes: u16,
    /// `tail_lines = v % 6`.
    pub tail_lines: u8,
    /// `max_payload_bytes = MIN_PAYLOAD_BYTES + v`.
    pub payload_extra: u16,
}
encode_fields!(LimitsInput {
    max_lines,
    max_bytes,
    tail_lines,
    payload_extra
});

impl LimitsInput {
    /// The limits.
    pub fn limits(&self) -> PreviewLimits {
        PreviewLimits {
            max_lines: 1 + u64::from(self.max_lines % 50),
            max_bytes: 1 + usize::from(self.max_bytes % 4096),
            tail_lines: u64::from(self.tail_lines % 6),
            max_payload_bytes: MIN_PAYLOAD_BYTES + usize::from(self.payload_extra),
        }
    }
}

/// The run's terminal status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum StatusInput {
    /// [`CaptureStatus::Succeeded`].
    Succeeded,
    /// [`CaptureStatus::Failed`].
    Failed,
    /// [`CaptureStatus::Cancelled`].
    Cancelled,
}

impl Encode for StatusInput {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_variant(*self as u32, 3, out);
    }
}

impl StatusInput {
    /// The status.
    pub fn status(self) -> CaptureStatus {
        match self {
            Self::Succeeded => CaptureStatus::Succeeded,
            Self::Failed => CaptureStatus::Failed,
            Self::Cancelled => CaptureStatus::Cancelled,
        }
    }
}

/// The output declaration: one unnamed output, or one to eight named streams.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum StreamsInput {
    /// [`OutputDeclaration::Single`].
    Single,
    /// Named streams: the first and up to seven more (the rest are ignored). A name is `None`
    /// for `s<i>`, or bytes mapped onto `[A-Za-z0-9._-]` and cut to 64 (empty: `s<i>`); a
    /// duplicate or `.`/`..` falls back to `s<i>` for every stream.
    Named(Option<Vec<u8>>, Vec<Option<Vec<u8>>>),
}

impl Encode for StreamsInput {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Single => encode_variant(0, 2, out),
            Self::Named(first, more) => {
                encode_variant(1, 2, out);
                first.encode(out);
                more.encode(out);
            }
        }
    }
}

impl StreamsInput {
    /// The declaration.
    pub fn declaration(&self) -> OutputDeclaration {
        const NAME_BYTES: &[u8] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
        let Self::Named(first, more) = self else {
            return OutputDeclaration::Single;
        };
        let raw: Vec<&Option<Vec<u8>>> = std::iter::once(first).chain(more).take(8).collect();
        let names: Vec<String> = raw
            .iter()
            .enumerate()
            .map(|(i, name)| match name {
                Some(bytes) if !bytes.is_empty() => bytes
                    .iter()
                    .take(64)
                    .map(|&b| char::from(NAME_BYTES[usize::from(b) % NAME_BYTES.len()]))
                    .collect(),
                _ => format!("s{i}"),
            })
            .collect();
        OutputDeclaration::named(&names)
            .or_else(|_| OutputDeclaration::named((0..names.len()).map(|i| format!("s{i}"))))
            .expect("generated names are valid")
    }
}

/// Line limits of the `read` pages that follow the hints: the first and up to three more,
/// each `1 + v % 2000`.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct PagesInput {
    /// The first page's limit.
    pub first: u16,
    /// The next pages' limits (past three ignored).
    pub more: Vec<u16>,
}
encode_fields!(PagesInput { first, more });

impl PagesInput {
    /// The limits.
    pub fn limits(&self) -> Vec<u64> {
        std::iter::once(&self.first)
            .chain(&self.more)
            .take(4)
            .map(|&v| 1 + u64::from(v % 2000))
            .collect()
    }
}

/// Bytes repeated `1 + repeat % R` times (R is 32 for stream bytes, 4 for fault messages), so
/// short inputs make lines far longer than any preview bound.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct Payload {
    /// Repetitions, see above.
    pub repeat: u8,
    /// The bytes.
    pub bytes: Vec<u8>,
}
encode_fields!(Payload { repeat, bytes });

/// One operation a driver performs on the capture machine before the completion.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum CaptureStep {
    /// A chunk for declared stream `stream % streams`, written as `write` says.
    Chunk {
        /// The stream.
        stream: u8,
        /// How the driver's write went.
        write: Write,
        /// The chunk (repeat up to 32).
        payload: Payload,
    },
    /// A capture fault of stream `stream`, or of none when `stream` is not a declared index.
    Fault {
        /// The stream.
        stream: u8,
        /// The message, lossily decoded (repeat up to 4).
        message: Payload,
    },
    /// Display text, lossily decoded.
    Display(Vec<u8>),
    /// A chunk addressed to a channel the declaration lacks: named (`true`) or the unnamed
    /// output.
    Foreign(bool),
}

impl Encode for Write {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_variant(*self as u32, 3, out);
    }
}

impl Encode for CaptureStep {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Chunk {
                stream,
                write,
                payload,
            } => {
                encode_variant(0, 4, out);
                stream.encode(out);
                write.encode(out);
                payload.encode(out);
            }
            Self::Fault { stream, message } => {
                encode_variant(1, 4, out);
                stream.encode(out);
                message.encode(out);
            }
            Self::Display(text) => {
                encode_variant(2, 4, out);
                text.encode(out);
            }
            Self::Foreign(named) => {
                encode_variant(3, 4, out);
                named.encode(out);
            }
        }
    }
}

/// One supplied output of a full completion.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct CaptureOutput {
    /// The stream, `% streams`.
    pub stream: u8,
    /// Whether the driver's write of it fails.
    pub fails: bool,
    /// The bytes (repeat up to 32).
    pub payload: Payload,
}
encode_fields!(CaptureOutput {
    stream,
    fails,
    payload
});

/// How the run's capture completes.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub enum CaptureEnd {
    /// A streamed completion, with a final display (lossily decoded) or the live one kept.
    Streamed(Option<Vec<u8>>),
    /// A full completion (see [`Ending::Full`]); past nine outputs are ignored.
    Full {
        /// The final display.
        display: Option<Vec<u8>>,
        /// Supply the outputs in the shape the declaration does not have.
        misfit: bool,
        /// The outputs.
        outputs: Vec<CaptureOutput>,
    },
}

impl Encode for CaptureEnd {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Streamed(display) => {
                encode_variant(0, 2, out);
                display.encode(out);
            }
            Self::Full {
                display,
                misfit,
                outputs,
            } => {
                encode_variant(1, 2, out);
                display.encode(out);
                misfit.encode(out);
                outputs.encode(out);
            }
        }
    }
}

/// The capture target's input: the run's setup, how it completes, and the operations before
/// the completion (the rest of the input).
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct CaptureInput {
    /// Preview limits.
    pub limits: LimitsInput,
    /// Terminal status.
    pub status: StatusInput,
    /// Bound of the live display, `1 + v % 1024`.
    pub display_bound: u16,
    /// The output declaration.
    pub streams: StreamsInput,
    /// Pages that follow the hints.
    pub pages: PagesInput,
    /// The completion.
    pub end: CaptureEnd,
    /// The operations, in order.
    pub steps: Vec<CaptureStep>,
}
encode_fields!(CaptureInput {
    limits,
    status,
    display_bound,
    streams,
    pages,
    end,
    steps
});

impl CaptureInput {
    /// The case [`crate::checks::check_capture`] runs: stream indexes brought into the
    /// declaration, payloads repeated, and all stream bytes together cut at
    /// [`MAX_CAPTURE_STREAM_BYTES`].
    pub fn case(&self) -> CaptureCase {
        let declaration = self.streams.declaration();
        let streams = declaration.channel_count();
        let mut total = 0;
        let mut repeated = |p: &Payload, max_repeat: u8| {
            let bytes = p.bytes.repeat(1 + usize::from(p.repeat % max_repeat));
            let room = MAX_CAPTURE_STREAM_BYTES.saturating_sub(total);
            let kept = bytes.len().min(room);
            total += kept;
            bytes[..kept].to_vec()
        };
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let ops = self
            .steps
            .iter()
            .map(|step| match step {
                CaptureStep::Chunk {
                    stream,
                    write,
                    payload,
                } => CaptureOp::Chunk(
                    usize::from(*stream) % streams,
                    repeated(payload, 32),
                    *write,
                ),
                CaptureStep::Fault { stream, message } => {
                    let stream = usize::from(*stream);
                    CaptureOp::Fault(
                        (stream < streams).then_some(stream),
                        text(&repeated(message, 4)),
                    )
                }
                CaptureStep::Display(t) => CaptureOp::Display(text(t)),
                CaptureStep::Foreign(named) => CaptureOp::Foreign(*named),
            })
            .collect();
        let ending = match &self.end {
            CaptureEnd::Streamed(display) => Ending::Streamed(display.as_deref().map(text)),
            CaptureEnd::Full {
                display,
                misfit,
                outputs,
            } => Ending::Full {
                display: display.as_deref().map(text),
                outputs: outputs
                    .iter()
                    .take(9)
                    .map(|o| {
                        (
                            usize::from(o.stream) % streams,
                            repeated(&o.payload, 32),
                            o.fails,
                        )
                    })
                    .collect(),
                misfit: *misfit,
            },
        };
        CaptureCase {
            declaration,
            limits: self.limits.limits(),
            display_bound: 1 + usize::from(self.display_bound % 1024),
            ops,
            ending,
            status: self.status.status(),
            page_limits: self.pages.limits(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compaction (the types are in `crate::compaction_checks`)
// ---------------------------------------------------------------------------------------------

/// `Encode` for a fieldless enum of `count` variants.
macro_rules! encode_fieldless {
    ($($ty:ident: $count:literal),* $(,)?) => {$(
        impl Encode for $ty {
            fn encode(&self, out: &mut Vec<u8>) {
                encode_variant(*self as u32, $count, out);
            }
        }
    )*};
}

encode_fieldless! {
    Answer: 6,
    TextInput: 4,
    ToolInput: 4,
    ArgsInput: 7,
    ArtifactsInput: 10,
}

encode_fields!(CompactionInput {
    script,
    summary,
    recent_start,
    messages
});
encode_fields!(ScriptInput {
    answers,
    fit_limit,
    retention_fails
});

impl Encode for MessageInput {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Text => encode_variant(0, 2, out),
            Self::Blocks(blocks) => {
                encode_variant(1, 2, out);
                blocks.encode(out);
            }
        }
    }
}

impl Encode for ContentInput {
    fn encode(&self, out: &mut Vec<u8>) {
        let index = match self {
            Self::None => 0,
            Self::Text(_) => 1,
            Self::TextBlocks => 2,
            Self::Image => 3,
            Self::Omitted => 4,
        };
        encode_variant(index, 5, out);
        if let Self::Text(n) = self {
            n.encode(out);
        }
    }
}

impl Encode for BlockInput {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Text(text) => {
                encode_variant(0, 4, out);
                text.encode(out);
            }
            Self::Call { id, tool, args } => {
                encode_variant(1, 4, out);
                id.encode(out);
                tool.encode(out);
                args.encode(out);
            }
            Self::Result {
                id,
                content,
                metadata,
                is_error,
                artifacts,
            } => {
                encode_variant(2, 4, out);
                id.encode(out);
                content.encode(out);
                metadata.encode(out);
                is_error.encode(out);
                artifacts.encode(out);
            }
            Self::Other { id } => {
                encode_variant(3, 4, out);
                id.encode(out);
            }
        }
    }
}
