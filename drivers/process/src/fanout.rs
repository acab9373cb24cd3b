//! Fan-out as one library call: [`Runner::fanout`] runs several attempts at one task at once
//! (each a harness and a model: one agent run, or with [`FanOutOptions::auto`] a whole auto
//! session), each isolated in its own git worktree on a new branch (or, outside a
//! repository, a private copy of the workspace), verifies each, keeps the winner's worktree
//! and branch, removes the losers', and writes one fan-out record in the store.
//!
//! ```no_run
//! # async fn demo(runner: &agentrun_process::Runner<impl agentrun_process::Runtime>) -> Result<(), agentrun_process::FanOutError> {
//! use agentrun_core::harness::Harness;
//! use agentrun_process::{AttemptSpec, FanOutOptions};
//!
//! let attempts = ["claude:opus", "claude:sonnet", "codex"]
//!     .iter()
//!     .map(|a| AttemptSpec::parse(a))
//!     .collect::<Result<Vec<_>, _>>()
//!     .expect("known harnesses");
//! let run = runner
//!     .fanout(FanOutOptions::new(attempts, "make the failing test pass").verify("cargo test"))
//!     .await?;
//! if let Some(w) = run.record.winner {
//!     println!("winner: {:?}", run.record.attempts[w].branch);
//! }
//! # Ok(()) }
//! ```
//!
//! The decisions (which attempt starts next within `jobs`, when a verification runs, who
//! wins, when the others stop, what each is recorded as) are the sans-IO
//! `agentrun_core::fanout::FanOut` machine's; this driver does the git, file and process work
//! it asks for. All attempts are futures of the one fan-out future (no task is spawned), so
//! the fan-out runs on any [`Runtime`]. Each attempt gets its own result sink (a harness never
//! sees the caller's `AGENTRUN_RESULT_SINK`) and, for Codex, a private `CODEX_HOME` seeded
//! with the user's configuration and login, so attempts share no session files and no
//! writer lock.

mod attempt;
mod isolation;

use std::ffi::OsString;
use std::future::{Future, IntoFuture};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use agentrun_core::PreviewLimits;
use agentrun_core::auto_mode::SessionStatus;
use agentrun_core::budget::{Budget, PriceTable};
use agentrun_core::fanout::{
    Action, AgentEnd, AttemptRecord, AttemptStatus, Changes, FanOut, FanOutRecord, Selection,
    VerificationRecord, VerifyEnd, default_jobs,
};
use agentrun_core::harness::{FailureKind, Harness, LaunchError, UnknownHarness, Usage};
use agentrun_core::process::{RunOptions, RunOutcome};
use agentrun_core::sink::ResultSink;
use agentrun_fs::fanout::{FanOutDir, FanOutDirError, new_fanout_id};
use futures_lite::Stream;

use crate::agent::AgentOptions;
use crate::auto_mode::StopRequests;
use crate::auto_session::{AutoEnd, AutoProgress, AutoSession, AutoSessionOptions};
use crate::driver::{Runner, Runtime};
use attempt::{attempt, verify};
pub use isolation::IsolationError;
use isolation::Repo;

/// One attempt: a harness and the model to ask it for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptSpec {
    /// The harness.
    pub harness: Harness,
    /// The model (passed verbatim), or the harness's default.
    pub model: Option<String>,
}

impl AttemptSpec {
    /// An attempt of `harness` with `model`.
    #[must_use]
    pub fn new(harness: Harness, model: Option<String>) -> Self {
        AttemptSpec { harness, model }
    }

    /// Parses `HARNESS[:MODEL]` (the model is everything after the first `:`, so it may hold
    /// `:` or `/` itself, e.g. `opencode:provider/model`).
    ///
    /// # Errors
    /// [`UnknownHarness`] for a harness name agentrun does not know; an empty model after
    /// the `:` is refused the same way as a missing harness name would be.
    pub fn parse(text: &str) -> Result<Self, UnknownHarness> {
        let (name, model) = match text.split_once(':') {
            Some((name, model)) => (name, Some(model.to_owned())),
            None => (text, None),
        };
        let harness = Harness::from_name(name)?;
        if model.as_deref() == Some("") {
            return Err(Harness::from_name(text).unwrap_err());
        }
        Ok(AttemptSpec { harness, model })
    }

    /// `harness:model`, or the harness alone.
    #[must_use]
    pub fn label(&self) -> String {
        match &self.model {
            Some(m) => format!("{}:{m}", self.harness),
            None => self.harness.to_string(),
        }
    }
}

/// What a fan-out runs; see the module documentation.
#[derive(Debug, Clone)]
#[must_use]
pub struct FanOutOptions {
    attempts: Vec<AttemptSpec>,
    prompt: String,
    jobs: Option<usize>,
    selection: Selection,
    verify: Option<String>,
    auto: bool,
    max_turns: Option<u32>,
    keep: bool,
    harness_args: Vec<String>,
    workspace: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    stall_timeout: Option<Duration>,
    budget: Budget,
    prices: Option<PriceTable>,
    verify_timeout: Option<Duration>,
}

impl FanOutOptions {
    /// A fan-out of `attempts`, each given `prompt` (with [`FanOutOptions::auto`]: the
    /// objective), all at once up to 8, first-verified, without verification.
    pub fn new(attempts: Vec<AttemptSpec>, prompt: impl Into<String>) -> Self {
        FanOutOptions {
            attempts,
            prompt: prompt.into(),
            jobs: None,
            selection: Selection::FirstVerified,
            verify: None,
            auto: false,
            max_turns: None,
            keep: false,
            harness_args: Vec::new(),
            workspace: None,
            env: Vec::new(),
            timeout: None,
            idle_timeout: None,
            stall_timeout: None,
            budget: Budget::default(),
            prices: None,
            verify_timeout: None,
        }
    }

    /// At most `jobs` attempts at once (default: all of them, at most 8).
    pub fn jobs(mut self, jobs: usize) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// How the winner is chosen (default [`Selection::FirstVerified`]).
    pub fn select(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// A command (`sh -c`, in the attempt's worktree) that must exit 0 for an attempt to win.
    pub fn verify(mut self, command: impl Into<String>) -> Self {
        self.verify = Some(command.into());
        self
    }

    /// Stops a verification after this long (it then fails).
    pub fn verify_timeout(mut self, timeout: Duration) -> Self {
        self.verify_timeout = Some(timeout);
        self
    }

    /// Each attempt is a whole auto-mode session (clarify, plan, execute, evaluate), with
    /// the verification as the session's too.
    pub fn auto(mut self, on: bool) -> Self {
        self.auto = on;
        self
    }

    /// An auto session's last turn (with [`FanOutOptions::auto`]).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    /// Keeps every attempt's worktree and branch, not only the winner's.
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// An argument passed verbatim to every attempt's harness, before the prompt.
    pub fn harness_arg(mut self, arg: impl Into<String>) -> Self {
        self.harness_args.push(arg.into());
        self
    }

    /// The workspace the attempts are isolated from (default: the current directory).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// An environment variable of every attempt's harness (e.g. its API endpoint).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Stops an attempt's harness turn after this long.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Stops an attempt's harness turn when it printed nothing for this long.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// Stops an attempt's harness turn when it emitted no event line for this long; the
    /// turn then fails `stalled` (see [`AgentOptions::stall_timeout`]). Zero: off (the
    /// default).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout).filter(|t| !t.is_zero());
        self
    }

    /// Caps each attempt's spend: an agent attempt's run as [`AgentOptions::budget`] caps it
    /// (the harness stopped, the turn failed `budget`), an auto attempt's whole session as
    /// [`AutoSessionOptions::max_cost_usd`] and [`AutoSessionOptions::max_tokens`] cap it.
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The prices for [`FanOutOptions::budget`] of harnesses that report tokens but no cost
    /// (default: [`PriceTable::builtin`]).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(prices);
        self
    }

    /// The attempts.
    #[must_use]
    pub fn attempts(&self) -> &[AttemptSpec] {
        &self.attempts
    }

    /// Every attempt's turn options, as they will be launched (without the worktree).
    fn turn(&self, n: usize, dir: &Path, in_repo: bool) -> AgentOptions {
        let spec = &self.attempts[n];
        let mut turn = AgentOptions::new(spec.harness, self.prompt.clone())
            .current_dir(dir)
            .label(format!("fanout attempt {n}"))
            // Its own sink: an attempt never writes into the caller's (or another's).
            .with_result_sink(ResultSink::Allocate, None)
            // Codex refuses a directory outside a repository; a private copy is one.
            .skip_git_repo_check(spec.harness == Harness::Codex && !in_repo);
        if let Some(m) = &spec.model {
            turn = turn.model(m);
        }
        for arg in &self.harness_args {
            turn = turn.harness_arg(arg);
        }
        for (k, v) in &self.env {
            turn = turn.env(k, v);
        }
        if let Some(t) = self.timeout {
            turn = turn.timeout(t);
        }
        if let Some(t) = self.idle_timeout {
            turn = turn.idle_timeout(t);
        }
        if let Some(t) = self.stall_timeout {
            turn = turn.stall_timeout(t);
        }
        turn = turn.budget(self.budget);
        if let Some(prices) = &self.prices {
            turn = turn.prices(prices.clone());
        }
        turn
    }

    /// The value `key` has for the harnesses: set here, else inherited.
    fn child_env(&self, key: &str) -> Option<OsString> {
        match self.env.iter().rev().find(|(k, _)| k == key) {
            Some((_, v)) => Some(v.clone()),
            None => std::env::var_os(key),
        }
        .filter(|v| !v.is_empty())
    }
}

/// Why a fan-out could not run (an attempt that failed is recorded, not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FanOutError {
    /// The attempts, jobs or selection are refused.
    #[error(transparent)]
    Setup(#[from] agentrun_core::fanout::FanOutError),
    /// An attempt's request cannot be passed to its harness.
    #[error("attempt {attempt}: {source}")]
    Launch {
        /// The attempt's index.
        attempt: usize,
        /// Why.
        #[source]
        source: LaunchError,
    },
    /// An attempt's options are invalid.
    #[error("attempt {attempt}: {source}")]
    Options {
        /// The attempt's index.
        attempt: usize,
        /// Why.
        #[source]
        source: agentrun_core::process::OptionsError,
    },
    /// No workspace was given and the current directory cannot be read.
    #[error("cannot read the current directory")]
    CurrentDir(#[source] std::io::Error),
    /// The workspace's repository cannot be used (no commit to branch from, git fails).
    #[error("the workspace's repository cannot be used")]
    Repository(#[source] IsolationError),
    /// The fan-out's directory in the store cannot be created.
    #[error("the fan-out directory cannot be created")]
    Store(#[source] FanOutDirError),
    /// The runtime could not run the fan-out's file work on its blocking pool.
    #[error("the fan-out's file work could not be run")]
    Blocking(#[source] std::io::Error),
}

/// A report while a fan-out runs.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum FanOutEvent<'a> {
    /// Attempt `attempt` is isolated in `worktree` and its agent starts.
    Started {
        /// The attempt's index.
        attempt: usize,
        /// Its worktree or private copy.
        worktree: &'a Path,
    },
    /// A progress line of the attempt's harness (or auto session).
    Progress {
        /// The attempt's index.
        attempt: usize,
        /// The line.
        line: &'a str,
    },
    /// The attempt's agent succeeded; its verification runs.
    Verifying {
        /// The attempt's index.
        attempt: usize,
    },
    /// The attempt has ended (its record may still lose its worktree at the cleanup).
    Ended {
        /// The attempt's index.
        attempt: usize,
        /// What it came to.
        record: &'a AttemptRecord,
    },
}

type Events = Arc<Mutex<dyn FnMut(FanOutEvent<'_>) + Send>>;
type StopInput<'a> = Pin<Box<dyn Stream<Item = ()> + Send + 'a>>;

/// What a fan-out came to.
#[derive(Debug)]
#[non_exhaustive]
pub struct FanOutRun {
    /// The record (also written to the store, unless [`FanOutRun::record_error`] says why
    /// not).
    pub record: FanOutRecord,
    /// The fan-out's directory in the store (worktrees, harness state, the record).
    pub dir: PathBuf,
    /// Whether the fan-out was interrupted.
    pub interrupted: bool,
    /// Why an attempt could not run, or its worktree could not be cleaned up: its index and
    /// the message.
    pub errors: Vec<(usize, String)>,
    /// Why the record could not be written to the store.
    pub record_error: Option<FanOutDirError>,
}

impl FanOutRun {
    /// 0 with a winner, 1 without, [`crate::exit::INTERRUPTED`] when interrupted (without a
    /// winner), [`crate::exit::FAILED`] when the record could not be kept.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        if self.record_error.is_some() {
            crate::exit::FAILED
        } else if self.record.winner.is_some() {
            0
        } else if self.interrupted {
            crate::exit::INTERRUPTED
        } else {
            1
        }
    }
}

/// One fan-out being described ([`Runner::fanout`]); awaiting it runs the fan-out.
#[must_use = "a fan-out does nothing until awaited"]
pub struct FanOutBuilder<'a, R> {
    runner: &'a Runner<R>,
    options: FanOutOptions,
    events: Option<Events>,
    stop: Option<StopInput<'a>>,
}

impl<R> std::fmt::Debug for FanOutBuilder<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanOutBuilder")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Runner<R> {
    /// Describes a fan-out; `.await` it to run it.
    pub fn fanout(&self, options: FanOutOptions) -> FanOutBuilder<'_, R> {
        FanOutBuilder {
            runner: self,
            options,
            events: None,
            stop: None,
        }
    }
}

impl<'a, R: Runtime> FanOutBuilder<'a, R> {
    /// Calls `events` as attempts start, report progress, verify and end (from the pump
    /// threads too: it must not block for long).
    pub fn on_event(mut self, events: impl FnMut(FanOutEvent<'_>) + Send + 'static) -> Self {
        self.events = Some(Arc::new(Mutex::new(events)));
        self
    }

    /// Interrupts the fan-out when `stop` resolves (e.g. when a client cancels the call).
    pub fn stop_on(self, stop: impl Future<Output = ()> + Send + 'a) -> Self {
        self.cancel_on(futures_lite::stream::once_future(stop))
    }

    /// Every item of `requests` interrupts the fan-out: the first stops every attempt (each
    /// harness's stop signals, its grace, then SIGKILL), a second kills them at once. The
    /// record is still written.
    pub fn cancel_on(mut self, requests: impl Stream<Item = ()> + Send + 'a) -> Self {
        self.stop = Some(Box::pin(requests));
        self
    }
}

impl<'a, R: Runtime> IntoFuture for FanOutBuilder<'a, R> {
    type Output = Result<FanOutRun, FanOutError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let events = self
            .events
            .unwrap_or_else(|| Arc::new(Mutex::new(|_: FanOutEvent<'_>| {})));
        Box::pin(run_fanout(self.runner, self.options, events, self.stop))
    }
}

fn emit(events: &Events, event: FanOutEvent<'_>) {
    (events.lock().unwrap_or_else(PoisonError::into_inner))(event);
}

/// Stop requests for one attempt: every [`StopSignal::request`] is one item of each stream.
#[derive(Clone, Default)]
struct StopSignal(Arc<Mutex<StopState>>);

#[derive(Default)]
struct StopState {
    requested: u32,
    wakers: Vec<Waker>,
}

impl StopSignal {
    fn request(&self) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.requested += 1;
        for w in s.wakers.drain(..) {
            w.wake();
        }
    }

    /// The requests from now on... and those made before: a stop asked for while the
    /// attempt was being isolated stops its agent as soon as it starts.
    fn stream(&self) -> impl Stream<Item = ()> + Send + 'static {
        let shared = self.0.clone();
        let mut seen = 0;
        futures_lite::stream::poll_fn(move |cx| {
            let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
            if s.requested > seen {
                seen += 1;
                return Poll::Ready(Some(()));
            }
            if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                s.wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

/// What every attempt's future shares.
struct Context {
    options: FanOutOptions,
    fanout_id: String,
    dir: FanOutDir,
    repo: Option<Repo>,
    workspace: PathBuf,
    events: Events,
}

/// What an attempt's agent part left for the record.
#[derive(Default)]
struct AgentData {
    worktree: Option<PathBuf>,
    branch: Option<String>,
    failure_kind: Option<FailureKind>,
    usage: Option<Usage>,
    artifacts: Vec<String>,
    session_id: Option<String>,
    changes: Option<Changes>,
    error: Option<String>,
}

enum Done {
    Agent {
        n: usize,
        end: AgentEnd,
        data: Box<AgentData>,
    },
    Verified {
        n: usize,
        end: VerifyEnd,
        record: VerificationRecord,
    },
}

type Task<'a> = Pin<Box<dyn Future<Output = Done> + Send + 'a>>;

enum Next {
    Done(Done),
    Interrupt,
}

/// The first of: an interrupt, a task's end.
async fn next(tasks: &mut Vec<Task<'_>>, stop: &mut Option<StopInput<'_>>) -> Next {
    futures_lite::future::poll_fn(|cx| {
        if let Some(s) = stop.as_mut() {
            match s.as_mut().poll_next(cx) {
                Poll::Ready(Some(())) => return Poll::Ready(Next::Interrupt),
                Poll::Ready(None) => *stop = None,
                Poll::Pending => {}
            }
        }
        for i in 0..tasks.len() {
            if let Poll::Ready(done) = tasks[i].as_mut().poll(cx) {
                drop(tasks.swap_remove(i));
                return Poll::Ready(Next::Done(done));
            }
        }
        Poll::Pending
    })
    .await
}

async fn run_fanout<R: Runtime>(
    runner: &Runner<R>,
    options: FanOutOptions,
    events: Events,
    mut stop: Option<StopInput<'_>>,
) -> Result<FanOutRun, FanOutError> {
    let count = options.attempts.len();
    let jobs = options.jobs.unwrap_or_else(|| default_jobs(count));
    let mut machine = FanOut::new(count, jobs, options.selection, options.verify.is_some())?;
    // Every attempt's launch is checked before anything is created: a model or effort its
    // harness refuses would fail that attempt the same way every time.
    for n in 0..count {
        let run = options
            .turn(n, Path::new("."), true)
            .run_options()
            .map_err(|source| FanOutError::Launch { attempt: n, source })?;
        run.validate()
            .map_err(|source| FanOutError::Options { attempt: n, source })?;
    }
    let store = runner.store().clone();
    let given = options.workspace.clone();
    let fanout_id = new_fanout_id();
    let id = fanout_id.clone();
    let (workspace, repo, dir) = runner
        .runtime
        .spawn_blocking(move || {
            let workspace = match given {
                Some(dir) => dir,
                None => std::env::current_dir().map_err(FanOutError::CurrentDir)?,
            };
            let workspace = std::path::absolute(&workspace).map_err(FanOutError::CurrentDir)?;
            let repo = Repo::discover(&workspace).map_err(FanOutError::Repository)?;
            let dir = FanOutDir::create(&store, &id).map_err(FanOutError::Store)?;
            Ok::<_, FanOutError>((workspace, repo, dir))
        })
        .await
        .map_err(FanOutError::Blocking)??;

    let mut records: Vec<AttemptRecord> = options
        .attempts
        .iter()
        .map(|a| AttemptRecord::new(a.harness.name(), a.model.clone()))
        .collect();
    let ctx = Arc::new(Context {
        options,
        fanout_id,
        dir,
        repo,
        workspace,
        events,
    });
    let stops: Vec<StopSignal> = (0..count).map(|_| StopSignal::default()).collect();
    let mut started: Vec<Option<Instant>> = vec![None; count];
    let mut paths: Vec<Option<PathBuf>> = vec![None; count];
    let mut errors = Vec::new();
    let mut tasks: Vec<Task<'_>> = Vec::new();

    'run: loop {
        while let Some(action) = machine.poll_action() {
            match action {
                Action::Start(n) => {
                    started[n] = Some(runner.runtime.now());
                    tasks.push(Box::pin(attempt(
                        runner.clone(),
                        ctx.clone(),
                        n,
                        stops[n].clone(),
                    )));
                }
                Action::Verify(n) => {
                    emit(&ctx.events, FanOutEvent::Verifying { attempt: n });
                    let dir = paths[n].clone().unwrap_or_else(|| ctx.workspace.clone());
                    let command = ctx.options.verify.clone().unwrap_or_default();
                    tasks.push(Box::pin(verify(
                        runner.clone(),
                        n,
                        dir,
                        command,
                        ctx.options.verify_timeout,
                        stops[n].clone(),
                    )));
                }
                Action::Stop(n) => stops[n].request(),
                Action::Discard(n) if !ctx.options.keep => {
                    if let Err(e) = discard(runner, &ctx, &mut records[n]).await {
                        errors.push((n, e));
                    }
                }
                Action::Finish => break 'run,
                _ => {}
            }
        }
        match next(&mut tasks, &mut stop).await {
            Next::Interrupt => machine.handle_interrupt(),
            Next::Done(Done::Agent { n, end, data }) => {
                let r = &mut records[n];
                let data = *data;
                paths[n] = data
                    .worktree
                    .as_ref()
                    .map(|w| run_dir(w, ctx.repo.as_ref()));
                r.worktree = data.worktree.map(|w| w.display().to_string());
                r.branch = data.branch;
                r.failure_kind = data.failure_kind;
                r.usage = data.usage;
                r.artifacts = data.artifacts;
                r.session_id = data.session_id;
                r.changes = data.changes;
                if let Some(e) = data.error {
                    errors.push((n, e));
                }
                r.duration_ms = elapsed_ms(runner, started[n]);
                machine.handle_agent_end(n, end);
                finish_record(&machine, r, n, &ctx.events);
            }
            Next::Done(Done::Verified { n, end, record }) => {
                let r = &mut records[n];
                r.verification = Some(record);
                r.duration_ms = elapsed_ms(runner, started[n]);
                machine.handle_verification(n, end);
                finish_record(&machine, r, n, &ctx.events);
            }
        }
    }

    for (n, r) in records.iter_mut().enumerate() {
        r.status = machine.status(n).unwrap_or(AttemptStatus::NotStarted);
        r.verified = machine.verified(n);
    }
    let winner = machine.winner();
    let record = FanOutRecord::new(ctx.fanout_id.clone(), records, winner);
    let (dir, to_write) = (ctx.dir.clone(), record.clone());
    let record_error = match runner
        .runtime
        .spawn_blocking(move || dir.write_record(&to_write))
        .await
    {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(e) => Some(FanOutDirError::Job(e)),
    };
    Ok(FanOutRun {
        record,
        dir: ctx.dir.path().to_owned(),
        interrupted: machine.interrupted(),
        errors,
        record_error,
    })
}

/// Removes a losing attempt's worktree (and its branch), as soon as it has lost: a worktree
/// left until the end would slow every later attempt's git commands, which walk them all.
/// Its work was kept as an artifact before; the record then names no worktree.
async fn discard<R: Runtime>(
    runner: &Runner<R>,
    ctx: &Context,
    r: &mut AttemptRecord,
) -> Result<(), String> {
    let Some(path) = r.worktree.clone() else {
        return Ok(());
    };
    let (repo, branch) = (ctx.repo.clone(), r.branch.clone());
    let removed = runner
        .runtime
        .spawn_blocking(move || match (repo, branch) {
            (Some(repo), Some(branch)) => repo.remove(Path::new(&path), &branch),
            _ => std::fs::remove_dir_all(&path).map_err(|source| IsolationError::Io {
                what: "cannot remove",
                path: PathBuf::from(&path),
                source,
            }),
        })
        .await;
    match removed {
        Ok(Ok(())) => {
            r.worktree = None;
            r.branch = None;
            Ok(())
        }
        Ok(Err(e)) => Err(crate::error_chain(&e)),
        Err(e) => Err(crate::error_chain(&e)),
    }
}

/// Where the attempt's agent runs in its worktree: at the workspace's place in the
/// repository (a subdirectory stays a subdirectory).
fn run_dir(worktree: &Path, repo: Option<&Repo>) -> PathBuf {
    match repo {
        Some(repo) if !repo.prefix.as_os_str().is_empty() => worktree.join(&repo.prefix),
        _ => worktree.to_owned(),
    }
}

fn elapsed_ms<R: Runtime>(runner: &Runner<R>, start: Option<Instant>) -> u64 {
    start.map_or(0, |s| {
        u64::try_from(
            runner
                .runtime
                .now()
                .saturating_duration_since(s)
                .as_millis(),
        )
        .unwrap_or(u64::MAX)
    })
}

/// Copies the machine's view of attempt `n` into its record and reports it once it has ended.
fn finish_record(machine: &FanOut, r: &mut AttemptRecord, n: usize, events: &Events) {
    r.status = machine.status(n).unwrap_or(r.status);
    r.verified = machine.verified(n);
    if r.status.is_final() {
        emit(
            events,
            FanOutEvent::Ended {
                attempt: n,
                record: r,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::StreamExt as _;

    #[test]
    fn attempts_parse_as_harness_and_model() {
        let a = AttemptSpec::parse("claude:opus").unwrap();
        assert_eq!(
            (a.harness, a.model.as_deref()),
            (Harness::Claude, Some("opus"))
        );
        let b = AttemptSpec::parse("opencode:prov/model:x").unwrap();
        assert_eq!(b.model.as_deref(), Some("prov/model:x"));
        assert_eq!(AttemptSpec::parse("codex").unwrap().model, None);
        assert!(AttemptSpec::parse("nope:x").is_err());
        assert!(AttemptSpec::parse("claude:").is_err());
        assert_eq!(a.label(), "claude:opus");
    }

    #[test]
    fn a_stop_asked_for_before_the_stream_exists_is_delivered() {
        let stop = StopSignal::default();
        stop.request();
        let mut stream = Box::pin(stop.stream());
        assert_eq!(
            futures_lite::future::block_on(stream.next()),
            Some(()),
            "an early stop is not lost"
        );
        stop.request();
        assert_eq!(futures_lite::future::block_on(stream.next()), Some(()));
    }
}
