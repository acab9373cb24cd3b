//! The run lifecycle: when to stop a child process, how to escalate, and when the run is over.
//!
//! [`RunLifecycle`] decides everything about time in a process run (the wall-clock deadline,
//! the idle timeout, the stop signals with their grace periods, SIGKILL, and how long to wait
//! for the output pipes) without reading a clock or touching a process: the driver tells it
//! what happened and when, and does what it says. Every escalation path is therefore a
//! deterministic unit test on a virtual clock (see `core/tests/lifecycle.rs`).
//!
//! # Driving order
//!
//! 1. [`RunLifecycle::new`]`(&options, now)` right before or after the child was spawned (the
//!    timeouts count from `now`).
//! 2. Loop:
//!    1. Drain [`RunLifecycle::poll_action`] until `None` and carry out each action:
//!       [`RunAction::Signal`] (send that signal to the child's process group; if the group
//!       has no process left, report it with [`RunLifecycle::handle_group_empty`]),
//!       [`RunAction::Kill`] (SIGKILL to the group, same report), [`RunAction::Probe`] (look
//!       whether the group still has a process, e.g. signal 0; same report; a group whose
//!       members all turn out to be zombies is reported with
//!       [`RunLifecycle::handle_group_zombies`], which asks for SIGKILL first), or
//!       [`RunAction::Finish`]
//!       (stop waiting: finalize the run with that outcome and exit, and say in the record
//!       what it reports as unfinished: output pipes still open, a child never reaped; the
//!       machine is done and every later input is ignored).
//!    2. Ask [`RunLifecycle::poll_timeout`] for the next instant the machine needs (with the
//!       reason), and wait until then or until one of these happens, feeding it in:
//!       * the child was reaped: [`RunLifecycle::handle_exit`];
//!       * every captured output pipe reached end of file: [`RunLifecycle::handle_pipes_closed`];
//!       * the caller asked to stop (a stop future resolved, Ctrl-C):
//!         [`RunLifecycle::handle_cancel`] — a second call while the group is being stopped
//!         escalates to SIGKILL at once;
//!       * the instant passed: [`RunLifecycle::handle_timeout`].
//!
//!       Output activity for the idle timeout is fed with [`RunLifecycle::handle_output`]
//!       whenever the driver likes, at the latest right before `handle_timeout` (a driver
//!       need not wake up per chunk: it may record the instant of the last chunk and report it
//!       when the idle timer fires).
//!
//! # The policy
//!
//! * While the child runs, the deadline (`timeout` after the start) and the idle timeout
//!   (`idle_timeout` after the last output) stop it; so does a cancellation.
//! * Stopping sends each stop signal (SIGTERM by default) with the grace period after it,
//!   then SIGKILL. The grace belongs to the whole group, not to the direct child: a child that
//!   exits during it (a wrapper such as `sh -c` or `npm test` dying of SIGTERM at once) leaves
//!   what it started in its group the rest of the grace to clean up. After the exit the driver
//!   is asked to look at the group at once and then every [`GROUP_PROBE`]
//!   ([`RunAction::Probe`]); the grace ends when it ends or when the group is found empty,
//!   whichever comes first, and only a group still holding a process gets the next signal or
//!   SIGKILL. A group that seems to hold only zombies (orphans nobody reaps) gets SIGKILL at
//!   once and then counts as empty: only signal 0 failing proves a group empty, a look at its
//!   members can miss one that runs, and SIGKILL costs a true zombie nothing.
//!   After SIGKILL (or an empty group) the output pipes get [`DRAIN_AFTER_KILL`]; a
//!   process that left the group (`setsid`) and still holds them is not waited for longer.
//! * A group found empty is never signalled again: once the child is reaped and its group
//!   empty, the group's id is free and may be reused by an unrelated group.
//! * SIGKILL cannot be ignored, but a child in uninterruptible sleep (a hung disk or network
//!   file system) does not die of it until the kernel call returns. The run waits
//!   [`EXIT_AFTER_KILL`] for the exit and then finishes without it
//!   ([`RunAction::Finish`] with `reaped: false`), rather than never.
//! * A run that finishes while an output pipe is still open (only a process outside the group
//!   can hold it by then) says so (`pipes_open: true`): whatever that process writes later is
//!   not captured, so the driver must mark the output as possibly incomplete.
//! * A child that exits by itself has completed, whatever comes after. The run waits
//!   [`DRAIN_AFTER_EXIT`] for its pipes; if something it left behind still holds them, what is
//!   left of the group is stopped like a child (signals, grace, SIGKILL, the grace ended early
//!   once the group is empty), keeping the exit status. When the group turns out to be empty
//!   (the holder escaped it) the grace periods are skipped: an escaped holder delays a
//!   finished run by at most `DRAIN_AFTER_EXIT + DRAIN_AFTER_KILL`.
//! * Once the pipes closed after such an exit, the run is over, and whatever is left of the
//!   group (background processes that let the pipes go) is stopped the same way: the first
//!   stop signal goes to the group (usually finding it empty, which ends the run at once), the
//!   grace ends once the group is empty, then SIGKILL. The run keeps its outcome and the
//!   child's exit status. `RunOptions::keep_background` leaves them running instead (daemons
//!   started on purpose); pipe holders after the drain are stopped either way.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::harness::StopSignal;
use crate::process::{Exit, OptionsError, RunOptions, RunOutcome};

/// How long the output pipes may stay open after the child exited by itself before what is
/// left of its group is stopped.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// How long the output pipes may stay open after SIGKILL (or after the group turned out to be
/// empty). Every process of the group is gone by then, so the pipes are at end of file unless
/// a process that left the group holds them; the run does not wait for it.
pub const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// How often the driver is asked to look whether the child's group is empty while a grace
/// period runs after the child's exit ([`RunAction::Probe`]): short enough that a group that
/// finished its cleanup ends the run promptly, long enough to cost nothing.
pub const GROUP_PROBE: Duration = Duration::from_millis(50);

/// How long the run waits for the child's exit after SIGKILL before it finishes without it.
/// SIGKILL ends any process that returns to user space, so this only matters for a child stuck
/// in the kernel (uninterruptible sleep); it is long so that a slow but healthy machine never
/// hits it.
pub const EXIT_AFTER_KILL: Duration = Duration::from_secs(60);

/// What the driver must do next (from [`RunLifecycle::poll_action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunAction {
    /// Send this signal to the child's process group.
    Signal(StopSignal),
    /// Send SIGKILL to the child's process group.
    Kill,
    /// Look whether the child's process group still has a process (signal 0) and report an
    /// empty one with [`RunLifecycle::handle_group_empty`], or one whose members all seem to
    /// be zombies with [`RunLifecycle::handle_group_zombies`]; nothing to report otherwise.
    Probe,
    /// The run is over: finalize it with this outcome and the child's exit.
    Finish {
        /// How the run ended.
        outcome: RunOutcome,
        /// How the child ended (`None` when its status could not be read, or it was never
        /// reaped: see `reaped`).
        exit: Option<Exit>,
        /// An output pipe was still open: a process outside the child's group holds it, and
        /// what it writes from now on is not captured. The output may be incomplete.
        pipes_open: bool,
        /// Whether the child was reaped. `false`: it did not exit within [`EXIT_AFTER_KILL`]
        /// after SIGKILL, and how it ended is unknown.
        reaped: bool,
    },
}

/// Why the machine wants to be woken (from [`RunLifecycle::poll_timeout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WakeReason {
    /// The wall-clock timeout.
    Deadline,
    /// The idle timeout, counted from the last output.
    Idle,
    /// The end of the grace period after a stop signal.
    Grace,
    /// The next look at the group during a grace period after the child's exit
    /// ([`RunAction::Probe`]).
    GroupProbe,
    /// The end of the wait for the pipes after the child exited by itself.
    DrainAfterExit,
    /// The end of the wait for the pipes after SIGKILL.
    DrainAfterKill,
    /// The end of the wait for the child's exit after SIGKILL ([`EXIT_AFTER_KILL`]).
    ExitAfterKill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The child runs.
    Running,
    /// The child exited by itself; waiting for the pipes until `until`.
    Draining { until: Instant },
    /// Stop signal number `sent` went out; the grace period ends at `until`. Once the child
    /// was reaped, the group is probed at `probe` (`None` before the exit).
    Stopping {
        sent: usize,
        until: Instant,
        probe: Option<Instant>,
    },
    /// SIGKILL went out; waiting for the exit (at most until `until`, then the run finishes
    /// without it), then for the pipes until `until`.
    Killed { until: Instant },
    /// [`RunAction::Finish`] was emitted.
    Done,
}

/// The lifecycle of one process run (see the module documentation for the driving order).
#[derive(Debug, Clone)]
#[must_use = "a run lifecycle does nothing unless driven"]
pub struct RunLifecycle {
    deadline: Option<Instant>,
    idle_timeout: Option<Duration>,
    last_output: Instant,
    grace: Duration,
    signals: Vec<StopSignal>,
    /// Leave the group alone after a normal exit whose pipes closed.
    keep_background: bool,
    /// The group was found empty after the child was reaped (or got SIGKILL when it seemed to
    /// hold only zombies): its id may be reused, so it gets no more signals.
    group_empty: bool,
    phase: Phase,
    /// How the run ends when stopped (set by the first cause: deadline, idle or cancel).
    outcome: RunOutcome,
    /// `Some` once the child was reaped (the inner `None`: its status could not be read).
    exit: Option<Option<Exit>>,
    pipes_closed: bool,
    actions: VecDeque<RunAction>,
}

impl RunLifecycle {
    /// The lifecycle of a child spawned at `now` with `options` (checked again here, so a zero
    /// timeout cannot stop a run before it starts).
    pub fn new(options: &RunOptions, now: Instant) -> Result<Self, OptionsError> {
        options.validate()?;
        Ok(Self {
            deadline: options.get_timeout().and_then(|t| now.checked_add(t)),
            idle_timeout: options.get_idle_timeout(),
            last_output: now,
            grace: options.get_kill_grace(),
            signals: options.get_stop_signals().to_vec(),
            keep_background: options.get_keep_background(),
            group_empty: false,
            phase: Phase::Running,
            outcome: RunOutcome::Completed,
            exit: None,
            pipes_closed: false,
            actions: VecDeque::new(),
        })
    }

    /// Whether [`RunAction::Finish`] was emitted.
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The next action for the driver, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<RunAction> {
        self.actions.pop_front()
    }

    /// The next instant the machine must be woken at with [`RunLifecycle::handle_timeout`],
    /// and why (`None`: only an event can move the run on).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Instant, WakeReason)> {
        match self.phase {
            Phase::Running => {
                let idle = self
                    .idle_timeout
                    .and_then(|t| self.last_output.checked_add(t))
                    .map(|at| (at, WakeReason::Idle));
                let deadline = self.deadline.map(|at| (at, WakeReason::Deadline));
                match (deadline, idle) {
                    (Some(d), Some(i)) => Some(if i.0 < d.0 { i } else { d }),
                    (d, i) => d.or(i),
                }
            }
            Phase::Draining { until } => Some((until, WakeReason::DrainAfterExit)),
            Phase::Stopping {
                until,
                probe: Some(probe),
                ..
            } if probe < until => Some((probe, WakeReason::GroupProbe)),
            Phase::Stopping { until, .. } => Some((until, WakeReason::Grace)),
            Phase::Killed { until } if self.exit.is_some() => {
                Some((until, WakeReason::DrainAfterKill))
            }
            Phase::Killed { until } => Some((until, WakeReason::ExitAfterKill)),
            Phase::Done => None,
        }
    }

    /// Output arrived at `now` on a captured stream (restarts the idle timeout).
    pub fn handle_output(&mut self, now: Instant) {
        self.last_output = self.last_output.max(now);
    }

    /// The child was reaped at `now` (`None`: its status could not be read).
    pub fn handle_exit(&mut self, now: Instant, exit: Option<Exit>) {
        if self.exit.is_some() || self.phase == Phase::Done {
            return;
        }
        self.exit = Some(exit);
        match self.phase {
            Phase::Running if self.pipes_closed => self.end_of_run(now),
            Phase::Running => {
                self.phase = Phase::Draining {
                    until: now + DRAIN_AFTER_EXIT,
                }
            }
            // Exited during a grace period: what it started may still be in its group, and
            // the rest of the grace is its. Look at once (often nothing is left), then now and
            // then until the grace ends.
            Phase::Stopping { sent, until, .. } => {
                self.actions.push_back(RunAction::Probe);
                self.phase = Phase::Stopping {
                    sent,
                    until,
                    probe: Some(now + GROUP_PROBE),
                };
            }
            Phase::Killed { .. } if self.pipes_closed => self.finish(),
            Phase::Killed { .. } => {
                self.phase = Phase::Killed {
                    until: now + DRAIN_AFTER_KILL,
                }
            }
            Phase::Draining { .. } | Phase::Done => {}
        }
    }

    /// Every captured output pipe reached end of file at `now`.
    pub fn handle_pipes_closed(&mut self, now: Instant) {
        if self.pipes_closed || self.phase == Phase::Done {
            return;
        }
        self.pipes_closed = true;
        // Without the exit there is nothing to finish yet: a child may close its output and
        // go on running (the timeouts still apply).
        if self.exit.is_some() {
            match self.phase {
                Phase::Draining { .. } => self.end_of_run(now),
                Phase::Killed { .. } => self.finish(),
                // The group may still hold a process that closed its output: it has the rest
                // of the grace, until the group is found empty.
                Phase::Stopping { .. } | Phase::Running | Phase::Done => {}
            }
        }
    }

    /// The caller asked to stop the run at `now`. The first request stops the group like a
    /// timeout (outcome [`RunOutcome::Cancelled`] unless a timeout already stopped it); a request
    /// while the group is being stopped sends SIGKILL at once. A child that already exited by
    /// itself stays completed: what it left behind is stopped.
    pub fn handle_cancel(&mut self, now: Instant) {
        match self.phase {
            Phase::Running => {
                self.outcome = RunOutcome::Cancelled;
                self.stop(now);
            }
            Phase::Draining { .. } => self.stop(now),
            Phase::Stopping { .. } => self.kill(now),
            Phase::Killed { .. } | Phase::Done => {}
        }
    }

    /// A signal or probe to the group found no process in it at `now`. The grace ends: only a
    /// process that left the group can still hold the pipes, and no grace period brings it
    /// down, so the run ends once the pipes are closed, or after [`DRAIN_AFTER_KILL`]. The
    /// group gets no more signals.
    pub fn handle_group_empty(&mut self, now: Instant) {
        if self.exit.is_none() || self.phase == Phase::Done {
            // The child itself is in the group until reaped: the report is stale.
            return;
        }
        self.group_empty = true;
        match self.phase {
            Phase::Stopping { .. } if self.pipes_closed => self.finish(),
            Phase::Stopping { .. } => {
                self.phase = Phase::Killed {
                    until: now + DRAIN_AFTER_KILL,
                }
            }
            Phase::Running | Phase::Draining { .. } | Phase::Killed { .. } | Phase::Done => {}
        }
    }

    /// A look at the group at `now` found no process in it that runs (only zombies, or no
    /// member the driver could see although signal 0 still finds the group). Such a look can
    /// miss a live process (a thread behind a zombie leader, a process the driver's view of
    /// the system does not show), so the grace ends with SIGKILL ([`RunAction::Kill`]), never
    /// without it: the zombies keep the group's id taken, so it cannot have been reused yet.
    /// Then the group counts as empty, as with [`RunLifecycle::handle_group_empty`].
    pub fn handle_group_zombies(&mut self, now: Instant) {
        if self.exit.is_none() || self.phase == Phase::Done {
            // The child itself is in the group until reaped: the report is stale.
            return;
        }
        match self.phase {
            Phase::Stopping { .. } => {
                self.kill(now);
                self.group_empty = true;
            }
            // After SIGKILL: nothing more to send.
            Phase::Killed { .. } => self.group_empty = true,
            // No look is asked for outside a stop; a stale report changes nothing.
            Phase::Running | Phase::Draining { .. } | Phase::Done => {}
        }
    }

    /// Time passed: whatever is due at `now` happens (calling it early changes nothing).
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some((at, reason)) = self.poll_timeout() else {
            return;
        };
        if now < at {
            return;
        }
        match reason {
            WakeReason::Deadline => {
                self.outcome = RunOutcome::TimedOut;
                self.stop(now);
            }
            WakeReason::Idle => {
                self.outcome = RunOutcome::IdleTimedOut;
                self.stop(now);
            }
            WakeReason::DrainAfterExit => self.stop(now),
            WakeReason::Grace => {
                let Phase::Stopping { sent, .. } = self.phase else {
                    return;
                };
                self.signal(now, sent + 1);
            }
            WakeReason::GroupProbe => {
                let Phase::Stopping { sent, until, .. } = self.phase else {
                    return;
                };
                self.actions.push_back(RunAction::Probe);
                self.phase = Phase::Stopping {
                    sent,
                    until,
                    probe: Some(now + GROUP_PROBE),
                };
            }
            WakeReason::DrainAfterKill | WakeReason::ExitAfterKill => self.finish(),
        }
    }

    /// The child exited by itself and its pipes closed: the run is over, and what is left of
    /// its group is stopped (unless kept). The first signal usually finds the group empty.
    fn end_of_run(&mut self, now: Instant) {
        if self.keep_background {
            self.finish();
        } else {
            self.stop(now);
        }
    }

    /// Starts the stop sequence with the first stop signal.
    fn stop(&mut self, now: Instant) {
        self.signal(now, 0);
    }

    /// Sends stop signal `index`, or SIGKILL after the last one.
    fn signal(&mut self, now: Instant, index: usize) {
        match self.signals.get(index) {
            Some(&signal) => {
                if !self.group_empty {
                    self.actions.push_back(RunAction::Signal(signal));
                }
                self.phase = Phase::Stopping {
                    sent: index,
                    until: now + self.grace,
                    // After the exit the grace ends early once the group is empty.
                    probe: self.exit.is_some().then(|| now + GROUP_PROBE),
                };
            }
            None => self.kill(now),
        }
    }

    fn kill(&mut self, now: Instant) {
        if !self.group_empty {
            self.actions.push_back(RunAction::Kill);
        }
        match self.exit {
            Some(_) if self.pipes_closed => self.finish(),
            Some(_) => {
                self.phase = Phase::Killed {
                    until: now + DRAIN_AFTER_KILL,
                }
            }
            // SIGKILL cannot be ignored: the exit comes, and the drain counts from it; unless
            // the child is stuck in the kernel, which the fallback bounds.
            None => {
                self.phase = Phase::Killed {
                    until: now + EXIT_AFTER_KILL,
                }
            }
        }
    }

    fn finish(&mut self) {
        self.actions.push_back(RunAction::Finish {
            outcome: self.outcome,
            exit: self.exit.flatten(),
            pipes_open: !self.pipes_closed,
            reaped: self.exit.is_some(),
        });
        self.phase = Phase::Done;
    }
}
