//! The compaction state machine: attempts, the retry decision and the outcome (the driving
//! order is in the module documentation of `compaction`).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::prune::{Claim, Pruned, Reference, Retention, claims, prune};
use super::render::{DEFAULT_INSTRUCTIONS, render};
use crate::transcript::Transcript;

/// Largest summary accepted by default (1 MiB).
pub const DEFAULT_MAX_SUMMARY_BYTES: usize = 1 << 20;

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
    #[error("could not retain tool output for the retry")]
    Retention(#[source] RetentionFailure),
}

/// Why storing the outputs of [`Action::Retain`] failed, as the caller reports it to
/// [`Compaction::handle_retained`]. It carries the caller's own error: its message is that
/// error's and its source is that error's source, so nothing of the cause is lost.
#[derive(Debug, Clone)]
pub struct RetentionFailure(Arc<dyn std::error::Error + Send + Sync>);

impl RetentionFailure {
    /// Wraps the caller's error (a store error, an I/O error, …).
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        RetentionFailure(Arc::new(error))
    }

    /// The caller's error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for RetentionFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for RetentionFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Two failures are equal when they say the same (errors have no equality of their own).
impl PartialEq for RetentionFailure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for RetentionFailure {}

/// A failure known only by its message.
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

impl From<String> for RetentionFailure {
    fn from(message: String) -> Self {
        RetentionFailure::new(Message(message))
    }
}

impl From<&str> for RetentionFailure {
    fn from(message: &str) -> Self {
        RetentionFailure::from(message.to_owned())
    }
}

/// A failed compaction, with its attempts for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Why.
    pub error: CompactionError,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

/// Says why, as [`Failed::error`] does (the attempts are for the report).
impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Run the summarizer on this input.
    Summarize(SummarizerInput),
    /// Check which of these artifacts, named by the transcript, hold what they must (present,
    /// readable, and for [`Holds::Output`](super::Holds::Output) exactly those bytes), then call
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
    /// the caller's error, which becomes the source of [`CompactionError::Retention`]).
    pub fn handle_retained(
        &mut self,
        result: Result<(), RetentionFailure>,
    ) -> Result<(), StateError> {
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
