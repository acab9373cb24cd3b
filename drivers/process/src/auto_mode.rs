//! Auto mode on the process driver: [`AutoModeRunner`] runs one harness turn per prompt,
//! [`AutoModeChannel`] wraps the core's `AutoMode` machine with a session directory.
//! `agentrun_core::turn::run_session_loop` drives the two.
//!
//! The runner is deliberately dumb: it runs the turn as one agent call (`Runner::agent`: the
//! registry invocation, live interpretation, output retained as artifacts, the harness's
//! retained record read), with a result sink for the verdict, and hands back a `TurnOutput`. A harness that ran and exited non-zero is `Ok`
//! with its code; only failing to start it or to capture its output is a `TurnError`, and a
//! stop request (Ctrl-C) is `TurnError::Interrupted`. It keeps no harness session of its
//! own: each turn resumes the one the channel names (`Channel::harness_session_id`, handed to
//! it by `run_session_loop`), which for auto mode is the one the machine recorded, so the
//! agent keeps its context and the id that is resumed is always the one persisted.
//!
//! The channel is authoritative for the control flow: it feeds the machine, carries out its
//! actions (state persisted, log appended, appended instructions collected and archived,
//! verification run with `sh -c` in the workspace) and answers the loop. File work runs on
//! the runtime's blocking pool.
//!
//! [`crate::auto_session::AutoSession`] builds both from a session's settings and runs them:
//! the one call a front end needs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use agentrun_core::PreviewLimits;
use agentrun_core::auto_mode::{Action, AutoMode, AutoModeState, VerificationResult};
use agentrun_core::capture::CaptureFault;
use agentrun_core::harness::Harness;
use agentrun_core::process::{ProcessResult, RunOptions, RunOutcome};
use agentrun_core::sink::ResultSink;
use agentrun_core::turn::{
    AgentSession, Channel, ChannelError, NextPrompt, SharedError, TurnError, TurnOutput,
};
use agentrun_fs::auto_session::SessionDir;
use futures_lite::Stream;

use crate::agent::{AgentError, AgentOptions};
use crate::driver::{Runner, Runtime};
use crate::exit::SpawnFailure;
use crate::live::RunError;

type StopStream<'a> = Pin<Box<dyn Stream<Item = ()> + Send + 'a>>;

/// Stop requests shared by a runner and a channel (only one of them runs a child at a time):
/// every item stops the child that is running.
#[derive(Clone)]
pub struct StopRequests<'a>(Arc<Mutex<StopStream<'a>>>);

impl std::fmt::Debug for StopRequests<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopRequests")
    }
}

impl<'a> StopRequests<'a> {
    /// Stop requests from `requests` (e.g. the signals a command line receives).
    pub fn new(requests: impl Stream<Item = ()> + Send + 'a) -> Self {
        StopRequests(Arc::new(Mutex::new(Box::pin(requests))))
    }

    fn stream(&self) -> impl Stream<Item = ()> + Send + 'a {
        let shared = self.0.clone();
        futures_lite::stream::poll_fn(move |cx| {
            let mut stream = shared.lock().unwrap_or_else(PoisonError::into_inner);
            match stream.as_mut().poll_next(cx) {
                Poll::Ready(None) => Poll::Pending,
                other => other,
            }
        })
    }
}

/// Receives live progress lines (the harness's decoded progress, the session's log lines).
pub type ProgressSink = Arc<Mutex<dyn FnMut(&str) + Send>>;

/// What a harness turn is launched with. Built with [`HarnessLaunch::new`] and its setters
/// (non-exhaustive, so that a setting added later is not a breaking change).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HarnessLaunch {
    /// Environment variables set for the harness (e.g. its API endpoint, or a `PATH` that
    /// finds it); a variable naming the result sink is refused by the runner.
    pub env: Vec<(String, String)>,
    /// The model to request.
    pub model: Option<String>,
    /// The reasoning effort to request.
    pub effort: Option<String>,
    /// Arguments passed verbatim before the prompt (e.g. a permission mode).
    pub harness_args: Vec<String>,
    /// The directory the harness runs in (default: the current one).
    pub workspace: Option<PathBuf>,
    /// The environment variable naming the result sink (default `AGENTRUN_RESULT_SINK`).
    pub sink_var: Option<String>,
    /// Stop a turn after this long (it then counts as exit code 124).
    pub turn_timeout: Option<Duration>,
    /// Stop a turn when it printed nothing for this long (exit code 124).
    pub idle_timeout: Option<Duration>,
}

/// Runs one harness turn per prompt; see the module documentation.
pub struct AutoModeRunner<'a, R> {
    runner: Runner<R>,
    /// Every turn's options but the prompt and the resume id (harness, model, effort, harness
    /// arguments, environment, workspace, timeouts, result sink), built once.
    turn: AgentOptions,
    session_id: String,
    /// The harness session the next turn continues, as the channel named it just before;
    /// that turn takes it, so no id outlives the turn it was named for.
    resume: Option<String>,
    stop: Option<StopRequests<'a>>,
    progress: Option<ProgressSink>,
}

impl<R> std::fmt::Debug for AutoModeRunner<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoModeRunner")
            .field("harness", &self.turn.harness())
            .field("session_id", &self.session_id)
            .field("resume", &self.resume)
            .finish_non_exhaustive()
    }
}

impl HarnessLaunch {
    /// A launch with nothing set: the harness's defaults, in the current directory.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets environment variable `key` to `value` for the harness.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The model to request.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The reasoning effort to request.
    #[must_use]
    pub fn effort(mut self, effort: impl Into<String>) -> Self {
        self.effort = Some(effort.into());
        self
    }

    /// Adds an argument passed verbatim before the prompt.
    #[must_use]
    pub fn harness_arg(mut self, arg: impl Into<String>) -> Self {
        self.harness_args.push(arg.into());
        self
    }

    /// The directory the harness runs in.
    #[must_use]
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The environment variable naming the result sink.
    #[must_use]
    pub fn sink_var(mut self, var: impl Into<String>) -> Self {
        self.sink_var = Some(var.into());
        self
    }

    /// Stops a turn after `timeout` (it then counts as exit code 124).
    #[must_use]
    pub fn turn_timeout(mut self, timeout: Duration) -> Self {
        self.turn_timeout = Some(timeout);
        self
    }

    /// Stops a turn that printed nothing for `idle` (exit code 124).
    #[must_use]
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// The options of every turn of `harness` launched this way (the prompt and the resume id
    /// are set per turn); consumes the launch, so each value is held once.
    pub(crate) fn into_turn(self, harness: Harness) -> AgentOptions {
        let mut options = AgentOptions::new(harness, String::new()).with_result_sink(
            ResultSink::Allocate,
            self.sink_var.as_deref().map(std::ffi::OsStr::new),
        );
        if let Some(dir) = self.workspace {
            options = options.current_dir(dir);
        }
        if let Some(model) = self.model {
            options = options.model(model);
        }
        if let Some(effort) = self.effort {
            options = options.effort(effort);
        }
        for arg in self.harness_args {
            options = options.harness_arg(arg);
        }
        for (key, value) in self.env {
            options = options.env(key, value);
        }
        if let Some(t) = self.turn_timeout {
            options = options.timeout(t);
        }
        if let Some(t) = self.idle_timeout {
            options = options.idle_timeout(t);
        }
        options
    }
}

impl<'a, R: Runtime> AutoModeRunner<'a, R> {
    /// A runner of `harness` turns for auto-mode session `session_id`, capturing into the
    /// runner's store.
    pub fn new(
        runner: Runner<R>,
        harness: Harness,
        launch: HarnessLaunch,
        session_id: impl Into<String>,
    ) -> Self {
        Self::with_turn(runner, launch.into_turn(harness), session_id.into())
    }

    /// A runner of turns with the options `turn` (its prompt is replaced by each turn's).
    pub(crate) fn with_turn(runner: Runner<R>, turn: AgentOptions, session_id: String) -> Self {
        AutoModeRunner {
            runner,
            turn,
            session_id,
            resume: None,
            stop: None,
            progress: None,
        }
    }

    /// Stops the running turn on every request (it then fails with
    /// `TurnError::Interrupted`).
    #[must_use]
    pub fn stop_on(mut self, stop: StopRequests<'a>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Sends the harness's live progress lines to `progress`.
    #[must_use]
    pub fn progress(mut self, progress: ProgressSink) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The options of the turn that runs `prompt`, resuming the harness session the channel
    /// named for it.
    fn options(&mut self, prompt: &str) -> AgentOptions {
        let options = self.turn.clone().prompt(prompt);
        match self.resume.take() {
            Some(id) => options.resume(id),
            None => options,
        }
    }
}

/// A capture fault of a turn's record, as an error (the record keeps it as data).
#[derive(Debug, thiserror::Error)]
#[error("{}{}", .0.stream.as_ref().map(|s| format!("stream {s}: ")).unwrap_or_default(), .0.message)]
struct CaptureFaulted(CaptureFault);

impl<R: Runtime> AgentSession for AutoModeRunner<'_, R> {
    async fn run_turn(&mut self, prompt: &str) -> Result<TurnOutput, TurnError> {
        let harness = self.turn.harness();
        let options = self.options(prompt);
        let mut turn = self.runner.agent(options);
        if let Some(progress) = &self.progress {
            let progress = progress.clone();
            turn = turn.on_progress(move |line| {
                (progress.lock().unwrap_or_else(PoisonError::into_inner))(line);
            });
        }
        if let Some(stop) = &self.stop {
            turn = turn.cancel_on(stop.stream());
        }
        let run = turn.await.map_err(|e| turn_error(harness, e))?;
        let result = &run.process;
        if let Some(fault) = result.record.faults.first() {
            return Err(TurnError::Capture(SharedError::new(CaptureFaulted(
                fault.clone(),
            ))));
        }
        let artifacts = artifact_uris(result);
        let Some(completion) = &run.completion else {
            // Stopped: by a stop request (Ctrl-C), or by a timeout (a failed turn, 124).
            if result.outcome == RunOutcome::Cancelled {
                return Err(TurnError::Interrupted);
            }
            let out = TurnOutput::from_text(result.answer())
                .with_exit_code(
                    crate::exit::turn_exit_code(&run).unwrap_or(i32::from(crate::exit::TIMED_OUT)),
                )
                .with_models(run.observed_models.clone())
                .with_artifacts(artifacts);
            // What the stopped turn spent as far as its stream said: it counts for the budget.
            return Ok(match run.stopped_usage {
                Some(usage) => out.with_usage(usage),
                None => out,
            });
        };
        let code = crate::exit::turn_exit_code(&run);
        let text = completion
            .outcome
            .final_message
            .clone()
            .unwrap_or_else(|| result.answer().to_owned());
        let mut out = TurnOutput::from_text(text)
            .with_models(completion.report.models.clone())
            .with_artifacts(artifacts);
        if let Some(code) = code {
            out = out.with_exit_code(code);
        }
        if let Some(answer) = &result.result {
            out = out.with_result(answer.clone());
        }
        if let Some(id) = &completion.outcome.session_id {
            out = out.with_harness_session_id(id.clone());
        }
        if let Some(kind) = completion.outcome.failure_kind {
            out = out.with_failure(kind, completion.outcome.retry_after);
        }
        // The session's running totals when the run's own share was computed from them: the
        // session ledger then also counts what stopped turns spent before this one.
        let report = &completion.report;
        if let Some(usage) = report.session_usage.as_ref().or(report.usage.as_ref()) {
            out = out.with_usage(usage.clone());
        }
        Ok(out)
    }

    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn continue_harness_session(&mut self, harness_session_id: Option<&str>) {
        self.resume = harness_session_id.map(str::to_owned);
    }
}

fn turn_error(harness: Harness, e: AgentError) -> TurnError {
    match e {
        AgentError::Run(RunError::Spawn { program, source }) => {
            let failure = SpawnFailure::classify(&program, &source);
            TurnError::Spawn {
                program: program.to_string_lossy().into_owned(),
                reason: failure.harness_reason(harness, &source),
                exit_code: i32::from(failure.exit_code()),
            }
        }
        other => TurnError::Capture(SharedError::new(other)),
    }
}

/// The URIs of a run's non-empty streams, as the reports list them.
pub(crate) fn artifact_uris(result: &ProcessResult) -> Vec<String> {
    let uris = result.record.nonempty_stream_uris();
    uris.iter().map(ToString::to_string).collect()
}

/// The auto-mode channel over a session directory; see the module documentation.
pub struct AutoModeChannel<'a, R> {
    machine: AutoMode,
    dir: SessionDir,
    runner: Runner<R>,
    runtime: R,
    stop: Option<StopRequests<'a>>,
    log: Option<ProgressSink>,
    verify_timeout: Option<Duration>,
}

impl<R> std::fmt::Debug for AutoModeChannel<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoModeChannel")
            .field("machine", &self.machine)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl<'a, R: Runtime> AutoModeChannel<'a, R> {
    /// A channel for `machine` (new or resumed) persisting into `dir`. Carries out the
    /// machine's first actions (the initial state and log line) before returning.
    pub async fn new(
        machine: AutoMode,
        dir: SessionDir,
        runner: Runner<R>,
        runtime: R,
    ) -> Result<Self, ChannelError> {
        let mut channel = AutoModeChannel {
            machine,
            dir,
            runner,
            runtime,
            stop: None,
            log: None,
            verify_timeout: None,
        };
        channel.drain().await?;
        Ok(channel)
    }

    /// Stops a running verification on every request.
    #[must_use]
    pub fn stop_on(mut self, stop: StopRequests<'a>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Sends every log line to `log` too (live progress per phase).
    #[must_use]
    pub fn log_to(mut self, log: ProgressSink) -> Self {
        self.log = Some(log);
        self
    }

    /// Stops a verification after this long (it then fails with code 124).
    #[must_use]
    pub fn verify_timeout(mut self, timeout: Duration) -> Self {
        self.verify_timeout = Some(timeout);
        self
    }

    /// The machine (status, exit code, abort, state).
    #[must_use]
    pub fn machine(&self) -> &AutoMode {
        &self.machine
    }

    /// The session directory.
    #[must_use]
    pub fn dir(&self) -> &SessionDir {
        &self.dir
    }

    /// The session's exit code: read [`AutoModeChannel::abort`] first.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        self.machine.exit_code()
    }

    /// `Some(reason)` exactly when a required phase failed.
    #[must_use]
    pub fn abort(&self) -> Option<&str> {
        self.machine.abort()
    }

    /// The persisted state.
    #[must_use]
    pub fn state(&self) -> &AutoModeState {
        self.machine.state()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> Result<T, agentrun_fs::SessionError> + Send + 'static,
    ) -> Result<T, ChannelError> {
        self.runtime
            .spawn_blocking(job)
            .await
            .map_err(|e| ChannelError::State(SharedError::new(e)))?
            .map_err(|e| ChannelError::State(SharedError::new(e)))
    }

    /// Carries out the machine's actions until it asks for a turn (returned) or has none.
    async fn drain(&mut self) -> Result<Option<String>, ChannelError> {
        while let Some(action) = self.machine.poll_action() {
            match action {
                Action::Log(line) => {
                    if let Some(log) = &self.log {
                        (log.lock().unwrap_or_else(PoisonError::into_inner))(&line);
                    }
                    let dir = self.dir.clone();
                    self.blocking(move || dir.append_log(&line)).await?;
                }
                Action::PersistState => {
                    let dir = self.dir.clone();
                    let state = self.machine.state().clone();
                    self.blocking(move || dir.write_state(&state)).await?;
                }
                Action::CollectAppended { max_files } => {
                    let dir = self.dir.clone();
                    let files = self
                        .blocking(move || dir.pending_instructions(max_files))
                        .await?;
                    let now = SystemTime::now();
                    self.machine.handle_appended(now, files)?;
                }
                Action::ArchiveAppended(names) => {
                    let dir = self.dir.clone();
                    self.blocking(move || dir.archive_instructions(&names))
                        .await?;
                }
                Action::RunVerification { command } => {
                    let result = self.verify(&command).await;
                    let now = SystemTime::now();
                    self.machine.handle_verification(now, result)?;
                }
                Action::RunTurn { prompt, .. } => return Ok(Some(prompt)),
                Action::WaitUntil(until) => {
                    self.wait_until(until).await?;
                    let now = SystemTime::now();
                    self.machine.handle_wait_over(now)?;
                }
                other => {
                    return Err(ChannelError::Step(format!(
                        "unsupported auto-mode action {other:?}"
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Sleeps until the wall-clock time `until` (on the runtime's timer), unless a stop
    /// request comes first: then [`ChannelError::Interrupted`], with the wait still in the
    /// persisted state for a continued session to finish.
    async fn wait_until(&self, until: SystemTime) -> Result<(), ChannelError> {
        let remaining = until
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        let sleep = self.runtime.sleep_until(self.runtime.now() + remaining);
        let stop = self.stop.as_ref().map(|stop| stop.stream());
        if crate::agent::wait_unless_stopped(sleep, stop).await {
            return Err(ChannelError::Interrupted);
        }
        Ok(())
    }

    /// Runs the verification command with `sh -c` in the workspace; a command that cannot
    /// be started is a failed verification saying why.
    async fn verify(&self, command: &str) -> VerificationResult {
        let mut options = RunOptions::new("sh")
            .args([OsString::from("-c"), OsString::from(command)])
            .label("auto verify")
            .limits(PreviewLimits {
                tail_lines: 20,
                ..PreviewLimits::default()
            });
        if let Some(dir) = &self.machine.state().settings.workspace {
            options = options.current_dir(dir);
        }
        if let Some(t) = self.verify_timeout {
            options = options.timeout(t);
        }
        let mut run = self.runner.run(options);
        if let Some(stop) = &self.stop {
            run = run.cancel_on(stop.stream());
        }
        match run.await {
            Ok(result) => VerificationResult {
                // The run's shell-style code; a stopped verification has none.
                exit_code: (result.outcome != RunOutcome::Cancelled)
                    .then(|| i32::from(crate::exit::run_exit_code(&result))),
                output: result.model_text(),
                artifacts: artifact_uris(&result),
            },
            Err(e) => VerificationResult {
                exit_code: None,
                output: format!(
                    "the verification could not be run: {}",
                    crate::error_chain(&e)
                ),
                artifacts: Vec::new(),
            },
        }
    }
}

impl<R: Runtime> Channel for AutoModeChannel<'_, R> {
    fn id(&self) -> &str {
        &self.machine.state().session_id
    }

    /// The machine's: the one owner of the harness session id.
    fn harness_session_id(&self) -> Option<&str> {
        self.machine.harness_session_to_resume()
    }

    async fn publish_output(&mut self, output: &TurnOutput) -> Result<(), ChannelError> {
        let now = SystemTime::now();
        self.machine.handle_turn_finished(now, output)?;
        match self.drain().await? {
            None => Ok(()),
            Some(_) => Err(ChannelError::Step(
                "auto mode asked for a turn before the next prompt request".to_owned(),
            )),
        }
    }

    async fn next_prompt(&mut self) -> Result<NextPrompt, ChannelError> {
        let now = SystemTime::now();
        self.machine.handle_listen(now)?;
        Ok(match self.drain().await? {
            Some(prompt) => NextPrompt::Ready(prompt),
            None if self.machine.is_closed() => NextPrompt::Closed,
            None => {
                return Err(ChannelError::Step(
                    "auto mode asked for no turn although the session is not finished".to_owned(),
                ));
            }
        })
    }
}
