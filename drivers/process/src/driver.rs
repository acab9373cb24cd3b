//! The one process driver, generic over a small [`Runtime`] trait.
//!
//! # Driving order
//!
//! 1. `prepare` on the blocking pool: options checked, capture and result sink opened. The
//!    [`RunLifecycle`] is created (the timeouts count from here), so nothing that can fail
//!    is left between the spawn and the drop guard.
//! 2. Spawn the child (its own process group); a failure removes the capture and the sink.
//! 3. At once: the watchdog, a pidfd on the child, and the drop guard. From here on every
//!    way out (an error taking the pipes, a dropped future) stops the child's group.
//! 4. Start the pump jobs (stdout, stderr) and the stdin job on the blocking pool.
//! 5. Loop: carry out every [`RunAction`] (signals and probes to the group, reporting an
//!    empty group),
//!    then wait for the first of: the child's exit, all pumps done (pipes closed), a cancel
//!    request, the lifecycle's next wakeup (reporting the last output first), the next
//!    progress report ([`RunBuilder::on_progress`]). Until
//!    [`RunAction::Finish`].
//! 6. `finish` on the blocking pool: the pumps stopped, what the end left unfinished recorded,
//!    sink read, capture finalized, result assembled.
//!
//! If the run future is dropped (or the run fails) between 3 and 6, the drop guard feeds the
//! lifecycle a cancellation, sends its first signal at once, and hands the rest to a blocking
//! job that drives the same lifecycle on the thread's clock, sleeping until the child's exit
//! (its pidfd), the end of the pumps or the lifecycle's next instant, then finalizes the
//! output captured so far as cancelled.

use std::future::{Future, IntoFuture};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use agentrun_core::lifecycle::{RunAction, RunLifecycle};
use agentrun_core::page::{BytePage, ByteRange, Page, PageRequest};
use agentrun_core::process::{ProcessResult, RunOptions};
use agentrun_core::progress::RunProgress;
use agentrun_core::{ArtifactUri, ResultRecord};
use agentrun_fs::{ReadError, Store, StoreError};
use futures_lite::Stream;
use rustix::process::{Pid, Signal};

use crate::live::{Ending, LiveRun, Prepared, RunError, TapPanics, prepare};
use crate::os::{self, Delivery, LatchWatch};
use crate::pump::StdoutObserver;
use crate::watchdog::Watchdog;

/// What a process driver needs from an async runtime. agentrun-smol and agentrun-tokio
/// implement it; everything else is written once, here.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// The runtime's handle on a spawned child.
    type Child: ChildProcess;

    /// Spawns `command` with `stdio` (called from within the run future).
    fn spawn(&self, command: Command, stdio: [Stdio; 3]) -> io::Result<Self::Child>;

    /// The runtime's monotonic clock. Every instant of a run (the lifecycle's deadlines, the
    /// last output, the duration) is read from it and handed to [`Runtime::sleep_until`], so a
    /// runtime whose clock is virtual (tokio's paused clock) runs the whole timing policy in
    /// virtual time. Called from the run future and from the runtime's blocking jobs (the
    /// pumps record output times with it).
    fn now(&self) -> Instant;

    /// Resolves at `deadline` (an instant of [`Runtime::now`]'s clock).
    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static;

    /// Runs `job` on the blocking pool. The job runs to its end even when the returned future
    /// is dropped, and even when called outside the runtime (from a `Drop`); the future fails
    /// only if the job panicked.
    fn spawn_blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = io::Result<T>> + Send + 'static;
}

/// A spawned child, as the runtime sees it.
pub trait ChildProcess: Send + 'static {
    /// The child's process id.
    fn id(&self) -> Option<u32>;

    /// Takes the child's stdin, stdout and stderr pipe ends (`None` where not piped).
    fn take_pipes(&mut self) -> io::Result<[Option<OwnedFd>; 3]>;

    /// Waits for the child to exit and reaps it. Must be cancel-safe: the driver polls a new
    /// wait after every other event.
    fn wait(&mut self) -> impl Future<Output = io::Result<ExitStatus>> + Send + '_;

    /// Reaps the child if it exited, without waiting (usable outside the runtime).
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>>;
}

/// Runs processes with their output captured into a store, on runtime `R`.
#[derive(Debug, Clone)]
pub struct Runner<R> {
    pub(crate) store: Store,
    pub(crate) runtime: R,
}

impl<R: Runtime + Default> Runner<R> {
    /// A runner capturing into `store`.
    pub fn new(store: Store) -> Self {
        Self::with_runtime(store, R::default())
    }
}

impl<R: Runtime> Runner<R> {
    /// A runner capturing into `store` on `runtime`.
    pub fn with_runtime(store: Store, runtime: R) -> Self {
        Self { store, runtime }
    }

    /// The store the runner captures into.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Reads one page of lines of an artifact ([`Store::read_page`]) on the runtime's
    /// blocking pool, so an async caller never blocks its executor on the disk.
    pub async fn read_page(
        &self,
        uri: &ArtifactUri,
        request: PageRequest,
    ) -> Result<Page, ReadError> {
        let (store, uri) = (self.store.clone(), uri.clone());
        self.blocking(move || store.read_page(&uri, request)).await
    }

    /// Reads a byte range of an artifact ([`Store::read_bytes`]) on the blocking pool.
    pub async fn read_bytes(
        &self,
        uri: &ArtifactUri,
        range: ByteRange,
    ) -> Result<BytePage, ReadError> {
        let (store, uri) = (self.store.clone(), uri.clone());
        self.blocking(move || store.read_bytes(&uri, range)).await
    }

    /// Loads the result record of run `run_id` ([`Store::record`]) on the blocking pool.
    pub async fn record(&self, run_id: &str) -> Result<ResultRecord, StoreError> {
        let (store, run_id) = (self.store.clone(), run_id.to_owned());
        self.blocking(move || store.record(&run_id)).await
    }

    /// Runs a store call on the blocking pool. A panic in it is resumed here, as if the call
    /// had been made directly.
    async fn blocking<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> T {
        match self.runtime.spawn_blocking(job).await {
            Ok(value) => value,
            Err(e) => panic!("{e}"),
        }
    }

    /// Describes one run of `options`; `.await` it (after choosing a live stdout tap or a stop
    /// input on the returned [`RunBuilder`]) to run the process to its end (exit, timeout,
    /// idle timeout or cancellation) and get its result. Dropping the future cancels the run:
    /// the group is stopped and the output captured so far is finalized as cancelled.
    pub fn run(&self, options: RunOptions) -> RunBuilder<'_, R> {
        RunBuilder {
            runner: self,
            options,
            observers: [None, None],
            cancel: None,
            progress: None,
            ended: None,
        }
    }
}

type CancelStream<'a> = Pin<Box<dyn Stream<Item = ()> + Send + 'a>>;

/// A run's progress reporter ([`RunBuilder::on_progress`]): how often, and what to call.
type Progress<'a> = (Duration, Box<dyn FnMut(&RunProgress) + Send + 'a>);

/// The shortest interval between progress reports ([`RunBuilder::on_progress`]).
pub const MIN_PROGRESS_INTERVAL: Duration = Duration::from_millis(10);

/// One run being described ([`Runner::run`]); awaiting it runs the process.
#[must_use = "a run does nothing until awaited"]
pub struct RunBuilder<'a, R> {
    runner: &'a Runner<R>,
    options: RunOptions,
    /// Live taps on stdout and stderr.
    observers: [Option<StdoutObserver>; 2],
    cancel: Option<CancelStream<'a>>,
    progress: Option<Progress<'a>>,
    ended: Option<Box<dyn FnOnce() + Send>>,
}

impl<R> std::fmt::Debug for RunBuilder<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBuilder")
            .field("options", &self.options)
            .field("observed_stdout", &self.observers[0].is_some())
            .field("observed_stderr", &self.observers[1].is_some())
            .field("cancellable", &self.cancel.is_some())
            .field(
                "progress_every",
                &self.progress.as_ref().map(|(every, _)| every),
            )
            .finish_non_exhaustive()
    }
}

impl<'a, R: Runtime> RunBuilder<'a, R> {
    /// A live tap on the child's stdout: `observer` is called with every stdout chunk while
    /// the child runs (cut anywhere; `agentrun_core::lines::LineSplitter` reassembles lines),
    /// on the blocking thread that pumps the pipe, right after the chunk was captured. The
    /// retained stdout artifact is byte-identical to the concatenated chunks. A slow observer
    /// slows the child down (backpressure).
    ///
    /// An observer that panics is not called again, and its panic counts as a stop request
    /// ([`RunBuilder::stop_on`]): the child's group gets its stop signals (SIGKILL after the
    /// grace) and is waited for, the output captured so far (up to and including the chunk the
    /// observer panicked on) is kept, and the record is published incomplete, with a fault on
    /// the stream saying that what came after was not captured (the store lists it among its
    /// records); its status is cancelled, unless the child had already exited by itself, when
    /// it keeps that ending. Then the panic is resumed in the task awaiting the run,
    /// as if the observer had been called there.
    pub fn observe_stdout(mut self, observer: impl FnMut(&[u8]) + Send + 'static) -> Self {
        self.observers[0] = Some(Box::new(observer));
        self
    }

    /// A live tap on the child's stderr, like [`RunBuilder::observe_stdout`] (each pipe has
    /// its own pump thread, so the two observers may run at the same time).
    pub fn observe_stderr(mut self, observer: impl FnMut(&[u8]) + Send + 'static) -> Self {
        self.observers[1] = Some(Box::new(observer));
        self
    }

    /// Stops the run when `stop` resolves (for example on a signal the caller received): the
    /// group is stopped as on a timeout, the output captured so far is finalized as
    /// cancelled, and the result says `RunOutcome::Cancelled`. Unlike dropping the future, this
    /// waits for the child to be stopped and reaped and returns the result.
    pub fn stop_on(self, stop: impl Future<Output = ()> + Send + 'a) -> Self {
        self.cancel_on(futures_lite::stream::once_future(stop))
    }

    /// Like [`RunBuilder::stop_on`], with every item of `requests` a stop request: the first
    /// stops the run, a second one while the group is being stopped sends SIGKILL at once
    /// (the second Ctrl-C of a terminal user).
    pub fn cancel_on(mut self, requests: impl Stream<Item = ()> + Send + 'a) -> Self {
        self.cancel = Some(Box::pin(requests));
        self
    }

    /// Reports the run's progress every `every` (at least [`MIN_PROGRESS_INTERVAL`]) while the
    /// child runs: `report` is called with the time since the spawn and each stream's lines
    /// and bytes captured so far ([`RunProgress`]; its `Display` is a one-line status). The
    /// first call comes `every` after the spawn, the last before the run ends; a run shorter
    /// than `every` reports nothing. The calls are made by the run future itself, on the
    /// runtime's timer (not once per chunk of output), so `report` must not block: print a
    /// line, send the value on a channel. Reading the counts never waits for the capture. A
    /// `report` that panics unwinds the run future, which stops the run as a dropped one.
    pub fn on_progress(
        mut self,
        every: Duration,
        report: impl FnMut(&RunProgress) + Send + 'a,
    ) -> Self {
        self.progress = Some((every.max(MIN_PROGRESS_INTERVAL), Box::new(report)));
        self
    }

    /// Calls `ended` once the run has ended as the run's end decides (the child exited and
    /// its group is empty or was killed, unless `keep_background` leaves it running; the
    /// output pipes drained, or given up on when a process outside the group holds them) and
    /// before the result sink is read and the record published: work that needs only what the
    /// child left behind (the files it wrote) can start then, beside the publication, instead
    /// of after it. It is called on the blocking thread that ends the run, so it must not
    /// block for long; it is not called when the spawn fails or the run's future is dropped.
    /// A panic in `ended` is resumed in the task awaiting the run once the record is
    /// published.
    pub fn on_ended(mut self, ended: impl FnOnce() + Send + 'static) -> Self {
        self.ended = Some(Box::new(ended));
        self
    }
}

impl<'a, R: Runtime> IntoFuture for RunBuilder<'a, R> {
    type Output = Result<ProcessResult, RunError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(run(
            self.runner.runtime.clone(),
            self.runner.store.clone(),
            self.options,
            self.observers,
            self.cancel,
            self.progress,
            self.ended,
        ))
    }
}

/// What woke the driver.
enum Event {
    Exit(io::Result<ExitStatus>),
    PipesClosed,
    TapPanicked,
    Cancel,
    Wake,
    Report,
}

/// A pump job running on the blocking pool; it resolves to whether its live tap panicked.
type Pump = Pin<Box<dyn Future<Output = io::Result<bool>> + Send>>;

async fn run<R: Runtime>(
    rt: R,
    store: Store,
    options: RunOptions,
    observers: [Option<StdoutObserver>; 2],
    mut cancel: Option<CancelStream<'_>>,
    mut progress: Option<Progress<'_>>,
    ended: Option<Box<dyn FnOnce() + Send>>,
) -> Result<ProcessResult, RunError> {
    let (
        Prepared {
            command,
            stdio,
            mut run,
        },
        lifecycle,
        (pumps_running, pumps_done),
    ) = rt
        .spawn_blocking({
            let rt = rt.clone();
            move || -> Result<_, RunError> {
                let prepared = prepare(&store, options)?;
                let lifecycle = RunLifecycle::new(prepared.run.options(), rt.now())?;
                Ok((prepared, lifecycle, os::latch()?))
            }
        })
        .await??;
    let child = match rt.spawn(command, stdio) {
        Ok(child) => child,
        Err(e) => return Err(rt.spawn_blocking(move || run.spawn_failed(e)).await?),
    };
    let clock = rt.clone();
    run.spawned(child.id(), rt.now(), Arc::new(move || clock.now()));
    let group = os::group_of(child.id());
    let watchdog = Watchdog::start(
        group,
        run.options().get_stop_signals(),
        run.options().get_kill_grace(),
    );
    let mut guard = DropGuard {
        state: Some(State {
            rt: rt.clone(),
            watchdog,
            group,
            next_scan: None,
            exit_watch: os::exit_watch(child.id()),
            child,
            exited: false,
            lifecycle,
            run,
            pumps_done,
        }),
    };
    // Fallible steps only now: an error returns through the guard, which stops the group.
    let state = guard.state();
    let [stdin, stdout, stderr] = state.child.take_pipes()?;
    let jobs = state.run.output_jobs(stdout, stderr, observers)?;
    let stdin_job = state.run.stdin_job(stdin)?;
    // Each pump is awaited on its own, so a tap's panic is seen while the other pipe runs.
    let mut pipes: Option<Vec<Pump>> = Some(
        jobs.into_iter()
            .map(|job| {
                let running = pumps_running.clone();
                Box::pin(rt.spawn_blocking(move || {
                    let tap_panicked = job();
                    drop(running);
                    tap_panicked
                })) as Pump
            })
            .collect(),
    );
    drop(pumps_running);
    if let Some(job) = stdin_job {
        drop(rt.spawn_blocking(job)); // runs to its end (or the run's) on its own
    }
    let mut tap_panicked = false;
    let mut next_report = progress.as_ref().map(|(every, _)| rt.now() + *every);
    loop {
        let state = guard.state();
        let now = rt.now();
        if let Some(ending) = state.apply_actions(now) {
            let State {
                run,
                watchdog,
                pumps_done,
                ..
            } = guard.disarm();
            let (result, tap_panic, hook_panic) = rt
                .spawn_blocking(move || {
                    if let Some(watchdog) = watchdog {
                        watchdog.stand_down();
                    }
                    let tap_panics = run.tap_panics();
                    // A hook that panics must not cost the run its record: caught here, it
                    // goes on below, once the record is published.
                    let hook_panic = Arc::new(std::sync::Mutex::new(None));
                    let ended = ended.map(|ended| {
                        let slot = hook_panic.clone();
                        Box::new(move || {
                            let caught =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(ended));
                            if let Err(panic) = caught {
                                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(panic);
                            }
                        }) as Box<dyn FnOnce() + Send>
                    });
                    let result = run.finish(ending, Some(&pumps_done), ended);
                    let hook_panic = hook_panic.lock().unwrap_or_else(|p| p.into_inner()).take();
                    (result, TapPanics::take(&tap_panics), hook_panic)
                })
                .await?;
            // The run is over and its record published: a tap's (or the hook's) panic goes on
            // here, as if it had been called by the caller.
            if let Some(panic) = tap_panic.or(hook_panic) {
                std::panic::resume_unwind(panic);
            }
            return result;
        }
        let wake = state.lifecycle.poll_timeout();
        let exited = state.exited;
        let mut sleep = wake.map(|(at, _)| Box::pin(rt.sleep_until(at)));
        let mut report = next_report.map(|at| Box::pin(rt.sleep_until(at)));
        let event = {
            let mut wait = (!exited).then(|| Box::pin(state.child.wait()));
            std::future::poll_fn(|cx| {
                if let Some(wait) = wait.as_mut()
                    && let Poll::Ready(status) = wait.as_mut().poll(cx)
                {
                    return Poll::Ready(Event::Exit(status));
                }
                if let Some(running) = pipes.as_mut() {
                    let mut panicked = false;
                    running.retain_mut(|pump| match pump.as_mut().poll(cx) {
                        Poll::Ready(ended) => {
                            panicked |= matches!(ended, Ok(true));
                            false
                        }
                        Poll::Pending => true,
                    });
                    if panicked {
                        return Poll::Ready(Event::TapPanicked);
                    }
                    if running.is_empty() {
                        pipes = None;
                        return Poll::Ready(Event::PipesClosed);
                    }
                }
                if let Some(requests) = cancel.as_mut() {
                    match requests.as_mut().poll_next(cx) {
                        Poll::Ready(Some(())) => return Poll::Ready(Event::Cancel),
                        Poll::Ready(None) => cancel = None,
                        Poll::Pending => {}
                    }
                }
                if let Some(sleep) = sleep.as_mut()
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Event::Wake);
                }
                if let Some(report) = report.as_mut()
                    && report.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Event::Report);
                }
                Poll::Pending
            })
            .await
        };
        let state = guard.state();
        let now = rt.now();
        match event {
            Event::Exit(status) => state.exit(now, status.ok()),
            Event::PipesClosed => state.lifecycle.handle_pipes_closed(now),
            // One stop request however many taps panic: a second would mean SIGKILL at once.
            Event::TapPanicked if !tap_panicked => {
                tap_panicked = true;
                state.lifecycle.handle_cancel(now);
            }
            Event::TapPanicked => {}
            Event::Cancel => state.lifecycle.handle_cancel(now),
            Event::Wake => {
                state.lifecycle.handle_output(state.run.last_output());
                state.lifecycle.handle_timeout(now);
            }
            Event::Report => {
                if let Some((every, report)) = progress.as_mut() {
                    report(&state.run.progress(now));
                    next_report = Some(now + *every);
                }
            }
        }
    }
}

/// How long the drop guard's blocking job sleeps at most between looks at the child when the
/// kernel has no pidfd to wait on (before Linux 5.3). It cannot await the runtime's wait:
/// the runtime may not be running any more.
const DROPPED_POLL: Duration = Duration::from_millis(10);

/// How often a probe of the group may scan `/proc` for members that are not zombies: it reads
/// every process's status, so not at every probe of a group that ignores its stop signal.
const ZOMBIE_SCAN: Duration = Duration::from_millis(250);

/// A run after the spawn: what both the run future and its drop guard drive.
struct State<R: Runtime> {
    rt: R,
    /// Stops the group if this process dies before the run ends.
    watchdog: Option<Watchdog>,
    group: Option<Pid>,
    /// When a probe of the group may next look past its zombies (in `/proc`).
    next_scan: Option<Instant>,
    /// Readable once the child exited (a pidfd), for the drop guard's blocking wait.
    exit_watch: Option<OwnedFd>,
    child: R::Child,
    exited: bool,
    lifecycle: RunLifecycle,
    run: LiveRun,
    /// Trips when every pump ended (also when none was started).
    pumps_done: LatchWatch,
}

impl<R: Runtime> State<R> {
    /// Carries out the lifecycle's actions; `Some` when the run is over.
    fn apply_actions(&mut self, now: Instant) -> Option<Ending> {
        while let Some(action) = self.lifecycle.poll_action() {
            let signal = match action {
                RunAction::Signal(signal) => Some(os::os_signal(signal)),
                RunAction::Kill => Some(Signal::KILL),
                // Only asked for once the child is reaped, so an empty group means every
                // process of the run is gone (a zombie child would still count).
                RunAction::Probe => None,
                RunAction::Finish {
                    outcome,
                    exit,
                    pipes_open,
                    reaped,
                } => {
                    return Some(Ending {
                        outcome,
                        exit,
                        pipes_open,
                        reaped,
                    });
                }
                _ => continue,
            };
            let delivery = match signal {
                Some(signal) => os::signal_group(self.group, signal),
                None => {
                    // Zombies count for signal 0; looking past them reads /proc, so at most
                    // every `ZOMBIE_SCAN`.
                    let scan = self.next_scan.is_none_or(|at| now >= at);
                    if scan {
                        self.next_scan = Some(now + ZOMBIE_SCAN);
                    }
                    os::probe_group(self.group, scan)
                }
            };
            match delivery {
                Delivery::NoGroup => self.lifecycle.handle_group_empty(now),
                // SIGKILL comes as the lifecycle's next action, then the group counts empty.
                Delivery::OnlyZombies => self.lifecycle.handle_group_zombies(now),
                _ => {}
            }
        }
        None
    }

    fn exit(&mut self, now: Instant, status: Option<ExitStatus>) {
        self.exited = true;
        self.lifecycle.handle_exit(now, status.map(os::exit_of));
    }

    /// The rest of a dropped run, on a blocking thread: the same lifecycle, then the output
    /// captured so far finalized as cancelled. Between steps it sleeps until the child exits
    /// (its pidfd), the pumps end, or the lifecycle's next instant, whichever comes first.
    ///
    /// No runtime may be left to move a virtual clock on, so time runs at the thread's real
    /// pace from the runtime's last reading: the lifecycle's instants stay on the runtime's
    /// clock and the rest of the escalation takes the real time it says.
    fn finish_dropped(mut self) {
        let mut pipes_reported = false;
        let (dropped_at, real_start) = (self.rt.now(), Instant::now());
        loop {
            let now = dropped_at + real_start.elapsed();
            if !self.exited {
                match self.child.try_wait() {
                    Ok(None) => {}
                    Ok(Some(status)) => self.exit(now, Some(status)),
                    Err(_) => self.exit(now, None),
                }
            }
            if !pipes_reported && self.pumps_done.tripped() {
                pipes_reported = true;
                self.lifecycle.handle_pipes_closed(now);
            }
            self.lifecycle.handle_output(self.run.last_output());
            self.lifecycle.handle_timeout(now);
            if let Some(ending) = self.apply_actions(now) {
                return self.abandon(ending);
            }
            let mut step = self
                .lifecycle
                .poll_timeout()
                .map(|(at, _)| at.saturating_duration_since(now));
            let mut fds = Vec::with_capacity(2);
            match (&self.exit_watch, self.exited) {
                (_, true) => {}
                (Some(pidfd), false) => fds.push(pidfd.as_fd()),
                (None, false) => step = Some(step.map_or(DROPPED_POLL, |s| s.min(DROPPED_POLL))),
            }
            if !pipes_reported {
                fds.push(self.pumps_done.as_fd());
            }
            if os::wait_any(&fds, step).is_err() {
                // Cannot wait on the descriptors: fall back to looking now and then.
                std::thread::sleep(step.unwrap_or(DROPPED_POLL).min(DROPPED_POLL));
            }
        }
    }

    /// Finalizes the output captured so far as cancelled; the watchdog stands down.
    fn abandon(self, ending: Ending) {
        if let Some(watchdog) = self.watchdog {
            watchdog.stand_down();
        }
        self.run.abandon(ending);
    }
}

/// Hands a run whose future was dropped to [`State::finish_dropped`].
struct DropGuard<R: Runtime> {
    state: Option<State<R>>,
}

impl<R: Runtime> DropGuard<R> {
    fn state(&mut self) -> &mut State<R> {
        self.state
            .as_mut()
            .expect("the guard holds the run until disarmed")
    }

    fn disarm(mut self) -> State<R> {
        self.state
            .take()
            .expect("the guard holds the run until disarmed")
    }
}

impl<R: Runtime> Drop for DropGuard<R> {
    fn drop(&mut self) {
        if let Some(mut state) = self.state.take() {
            // The first stop signal at once, from here; the grace and the rest cannot be
            // waited for in a `Drop`.
            let now = state.rt.now();
            state.lifecycle.handle_cancel(now);
            let finished = state.apply_actions(now);
            let rt = state.rt.clone();
            drop(rt.spawn_blocking(move || match finished {
                Some(ending) => state.abandon(ending),
                None => state.finish_dropped(),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::panic::AssertUnwindSafe;
    use std::sync::{Arc, Mutex};
    use std::task::Waker;

    use agentrun_core::CaptureStatus;

    use super::*;

    /// Runs `job` on a thread of its own; the future resolves with its value (an error if it
    /// panicked).
    fn on_thread<T: Send + 'static>(
        job: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = io::Result<T>> + Send + 'static {
        type Slot<T> = Arc<Mutex<(Option<io::Result<T>>, Option<Waker>)>>;
        let slot: Slot<T> = Arc::new(Mutex::new((None, None)));
        let theirs = slot.clone();
        std::thread::spawn(move || {
            let value = std::panic::catch_unwind(AssertUnwindSafe(job))
                .map_err(|_| io::Error::other("the job panicked"));
            let mut slot = theirs.lock().unwrap();
            slot.0 = Some(value);
            if let Some(waker) = slot.1.take() {
                waker.wake();
            }
        });
        std::future::poll_fn(move |cx| {
            let mut slot = slot.lock().unwrap();
            match slot.0.take() {
                Some(value) => Poll::Ready(value),
                None => {
                    slot.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }

    /// A runtime on plain threads whose children cannot hand over their pipes, so the first
    /// fallible step after the spawn fails. It remembers the pid of what it spawned.
    #[derive(Debug, Clone, Default)]
    struct PipelessRuntime {
        spawned: Arc<Mutex<Option<u32>>>,
    }

    struct PipelessChild(std::process::Child);

    impl ChildProcess for PipelessChild {
        fn id(&self) -> Option<u32> {
            Some(self.0.id())
        }

        fn take_pipes(&mut self) -> io::Result<[Option<OwnedFd>; 3]> {
            Err(io::Error::other("the pipes are gone"))
        }

        fn wait(&mut self) -> impl Future<Output = io::Result<ExitStatus>> + Send + '_ {
            // Only the drop path's `try_wait` is reached in these tests; a wait that never
            // ends would hang a test that reaches it, rather than pass it.
            std::future::ready(Err(io::Error::other("not used: the run fails before")))
        }

        fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
            self.0.try_wait()
        }
    }

    impl Runtime for PipelessRuntime {
        type Child = PipelessChild;

        fn spawn(&self, mut command: Command, [i, o, e]: [Stdio; 3]) -> io::Result<PipelessChild> {
            let child = command.stdin(i).stdout(o).stderr(e).spawn()?;
            *self.spawned.lock().unwrap() = Some(child.id());
            Ok(PipelessChild(child))
        }

        fn now(&self) -> Instant {
            Instant::now()
        }

        fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
            let sleep = on_thread(move || {
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()))
            });
            async move {
                let _ = sleep.await;
            }
        }

        fn spawn_blocking<T: Send + 'static>(
            &self,
            job: impl FnOnce() -> T + Send + 'static,
        ) -> impl Future<Output = io::Result<T>> + Send + 'static {
            on_thread(job)
        }
    }

    /// Whether process `pid` is gone (or a zombie).
    fn ended(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        f()
    }

    /// A step that fails right after the spawn (here: taking the pipes) returns its error,
    /// and the child it leaves behind is stopped and its capture finalized as cancelled, as
    /// for a dropped run, instead of running on unsupervised.
    #[test]
    fn an_error_right_after_the_spawn_stops_the_child() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        let runtime = PipelessRuntime::default();
        let runner = Runner::with_runtime(store.clone(), runtime.clone());
        let options = RunOptions::new("sleep")
            .arg("60")
            .kill_grace(Duration::from_millis(200));
        let err = futures_lite::future::block_on(runner.run(options).into_future()).unwrap_err();
        assert!(err.to_string().contains("the pipes are gone"), "{err}");
        let pid = runtime
            .spawned
            .lock()
            .unwrap()
            .expect("the child was spawned");
        assert!(eventually(|| ended(pid)), "the child {pid} was stopped");
        assert!(
            eventually(|| store.records().unwrap().len() == 1),
            "the run has a record"
        );
        let record = store.record(&store.records().unwrap()[0]).unwrap();
        assert_eq!(record.capture_status, CaptureStatus::Cancelled);
    }
}
