//! Fan-out: several attempts at one task at once, the verified result kept.
//!
//! [`FanOut`] holds every decision of a fan-out and does no I/O: which attempt starts next
//! (at most `jobs` at once), when an attempt's verification runs, which attempt wins, when
//! the others are stopped, and what each attempt is recorded as. The driver
//! (`agentrun_process::fanout`) creates the worktrees, runs the agents and the verifications,
//! and tells the machine how each ended. Its loop:
//!
//! 1. `FanOut::new(attempts, jobs, selection, verify)`.
//! 2. Drain [`FanOut::poll_action`]: [`Action::Start`] → isolate and launch attempt `n`;
//!    [`Action::Verify`] → run the verification in its worktree; [`Action::Stop`] → stop
//!    the attempt's process group (a second `Stop` of the same attempt, after a second
//!    interrupt, means kill it now); [`Action::Discard`] → the attempt has ended without
//!    winning: remove its worktree and branch now (unless they are kept), so that a long
//!    fan-out does not pile up worktrees that every later git command walks;
//!    [`Action::Finish`] → every attempt has ended: write the record.
//! 3. Wait for an attempt's agent ([`FanOut::handle_agent_end`]) or verification
//!    ([`FanOut::handle_verification`]) to end, or an interrupt
//!    ([`FanOut::handle_interrupt`]). Back to 2.
//!
//! Selection: with [`Selection::FirstVerified`] the first attempt whose verification passes
//! (without a verification: the first that succeeds) wins and every other attempt is stopped;
//! with [`Selection::All`] every attempt runs to its end and the winner is the first, in the
//! order they ended, that passed (or succeeded).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::harness::{FailureKind, Usage};

/// The most attempts run at once when no `jobs` is given.
pub const DEFAULT_MAX_JOBS: usize = 8;

/// How many attempts run at once by default: all of them, at most [`DEFAULT_MAX_JOBS`].
#[must_use]
pub fn default_jobs(attempts: usize) -> usize {
    attempts.clamp(1, DEFAULT_MAX_JOBS)
}

/// How the winner is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Selection {
    /// The first attempt that passes verification wins; the others are stopped.
    #[default]
    FirstVerified,
    /// Every attempt runs to its end; the first that passed wins.
    All,
}

impl Selection {
    /// The name on the command line: `first-verified`, `all`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Selection::FirstVerified => "first-verified",
            Selection::All => "all",
        }
    }

    /// Parses [`Selection::as_str`]'s names.
    ///
    /// # Errors
    /// [`FanOutError::UnknownSelection`] for any other word.
    pub fn from_name(name: &str) -> Result<Selection, FanOutError> {
        match name {
            "first-verified" => Ok(Selection::FirstVerified),
            "all" => Ok(Selection::All),
            other => Err(FanOutError::UnknownSelection(other.to_owned())),
        }
    }
}

/// Why a fan-out cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FanOutError {
    /// No attempt was given.
    #[error("a fan-out needs at least one attempt")]
    NoAttempts,
    /// `jobs` is zero.
    #[error("jobs must be at least 1")]
    NoJobs,
    /// A selection that is neither `first-verified` nor `all`.
    #[error("unknown selection {0:?}: expected first-verified or all")]
    UnknownSelection(String),
}

/// What an attempt came to (or, while the fan-out runs, where it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptStatus {
    /// Waiting for a free job (while the fan-out runs).
    Queued,
    /// The agent is running.
    Running,
    /// The agent succeeded; its verification is running.
    Verifying,
    /// The agent succeeded (see `verified` for its verification).
    Succeeded,
    /// The agent did not succeed (a failed turn, a harness that exited non-zero).
    Failed,
    /// Stopped because another attempt won.
    Stopped,
    /// Stopped by an interrupt (Ctrl-C) of the whole fan-out.
    Interrupted,
    /// Never started: a winner was found, or the fan-out was interrupted, first.
    NotStarted,
    /// Could not be run: its worktree could not be made, or its harness could not start.
    Error,
}

impl AttemptStatus {
    /// The status's name in the record.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Queued => "queued",
            AttemptStatus::Running => "running",
            AttemptStatus::Verifying => "verifying",
            AttemptStatus::Succeeded => "succeeded",
            AttemptStatus::Failed => "failed",
            AttemptStatus::Stopped => "stopped",
            AttemptStatus::Interrupted => "interrupted",
            AttemptStatus::NotStarted => "not_started",
            AttemptStatus::Error => "error",
        }
    }

    /// Whether the attempt has ended (every status but queued, running and verifying).
    #[must_use]
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            AttemptStatus::Queued | AttemptStatus::Running | AttemptStatus::Verifying
        )
    }
}

/// How an attempt's agent (one run, or a whole auto session) ended, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AgentEnd {
    /// It succeeded.
    Succeeded,
    /// It ran and did not succeed.
    Failed,
    /// It was stopped (after an [`Action::Stop`]).
    Stopped,
    /// It could not be run.
    Error,
}

/// How an attempt's verification ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyEnd {
    /// The command exited 0.
    Passed,
    /// It exited non-zero, was killed, or could not be run.
    Failed,
    /// It was stopped (after an [`Action::Stop`]).
    Stopped,
}

/// What the driver is to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Isolate attempt `n` and start its agent.
    Start(usize),
    /// Run the verification of attempt `n` in its worktree.
    Verify(usize),
    /// Stop attempt `n` (its agent or its verification); repeated after a second interrupt,
    /// when it means: kill it at once.
    Stop(usize),
    /// Attempt `n` has ended and did not win: it never can (a winner is chosen only as an
    /// attempt ends), so its worktree and branch may go now. Given once per started attempt
    /// that is not the winner, before [`Action::Finish`].
    Discard(usize),
    /// Every attempt has ended (and every loser was discarded): write the record. Given
    /// once.
    Finish,
}

#[derive(Debug, Clone)]
struct Slot {
    status: AttemptStatus,
    verified: Option<bool>,
    /// A stop was asked for (the attempt's end is then a stop, whoever asked).
    stop_sent: bool,
}

/// The fan-out machine; see the module documentation.
#[derive(Debug, Clone)]
pub struct FanOut {
    slots: Vec<Slot>,
    jobs: usize,
    selection: Selection,
    verify: bool,
    next: usize,
    winner: Option<usize>,
    /// No attempt starts any more: a winner stopped the rest, or an interrupt.
    closed: bool,
    interrupted: bool,
    actions: VecDeque<Action>,
    finished: bool,
}

impl FanOut {
    /// A fan-out of `attempts` attempts, at most `jobs` at once, choosing by `selection`;
    /// `verify`: whether a verification command is given.
    ///
    /// # Errors
    /// [`FanOutError::NoAttempts`], [`FanOutError::NoJobs`].
    pub fn new(
        attempts: usize,
        jobs: usize,
        selection: Selection,
        verify: bool,
    ) -> Result<FanOut, FanOutError> {
        if attempts == 0 {
            return Err(FanOutError::NoAttempts);
        }
        if jobs == 0 {
            return Err(FanOutError::NoJobs);
        }
        Ok(FanOut {
            slots: vec![
                Slot {
                    status: AttemptStatus::Queued,
                    verified: None,
                    stop_sent: false,
                };
                attempts
            ],
            jobs,
            selection,
            verify,
            next: 0,
            winner: None,
            closed: false,
            interrupted: false,
            actions: VecDeque::new(),
            finished: false,
        })
    }

    /// The next thing to do, `None` while the driver must wait for an end or an interrupt.
    pub fn poll_action(&mut self) -> Option<Action> {
        if let Some(action) = self.actions.pop_front() {
            return Some(action);
        }
        if !self.closed && self.next < self.slots.len() && self.active() < self.jobs {
            let n = self.next;
            self.next += 1;
            self.slots[n].status = AttemptStatus::Running;
            return Some(Action::Start(n));
        }
        if !self.finished && self.slots.iter().all(|s| s.status.is_final()) {
            self.finished = true;
            return Some(Action::Finish);
        }
        None
    }

    /// Attempt `n`'s agent ended. An end for an attempt that is not running is ignored.
    pub fn handle_agent_end(&mut self, n: usize, end: AgentEnd) {
        if self.slots.get(n).map(|s| s.status) != Some(AttemptStatus::Running) {
            return;
        }
        let status = match end {
            AgentEnd::Error => AttemptStatus::Error,
            AgentEnd::Failed => AttemptStatus::Failed,
            AgentEnd::Stopped => self.stop_status(),
            // Once the fan-out is closed, a success that raced the stop is recorded as it is,
            // unverified: there is nothing left to win.
            AgentEnd::Succeeded if self.closed => AttemptStatus::Succeeded,
            AgentEnd::Succeeded if self.verify => {
                self.actions.push_back(Action::Verify(n));
                AttemptStatus::Verifying
            }
            AgentEnd::Succeeded => {
                self.won(n);
                AttemptStatus::Succeeded
            }
        };
        self.settle(n, status);
    }

    /// Attempt `n`'s verification ended. An end for an attempt that is not verifying is
    /// ignored.
    pub fn handle_verification(&mut self, n: usize, end: VerifyEnd) {
        let Some(slot) = self.slots.get(n) else {
            return;
        };
        if slot.status != AttemptStatus::Verifying {
            return;
        }
        let status = match end {
            VerifyEnd::Passed => {
                self.slots[n].verified = Some(true);
                self.won(n);
                AttemptStatus::Succeeded
            }
            VerifyEnd::Failed => {
                self.slots[n].verified = Some(false);
                AttemptStatus::Succeeded
            }
            VerifyEnd::Stopped => self.stop_status(),
        };
        self.settle(n, status);
    }

    /// Attempt `n`'s new status; an end that is not the winner's discards the attempt.
    fn settle(&mut self, n: usize, status: AttemptStatus) {
        self.slots[n].status = status;
        if status.is_final() && self.winner != Some(n) {
            self.actions.push_back(Action::Discard(n));
        }
    }

    /// The whole fan-out is interrupted: no attempt starts any more, and every running one
    /// is stopped. A second interrupt repeats the stops (the driver then kills at once).
    pub fn handle_interrupt(&mut self) {
        self.interrupted = true;
        self.close();
        for (n, slot) in self.slots.iter_mut().enumerate() {
            if matches!(
                slot.status,
                AttemptStatus::Running | AttemptStatus::Verifying
            ) {
                slot.stop_sent = true;
                self.actions.push_back(Action::Stop(n));
            }
        }
    }

    /// The winner, once there is one.
    #[must_use]
    pub fn winner(&self) -> Option<usize> {
        self.winner
    }

    /// Whether the fan-out was interrupted.
    #[must_use]
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// Attempt `n`'s status.
    #[must_use]
    pub fn status(&self, n: usize) -> Option<AttemptStatus> {
        self.slots.get(n).map(|s| s.status)
    }

    /// Attempt `n`'s verification result: `Some(true)` passed, `Some(false)` failed, `None`
    /// not run (or not to its end).
    #[must_use]
    pub fn verified(&self, n: usize) -> Option<bool> {
        self.slots.get(n).and_then(|s| s.verified)
    }

    /// Whether a stop was asked for attempt `n`.
    #[must_use]
    pub fn stop_sent(&self, n: usize) -> bool {
        self.slots.get(n).is_some_and(|s| s.stop_sent)
    }

    /// How many attempts there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Never: a fan-out has at least one attempt.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn active(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s.status, AttemptStatus::Running | AttemptStatus::Verifying))
            .count()
    }

    fn stop_status(&self) -> AttemptStatus {
        if self.interrupted {
            AttemptStatus::Interrupted
        } else {
            AttemptStatus::Stopped
        }
    }

    fn won(&mut self, n: usize) {
        if self.winner.is_some() {
            return;
        }
        self.winner = Some(n);
        if self.selection == Selection::FirstVerified {
            self.close();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                if i != n
                    && matches!(
                        slot.status,
                        AttemptStatus::Running | AttemptStatus::Verifying
                    )
                {
                    slot.stop_sent = true;
                    self.actions.push_back(Action::Stop(i));
                }
            }
        }
    }

    /// No attempt starts from now on; those still queued are recorded as never started.
    fn close(&mut self) {
        self.closed = true;
        for slot in &mut self.slots[self.next..] {
            slot.status = AttemptStatus::NotStarted;
        }
        self.next = self.slots.len();
    }
}

/// The fan-out record: kept in the store, printed by `agentrun show FANOUT`, and the final
/// object of `agentrun fanout --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FanOutRecord {
    /// The fan-out's id (also in each attempt's branch name).
    pub fanout_id: String,
    /// Every attempt, in the order given.
    pub attempts: Vec<AttemptRecord>,
    /// The winning attempt: a zero-based index into `attempts`.
    pub winner: Option<usize>,
}

impl FanOutRecord {
    /// A record of `attempts` under `fanout_id`.
    #[must_use]
    pub fn new(
        fanout_id: impl Into<String>,
        attempts: Vec<AttemptRecord>,
        winner: Option<usize>,
    ) -> FanOutRecord {
        FanOutRecord {
            fanout_id: fanout_id.into(),
            attempts,
            winner,
        }
    }
}

/// One attempt in the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The harness's name.
    pub harness: String,
    /// The model asked for.
    pub model: Option<String>,
    /// What the attempt came to.
    pub status: AttemptStatus,
    /// Why the agent failed, when its stream said.
    pub failure_kind: Option<FailureKind>,
    /// Whether its verification passed (`None`: not run to its end).
    pub verified: Option<bool>,
    /// Its verification, when one ran.
    pub verification: Option<VerificationRecord>,
    /// Its worktree (or private copy) while it exists; `None` once removed.
    pub worktree: Option<String>,
    /// Its branch while it exists; `None` once removed, or for a private copy.
    pub branch: Option<String>,
    /// What it changed against the base.
    pub changes: Option<Changes>,
    /// The harness's usage report.
    pub usage: Option<Usage>,
    /// How long the attempt ran (agent and verification).
    pub duration_ms: u64,
    /// The artifact URIs of its runs (the harness's stdout and stderr, or an auto session's
    /// turns).
    pub artifacts: Vec<String>,
    /// The harness session id.
    pub session_id: Option<String>,
}

impl AttemptRecord {
    /// An attempt of `harness` with `model` that has not run yet.
    #[must_use]
    pub fn new(harness: impl Into<String>, model: Option<String>) -> AttemptRecord {
        AttemptRecord {
            harness: harness.into(),
            model,
            status: AttemptStatus::Queued,
            failure_kind: None,
            verified: None,
            verification: None,
            worktree: None,
            branch: None,
            changes: None,
            usage: None,
            duration_ms: 0,
            artifacts: Vec::new(),
            session_id: None,
        }
    }
}

/// A verification in the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerificationRecord {
    /// Its shell-style exit code; `None` when it was stopped or could not run.
    pub exit_code: Option<i32>,
    /// The bounded preview of its output (what a model would see).
    pub preview: String,
    /// The artifact URIs of its output.
    pub artifacts: Vec<String>,
}

impl VerificationRecord {
    /// A verification that ended with `exit_code`.
    #[must_use]
    pub fn new(exit_code: Option<i32>, preview: String, artifacts: Vec<String>) -> Self {
        VerificationRecord {
            exit_code,
            preview,
            artifacts,
        }
    }
}

/// What an attempt changed: files touched, lines inserted and deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Changes {
    /// Files changed (binary ones included).
    pub files: u64,
    /// Lines inserted.
    pub insertions: u64,
    /// Lines deleted.
    pub deletions: u64,
}

impl Changes {
    /// Sums the output of `git diff --numstat`: `INS<TAB>DEL<TAB>PATH` per file, `-` for
    /// both counts of a binary file (counted as a file, no lines). A line of another shape
    /// is an error: counts from a misread diff would be wrong data.
    ///
    /// # Errors
    /// The first line that is not a numstat line.
    pub fn from_numstat(text: &str) -> Result<Changes, String> {
        let mut changes = Changes::default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let mut fields = line.splitn(3, '\t');
            let (Some(ins), Some(del), Some(_path)) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(format!("not a numstat line: {line:?}"));
            };
            let count = |field: &str| -> Result<u64, String> {
                if field == "-" {
                    return Ok(0);
                }
                field
                    .parse::<u64>()
                    .map_err(|_| format!("not a numstat line: {line:?}"))
            };
            changes.insertions = changes.insertions.saturating_add(count(ins)?);
            changes.deletions = changes.deletions.saturating_add(count(del)?);
            changes.files += 1;
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests;
