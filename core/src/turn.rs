//! The generic turn loop: one [`AgentSession`] driven by one [`Channel`].
//!
//! A *turn* is one prompt sent to an agent and run to natural completion. The loop is
//! deliberately tiny and strictly ordered:
//!
//! ```text
//! loop {
//!     channel.next_prompt()      LISTEN: Ready(prompt) | Idle | Closed
//!     session.run_turn(prompt)   EXECUTE: one turn, its output and exit code
//!     channel.publish_output(o)  REPLAY: the channel decides what comes next
//! }
//! ```
//!
//! Before each `run_turn` the loop tells the session which harness session the turn continues
//! ([`AgentSession::continue_harness_session`] with [`Channel::harness_session_id`]): the
//! channel that decides what runs (auto mode's machine) is the one owner of that id, and a
//! session never keeps a second copy that could drift from it.
//!
//! The only place a turn's result reaches the channel is `publish_output`, so a channel that
//! makes decisions from results (auto mode) keeps its state machine there, and `next_prompt`
//! only renders the prompt for whatever the channel already decided.
//!
//! Nothing here spawns, sleeps or reads a clock. On [`NextPrompt::Idle`] the loop awaits the
//! `idle` future the driver passes to [`run_session_loop`] (a runtime timer, a notification,
//! anything): the waiting policy belongs to the driver, and the loop never busy-spins.
//!
//! The traits use `async fn` so a session or channel can await its runtime's I/O; the core
//! itself never polls a runtime.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::harness::{FailureKind, RetryAfter, Usage};

/// What one turn produced.
///
/// The contract every consumer may rely on:
///
/// | constructor / call                      | `text()` | `exit_code()` |
/// |-----------------------------------------|----------|---------------|
/// | `from_text(s)`                          | `s`      | `None`        |
/// | `from_text(s).with_exit_code(n)`        | `s`      | `Some(n)`     |
/// | `.with_exit_code(a).with_exit_code(b)`  | `s`      | `Some(b)`     |
///
/// The exit code is data: branch on it, and handle `None` (a turn that recorded none, e.g.
/// killed by a signal). The other fields are what agentrun additionally knows about a turn
/// run through a harness; each defaults to empty.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct TurnOutput {
    text: String,
    exit_code: Option<i32>,
    result: Option<String>,
    harness_session_id: Option<String>,
    models: Vec<String>,
    usage: Option<Usage>,
    artifacts: Vec<String>,
    failure_kind: Option<FailureKind>,
    retry_after: Option<RetryAfter>,
}

impl TurnOutput {
    /// A turn that answered `text` (its final message or output), with no exit code recorded.
    pub fn from_text(text: impl Into<String>) -> Self {
        TurnOutput {
            text: text.into(),
            ..TurnOutput::default()
        }
    }

    /// The agent's answer, verbatim.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Records the turn's exit code. Last write wins.
    pub fn with_exit_code(mut self, code: i32) -> Self {
        self.exit_code = Some(code);
        self
    }

    /// The turn's exit code, if one was recorded.
    #[must_use]
    pub fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }

    /// Records what the agent wrote to the clean result channel. Last write wins.
    pub fn with_result(mut self, result: impl Into<String>) -> Self {
        self.result = Some(result.into());
        self
    }

    /// What the agent wrote to the clean result channel, if anything.
    #[must_use]
    pub fn result(&self) -> Option<&str> {
        self.result.as_deref()
    }

    /// Records the harness's own session id (decoded from its stream). Last write wins.
    pub fn with_harness_session_id(mut self, id: impl Into<String>) -> Self {
        self.harness_session_id = Some(id.into());
        self
    }

    /// The harness's own session id, when its stream named one.
    #[must_use]
    pub fn harness_session_id(&self) -> Option<&str> {
        self.harness_session_id.as_deref()
    }

    /// Records the models observed answering, in first-seen order. Last write wins.
    pub fn with_models(mut self, models: Vec<String>) -> Self {
        self.models = models;
        self
    }

    /// The models observed answering this turn.
    #[must_use]
    pub fn models(&self) -> &[String] {
        &self.models
    }

    /// Records the turn's token usage and cost. Last write wins.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// The turn's token usage and cost, when the harness reported them.
    #[must_use]
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// Records the `artifact://` URIs of the turn's retained output. Last write wins.
    pub fn with_artifacts(mut self, uris: Vec<String>) -> Self {
        self.artifacts = uris;
        self
    }

    /// The `artifact://` URIs of the turn's retained output.
    #[must_use]
    pub fn artifacts(&self) -> &[String] {
        &self.artifacts
    }

    /// Records why the turn failed, and when the harness said a retryable failure passes.
    /// Last write wins.
    pub fn with_failure(mut self, kind: FailureKind, retry_after: Option<RetryAfter>) -> Self {
        self.failure_kind = Some(kind);
        self.retry_after = retry_after;
        self
    }

    /// Why the turn failed, when its harness run said (never for a turn that succeeded).
    #[must_use]
    pub fn failure_kind(&self) -> Option<FailureKind> {
        self.failure_kind
    }

    /// When the turn's retryable failure passes, when the harness said.
    #[must_use]
    pub fn retry_after(&self) -> Option<RetryAfter> {
        self.retry_after
    }
}

/// An error from outside the core (a file, a process, a store) carried as the source of a
/// [`TurnError`] or [`ChannelError`]: shared so those stay `Clone`, compared by identity (two
/// values are equal when they hold the same error) so they stay `Eq`. It displays as the
/// error it holds and passes on that error's own source.
#[derive(Clone)]
pub struct SharedError(Arc<dyn Error + Send + Sync + 'static>);

impl SharedError {
    /// Wraps `error`.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        SharedError(Arc::new(error))
    }

    /// The error held.
    #[must_use]
    pub fn get(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl Error for SharedError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for SharedError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedError {}

/// Why a turn could not be run at all. A turn that ran and exited non-zero is not an error:
/// it is an `Ok` [`TurnOutput`] carrying its exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The agent program could not be started.
    #[error("cannot start the agent `{program}`: {reason}")]
    Spawn {
        /// The program that was to run.
        program: String,
        /// Why it could not start.
        reason: String,
        /// The exit code a command line should use (127 not found, 126 not executable).
        exit_code: i32,
    },
    /// The agent ran but its output could not be captured or retained.
    #[error("the agent's output could not be captured")]
    Capture(#[source] SharedError),
    /// The turn was stopped from outside (Ctrl-C, a signal) before it finished.
    #[error("the turn was interrupted before it finished")]
    Interrupted,
}

/// Why a channel could not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The channel's durable state could not be read or written.
    #[error("the session state could not be read or written")]
    State(#[source] SharedError),
    /// The auto-mode machine refused an event (it was driven out of order, or its state
    /// contradicts itself).
    #[error("the auto-mode machine refused an event")]
    Machine(#[from] crate::auto_mode::AutoModeError),
    /// A step the channel runs itself (e.g. a verification command) could not be run.
    #[error("{0}")]
    Step(String),
    /// A stop request (Ctrl-C, a signal) ended a wait of the channel's own (auto mode's wait
    /// before a retry); the channel's state says where it stands.
    #[error("the wait was interrupted before it ended")]
    Interrupted,
}

/// What the channel wants run next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NextPrompt {
    /// Run this prompt as the next turn.
    Ready(String),
    /// Nothing to run yet; ask again after the driver's idle wait.
    Idle,
    /// The channel is done; the loop returns.
    Closed,
}

/// Runs turns of one agent session.
#[allow(async_fn_in_trait)]
pub trait AgentSession {
    /// Runs one turn to natural completion. A turn that ran and exited non-zero is `Ok` with
    /// its exit code; only failing to start or capture the agent is a [`TurnError`].
    async fn run_turn(&mut self, prompt: &str) -> Result<TurnOutput, TurnError>;

    /// The stable id of the driven session.
    fn session_id(&self) -> &str;

    /// Which harness session the next [`AgentSession::run_turn`] continues (`None`: a new
    /// one), as the channel named it ([`Channel::harness_session_id`]);
    /// [`run_session_loop`] calls it before every turn. A session that resumes harness
    /// sessions takes the id from here rather than keeping its own copy, so the channel stays
    /// its one owner. The default ignores it.
    fn continue_harness_session(&mut self, harness_session_id: Option<&str>) {
        let _ = harness_session_id;
    }
}

/// The prompt channel: decides what an [`AgentSession`] is asked, and receives what it
/// answered (auto mode's phase machine is one). Not the clean result channel of
/// [`crate::sink`], nor an [`OutputChannel`](crate::OutputChannel) of captured output.
#[allow(async_fn_in_trait)]
pub trait Channel {
    /// The channel's stable id (for logs).
    fn id(&self) -> &str;

    /// Receives the output of the turn that ran the last prompt. The default ignores it.
    async fn publish_output(&mut self, output: &TurnOutput) -> Result<(), ChannelError> {
        let _ = output;
        Ok(())
    }

    /// The next prompt to run, or `Idle`, or `Closed`.
    async fn next_prompt(&mut self) -> Result<NextPrompt, ChannelError>;

    /// The harness session the prompt [`Channel::next_prompt`] returned continues, when the
    /// channel owns that decision (auto mode resumes the one its machine recorded). The
    /// default names none: every turn starts a new harness session.
    fn harness_session_id(&self) -> Option<&str> {
        None
    }
}

/// Why [`run_session_loop`] stopped early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// A turn could not be run.
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// The channel failed.
    #[error(transparent)]
    Channel(#[from] ChannelError),
}

/// Drives `session` from `channel` until the channel closes: strictly `next_prompt` →
/// `run_turn` → `publish_output`, with the channel's harness session handed to the session
/// (`continue_harness_session(channel.harness_session_id())`) right before each `run_turn`.
/// On [`NextPrompt::Idle`] it awaits `idle()` before asking
/// again; the driver chooses what that wait is (a timer, a wake-up).
///
/// Returns the number of turns run. The first error stops the loop; the channel keeps
/// whatever state it persisted before it.
pub async fn run_session_loop<S, C, I, F>(
    session: &mut S,
    channel: &mut C,
    mut idle: I,
) -> Result<u64, LoopError>
where
    S: AgentSession + ?Sized,
    C: Channel + ?Sized,
    I: FnMut() -> F,
    F: Future<Output = ()>,
{
    let mut turns = 0u64;
    loop {
        match channel.next_prompt().await? {
            NextPrompt::Ready(prompt) => {
                session.continue_harness_session(channel.harness_session_id());
                let output = session.run_turn(&prompt).await?;
                turns += 1;
                channel.publish_output(&output).await?;
            }
            NextPrompt::Idle => idle().await,
            NextPrompt::Closed => return Ok(turns),
        }
    }
}
