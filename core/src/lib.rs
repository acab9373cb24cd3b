//! agentrun-core: the sans-IO heart of agentrun.
//!
//! Every type here is a pure state machine or value: inputs are bytes, events and times passed
//! as arguments; outputs are values. Nothing in this crate opens a file, spawns a process, reads
//! a clock or the environment (checked by `core/clippy.toml` and `scripts/check-sans-io.sh`).
//! The drivers (agentrun-fs, agentrun-smol, agentrun-tokio) do the I/O.
//!
//! The concepts, in the order output flows through them:
//!
//! * [`stream`]: output declarations and the one stream-name validator;
//! * [`capture`]: the capture state machine fed by deltas and a completion;
//! * [`index`]: the sparse line/block index written beside each artifact;
//! * [`manifest`]: the deterministic manifest of named output;
//! * [`preview`] and [`record`]: bounded previews, hints and the terminal result record;
//! * [`uri`] and [`page`]: the public artifact URI grammar and paged reads;
//! * [`process`] and [`sink`]: process run descriptions and results, and the clean result
//!   channel's values; [`progress`]: what a run has captured so far, while it runs;
//! * [`lifecycle`]: the run lifecycle (timeouts, stop signals, SIGKILL, pipe drain), fed
//!   instants by its driver;
//! * [`retry`]: whether and when a turn that hit a rate limit or an overload runs again;
//! * [`lines`]: a bounded line splitter for live output taps;
//! * [`transcript`] and [`compaction`]: agent transcripts and compaction with one pruned
//!   retry;
//! * [`turn`] and [`auto_mode`]: the generic turn loop and auto mode's phase machine;
//! * [`time`]: instants written as RFC 3339 text.
//!
//! The main type of each concept is re-exported here at the root; the modules hold the rest
//! (their events, actions, errors and helpers) under their own paths.
//!
//! # Names that mean more than one thing
//!
//! * *Channel*: the **clean result channel** ([`sink`]: a file the child writes its answer
//!   to, read back verbatim), an **output channel** ([`OutputChannel`]: the stream a captured
//!   chunk belongs to), and the turn loop's **prompt channel** ([`turn::Channel`]: where an
//!   agent session's next prompt comes from; auto mode's phase machine is one).
//! * *Settings*: [`auto_mode::Settings`] is what an auto-mode session was started with (kept
//!   in its session directory); the command line's configuration (config file and flags) is
//!   the CLI's own and not in this crate.
//! * *Action*: [`auto_mode::Action`], [`compaction::Action`] and [`RunAction`] are each what
//!   their machine asks its driver to do; only the last is at the root.

#![forbid(unsafe_code)]

pub mod auto_mode;
pub mod budget;
pub mod capture;
pub mod compaction;
pub mod continuation;
pub mod digest;
pub mod fanout;
pub mod harness;
pub mod index;
pub mod lifecycle;
pub mod limits;
pub mod lines;
pub mod manifest;
pub mod page;
pub mod preview;
pub mod process;
pub mod progress;
pub mod record;
pub mod retry;
pub mod sink;
pub mod stall;
pub mod stream;
pub mod time;
pub mod transcript;
pub mod turn;
pub mod uri;

pub use capture::{
    Capture, CaptureCompletion, CaptureError, CaptureStatus, CaptureSummary, FullOutput,
};
pub use continuation::{Continuation, ModelRead, ReadSyntax};
pub use digest::Digest;
pub use limits::PreviewLimits;
pub use manifest::Manifest;
pub use page::{BytePage, ByteRange, Page, PageError, PageRequest};
pub use record::ResultRecord;
pub use stream::{OutputChannel, OutputDeclaration, StreamName};
pub use uri::ArtifactUri;

pub use auto_mode::{AutoMode, AutoModeError};
pub use compaction::{Compaction, CompactionConfig, CompactionError};
pub use harness::{Harness, Interpretation, LaunchError};
pub use index::{BlockIndexer, IndexEntry};
pub use lifecycle::{RunAction, RunLifecycle, WakeReason};
pub use lines::{Line, LineSplitter};
pub use process::{
    Exit, OptionsError, ProcessResult, RunOptions, RunOutcome, RunStatus, RunSummary, StdinMode,
};
pub use progress::{RunProgress, StreamProgress};
pub use sink::{ResultSink, SinkOutcome};
pub use transcript::{Transcript, TranscriptError};
pub use turn::{AgentSession, NextPrompt, TurnOutput, run_session_loop};
