//! The persisted state of an auto-mode session (`state.json`): everything needed to inspect a
//! running session and to continue an interrupted one from its last transition.

use serde::{Deserialize, Serialize};

use super::Phase;
use super::verdict::Verdict;
use crate::budget::{Budget, BudgetExceeded, Spend};
use crate::harness::{FailureKind, Usage, UsageLedger};
use crate::retry::{DEFAULT_AUTO_MAX_RETRIES, DEFAULT_RETRY_BACKOFF, RetryPolicy, RetryWait};

/// The `format` written by this version; a state with another format is refused on continue.
pub const STATE_FORMAT: u32 = 1;

/// How many turn records `state.json` keeps (the oldest are dropped and counted); the full
/// history is in the log. Keeps the state, and the work to rewrite it, bounded.
pub const MAX_TURN_RECORDS: usize = 64;

/// How many verification records `state.json` keeps.
pub const MAX_VERIFICATION_RECORDS: usize = 16;

/// The most bytes of a plan, an evaluation or a verification preview kept in the state and
/// embedded in a later prompt.
pub const MAX_CARRIED_TEXT_BYTES: usize = 16 * 1024;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionStatus {
    /// Turns remain to be run.
    Running,
    /// The objective was claimed complete and, when a verification is configured, verified.
    Completed,
    /// The last turn ran without a verified completion.
    Stopped,
    /// An Evaluate or required turn exited non-zero.
    Error,
    /// The spend reached the session's cost or token limit: no further turn started.
    Budget,
}

impl SessionStatus {
    /// The spelling used in `state.json` and on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Running => "running",
            SessionStatus::Completed => "completed",
            SessionStatus::Stopped => "stopped",
            SessionStatus::Error => "error",
            SessionStatus::Budget => "budget",
        }
    }
}

/// What an auto-mode session was started with, kept in its session directory so a resumed
/// session runs the same way (not the command line's configuration settings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// The objective, verbatim.
    pub objective: String,
    /// The harness name (e.g. `claude`).
    pub harness: String,
    /// The model requested, if any.
    pub model: Option<String>,
    /// The reasoning effort requested, if any.
    pub effort: Option<String>,
    /// Arguments passed to the harness verbatim before the prompt.
    pub harness_args: Vec<String>,
    /// The verification command (run with `sh -c` in the workspace), if any.
    pub verify: Option<String>,
    /// The workspace the harness and the verification run in.
    pub workspace: Option<String>,
    /// The last turn number (at least 3).
    pub max_turns: u32,
    /// The environment variable naming the verdict file.
    pub result_sink_var: String,
    /// Whether the harness resumes its own session; when not, the plan is embedded in later
    /// prompts.
    pub harness_resumes: bool,
    /// The most retries of one turn that hit a rate limit or an overload (absent in a state
    /// written before retries existed: the default).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// The first backoff wait, in milliseconds, when the harness says nothing about when to
    /// come back (doubled for each further retry).
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: u64,
}

impl Settings {
    /// The retry policy of every turn.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(
            self.max_retries,
            std::time::Duration::from_millis(self.retry_backoff_ms),
        )
    }
}

fn default_max_retries() -> u32 {
    DEFAULT_AUTO_MAX_RETRIES
}

fn default_retry_backoff_ms() -> u64 {
    u64::try_from(DEFAULT_RETRY_BACKOFF.as_millis()).unwrap_or(u64::MAX)
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One turn that ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The turn number (Execute, Evaluate and Adjust of one iteration share it).
    pub turn: u32,
    /// The phase it ran.
    pub phase: Phase,
    /// Its exit code, if one was recorded.
    pub exit_code: Option<i32>,
    /// The verdict parsed from an Evaluate turn.
    pub verdict: Option<Verdict>,
    /// The `artifact://` URIs of its retained output.
    pub artifacts: Vec<String>,
    /// Models observed answering.
    pub models: Vec<String>,
    /// This turn's own usage (a resumed harness session's running totals less the previous
    /// turn's), when the harness reported usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why it failed, when the harness said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// Which retry of its phase's turn this run was (absent: the first run).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry: u32,
}

/// One run of the verification command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationRecord {
    /// The turn whose completion claim it checked.
    pub turn: u32,
    /// The command.
    pub command: String,
    /// Its exit code (`None`: killed by a signal or not started).
    pub exit_code: Option<i32>,
    /// A bounded preview of its output, with the read hint for the rest.
    pub output: String,
    /// The `artifact://` URIs of its retained output.
    pub artifacts: Vec<String>,
}

impl VerificationRecord {
    /// Whether the verification passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// One appended instruction, sanitized, embedded in the current Execute prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instruction {
    /// The file name it came from in `append/`.
    pub name: String,
    /// The sanitized text.
    pub text: String,
}

/// The whole persisted state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoModeState {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// The session id.
    pub session_id: String,
    /// What the session was started with.
    pub settings: Settings,
    /// Where the session stands.
    pub status: SessionStatus,
    /// The phase that runs next (or ran last, once finished).
    pub phase: Phase,
    /// The current turn number.
    pub turn: u32,
    /// The exit code for the command line: 0, or the failing phase's code.
    pub exit_code: i32,
    /// Set exactly when a required phase (Clarify, Plan, Adjust) exited non-zero.
    pub abort: Option<String>,
    /// For a completed session: whether a verification passed (`false`: none configured).
    pub verified: Option<bool>,
    /// The harness's own session id, resumed by every turn after the first.
    pub harness_session_id: Option<String>,
    /// The plan (bounded), embedded when the harness cannot resume.
    pub plan: Option<String>,
    /// The last Evaluate answer (bounded), shown to the Adjust turn.
    pub last_evaluation: Option<String>,
    /// The verdict of the last Evaluate turn.
    pub last_verdict: Option<Verdict>,
    /// The last failed verification, shown to the next Evaluate turn.
    pub failed_verification: Option<VerificationRecord>,
    /// The latest verifications, oldest first.
    pub verifications: Vec<VerificationRecord>,
    /// The latest turns, oldest first.
    pub turns: Vec<TurnRecord>,
    /// How many older turn records were dropped.
    pub turns_dropped: u64,
    /// How many harness turns ran in total.
    pub harness_turns: u64,
    /// The usage of every harness turn, each turn's own, summed (`usage.total`; absent until
    /// a turn reports usage), and the harness session's running totals it was computed from.
    #[serde(default)]
    pub usage: UsageLedger,
    /// The session's limits (absent when none).
    #[serde(default, skip_serializing_if = "Budget::is_unlimited")]
    pub budget: Budget,
    /// What the turns spent, in the budget's terms: the cost (reported, or estimated from the
    /// price table for a harness that reports tokens only) and the tokens.
    #[serde(default)]
    pub spend: Spend,
    /// The limit the spend reached, once it did (the session's status is then `budget`,
    /// unless the turn that reached it also ended the session otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exceeded: Option<BudgetExceeded>,
    /// Appended instructions embedded in the Execute prompt of the current turn (kept until
    /// it finishes so a continued session delivers them again rather than losing them).
    pub instructions: Vec<Instruction>,
    /// How many appended instructions were embedded in total.
    pub instructions_delivered: u64,
    /// How many retries the current phase's turn has had (after rate limits or overloads).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// The wait before the next retry, while one is pending: a continued session waits for
    /// what remains of it, then retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_wait: Option<RetryWait>,
    /// Milliseconds since the Unix epoch when the session started.
    pub created_unix_ms: u64,
    /// Milliseconds since the Unix epoch of the last transition.
    pub updated_unix_ms: u64,
}
