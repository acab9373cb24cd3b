//! Auto sessions as library calls: [`AutoSession::create`] a session from
//! [`AutoSessionOptions`] (or [`AutoSession::resume`] one from its session directory),
//! [`AutoSession::run`] it to its end with a progress callback, and read the typed
//! [`AutoOutcome`]: status, exit code, turns, the summary line.
//!
//! A session is the core's `AutoMode` machine over a session directory
//! ([`crate::auto_mode::AutoModeChannel`]) and one harness turn per prompt
//! ([`crate::auto_mode::AutoModeRunner`]), driven by `agentrun_core::turn::run_session_loop`.
//! The settings (objective, harness, model, effort, harness arguments, verification, turn
//! limit, workspace) are held by the machine and persisted in `state.json`; the turns are
//! launched from one set of options derived from them once, and the harness session id is the
//! machine's alone.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use agentrun_core::auto_mode::{
    AutoMode, AutoModeError, AutoModeState, DEFAULT_MAX_TURNS, DEFAULT_RESULT_SINK_VAR,
    SessionStatus, Settings,
};
use agentrun_core::harness::{Harness, LaunchError, UnknownHarness};
use agentrun_core::retry::RetryPolicy;
use agentrun_core::turn::{ChannelError, LoopError, TurnError, run_session_loop};
use agentrun_fs::auto_session::{SessionDir, SessionError, new_session_id};

use crate::agent::AgentOptions;
use crate::auto_mode::{
    AutoModeChannel, AutoModeRunner, HarnessLaunch, ProgressSink, StopRequests,
};
use crate::driver::{Runner, Runtime};
use crate::exit;
use agentrun_core::budget::{Budget, PriceTable};

/// What a new auto session is started with. Everything here is persisted with the session,
/// so a resumed session runs the same way.
#[derive(Debug, Clone)]
#[must_use]
pub struct AutoSessionOptions {
    harness: Harness,
    objective: String,
    model: Option<String>,
    effort: Option<String>,
    harness_args: Vec<String>,
    verify: Option<String>,
    max_turns: u32,
    workspace: Option<PathBuf>,
    session_dir: Option<PathBuf>,
    retry: RetryPolicy,
    budget: Budget,
    prices: Option<PriceTable>,
}

impl AutoSessionOptions {
    /// A session driving `harness` towards `objective`, with the default turn limit
    /// ([`DEFAULT_MAX_TURNS`]), no verification, in the current directory.
    pub fn new(harness: Harness, objective: impl Into<String>) -> Self {
        AutoSessionOptions {
            harness,
            objective: objective.into(),
            model: None,
            effort: None,
            harness_args: Vec::new(),
            verify: None,
            max_turns: DEFAULT_MAX_TURNS,
            workspace: None,
            session_dir: None,
            retry: RetryPolicy::default(),
            budget: Budget::default(),
            prices: None,
        }
    }

    /// The most retries of one turn that hit a rate limit or an overload (default
    /// [`DEFAULT_AUTO_MAX_RETRIES`](agentrun_core::retry::DEFAULT_AUTO_MAX_RETRIES); `0`:
    /// the failure stands at once).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.retry.max_retries = retries;
        self
    }

    /// The first wait before a retry when the harness does not say how long (default
    /// [`DEFAULT_RETRY_BACKOFF`](agentrun_core::retry::DEFAULT_RETRY_BACKOFF)); doubled for
    /// each further retry, with jitter, each wait at most
    /// [`MAX_RETRY_WAIT`](agentrun_core::retry::MAX_RETRY_WAIT).
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry.backoff = backoff;
        self
    }

    /// Caps the whole session's cost in US dollars: once the turns spent this much (reported
    /// by the harness, or estimated from the price table), no further turn starts and the
    /// session ends with status `budget`.
    pub fn max_cost_usd(mut self, usd: f64) -> Self {
        self.budget.max_cost_usd = Some(usd);
        self
    }

    /// Caps the whole session's tokens (input plus output), like
    /// [`AutoSessionOptions::max_cost_usd`].
    pub fn max_tokens(mut self, tokens: u64) -> Self {
        self.budget.max_tokens = Some(tokens);
        self
    }

    /// The prices of turns whose harness reports tokens but no cost (default: the built-in
    /// table, [`PriceTable::builtin`]).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(prices);
        self
    }

    /// Requests a model (passed to the harness verbatim).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Requests a reasoning effort (a plain word such as `high`).
    pub fn effort(mut self, effort: impl Into<String>) -> Self {
        self.effort = Some(effort.into());
        self
    }

    /// Adds an argument passed to the harness verbatim before the prompt (e.g. a permission
    /// mode).
    pub fn harness_arg(mut self, arg: impl Into<String>) -> Self {
        self.harness_args.push(arg.into());
        self
    }

    /// A command (run with `sh -c` in the workspace) that must exit 0 before a claimed
    /// completion counts.
    pub fn verify(mut self, command: impl Into<String>) -> Self {
        self.verify = Some(command.into());
        self
    }

    /// The last turn (Clarify is turn 1, Plan turn 2; at least 3).
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns;
        self
    }

    /// The directory the harness and the verification run in (default: the current one,
    /// recorded when the session is created).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The session directory (default: `<store>/sessions/<session id>`).
    pub fn session_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.session_dir = Some(dir.into());
        self
    }
}

/// Why a session could not be created, resumed or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AutoSessionError {
    /// No workspace was given and the current directory cannot be read.
    #[error("cannot read the current directory")]
    CurrentDir(#[source] io::Error),
    /// The settings are refused (the turn limit, the objective).
    #[error(transparent)]
    Settings(AutoModeError),
    /// The model or the effort cannot be passed to the harness.
    #[error(transparent)]
    Launch(LaunchError),
    /// The store has no directory for the session (its `sessions/` cannot be created).
    #[error(transparent)]
    Store(SessionError),
    /// The session directory cannot be created (it holds a session, or is not private), or
    /// the session to resume is not found there.
    #[error(transparent)]
    SessionDir(SessionError),
    /// The state of the session to resume cannot be read.
    #[error(transparent)]
    ReadState(SessionError),
    /// The session to resume cannot be continued (finished, another format, inconsistent).
    #[error(transparent)]
    Resume(AutoModeError),
    /// The session to resume names a harness this agentrun does not know.
    #[error(transparent)]
    UnknownHarness(UnknownHarness),
    /// A session id made for a new session cannot name a directory.
    #[error("the new session id {0:?} is not valid")]
    InvalidSessionId(String),
    /// The runtime could not run the session's file work on its blocking pool.
    #[error("the session's file work could not be run")]
    Blocking(#[source] io::Error),
    /// The session could not be started: its first state or log line was not written.
    #[error("the session could not be started")]
    Start(#[source] ChannelError),
}

/// A progress report while a session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AutoProgress<'a> {
    /// A line of the session log: a phase started, a turn's exit code, a verdict, a
    /// verification.
    Event(&'a str),
    /// A progress line of the running harness (decoded from its stream).
    Harness(&'a str),
}

/// How [`AutoSession::run`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AutoEnd {
    /// The session finished: completed, stopped at the turn limit, or error (see
    /// [`AutoOutcome::status`] and [`AutoOutcome::abort`]).
    Finished,
    /// A stop request ended the running turn, verification or retry wait; the session can
    /// be resumed.
    Interrupted,
    /// The harness could not be started; the session can be resumed once it can.
    SpawnFailed {
        /// The program that was to run.
        program: String,
        /// Why it could not start.
        reason: String,
        /// 127 not found, 126 not executable.
        exit_code: i32,
    },
    /// The session could not go on (its state could not be written, a turn's output could
    /// not be captured); it is saved at its last transition.
    Failed(LoopError),
}

/// What a verification did for the session, as the summary reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerificationSummary {
    /// The completion was verified.
    Passed,
    /// The session completed without a verification configured.
    Unverified,
    /// The last verification failed (its exit code, when it had one).
    Failed(Option<i32>),
    /// A verification is configured but no completion was claimed.
    NeverRun,
    /// No verification is configured.
    NoneConfigured,
}

impl std::fmt::Display for VerificationSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerificationSummary::Passed => f.write_str("passed"),
            VerificationSummary::Unverified => {
                f.write_str("none configured (completion unverified)")
            }
            VerificationSummary::Failed(Some(code)) => write!(f, "last run failed (exit {code})"),
            VerificationSummary::Failed(None) => f.write_str("last run failed (no exit code)"),
            VerificationSummary::NeverRun => f.write_str("never run (no completion claimed)"),
            VerificationSummary::NoneConfigured => f.write_str("none configured"),
        }
    }
}

/// What a session run came to; see [`AutoSession::run`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AutoOutcome {
    state: AutoModeState,
    dir: PathBuf,
    end: AutoEnd,
    harness_runs: u64,
}

impl AutoOutcome {
    /// How the run ended.
    #[must_use]
    pub fn end(&self) -> &AutoEnd {
        &self.end
    }

    /// The session's status (`Running` when the run ended before the session finished).
    #[must_use]
    pub fn status(&self) -> SessionStatus {
        self.state.status
    }

    /// The exit code by auto mode's contract: 0 completed or stopped at the turn limit; the
    /// failing phase's code on error; 127/126 when the harness cannot be started;
    /// [`exit::INTERRUPTED`] when interrupted; [`exit::FAILED`] when agentrun could
    /// not carry on. Read [`AutoOutcome::abort`] first. A recorded code outside 0–255 is
    /// brought into range by [`exit::session_exit_code`], so this is the code to exit with.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match &self.end {
            AutoEnd::Finished => exit::session_exit_code(self.state.exit_code),
            AutoEnd::Interrupted => exit::INTERRUPTED,
            AutoEnd::SpawnFailed { exit_code, .. } => exit::session_exit_code(*exit_code),
            AutoEnd::Failed(_) => exit::FAILED,
        }
    }

    /// `Some(reason)` exactly when a required phase (Clarify, Plan, Adjust) failed.
    #[must_use]
    pub fn abort(&self) -> Option<&str> {
        self.state.abort.as_deref()
    }

    /// The turn the session is at (finished: the last one it ran).
    #[must_use]
    pub fn turn(&self) -> u32 {
        self.state.turn
    }

    /// How many harness turns ran in this call.
    #[must_use]
    pub fn harness_runs(&self) -> u64 {
        self.harness_runs
    }

    /// The persisted state, as `state.json` holds it.
    #[must_use]
    pub fn state(&self) -> &AutoModeState {
        &self.state
    }

    /// The session directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the verification did.
    #[must_use]
    pub fn verification(&self) -> VerificationSummary {
        let state = &self.state;
        match (state.status, state.verified, state.verifications.last()) {
            (SessionStatus::Completed, Some(true), _) => VerificationSummary::Passed,
            (SessionStatus::Completed, _, _) => VerificationSummary::Unverified,
            (_, _, Some(v)) => VerificationSummary::Failed(v.exit_code),
            _ if state.settings.verify.is_some() => VerificationSummary::NeverRun,
            _ => VerificationSummary::NoneConfigured,
        }
    }

    /// The summary line: `session ID: status S, T of at most M turns, H harness runs;
    /// verification: V` and `; usage: …` when the harness reported usage.
    #[must_use]
    pub fn summary(&self) -> String {
        let state = &self.state;
        let usage = state
            .usage
            .total()
            .map_or_else(String::new, |u| format!("; usage: {}", u.line()));
        let budget = state.budget;
        let limits: Vec<String> = budget
            .max_cost_usd
            .map(|c| format!("${c:.4}"))
            .into_iter()
            .chain(budget.max_tokens.map(|t| format!("{t} tokens")))
            .collect();
        let budget = if limits.is_empty() {
            String::new()
        } else {
            format!(
                "; budget: spent {} of {}",
                state.spend.line(),
                limits.join(" and ")
            )
        };
        format!(
            "session {}: status {}, {} of at most {} turns, {} harness runs; verification: {}{usage}{budget}",
            state.session_id,
            state.status.as_str(),
            state.turn,
            state.settings.max_turns,
            state.harness_turns,
            self.verification(),
        )
    }
}

/// One auto session, created or resumed, ready to run; see the module documentation.
pub struct AutoSession<'a, R> {
    runner: Runner<R>,
    machine: AutoMode,
    dir: SessionDir,
    turn: AgentOptions,
    stop: Option<StopRequests<'a>>,
    verify_timeout: Option<Duration>,
}

impl<R> std::fmt::Debug for AutoSession<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoSession")
            .field("machine", &self.machine)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl<'a, R: Runtime> AutoSession<'a, R> {
    /// Creates a new session in `runner`'s store: validates the settings and the launch
    /// (before anything is written), then creates the session directory. Nothing runs yet.
    ///
    /// # Errors
    /// [`AutoSessionError::Settings`] or [`AutoSessionError::Launch`] for settings that would
    /// fail every turn; [`AutoSessionError::SessionDir`] when the directory holds a session
    /// or is not private; [`AutoSessionError::CurrentDir`], [`AutoSessionError::Store`].
    pub async fn create(
        runner: Runner<R>,
        options: AutoSessionOptions,
    ) -> Result<Self, AutoSessionError> {
        let store = runner.store().clone();
        let (machine, dir) = blocking(&runner, move || {
            let AutoSessionOptions {
                harness,
                objective,
                model,
                effort,
                harness_args,
                verify,
                max_turns,
                workspace,
                session_dir,
                retry,
                budget,
                prices,
            } = options;
            let workspace = match workspace {
                Some(dir) => dir,
                None => std::env::current_dir().map_err(AutoSessionError::CurrentDir)?,
            };
            let settings = Settings {
                objective,
                harness: harness.name().to_owned(),
                model,
                effort,
                harness_args,
                verify,
                workspace: Some(workspace.to_string_lossy().into_owned()),
                max_turns,
                result_sink_var: DEFAULT_RESULT_SINK_VAR.to_owned(),
                harness_resumes: harness.resumes_sessions(),
                max_retries: retry.max_retries,
                retry_backoff_ms: u64::try_from(retry.backoff.as_millis()).unwrap_or(u64::MAX),
            };
            // A model or effort the harness would refuse fails every turn the same way,
            // and would be saved in the session: refuse it before anything is created.
            turn_options(harness, &settings)
                .run_options()
                .map_err(AutoSessionError::Launch)?;
            let id = new_session_id();
            let mut machine = AutoMode::new(id.clone(), settings, SystemTime::now())
                .map_err(AutoSessionError::Settings)?;
            machine
                .set_budget(budget, prices.unwrap_or_else(PriceTable::builtin))
                .map_err(AutoSessionError::Settings)?;
            let path = match session_dir {
                Some(dir) => dir,
                None => SessionDir::default_path(&store, &id)
                    .map_err(AutoSessionError::Store)?
                    .ok_or(AutoSessionError::InvalidSessionId(id))?,
            };
            let dir = SessionDir::create(path).map_err(AutoSessionError::SessionDir)?;
            Ok((machine, dir))
        })
        .await?;
        Self::with_machine(runner, machine, dir)
    }

    /// Resumes a session from its last transition: `session` is its directory, or its id in
    /// `runner`'s store. The phase that was running reruns from its start, resuming the
    /// harness session the state names, with the settings the session was created with.
    ///
    /// # Errors
    /// [`AutoSessionError::SessionDir`] when there is no session there;
    /// [`AutoSessionError::ReadState`] when its state cannot be read;
    /// [`AutoSessionError::Resume`] when it cannot be continued (finished, inconsistent).
    pub async fn resume(runner: Runner<R>, session: &str) -> Result<Self, AutoSessionError> {
        let store = runner.store().clone();
        let session = session.to_owned();
        let (machine, dir) = blocking(&runner, move || {
            let path =
                SessionDir::resolve(&store, &session).map_err(AutoSessionError::SessionDir)?;
            let dir = SessionDir::open(path).map_err(AutoSessionError::SessionDir)?;
            let state = dir.read_state().map_err(AutoSessionError::ReadState)?;
            let machine =
                AutoMode::resume(state, SystemTime::now()).map_err(AutoSessionError::Resume)?;
            Ok((machine, dir))
        })
        .await?;
        Self::with_machine(runner, machine, dir)
    }

    fn with_machine(
        runner: Runner<R>,
        machine: AutoMode,
        dir: SessionDir,
    ) -> Result<Self, AutoSessionError> {
        let settings = &machine.state().settings;
        let harness =
            Harness::from_name(&settings.harness).map_err(AutoSessionError::UnknownHarness)?;
        let turn = turn_options(harness, settings);
        Ok(AutoSession {
            runner,
            machine,
            dir,
            turn,
            stop: None,
            verify_timeout: None,
        })
    }

    /// Sets an environment variable of every harness turn (e.g. its API endpoint, or a
    /// `PATH` that finds it); a variable naming the result sink is refused by the turn.
    #[must_use]
    pub fn env(
        mut self,
        key: impl AsRef<std::ffi::OsStr>,
        value: impl AsRef<std::ffi::OsStr>,
    ) -> Self {
        self.turn = self.turn.env(key, value);
        self
    }

    /// Stops a harness turn after this long (it then counts as exit code 124).
    #[must_use]
    pub fn turn_timeout(mut self, timeout: Duration) -> Self {
        self.turn = self.turn.timeout(timeout);
        self
    }

    /// Stops a harness turn when it emitted no event line for this long (zero: never); the
    /// turn fails as `stalled` (exit code 124). See [`AgentOptions::stall_timeout`].
    #[must_use]
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.turn = self.turn.stall_timeout(timeout);
        self
    }

    /// Stops a harness turn when it printed nothing for this long (exit code 124).
    #[must_use]
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.turn = self.turn.idle_timeout(idle);
        self
    }

    /// Stops a verification after this long (it then fails with code 124).
    #[must_use]
    pub fn verify_timeout(mut self, timeout: Duration) -> Self {
        self.verify_timeout = Some(timeout);
        self
    }

    /// The prices of turns whose harness reports tokens but no cost, for a resumed session
    /// (which keeps the limits it was created with).
    #[must_use]
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.machine.set_prices(prices);
        self
    }

    /// Stops the running turn or verification on every request; the run then ends
    /// [`AutoEnd::Interrupted`], and the session can be resumed.
    #[must_use]
    pub fn stop_on(mut self, stop: StopRequests<'a>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// The session id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.machine.state().session_id
    }

    /// The session directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The state the session starts from.
    #[must_use]
    pub fn state(&self) -> &AutoModeState {
        self.machine.state()
    }

    /// Runs the session until it finishes, is interrupted, or cannot go on, reporting
    /// progress to `progress` (the session log's events and the harness's own progress).
    /// The state is persisted after every transition, so however the run ends the session
    /// directory holds where it stands.
    ///
    /// # Errors
    /// [`AutoSessionError::Start`] when the session's first state or log line cannot be
    /// written; every later failure is an [`AutoOutcome`] whose [`AutoOutcome::end`] says
    /// why.
    pub async fn run(
        self,
        progress: impl FnMut(AutoProgress<'_>) + Send + 'static,
    ) -> Result<AutoOutcome, AutoSessionError> {
        let AutoSession {
            runner,
            machine,
            dir,
            turn,
            stop,
            verify_timeout,
        } = self;
        let progress = Arc::new(Mutex::new(progress));
        let harness_progress: ProgressSink = {
            let progress = progress.clone();
            Arc::new(Mutex::new(move |line: &str| {
                (progress.lock().unwrap_or_else(PoisonError::into_inner))(AutoProgress::Harness(
                    line,
                ));
            }))
        };
        let events: ProgressSink = Arc::new(Mutex::new(move |line: &str| {
            (progress.lock().unwrap_or_else(PoisonError::into_inner))(AutoProgress::Event(line));
        }));
        let session_id = machine.state().session_id.clone();
        let turns_before = machine.state().harness_turns;
        let runtime = runner.runtime.clone();
        let machine = machine.jitter_seed(crate::agent::random_seed());
        let mut session =
            AutoModeRunner::with_turn(runner.clone(), turn, session_id).progress(harness_progress);
        let mut channel = AutoModeChannel::new(machine, dir, runner, runtime.clone())
            .await
            .map_err(AutoSessionError::Start)?
            .log_to(events);
        if let Some(stop) = stop {
            session = session.stop_on(stop.clone());
            channel = channel.stop_on(stop);
        }
        if let Some(timeout) = verify_timeout {
            channel = channel.verify_timeout(timeout);
        }
        // Auto mode never idles; a short wait keeps a misbehaving channel from spinning. The
        // deadline is on the runtime's clock (a paused tokio clock included), as every instant
        // handed to `sleep_until` must be.
        let result = run_session_loop(&mut session, &mut channel, || {
            runtime.sleep_until(runtime.now() + Duration::from_millis(200))
        })
        .await;
        let end = match result {
            Ok(_) => AutoEnd::Finished,
            Err(
                LoopError::Turn(TurnError::Interrupted)
                | LoopError::Channel(ChannelError::Interrupted),
            ) => AutoEnd::Interrupted,
            Err(LoopError::Turn(TurnError::Spawn {
                program,
                reason,
                exit_code,
            })) => AutoEnd::SpawnFailed {
                program,
                reason,
                exit_code,
            },
            Err(other) => AutoEnd::Failed(other),
        };
        let state = channel.state().clone();
        Ok(AutoOutcome {
            // The machine counts the turns that finished, interrupted ones not.
            harness_runs: state.harness_turns.saturating_sub(turns_before),
            state,
            dir: channel.dir().path().to_owned(),
            end,
        })
    }
}

/// The options of every turn of a session with `settings` (the prompt and the resume id are
/// each turn's): the one place the settings become a harness launch.
fn turn_options(harness: Harness, settings: &Settings) -> AgentOptions {
    HarnessLaunch {
        env: Vec::new(),
        model: settings.model.clone(),
        effort: settings.effort.clone(),
        harness_args: settings.harness_args.clone(),
        workspace: settings.workspace.as_ref().map(PathBuf::from),
        sink_var: Some(settings.result_sink_var.clone()),
        turn_timeout: None,
        idle_timeout: None,
    }
    .into_turn(harness)
}

/// Runs `job` (the session's file work) on `runner`'s blocking pool.
async fn blocking<R: Runtime, T: Send + 'static>(
    runner: &Runner<R>,
    job: impl FnOnce() -> Result<T, AutoSessionError> + Send + 'static,
) -> Result<T, AutoSessionError> {
    runner
        .runtime
        .spawn_blocking(job)
        .await
        .map_err(AutoSessionError::Blocking)?
}
