//! Auto mode: an agent looped through Clarify → Plan → (Execute → Evaluate [→ Verify]
//! [→ Adjust])* until its objective is verifiably done or the turns run out.
//!
//! [`AutoMode`] is the whole control flow as a pure, deterministic machine. It never runs a
//! turn, a command or a file operation: it asks for them through [`Action`]s and is told
//! what happened through `handle_*` events. A driver supplies the I/O: agentrun-process's
//! `auto_mode::AutoModeChannel`, generic over its runtime and re-exported by agentrun-smol
//! and agentrun-tokio.
//!
//! The machine is the one owner of the harness session id: it records the id a finished turn
//! reports (when plausible), names it in every [`Action::RunTurn`] and in
//! [`AutoMode::harness_session_to_resume`], and persists it; a driver resumes that id and
//! keeps no copy of its own.
//!
//! # Phases
//!
//! | phase    | turn          | exit 0                                     | non-zero exit                               |
//! |----------|---------------|--------------------------------------------|---------------------------------------------|
//! | Clarify  | 1 (required)  | Plan                                       | status error, abort, exit with its code     |
//! | Plan     | 2 (required)  | Execute, turn 3                            | status error, abort, exit with its code     |
//! | Execute  | 3..=max       | Evaluate                                   | warning logged, Evaluate                    |
//! | Evaluate | same turn     | by verdict (below)                         | status error, exit with its code, no abort  |
//! | Verify   | same turn     | passed: status completed, exit 0           | failure kept for the next Evaluate; next turn |
//! | Adjust   | same turn (required) | next turn                           | status error, abort, exit with its code     |
//!
//! Evaluate's verdict: `COMPLETE` → Verify when a verification is configured, else status
//! completed (marked unverified); `NEEDS ADJUSTMENT` → Adjust when a turn remains; anything
//! else (`IN PROGRESS`, no verdict, an ambiguous answer) → next turn. *Next turn* after the
//! last turn (`max_turns`) is status stopped, exit 0. A turn with no recorded exit code counts
//! as a failure with code 1.
//!
//! # Retries
//!
//! A turn of any harness phase that ends with a retryable failure kind (a rate limit, an
//! overload) is not judged by the table above while it has retries left
//! ([`Settings::max_retries`]): the machine records it, persists the wait the
//! [`crate::retry`] machine chose (the harness's own delay or reset time, else the doubling
//! backoff with jitter, at most 15 minutes), asks for [`Action::WaitUntil`] at the next prompt
//! request, and then runs the same phase with the same prompt again, resuming the same harness
//! session. When the retries are spent, or for any other kind, the table applies unchanged.
//!
//! # Driving order
//!
//! 1. After [`AutoMode::new`] or [`AutoMode::resume`], drain [`AutoMode::poll_action`].
//! 2. To get the next prompt, call [`AutoMode::handle_listen`], then drain `poll_action`:
//!    * [`Action::CollectAppended`]: read the pending files of `append/` (bounded), call
//!      [`AutoMode::handle_appended`] (with an empty list when there are none);
//!    * [`Action::ArchiveAppended`]: move those files from `append/` to `appended/`;
//!    * [`Action::RunVerification`]: run it, call [`AutoMode::handle_verification`];
//!    * [`Action::RunTurn`]: run the turn, then call [`AutoMode::handle_turn_finished`];
//!    * [`Action::WaitUntil`]: wait until that time, then call [`AutoMode::handle_wait_over`];
//!    * [`Action::PersistState`]: atomically replace `state.json` with [`AutoMode::state`];
//!    * [`Action::Log`]: append the line to the log.
//!
//!    Actions must be carried out in the order they are polled: the state naming an appended
//!    instruction is persisted before the file is archived, and archived before the turn
//!    that embeds it runs, so an instruction lands in exactly one turn even across a crash.
//! 3. After each `handle_*`, drain `poll_action` again.
//! 4. When [`AutoMode::is_closed`], read [`AutoMode::abort`] first (a required phase failed:
//!    treat the run as crashed), then [`AutoMode::exit_code`].
//!
//! Calling a `handle_*` method the machine is not waiting for is an
//! [`AutoModeError::OutOfOrder`], never a panic.

mod prompt;
pub mod sanitize;
pub mod state;
pub mod verdict;

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::budget::{Budget, PriceTable, Spend};
use crate::harness::UsageLedger;
use crate::retry::{GiveUpReason, Retry, RetryEvent};
use crate::turn::TurnOutput;
use prompt::PromptContext;
pub use sanitize::sanitize_instruction;
pub use state::{
    AutoModeState, Instruction, SessionStatus, Settings, TurnRecord, VerificationRecord,
};
use state::{MAX_CARRIED_TEXT_BYTES, MAX_TURN_RECORDS, MAX_VERIFICATION_RECORDS, STATE_FORMAT};
pub use verdict::{Verdict, parse_verdict};

/// The default last turn.
pub const DEFAULT_MAX_TURNS: u32 = 10;

/// The fewest turns that leave room for one Execute turn.
pub const MIN_MAX_TURNS: u32 = 3;

/// The longest objective accepted.
pub const MAX_OBJECTIVE_BYTES: usize = 64 * 1024;

/// The most appended instructions embedded in one Execute prompt; later ones wait for the
/// next Execute turn.
pub const MAX_INSTRUCTIONS_PER_TURN: usize = 16;

/// The longest harness session id accepted from a turn (longer ones are ignored).
pub const MAX_HARNESS_SESSION_ID_BYTES: usize = 256;

/// The default environment variable naming the verdict file.
pub const DEFAULT_RESULT_SINK_VAR: &str = "AGENTRUN_RESULT_SINK";

/// A phase of auto mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Phase {
    /// Restate the objective and the completion criteria (turn 1, required).
    Clarify,
    /// Write the plan (turn 2, required).
    Plan,
    /// Do the work.
    Execute,
    /// Judge the work and give a verdict.
    Evaluate,
    /// Run the verification command on a claimed completion (not a harness turn).
    Verify,
    /// Revise the plan (required).
    Adjust,
}

impl Phase {
    /// A non-zero exit of a required phase aborts the session.
    #[must_use]
    pub fn is_required(self) -> bool {
        matches!(self, Phase::Clarify | Phase::Plan | Phase::Adjust)
    }

    /// The lowercase name, as in `state.json`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Clarify => "clarify",
            Phase::Plan => "plan",
            Phase::Execute => "execute",
            Phase::Evaluate => "evaluate",
            Phase::Verify => "verify",
            Phase::Adjust => "adjust",
        }
    }
}

/// One pending file of `append/`, as the driver read it (at most
/// [`sanitize::MAX_INPUT_BYTES`] of it, lossily decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendedFile {
    /// The file name in `append/`.
    pub name: String,
    /// Its text, unsanitized.
    pub text: String,
}

/// What a verification command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerificationResult {
    /// Its exit code (`None`: killed by a signal, or it could not be started).
    pub exit_code: Option<i32>,
    /// A preview of its output with the read hint for the rest (cut to a bound here).
    pub output: String,
    /// The `artifact://` URIs of its retained output.
    pub artifacts: Vec<String>,
}

/// What the driver must do next; see the driving order in the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Append this line to the session log.
    Log(String),
    /// Atomically replace the persisted state with [`AutoMode::state`].
    PersistState,
    /// Read up to `max_files` pending files of `append/` (in name order) and call
    /// [`AutoMode::handle_appended`].
    CollectAppended {
        /// The most files to read.
        max_files: usize,
    },
    /// Move these files from `append/` to `appended/`.
    ArchiveAppended(Vec<String>),
    /// Run one harness turn, then call [`AutoMode::handle_turn_finished`].
    RunTurn {
        /// The phase it runs.
        phase: Phase,
        /// The turn number.
        turn: u32,
        /// The prompt.
        prompt: String,
        /// The harness session to resume, when one is known and the harness resumes
        /// sessions ([`AutoMode::harness_session_to_resume`]).
        resume: Option<String>,
    },
    /// Run the verification command (`sh -c COMMAND` in the workspace), then call
    /// [`AutoMode::handle_verification`].
    RunVerification {
        /// The command.
        command: String,
    },
    /// Wait until this time (a rate limit or an overload passing), then call
    /// [`AutoMode::handle_wait_over`]. Persisted before it is asked for: a session
    /// interrupted during the wait waits for what remains of it when continued.
    WaitUntil(SystemTime),
}

/// Errors of auto mode's configuration and driving.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AutoModeError {
    /// `max_turns` leaves no room for an Execute turn.
    #[error(
        "the turn limit {0} is too low: auto mode needs at least 3 turns (clarify, plan, execute)"
    )]
    TooFewTurns(u32),
    /// The objective is empty.
    #[error("the objective is empty: say what the agent should achieve")]
    EmptyObjective,
    /// The objective is too long.
    #[error("the objective is {0} bytes; at most 65536 are accepted (put details in a file)")]
    ObjectiveTooLong(usize),
    /// The session to continue has already finished.
    #[error("the session has already finished (status {0}); there is nothing to continue")]
    Finished(&'static str),
    /// The persisted state has another format.
    #[error("the session state has format {0}, this agentrun reads format 1")]
    Format(u32),
    /// The persisted state contradicts itself.
    #[error("the session state is inconsistent: {0}")]
    Inconsistent(String),
    /// A `handle_*` call the machine was not waiting for.
    #[error("auto mode got {event} while waiting for {waiting}")]
    OutOfOrder {
        /// The call made.
        event: &'static str,
        /// What the machine waits for.
        waiting: &'static str,
    },
    /// A cost or token limit is not usable.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    Listen,
    Appended,
    Turn,
    Verification,
    RetryWait,
    Closed,
}

impl Waiting {
    fn as_str(self) -> &'static str {
        match self {
            Waiting::Listen => "a prompt request",
            Waiting::Appended => "the appended instructions",
            Waiting::Turn => "a turn to finish",
            Waiting::Verification => "a verification to finish",
            Waiting::RetryWait => "a retry wait to end",
            Waiting::Closed => "nothing (the session is finished)",
        }
    }
}

/// The auto-mode machine. See the module documentation for the phases and driving order.
#[derive(Debug)]
pub struct AutoMode {
    state: AutoModeState,
    actions: VecDeque<Action>,
    waiting: Waiting,
    /// The retry backoff's jitter source ([`AutoMode::jitter_seed`]).
    seed: u64,
    /// Prices the turns of a harness that reports tokens but no cost.
    prices: PriceTable,
}

impl AutoMode {
    /// Starts a new session at Clarify, turn 1.
    pub fn new(
        session_id: impl Into<String>,
        settings: Settings,
        now: SystemTime,
    ) -> Result<AutoMode, AutoModeError> {
        validate_settings(&settings)?;
        let now_ms = unix_ms(now);
        let state = AutoModeState {
            format: STATE_FORMAT,
            session_id: session_id.into(),
            settings,
            status: SessionStatus::Running,
            phase: Phase::Clarify,
            turn: 1,
            exit_code: 0,
            abort: None,
            verified: None,
            harness_session_id: None,
            plan: None,
            last_evaluation: None,
            last_verdict: None,
            failed_verification: None,
            verifications: Vec::new(),
            turns: Vec::new(),
            turns_dropped: 0,
            harness_turns: 0,
            usage: UsageLedger::default(),
            budget: Budget::default(),
            spend: Spend::default(),
            budget_exceeded: None,
            instructions: Vec::new(),
            instructions_delivered: 0,
            retries: 0,
            retry_wait: None,
            created_unix_ms: now_ms,
            updated_unix_ms: now_ms,
        };
        let mut machine = AutoMode {
            state,
            actions: VecDeque::new(),
            waiting: Waiting::Listen,
            seed: 0,
            prices: PriceTable::builtin(),
        };
        let s = &machine.state.settings;
        let msg = format!(
            "session {} started: harness {}, max turns {}, verification {}",
            machine.state.session_id,
            s.harness,
            s.max_turns,
            s.verify
                .as_deref()
                .map_or("none".to_owned(), |v| format!("`{v}`")),
        );
        machine.log(now, &msg);
        machine.actions.push_back(Action::PersistState);
        Ok(machine)
    }

    /// Continues a persisted session from its last transition. The phase that was running
    /// when the session stopped runs again from its start.
    pub fn resume(state: AutoModeState, now: SystemTime) -> Result<AutoMode, AutoModeError> {
        if state.format != STATE_FORMAT {
            return Err(AutoModeError::Format(state.format));
        }
        if state.status != SessionStatus::Running {
            return Err(AutoModeError::Finished(state.status.as_str()));
        }
        validate_settings(&state.settings)?;
        let max = state.settings.max_turns;
        let turn_ok = match state.phase {
            Phase::Clarify => state.turn == 1,
            Phase::Plan => state.turn == 2,
            _ => (MIN_MAX_TURNS..=max).contains(&state.turn),
        };
        if !turn_ok {
            return Err(AutoModeError::Inconsistent(format!(
                "phase {} at turn {} of {max}",
                state.phase.as_str(),
                state.turn
            )));
        }
        if state.phase == Phase::Verify && state.settings.verify.is_none() {
            return Err(AutoModeError::Inconsistent(
                "phase verify without a verification command".to_owned(),
            ));
        }
        if state.retry_wait.is_some() && state.phase == Phase::Verify {
            return Err(AutoModeError::Inconsistent(
                "a retry wait in phase verify, which runs no harness turn".to_owned(),
            ));
        }
        let mut machine = AutoMode {
            state,
            actions: VecDeque::new(),
            waiting: Waiting::Listen,
            seed: 0,
            prices: PriceTable::builtin(),
        };
        machine.log(now, "session continued");
        machine.touch(now);
        machine.actions.push_back(Action::PersistState);
        Ok(machine)
    }

    /// The retry backoff's jitter source: a random value from the driver (the same seed
    /// gives the same waits). Defaults to 0.
    #[must_use]
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the session's limits (kept in the state, so a continued session keeps them unless
    /// set again) and the prices of turns whose harness reports no cost. A session whose spend
    /// already reached the limits starts no further turn.
    ///
    /// # Errors
    /// [`AutoModeError::Budget`] for a limit that is not positive.
    pub fn set_budget(&mut self, budget: Budget, prices: PriceTable) -> Result<(), AutoModeError> {
        budget.validate()?;
        self.state.budget = budget;
        self.prices = prices;
        Ok(())
    }

    /// Sets the prices only (for a continued session that keeps its limits).
    pub fn set_prices(&mut self, prices: PriceTable) {
        self.prices = prices;
    }

    /// The next action for the driver, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The loop asks for the next prompt. Queues what is needed to produce it; does nothing
    /// once the session is closed.
    pub fn handle_listen(&mut self, now: SystemTime) -> Result<(), AutoModeError> {
        match self.waiting {
            Waiting::Closed => return Ok(()),
            Waiting::Listen => {}
            other => return Err(out_of_order("a prompt request", other)),
        }
        if let Some(wait) = self.state.retry_wait {
            // Logged when the wait starts, so a continued session says so too.
            self.log(now, &wait.line());
            self.waiting = Waiting::RetryWait;
            self.actions.push_back(Action::WaitUntil(wait.until()));
            return Ok(());
        }
        match self.state.phase {
            Phase::Execute => {
                self.waiting = Waiting::Appended;
                self.actions.push_back(Action::CollectAppended {
                    max_files: MAX_INSTRUCTIONS_PER_TURN,
                });
            }
            Phase::Verify => self.start_verification(now),
            _ => self.start_turn(now),
        }
        Ok(())
    }

    /// The pending appended instructions were read (in name order). They are sanitized and
    /// embedded in the Execute prompt; the state naming them is persisted, they are archived,
    /// and the turn is run, in that order.
    pub fn handle_appended(
        &mut self,
        now: SystemTime,
        files: Vec<AppendedFile>,
    ) -> Result<(), AutoModeError> {
        if self.waiting != Waiting::Appended {
            return Err(out_of_order("appended instructions", self.waiting));
        }
        let mut archived = Vec::new();
        for file in files.into_iter().take(MAX_INSTRUCTIONS_PER_TURN) {
            let text = sanitize_instruction(&file.text);
            let msg = format!(
                "appended instruction `{}` embedded ({} bytes after sanitizing)",
                file.name,
                text.len()
            );
            self.log(now, &msg);
            // Already embedded before a crash (state persisted, file not yet archived):
            // replace rather than deliver twice.
            match self
                .state
                .instructions
                .iter_mut()
                .find(|i| i.name == file.name)
            {
                Some(existing) => existing.text = text,
                None => {
                    self.state.instructions_delivered += 1;
                    self.state.instructions.push(Instruction {
                        name: file.name.clone(),
                        text,
                    });
                }
            }
            archived.push(file.name);
        }
        if !archived.is_empty() {
            self.touch(now);
            self.actions.push_back(Action::PersistState);
            self.actions.push_back(Action::ArchiveAppended(archived));
        }
        self.start_turn(now);
        Ok(())
    }

    /// The turn asked for by the last [`Action::RunTurn`] finished (it ran; its exit code
    /// may be non-zero). Advances the machine.
    pub fn handle_turn_finished(
        &mut self,
        now: SystemTime,
        output: &TurnOutput,
    ) -> Result<(), AutoModeError> {
        if self.waiting != Waiting::Turn {
            return Err(out_of_order("a finished turn", self.waiting));
        }
        let phase = self.state.phase;
        let code = output.exit_code();
        let failed = code != Some(0);
        let harness_session = output
            .harness_session_id()
            .filter(|id| !id.is_empty() && id.len() <= MAX_HARNESS_SESSION_ID_BYTES);
        if let Some(id) = harness_session {
            self.state.harness_session_id = Some(id.to_owned());
        }
        // Later turns resume the harness session, whose reports may be running totals: the
        // ledger keeps each turn's own usage and a total that is the real spend.
        let usage = output
            .usage()
            .map(|reported| self.state.usage.record(harness_session, reported));
        if let Some(own) = &usage {
            let models = output.models().iter().map(String::as_str);
            let spent = Spend::of_run(own, models, &self.prices);
            self.state.spend.add(&spent);
        }
        self.state.harness_turns += 1;
        let verdict = (phase == Phase::Evaluate && !failed).then(|| evaluation_verdict(output));
        let verdict = verdict.flatten();
        self.push_turn_record(TurnRecord {
            turn: self.state.turn,
            phase,
            exit_code: code,
            verdict,
            artifacts: output.artifacts().to_vec(),
            models: output.models().to_vec(),
            usage: usage.clone(),
            failure_kind: output.failure_kind(),
            retry: self.state.retries,
        });
        let mut msg = format!(
            "{} turn exited with {} (answer {} chars",
            phase.as_str(),
            code.map_or_else(|| "no exit code".to_owned(), |c| format!("code {c}")),
            output.text().chars().count()
        );
        if let Some(usage) = &usage {
            msg.push_str(&format!("; {}", usage.line()));
        }
        msg.push(')');
        self.log(now, &msg);
        self.waiting = Waiting::Listen;

        // A rate limit or an overload: the same phase runs again after a wait, and nothing
        // else changes; otherwise the failure stands and the phase's rules apply.
        if (failed || output.failure_kind().is_some()) && self.schedule_retry(now, output) {
            return Ok(());
        }
        self.state.retries = 0;

        if failed && phase.is_required() {
            let code = failure_code(code);
            let reason = format!(
                "the required {} turn (turn {}) exited with code {code}",
                phase.as_str(),
                self.state.turn
            );
            self.state.abort = Some(reason.clone());
            self.finish(now, SessionStatus::Error, code, &reason);
            return Ok(());
        }
        match phase {
            Phase::Clarify => self.go(Phase::Plan, 2),
            Phase::Plan => {
                self.state.plan = Some(bounded(output.text()));
                self.go(Phase::Execute, MIN_MAX_TURNS);
            }
            Phase::Adjust => {
                self.state.plan = Some(bounded(output.text()));
                self.next_turn(now);
            }
            Phase::Execute => {
                if failed {
                    self.log(now, "warning: the execute turn failed; evaluating anyway");
                }
                self.state.instructions.clear();
                self.go(Phase::Evaluate, self.state.turn);
            }
            Phase::Evaluate => {
                self.state.failed_verification = None;
                if failed {
                    let code = failure_code(code);
                    let msg = format!("the evaluate turn exited with code {code}");
                    self.finish(now, SessionStatus::Error, code, &msg);
                    return Ok(());
                }
                self.state.last_verdict = verdict;
                self.state.last_evaluation = Some(bounded(output.text()));
                let msg = format!(
                    "verdict: {}",
                    verdict.map_or("none (no single verdict given)", Verdict::as_str)
                );
                self.log(now, &msg);
                match verdict {
                    Some(Verdict::Complete) => {
                        if self.state.settings.verify.is_some() {
                            self.go(Phase::Verify, self.state.turn);
                            self.touch(now);
                            self.actions.push_back(Action::PersistState);
                            self.start_verification(now);
                            return Ok(());
                        }
                        self.state.verified = Some(false);
                        self.finish(
                            now,
                            SessionStatus::Completed,
                            0,
                            "objective claimed complete (unverified: no verification configured)",
                        );
                        return Ok(());
                    }
                    Some(Verdict::NeedsAdjustment)
                        if self.state.turn < self.state.settings.max_turns =>
                    {
                        self.go(Phase::Adjust, self.state.turn);
                    }
                    _ => self.next_turn(now),
                }
            }
            // Refused above: a turn is only asked for in a harness phase.
            Phase::Verify => {}
        }
        if self.waiting != Waiting::Closed {
            self.touch(now);
            self.actions.push_back(Action::PersistState);
        }
        Ok(())
    }

    /// The wait asked for by the last [`Action::WaitUntil`] ended (the driver woke at `now`):
    /// the failed turn runs again with the same phase prompt, resuming the same harness
    /// session; a wake before the wait's end asks for the rest of it.
    pub fn handle_wait_over(&mut self, now: SystemTime) -> Result<(), AutoModeError> {
        if self.waiting != Waiting::RetryWait {
            return Err(out_of_order("the end of a retry wait", self.waiting));
        }
        let policy = self.state.settings.retry_policy();
        let mut retry = Retry::resume(policy, self.seed, self.state.retries, self.state.retry_wait);
        // The pending wait, replayed by `resume`.
        let _ = retry.poll_event();
        retry
            .handle_timeout(now)
            .map_err(|e| AutoModeError::Inconsistent(e.to_string()))?;
        match retry.poll_event() {
            Some(RetryEvent::Wait(wait)) => {
                self.state.retry_wait = Some(wait);
                self.actions.push_back(Action::WaitUntil(wait.until()));
            }
            Some(RetryEvent::Retry { retry }) => {
                self.state.retries = retry;
                self.state.retry_wait = None;
                let msg = format!(
                    "retry {retry}/{} of the {} turn",
                    policy.max_retries,
                    self.state.phase.as_str()
                );
                self.log(now, &msg);
                self.touch(now);
                self.actions.push_back(Action::PersistState);
                self.start_turn(now);
            }
            other => {
                return Err(AutoModeError::Inconsistent(format!(
                    "the retry wait ended with {other:?}"
                )));
            }
        }
        Ok(())
    }

    /// The verification asked for by the last [`Action::RunVerification`] finished.
    pub fn handle_verification(
        &mut self,
        now: SystemTime,
        result: VerificationResult,
    ) -> Result<(), AutoModeError> {
        if self.waiting != Waiting::Verification {
            return Err(out_of_order("a finished verification", self.waiting));
        }
        self.waiting = Waiting::Listen;
        let record = VerificationRecord {
            turn: self.state.turn,
            command: self.state.settings.verify.clone().unwrap_or_default(),
            exit_code: result.exit_code,
            output: bounded(&result.output),
            artifacts: result.artifacts,
        };
        let passed = record.passed();
        self.state.verifications.push(record.clone());
        if self.state.verifications.len() > MAX_VERIFICATION_RECORDS {
            self.state.verifications.remove(0);
        }
        if passed {
            self.state.verified = Some(true);
            self.finish(
                now,
                SessionStatus::Completed,
                0,
                "objective achieved: completion claimed and verified",
            );
            return Ok(());
        }
        let msg = format!(
            "verification failed with {}; the claim does not count",
            record
                .exit_code
                .map_or_else(|| "no exit code".to_owned(), |c| format!("code {c}"))
        );
        self.log(now, &msg);
        self.state.failed_verification = Some(record);
        self.next_turn(now);
        if self.waiting != Waiting::Closed {
            self.touch(now);
            self.actions.push_back(Action::PersistState);
        }
        Ok(())
    }

    /// The state to persist and to inspect.
    #[must_use]
    pub fn state(&self) -> &AutoModeState {
        &self.state
    }

    /// Whether the session has finished (completed, stopped or error).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.waiting == Waiting::Closed
    }

    /// The session's status.
    #[must_use]
    pub fn status(&self) -> SessionStatus {
        self.state.status
    }

    /// The exit code for the command line: 0 when completed or stopped, else the failing
    /// phase's code. Read [`AutoMode::abort`] first.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        self.state.exit_code
    }

    /// `Some(reason)` exactly when a required phase (Clarify, Plan, Adjust) exited non-zero.
    #[must_use]
    pub fn abort(&self) -> Option<&str> {
        self.state.abort.as_deref()
    }

    /// The harness session the next turn resumes: the last one a turn reported, unless the
    /// harness does not resume sessions (then the plan is embedded in the prompts instead).
    #[must_use]
    pub fn harness_session_to_resume(&self) -> Option<&str> {
        if self.state.settings.harness_resumes {
            self.state.harness_session_id.as_deref()
        } else {
            None
        }
    }

    /// Decides whether the failed turn `output` runs again; when it does, the wait is in the
    /// state (persisted) and the next prompt request asks for it.
    fn schedule_retry(&mut self, now: SystemTime, output: &TurnOutput) -> bool {
        let policy = self.state.settings.retry_policy();
        let mut retry = Retry::resume(policy, self.seed, self.state.retries, None);
        if retry
            .handle_failure(now, output.failure_kind(), output.retry_after())
            .is_err()
        {
            return false;
        }
        match retry.poll_event() {
            Some(RetryEvent::Wait(wait)) => {
                self.state.retry_wait = Some(wait);
                self.touch(now);
                self.actions.push_back(Action::PersistState);
                true
            }
            Some(RetryEvent::GiveUp {
                kind: Some(kind),
                reason: GiveUpReason::RetriesSpent,
                retries,
            }) => {
                let msg = format!(
                    "{kind} again; giving up after {retries} {}",
                    if retries == 1 { "retry" } else { "retries" }
                );
                self.log(now, &msg);
                false
            }
            _ => false,
        }
    }

    fn start_turn(&mut self, now: SystemTime) {
        // The turn that reached a limit was the last: no turn starts once the budget is spent
        // (also after a restart, from the persisted spend).
        if let Some(exceeded) = self.state.budget.exceeded(&self.state.spend) {
            self.state.budget_exceeded = Some(exceeded);
            let why = format!("{}; no further turn started", exceeded.diagnostic());
            self.finish(now, SessionStatus::Budget, 0, &why);
            return;
        }
        let phase = self.state.phase;
        let Some(prompt) = self.render(phase) else {
            return self.start_verification(now);
        };
        let msg = format!("{} turn started", phase.as_str());
        self.log(now, &msg);
        self.waiting = Waiting::Turn;
        self.actions.push_back(Action::RunTurn {
            phase,
            turn: self.state.turn,
            prompt,
            resume: self.harness_session_to_resume().map(str::to_owned),
        });
    }

    fn start_verification(&mut self, now: SystemTime) {
        let command = self.state.settings.verify.clone().unwrap_or_default();
        let msg = format!("verifying the completion claim: `{command}`");
        self.log(now, &msg);
        self.waiting = Waiting::Verification;
        self.actions.push_back(Action::RunVerification { command });
    }

    /// The prompt of a harness phase; `None` for Verify, which is a command, not a turn.
    fn render(&self, phase: Phase) -> Option<String> {
        let s = &self.state;
        // A harness that resumed its session still has the plan in context.
        let resumed = self.harness_session_to_resume().is_some();
        let ctx = PromptContext {
            objective: &s.settings.objective,
            turn: s.turn,
            max_turns: s.settings.max_turns,
            plan: if resumed { None } else { s.plan.as_deref() },
            result_sink_var: &s.settings.result_sink_var,
        };
        Some(match phase {
            Phase::Clarify => prompt::clarify(&ctx),
            Phase::Plan => prompt::plan(&ctx),
            Phase::Execute => prompt::execute(&ctx, &s.instructions),
            Phase::Evaluate => prompt::evaluate(&ctx, s.failed_verification.as_ref()),
            Phase::Adjust => prompt::adjust(&ctx, s.last_evaluation.as_deref().unwrap_or("")),
            Phase::Verify => return None,
        })
    }

    fn go(&mut self, phase: Phase, turn: u32) {
        self.state.phase = phase;
        self.state.turn = turn;
    }

    fn next_turn(&mut self, now: SystemTime) {
        if self.state.turn < self.state.settings.max_turns {
            let next = self.state.turn + 1;
            self.go(Phase::Execute, next);
        } else {
            let msg = format!(
                "reached max turns ({}) without a verified completion",
                self.state.settings.max_turns
            );
            self.finish(now, SessionStatus::Stopped, 0, &msg);
        }
    }

    fn finish(&mut self, now: SystemTime, status: SessionStatus, exit_code: i32, why: &str) {
        self.state.status = status;
        self.state.exit_code = exit_code;
        self.waiting = Waiting::Closed;
        let msg = format!("session {}: {why}", status.as_str());
        self.log(now, &msg);
        self.touch(now);
        self.actions.push_back(Action::PersistState);
    }

    fn push_turn_record(&mut self, record: TurnRecord) {
        self.state.turns.push(record);
        if self.state.turns.len() > MAX_TURN_RECORDS {
            self.state.turns.remove(0);
            self.state.turns_dropped += 1;
        }
    }

    fn touch(&mut self, now: SystemTime) {
        self.state.updated_unix_ms = unix_ms(now);
    }

    fn log(&mut self, now: SystemTime, msg: &str) {
        let line = format!(
            "{} turn {} {}: {msg}",
            crate::time::rfc3339(now),
            self.state.turn,
            self.state.phase.as_str()
        );
        self.actions.push_back(Action::Log(line));
    }
}

fn out_of_order(event: &'static str, waiting: Waiting) -> AutoModeError {
    AutoModeError::OutOfOrder {
        event,
        waiting: waiting.as_str(),
    }
}

fn validate_settings(settings: &Settings) -> Result<(), AutoModeError> {
    if settings.max_turns < MIN_MAX_TURNS {
        return Err(AutoModeError::TooFewTurns(settings.max_turns));
    }
    if settings.objective.trim().is_empty() {
        return Err(AutoModeError::EmptyObjective);
    }
    if settings.objective.len() > MAX_OBJECTIVE_BYTES {
        return Err(AutoModeError::ObjectiveTooLong(settings.objective.len()));
    }
    Ok(())
}

/// The verdict of an Evaluate turn: from the clean result when the agent wrote one, else from
/// its final message.
fn evaluation_verdict(output: &TurnOutput) -> Option<Verdict> {
    match output.result() {
        Some(result) if !result.trim().is_empty() => parse_verdict(result),
        _ => parse_verdict(output.text()),
    }
}

/// A failed turn's exit code for the command line: never 0.
fn failure_code(code: Option<i32>) -> i32 {
    match code {
        Some(c) if c != 0 => c,
        _ => 1,
    }
}

/// `text` cut to [`MAX_CARRIED_TEXT_BYTES`] on a character boundary, keeping the end (where a
/// plan's last steps and a command's final errors are), with a marker when cut.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_CARRIED_TEXT_BYTES {
        return text.to_owned();
    }
    let mut start = text.len() - MAX_CARRIED_TEXT_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[… {start} earlier bytes cut]\n{}", &text[start..])
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_the_tail_on_a_char_boundary() {
        let s = format!("{}end", "é".repeat(MAX_CARRIED_TEXT_BYTES));
        let b = bounded(&s);
        assert!(b.ends_with("end"));
        assert!(b.starts_with("[… "));
        assert!(b.len() < MAX_CARRIED_TEXT_BYTES + 40);
    }
}
