//! Process run descriptions and results, shared by every process driver (SPEC §7).
//!
//! These are plain values: the drivers (agentrun-smol, agentrun-tokio) turn a [`RunOptions`]
//! into a child process and assemble a [`ProcessResult`] from what happened.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capture::CaptureStatus;
use crate::harness::StopSignal;
use crate::limits::PreviewLimits;
use crate::record::{ResultRecord, StreamRecord};
use crate::sink::{DEFAULT_SINK_CAP, DEFAULT_SINK_VAR, NotReadReason, ResultSink, SinkOutcome};
use crate::stream::OutputDeclaration;

/// Default grace between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// What the child's standard input is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StdinMode {
    /// `/dev/null` (the default).
    #[default]
    Null,
    /// These bytes, then end of file.
    Bytes(Vec<u8>),
    /// The runner's own standard input.
    Inherit,
}

/// Everything needed to run one process: argv (never a shell), environment changes, stdin,
/// output declaration and limits, timeouts.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Program to execute (looked up in `PATH` when it has no `/`).
    pub program: OsString,
    /// Arguments after the program.
    pub args: Vec<OsString>,
    /// Working directory (`None`: the runner's).
    pub current_dir: Option<PathBuf>,
    /// Environment changes in order: `Some` sets, `None` removes.
    pub env: Vec<(OsString, Option<OsString>)>,
    /// Standard input.
    pub stdin: StdinMode,
    /// Output declaration; stdout and stderr are captured as the streams `stdout`/`stderr`.
    pub declaration: OutputDeclaration,
    /// Preview limits.
    pub limits: PreviewLimits,
    /// Wall-clock timeout.
    pub timeout: Option<Duration>,
    /// Idle timeout: the child is stopped when no captured stream produced output for this
    /// long.
    pub idle_timeout: Option<Duration>,
    /// Grace after each stop signal before the next one (and SIGKILL).
    pub kill_grace: Duration,
    /// The signals that stop the child's group on a timeout or cancellation, in order, each
    /// followed by the grace period; then SIGKILL. Default: SIGTERM alone.
    pub stop_signals: Vec<StopSignal>,
    /// The caller's label for this process (e.g. `agent-3`), returned in the result so runs
    /// can be told apart in logs; `None` by default.
    pub label: Option<String>,
    /// The clean result channel (SPEC §6); `None`: not requested, and the variable is removed
    /// from the child's environment.
    pub result_sink: Option<ResultSink>,
    /// The variable the sink path is exported in (and removed when not requested).
    pub sink_var: OsString,
    /// Largest sink accepted, in bytes.
    pub sink_cap: u64,
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
            label: None,
            result_sink: None,
            sink_var: OsString::from(DEFAULT_SINK_VAR),
            sink_cap: DEFAULT_SINK_CAP,
        }
    }

    /// Checks the options before anything is spawned: the environment changes may not set the
    /// sink variable, whose name must be valid; a caller sink path must be absolute;
    /// timeouts must be non-zero; timeouts and the kill grace at most [`MAX_RUN_DURATION`].
    pub fn validate(&self) -> Result<(), OptionsError> {
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
    /// How the child ended (`None` when it was stopped before it exited by itself).
    pub exit: Option<Exit>,
    /// When the run started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
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
}

/// The result of one process run.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessResult {
    /// How the run ended.
    pub outcome: RunOutcome,
    /// How the child ended (`None` if it never exited by itself and was not reaped as such).
    pub exit: Option<Exit>,
    /// Wall-clock duration of the run (serialized as `duration_ms`).
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
    /// The terminal record (artifact references, counts, previews).
    pub record: ResultRecord,
    /// The clean answer from the result sink, verbatim; `Some` only when `sink` is
    /// [`SinkOutcome::Read`].
    pub result: Option<String>,
    /// What reading the result sink found.
    pub sink: SinkOutcome,
    /// The child's operating-system process id (`None` if the runtime could not tell).
    pub pid: Option<u32>,
    /// The caller's label ([`RunOptions::label`]).
    pub label: Option<String>,
}

impl ProcessResult {
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
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sink_variable_belongs_to_the_runner() {
        let ok = RunOptions::new("true").env_remove(DEFAULT_SINK_VAR);
        assert_eq!(ok.validate(), Ok(()));
        let err = RunOptions::new("true")
            .env(DEFAULT_SINK_VAR, "/tmp/x")
            .validate()
            .unwrap_err();
        assert!(matches!(err, OptionsError::SinkVarInEnv { .. }), "{err}");
        assert!(err.to_string().contains("with_result_sink"), "{err}");
        // The configured name is the one guarded.
        let custom = RunOptions::new("true").sink_var("AMPLIHACK_RESULT_SINK");
        assert_eq!(custom.clone().env(DEFAULT_SINK_VAR, "x").validate(), Ok(()));
        assert!(matches!(
            custom.env("AMPLIHACK_RESULT_SINK", "x").validate(),
            Err(OptionsError::SinkVarInEnv { .. })
        ));
        for bad in ["", "A=B", "A\0"] {
            assert!(matches!(
                RunOptions::new("true").sink_var(bad).validate(),
                Err(OptionsError::InvalidSinkVar { .. })
            ));
        }
        assert!(matches!(
            RunOptions::new("true")
                .with_result_sink(ResultSink::Path("rel/x".into()))
                .validate(),
            Err(OptionsError::RelativeSinkPath { .. })
        ));
        assert!(matches!(
            RunOptions::new("true")
                .idle_timeout(Duration::ZERO)
                .validate(),
            Err(OptionsError::ZeroTimeout { .. })
        ));
    }

    #[test]
    fn stopped_runs_are_incomplete_and_their_sink_is_not_read() {
        assert_eq!(
            RunOutcome::Completed.capture_status(),
            CaptureStatus::Succeeded
        );
        assert_eq!(RunOutcome::Completed.sink_not_read(), None);
        assert_eq!(
            RunOutcome::TimedOut.capture_status(),
            CaptureStatus::Cancelled
        );
        assert_eq!(
            RunOutcome::IdleTimedOut.sink_not_read(),
            Some(NotReadReason::IdleTimedOut)
        );
    }
}
