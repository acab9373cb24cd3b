//! agentrun-process: the OS process layer of agentrun and its one process driver.
//!
//! * [`os`]: the child command (argv, never a shell; environment; working directory; its own
//!   process group), signals to the group, pipes, `PATH` lookup. Blocking, runtime-free.
//!   The pumps (child pipe to capture) and the [`Watchdog`](os::Watchdog) (stops a run's
//!   group when the runner dies) are modules of their own, re-exported under `os`.
//! * [`Runner`]: the process driver, generic over a small [`Runtime`] trait (spawn, wait for
//!   the child, read its clock, sleep until an instant, run a blocking job). The timing policy (deadline,
//!   idle timeout, stop signals and grace, SIGKILL, pipe drain) is not here but in the sans-IO
//!   `agentrun_core::lifecycle::RunLifecycle`, which this driver feeds and obeys; files are
//!   agentrun-fs's business (the store, captures, the result sink).
//!
//! * [`Runner::compact`]: compaction of a transcript with one pruned retry, its summarizer an
//!   agent turn or a command (see [`CompactOptions`]).
//!
//! * [`Runner::fanout`]: several attempts at one task at once, each in its own git worktree
//!   (or private copy), verified, the winner kept (see [`fanout`]).
//!
//! * [`exit`]: the one exit policy: why a program could not start and its shell code, a run's
//!   code, an agent turn's code.
//! * [`auto_mode`]: auto mode's runner (one harness turn per prompt) and channel (the core's
//!   phase machine over a session directory), generic over the same [`Runtime`];
//!   [`auto_session`]: an auto session as library calls (create, resume, run, outcome).
//!
//! Applications use it through `agentrun-smol` or `agentrun-tokio`, which implement
//! [`Runtime`] and re-export the API under the same names.

mod agent;
pub mod auto_mode;
pub mod auto_session;
mod compact;
mod driver;
mod error_text;
pub mod exit;
pub mod fanout;
mod live;
pub mod os;
mod pump;
mod stall;
mod transcript_file;
mod watchdog;

pub use agent::{
    AgentError, AgentOptions, AgentRun, AgentRunBuilder, MAX_LINE_BYTES, RETAINED_CAP,
    RetainedSource, exit_diagnostic, plausible_session_id,
};
pub use compact::{
    CONTEXT_LENGTH_MARKER, CompactBuilder, CompactError, CompactEvent, CompactOptions, CompactRun,
    Summarizer, SummarizerSetupError, TranscriptInput, retry_reason,
};
pub use driver::{ChildProcess, MIN_PROGRESS_INTERVAL, RunBuilder, Runner, Runtime};
pub use fanout::{
    AttemptSpec, FanOutBuilder, FanOutError, FanOutEvent, FanOutOptions, FanOutRun, IsolationError,
};
pub use transcript_file::{
    LoadedTranscript, TranscriptLoadError, load_transcript, load_transcript_file, parse_transcript,
};

/// The names `agentrun-smol` and `agentrun-tokio` both re-export (with their own `Runner` and
/// `RunBuilder`), so the two APIs cannot drift apart.
pub mod api {
    pub use crate::agent::{AgentError, AgentOptions, AgentRun, RetainedSource};
    pub use crate::auto_mode::{HarnessLaunch, ProgressSink, StopRequests};
    pub use crate::auto_session::{
        AutoEnd, AutoOutcome, AutoProgress, AutoSessionError, AutoSessionOptions,
        VerificationSummary,
    };
    pub use crate::compact::{
        CONTEXT_LENGTH_MARKER, CompactError, CompactEvent, CompactOptions, CompactRun, Summarizer,
        SummarizerSetupError, TranscriptInput,
    };
    pub use crate::driver::MIN_PROGRESS_INTERVAL;
    pub use crate::error_text::error_chain;
    pub use crate::exit::{SpawnFailure, agent_exit_code, run_exit_code, turn_exit_code};
    pub use crate::fanout::{
        AttemptSpec, FanOutError, FanOutEvent, FanOutOptions, FanOutRun, IsolationError,
    };
    pub use crate::live::RunError;
    pub use crate::transcript_file::{LoadedTranscript, TranscriptLoadError, load_transcript};
    pub use agentrun_core::fanout::{AttemptRecord, AttemptStatus, FanOutRecord, Selection};
    pub use agentrun_core::process::{
        Exit, OptionsError, ProcessResult, RunOptions, RunOutcome, StdinMode,
    };
    pub use agentrun_core::progress::{RunProgress, StreamProgress};
    pub use agentrun_core::sink::{
        DEFAULT_SINK_CAP, DEFAULT_SINK_VAR, FileKind, NotReadReason, ResultSink, SinkOutcome,
    };
    pub use agentrun_fs::sink::read_sink;
}
pub use error_text::error_chain;
pub use exit::{SpawnFailure, agent_exit_code, run_exit_code, turn_exit_code};
pub use live::RunError;
pub use os::program_exists;

/// Declares a runtime crate's public driver types for its [`Runtime`] implementation, so
/// `agentrun-smol` and `agentrun-tokio` hold only what differs by runtime:
/// `runtime_types!(SmolRuntime, "smol")` defines `Runner`, `RunBuilder`, `AutoModeRunner`,
/// `AutoModeChannel` and `AutoSession` over `SmolRuntime`.
#[macro_export]
macro_rules! runtime_types {
    ($runtime:ident, $name:literal) => {
        #[doc = concat!("Runs processes with their output captured into a store, on ", $name, ".")]
        pub type Runner = $crate::Runner<$runtime>;

        /// One run being described; `.await` it to run the process.
        pub type RunBuilder<'a> = $crate::RunBuilder<'a, $runtime>;

        /// Runs one auto-mode harness turn per prompt (`agentrun_core::turn::AgentSession`).
        pub type AutoModeRunner<'a> = $crate::auto_mode::AutoModeRunner<'a, $runtime>;

        /// Auto mode's phase machine over a session directory (`agentrun_core::turn::Channel`).
        pub type AutoModeChannel<'a> = $crate::auto_mode::AutoModeChannel<'a, $runtime>;

        /// An auto session: create or resume it, run it to its end, read its outcome.
        pub type AutoSession<'a> = $crate::auto_session::AutoSession<'a, $runtime>;
    };
}
