//! Auto mode on the process driver: [`AutoModeRunner`] runs one harness turn per prompt,
//! [`AutoModeChannel`] wraps the core's `AutoMode` machine with a session directory.
//! `agentrun_core::turn::run_session_loop` drives the two.
//!
//! The runner is deliberately dumb: it runs the turn as one agent call (`Runner::agent`: the
//! registry invocation, live interpretation, output retained as artifacts, the harness's
//! retained record read), with a result sink for the verdict, and hands back a `TurnOutput`. A harness that ran and exited non-zero is `Ok`
//! with its code; only failing to start it or to capture its output is a `TurnError`, and a
//! stop request (Ctrl-C) is `TurnError::Interrupted`. After the first turn it resumes the
//! harness session decoded from the stream, so the agent keeps its context.
//!
//! The channel is authoritative for the control flow: it feeds the machine, carries out its
//! actions (state persisted, log appended, appended instructions collected and archived,
//! verification run with `sh -c` in the workspace) and answers the loop. File work runs on
//! the runtime's blocking pool.

use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use agentrun_core::PreviewLimits;
use agentrun_core::auto_mode::{Action, AutoMode, AutoModeState, VerificationResult};
use agentrun_core::harness::Harness;
use agentrun_core::process::{ProcessResult, RunOptions, RunOutcome};
use agentrun_core::sink::ResultSink;
use agentrun_core::turn::{AgentSession, Channel, ChannelError, NextPrompt, TurnError, TurnOutput};
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

/// What a harness turn is launched with.
#[derive(Debug, Clone, Default)]
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
    harness: Harness,
    launch: HarnessLaunch,
    session_id: String,
    resume: Option<String>,
    stop: Option<StopRequests<'a>>,
    progress: Option<ProgressSink>,
}

impl<R> std::fmt::Debug for AutoModeRunner<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoModeRunner")
            .field("harness", &self.harness)
            .field("session_id", &self.session_id)
            .field("resume", &self.resume)
            .finish_non_exhaustive()
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
        AutoModeRunner {
            runner,
            harness,
            launch,
            session_id: session_id.into(),
            resume: None,
            stop: None,
            progress: None,
        }
    }

    /// Resumes this harness session on the next turn (a continued auto-mode session).
    #[must_use]
    pub fn resuming(mut self, harness_session_id: Option<String>) -> Self {
        self.resume = harness_session_id;
        self
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

    /// The harness session the next turn resumes.
    #[must_use]
    pub fn harness_session_id(&self) -> Option<&str> {
        self.resume.as_deref()
    }

    fn options(&self, prompt: &str) -> AgentOptions {
        let launch = &self.launch;
        let mut options = AgentOptions::new(self.harness, prompt).with_result_sink(
            ResultSink::Allocate,
            launch.sink_var.as_deref().map(std::ffi::OsStr::new),
        );
        if let Some(dir) = &launch.workspace {
            options = options.current_dir(dir);
        }
        if let Some(model) = &launch.model {
            options = options.model(model);
        }
        if let Some(effort) = &launch.effort {
            options = options.effort(effort);
        }
        if let Some(id) = &self.resume {
            options = options.resume(id);
        }
        for arg in &launch.harness_args {
            options = options.harness_arg(arg);
        }
        for (key, value) in &launch.env {
            options = options.env(key, value);
        }
        if let Some(t) = launch.turn_timeout {
            options = options.timeout(t);
        }
        if let Some(t) = launch.idle_timeout {
            options = options.idle_timeout(t);
        }
        options
    }
}

impl<R: Runtime> AgentSession for AutoModeRunner<'_, R> {
    async fn run_turn(&mut self, prompt: &str) -> Result<TurnOutput, TurnError> {
        let mut turn = self.runner.agent(self.options(prompt));
        if let Some(progress) = &self.progress {
            let progress = progress.clone();
            turn = turn.on_progress(move |line| {
                (progress.lock().unwrap_or_else(PoisonError::into_inner))(line);
            });
        }
        if let Some(stop) = &self.stop {
            turn = turn.cancel_on(stop.stream());
        }
        let run = turn.await.map_err(|e| turn_error(self.harness, e))?;
        let result = &run.process;
        if let Some(fault) = result.record.faults.first() {
            return Err(TurnError::Capture(fault.message.clone()));
        }
        let artifacts = artifact_uris(result);
        let Some(completion) = &run.completion else {
            // Stopped: by a stop request (Ctrl-C), or by a timeout (a failed turn, 124).
            if result.outcome == RunOutcome::Cancelled {
                return Err(TurnError::Interrupted);
            }
            return Ok(TurnOutput::from_text(result.answer())
                .with_exit_code(
                    crate::exit::turn_exit_code(&run).unwrap_or(i32::from(crate::exit::TIMED_OUT)),
                )
                .with_models(run.observed_models.clone())
                .with_artifacts(artifacts));
        };
        if let Some(id) = &completion.outcome.session_id {
            self.resume = Some(id.clone());
        }
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
        other => TurnError::Capture(other.to_string()),
    }
}

fn artifact_uris(result: &ProcessResult) -> Vec<String> {
    result
        .record
        .streams()
        .iter()
        .filter(|s| s.bytes > 0)
        .map(|s| result.record.stream_uri(s).to_string())
        .collect()
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
            .map_err(|e| ChannelError::State(e.to_string()))?
            .map_err(|e| ChannelError::State(e.to_string()))
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
                    self.machine
                        .handle_appended(now, files)
                        .map_err(|e| ChannelError::State(e.to_string()))?;
                }
                Action::ArchiveAppended(names) => {
                    let dir = self.dir.clone();
                    self.blocking(move || dir.archive_instructions(&names))
                        .await?;
                }
                Action::RunVerification { command } => {
                    let result = self.verify(&command).await;
                    let now = SystemTime::now();
                    self.machine
                        .handle_verification(now, result)
                        .map_err(|e| ChannelError::State(e.to_string()))?;
                }
                Action::RunTurn { prompt, .. } => return Ok(Some(prompt)),
                other => {
                    return Err(ChannelError::Step(format!(
                        "unsupported auto-mode action {other:?}"
                    )));
                }
            }
        }
        Ok(None)
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
                output: format!("the verification could not be run: {e}"),
                artifacts: Vec::new(),
            },
        }
    }
}

impl<R: Runtime> Channel for AutoModeChannel<'_, R> {
    fn id(&self) -> &str {
        &self.machine.state().session_id
    }

    async fn publish_output(&mut self, output: &TurnOutput) -> Result<(), ChannelError> {
        let now = SystemTime::now();
        self.machine
            .handle_turn_finished(now, output)
            .map_err(|e| ChannelError::State(e.to_string()))?;
        match self.drain().await? {
            None => Ok(()),
            Some(_) => Err(ChannelError::Step(
                "auto mode asked for a turn before the next prompt request".to_owned(),
            )),
        }
    }

    async fn next_prompt(&mut self) -> Result<NextPrompt, ChannelError> {
        let now = SystemTime::now();
        self.machine
            .handle_listen(now)
            .map_err(|e| ChannelError::State(e.to_string()))?;
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
