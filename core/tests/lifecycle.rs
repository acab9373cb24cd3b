//! Virtual-clock tests of the run lifecycle: every escalation path of a process run (deadline,
//! idle timeout, cancellation, a child ignoring SIGTERM, a grandchild holding the pipes, an
//! exit during the grace period, the rest of the group after the exit, a second cancellation)
//! without a process or a sleep.

use std::time::{Duration, Instant};

use agentrun_core::harness::StopSignal;
use agentrun_core::lifecycle::{
    DRAIN_AFTER_EXIT, DRAIN_AFTER_KILL, EXIT_AFTER_KILL, GROUP_PROBE, RunAction, RunLifecycle,
    WakeReason,
};
use agentrun_core::process::{Exit, MAX_RUN_DURATION, OptionsError, RunOptions, RunOutcome};

/// The origin of the virtual clock. The machine only compares instants and adds durations to
/// them, so any instant will do; this is the only clock read in these tests (the sans-IO rule
/// covers the library in core/src, not its tests).
#[allow(clippy::disallowed_methods)]
fn origin() -> Instant {
    Instant::now()
}
use StopSignal::{Interrupt, Terminate};

/// A virtual clock and the lifecycle it drives.
struct Sim {
    start: Instant,
    now: Instant,
    run: RunLifecycle,
}

impl Sim {
    fn new(options: RunOptions) -> Self {
        // Any fixed instant works: the machine only compares and adds.
        let start = origin();
        Self {
            start,
            now: start,
            run: RunLifecycle::new(&options, start).expect("valid options"),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    fn elapsed_ms(&self) -> u128 {
        (self.now - self.start).as_millis()
    }

    /// Advances the clock to the next wakeup, fires it, and returns the reason.
    fn wake(&mut self) -> Option<WakeReason> {
        let (at, reason) = self.run.poll_timeout()?;
        self.now = at;
        self.run.handle_timeout(at);
        Some(reason)
    }

    fn actions(&mut self) -> Vec<RunAction> {
        std::iter::from_fn(|| self.run.poll_action()).collect()
    }

    fn set(&mut self, ms: u64) {
        self.now = self.at(ms);
    }

    /// Wakes until a reason other than a group probe is due and fires it, as for a group that
    /// never turns out empty; each probe on the way asks for exactly one look at the group.
    fn wake_past_probes(&mut self) -> Option<WakeReason> {
        loop {
            let reason = self.wake()?;
            if reason != WakeReason::GroupProbe {
                return Some(reason);
            }
            assert_eq!(
                self.actions(),
                [RunAction::Probe],
                "at {} ms",
                self.elapsed_ms()
            );
        }
    }
}

fn opts() -> RunOptions {
    RunOptions::new("child").kill_grace(Duration::from_secs(5))
}

/// The run ends with every output pipe closed and the child reaped.
fn finish(outcome: RunOutcome, exit: Option<Exit>) -> RunAction {
    RunAction::Finish {
        outcome,
        exit,
        pipes_open: false,
        reaped: true,
    }
}

/// The run ends with the child reaped while a process outside its group still holds an
/// output pipe (what it writes later is not captured).
fn finish_open(outcome: RunOutcome, exit: Option<Exit>) -> RunAction {
    RunAction::Finish {
        outcome,
        exit,
        pipes_open: true,
        reaped: true,
    }
}

const TERM: RunAction = RunAction::Signal(Terminate);
const INT: RunAction = RunAction::Signal(Interrupt);
const KILLED: Option<Exit> = Some(Exit::Signal(9));

#[test]
fn a_normal_exit_finishes_once_the_pipes_close_in_either_order() {
    let mut sim = Sim::new(opts());
    assert_eq!(sim.run.poll_timeout(), None, "no timeout, no wakeup");
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(3)));
    assert_eq!(sim.actions(), []);
    sim.run.handle_pipes_closed(sim.at(11));
    // The end of the run: whatever is left of the group is stopped; here nothing is.
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_group_empty(sim.at(11));
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::Completed, Some(Exit::Code(3)))]
    );
    assert!(sim.run.is_finished());
    assert_eq!(sim.run.poll_timeout(), None);

    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.run.handle_pipes_closed(sim.at(10));
    assert_eq!(sim.actions(), [], "a closed pipe is no exit");
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(1000), WakeReason::Deadline))
    );
    sim.run.handle_exit(sim.at(20), Some(Exit::Code(0)));
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_group_empty(sim.at(20));
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
}

#[test]
fn the_deadline_sends_sigterm_then_sigkill_after_the_grace() {
    // A child ignoring SIGTERM.
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.run.handle_timeout(sim.at(999));
    assert_eq!(sim.actions(), [], "not due yet");
    assert_eq!(sim.wake(), Some(WakeReason::Deadline));
    assert_eq!(sim.elapsed_ms(), 1000);
    assert_eq!(sim.actions(), [TERM]);
    assert_eq!(sim.wake(), Some(WakeReason::Grace));
    assert_eq!(sim.elapsed_ms(), 6000);
    assert_eq!(sim.actions(), [RunAction::Kill]);
    // After SIGKILL only the fallback for a child that never exits is due; the drain counts
    // from the exit.
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(6000) + EXIT_AFTER_KILL, WakeReason::ExitAfterKill))
    );
    sim.set(6010);
    sim.run.handle_exit(sim.now, KILLED);
    sim.run.handle_pipes_closed(sim.now);
    assert_eq!(sim.actions(), [finish(RunOutcome::TimedOut, KILLED)]);
}

/// The grace belongs to the group, not to the direct child: a wrapper (`sh -c`, `npm test`)
/// that dies of SIGTERM at once leaves what it started its whole grace to clean up. The group
/// is looked at right after the exit and then every [`GROUP_PROBE`]; once it is empty the run
/// ends, without SIGKILL.
#[test]
fn an_exit_during_the_grace_leaves_the_rest_of_the_group_its_grace() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    assert_eq!(sim.wake(), Some(WakeReason::Deadline));
    assert_eq!(sim.actions(), [TERM]);
    sim.set(1200);
    let term = Some(Exit::Signal(15));
    sim.run.handle_exit(sim.now, term);
    assert_eq!(sim.actions(), [RunAction::Probe], "no SIGKILL on the exit");
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(1200) + GROUP_PROBE, WakeReason::GroupProbe))
    );
    // The wrapper's child cleans up for 2 s, then exits and its pipes close.
    while sim.elapsed_ms() < 3200 {
        assert_eq!(sim.wake(), Some(WakeReason::GroupProbe));
        assert_eq!(sim.actions(), [RunAction::Probe]);
    }
    sim.run.handle_pipes_closed(sim.now);
    assert_eq!(sim.actions(), [], "the group may still hold a process");
    assert_eq!(sim.wake(), Some(WakeReason::GroupProbe));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_group_empty(sim.now);
    assert_eq!(sim.actions(), [finish(RunOutcome::TimedOut, term)]);
    assert!(sim.elapsed_ms() < 6000, "before the grace ended");
}

/// A group that outlives the grace gets SIGKILL when the grace ends, counted from the stop
/// signal, not from the child's exit.
#[test]
fn the_rest_of_the_group_gets_sigkill_when_the_grace_ends() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.wake();
    assert_eq!(sim.actions(), [TERM]);
    sim.set(1200);
    sim.run.handle_exit(sim.now, Some(Exit::Signal(15)));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    assert_eq!(sim.wake_past_probes(), Some(WakeReason::Grace));
    assert_eq!(sim.elapsed_ms(), 6000);
    assert_eq!(sim.actions(), [RunAction::Kill]);
    sim.run.handle_pipes_closed(sim.at(6010));
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::TimedOut, Some(Exit::Signal(15)))]
    );
    // With a second stop signal, the grace after the first ends with that signal.
    let mut sim = Sim::new(
        opts()
            .stop_signals(&[Interrupt, Terminate])
            .timeout(Duration::from_secs(1)),
    );
    sim.wake();
    assert_eq!(sim.actions(), [INT]);
    sim.run.handle_exit(sim.at(1100), Some(Exit::Signal(2)));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    assert_eq!(sim.wake_past_probes(), Some(WakeReason::Grace));
    assert_eq!((sim.elapsed_ms(), sim.actions()), (6000, vec![TERM]));
    assert_eq!(sim.wake_past_probes(), Some(WakeReason::Grace));
    assert_eq!(
        (sim.elapsed_ms(), sim.actions()),
        (11_000, vec![RunAction::Kill])
    );
}

/// The same for a cancellation (and so for a dropped run future or the MCP cancel), and a
/// second request during the group's grace still sends SIGKILL at once.
#[test]
fn a_cancelled_wrapper_leaves_its_group_the_grace_and_a_second_cancel_kills() {
    let mut sim = Sim::new(opts());
    sim.run.handle_cancel(sim.at(100));
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_exit(sim.at(110), Some(Exit::Signal(15)));
    sim.run.handle_pipes_closed(sim.at(110));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    assert_eq!(sim.wake(), Some(WakeReason::GroupProbe));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_cancel(sim.at(300));
    assert_eq!(
        sim.actions(),
        [
            RunAction::Kill,
            finish(RunOutcome::Cancelled, Some(Exit::Signal(15)))
        ]
    );
}

/// At the end of a run, whatever is left of the child's group (a background process that let
/// the pipes go) is stopped like a child: stop signal, grace (ended once the group is empty),
/// SIGKILL. The run stays completed with the child's own exit status.
#[test]
fn what_is_left_of_the_group_after_a_normal_exit_is_stopped_and_the_exit_kept() {
    // A background process that dies of SIGTERM.
    let mut sim = Sim::new(opts());
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(0)));
    sim.run.handle_pipes_closed(sim.at(12));
    assert_eq!(sim.actions(), [TERM]);
    assert_eq!(sim.wake(), Some(WakeReason::GroupProbe));
    assert_eq!(sim.elapsed_ms(), 12 + GROUP_PROBE.as_millis());
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_group_empty(sim.now);
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
    // One that ignores it: SIGKILL after the grace.
    let mut sim = Sim::new(opts());
    sim.run.handle_pipes_closed(sim.at(5));
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(4)));
    assert_eq!(sim.actions(), [TERM]);
    assert_eq!(sim.wake_past_probes(), Some(WakeReason::Grace));
    assert_eq!(sim.elapsed_ms(), 5010);
    assert_eq!(
        sim.actions(),
        [
            RunAction::Kill,
            finish(RunOutcome::Completed, Some(Exit::Code(4)))
        ]
    );
    // No stop signals: SIGKILL at once.
    let mut sim = Sim::new(opts().stop_signals(&[]));
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(0)));
    sim.run.handle_pipes_closed(sim.at(10));
    assert_eq!(
        sim.actions(),
        [
            RunAction::Kill,
            finish(RunOutcome::Completed, Some(Exit::Code(0)))
        ]
    );
}

/// `keep_background`: what the child left in its group after a normal exit is not signalled
/// (daemons started on purpose). Processes that still hold the run's pipes after the drain
/// are stopped either way: their output could not be captured after the run ends.
#[test]
fn keep_background_leaves_the_group_alone_after_a_normal_exit() {
    let mut sim = Sim::new(opts().keep_background(true));
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(0)));
    sim.run.handle_pipes_closed(sim.at(11));
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
    let mut sim = Sim::new(opts().keep_background(true));
    sim.run.handle_pipes_closed(sim.at(5));
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(0)));
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
    let mut sim = Sim::new(opts().keep_background(true));
    sim.run.handle_exit(sim.at(0), Some(Exit::Code(0)));
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterExit));
    assert_eq!(sim.actions(), [TERM]);
    // A timeout still stops the whole group.
    let mut sim = Sim::new(opts().keep_background(true).timeout(Duration::from_secs(1)));
    sim.wake();
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_exit(sim.at(1100), Some(Exit::Signal(15)));
    assert_eq!(sim.actions(), [RunAction::Probe]);
}

/// Once the group was found empty it is never signalled again: its id may be reused by an
/// unrelated process group.
#[test]
fn an_empty_group_gets_no_more_signals() {
    let mut sim = Sim::new(opts());
    sim.run.handle_exit(sim.at(0), Some(Exit::Code(0)));
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterExit));
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_group_empty(sim.now);
    sim.run.handle_cancel(sim.at(2100));
    sim.run.handle_cancel(sim.at(2200));
    assert_eq!(sim.actions(), [], "no SIGKILL to a group found empty");
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterKill));
    assert_eq!(
        sim.actions(),
        [finish_open(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
}

/// A look at the group that finds no process running (only zombies, or none the driver can
/// see although signal 0 still finds the group) ends the grace with SIGKILL, never without
/// it: the look may miss a live process (a thread behind a zombie leader, a `/proc` of
/// another PID namespace), and the zombies keep the group's id from being reused. Then the
/// group counts as empty.
#[test]
fn a_group_of_zombies_gets_sigkill_before_it_counts_as_empty() {
    // After a normal exit whose pipes closed: TERM, a probe, the zombies-only verdict.
    let mut sim = Sim::new(opts());
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(0)));
    sim.run.handle_pipes_closed(sim.at(10));
    assert_eq!(sim.actions(), [TERM]);
    assert_eq!(sim.wake(), Some(WakeReason::GroupProbe));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_group_zombies(sim.now);
    assert_eq!(
        sim.actions(),
        [
            RunAction::Kill,
            finish(RunOutcome::Completed, Some(Exit::Code(0)))
        ]
    );
    assert!(sim.elapsed_ms() < 5000, "before the grace ended");
    // During a timeout's grace, with a pipe still open: SIGKILL, then the last drain, and
    // the group gets nothing more.
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.wake();
    assert_eq!(sim.actions(), [TERM]);
    sim.set(1100);
    sim.run.handle_exit(sim.now, Some(Exit::Signal(15)));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_group_zombies(sim.now);
    assert_eq!(sim.actions(), [RunAction::Kill]);
    sim.run.handle_cancel(sim.at(1200));
    assert_eq!(
        sim.actions(),
        [],
        "no second SIGKILL to a group counted empty"
    );
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterKill));
    assert_eq!(sim.elapsed_ms(), 1100 + DRAIN_AFTER_KILL.as_millis());
    assert_eq!(
        sim.actions(),
        [finish_open(RunOutcome::TimedOut, Some(Exit::Signal(15)))]
    );
    // Before the child was reaped the verdict is stale (the child itself is in the group).
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.wake();
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_group_zombies(sim.now);
    assert_eq!(sim.actions(), []);
    assert_eq!(sim.wake(), Some(WakeReason::Grace));
    assert_eq!(sim.actions(), [RunAction::Kill]);
}

#[test]
fn a_grandchild_holding_the_pipes_after_sigkill_is_not_waited_for() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.wake();
    sim.set(1100);
    sim.run.handle_exit(sim.now, Some(Exit::Signal(15)));
    assert_eq!(sim.actions(), [TERM, RunAction::Probe]);
    // The grandchild ignores SIGTERM: SIGKILL when the grace ends.
    assert_eq!(sim.wake_past_probes(), Some(WakeReason::Grace));
    assert_eq!(sim.actions(), [RunAction::Kill]);
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterKill));
    assert_eq!(sim.elapsed_ms(), 6000 + DRAIN_AFTER_KILL.as_millis());
    assert_eq!(
        sim.actions(),
        [finish_open(RunOutcome::TimedOut, Some(Exit::Signal(15)))]
    );
}

#[test]
fn the_idle_timeout_counts_from_the_last_output() {
    let mut sim = Sim::new(opts().idle_timeout(Duration::from_secs(1)));
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(1000), WakeReason::Idle))
    );
    // Output at 800 ms moves it; a stale report (earlier instant) does not move it back.
    sim.run.handle_output(sim.at(800));
    sim.run.handle_output(sim.at(500));
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(1800), WakeReason::Idle))
    );
    // A driver may report the last output only when the timer fires.
    sim.set(1000);
    sim.run.handle_timeout(sim.now);
    assert_eq!(sim.actions(), []);
    assert_eq!(sim.wake(), Some(WakeReason::Idle));
    assert_eq!(sim.elapsed_ms(), 1800);
    assert_eq!(sim.actions(), [TERM]);
    sim.run.handle_exit(sim.at(1900), Some(Exit::Signal(15)));
    sim.run.handle_pipes_closed(sim.at(1900));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_group_empty(sim.at(1900));
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::IdleTimedOut, Some(Exit::Signal(15)))]
    );
}

#[test]
fn the_earlier_of_deadline_and_idle_timeout_wins() {
    let mut sim = Sim::new(
        opts()
            .timeout(Duration::from_secs(3))
            .idle_timeout(Duration::from_secs(1)),
    );
    for ms in (500..3000).step_by(500) {
        sim.run.handle_output(sim.at(ms));
    }
    assert_eq!(sim.wake(), Some(WakeReason::Deadline));
    assert_eq!(sim.elapsed_ms(), 3000);
    assert_eq!(sim.actions(), [TERM]);
}

#[test]
fn cancel_stops_like_a_timeout_and_a_second_cancel_kills_at_once() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(60)));
    sim.set(100);
    sim.run.handle_cancel(sim.now);
    assert_eq!(sim.actions(), [TERM]);
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(5100), WakeReason::Grace)),
        "the deadline no longer applies"
    );
    sim.set(200);
    sim.run.handle_cancel(sim.now);
    assert_eq!(sim.actions(), [RunAction::Kill], "no waiting for the grace");
    sim.run.handle_cancel(sim.at(250));
    assert_eq!(sim.actions(), [], "SIGKILL is sent once");
    sim.run.handle_exit(sim.at(300), KILLED);
    assert_eq!(sim.actions(), []);
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterKill));
    assert_eq!(sim.actions(), [finish_open(RunOutcome::Cancelled, KILLED)]);
}

#[test]
fn a_cancel_after_a_timeout_escalates_but_keeps_the_cause() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.wake();
    sim.run.handle_cancel(sim.at(1500));
    sim.run.handle_exit(sim.at(1510), KILLED);
    sim.run.handle_pipes_closed(sim.at(1510));
    assert_eq!(
        sim.actions(),
        [TERM, RunAction::Kill, finish(RunOutcome::TimedOut, KILLED)]
    );
}

#[test]
fn stop_signals_go_in_order_with_the_grace_after_each() {
    let mut sim = Sim::new(
        opts()
            .stop_signals(&[Interrupt, Terminate])
            .kill_grace(Duration::from_millis(400))
            .timeout(Duration::from_millis(300)),
    );
    let mut seen = Vec::new();
    while let Some(reason) = sim.wake() {
        seen.push((sim.elapsed_ms(), reason, sim.actions()));
        if reason == WakeReason::Grace && seen.len() == 3 {
            break; // what follows SIGKILL is the fallback's business
        }
    }
    assert_eq!(
        seen,
        [
            (300, WakeReason::Deadline, vec![INT]),
            (700, WakeReason::Grace, vec![TERM]),
            (1100, WakeReason::Grace, vec![RunAction::Kill]),
        ]
    );
    // No stop signals: SIGKILL at once.
    let mut sim = Sim::new(opts().stop_signals(&[]));
    sim.run.handle_cancel(sim.at(5));
    assert_eq!(sim.actions(), [RunAction::Kill]);
}

#[test]
fn leftovers_holding_the_pipes_after_an_exit_are_stopped_and_the_exit_kept() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(60)));
    sim.set(100);
    sim.run.handle_exit(sim.now, Some(Exit::Code(0)));
    assert_eq!(
        sim.run.poll_timeout(),
        Some((sim.at(100) + DRAIN_AFTER_EXIT, WakeReason::DrainAfterExit)),
        "the deadline no longer applies to a child that exited"
    );
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterExit));
    assert_eq!(sim.actions(), [TERM]);
    // The leftover dies of SIGTERM: its pipes close, the group is found empty, the run ends
    // completed.
    sim.run.handle_pipes_closed(sim.at(2120));
    assert_eq!(sim.actions(), []);
    assert_eq!(sim.wake(), Some(WakeReason::GroupProbe));
    assert_eq!(sim.actions(), [RunAction::Probe]);
    sim.run.handle_group_empty(sim.now);
    assert_eq!(
        sim.actions(),
        [finish(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
}

#[test]
fn leftovers_ignoring_sigterm_get_sigkill_and_a_last_drain() {
    let mut sim = Sim::new(opts());
    sim.run.handle_exit(sim.at(0), Some(Exit::Code(0)));
    let mut seen = Vec::new();
    while let Some(reason) = sim.wake_past_probes() {
        seen.push((reason, sim.actions()));
    }
    assert_eq!(
        seen,
        [
            (WakeReason::DrainAfterExit, vec![TERM]),
            (WakeReason::Grace, vec![RunAction::Kill]),
            (
                WakeReason::DrainAfterKill,
                vec![finish_open(RunOutcome::Completed, Some(Exit::Code(0)))]
            ),
        ]
    );
    let bound = DRAIN_AFTER_EXIT + Duration::from_secs(5) + DRAIN_AFTER_KILL;
    assert_eq!(sim.elapsed_ms(), bound.as_millis());
}

#[test]
fn a_holder_outside_the_group_costs_two_drains_not_the_grace() {
    let mut sim = Sim::new(opts());
    sim.run.handle_exit(sim.at(0), Some(Exit::Code(0)));
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterExit));
    assert_eq!(sim.actions(), [TERM]);
    // The driver's SIGTERM found no process in the group.
    sim.run.handle_group_empty(sim.now);
    assert_eq!(sim.wake(), Some(WakeReason::DrainAfterKill));
    // The run is completed, but the holder may write after it: the finish says the pipes
    // were still open, so the driver marks the output as possibly incomplete.
    assert_eq!(
        sim.actions(),
        [finish_open(RunOutcome::Completed, Some(Exit::Code(0)))]
    );
    assert_eq!(
        sim.elapsed_ms(),
        (DRAIN_AFTER_EXIT + DRAIN_AFTER_KILL).as_millis()
    );
}

#[test]
fn a_child_that_never_dies_of_sigkill_ends_the_run_with_its_exit_unknown() {
    // A child in uninterruptible sleep: SIGTERM and SIGKILL go out, no exit ever comes.
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    let mut seen = Vec::new();
    while let Some(reason) = sim.wake() {
        seen.push((sim.elapsed_ms(), reason, sim.actions()));
    }
    let killed_at = 6000;
    assert_eq!(
        seen,
        [
            (1000, WakeReason::Deadline, vec![TERM]),
            (killed_at, WakeReason::Grace, vec![RunAction::Kill]),
            (
                killed_at + EXIT_AFTER_KILL.as_millis(),
                WakeReason::ExitAfterKill,
                vec![RunAction::Finish {
                    outcome: RunOutcome::TimedOut,
                    exit: None,
                    pipes_open: true,
                    reaped: false,
                }]
            ),
        ]
    );
    assert!(sim.run.is_finished());
    // An exit reported after the run gave up on it changes nothing.
    sim.run.handle_exit(sim.now, KILLED);
    assert_eq!(sim.actions(), []);

    // The same after a cancellation whose child closed its pipes but never died.
    let mut sim = Sim::new(opts().stop_signals(&[]));
    sim.run.handle_cancel(sim.at(0));
    sim.run.handle_pipes_closed(sim.at(5));
    assert_eq!(sim.actions(), [RunAction::Kill]);
    assert_eq!(sim.wake(), Some(WakeReason::ExitAfterKill));
    assert_eq!(
        sim.actions(),
        [RunAction::Finish {
            outcome: RunOutcome::Cancelled,
            exit: None,
            pipes_open: false,
            reaped: false,
        }]
    );
    // An exit in time still wins, and the drain counts from it.
    let mut sim = Sim::new(opts().stop_signals(&[]));
    sim.run.handle_cancel(sim.at(0));
    sim.run.handle_exit(sim.at(59_000), KILLED);
    assert_eq!(
        sim.run.poll_timeout(),
        Some((
            sim.at(59_000) + DRAIN_AFTER_KILL,
            WakeReason::DrainAfterKill
        ))
    );
}

#[test]
fn a_stale_group_empty_report_before_the_exit_changes_nothing() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.wake();
    sim.run.handle_group_empty(sim.now);
    assert_eq!(sim.actions(), [TERM]);
    assert_eq!(sim.wake(), Some(WakeReason::Grace));
    assert_eq!(sim.actions(), [RunAction::Kill]);
}

#[test]
fn a_cancel_after_the_exit_stops_the_leftovers_and_keeps_completed() {
    let mut sim = Sim::new(opts());
    sim.run.handle_exit(sim.at(10), Some(Exit::Code(1)));
    sim.run.handle_cancel(sim.at(20));
    sim.run.handle_cancel(sim.at(30));
    sim.run.handle_pipes_closed(sim.at(40));
    assert_eq!(
        sim.actions(),
        [
            TERM,
            RunAction::Kill,
            finish(RunOutcome::Completed, Some(Exit::Code(1)))
        ]
    );
}

#[test]
fn nothing_happens_after_finish_and_unreadable_statuses_are_kept_as_none() {
    let mut sim = Sim::new(opts().timeout(Duration::from_secs(1)));
    sim.run.handle_pipes_closed(sim.at(1));
    sim.run.handle_exit(sim.at(2), None);
    sim.run.handle_group_empty(sim.at(2));
    // Reaped with an unreadable status: `exit` is `None`, `reaped` stays true.
    assert_eq!(sim.actions(), [TERM, finish(RunOutcome::Completed, None)]);
    sim.run.handle_cancel(sim.at(3));
    sim.run.handle_timeout(sim.at(10_000));
    sim.run.handle_exit(sim.at(4), Some(Exit::Code(0)));
    sim.run.handle_group_empty(sim.at(5));
    assert_eq!(sim.actions(), []);
}

#[test]
fn invalid_options_are_refused() {
    let zero = RunOptions::new("x").timeout(Duration::ZERO);
    assert!(matches!(
        RunLifecycle::new(&zero, origin()),
        Err(OptionsError::ZeroTimeout { .. })
    ));
}

#[test]
fn durations_past_the_bound_are_refused_and_the_bound_itself_never_overflows() {
    let over = MAX_RUN_DURATION + Duration::from_secs(1);
    for options in [
        RunOptions::new("x").timeout(over),
        RunOptions::new("x").idle_timeout(over),
        RunOptions::new("x").kill_grace(over),
        RunOptions::new("x").kill_grace(Duration::MAX),
    ] {
        assert!(matches!(
            RunLifecycle::new(&options, origin()),
            Err(OptionsError::DurationTooLong { .. })
        ));
    }
    // At the bound every instant the machine computes is representable: deadline, idle timer,
    // grace after a cancel, the drain after SIGKILL.
    let options = RunOptions::new("x")
        .timeout(MAX_RUN_DURATION)
        .idle_timeout(MAX_RUN_DURATION)
        .kill_grace(MAX_RUN_DURATION);
    let start = origin();
    let mut run = RunLifecycle::new(&options, start).unwrap();
    assert!(run.poll_timeout().is_some());
    run.handle_cancel(start);
    while run.poll_action().is_some() {}
    let (grace_end, _) = run.poll_timeout().unwrap();
    assert_eq!(grace_end, start + MAX_RUN_DURATION);
    run.handle_timeout(grace_end);
    while run.poll_action().is_some() {}
}
