//! The OS layer: the child command, its process group and signals, its pipes, and `PATH`
//! lookup. Blocking code; nothing here depends on an async runtime.
//!
//! One concept per module: `command` (the child's command, standard streams, `PATH` lookup,
//! how it ended), `pipe` (non-blocking pipe ends, the run's stop latch, the stdin writers)
//! and `signal` (the process group's signals and probes). The pumps and the watchdog are
//! modules of the crate's own; [`Watchdog`] and [`StdoutObserver`] are re-exported here.

mod command;
mod pipe;
mod signal;

pub use command::{captures, command, exit_of, program_exists, stdio};
pub(crate) use pipe::{
    Latch, LatchWatch, PIPE_SIZE, feed_stdin, latch, nonblocking_pipe, poll_fds, pump_stdin,
    wait_any, wait_ready,
};
pub(crate) use signal::exit_watch;
pub use signal::{Delivery, group_of, os_signal, probe_group, signal_group};

pub use crate::pump::StdoutObserver;
pub(crate) use crate::pump::{Activity, Clock, PumpEnd, SharedSession, Tap, TapPanic, pump};
pub use crate::watchdog::Watchdog;
