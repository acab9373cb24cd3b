//! Compaction with one pruned retry: summarize a whole transcript, and when the summarizer's
//! input is too large, retry once with tool output turned into artifact references.
//!
//! # The rules
//!
//! 1. The first attempt summarizes the entire active history: the prior summary, every message
//!    and the recent suffix that is kept afterwards. Nothing outside the transcript is added.
//! 2. Only a size failure of the summarizer's own input permits a retry, and only one: the
//!    caller's local fit check (see [`CompactionConfig::max_input_bytes`]) or the provider's
//!    context-length error. Why compaction started (even a parent context overflow) and every
//!    other failure never lead to pruning.
//! 3. The retry input is a private pruned snapshot ([`prune`]): every ordinary tool output,
//!    whatever its size or recency, is replaced by a `read(filePath="artifact://…")` reference
//!    to an artifact holding exactly it. Output whose `artifacts` the store confirms
//!    ([`Action::Verify`]: present, readable, holding exactly that output) refers to those;
//!    any other output, including one whose `artifacts` name nothing or something else, is
//!    retained first.
//! 4. The output of an *artifact read* — a call of the tool `read` whose parsed `filePath`
//!    argument is an `artifact://` URI — is not retained again: its content and every other
//!    field of its result block (metadata, attachments, messages the tool emitted) are
//!    dropped, for every stream and any size. Call/result pairing stays intact.
//! 5. Recognition is structural: the arguments must be a JSON object whose `filePath` parses
//!    with [`ArtifactUri::parse`]. A filesystem `read`, arguments that are a string containing
//!    `artifact://`, another tool with such a `filePath`, malformed arguments: all ordinary.
//! 6. An artifact read's output becomes [`ARTIFACT_READ_OMITTED`]; that marker is never
//!    itself retained.
//! 7. Nothing is mutated: the machine only borrows the transcript. A failure, an empty or
//!    non-text answer, or an invalid summary leaves the caller's context as it was; the snapshot
//!    is private to the retry and produces no durable events.
//! 8. Every reference uses the public read syntax, `read(filePath="artifact://<digest>")`.
//!
//! # Driving order
//!
//! ```text
//! let mut c = Compaction::new(&transcript, config);
//! loop {
//!     match c.poll_action() {
//!         Some(Action::Summarize(input)) => run the summarizer on input.text, then
//!             c.handle_summary(&stdout)  or  c.handle_failure(failure),
//!         Some(Action::Verify(claims))   => check each claim in the store, then
//!             c.handle_verified(the confirmed claims),
//!         Some(Action::Retain(outputs))  => store every output under its digest (the
//!             digest of its bytes) and keep them with the confirmed claims, then
//!             c.handle_retained(result),
//!         Some(Action::Done(compacted))  => use compacted.summary; stop,
//!         Some(Action::Failed(failed))   => keep the original context; stop,
//!         None                           => a handle_* call is due (or the machine finished),
//!     }
//! }
//! ```
//!
//! [`Action::Verify`] and [`Action::Retain`] come in that order before the retry's
//! [`Action::Summarize`]: the first only when the transcript names artifacts, the second
//! whenever the retry refers to any (its list of outputs to store may be empty), so the caller
//! can keep everything the retry refers to together. There is no timer: the caller bounds the summarizer's run time and
//! reports a timeout as an ordinary failure. `handle_*` calls out of order are refused with
//! [`StateError`] and change nothing.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::digest::Digest;
use crate::transcript::{Block, Content, Message, ToolResult, ToolUse, Transcript};
use crate::uri::ArtifactUri;

/// What replaces an artifact read's output in the retry input.
pub const ARTIFACT_READ_OMITTED: &str = "[artifact read output omitted for compaction]";

/// The name of the tool whose artifact reads are recognized.
pub const READ_TOOL: &str = "read";

/// The argument of [`READ_TOOL`] holding the path or URI.
pub const FILE_PATH_ARG: &str = "filePath";

/// What the summarizer is asked to do; the rendered transcript follows it.
pub const DEFAULT_INSTRUCTIONS: &str = "\
Summarize the conversation below so that the summary can replace it in a model's context \
window. Keep the goal, the decisions and their reasons, the facts established, the files, \
commands and identifiers involved, what is unfinished and the next steps. Tool output \
replaced by a read(filePath=\"artifact://...\") reference can be read back later with that \
call: keep the references that matter. Answer with the summary only.";

/// Largest summary accepted by default (1 MiB).
pub const DEFAULT_MAX_SUMMARY_BYTES: usize = 1 << 20;

/// The reference that replaces an ordinary tool output in the retry input.
pub fn reference_text(uri: &ArtifactUri) -> String {
    format!("[tool output retained for compaction; read it with read(filePath=\"{uri}\")]")
}

/// Whether a call is an artifact read: tool [`READ_TOOL`] with an object argument whose
/// [`FILE_PATH_ARG`] is a string that parses as a public artifact URI.
pub fn is_artifact_read(call: &ToolUse) -> bool {
    call.name == READ_TOOL
        && call
            .input
            .as_object()
            .and_then(|args| args.get(FILE_PATH_ARG))
            .and_then(Value::as_str)
            .is_some_and(|path| ArtifactUri::parse(path).is_ok())
}

/// Why compaction started. It is recorded only: no reason permits pruning by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Trigger {
    /// The caller asked for it.
    #[default]
    Requested,
    /// The conversation being compacted outgrew its own context window.
    ParentOverflow,
}

/// How a compaction runs. Build it with [`CompactionConfig::default`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct CompactionConfig {
    trigger: Trigger,
    max_input_bytes: Option<usize>,
    max_summary_bytes: usize,
    instructions: String,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            trigger: Trigger::Requested,
            max_input_bytes: None,
            max_summary_bytes: DEFAULT_MAX_SUMMARY_BYTES,
            instructions: DEFAULT_INSTRUCTIONS.to_owned(),
        }
    }
}

impl CompactionConfig {
    /// Records why compaction started.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = trigger;
        self
    }

    /// The local fit check: a summarizer input longer than this many bytes is rejected without
    /// running the summarizer, which permits the pruned retry like a context-length error.
    pub fn max_input_bytes(mut self, limit: Option<usize>) -> Self {
        self.max_input_bytes = limit;
        self
    }

    /// Longest summary accepted; a longer one is invalid.
    pub fn max_summary_bytes(mut self, limit: usize) -> Self {
        self.max_summary_bytes = limit;
        self
    }

    /// Replaces [`DEFAULT_INSTRUCTIONS`].
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = instructions.into();
        self
    }
}

/// Which attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptKind {
    /// The entire active history.
    First,
    /// The pruned snapshot.
    Retry,
}

impl AttemptKind {
    /// `first` or `retry`, as reports and messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptKind::First => "first",
            AttemptKind::Retry => "retry",
        }
    }
}

/// How a summarizer run failed, as the caller classified it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SummarizerFailure {
    /// The caller's own fit check rejected the input (e.g. a token count).
    DoesNotFit {
        /// What the check said.
        detail: String,
    },
    /// The provider refused the input as longer than its context window.
    ContextLength {
        /// The provider's message.
        detail: String,
    },
    /// Anything else: spawn failure, timeout, rate limit, crash, a refusal, …
    Other {
        /// What happened.
        detail: String,
    },
}

impl SummarizerFailure {
    fn permits_retry(&self) -> bool {
        matches!(
            self,
            SummarizerFailure::DoesNotFit { .. } | SummarizerFailure::ContextLength { .. }
        )
    }
}

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptResult {
    /// The summarizer answered with a valid summary.
    Summarized,
    /// The local fit check rejected the input; the summarizer did not run.
    DoesNotFit {
        /// The limit in bytes, or the caller's detail.
        detail: String,
    },
    /// The provider's context window was exceeded.
    ContextLength {
        /// The provider's message.
        detail: String,
    },
    /// Another failure.
    Failed {
        /// What happened.
        detail: String,
    },
    /// The answer was empty, not text, or too long.
    InvalidSummary {
        /// Which.
        detail: String,
    },
}

/// One attempt, for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// First or retry.
    pub kind: AttemptKind,
    /// Bytes of the rendered summarizer input.
    pub input_bytes: usize,
    /// What became of it.
    #[serde(flatten)]
    pub result: AttemptResult,
}

/// A summarizer input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummarizerInput {
    /// First or retry.
    pub kind: AttemptKind,
    /// The instructions followed by the rendered transcript.
    pub text: String,
}

/// One tool output to store before the retry, under the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// `Digest::of(text.as_bytes())`: the artifact the references name.
    pub digest: Digest,
    /// The output.
    pub text: String,
}

/// Where an ordinary tool output was replaced by a reference in the retry input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The call id of the replaced result.
    pub tool_use_id: String,
    /// The message index.
    pub message: usize,
    /// The block index within the message.
    pub block: usize,
    /// The artifact the reference names.
    pub uri: String,
    /// Whether the output already had this artifact (nothing new was retained for it).
    pub existing: bool,
}

/// The private snapshot a retry summarizes, and what it needs stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    /// The transcript with ordinary outputs replaced by references and artifact-read outputs
    /// by [`ARTIFACT_READ_OMITTED`].
    pub snapshot: Transcript,
    /// The outputs to store, deduplicated by digest, in first-seen order.
    pub retain: Vec<Retention>,
    /// Every reference made, in transcript order.
    pub references: Vec<Reference>,
    /// How many artifact-read outputs were omitted.
    pub omitted: usize,
}

/// What an artifact a tool result names must hold for the retry to refer to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Holds {
    /// Exactly the bytes with this digest: the result's output (`Digest::of` its
    /// [`ToolResult::output_text`]).
    Output(Digest),
    /// Anything readable: the result is already a compaction reference to the artifact (its
    /// content is exactly [`reference_text`] of its `artifacts`, as in a pruned snapshot), so
    /// the reference stands as it is once it resolves.
    Readable,
}

/// An artifact a tool result already names (its `artifacts`), which the retry refers to only
/// once the caller has checked it in the store ([`Action::Verify`]). A transcript is input like
/// any other: its `artifacts` may name nothing, or something else than its output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    /// The artifact, as the transcript names it.
    pub uri: ArtifactUri,
    /// What reading it must give.
    pub holds: Holds,
}

/// The claims of one ordinary result: one per artifact it names.
fn result_claims(result: &ToolResult) -> Vec<Claim> {
    if result.artifacts.is_empty() {
        return Vec::new();
    }
    let already_pruned = matches!(
        &result.content,
        Some(Value::String(text)) if *text == references_text(&result.artifacts)
    );
    let holds = if already_pruned {
        Holds::Readable
    } else {
        Holds::Output(Digest::of(result.output_text().as_bytes()))
    };
    result
        .artifacts
        .iter()
        .map(|uri| Claim {
            uri: uri.clone(),
            holds,
        })
        .collect()
}

fn references_text(uris: &[ArtifactUri]) -> String {
    uris.iter()
        .map(reference_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `visit(message, block, result)` for every tool result that is not the output of an
/// artifact read (the results [`prune`] refers to), in transcript order.
fn ordinary_results<'t>(
    transcript: &'t Transcript,
    mut visit: impl FnMut(usize, usize, &'t ToolResult),
) {
    let mut artifact_read: HashMap<&str, bool> = HashMap::new();
    for (i, message) in transcript.messages.iter().enumerate() {
        for (j, block) in message.blocks().iter().enumerate() {
            match block {
                Block::ToolUse(call) => {
                    artifact_read.insert(&call.id, is_artifact_read(call));
                }
                Block::ToolResult(result)
                    if artifact_read.get(result.tool_use_id.as_str()) != Some(&true) =>
                {
                    visit(i, j, result);
                }
                _ => {}
            }
        }
    }
}

/// Every artifact the transcript's tool results already name, with what it must hold, without
/// repeats, in transcript order: what the caller checks before [`prune`] may refer to them.
pub fn claims(transcript: &Transcript) -> Vec<Claim> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    ordinary_results(transcript, |_, _, result| {
        for claim in result_claims(result) {
            if seen.insert(claim.clone()) {
                out.push(claim);
            }
        }
    });
    out
}

/// Builds the pruned snapshot of `transcript` (rules 3 to 6). `verified` holds the
/// [`claims`] the store confirmed: a result's own `artifacts` are referred to only when every
/// one of them is confirmed; otherwise its output is retained and referred to like any other,
/// so every reference resolves to exactly the output it replaced. Pure and idempotent: pruning
/// the snapshot again (with the claims of the snapshot confirmed by the store after the
/// retention) gives the same snapshot and nothing more to retain.
pub fn prune(transcript: &Transcript, verified: &HashSet<Claim>) -> Pruned {
    let mut retain = Vec::new();
    let mut retained: HashSet<Digest> = HashSet::new();
    let mut references = Vec::new();
    let mut omitted = 0;
    // Call id -> whether that call (the latest with the id, before the result) is an artifact
    // read. Results answer calls made before them.
    let mut artifact_read: HashMap<&str, bool> = HashMap::new();
    let mut messages = Vec::with_capacity(transcript.messages.len());
    for (i, message) in transcript.messages.iter().enumerate() {
        let content = match &message.content {
            Content::Text(s) => Content::Text(s.clone()),
            Content::Blocks(blocks) => Content::Blocks(
                blocks
                    .iter()
                    .enumerate()
                    .map(|(j, block)| match block {
                        Block::ToolUse(call) => {
                            artifact_read.insert(&call.id, is_artifact_read(call));
                            block.clone()
                        }
                        Block::ToolResult(result) => {
                            if artifact_read.get(result.tool_use_id.as_str()) == Some(&true) {
                                omitted += 1;
                                Block::ToolResult(omit(result))
                            } else {
                                let (pruned, made) =
                                    refer(result, verified, &mut retain, &mut retained);
                                references.extend(made.into_iter().map(|(uri, existing)| {
                                    Reference {
                                        tool_use_id: result.tool_use_id.clone(),
                                        message: i,
                                        block: j,
                                        uri,
                                        existing,
                                    }
                                }));
                                Block::ToolResult(pruned)
                            }
                        }
                        other => other.clone(),
                    })
                    .collect(),
            ),
        };
        messages.push(Message {
            role: message.role.clone(),
            content,
            extra: message.extra.clone(),
        });
    }
    Pruned {
        snapshot: Transcript {
            summary: transcript.summary.clone(),
            messages,
            recent_start: transcript.recent_start,
            extra: transcript.extra.clone(),
        },
        retain,
        references,
        omitted,
    }
}

/// Rule 4 and 6: only the pairing survives.
fn omit(result: &ToolResult) -> ToolResult {
    ToolResult {
        tool_use_id: result.tool_use_id.clone(),
        content: Some(Value::String(ARTIFACT_READ_OMITTED.to_owned())),
        is_error: None,
        artifacts: Vec::new(),
        extra: Map::new(),
    }
}

/// Rule 3: the output is replaced by references to its artifacts when the store confirmed
/// every one; otherwise it gets its own (queued for retention). Returns the pruned block and
/// `(uri, existing)` per reference.
fn refer(
    result: &ToolResult,
    verified: &HashSet<Claim>,
    retain: &mut Vec<Retention>,
    retained: &mut HashSet<Digest>,
) -> (ToolResult, Vec<(String, bool)>) {
    let claims = result_claims(result);
    let confirmed = !claims.is_empty() && claims.iter().all(|c| verified.contains(c));
    let artifacts = if confirmed {
        result.artifacts.clone()
    } else {
        let text = result.output_text();
        let digest = Digest::of(text.as_bytes());
        if retained.insert(digest) {
            retain.push(Retention {
                digest,
                text: text.into_owned(),
            });
        }
        vec![ArtifactUri::new(digest)]
    };
    let made = artifacts
        .iter()
        .map(|u| (u.to_string(), confirmed))
        .collect();
    (
        ToolResult {
            tool_use_id: result.tool_use_id.clone(),
            content: Some(Value::String(references_text(&artifacts))),
            is_error: result.is_error,
            artifacts,
            extra: result.extra.clone(),
        },
        made,
    )
}

/// Renders the summarizer input: instructions, then the transcript as tagged text.
///
/// Two passes: the first only counts the bytes, so the text is allocated once at its exact
/// size. The input can be as large as the transcript, and a string grown by doubling holds up
/// to twice its length, with the old and the new buffer both alive while it moves.
pub fn render(instructions: &str, transcript: &Transcript) -> String {
    let mut count = Count(0);
    render_into(&mut count, instructions, transcript);
    let mut out = String::with_capacity(count.0);
    render_into(&mut out, instructions, transcript);
    out
}

/// A `fmt::Write` that only counts bytes.
struct Count(usize);

impl Write for Count {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

fn render_into(out: &mut impl Write, instructions: &str, transcript: &Transcript) {
    // Writing to a `String` or a `Count` never fails.
    let _ = out.write_str(instructions);
    let _ = out.write_str("\n\n<transcript>\n");
    if let Some(summary) = &transcript.summary {
        let _ = out.write_str("[summary of the earlier conversation]\n");
        push_line(out, summary);
    }
    for message in &transcript.messages {
        let _ = writeln!(out, "[{}]", message.role.as_str());
        match &message.content {
            Content::Text(s) => push_line(out, s),
            Content::Blocks(blocks) => {
                for block in blocks {
                    render_block(out, block);
                }
            }
        }
    }
    let _ = out.write_str("</transcript>\n");
}

fn push_line(out: &mut impl Write, s: &str) {
    let _ = out.write_str(s);
    if !s.ends_with('\n') {
        let _ = out.write_char('\n');
    }
}

fn render_block(out: &mut impl Write, block: &Block) {
    match block {
        Block::Text { text, .. } => push_line(out, text),
        Block::ToolUse(call) => {
            let _ = writeln!(out, "[tool call {} id={}]", call.name, call.id);
            push_line(out, &call.input.to_string());
        }
        Block::ToolResult(result) => {
            let error = if result.is_error == Some(true) {
                " error"
            } else {
                ""
            };
            let _ = writeln!(out, "[tool result id={}{error}]", result.tool_use_id);
            push_line(out, &result.output_text());
        }
        Block::Other(v) => {
            let kind = v.get("type").and_then(Value::as_str).unwrap_or("unknown");
            match ["text", "thinking"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
            {
                Some(text) => {
                    let _ = writeln!(out, "[{kind}]");
                    push_line(out, text);
                }
                None => {
                    let _ = writeln!(out, "[{kind} block]");
                }
            }
        }
    }
}

/// A successful compaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    /// The new summary.
    pub summary: String,
    /// The compacted transcript: the new summary and the recent suffix, unchanged.
    pub transcript: Transcript,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// The references of the retry input (empty without a retry).
    pub references: Vec<Reference>,
    /// Artifact-read outputs omitted from the retry input.
    pub omitted: usize,
}

/// Why compaction failed. The caller's context is untouched in every case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactionError {
    /// The local fit check rejected the retry input too.
    #[error(
        "the {attempt} summarizer input is {bytes} bytes, over the {limit}-byte limit; \
         raise the limit or use a summarizer with a larger context window"
    )]
    DoesNotFit {
        /// Which attempt.
        attempt: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The retry input did not fit the summarizer either.
    #[error(
        "the pruned retry did not fit the summarizer either ({detail}); use a summarizer with \
         a larger context window"
    )]
    RetryTooLarge {
        /// The failure.
        detail: String,
    },
    /// The input did not fit and pruning would not make it smaller.
    #[error(
        "the summarizer input did not fit ({detail}) and has no tool output to prune; use a \
         summarizer with a larger context window"
    )]
    NothingToPrune {
        /// The first attempt's failure.
        detail: String,
    },
    /// A failure that is not about size: never retried.
    #[error("the {attempt} summarizer run failed: {detail}")]
    Summarizer {
        /// Which attempt.
        attempt: &'static str,
        /// What happened.
        detail: String,
    },
    /// The summarizer's answer cannot be a summary.
    #[error("the {attempt} summarizer answer is not a usable summary: {detail}")]
    InvalidSummary {
        /// Which attempt.
        attempt: &'static str,
        /// Why.
        detail: String,
    },
    /// Storing the outputs the retry refers to failed.
    #[error("could not retain tool output for the retry: {0}")]
    Retention(String),
}

/// A failed compaction, with its attempts for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Why.
    pub error: CompactionError,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Run the summarizer on this input.
    Summarize(SummarizerInput),
    /// Check which of these artifacts, named by the transcript, hold what they must (present,
    /// readable, and for [`Holds::Output`] exactly those bytes), then call
    /// [`Compaction::handle_verified`] with the confirmed ones.
    Verify(Vec<Claim>),
    /// Store these outputs (possibly none) and keep them, with the claims confirmed before,
    /// for as long as the retry's references are to resolve; then call
    /// [`Compaction::handle_retained`].
    Retain(Vec<Retention>),
    /// Compaction succeeded.
    Done(Box<Compacted>),
    /// Compaction failed; keep the original context.
    Failed(Failed),
}

/// A `handle_*` call that does not fit the machine's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// No summarizer run is outstanding.
    #[error("no summarizer run is outstanding; poll_action first")]
    NoSummarizerRun,
    /// No retention is outstanding.
    #[error("no retention is outstanding; poll_action first")]
    NoRetention,
    /// No verification is outstanding.
    #[error("no verification is outstanding; poll_action first")]
    NoVerification,
}

#[derive(Debug)]
enum State {
    /// The first input is to be rendered and handed out.
    First,
    /// The summarizer is running on an input of `bytes` bytes.
    Running {
        /// Which attempt.
        kind: AttemptKind,
        /// Its input's size.
        bytes: usize,
    },
    /// The transcript's own artifacts are to be handed out for checking; `detail` is the
    /// first attempt's failure, for the error should nothing prune.
    VerifyDue {
        /// What to check.
        claims: Vec<Claim>,
        /// The first attempt's failure.
        detail: String,
    },
    /// Waiting for the check.
    Verifying {
        /// The first attempt's failure.
        detail: String,
    },
    /// The retry is prepared; its retention is to be handed out.
    RetainDue(Box<Pruned>),
    /// Waiting for the retention to complete.
    Retaining(Box<Pruned>),
    /// The retry input is to be handed out.
    RetryDue(Box<Pruned>),
    /// The outcome is to be handed out.
    Outcome(Box<Action>),
    /// Nothing more to do.
    Finished,
}

/// The compaction state machine; see the module documentation for the rules and the driving
/// order.
#[derive(Debug)]
pub struct Compaction<'t> {
    transcript: &'t Transcript,
    config: CompactionConfig,
    state: State,
    attempts: Vec<Attempt>,
    /// The retry's references, kept for the report once the snapshot is handed out.
    references: Vec<Reference>,
    omitted: usize,
}

impl<'t> Compaction<'t> {
    /// Starts compacting `transcript`; it is only borrowed, never changed.
    pub fn new(transcript: &'t Transcript, config: CompactionConfig) -> Self {
        Self {
            transcript,
            config,
            state: State::First,
            attempts: Vec::new(),
            references: Vec::new(),
            omitted: 0,
        }
    }

    /// Why compaction started.
    pub fn trigger(&self) -> Trigger {
        self.config.trigger
    }

    /// The attempts so far.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// The next thing to do, or `None` while a `handle_*` call is due or after the outcome.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        loop {
            match std::mem::replace(&mut self.state, State::Finished) {
                State::First => {
                    let text = render(&self.config.instructions, self.transcript);
                    if let Some(action) = self.hand_out(AttemptKind::First, text) {
                        return Some(action);
                    }
                }
                State::VerifyDue { claims, detail } => {
                    self.state = State::Verifying { detail };
                    return Some(Action::Verify(claims));
                }
                State::RetainDue(mut pruned) => {
                    let retain = std::mem::take(&mut pruned.retain);
                    self.state = State::Retaining(pruned);
                    return Some(Action::Retain(retain));
                }
                State::RetryDue(pruned) => {
                    let text = render(&self.config.instructions, &pruned.snapshot);
                    self.references = pruned.references;
                    self.omitted = pruned.omitted;
                    if let Some(action) = self.hand_out(AttemptKind::Retry, text) {
                        return Some(action);
                    }
                }
                State::Outcome(action) => return Some(*action),
                state @ (State::Running { .. }
                | State::Verifying { .. }
                | State::Retaining(_)
                | State::Finished) => {
                    self.state = state;
                    return None;
                }
            }
        }
    }

    /// Applies the local fit check; hands the input out when it fits.
    fn hand_out(&mut self, kind: AttemptKind, text: String) -> Option<Action> {
        if let Some(limit) = self.config.max_input_bytes
            && text.len() > limit
        {
            let bytes = text.len();
            drop(text);
            self.fail_attempt(
                kind,
                bytes,
                SummarizerFailure::DoesNotFit {
                    detail: format!("{bytes} bytes, over the {limit}-byte limit"),
                },
                Some(limit),
            );
            return None;
        }
        self.state = State::Running {
            kind,
            bytes: text.len(),
        };
        Some(Action::Summarize(SummarizerInput { kind, text }))
    }

    /// The summarizer answered (its stdout, or the result channel's content).
    pub fn handle_summary(&mut self, answer: &[u8]) -> Result<(), StateError> {
        let State::Running { kind, bytes } = self.state else {
            return Err(StateError::NoSummarizerRun);
        };
        let invalid = match std::str::from_utf8(answer) {
            Err(_) => Some("it is not UTF-8 text".to_owned()),
            Ok(s) if s.trim().is_empty() => Some("it is empty".to_owned()),
            Ok(s) if s.len() > self.config.max_summary_bytes => Some(format!(
                "it is {} bytes, over the {}-byte limit",
                s.len(),
                self.config.max_summary_bytes
            )),
            Ok(_) => None,
        };
        if let Some(detail) = invalid {
            self.attempts.push(Attempt {
                kind,
                input_bytes: bytes,
                result: AttemptResult::InvalidSummary {
                    detail: detail.clone(),
                },
            });
            self.finish_failed(CompactionError::InvalidSummary {
                attempt: kind.as_str(),
                detail,
            });
            return Ok(());
        }
        self.attempts.push(Attempt {
            kind,
            input_bytes: bytes,
            result: AttemptResult::Summarized,
        });
        let summary = String::from_utf8_lossy(answer).trim().to_owned();
        let transcript = Transcript {
            summary: Some(summary.clone()),
            messages: self.transcript.recent_suffix().to_vec(),
            recent_start: None,
            extra: self.transcript.extra.clone(),
        };
        let compacted = Compacted {
            summary,
            transcript,
            attempts: std::mem::take(&mut self.attempts),
            references: std::mem::take(&mut self.references),
            omitted: self.omitted,
        };
        self.state = State::Outcome(Box::new(Action::Done(Box::new(compacted))));
        Ok(())
    }

    /// The summarizer run failed.
    pub fn handle_failure(&mut self, failure: SummarizerFailure) -> Result<(), StateError> {
        let State::Running { kind, bytes } = self.state else {
            return Err(StateError::NoSummarizerRun);
        };
        self.fail_attempt(kind, bytes, failure, None);
        Ok(())
    }

    /// The claims of [`Action::Verify`] the store confirmed (any others are unconfirmed: the
    /// outputs they stand for are retained instead).
    pub fn handle_verified(
        &mut self,
        confirmed: impl IntoIterator<Item = Claim>,
    ) -> Result<(), StateError> {
        let State::Verifying { detail } = &mut self.state else {
            return Err(StateError::NoVerification);
        };
        let detail = std::mem::take(detail);
        let verified: HashSet<Claim> = confirmed.into_iter().collect();
        if let Err(error) = self.prepare_retry(&verified, detail) {
            self.finish_failed(error);
        }
        Ok(())
    }

    /// The outputs of [`Action::Retain`] are stored (`Ok`), or storing failed (`Err` with
    /// the reason).
    pub fn handle_retained(&mut self, result: Result<(), String>) -> Result<(), StateError> {
        let State::Retaining(_) = &self.state else {
            return Err(StateError::NoRetention);
        };
        let State::Retaining(pruned) = std::mem::replace(&mut self.state, State::Finished) else {
            return Err(StateError::NoRetention);
        };
        match result {
            Ok(()) => self.state = State::RetryDue(pruned),
            Err(reason) => self.finish_failed(CompactionError::Retention(reason)),
        }
        Ok(())
    }

    /// Records a failed attempt and decides: prune and retry once, or fail.
    fn fail_attempt(
        &mut self,
        kind: AttemptKind,
        bytes: usize,
        failure: SummarizerFailure,
        limit: Option<usize>,
    ) {
        let permits_retry = failure.permits_retry();
        let (result, detail) = match failure {
            SummarizerFailure::DoesNotFit { detail } => (
                AttemptResult::DoesNotFit {
                    detail: detail.clone(),
                },
                detail,
            ),
            SummarizerFailure::ContextLength { detail } => (
                AttemptResult::ContextLength {
                    detail: detail.clone(),
                },
                detail,
            ),
            SummarizerFailure::Other { detail } => (
                AttemptResult::Failed {
                    detail: detail.clone(),
                },
                detail,
            ),
        };
        self.attempts.push(Attempt {
            kind,
            input_bytes: bytes,
            result,
        });
        let error = match (kind, permits_retry, limit) {
            (_, false, _) => CompactionError::Summarizer {
                attempt: kind.as_str(),
                detail,
            },
            (AttemptKind::First, true, _) => {
                let claims = claims(self.transcript);
                if !claims.is_empty() {
                    self.state = State::VerifyDue { claims, detail };
                    return;
                }
                match self.prepare_retry(&HashSet::new(), detail) {
                    Ok(()) => return,
                    Err(error) => error,
                }
            }
            (AttemptKind::Retry, true, Some(limit)) => CompactionError::DoesNotFit {
                attempt: kind.as_str(),
                bytes,
                limit,
            },
            (AttemptKind::Retry, true, None) => CompactionError::RetryTooLarge { detail },
        };
        self.finish_failed(error);
    }

    /// Prunes with the confirmed claims and queues the retention and the retry, unless the
    /// retry input would be the first input again.
    fn prepare_retry(
        &mut self,
        verified: &HashSet<Claim>,
        detail: String,
    ) -> Result<(), CompactionError> {
        let pruned = prune(self.transcript, verified);
        if (pruned.references.is_empty() && pruned.omitted == 0)
            || pruned.snapshot == *self.transcript
        {
            return Err(CompactionError::NothingToPrune { detail });
        }
        // Retain whenever the retry refers to an artifact (even with nothing new to store):
        // the caller keeps every referenced artifact together.
        self.state = if pruned.references.is_empty() {
            State::RetryDue(Box::new(pruned))
        } else {
            State::RetainDue(Box::new(pruned))
        };
        Ok(())
    }

    fn finish_failed(&mut self, error: CompactionError) {
        self.state = State::Outcome(Box::new(Action::Failed(Failed {
            error,
            attempts: std::mem::take(&mut self.attempts),
        })));
    }
}
