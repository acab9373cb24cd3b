//! Process run descriptions and results, shared by every process driver (SPEC §7).
//!
//! These are plain values: the drivers (agentrun-smol, agentrun-tokio) turn a [`RunOptions`]
//! into a child process and assemble a [`ProcessResult`] from what happened.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::limits::PreviewLimits;
use crate::record::{ResultRecord, StreamRecord};
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
    /// Grace between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
}

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
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }

    /// Adds one argument.
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
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable from the child's environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Sets standard input.
    pub fn stdin(mut self, stdin: StdinMode) -> Self {
        self.stdin = stdin;
        self
    }

    /// Sets the preview limits.
    pub fn limits(mut self, limits: PreviewLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the wall-clock timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the grace between SIGTERM and SIGKILL.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The child exited by itself (any code or signal).
    Completed,
    /// The wall-clock timeout fired; the child's group was stopped.
    TimedOut,
}

/// The result of one process run.
#[derive(Debug, Clone)]
pub struct ProcessResult {
    /// How the run ended.
    pub outcome: Outcome,
    /// How the child ended (`None` if it never exited by itself and was not reaped as such).
    pub exit: Option<Exit>,
    /// Wall-clock duration of the run.
    pub duration: Duration,
    /// The terminal record (artifact references, counts, previews).
    pub record: ResultRecord,
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

    /// The stderr stream's record, if declared.
    pub fn stderr(&self) -> Option<&StreamRecord> {
        self.record.stream("stderr")
    }
}
