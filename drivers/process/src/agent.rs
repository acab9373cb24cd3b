//! Agent turns as one library call: [`Runner::agent`] launches a harness CLI with its registry
//! invocation, interprets its stdout live (progress to a callback as each line is decoded),
//! retains stdout and stderr in the store, fetches the harness's retained record after the
//! exit, and returns a typed, serializable [`AgentRun`].
//!
//! ```no_run
//! # async fn demo(runner: &agentrun_process::Runner<impl agentrun_process::Runtime>) -> Result<(), agentrun_process::AgentError> {
//! use agentrun_core::harness::Harness;
//! use agentrun_process::AgentOptions;
//!
//! let turn = runner
//!     .agent(AgentOptions::new(Harness::Claude, "fix the failing test").model("opus"))
//!     .on_progress(|line| eprintln!("{line}"))
//!     .await?;
//! if let Some(completion) = &turn.completion {
//!     println!("{:?}", completion.outcome.final_message);
//! }
//! # Ok(()) }
//! ```
//!
//! Driving order, for one turn: the options become the [`Invocation`] and the
//! [`RunOptions`] (stop signals of the harness, stderr tail kept for diagnostics); for a Codex
//! resume, the session file is located and its running token total noted; the process runs
//! with a stdout tap that splits lines (bounded by [`MAX_LINE_BYTES`]) into the
//! [`Interpretation`]; then either the run was stopped (timeout, idle timeout, cancellation:
//! the interpretation is interrupted, no retained read) or it ended (the interpretation
//! finishes, the retained record is read — `opencode export ID`, the Muse session log, the
//! lines Codex appended to its session file, or the Gemini CLI session log — and the
//! completion is built).

use std::ffi::{OsStr, OsString};
use std::future::{Future, IntoFuture};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::PreviewLimits;
use agentrun_core::budget::{Budget, BudgetExceeded, PriceTable, Spend};
/// The rule the launch applies to resume ids, applied here to the session ids a stream
/// reports before they name a file.
pub use agentrun_core::harness::plausible_session_id;
use agentrun_core::harness::retained::codex_token_total;
use agentrun_core::harness::{
    Completion, FailureKind, Harness, HarnessExit, Interpretation, LaunchError, LaunchRequest,
    OutcomeStatus, RetainedKind, RetainedRecord, RetainedRequest, TurnSummary, Usage,
};
use agentrun_core::lines::{Line, LineSplitter};
use agentrun_core::process::{
    Exit, OptionsError, ProcessResult, RunOptions, RunOutcome, RunSummary,
};
use agentrun_core::retry::{Retry, RetryEvent, RetryPolicy, RetryWait};
use agentrun_core::sink::ResultSink;
use agentrun_fs::harness_sessions::{
    SessionLog, codex_sessions_dir, find_codex_session, find_gemini_log, find_muse_log,
    find_session_log,
};
use futures_lite::Stream;
use serde::Serialize;

use crate::driver::{Runner, Runtime};
use crate::live::RunError;
use crate::stall::{self, LastLine};

/// The longest stdout line interpreted; a longer line is not interpreted (the report names it
/// in `oversized_lines` and a warning) while the stdout artifact keeps it whole.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// The largest retained record read.
pub const RETAINED_CAP: u64 = 64 << 20;

/// How long `opencode export ID` may take (it starts the whole CLI: seconds on a busy machine).
mod retained;
mod retries;

use retained::{acquire, codex_snapshot};
pub(crate) use retries::random_seed;
use retries::run_with_retries;
pub(crate) use retries::wait_unless_stopped;

const EXPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the retained record comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetainedSource {
    /// The harness's own: `opencode export ID`, the Muse session log, the Codex session file.
    #[default]
    Harness,
    /// This file instead (a saved Muse log or OpenCode export).
    File(PathBuf),
    /// None: complete from the stream alone.
    Skip,
}

/// One harness turn to run: what to launch and how to watch it.
#[derive(Debug, Clone)]
#[must_use]
pub struct AgentOptions {
    harness: Harness,
    request: LaunchRequest,
    security: bool,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    retained: RetainedSource,
    current_dir: Option<PathBuf>,
    env: Vec<(OsString, Option<OsString>)>,
    result_sink: Option<(ResultSink, Option<OsString>)>,
    program: Option<PathBuf>,
    label: Option<String>,
    retry: RetryPolicy,
    stall_timeout: Option<Duration>,
    budget: Budget,
    prices: Option<PriceTable>,
}

impl AgentOptions {
    /// A turn of `harness` with `prompt` (passed as data: never read as a flag).
    pub fn new(harness: Harness, prompt: impl Into<String>) -> Self {
        AgentOptions {
            harness,
            request: LaunchRequest {
                prompt: prompt.into(),
                ..LaunchRequest::default()
            },
            security: false,
            timeout: None,
            idle_timeout: None,
            retained: RetainedSource::Harness,
            current_dir: None,
            env: Vec::new(),
            result_sink: None,
            program: None,
            label: None,
            retry: RetryPolicy::NEVER,
            stall_timeout: None,
            budget: Budget::default(),
            prices: None,
        }
    }

    /// Runs the turn again, up to `retries` times, when it ends with a rate limit or an
    /// overload: after a wait (the harness's own delay or reset time, else the backoff),
    /// resuming the harness session the failed run reported (default 0: the failure stands).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.retry.max_retries = retries;
        self
    }

    /// The first wait before a retry when the harness does not say how long (default 30 s),
    /// doubled for each further retry with jitter, each wait at most 15 minutes.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry.backoff = backoff;
        self
    }

    /// Caps the run's spend (US dollars, tokens): checked whenever the stream reports usage
    /// while the harness runs (Claude Code, OpenCode, …), when the limit is reached the
    /// harness is stopped with its stop signals and the turn ends failed with
    /// [`FailureKind::Budget`]; checked again on the final usage (then
    /// [`AgentRun::budget_exceeded`] says so). A harness that reports tokens but no cost is
    /// priced from the price table ([`AgentOptions::prices`]).
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The prices for [`AgentOptions::budget`] (default: [`PriceTable::builtin`]).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(prices);
        self
    }

    /// Stops the harness when no event line (a non-blank stdout line) arrived for `timeout`,
    /// and ends the turn failed with [`FailureKind::Stalled`](agentrun_core::harness::FailureKind)
    /// and a diagnostic naming the last event seen. Zero turns the watchdog off (the default;
    /// the command line and the MCP server default to
    /// [`DEFAULT_STALL_TIMEOUT`](agentrun_core::stall::DEFAULT_STALL_TIMEOUT)).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout).filter(|t| !t.is_zero());
        self
    }

    /// The stall timeout, when the watchdog is on.
    pub fn get_stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// Runs the harness (and, for OpenCode, its `opencode export`) from the executable at
    /// `path` instead of looking the harness's program up in `PATH`: for a caller that
    /// resolved it itself, against trusted directories only.
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = Some(path.into());
        self
    }

    /// Replaces the prompt.
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.request.prompt = prompt.into();
        self
    }

    /// Delivers the prompt on stdin where the harness can read it there, so it is not bound
    /// by the size of one argument (see `Harness::prompt_delivery`).
    pub fn prompt_on_stdin(mut self, on: bool) -> Self {
        self.request.prompt_on_stdin = on;
        self
    }

    /// Labels the run in its record.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Requests a model (passed to the harness verbatim).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.request.model = Some(model.into());
        self
    }

    /// Requests a reasoning effort (Claude `--effort`, Codex `model_reasoning_effort`,
    /// OpenCode `--variant`, Grok `--reasoning-effort`; dropped for the others).
    pub fn effort(mut self, effort: impl Into<String>) -> Self {
        self.request.effort = Some(effort.into());
        self
    }

    /// Resumes a harness session.
    pub fn resume(mut self, session_id: impl Into<String>) -> Self {
        self.request.resume = Some(session_id.into());
        self
    }

    /// Adds an argument passed to the harness verbatim, before the prompt.
    pub fn harness_arg(mut self, arg: impl Into<String>) -> Self {
        self.request.harness_args.push(arg.into());
        self
    }

    /// Codex: run outside a Git repository (`--skip-git-repo-check`).
    pub fn skip_git_repo_check(mut self, skip: bool) -> Self {
        self.request.skip_git_repo_check = skip;
        self
    }

    /// Enables the security policy (`Model: …` progress, fatal safeguard refusals).
    pub fn security(mut self, on: bool) -> Self {
        self.security = on;
        self
    }

    /// Stops the harness after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Stops the harness when it printed nothing for `idle`.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// Where the retained record comes from (default: the harness's own).
    pub fn retained(mut self, source: RetainedSource) -> Self {
        self.retained = source;
        self
    }

    /// Runs the harness in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets an environment variable of the harness (on top of the inherited environment and
    /// the harness's fixed variables). Also where the harness's files are looked for
    /// (`HOME`, `CODEX_HOME`, `XDG_DATA_HOME`).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable from the harness's environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Gives the harness a clean result channel (see `RunOptions::with_result_sink`), under
    /// `var` when given.
    pub fn with_result_sink(mut self, sink: ResultSink, var: Option<&OsStr>) -> Self {
        self.result_sink = Some((sink, var.map(OsStr::to_owned)));
        self
    }

    /// The harness.
    pub fn harness(&self) -> Harness {
        self.harness
    }

    /// The launch request.
    pub fn request(&self) -> &LaunchRequest {
        &self.request
    }

    /// The process options this turn runs with: the invocation, the harness's stop signals,
    /// a stderr tail for diagnostics, the timeouts, directory, environment and sink.
    ///
    /// # Errors
    /// [`LaunchError`] when the request cannot be passed to the harness as it is (an effort
    /// that is not a plain word).
    pub fn run_options(&self) -> Result<RunOptions, LaunchError> {
        let mut options = RunOptions::from(self.harness.invocation(&self.request)?)
            .limits(PreviewLimits {
                // The stderr tail names why a harness failed.
                tail_lines: 5,
                ..PreviewLimits::default()
            })
            .stop_signals(self.harness.stop_signals().sequence);
        if let Some(program) = &self.program {
            options = options.program(program);
        }
        if let Some(label) = &self.label {
            options = options.label(label);
        }
        if let Some(t) = self.timeout {
            options = options.timeout(t);
        }
        if let Some(t) = self.idle_timeout {
            options = options.idle_timeout(t);
        }
        if let Some(dir) = &self.current_dir {
            options = options.current_dir(dir);
        }
        options = self.with_env(options);
        if let Some((sink, var)) = &self.result_sink {
            options = options.with_result_sink(sink.clone());
            if let Some(var) = var {
                options = options.sink_var(var);
            }
        }
        Ok(options)
    }

    /// `options` with the caller's environment changes.
    fn with_env(&self, mut options: RunOptions) -> RunOptions {
        for (key, value) in &self.env {
            options = match value {
                Some(v) => options.env(key, v),
                None => options.env_remove(key),
            };
        }
        options
    }

    /// The value `key` has in the harness's environment.
    fn child_env(&self, key: &str) -> Option<OsString> {
        match self.env.iter().rev().find(|(k, _)| k == key) {
            Some((_, value)) => value.clone(),
            None => std::env::var_os(key),
        }
        .filter(|v| !v.is_empty())
    }
}

/// Why an agent turn could not run (a turn that ran and failed is an [`AgentRun`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The options are invalid.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// A budget limit is not usable (not a positive number).
    #[error(transparent)]
    Budget(#[from] agentrun_core::budget::BudgetError),
    /// The request cannot be passed to the harness (an effort that is not a plain word).
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The process could not be run (not found, not executable, store failure, …).
    #[error(transparent)]
    Run(#[from] RunError),
    /// The stdout tap was lost (it panicked): the turn cannot be interpreted.
    #[error("the stdout interpretation of the harness was lost (it panicked)")]
    TapLost,
}

/// The result of one harness turn.
///
/// Serializes as the final object of `agentrun agent --json`: `harness`, `observed_models`,
/// then `report` and `outcome` (the completion) or, when the run was stopped,
/// `interrupted` (`timed_out`, `idle_timed_out` or `cancelled`); then `run` (the process in
/// brief, [`agentrun_core::process::RunSummary`]: id, status, exit, artifact URIs),
/// `truncated_lines`, and `retained_error` when there is one. The process's full record is
/// not repeated: it is in the store under the run id.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentRun {
    /// The harness.
    pub harness: Harness,
    /// The models observed on the stream (before the retained record's reconciliation).
    pub observed_models: Vec<String>,
    /// How many distinct observed models `observed_models` left out (beyond
    /// [`MAX_MODELS`](agentrun_core::harness::interpretation::MAX_MODELS)).
    pub observed_models_omitted: u64,
    /// The completion: report and outcome. `None` when the run was stopped (timeout, idle
    /// timeout, cancellation): then there is no report and no retained read.
    pub completion: Option<Completion>,
    /// The harness process: how it ended, its retained stdout and stderr.
    pub process: ProcessResult,
    /// Stdout lines longer than [`MAX_LINE_BYTES`], not interpreted (the completion's report
    /// names them too).
    pub truncated_lines: u64,
    /// Why the retained record is absent, when the harness has one and it could not be read.
    pub retained_error: Option<String>,
    /// How many times the turn was run again after a rate limit or an overload
    /// ([`AgentOptions::max_retries`]); this run is the last of them.
    pub retries: u32,
    /// The usage the stream reported before the run was stopped (timeout, idle timeout,
    /// cancellation), when it reported any: what the stopped run spent, as far as it is
    /// known. `None` for a completed run, whose usage is its completion's.
    pub stopped_usage: Option<Usage>,
    /// The budget limit the run's spend reached ([`AgentOptions::budget`]), when it did.
    pub budget_exceeded: Option<BudgetExceeded>,
}

impl Serialize for AgentRun {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            #[serde(flatten)]
            turn: TurnSummary<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            interrupted: Option<RunOutcome>,
            #[serde(skip_serializing_if = "Option::is_none")]
            usage: Option<&'a Usage>,
            #[serde(skip_serializing_if = "Option::is_none")]
            budget_exceeded: Option<&'a BudgetExceeded>,
            run: RunSummary,
            truncated_lines: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            retained_error: Option<&'a str>,
            #[serde(skip_serializing_if = "is_zero")]
            retries: u32,
        }
        fn is_zero(n: &u32) -> bool {
            *n == 0
        }
        Json {
            turn: TurnSummary::new(
                self.harness,
                &self.observed_models,
                self.completion.as_ref(),
            )
            .with_observed_models_omitted(self.observed_models_omitted),
            interrupted: self.stopped(),
            usage: self.stopped_usage.as_ref(),
            budget_exceeded: self.budget_exceeded.as_ref(),
            run: self.process.summary(),
            truncated_lines: self.truncated_lines,
            retained_error: self.retained_error.as_deref(),
            retries: self.retries,
        }
        .serialize(s)
    }
}

impl AgentRun {
    /// Whether the session succeeded: it completed, its status is succeeded, and its output
    /// was captured without a fault.
    pub fn succeeded(&self) -> bool {
        self.completion
            .as_ref()
            .is_some_and(|c| c.outcome.status == OutcomeStatus::Succeeded)
            && self.process.record.faults.is_empty()
    }

    /// How the run was stopped, when it was (timeout, idle timeout, cancellation).
    pub fn stopped(&self) -> Option<RunOutcome> {
        self.completion.is_none().then_some(self.process.outcome)
    }
}

type Progress = Box<dyn FnMut(&str) + Send>;
type StopInput<'a> = Pin<Box<dyn Stream<Item = ()> + Send + 'a>>;
type RetryNotice = Box<dyn FnMut(&RetryWait) + Send>;

/// Called at the end of each harness run ([`AgentRunBuilder::on_harness_ended`]).
type EndedHook = Arc<Mutex<Box<dyn FnMut() + Send>>>;

/// One agent turn being described ([`Runner::agent`]); awaiting it runs the turn.
#[must_use = "an agent turn does nothing until awaited"]
pub struct AgentRunBuilder<'a, R> {
    runner: &'a Runner<R>,
    options: AgentOptions,
    progress: Option<Progress>,
    stop: Option<StopInput<'a>>,
    on_retry_wait: Option<RetryNotice>,
    on_ended: Option<EndedHook>,
}

impl<R> std::fmt::Debug for AgentRunBuilder<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRunBuilder")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Runner<R> {
    /// Describes one harness turn; `.await` it to run it.
    pub fn agent(&self, options: AgentOptions) -> AgentRunBuilder<'_, R> {
        AgentRunBuilder {
            runner: self,
            options,
            progress: None,
            stop: None,
            on_retry_wait: None,
            on_ended: None,
        }
    }
}

impl<'a, R: Runtime> AgentRunBuilder<'a, R> {
    /// Calls `progress` with each progress line (`session started`, `$ cargo test`,
    /// `Model: …`) as soon as its stdout line is decoded, on the thread that pumps the pipe.
    /// Each call is one line without a newline; it must not block for long (backpressure).
    /// A panic in `progress` stops the harness, and is resumed in the task awaiting the turn
    /// once the run's record is published (as for
    /// [`RunBuilder::observe_stdout`](crate::RunBuilder::observe_stdout)).
    pub fn on_progress(mut self, progress: impl FnMut(&str) + Send + 'static) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }

    /// Stops the harness when `stop` resolves (e.g. on Ctrl-C), with its stop signals; the
    /// result is then a stopped run ([`AgentRun::stopped`] is `Cancelled`).
    pub fn stop_on(self, stop: impl Future<Output = ()> + Send + 'a) -> Self {
        self.cancel_on(futures_lite::stream::once_future(stop))
    }

    /// Like [`AgentRunBuilder::stop_on`], with every item of `requests` a stop request: the
    /// first stops the harness, a second one while it is being stopped kills it at once.
    pub fn cancel_on(mut self, requests: impl Stream<Item = ()> + Send + 'a) -> Self {
        self.stop = Some(Box::pin(requests));
        self
    }

    /// Calls `notice` when a retry is scheduled ([`AgentOptions::max_retries`]), before the
    /// wait: [`RetryWait::line`] says `rate limited; waiting until 03:12:40 UTC (retry 1/3)`.
    pub fn on_retry_wait(mut self, notice: impl FnMut(&RetryWait) + Send + 'static) -> Self {
        self.on_retry_wait = Some(Box::new(notice));
        self
    }

    /// Calls `ended` each time a run of the harness has ended (its process group gone, its
    /// output drained), before that run's record is published and its stream interpreted to
    /// the end: once per run, so once more per retry ([`AgentOptions::max_retries`]); the last
    /// call follows the last run. See [`RunBuilder::on_ended`](crate::RunBuilder::on_ended):
    /// it runs on a blocking thread and must not block for long. A caller that inspects what
    /// the harness changed (its working directory) can start that here, beside the
    /// publication.
    pub fn on_harness_ended(mut self, ended: impl FnMut() + Send + 'static) -> Self {
        self.on_ended = Some(Arc::new(Mutex::new(Box::new(ended))));
        self
    }
}

impl<'a, R: Runtime> IntoFuture for AgentRunBuilder<'a, R> {
    type Output = Result<AgentRun, AgentError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        if self.options.retry.max_retries == 0 {
            return Box::pin(run_turn(
                self.runner,
                self.options,
                self.progress,
                self.stop,
                self.on_ended,
            ));
        }
        Box::pin(run_with_retries(
            self.runner,
            self.options,
            self.progress,
            self.stop,
            self.on_retry_wait,
            self.on_ended,
        ))
    }
}

/// What the stdout tap owns while the harness runs.
struct Live {
    interp: Interpretation,
    splitter: LineSplitter,
    progress: Option<Progress>,
    /// The last event line, for the stall watchdog (`None` when it is off: no cost at all).
    last: Option<(LastLine, Clock)>,
    /// The budget checked on the usage the stream reports (`None`: no budget).
    budget: Option<LiveBudget>,
}

/// A budget checked while the harness runs, and the stop it asks for.
struct LiveBudget {
    budget: Budget,
    prices: PriceTable,
    exceeded: Arc<Mutex<BudgetStop>>,
}

/// The budget stop: the limit reached, and the waker of the stop future.
#[derive(Default)]
struct BudgetStop {
    exceeded: Option<BudgetExceeded>,
    waker: Option<std::task::Waker>,
}

impl LiveBudget {
    fn check(&self, interp: &Interpretation) {
        let Some(usage) = interp.usage_so_far() else {
            return;
        };
        let models = interp.observed_models().iter().map(String::as_str);
        let spent = Spend::of_run(usage, models, &self.prices);
        if let Some(exceeded) = self.budget.exceeded(&spent) {
            let mut stop = self.exceeded.lock().unwrap_or_else(|p| p.into_inner());
            if stop.exceeded.is_none() {
                stop.exceeded = Some(exceeded);
                if let Some(waker) = stop.waker.take() {
                    waker.wake();
                }
            }
        }
    }
}

/// Resolves once the live budget was exceeded.
fn budget_stop(stop: Arc<Mutex<BudgetStop>>) -> impl Future<Output = ()> + Send + 'static {
    std::future::poll_fn(move |cx| {
        let mut s = stop.lock().unwrap_or_else(|p| p.into_inner());
        if s.exceeded.is_some() {
            return std::task::Poll::Ready(());
        }
        s.waker = Some(cx.waker().clone());
        std::task::Poll::Pending
    })
}

type Clock = Box<dyn Fn() -> std::time::Instant + Send>;

impl Live {
    fn feed(
        interp: &mut Interpretation,
        progress: &mut Option<Progress>,
        last: &mut Option<(LastLine, Clock)>,
        line: Line<'_>,
    ) {
        if let Some((last, _)) = last {
            last.line(line.bytes);
        }
        // A cut line is only a prefix of the event: reported as too long, never decoded.
        if line.truncated {
            interp.handle_oversized_line(MAX_LINE_BYTES);
            return;
        }
        let lines = interp.handle_line(line.bytes);
        if let Some(progress) = progress {
            for l in &lines {
                progress(l);
            }
        }
    }

    fn chunk(&mut self, chunk: &[u8]) {
        let Live {
            interp,
            splitter,
            progress,
            last,
            budget,
        } = self;
        splitter.push(chunk, |line| Self::feed(interp, progress, last, line));
        if let Some((last, clock)) = last {
            last.chunk_done(clock);
        }
        if let Some(budget) = budget {
            budget.check(interp);
        }
    }

    /// End of output: feeds a last line without a newline.
    fn end(self) -> (Interpretation, u64) {
        let Live {
            mut interp,
            splitter,
            mut progress,
            mut last,
            budget: _,
        } = self;
        let mut truncated = splitter.truncated_lines();
        // The last line, without a newline, may be cut too.
        splitter.finish(|line| {
            truncated += u64::from(line.truncated);
            Self::feed(&mut interp, &mut progress, &mut last, line);
        });
        (interp, truncated)
    }
}

async fn run_turn<R: Runtime>(
    runner: &Runner<R>,
    options: AgentOptions,
    progress: Option<Progress>,
    stop: Option<StopInput<'_>>,
    on_ended: Option<EndedHook>,
) -> Result<AgentRun, AgentError> {
    let harness = options.harness;
    let run_options = options.run_options()?;
    run_options.validate()?;

    // Codex reports a resumed thread's running total: note the total before this run, and
    // where its session file ends, to read only what this run appends.
    let codex_before = match (&options.retained, harness, &options.request.resume) {
        (RetainedSource::Harness, Harness::Codex, Some(id)) if plausible_session_id(id) => {
            let dir = codex_sessions_dir(|k| options.child_env(k));
            let id = id.clone();
            runner
                .runtime
                .spawn_blocking(move || dir.and_then(|d| codex_snapshot(&d, &id)))
                .await
                .ok()
                .flatten()
        }
        _ => None,
    };

    let mut interp = Interpretation::new(harness);
    // A run that resumes nothing starts a session: its running totals are its own.
    if !options.request.may_resume(harness) {
        interp.started_new_session();
    }
    if options.security {
        interp.for_security(options.request.model.as_deref());
    }
    let stall_timeout = options.stall_timeout;
    let last = stall_timeout.map(|_| {
        let rt = runner.runtime.clone();
        (LastLine::default(), Box::new(move || rt.now()) as Clock)
    });
    options.budget.validate()?;
    let prices = options.prices.clone().unwrap_or_else(PriceTable::builtin);
    let budget_stopped = Arc::new(Mutex::new(BudgetStop::default()));
    let live_budget = (!options.budget.is_unlimited()).then(|| LiveBudget {
        budget: options.budget,
        prices: prices.clone(),
        exceeded: budget_stopped.clone(),
    });
    let live = Arc::new(Mutex::new(Some(Live {
        interp,
        splitter: LineSplitter::new(MAX_LINE_BYTES),
        progress,
        last,
        budget: live_budget,
    })));
    let tap = live.clone();
    let observe = move |chunk: &[u8]| {
        if let Some(live) = tap.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            live.chunk(chunk);
        }
    };
    let mut builder = runner.run(run_options).observe_stdout(observe);
    if let Some(hook) = on_ended {
        builder = builder.on_ended(move || (hook.lock().unwrap_or_else(|p| p.into_inner()))());
    }
    let stalled = Arc::new(Mutex::new(None));
    let process = if stall_timeout.is_some() || stop.is_some() || !options.budget.is_unlimited() {
        // The watchdog starts with the turn (its first deadline counts from here, a moment
        // before the spawn: never later than the harness's own start).
        let stall = stall_timeout.map(|t| {
            let watched = live.clone();
            let read_last: stall::ReadLast = Arc::new(move |watch| {
                if let Some(Live {
                    last: Some((last, _)),
                    ..
                }) = watched.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
                {
                    stall::feed(watch, last);
                }
            });
            Box::pin(stall::watch(
                runner.runtime.clone(),
                Some(t),
                read_last,
                stalled.clone(),
            )) as Pin<Box<dyn Future<Output = ()> + Send>>
        });
        // The budget's stop joins the caller's stop requests.
        let user: Option<StopInput<'_>> = if options.budget.is_unlimited() {
            stop
        } else {
            let budget = futures_lite::stream::once_future(budget_stop(budget_stopped.clone()));
            Some(match stop {
                Some(stop) => Box::pin(futures_lite::StreamExt::or(stop, budget)),
                None => Box::pin(budget),
            })
        };
        builder
            .cancel_on(stall::StopOrStall { user, stall })
            .await?
    } else {
        builder.await?
    };
    let stalled = stalled.lock().unwrap_or_else(|p| p.into_inner()).take();
    let over_budget = budget_stopped
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .exceeded
        .take();
    let taken = live.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(live) = taken else {
        return Err(AgentError::TapLost);
    };
    let (mut interp, truncated_lines) = live.end();

    // Stopped by the watchdog (not ended by itself in the meantime): a failed turn of its own
    // kind, with what the stream told until then (session id, usage so far).
    let stopped_by_us = match (&stalled, &over_budget, process.outcome) {
        (Some(stall), _, RunOutcome::Cancelled) => Some((FailureKind::Stalled, stall.diagnostic())),
        (_, Some(exceeded), RunOutcome::Cancelled) => Some((
            FailureKind::Budget,
            format!("{}; agentrun stopped the harness", exceeded.diagnostic()),
        )),
        _ => None,
    };
    if let Some((kind, diagnostic)) = stopped_by_us {
        let (observed_models, observed_models_omitted, completion) =
            stopped_completion(interp, kind, diagnostic);
        return Ok(AgentRun {
            harness,
            observed_models,
            observed_models_omitted,
            completion: Some(completion),
            process,
            truncated_lines,
            retained_error: None,
            retries: 0,
            stopped_usage: None,
            budget_exceeded: over_budget.filter(|_| kind == FailureKind::Budget),
        });
    }

    if process.outcome != RunOutcome::Completed {
        // No completion, but what the stream said it spent so far is kept.
        let (observed_models, observed_models_omitted, stopped) = stopped_completion(
            interp,
            FailureKind::CutOff,
            "the run was stopped".to_owned(),
        );
        return Ok(AgentRun {
            harness,
            observed_models,
            observed_models_omitted,
            completion: None,
            process,
            truncated_lines,
            retained_error: None,
            retries: 0,
            stopped_usage: stopped.report.usage,
            budget_exceeded: None,
        });
    }

    // The stderr tail kept for diagnostics also classifies a failure the stream names no kind
    // of (a harness that prints its API error only there).
    if let Some(stderr) = process.stderr() {
        let text = stderr
            .tail
            .as_ref()
            .map_or(stderr.preview.text.as_str(), |t| &t.text);
        for line in text.lines() {
            interp.handle_stderr_line(line.as_bytes());
        }
    }
    // Gemini CLI's exit code names the HTTP status its stream may leave out.
    if let Some(Exit::Code(code)) = process.exit {
        interp.handle_exit_code(code);
    }
    let exit = match process.exit {
        Some(Exit::Code(0)) => HarnessExit::Success,
        other => HarnessExit::Failed {
            diagnostic: match other {
                // Gemini CLI's exit code is the HTTP status of the failed request, mod 256.
                Some(Exit::Code(code)) if harness.http_status_of_exit(code).is_some() => {
                    let status = harness.http_status_of_exit(code).unwrap_or_default();
                    exit_diagnostic(format_args!("{harness} (HTTP {status})"), other, &process)
                }
                _ => exit_diagnostic(harness, other, &process),
            },
        },
    };
    let finished = interp.finish(exit);
    let observed_models = finished.observed_models().to_vec();
    let observed_models_omitted = finished.observed_models_omitted();
    let (retained, retained_error) = match finished.retained_request() {
        Some(request) => match acquire(runner, &options, &request, codex_before).await {
            Ok(record) => (Some(record), None),
            Err(why) => (None, Some(why)),
        },
        None => (None, None),
    };
    let completion = finished.complete(retained);
    // The final check, on the usage the completion reports (the retained record's included).
    let budget_exceeded = completion.report.usage.as_ref().and_then(|usage| {
        let models = completion.report.models.iter().map(String::as_str);
        options
            .budget
            .exceeded(&Spend::of_run(usage, models, &prices))
    });
    Ok(AgentRun {
        harness,
        observed_models,
        observed_models_omitted,
        completion: Some(completion),
        process,
        truncated_lines,
        retained_error,
        retries: 0,
        stopped_usage: None,
        budget_exceeded,
    })
}

/// The completion of a turn agentrun stopped itself (stalled, over its budget): what the
/// stream told until then (session id, final message so far, usage), failed with `kind`. No
/// retained record is read: the harness did not finish writing it.
fn stopped_completion(
    interp: Interpretation,
    kind: FailureKind,
    diagnostic: String,
) -> (Vec<String>, u64, Completion) {
    let finished = interp.finish(HarnessExit::Failed {
        diagnostic: diagnostic.clone(),
    });
    let models = finished.observed_models().to_vec();
    let omitted = finished.observed_models_omitted();
    let mut completion = finished.complete(None);
    completion.outcome.status = OutcomeStatus::TurnFailed { diagnostic };
    completion.outcome.failure_kind = Some(kind);
    completion.outcome.retry_after = None;
    (models, omitted, completion)
}

/// `claude exited with code 3: <last stderr line>`; `who` is any name (the harness, or e.g.
/// `the summarizer` for `agentrun compact`).
pub fn exit_diagnostic(
    who: impl std::fmt::Display,
    exit: Option<Exit>,
    result: &ProcessResult,
) -> String {
    let harness = who;
    let mut s = match exit {
        Some(Exit::Code(c)) => format!("{harness} exited with code {c}"),
        Some(Exit::Signal(sig)) => format!("{harness} was killed by signal {sig}"),
        None => format!("{harness} ended without an exit status"),
    };
    let last = result.stderr().and_then(|s| {
        let text = s.tail.as_ref().map_or(s.preview.text.as_str(), |t| &t.text);
        text.lines().rev().find(|l| !l.trim().is_empty())
    });
    if let Some(line) = last {
        s.push_str(": ");
        s.extend(line.trim().chars().take(300));
    }
    s
}

#[cfg(test)]
mod tests;
