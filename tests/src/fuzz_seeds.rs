//! The seed corpora of the sequence fuzz targets (`capture`, `compaction`, `lifecycle`,
//! `auto_mode`), as typed values.
//! `cargo run -p agentrun-tests --bin make-fuzz-seeds` writes them to `fuzz/corpus/<target>/`
//! in the encoding `arbitrary` reads ([`crate::fuzz_inputs::Encode`]); the corpus replay test
//! checks that every seed here decodes back to itself and is committed as written. Each seed
//! is named for what it exercises, so a failing replay says which case broke. Inputs found by
//! fuzzing are added beside them by hand (they replay like the seeds).

use crate::auto_mode_checks::{
    AnswerInput, AutoModeInput, CodeInput, StepInput, VerificationInput,
};
use crate::checks::Write;
use crate::compaction_checks::{
    Answer, ArgsInput, ArtifactsInput, BlockInput, CompactionInput, ContentInput, MessageInput,
    ScriptInput, TextInput, ToolInput,
};
use crate::fuzz_inputs::{
    CaptureEnd, CaptureInput, CaptureOutput, CaptureStep, LimitsInput, PagesInput, Payload,
    StatusInput, StreamsInput,
};
use crate::lifecycle_checks::{ExitInput, GroupInput, LifecycleInput, LifecycleStep, SignalInput};

/// A seed: its file name and its input.
pub type Seed<T> = (&'static str, T);

fn payload(bytes: &[u8], repeat: u8) -> Payload {
    assert!((1..=32).contains(&repeat));
    Payload {
        repeat: repeat - 1,
        bytes: bytes.to_vec(),
    }
}

fn chunk(stream: u8, bytes: &[u8]) -> CaptureStep {
    chunk_with(stream, bytes, Write::Written, 1)
}

fn chunk_with(stream: u8, bytes: &[u8], write: Write, repeat: u8) -> CaptureStep {
    CaptureStep::Chunk {
        stream,
        write,
        payload: payload(bytes, repeat),
    }
}

fn fault(stream: u8, message: &str, repeat: u8) -> CaptureStep {
    CaptureStep::Fault {
        stream,
        message: payload(message.as_bytes(), repeat),
    }
}

fn display(text: &str) -> CaptureStep {
    CaptureStep::Display(text.as_bytes().to_vec())
}

fn streamed(display: Option<&str>) -> CaptureEnd {
    CaptureEnd::Streamed(display.map(|t| t.as_bytes().to_vec()))
}

/// A full completion: `(stream, bytes, write fails, repeat)` per supplied output.
fn full(outputs: &[(u8, &[u8], bool, u8)], display: Option<&str>, misfit: bool) -> CaptureEnd {
    CaptureEnd::Full {
        display: display.map(|t| t.as_bytes().to_vec()),
        misfit,
        outputs: outputs
            .iter()
            .map(|&(stream, bytes, fails, repeat)| CaptureOutput {
                stream,
                fails,
                payload: payload(bytes, repeat),
            })
            .collect(),
    }
}

/// A custom stream name, as the indexes of its characters in the name alphabet.
fn name(name: &str) -> Option<Vec<u8>> {
    const NAME_BYTES: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    Some(
        name.bytes()
            .map(|c| {
                let i = NAME_BYTES
                    .iter()
                    .position(|&n| n == c)
                    .expect("a name byte");
                u8::try_from(i).expect("fewer than 256 name bytes")
            })
            .collect(),
    )
}

fn named(names: &[&str]) -> StreamsInput {
    let mut names = names.iter().map(|n| name(n));
    let first = names.next().expect("at least one name");
    StreamsInput::Named(first, names.collect())
}

/// The run setup of a capture seed; the defaults are the widest limits.
struct Setup {
    max_lines: u8,
    max_bytes: u16,
    tail_lines: u8,
    status: StatusInput,
    display_bound: u16,
    streams: StreamsInput,
    pages: u16,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            max_lines: 50,
            max_bytes: 4096,
            tail_lines: 0,
            status: StatusInput::Succeeded,
            display_bound: 1024,
            streams: StreamsInput::Single,
            pages: 2000,
        }
    }
}

impl Setup {
    fn run(self, steps: Vec<CaptureStep>, end: CaptureEnd) -> CaptureInput {
        CaptureInput {
            limits: LimitsInput {
                max_lines: self.max_lines - 1,
                max_bytes: self.max_bytes - 1,
                tail_lines: self.tail_lines,
                payload_extra: 0,
            },
            status: self.status,
            display_bound: self.display_bound - 1,
            streams: self.streams,
            pages: PagesInput {
                first: self.pages - 1,
                more: Vec::new(),
            },
            end,
            steps,
        }
    }
}

fn lines40() -> Vec<u8> {
    (0..40)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect()
}

/// The seeds of the `capture` target.
pub fn capture() -> Vec<Seed<CaptureInput>> {
    let lines = lines40();
    let out_err = || named(&["stdout", "stderr"]);
    vec![
        (
            "write-fault-stops-the-stream",
            Setup {
                max_lines: 5,
                streams: out_err(),
                ..Setup::default()
            }
            .run(
                vec![
                    chunk(0, b"o1\n"),
                    chunk(1, b"e1\n"),
                    chunk_with(1, b"lost\n", Write::Failed, 1),
                    chunk(1, b"refused\n"),
                    chunk_with(0, &lines[..100], Write::Written, 3),
                ],
                streamed(None),
            ),
        ),
        (
            "index-write-fails-after-a-block",
            Setup {
                max_bytes: 100,
                tail_lines: 2,
                ..Setup::default()
            }
            .run(
                vec![
                    chunk(0, &[b"x".repeat(254), b"\n".to_vec()].concat()),
                    chunk_with(0, &b"y".repeat(255), Write::IndexFailed, 32),
                    chunk(0, b"refused"),
                ],
                streamed(None),
            ),
        ),
        (
            "fault-of-no-stream-while-succeeded",
            Setup::default().run(
                vec![
                    chunk(0, b"all\n"),
                    fault(9, "disk quota exceeded", 1),
                    chunk(0, b"more\n"),
                ],
                streamed(None),
            ),
        ),
        (
            "fault-message-cut-in-multibyte",
            Setup {
                streams: out_err(),
                status: StatusInput::Cancelled,
                ..Setup::default()
            }
            .run(
                vec![
                    fault(0, &"\u{e9}\u{20ac}\u{1F600}".repeat(25), 3),
                    fault(1, "second", 1),
                ],
                streamed(None),
            ),
        ),
        (
            "more-faults-than-a-record-keeps",
            Setup {
                max_lines: 11,
                max_bytes: 101,
                display_bound: 257,
                pages: 51,
                ..Setup::default()
            }
            .run(
                std::iter::once(chunk(0, b"a\nb"))
                    .chain((0..40).map(|_| fault(255, "fault", 1)))
                    .collect(),
                streamed(None),
            ),
        ),
        (
            "live-display-bound-multibyte",
            Setup {
                display_bound: 6,
                ..Setup::default()
            }
            .run(
                vec![
                    display("abc\u{e9}"),
                    chunk(0, b"x\n"),
                    display("\u{20ac}def"),
                    display("\u{1F600}"),
                ],
                streamed(None),
            ),
        ),
        (
            "final-display-replaces-live",
            Setup::default().run(
                vec![display("working"), chunk(0, b"done\n")],
                streamed(Some("final text")),
            ),
        ),
        (
            "foreign-channels-refused",
            Setup {
                streams: named(&["results"]),
                ..Setup::default()
            }
            .run(
                vec![
                    CaptureStep::Foreign(true),
                    CaptureStep::Foreign(false),
                    chunk(0, b"kept\n"),
                    CaptureStep::Foreign(true),
                ],
                streamed(None),
            ),
        ),
        (
            "full-named-one-write-fails",
            Setup {
                max_lines: 3,
                max_bytes: 200,
                tail_lines: 1,
                streams: named(&["a", "b", "c"]),
                ..Setup::default()
            }
            .run(
                vec![display("tool ran")],
                full(
                    &[
                        (0, &lines[..120], false, 4),
                        (2, b"diag\n", true, 1),
                        (1, b"e\n", false, 1),
                    ],
                    Some("final"),
                    false,
                ),
            ),
        ),
        (
            "full-after-faulted-stream",
            Setup {
                streams: out_err(),
                ..Setup::default()
            }
            .run(
                vec![fault(1, "pipe broke", 1)],
                full(
                    &[(0, b"out\n", false, 1), (1, b"err\n", false, 1)],
                    None,
                    false,
                ),
            ),
        ),
        (
            "full-single-long-line",
            Setup {
                max_bytes: 300,
                tail_lines: 3,
                ..Setup::default()
            }
            .run(
                Vec::new(),
                full(&[(0, &b"z".repeat(200), false, 32)], None, false),
            ),
        ),
        (
            "full-after-streaming-is-mixed",
            Setup::default().run(
                vec![chunk(0, b"streamed\n")],
                full(&[(0, b"again\n", false, 1)], None, false),
            ),
        ),
        (
            "full-names-a-stream-twice",
            Setup {
                streams: out_err(),
                ..Setup::default()
            }
            .run(
                Vec::new(),
                full(
                    &[(1, b"first\n", false, 1), (1, b"second\n", false, 1)],
                    None,
                    false,
                ),
            ),
        ),
        (
            "full-wrong-shape-named",
            Setup {
                streams: out_err(),
                ..Setup::default()
            }
            .run(Vec::new(), full(&[(0, b"single\n", false, 1)], None, true)),
        ),
        (
            "full-wrong-shape-single",
            Setup::default().run(Vec::new(), full(&[(0, b"named\n", false, 1)], None, true)),
        ),
    ]
}

fn call(id: u8, tool: ToolInput, args: ArgsInput) -> BlockInput {
    BlockInput::Call { id, tool, args }
}

fn result(id: u8, content: ContentInput, artifacts: ArtifactsInput) -> BlockInput {
    BlockInput::Result {
        id,
        content,
        metadata: false,
        is_error: None,
        artifacts,
    }
}

fn blocks(blocks: Vec<BlockInput>) -> MessageInput {
    MessageInput::Blocks(blocks)
}

fn script(answers: [Answer; 2], fit_limit: Option<u8>, retention_fails: bool) -> ScriptInput {
    ScriptInput {
        answers,
        fit_limit,
        retention_fails,
    }
}

/// The seeds of the `compaction` target.
pub fn compaction() -> Vec<Seed<CompactionInput>> {
    use ArgsInput::{ArtifactAtOffset, ArtifactStream, LocalPath};
    use ArtifactsInput as A;
    use ToolInput::{Bash, Cat, Read};
    vec![
        (
            // Calls and results paired, unpaired and answered twice, under a prior summary,
            // with a summarizer that fails for another reason than size.
            "call-result-pairs",
            CompactionInput {
                script: script([Answer::Other, Answer::DoesNotFit], None, true),
                summary: true,
                recent_start: Some(2),
                messages: vec![
                    blocks(vec![
                        call(0, Read, ArtifactAtOffset),
                        result(0, ContentInput::Text(0), A::None),
                    ]),
                    blocks(vec![call(2, Cat, ArtifactAtOffset)]),
                    blocks(vec![
                        result(1, ContentInput::None, A::None),
                        BlockInput::Text(TextInput::Hello),
                    ]),
                ],
            },
        ),
        (
            // A context-length failure, then a retry that a fit limit rejects too.
            "retry-with-fit-limit",
            CompactionInput {
                script: script([Answer::ContextLength; 2], Some(1), false),
                summary: true,
                recent_start: None,
                messages: vec![
                    blocks(vec![BlockInput::Other { id: 1 }]),
                    MessageInput::Text,
                    blocks(vec![result(0, ContentInput::None, A::None)]),
                    MessageInput::Text,
                    blocks(vec![
                        result(1, ContentInput::Image, A::None),
                        BlockInput::Text(TextInput::Hello),
                    ]),
                ],
            },
        ),
        (
            // Every way a result names artifacts, each after its call, with a retry that
            // prunes them: references must resolve to exactly the output they replace.
            "named-artifacts-right-and-wrong",
            CompactionInput {
                script: script([Answer::ContextLength, Answer::Summary], None, false),
                summary: false,
                recent_start: Some(19),
                messages: [
                    A::None,
                    A::Exact,
                    A::Dangling,
                    A::OtherBytes,
                    A::ManifestStream,
                    A::ManifestUnstoredObject,
                    A::ManifestWrongStream,
                    A::RightAndDangling,
                    A::PrunedRight,
                    A::PrunedDangling,
                ]
                .into_iter()
                .enumerate()
                .flat_map(|(i, kind)| {
                    let id = u8::try_from(i).expect("ten kinds");
                    [
                        blocks(vec![call(id, Bash, LocalPath)]),
                        blocks(vec![result(id, ContentInput::Text(id), kind)]),
                    ]
                })
                .collect(),
            },
        ),
        (
            // Artifact reads (whole and by stream) among ordinary calls: the retry omits the
            // reads' output, prunes the rest, and retention fails.
            "artifact-reads-pruned",
            CompactionInput {
                script: script([Answer::DoesNotFit, Answer::Summary], None, true),
                summary: false,
                recent_start: None,
                messages: vec![
                    MessageInput::Text,
                    blocks(vec![
                        call(0, Read, ArtifactAtOffset),
                        call(1, Read, ArtifactStream),
                        call(2, ToolInput::ReadCapitalized, ArtifactAtOffset),
                    ]),
                    blocks(vec![
                        result(0, ContentInput::TextBlocks, A::None),
                        result(1, ContentInput::Omitted, A::Exact),
                        result(2, ContentInput::Text(7), A::None),
                    ]),
                    blocks(vec![
                        call(3, Read, ArgsInput::ArgsAsString),
                        call(4, Read, ArgsInput::BadUri),
                        call(5, Read, ArgsInput::SnakeCaseKey),
                    ]),
                    blocks(vec![
                        result(3, ContentInput::Text(3), A::None),
                        result(4, ContentInput::Text(4), A::None),
                        result(5, ContentInput::Text(5), A::None),
                    ]),
                ],
            },
        ),
    ]
}

/// The seeds of the `lifecycle` target.
pub fn lifecycle() -> Vec<Seed<LifecycleInput>> {
    use LifecycleStep::{Cancel, Exit, Group, Output, PipesClosed, Wait};
    let run = |timeout_ms, idle_timeout_ms, signals: &[SignalInput], steps: Vec<LifecycleStep>| {
        LifecycleInput {
            timeout_ms,
            idle_timeout_ms,
            grace_ms: 500,
            signals: signals.to_vec(),
            keep_background: false,
            steps,
        }
    };
    let term = [SignalInput::Terminate];
    vec![
        (
            "normal-exit-then-pipes",
            run(
                None,
                None,
                &term,
                vec![Output, Wait(10), Exit(ExitInput::Code(0)), PipesClosed],
            ),
        ),
        (
            "pipes-then-exit-group-empty",
            run(
                Some(5000),
                None,
                &term,
                vec![
                    Group(GroupInput::Empty),
                    PipesClosed,
                    Wait(10),
                    Exit(ExitInput::Code(3)),
                ],
            ),
        ),
        (
            "deadline-child-ignores-sigterm",
            run(
                Some(100),
                None,
                &term,
                vec![Wait(100), Wait(499), Wait(1), Exit(ExitInput::Signal(9))],
            ),
        ),
        (
            "idle-timeout-after-output",
            run(
                None,
                Some(50),
                &[SignalInput::Interrupt, SignalInput::Terminate],
                vec![
                    Wait(40),
                    Output,
                    Wait(40),
                    Output,
                    Wait(60),
                    Exit(ExitInput::Signal(2)),
                    Wait(100),
                    PipesClosed,
                ],
            ),
        ),
        (
            "cancel-twice-kills",
            run(
                Some(10000),
                None,
                &term,
                vec![Wait(5), Cancel, Wait(5), Cancel, Exit(ExitInput::Unknown)],
            ),
        ),
        (
            "exit-during-grace-then-group-empty",
            run(
                Some(10),
                None,
                &term,
                vec![
                    Wait(10),
                    Exit(ExitInput::Signal(15)),
                    Wait(120),
                    Group(GroupInput::Empty),
                    Wait(60),
                    PipesClosed,
                ],
            ),
        ),
        (
            "zombie-group-gets-sigkill",
            run(
                Some(10),
                None,
                &term,
                vec![
                    Group(GroupInput::Zombies),
                    Wait(10),
                    Exit(ExitInput::Code(1)),
                    Wait(50),
                    PipesClosed,
                ],
            ),
        ),
        (
            "stuck-child-after-sigkill",
            run(Some(10), None, &[], vec![Wait(10), Wait(60000), Wait(1)]),
        ),
        (
            "holder-keeps-pipes-after-exit",
            run(
                None,
                None,
                &term,
                vec![Exit(ExitInput::Code(0)), Wait(2000), Wait(500), Wait(2000)],
            ),
        ),
        (
            "keep-background",
            LifecycleInput {
                keep_background: true,
                ..run(
                    None,
                    None,
                    &term,
                    vec![Exit(ExitInput::Code(0)), PipesClosed],
                )
            },
        ),
    ]
}

/// The seeds of the `auto_mode` target.
pub fn auto_mode() -> Vec<Seed<AutoModeInput>> {
    use AnswerInput as A;
    let step = |code, answer, verification| StepInput {
        code,
        answer,
        in_sink: false,
        verification,
    };
    let ok = |answer| step(CodeInput::Success, answer, VerificationInput::Pass);
    let session = |max_turns: u8, verify, steps: Vec<StepInput>| {
        let mut steps = steps.into_iter();
        AutoModeInput {
            max_turns: max_turns - 3,
            verify,
            first: steps.next().expect("a step"),
            more: steps.collect(),
        }
    };
    vec![
        (
            "complete-without-verification",
            session(
                3,
                false,
                vec![ok(A::Empty), ok(A::Empty), ok(A::Empty), ok(A::Complete)],
            ),
        ),
        (
            "false-completion-caught-by-verification",
            session(
                5,
                true,
                vec![
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::Complete),
                    step(CodeInput::Success, A::Empty, VerificationInput::Fail),
                    ok(A::Empty),
                    ok(A::Complete),
                    ok(A::Empty),
                ],
            ),
        ),
        (
            "adjust-then-stop-at-the-turn-bound",
            session(
                4,
                false,
                vec![
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::NeedsAdjustment),
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::InProgress),
                ],
            ),
        ),
        (
            "required-phase-failure-aborts",
            session(
                6,
                false,
                vec![
                    ok(A::Empty),
                    step(CodeInput::Other(40), A::Empty, VerificationInput::Pass),
                ],
            ),
        ),
        (
            "evaluate-failure-exits-with-its-code",
            session(
                6,
                true,
                vec![
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::Empty),
                    step(CodeInput::Negative, A::Complete, VerificationInput::Pass),
                ],
            ),
        ),
        (
            "verdict-through-the-result-channel",
            session(
                5,
                true,
                vec![
                    ok(A::Empty),
                    ok(A::Empty),
                    ok(A::Empty),
                    StepInput {
                        in_sink: true,
                        ..ok(A::Complete)
                    },
                    step(CodeInput::Success, A::Empty, VerificationInput::Unknown),
                    ok(A::Ambiguous),
                    ok(A::NotComplete),
                    ok(A::Incomplete),
                ],
            ),
        ),
    ]
}
