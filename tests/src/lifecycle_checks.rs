//! The properties of the run lifecycle (`agentrun_core::lifecycle::RunLifecycle`) over arbitrary
//! sequences of what a driver reports, on a virtual clock, as a function that panics only on a
//! violation ([`check_lifecycle`]); its input is decoded with `arbitrary` (the `lifecycle`
//! fuzz target and its corpus replay).
//!
//! The driver modelled here does what the driving order says: after every event it drains the
//! actions and answers each signal, SIGKILL and probe from the state of the child's group
//! (which the input sets), and time only passes in [`LifecycleStep::Wait`], firing every
//! timeout due on the way in order. The properties:
//!
//! * [`RunAction::Finish`] comes exactly once (the run ends once the input's events stop and
//!   the child exits and closes its pipes, after at most a bounded number of wakeups), and
//!   nothing after it: no action, no timeout;
//! * the stop signals go out in the configured order, each at most once, then SIGKILL at most
//!   once, and nothing is sent to a group reported empty;
//! * the finish reports what the driver told: the exit, whether the child was reaped, whether
//!   a pipe is still open;
//! * the outcome is the first cause that stopped a running child (deadline, idle timeout or
//!   cancellation), and a child that exited before any stop completed.

use std::time::{Duration, Instant};

use agentrun_core::harness::StopSignal;
use agentrun_core::lifecycle::{RunAction, RunLifecycle, WakeReason};
use agentrun_core::process::{Exit, RunOptions, RunOutcome};
use arbitrary::Arbitrary;

use crate::fuzz_inputs::{Encode, encode_variant};

/// The options of the run and the events a driver reports, in order.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct LifecycleInput {
    /// The deadline, `1 + v` milliseconds after the start.
    pub timeout_ms: Option<u16>,
    /// The idle timeout, `1 + v` milliseconds.
    pub idle_timeout_ms: Option<u16>,
    /// The grace after each stop signal, `v % 2000` milliseconds.
    pub grace_ms: u16,
    /// The stop signals (past three ignored; none: SIGKILL at once).
    pub signals: Vec<SignalInput>,
    /// Leave the group alone after a normal exit whose pipes closed.
    pub keep_background: bool,
    /// What happens, in order.
    pub steps: Vec<LifecycleStep>,
}

/// A stop signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum SignalInput {
    /// SIGINT.
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum ExitInput {
    /// Its status could not be read.
    Unknown,
    /// Exited with this code.
    Code(u8),
    /// Killed by this signal.
    Signal(u8),
}

/// What the driver's look at the child's group finds once the child is reaped (before, the
/// child itself keeps the group alive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum GroupInput {
    /// Processes still run in it.
    Alive,
    /// No process is left.
    Empty,
    /// Only zombies are left.
    Zombies,
}

/// One thing that happens to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum LifecycleStep {
    /// `v` milliseconds pass; every timeout due on the way fires, in order.
    Wait(u16),
    /// Output arrives.
    Output,
    /// The child is reaped.
    Exit(ExitInput),
    /// Every output pipe reaches end of file.
    PipesClosed,
    /// The caller asks to stop the run.
    Cancel,
    /// From now on the driver's looks at the group find this.
    Group(GroupInput),
}

crate::fuzz_inputs::encode_fields!(LifecycleInput {
    timeout_ms,
    idle_timeout_ms,
    grace_ms,
    signals,
    keep_background,
    steps
});

impl Encode for SignalInput {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_variant(*self as u32, 2, out);
    }
}

impl Encode for GroupInput {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_variant(*self as u32, 3, out);
    }
}

impl Encode for ExitInput {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Unknown => encode_variant(0, 3, out),
            Self::Code(c) => {
                encode_variant(1, 3, out);
                c.encode(out);
            }
            Self::Signal(s) => {
                encode_variant(2, 3, out);
                s.encode(out);
            }
        }
    }
}

impl Encode for LifecycleStep {
    fn encode(&self, out: &mut Vec<u8>) {
        let index = match self {
            Self::Wait(_) => 0,
            Self::Output => 1,
            Self::Exit(_) => 2,
            Self::PipesClosed => 3,
            Self::Cancel => 4,
            Self::Group(_) => 5,
        };
        encode_variant(index, 6, out);
        match self {
            Self::Wait(ms) => ms.encode(out),
            Self::Exit(exit) => exit.encode(out),
            Self::Group(group) => group.encode(out),
            Self::Output | Self::PipesClosed | Self::Cancel => {}
        }
    }
}

/// Most wakeups the run may take once the input's events stop: the probes of three grace
/// periods of up to 2 s every 50 ms, and a few more for the drains.
const MAX_WAKES: usize = 1000;

/// The driver and what it saw.
struct Driver {
    run: RunLifecycle,
    now: Instant,
    signals: Vec<StopSignal>,
    group: GroupInput,
    exit: Option<Option<Exit>>,
    pipes_closed: bool,
    /// The group was reported empty (or as zombies, which counts as empty after SIGKILL).
    group_gone: bool,
    sent: Vec<StopSignal>,
    killed: bool,
    finish: Option<RunAction>,
    /// The cause of the first stop action, if it came while the child ran.
    expected: Option<RunOutcome>,
    /// Whether any stop action came yet.
    stopping: bool,
}

impl Driver {
    /// Drains the actions and answers them; `cause` is what made them (for the outcome).
    fn drain(&mut self, cause: RunOutcome) {
        while let Some(action) = self.run.poll_action() {
            assert!(self.finish.is_none(), "{action:?} after the finish");
            match action {
                RunAction::Signal(signal) => {
                    assert!(!self.group_gone, "{signal:?} to a group reported empty");
                    assert!(!self.killed, "{signal:?} after SIGKILL");
                    let next = self.signals.get(self.sent.len()).copied();
                    assert_eq!(Some(signal), next, "signals out of order: {:?}", self.sent);
                    self.sent.push(signal);
                    self.stopped_by(cause);
                    self.answer();
                }
                RunAction::Kill => {
                    assert!(!self.group_gone, "SIGKILL to a group reported empty");
                    assert!(!self.killed, "a second SIGKILL");
                    self.killed = true;
                    self.stopped_by(cause);
                    self.answer();
                }
                RunAction::Probe => {
                    assert!(self.exit.is_some(), "a probe before the exit");
                    self.answer();
                }
                RunAction::Finish { .. } => self.finish = Some(action),
                other => panic!("unknown action {other:?}"),
            }
        }
    }

    fn stopped_by(&mut self, cause: RunOutcome) {
        if !self.stopping {
            self.stopping = true;
            if self.exit.is_none() {
                self.expected = Some(cause);
            }
        }
    }

    /// Reports what a look at the group finds (nothing while the child is in it).
    fn answer(&mut self) {
        if self.exit.is_none() {
            return;
        }
        match self.group {
            GroupInput::Alive => {}
            GroupInput::Empty => {
                self.group_gone = true;
                self.run.handle_group_empty(self.now);
            }
            GroupInput::Zombies => {
                self.run.handle_group_zombies(self.now);
                // It asks for SIGKILL (drained next), then counts as empty.
                self.drain(RunOutcome::Completed);
                self.group_gone = true;
            }
        }
    }

    /// Fires every timeout due until `until`, in order; returns how many fired.
    fn wait_until(&mut self, until: Instant) -> usize {
        let mut fired = 0;
        while let Some((at, reason)) = self.run.poll_timeout() {
            if at > until {
                break;
            }
            assert!(fired < 100 * MAX_WAKES, "timeouts do not advance");
            self.now = self.now.max(at);
            self.run.handle_timeout(self.now);
            fired += 1;
            let cause = match reason {
                WakeReason::Deadline => RunOutcome::TimedOut,
                WakeReason::Idle => RunOutcome::IdleTimedOut,
                _ => RunOutcome::Completed,
            };
            self.drain(cause);
        }
        self.now = self.now.max(until);
        fired
    }

    fn exit(&mut self, exit: Option<Exit>) {
        if self.exit.is_none() && self.finish.is_none() {
            self.exit = Some(exit);
        }
        self.run.handle_exit(self.now, exit);
    }

    fn pipes_closed(&mut self) {
        if self.finish.is_none() {
            self.pipes_closed = true;
        }
        self.run.handle_pipes_closed(self.now);
    }
}

/// Drives a run through `input` and checks the properties (see the module documentation).
pub fn check_lifecycle(input: &LifecycleInput) {
    let ms = |v: u16| Duration::from_millis(u64::from(v));
    let signals: Vec<StopSignal> = input
        .signals
        .iter()
        .take(3)
        .map(|s| match s {
            SignalInput::Interrupt => StopSignal::Interrupt,
            SignalInput::Terminate => StopSignal::Terminate,
        })
        .collect();
    let mut options = RunOptions::new("child")
        .kill_grace(ms(input.grace_ms % 2000))
        .stop_signals(&signals)
        .keep_background(input.keep_background);
    if let Some(t) = input.timeout_ms {
        options = options.timeout(ms(t) + Duration::from_millis(1));
    }
    if let Some(t) = input.idle_timeout_ms {
        options = options.idle_timeout(ms(t) + Duration::from_millis(1));
    }
    let start = origin();
    let mut d = Driver {
        run: RunLifecycle::new(&options, start).expect("valid options"),
        now: start,
        signals,
        group: GroupInput::Alive,
        exit: None,
        pipes_closed: false,
        group_gone: false,
        sent: Vec::new(),
        killed: false,
        finish: None,
        expected: None,
        stopping: false,
    };
    for step in &input.steps {
        match *step {
            LifecycleStep::Wait(v) => {
                let until = d.now + ms(v);
                d.wait_until(until);
            }
            LifecycleStep::Output => d.run.handle_output(d.now),
            LifecycleStep::Exit(exit) => {
                let exit = match exit {
                    ExitInput::Unknown => None,
                    ExitInput::Code(c) => Some(Exit::Code(i32::from(c))),
                    ExitInput::Signal(s) => Some(Exit::Signal(i32::from(s))),
                };
                d.exit(exit);
                d.drain(RunOutcome::Completed);
            }
            LifecycleStep::PipesClosed => {
                d.pipes_closed();
                d.drain(RunOutcome::Completed);
            }
            LifecycleStep::Cancel => {
                d.run.handle_cancel(d.now);
                d.drain(RunOutcome::Cancelled);
            }
            LifecycleStep::Group(group) => d.group = group,
        }
        if d.finish.is_some() {
            assert!(d.run.is_finished());
            assert_eq!(d.run.poll_timeout(), None, "a timeout after the finish");
        }
    }
    // The events stop: the run must end by itself (timeouts), or once the child exits and
    // closes its pipes.
    let mut wakes = 0;
    while d.finish.is_none() {
        let Some((at, _)) = d.run.poll_timeout() else {
            assert!(
                d.exit.is_none() || !d.pipes_closed,
                "the run waits for nothing after the exit and the pipes closed"
            );
            d.exit(Some(Exit::Code(0)));
            d.drain(RunOutcome::Completed);
            d.pipes_closed();
            d.drain(RunOutcome::Completed);
            continue;
        };
        wakes += d.wait_until(at);
        assert!(wakes <= MAX_WAKES, "not finished after {wakes} wakeups");
    }
    assert!(d.run.is_finished());
    assert_eq!(d.run.poll_action(), None);
    assert_eq!(d.run.poll_timeout(), None);
    let Some(RunAction::Finish {
        outcome,
        exit,
        pipes_open,
        reaped,
    }) = d.finish
    else {
        unreachable!("the loop ends on a finish");
    };
    assert_eq!(reaped, d.exit.is_some(), "reaped");
    assert_eq!(exit, d.exit.flatten(), "the exit");
    assert_eq!(pipes_open, !d.pipes_closed, "pipes open");
    if !reaped {
        assert!(
            d.killed || d.group_gone,
            "finished unreaped without SIGKILL"
        );
    }
    assert_eq!(
        outcome,
        d.expected.unwrap_or(RunOutcome::Completed),
        "outcome (signals sent {:?}, killed {})",
        d.sent,
        d.killed
    );
}

/// The origin of the virtual clock: the machine only compares instants and adds durations to
/// them, so any instant will do.
fn origin() -> Instant {
    Instant::now()
}
