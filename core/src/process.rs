//! Process run descriptions and results, shared by every process driver.
//!
//! These are plain values: the drivers (agentrun-smol, agentrun-tokio) turn a [`RunOptions`]
//! into a child process and assemble a [`ProcessResult`] from what happened.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capture::CaptureStatus;
use crate::harness::StopSignal;
use crate::limits::PreviewLimits;
use crate::record::{ArtifactUris, ResultRecord, StreamRecord};
use crate::sink::{DEFAULT_SINK_CAP, DEFAULT_SINK_VAR, NotReadReason, ResultSink, SinkOutcome};
use crate::stream::OutputDeclaration;

/// Default grace between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// What the child's standard input is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StdinMode {
    /// `/dev/null` (the default).
    #[default]
    Null,
    /// These bytes, then end of file.
    Bytes(Vec<u8>),
    /// The runner's own standard input (a pipe or a file: the drivers refuse a terminal,
    /// which the child, in a process group of its own, could not read).
    Inherit,
    /// The file at this path: a regular file (which the child reads itself), or a FIFO, a
    /// pipe (`/dev/stdin`, `<(cmd)`) or a character device that is not a terminal, whose
    /// bytes the driver passes on as they come. The drivers open it without waiting for a
    /// writer, before the spawn, and refuse anything else (a directory, a socket, a
    /// terminal) by its type; a FIFO that no writer ever opens never delays the run's end.
    File(PathBuf),
}

/// Everything needed to run one process: argv (never a shell), environment changes, stdin,
/// output declaration and limits, timeouts.
///
/// A builder, as the standard library's `Command` is: [`RunOptions::new`] and the setters describe the
/// run, the `get_*` methods read it back.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Program to execute (looked up in `PATH` when it has no `/`).
    program: OsString,
    /// Arguments after the program.
    args: Vec<OsString>,
    /// Working directory (`None`: the runner's).
    current_dir: Option<PathBuf>,
    /// Environment changes in order: `Some` sets, `None` removes.
    env: Vec<(OsString, Option<OsString>)>,
    /// Standard input.
    stdin: StdinMode,
    /// Output declaration; stdout and stderr are captured as the streams `stdout`/`stderr`.
    declaration: OutputDeclaration,
    /// Preview limits.
    limits: PreviewLimits,
    /// Wall-clock timeout.
    timeout: Option<Duration>,
    /// Idle timeout: the child is stopped when no captured stream produced output for this
    /// long.
    idle_timeout: Option<Duration>,
    /// Grace after each stop signal before the next one (and SIGKILL).
    kill_grace: Duration,
    /// The signals that stop the child's group on a timeout or cancellation, in order, each
    /// followed by the grace period; then SIGKILL. Default: SIGTERM alone.
    stop_signals: Vec<StopSignal>,
    /// Leave what the child started in its process group running when the child exits by
    /// itself (daemons started on purpose). Default `false`: at the end of the run whatever is
    /// left of the group is stopped like a child (stop signals, grace, SIGKILL). Processes
    /// still holding the run's output pipes after the drain are stopped either way, and a
    /// timeout or cancellation stops the whole group.
    keep_background: bool,
    /// The caller's label for this process (e.g. `agent-3`), returned in the result so runs
    /// can be told apart in logs; `None` by default.
    label: Option<String>,
    /// The clean result channel (docs/result-channel.md); `None`: not requested, and the variable
    /// is removed from the child's environment.
    result_sink: Option<ResultSink>,
    /// The variable the sink path is exported in (and removed when not requested).
    sink_var: OsString,
    /// Largest sink accepted, in bytes.
    sink_cap: u64,
}

/// Why run options were refused (before anything was spawned).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// The caller's environment changes set the result-sink variable.
    #[error(
        "the environment of the child may not set {var:?}: the runner owns that variable; \
         request the clean result channel with RunOptions::with_result_sink instead"
    )]
    SinkVarInEnv {
        /// The variable.
        var: String,
    },
    /// The result-sink variable name is not a portable variable name, or one the child
    /// needs for itself (`PATH`, `HOME`, `LD_*`, …).
    #[error("invalid result-sink variable name {var:?}: {why}")]
    InvalidSinkVar {
        /// The name as given.
        var: String,
        /// What is wrong with it.
        why: String,
    },
    /// An environment change whose key cannot name a variable.
    #[error(
        "invalid environment variable name {key:?}: it must be non-empty and contain no '=' or \
         NUL (set the value separately)"
    )]
    InvalidEnvKey {
        /// The key as given.
        key: String,
    },
    /// A caller-supplied sink path is relative (the child may run in another directory).
    #[error("the result-sink path {} must be absolute", .path.display())]
    RelativeSinkPath {
        /// The path as given.
        path: PathBuf,
    },
    /// A timeout of zero.
    #[error("{which} must be greater than zero")]
    ZeroTimeout {
        /// `"timeout"` or `"idle timeout"`.
        which: &'static str,
    },
    /// A timeout or grace period longer than [`MAX_RUN_DURATION`].
    #[error("{which} must be at most {} seconds (ten years)", MAX_RUN_DURATION.as_secs())]
    DurationTooLong {
        /// `"timeout"`, `"idle timeout"` or `"kill grace"`.
        which: &'static str,
    },
    /// The program and its arguments are longer than [`MAX_COMMAND_BYTES`].
    #[error(
        "the command is {bytes} bytes long (as UTF-8, one byte more per argument); it may be \
         at most {MAX_COMMAND_BYTES} (1 MiB): pass large inputs on stdin or in a file"
    )]
    CommandTooLong {
        /// Its length, as [`command_bytes`] counts it.
        bytes: usize,
    },
    /// The label ([`RunOptions::label`]) is longer than [`MAX_LABEL_BYTES`].
    #[error("the label is {bytes} bytes long; it may be at most {MAX_LABEL_BYTES}")]
    LabelTooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The working directory ([`RunOptions::current_dir`]) is longer than [`MAX_CWD_BYTES`].
    #[error("the working directory is {bytes} bytes long; it may be at most {MAX_CWD_BYTES}")]
    CurrentDirTooLong {
        /// Its length in bytes.
        bytes: usize,
    },
}

/// Longest label ([`RunOptions::label`]) a run accepts, in bytes: it goes into the run's
/// record ([`RunInfo::label`]).
pub const MAX_LABEL_BYTES: usize = 4096;

/// Longest working directory a run's record holds ([`RunInfo::cwd`]), in bytes: Linux's
/// `PATH_MAX`, the longest path a process can change into.
pub const MAX_CWD_BYTES: usize = 4096;

/// Longest command (program and arguments) a run accepts, as [`command_bytes`] counts it:
/// 1 MiB. Half of Linux's usual limit for arguments and environment together, and the command
/// goes into the run's record, whose size is bounded
/// ([`MAX_RECORD_BYTES`](crate::record::MAX_RECORD_BYTES)).
pub const MAX_COMMAND_BYTES: usize = 1 << 20;

/// The length of a command as [`MAX_COMMAND_BYTES`] bounds it: the UTF-8 bytes of every word
/// plus one per word (its terminator when it is executed, and what an empty word still costs
/// in a record).
pub fn command_bytes<S: AsRef<str>>(words: &[S]) -> usize {
    words.iter().map(|w| w.as_ref().len() + 1).sum()
}

/// The longest timeout, idle timeout or kill grace a run accepts: ten years. Longer values
/// mean "never" in practice, and bounding them keeps every instant the run lifecycle computes
/// (`now + duration`) representable, so no input can make it overflow.
pub const MAX_RUN_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

impl RunOptions {
    /// Runs `program` with no arguments, stdin null, stdout and stderr captured.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            current_dir: None,
            env: Vec::new(),
            stdin: StdinMode::Null,
            declaration: OutputDeclaration::stdout_stderr(),
            limits: PreviewLimits::default(),
            timeout: None,
            idle_timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            stop_signals: vec![StopSignal::Terminate],
            keep_background: false,
            label: None,
            result_sink: None,
            sink_var: OsString::from(DEFAULT_SINK_VAR),
            sink_cap: DEFAULT_SINK_CAP,
        }
    }

    /// Checks the options before anything is spawned: the environment changes may not set the
    /// sink variable, whose name must be valid; a caller sink path must be absolute;
    /// timeouts must be non-zero; timeouts and the kill grace at most [`MAX_RUN_DURATION`];
    /// the command at most [`MAX_COMMAND_BYTES`], the label at most [`MAX_LABEL_BYTES`], the
    /// working directory at most [`MAX_CWD_BYTES`].
    pub fn validate(&self) -> Result<(), OptionsError> {
        let bytes = command_bytes(&self.command());
        if bytes > MAX_COMMAND_BYTES {
            return Err(OptionsError::CommandTooLong { bytes });
        }
        if let Some(label) = &self.label
            && label.len() > MAX_LABEL_BYTES
        {
            return Err(OptionsError::LabelTooLong { bytes: label.len() });
        }
        if let Some(dir) = &self.current_dir
            && dir.as_os_str().len() > MAX_CWD_BYTES
        {
            return Err(OptionsError::CurrentDirTooLong {
                bytes: dir.as_os_str().len(),
            });
        }
        if let Some(why) = crate::sink::sink_var_problem(self.sink_var.as_encoded_bytes()) {
            return Err(OptionsError::InvalidSinkVar {
                var: self.sink_var.to_string_lossy().into_owned(),
                why,
            });
        }
        // A key with '=' would smuggle a value past the check below ("VAR=x" is written out as
        // VAR=x=…), and an empty or NUL key cannot be an environment entry at all.
        if let Some((key, _)) = self.env.iter().find(|(key, _)| {
            let k = key.as_encoded_bytes();
            k.is_empty() || k.contains(&b'=') || k.contains(&0)
        }) {
            return Err(OptionsError::InvalidEnvKey {
                key: key.to_string_lossy().into_owned(),
            });
        }
        if self
            .env
            .iter()
            .any(|(key, value)| value.is_some() && *key == self.sink_var)
        {
            return Err(OptionsError::SinkVarInEnv {
                var: self.sink_var.to_string_lossy().into_owned(),
            });
        }
        if let Some(ResultSink::Path(path)) = &self.result_sink
            && !path.is_absolute()
        {
            return Err(OptionsError::RelativeSinkPath { path: path.clone() });
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(OptionsError::ZeroTimeout { which: "timeout" });
        }
        if self.idle_timeout == Some(Duration::ZERO) {
            return Err(OptionsError::ZeroTimeout {
                which: "idle timeout",
            });
        }
        for (which, duration) in [
            ("timeout", self.timeout),
            ("idle timeout", self.idle_timeout),
            ("kill grace", Some(self.kill_grace)),
        ] {
            if duration.is_some_and(|d| d > MAX_RUN_DURATION) {
                return Err(OptionsError::DurationTooLong { which });
            }
        }
        Ok(())
    }

    /// The program and its arguments as a run's record holds them: lossily decoded as UTF-8.
    pub fn command(&self) -> Vec<String> {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The program to execute.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// Replaces the program to execute (the arguments stay).
    #[must_use = "the builder returns the changed value"]
    pub fn program(mut self, program: impl AsRef<OsStr>) -> Self {
        self.program = program.as_ref().to_owned();
        self
    }

    /// The arguments after the program.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// The working directory (`None`: the runner's).
    pub fn get_current_dir(&self) -> Option<&Path> {
        self.current_dir.as_deref()
    }

    /// The environment changes in order: `Some` sets, `None` removes.
    pub fn get_envs(&self) -> &[(OsString, Option<OsString>)] {
        &self.env
    }

    /// Standard input.
    pub fn get_stdin(&self) -> &StdinMode {
        &self.stdin
    }

    /// Standard input, for a driver that takes what it owns (moves the bytes out rather than
    /// copying them).
    pub fn get_stdin_mut(&mut self) -> &mut StdinMode {
        &mut self.stdin
    }

    /// The output declaration: stdout and stderr are captured as the streams
    /// `stdout`/`stderr`.
    pub fn get_declaration(&self) -> &OutputDeclaration {
        &self.declaration
    }

    /// The preview limits.
    pub fn get_limits(&self) -> PreviewLimits {
        self.limits
    }

    /// The wall-clock timeout.
    pub fn get_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The idle timeout: the child is stopped when no captured stream produced output for
    /// this long.
    pub fn get_idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// The grace after each stop signal before the next one (and SIGKILL).
    pub fn get_kill_grace(&self) -> Duration {
        self.kill_grace
    }

    /// The signals that stop the child's group on a timeout or cancellation, in order, each
    /// followed by the grace; then SIGKILL. Default: SIGTERM alone.
    pub fn get_stop_signals(&self) -> &[StopSignal] {
        &self.stop_signals
    }

    /// Whether what the child started in its process group is left running when the child
    /// exits by itself ([`RunOptions::keep_background`]).
    pub fn get_keep_background(&self) -> bool {
        self.keep_background
    }

    /// The caller's label for this process.
    pub fn get_label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The clean result channel (`None`: not requested).
    pub fn get_result_sink(&self) -> Option<&ResultSink> {
        self.result_sink.as_ref()
    }

    /// The variable the sink path is exported in.
    pub fn get_sink_var(&self) -> &OsStr {
        &self.sink_var
    }

    /// The largest sink accepted, in bytes.
    pub fn get_sink_cap(&self) -> u64 {
        self.sink_cap
    }

    /// Adds one argument.
    #[must_use = "the builder returns the changed value"]
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets the working directory.
    #[must_use = "the builder returns the changed value"]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets an environment variable for the child.
    #[must_use = "the builder returns the changed value"]
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable from the child's environment.
    #[must_use = "the builder returns the changed value"]
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Sets standard input.
    #[must_use = "the builder returns the changed value"]
    pub fn stdin(mut self, stdin: StdinMode) -> Self {
        self.stdin = stdin;
        self
    }

    /// Sets the preview limits.
    #[must_use = "the builder returns the changed value"]
    pub fn limits(mut self, limits: PreviewLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the wall-clock timeout.
    #[must_use = "the builder returns the changed value"]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the idle timeout: stop the child when no output arrived on any captured stream
    /// for this long.
    #[must_use = "the builder returns the changed value"]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Sets the grace between SIGTERM and SIGKILL.
    #[must_use = "the builder returns the changed value"]
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Labels the process (returned as [`ProcessResult::label`]).
    #[must_use = "the builder returns the changed value"]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the stop signals, sent in order with the grace period after each, then SIGKILL
    /// (e.g. a harness's `Harness::stop_signals`, SIGINT then SIGTERM, so the CLI can finish
    /// its session record). An empty list means SIGKILL at once.
    #[must_use = "the builder returns the changed value"]
    pub fn stop_signals(mut self, signals: &[StopSignal]) -> Self {
        self.stop_signals = signals.to_vec();
        self
    }

    /// Keeps (`true`) or stops (`false`, the default) what the child leaves running in its
    /// process group when it exits by itself ([`RunOptions::keep_background`]).
    #[must_use = "the builder returns the changed value"]
    pub fn keep_background(mut self, keep: bool) -> Self {
        self.keep_background = keep;
        self
    }

    /// Requests the clean result channel: the sink path is exported to the child in
    /// [`sink_var`](Self::sink_var) and read back verbatim after a normal exit.
    #[must_use = "the builder returns the changed value"]
    pub fn with_result_sink(mut self, sink: ResultSink) -> Self {
        self.result_sink = Some(sink);
        self
    }

    /// Names the variable the sink path is exported in (default `AGENTRUN_RESULT_SINK`; e.g.
    /// `AMPLIHACK_RESULT_SINK` for agents honouring that contract).
    #[must_use = "the builder returns the changed value"]
    pub fn sink_var(mut self, name: impl AsRef<OsStr>) -> Self {
        self.sink_var = name.as_ref().to_owned();
        self
    }

    /// Sets the largest sink accepted, in bytes (default 16 MiB).
    #[must_use = "the builder returns the changed value"]
    pub fn sink_cap(mut self, cap: u64) -> Self {
        self.sink_cap = cap;
        self
    }
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
// Exhaustive on purpose: a Unix process ends with a code or by a signal, nothing else.
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The shell convention: the code, or 128 + signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Self::Code(c) => c,
            Self::Signal(s) => 128 + s,
        }
    }
}

/// What a process run was and how it ended, kept in its record
/// ([`crate::ResultRecord::run`]) so a run can be listed and shown again without the
/// caller's memory of it. Times are the driver's (the core reads no clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The program and its arguments, lossily decoded as UTF-8.
    pub command: Vec<String>,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// How the child ended: its exit code, or the signal it died of (a child agentrun stopped
    /// shows the stop signal); `None` when its status could not be read.
    pub exit: Option<Exit>,
    /// When the run started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// The directory it ran in (absolute, lossily decoded as UTF-8), at most
    /// [`MAX_CWD_BYTES`]; `None` when the driver could not tell (and in records written before
    /// it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The caller's label ([`RunOptions::label`]), at most [`MAX_LABEL_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunOutcome {
    /// The child exited by itself (any code or signal).
    Completed,
    /// The wall-clock timeout fired; the child's group was stopped.
    TimedOut,
    /// No output arrived for the idle timeout; the child's group was stopped.
    IdleTimedOut,
    /// The caller's stop future resolved (e.g. the CLI received SIGINT); the child's group was
    /// stopped.
    Cancelled,
}

impl RunOutcome {
    /// The status the capture is finalized with: a stopped run is incomplete.
    pub fn capture_status(self) -> CaptureStatus {
        match self {
            Self::Completed => CaptureStatus::Succeeded,
            Self::TimedOut | Self::IdleTimedOut | Self::Cancelled => CaptureStatus::Cancelled,
        }
    }

    /// Why the sink is not read for this outcome (`None`: it is read).
    pub fn sink_not_read(self) -> Option<NotReadReason> {
        match self {
            Self::Completed => None,
            Self::TimedOut => Some(NotReadReason::TimedOut),
            Self::IdleTimedOut => Some(NotReadReason::IdleTimedOut),
            Self::Cancelled => Some(NotReadReason::Cancelled),
        }
    }

    /// Whether a timeout stopped the run.
    pub fn timed_out(self) -> bool {
        matches!(self, Self::TimedOut | Self::IdleTimedOut)
    }

    /// How the run ended in one word, given how the child ended: a stopped run was
    /// cancelled, a completed one succeeded only with exit code 0.
    pub fn status(self, exit: Option<Exit>) -> RunStatus {
        match (self, exit) {
            (Self::TimedOut | Self::IdleTimedOut | Self::Cancelled, _) => RunStatus::Cancelled,
            (_, Some(Exit::Code(0))) => RunStatus::Succeeded,
            _ => RunStatus::Failed,
        }
    }

    /// Why the run has its [`status`](Self::status): `exit 1`, `killed by signal 9`, `timed
    /// out`, `idle timeout: no output`, `stopped by a signal`.
    pub fn reason(self, exit: Option<Exit>) -> String {
        match (self, exit) {
            (Self::TimedOut, _) => "timed out".to_owned(),
            (Self::IdleTimedOut, _) => "idle timeout: no output".to_owned(),
            (Self::Cancelled, _) => "stopped by a signal".to_owned(),
            (_, Some(Exit::Code(c))) => format!("exit {c}"),
            (_, Some(Exit::Signal(s))) => format!("killed by signal {s}"),
            (_, None) => "no exit status".to_owned(),
        }
    }
}

/// How a process run ended, in the one word the summary, the JSON and the run listing use.
/// (The record's own `capture_status` says whether the *output* was captured whole.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunStatus {
    /// The program exited with code 0.
    Succeeded,
    /// The program exited with another code, was killed by a signal, or its status is unknown.
    Failed,
    /// The run was stopped (timeout, idle timeout, stop request).
    Cancelled,
}

impl RunStatus {
    /// `succeeded`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one process run.
///
/// Serializes as the object `agentrun run --json` prints: the [`RunSummary`] members
/// (`run_id`, `status`, `reason`, `outcome`, `exit`, `pid`, `duration_ms`, `artifacts`),
/// then `model_text`, `result`, `sink`, `sink_cleanup_error` and `label` (each only when set)
/// and the whole `record`.
///
/// Plain public fields, read as they are; a driver makes one with [`ProcessResult::new`] and
/// sets the rest.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessResult {
    /// How the run ended.
    pub outcome: RunOutcome,
    /// How the child ended: its exit code, or the signal it died of (a child agentrun stopped
    /// shows the stop signal); `None` when its status could not be read.
    pub exit: Option<Exit>,
    /// Wall-clock duration of the run (serialized as `duration_ms`).
    pub duration: Duration,
    /// The terminal record (artifact references, counts, previews).
    pub record: ResultRecord,
    /// The clean answer from the result sink, verbatim; `Some` only when `sink` is
    /// [`SinkOutcome::Read`].
    pub result: Option<String>,
    /// What reading the result sink found.
    pub sink: SinkOutcome,
    /// Why the allocated sink directory could not be removed after the run (`None`: removed,
    /// or nothing to remove). What is left is owner-only and harmless, and `agentrun gc`
    /// removes it; the run's result is not affected. Serialized only when set.
    pub sink_cleanup_error: Option<String>,
    /// The child's operating-system process id (`None` if the runtime could not tell).
    pub pid: Option<u32>,
    /// The caller's label ([`RunOptions::label`]).
    pub label: Option<String>,
}

impl ProcessResult {
    /// A run that ended with `outcome` and `exit` after `duration`, its output in `record`;
    /// no result sink was requested, no process id and no label are known.
    pub fn new(
        outcome: RunOutcome,
        exit: Option<Exit>,
        duration: Duration,
        record: ResultRecord,
    ) -> Self {
        Self {
            outcome,
            exit,
            duration,
            record,
            result: None,
            sink: SinkOutcome::NotRequested,
            sink_cleanup_error: None,
            pid: None,
            label: None,
        }
    }

    /// The model-facing rendering of the output.
    pub fn model_text(&self) -> String {
        self.record.render()
    }

    /// The stdout stream's record, if declared.
    pub fn stdout(&self) -> Option<&StreamRecord> {
        self.record.stream("stdout")
    }

    /// The consumer idiom: the clean answer when the child wrote one, else the stdout preview.
    pub fn answer(&self) -> &str {
        match &self.result {
            Some(result) => result,
            None => self.stdout().map_or("", |s| s.preview.text.as_str()),
        }
    }

    /// The stderr stream's record, if declared.
    pub fn stderr(&self) -> Option<&StreamRecord> {
        self.record.stream("stderr")
    }

    /// How the run ended in one word ([`RunOutcome::status`]).
    pub fn status(&self) -> RunStatus {
        self.outcome.status(self.exit)
    }

    /// Why it ended so ([`RunOutcome::reason`]).
    pub fn reason(&self) -> String {
        self.outcome.reason(self.exit)
    }

    /// The run in brief: its id, how it ended, where its output is.
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            run_id: self.record.run_id.clone(),
            status: self.status(),
            reason: self.reason(),
            outcome: self.outcome,
            exit: self.exit,
            pid: self.pid,
            duration_ms: u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
            artifacts: self.record.artifact_uris(),
        }
    }
}

/// A process run in brief ([`ProcessResult::summary`]): the head of `agentrun run --json`
/// and the `run` member of `agentrun agent --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunSummary {
    /// The run id (the record's name in the store).
    pub run_id: String,
    /// How it ended in one word.
    pub status: RunStatus,
    /// Why (`exit 1`, `timed out`, …).
    pub reason: String,
    /// How the run ended.
    pub outcome: RunOutcome,
    /// How the child ended (`null` when it was stopped).
    pub exit: Option<Exit>,
    /// The child's process id.
    pub pid: Option<u32>,
    /// How long the run took, in milliseconds.
    pub duration_ms: u64,
    /// The URI of every stream, and of the manifest.
    pub artifacts: ArtifactUris,
}

impl Serialize for ProcessResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Full<'a> {
            #[serde(flatten)]
            summary: RunSummary,
            model_text: String,
            result: Option<&'a str>,
            sink: &'a SinkOutcome,
            #[serde(skip_serializing_if = "Option::is_none")]
            sink_cleanup_error: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            label: Option<&'a str>,
            record: &'a ResultRecord,
        }
        Full {
            summary: self.summary(),
            model_text: self.model_text(),
            result: self.result.as_deref(),
            sink: &self.sink,
            sink_cleanup_error: self.sink_cleanup_error.as_deref(),
            label: self.label.as_deref(),
            record: &self.record,
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests;
