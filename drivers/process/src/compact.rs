//! Compaction as one library call: [`Runner::compact`] summarizes a whole transcript with a
//! [`Summarizer`], retrying once with tool output moved into artifacts when the summarizer's
//! input is too large (the rules are `agentrun_core::compaction`'s), and returns a typed
//! [`CompactRun`]: the summary, the compacted transcript, every attempt, the references of the
//! retry and what the store retained for them.
//!
//! ```no_run
//! # async fn demo(runner: &agentrun_process::Runner<impl agentrun_process::Runtime>) -> Result<(), agentrun_process::CompactError> {
//! use agentrun_core::harness::Harness;
//! use agentrun_process::{AgentOptions, CompactOptions, Summarizer, TranscriptInput};
//!
//! let summarizer = Summarizer::Agent(AgentOptions::new(Harness::Claude, "").model("haiku"));
//! let done = runner
//!     .compact(
//!         TranscriptInput::Path("conversation.json".into()),
//!         CompactOptions::new(summarizer).max_input_bytes(400_000),
//!     )
//!     .on_progress(|event| eprintln!("{event}"))
//!     .await?;
//! println!("{}", done.summary);
//! for uri in done.retained.iter().flat_map(|r| &r.kept) {
//!     println!("kept {uri}");
//! }
//! # Ok(()) }
//! ```
//!
//! Driving order: the transcript is read (on the runtime's blocking pool); the machine
//! (`agentrun_core::compaction::Compaction`) is drained, action by action: `Summarize` runs
//! the summarizer (an agent turn through [`Runner::agent`], or a command through
//! [`Runner::run`]) and classifies how it ended; `Verify` and `Retain` go to one
//! `agentrun_fs::RetentionSession`, whose single record keeps every artifact the retry refers
//! to; `Done` and `Failed` end the call. The transcript is only read.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::future::{Future, IntoFuture};
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use agentrun_core::compaction::{
    Action, Attempt, AttemptKind, Compaction, CompactionConfig, CompactionError,
    DEFAULT_MAX_SUMMARY_BYTES, Failed, Reference, RetentionFailure, StateError, SummarizerFailure,
    SummarizerInput,
};
use agentrun_core::harness::{FailureKind, OutcomeStatus};
use agentrun_core::page::ByteRange;
use agentrun_core::process::{Exit, OptionsError, ProcessResult, RunOptions, StdinMode};
use agentrun_core::record::StreamRecord;
use agentrun_core::sink::ResultSink;
use agentrun_core::transcript::{Transcript, TranscriptLimits};
use agentrun_fs::{RetainError, Retained, RetentionSession, Store};

use crate::agent::{AgentError, AgentOptions, RetainedSource, exit_diagnostic};
use crate::driver::{Runner, Runtime};
use crate::live::RunError;
use crate::transcript_file::{TranscriptLoadError, load_transcript, parse_transcript};

/// The line a [`Summarizer::Command`] prints (on stdout or stderr) with a non-zero exit when
/// its input was longer than its model's context window: the pruned retry follows.
pub const CONTEXT_LENGTH_MARKER: &str = "agentrun:context-length-exceeded";

/// How much of a summarizer command's stderr is searched for the marker (its last bytes).
const MARKER_SEARCH_BYTES: u64 = 1 << 20;

/// Who summarizes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Summarizer {
    /// An agent CLI turn with these options (model, effort, harness arguments, environment,
    /// program): the summarizer input is its prompt (on stdin where the harness reads it
    /// there, else its prompt argument, whose size bound is a local fit rejection), its final
    /// message the summary, and a turn the harness's decoder classifies as a context-length
    /// failure permits the retry. The options' own prompt is replaced; the run is stream-only
    /// (no retained record is read) and may run outside a Git repository.
    Agent(AgentOptions),
    /// A command run with the summarizer input on stdin and a clean result channel
    /// ([`ResultSink::Allocate`]): program, arguments, environment and working directory from
    /// these options. Exit 0: the summary is what it wrote to the sink, else its stdout.
    /// Non-zero: a context-length failure when stdout or stderr has a line that is exactly
    /// [`CONTEXT_LENGTH_MARKER`], any other failure otherwise.
    Command(RunOptions),
}

impl Summarizer {
    /// A command from its argv (`["llm", "-m", "gpt-4o-mini"]`), run directly (no shell).
    pub fn command<S: AsRef<OsStr>>(program: S, args: impl IntoIterator<Item = S>) -> Self {
        let args: Vec<S> = args.into_iter().collect();
        Summarizer::Command(RunOptions::new(program).args(&args))
    }
}

/// How one compaction runs.
#[derive(Debug, Clone)]
#[must_use]
pub struct CompactOptions {
    summarizer: Summarizer,
    max_input_bytes: Option<usize>,
    timeout: Option<Duration>,
    sink_var: Option<OsString>,
}

impl CompactOptions {
    /// A compaction by `summarizer`, with no local fit check and no timeout.
    pub fn new(summarizer: Summarizer) -> Self {
        CompactOptions {
            summarizer,
            max_input_bytes: None,
            timeout: None,
            sink_var: None,
        }
    }

    /// The local fit check: a summarizer input longer than `bytes` is rejected without running
    /// the summarizer and counts as a size failure (the pruned retry follows).
    pub fn max_input_bytes(mut self, bytes: usize) -> Self {
        self.max_input_bytes = Some(bytes);
        self
    }

    /// Stops a summarizer run after `timeout`; a timeout is an ordinary failure (no retry).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The variable a [`Summarizer::Command`] finds its result sink's path in (default
    /// `AGENTRUN_RESULT_SINK`).
    pub fn sink_var(mut self, var: impl AsRef<OsStr>) -> Self {
        self.sink_var = Some(var.as_ref().to_owned());
        self
    }

    /// The summarizer.
    pub fn summarizer(&self) -> &Summarizer {
        &self.summarizer
    }

    /// The input bound the machine checks: the caller's, and the size of one argument when
    /// the harness takes its prompt as one.
    fn input_limit(&self) -> Option<usize> {
        let argv_limit = match &self.summarizer {
            Summarizer::Agent(agent) => agent
                .harness()
                .prompt_delivery(summary_request(agent).request())
                .max_prompt_bytes(),
            Summarizer::Command(_) => None,
        };
        match (self.max_input_bytes, argv_limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The agent options of one summarizer turn, before its prompt is set.
fn summary_request(agent: &AgentOptions) -> AgentOptions {
    agent
        .clone()
        .prompt_on_stdin(true)
        // A transcript is summarized wherever it is, not only inside a Git repository.
        .skip_git_repo_check(true)
        .retained(RetainedSource::Skip)
}

/// The transcript to compact.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TranscriptInput {
    /// A file (or FIFO), read within the default limits; see [`load_transcript`].
    Path(PathBuf),
    /// JSON bytes, parsed within the default limits.
    Bytes(Vec<u8>),
    /// A transcript already parsed.
    Parsed(Transcript),
}

impl From<Transcript> for TranscriptInput {
    fn from(t: Transcript) -> Self {
        TranscriptInput::Parsed(t)
    }
}

/// What happened while compacting, for a progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompactEvent {
    /// The summarizer runs on an input of `bytes` bytes.
    Summarizing {
        /// Which attempt.
        kind: AttemptKind,
        /// The input's size.
        bytes: usize,
    },
    /// A summarizer run failed (the machine decides whether a retry follows).
    AttemptFailed {
        /// Which attempt.
        kind: AttemptKind,
        /// How it failed.
        failure: SummarizerFailure,
    },
    /// The store confirmed `confirmed` of the `named` artifacts the transcript names for its
    /// tool output.
    Verified {
        /// Artifacts named.
        named: usize,
        /// Artifacts holding exactly that output.
        confirmed: usize,
    },
    /// The first input did not fit: `outputs` tool outputs are being stored for the retry.
    Retaining {
        /// How many outputs are stored.
        outputs: usize,
    },
}

impl fmt::Display for CompactEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompactEvent::Summarizing { kind, bytes } => {
                write!(f, "{} attempt: summarizing {bytes} bytes", kind.as_str())
            }
            CompactEvent::AttemptFailed { kind, failure } => {
                write!(f, "{} attempt failed: {}", kind.as_str(), describe(failure))
            }
            CompactEvent::Verified { named, confirmed } => write!(
                f,
                "the transcript names {named} artifact(s) for its tool output; {confirmed} hold \
                 exactly that output in this store"
            ),
            CompactEvent::Retaining { outputs } => write!(
                f,
                "the input did not fit; retaining {outputs} tool output(s) as artifacts for one \
                 pruned retry"
            ),
        }
    }
}

fn describe(failure: &SummarizerFailure) -> String {
    match failure {
        SummarizerFailure::ContextLength { detail } => {
            format!("context length exceeded ({detail})")
        }
        SummarizerFailure::DoesNotFit { detail } => format!("does not fit ({detail})"),
        SummarizerFailure::Other { detail } => detail.clone(),
        _ => "failed".to_owned(),
    }
}

/// A successful compaction.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompactRun {
    /// The new summary.
    pub summary: String,
    /// The compacted transcript: the new summary, then the recent messages as they were.
    pub transcript: Transcript,
    /// Every attempt, in order (two when the pruned retry ran).
    pub attempts: Vec<Attempt>,
    /// Where the retry input replaced tool output by an artifact reference.
    pub references: Vec<Reference>,
    /// How many artifact-read outputs the retry input omitted.
    pub omitted_artifact_reads: usize,
    /// The one record that keeps every artifact the retry refers to (`None` without a retry
    /// that referred to any).
    pub retained: Option<Retained>,
}

impl CompactRun {
    /// Why the retry ran, when it did: `local fit rejection` or `context length exceeded`.
    pub fn retry_reason(&self) -> Option<&'static str> {
        retry_reason(&self.attempts)
    }
}

/// Why the retry ran, when the attempts say it did.
pub fn retry_reason(attempts: &[Attempt]) -> Option<&'static str> {
    use agentrun_core::compaction::AttemptResult;
    if attempts.len() < 2 {
        return None;
    }
    match attempts[0].result {
        AttemptResult::DoesNotFit { .. } => Some("local fit rejection"),
        AttemptResult::ContextLength { .. } => Some("context length exceeded"),
        _ => None,
    }
}

/// Why a compaction gave no summary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// Compaction ran and failed (the summarizer failed, the pruned input did not fit either,
    /// the answer was not a usable summary): the transcript is unchanged. Its attempts are
    /// in the [`Failed`].
    #[error(transparent)]
    Compaction(Box<Failed>),
    /// The transcript could not be read or is not a transcript.
    #[error(transparent)]
    Transcript(#[from] TranscriptLoadError),
    /// The summarizer's options are refused (a model or effort the harness would misread,
    /// invalid process options).
    #[error("the summarizer cannot be run as given")]
    Summarizer(#[source] SummarizerSetupError),
    /// A summarizer run failed for agentrun's own reasons (the store refused its capture).
    #[error("the summarizer run failed")]
    Run(#[source] RunError),
    /// The summarizer's output could not be read back from the store.
    #[error("cannot read the summarizer output")]
    ReadOutput(#[source] agentrun_fs::ReadError),
    /// The store refused the retention of the retry's artifacts (checking or beginning it).
    #[error("the store refused the compaction's retention")]
    Retention(#[source] RetainError),
    /// A blocking job of the compaction was lost (it panicked).
    #[error("a blocking job of the compaction was lost")]
    Blocking(#[source] std::io::Error),
    /// The machine refused a call or stopped asking for anything: a bug in this driver.
    #[error("the compaction machine stalled")]
    Stalled(#[source] Option<StateError>),
}

impl From<AgentError> for CompactError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Run(run) => CompactError::Run(run),
            AgentError::Options(o) => CompactError::Summarizer(SummarizerSetupError::Options(o)),
            AgentError::Launch(l) => CompactError::Summarizer(SummarizerSetupError::Launch(l)),
            other => CompactError::Summarizer(SummarizerSetupError::Agent(other)),
        }
    }
}

/// Why a summarizer cannot be run as given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SummarizerSetupError {
    /// The process options are invalid.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The harness would misread the request (a model that looks like a flag, …).
    #[error(transparent)]
    Launch(#[from] agentrun_core::harness::LaunchError),
    /// The agent turn could not be set up.
    #[error(transparent)]
    Agent(AgentError),
}

type ProgressFn = Box<dyn FnMut(&CompactEvent) + Send>;

/// One compaction being described ([`Runner::compact`]); awaiting it runs it.
#[must_use = "a compaction does nothing until awaited"]
pub struct CompactBuilder<'a, R> {
    runner: &'a Runner<R>,
    input: TranscriptInput,
    options: CompactOptions,
    progress: Option<ProgressFn>,
}

impl<R> fmt::Debug for CompactBuilder<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactBuilder")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Runner<R> {
    /// Describes the compaction of `transcript`; `.await` it to run it.
    pub fn compact(
        &self,
        transcript: impl Into<TranscriptInput>,
        options: CompactOptions,
    ) -> CompactBuilder<'_, R> {
        CompactBuilder {
            runner: self,
            input: transcript.into(),
            options,
            progress: None,
        }
    }
}

impl<R> CompactBuilder<'_, R> {
    /// Calls `progress` with each step as it happens (on the task awaiting the compaction).
    pub fn on_progress(mut self, progress: impl FnMut(&CompactEvent) + Send + 'static) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }
}

impl<'a, R: Runtime> IntoFuture for CompactBuilder<'a, R> {
    type Output = Result<CompactRun, CompactError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(compact(
            self.runner,
            self.input,
            self.options,
            self.progress,
        ))
    }
}

async fn compact<R: Runtime>(
    runner: &Runner<R>,
    input: TranscriptInput,
    options: CompactOptions,
    mut progress: Option<ProgressFn>,
) -> Result<CompactRun, CompactError> {
    let transcript = match input {
        TranscriptInput::Parsed(t) => t,
        TranscriptInput::Path(path) => runner
            .runtime
            .spawn_blocking(move || load_transcript(&path).map(|l| l.transcript))
            .await
            .map_err(CompactError::Blocking)??,
        TranscriptInput::Bytes(bytes) => runner
            .runtime
            .spawn_blocking(move || {
                parse_transcript(
                    &bytes[..],
                    std::path::Path::new("the transcript"),
                    &TranscriptLimits::default(),
                )
            })
            .await
            .map_err(CompactError::Blocking)??,
    };
    let mut emit = |event: CompactEvent| {
        if let Some(p) = progress.as_mut() {
            p(&event);
        }
    };
    let config = CompactionConfig::default().max_input_bytes(options.input_limit());
    let mut machine = Compaction::new(&transcript, config);
    // One retention per compaction: it protects what it confirms and stores, and its one
    // record keeps every artifact the retry refers to.
    let mut retention: Option<RetentionSession> = None;
    let mut retained: Option<Retained> = None;
    let stalled = |e: StateError| CompactError::Stalled(Some(e));
    loop {
        match machine.poll_action() {
            Some(Action::Summarize(input)) => {
                let kind = input.kind;
                emit(CompactEvent::Summarizing {
                    kind,
                    bytes: input.text.len(),
                });
                match summarize(runner, &options, input).await? {
                    Ok(answer) => machine.handle_summary(&answer),
                    Err(failure) => {
                        emit(CompactEvent::AttemptFailed {
                            kind,
                            failure: failure.clone(),
                        });
                        machine.handle_failure(failure)
                    }
                }
                .map_err(stalled)?;
            }
            Some(Action::Verify(claims)) => {
                let named = claims.len();
                let store = runner.store.clone();
                let session = retention.take();
                let (session, confirmed) = runner
                    .runtime
                    .spawn_blocking(move || {
                        let mut session = match session {
                            Some(s) => s,
                            None => store.begin_retention()?,
                        };
                        let confirmed = session.confirm(claims)?;
                        Ok::<_, RetainError>((session, confirmed))
                    })
                    .await
                    .map_err(CompactError::Blocking)?
                    .map_err(CompactError::Retention)?;
                retention = Some(session);
                emit(CompactEvent::Verified {
                    named,
                    confirmed: confirmed.len(),
                });
                machine.handle_verified(confirmed).map_err(stalled)?;
            }
            Some(Action::Retain(outputs)) => {
                emit(CompactEvent::Retaining {
                    outputs: outputs.len(),
                });
                let store = runner.store.clone();
                let session = retention.take();
                // Storing can fail for reasons the machine handles (the compaction fails and
                // keeps nothing); a store that refuses to begin a retention at all, or a lost
                // job, is agentrun's own failure.
                let result = runner
                    .runtime
                    .spawn_blocking(move || {
                        let mut session = match session {
                            Some(s) => s,
                            None => store.begin_retention()?,
                        };
                        Ok::<_, RetainError>(
                            session.retain(&outputs).and_then(|()| session.finish()),
                        )
                    })
                    .await
                    .map_err(CompactError::Blocking)?
                    .map_err(CompactError::Retention)?;
                let result = match result {
                    Ok(r) => {
                        retained = r;
                        Ok(())
                    }
                    Err(e) => Err(RetentionFailure::new(e)),
                };
                machine.handle_retained(result).map_err(stalled)?;
            }
            Some(Action::Done(done)) => {
                let done = *done;
                return Ok(CompactRun {
                    summary: done.summary,
                    transcript: done.transcript,
                    attempts: done.attempts,
                    references: done.references,
                    omitted_artifact_reads: done.omitted,
                    retained,
                });
            }
            Some(Action::Failed(failed)) => {
                return Err(CompactError::Compaction(Box::new(failed)));
            }
            _ => return Err(CompactError::Stalled(None)),
        }
    }
}

/// Runs the summarizer once. The outer error is agentrun's own failure (the store); the inner
/// result is the summarizer's answer or how it failed.
async fn summarize<R: Runtime>(
    runner: &Runner<R>,
    options: &CompactOptions,
    input: SummarizerInput,
) -> Result<Result<Vec<u8>, SummarizerFailure>, CompactError> {
    let label = format!("compaction {} attempt", input.kind.as_str());
    match &options.summarizer {
        Summarizer::Agent(agent) => {
            let mut turn = summary_request(agent).prompt(input.text).label(label);
            if let Some(t) = options.timeout {
                turn = turn.timeout(t);
            }
            let turn = match runner.agent(turn).await {
                Ok(turn) => turn,
                Err(AgentError::Run(RunError::Spawn { program, source })) => {
                    return Ok(Err(SummarizerFailure::Other {
                        detail: format!("cannot run {}: {source}", program.to_string_lossy()),
                    }));
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(outcome) = turn.stopped() {
                return Ok(Err(stopped(outcome.timed_out())));
            }
            let harness = turn.harness;
            let Some(completion) = turn.completion else {
                return Ok(Err(SummarizerFailure::Other {
                    detail: format!("{harness} ended without a completion"),
                }));
            };
            let outcome = completion.outcome;
            Ok(match outcome.status {
                OutcomeStatus::Succeeded => {
                    Ok(outcome.final_message.unwrap_or_default().into_bytes())
                }
                OutcomeStatus::TurnFailed { diagnostic }
                    if outcome.failure_kind == Some(FailureKind::ContextLength) =>
                {
                    Err(SummarizerFailure::ContextLength { detail: diagnostic })
                }
                OutcomeStatus::TurnFailed { diagnostic }
                | OutcomeStatus::ExecutionFailed { diagnostic } => {
                    Err(SummarizerFailure::Other { detail: diagnostic })
                }
                other => Err(SummarizerFailure::Other {
                    detail: format!("{harness}: {other:?}"),
                }),
            })
        }
        Summarizer::Command(command) => {
            let mut run = command
                .clone()
                // The input is moved into the child's stdin, never copied again: it can be as
                // large as the transcript.
                .stdin(StdinMode::Bytes(input.text.into_bytes()))
                .with_result_sink(ResultSink::Allocate)
                .sink_cap(DEFAULT_MAX_SUMMARY_BYTES as u64 + 1)
                .label(label);
            if let Some(var) = &options.sink_var {
                run = run.sink_var(var);
            }
            if let Some(t) = options.timeout {
                run = run.timeout(t);
            }
            run.validate()
                .map_err(|e| CompactError::Summarizer(SummarizerSetupError::Options(e)))?;
            let result = match runner.run(run).await {
                Ok(result) => result,
                Err(RunError::Spawn { program, source }) => {
                    return Ok(Err(SummarizerFailure::Other {
                        detail: format!("cannot run {}: {source}", program.to_string_lossy()),
                    }));
                }
                Err(e) => return Err(CompactError::Run(e)),
            };
            if result.outcome != agentrun_core::process::RunOutcome::Completed {
                return Ok(Err(stopped(result.outcome.timed_out())));
            }
            let store = runner.store.clone();
            runner
                .runtime
                .spawn_blocking(move || command_answer(&store, &result))
                .await
                .map_err(CompactError::Blocking)?
        }
    }
}

fn stopped(timed_out: bool) -> SummarizerFailure {
    SummarizerFailure::Other {
        detail: format!(
            "the summarizer was stopped ({})",
            if timed_out { "timeout" } else { "interrupted" }
        ),
    }
}

/// A summarizer command's answer: the sink, else stdout, on exit 0; a classified failure
/// otherwise.
fn command_answer(
    store: &Store,
    result: &ProcessResult,
) -> Result<Result<Vec<u8>, SummarizerFailure>, CompactError> {
    // One byte past the summary bound: a longer answer is refused as too long, never cut
    // into one that passes.
    let answer_bytes = DEFAULT_MAX_SUMMARY_BYTES as u64 + 1;
    let stdout = match result.stdout() {
        Some(s) => read_stream(store, result, s, 0, answer_bytes.max(MARKER_SEARCH_BYTES))?,
        None => Vec::new(),
    };
    if result.exit == Some(Exit::Code(0)) {
        return Ok(Ok(match &result.result {
            Some(answer) => answer.clone().into_bytes(),
            None => stdout,
        }));
    }
    let stderr = match result.stderr() {
        Some(s) => read_stream(
            store,
            result,
            s,
            s.bytes.saturating_sub(MARKER_SEARCH_BYTES),
            MARKER_SEARCH_BYTES,
        )?,
        None => Vec::new(),
    };
    let marked = [&stdout, &stderr].iter().any(|bytes| {
        bytes
            .split(|&b| b == b'\n')
            .any(|line| line.trim_ascii() == CONTEXT_LENGTH_MARKER.as_bytes())
    });
    let detail = exit_diagnostic("the summarizer", result.exit, result);
    Ok(Err(if marked {
        SummarizerFailure::ContextLength { detail }
    } else {
        SummarizerFailure::Other { detail }
    }))
}

/// Up to `limit` bytes of a captured stream from `offset`.
fn read_stream(
    store: &Store,
    result: &ProcessResult,
    stream: &StreamRecord,
    offset: u64,
    limit: u64,
) -> Result<Vec<u8>, CompactError> {
    let uri = result.record.stream_uri(stream);
    let end = stream.bytes.min(offset.saturating_add(limit));
    let mut bytes = Vec::new();
    let mut at = offset;
    while at < end {
        let chunk = (end - at).min(agentrun_core::page::MAX_PAGE_BYTES as u64) as u32;
        let page = store
            .read_bytes(
                &uri,
                ByteRange {
                    offset: at,
                    limit: chunk,
                },
            )
            .map_err(CompactError::ReadOutput)?;
        if page.bytes.is_empty() {
            break;
        }
        at += page.bytes.len() as u64;
        bytes.extend_from_slice(&page.bytes);
    }
    Ok(bytes)
}

impl CompactError {
    /// The compaction's own failure with its attempts, when compaction ran and failed.
    pub fn failed(&self) -> Option<&Failed> {
        match self {
            CompactError::Compaction(failed) => Some(failed),
            _ => None,
        }
    }

    /// The core's reason, when compaction ran and failed.
    pub fn compaction_error(&self) -> Option<&CompactionError> {
        self.failed().map(|f| &f.error)
    }
}
