//! agentrun-tokio: the process driver on tokio.
//!
//! Only what differs by runtime lives here: spawning, waiting, timers, signals and
//! cancellation. The run description and result types come from `agentrun_core::process` and
//! `agentrun_core::sink`; option checks, capture, the result sink and result assembly are the
//! blocking code of `agentrun_fs::process`, run with `spawn_blocking`. `agentrun-smol` has the
//! same API, name for name, and both pass one conformance suite (`tests/tests/conformance.rs`).
//!
//! The runtime needs its I/O and time drivers (`Builder::enable_all`, or `#[tokio::main]`):
//! tokio waits for children through its signal driver.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agentrun_tokio::{ResultSink, RunOptions, Runner};
//! let store = agentrun_fs::Store::open("/tmp/agentrun-store")?;
//! let result = Runner::new(store)
//!     .run(RunOptions::new("my-agent").with_result_sink(ResultSink::Allocate))
//!     .await?;
//! // The clean answer when the child wrote one, else the stdout preview.
//! println!("{}", result.answer());
//! # Ok(())
//! # }
//! ```

use std::io;
use std::time::Duration;

pub use agentrun_core::process::{
    Exit, OptionsError, Outcome, ProcessResult, RunOptions, StdinMode,
};
pub use agentrun_core::sink::{
    DEFAULT_SINK_CAP, DEFAULT_SINK_VAR, FileKind, NotReadReason, ResultSink, SinkOutcome,
};
use agentrun_fs::Store;
pub use agentrun_fs::process::RunError;
use agentrun_fs::process::{
    DRAIN_AFTER_EXIT, DRAIN_AFTER_KILL, LiveRun, Prepared, StdoutObserver, exit_of, group_of,
    prepare, signal_group,
};
pub use agentrun_fs::sink::read_sink;
use rustix::process::{Pid, Signal};
use tokio::task::{JoinHandle, spawn_blocking};
use tokio::time::sleep;

/// Runs processes with their output captured into a store.
#[derive(Debug, Clone)]
pub struct Runner {
    store: Store,
}

impl Runner {
    /// A runner capturing into `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The store the runner captures into.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs one process to its end (exit, timeout or idle timeout) and returns its result.
    /// Dropping the future cancels the run: the group is stopped and the output captured so
    /// far is finalized as cancelled.
    pub async fn run(&self, options: RunOptions) -> Result<ProcessResult, RunError> {
        self.run_with(options, None, std::future::pending()).await
    }

    /// [`Runner::run`] with a live tap on the child's stdout: `observer` is called with every
    /// stdout chunk while the child runs (cut anywhere; `agentrun_core::lines::LineSplitter`
    /// reassembles lines), on the blocking thread that pumps the pipe, right after the chunk
    /// was captured. The retained stdout artifact is byte-identical to the concatenated
    /// chunks. A slow observer slows the child down (backpressure); it must not panic.
    pub async fn run_observed(
        &self,
        options: RunOptions,
        observer: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        self.run_with(options, Some(Box::new(observer)), std::future::pending())
            .await
    }

    /// [`Runner::run`] that also stops when `stop` resolves (for example on a signal the
    /// caller received): the group is stopped as on a timeout, the output captured so far is
    /// finalized as cancelled, and the result says [`Outcome::Cancelled`]. Unlike dropping the
    /// future, this waits for the child to be stopped and reaped and returns the result.
    pub async fn run_until(
        &self,
        options: RunOptions,
        stop: impl Future<Output = ()>,
    ) -> Result<ProcessResult, RunError> {
        self.run_with(options, None, stop).await
    }

    /// [`Runner::run_observed`] with the `stop` future of [`Runner::run_until`].
    pub async fn run_observed_until(
        &self,
        options: RunOptions,
        observer: impl FnMut(&[u8]) + Send + 'static,
        stop: impl Future<Output = ()>,
    ) -> Result<ProcessResult, RunError> {
        self.run_with(options, Some(Box::new(observer)), stop).await
    }

    async fn run_with(
        &self,
        options: RunOptions,
        observer: Option<StdoutObserver>,
        stop: impl Future<Output = ()>,
    ) -> Result<ProcessResult, RunError> {
        let store = self.store.clone();
        let Prepared {
            command,
            stdio: [stdin, stdout, stderr],
            mut run,
        } = unblock(move || prepare(&store, options)).await??;
        let spawned = tokio::process::Command::from(command)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => return Err(unblock(move || run.spawn_failed(e)).await?),
        };
        run.spawned(child.id());
        let group = group_of(child.id());
        let mut guard = CancelGuard {
            group,
            run: Some(run),
        };
        let (stdin, stdout, stderr) = (
            child.stdin.take().map(|p| p.into_owned_fd()).transpose()?,
            child.stdout.take().map(|p| p.into_owned_fd()).transpose()?,
            child.stderr.take().map(|p| p.into_owned_fd()).transpose()?,
        );
        let live = guard.live();
        if let Some(observer) = observer {
            live.observe_stdout(observer);
        }
        let mut pumps: Vec<_> = live
            .output_jobs(stdout, stderr)?
            .into_iter()
            .map(|job| Some(spawn_blocking(job)))
            .collect();
        if let Some(job) = live.stdin_job(stdin)? {
            drop(spawn_blocking(job)); // detached
        }
        let live = &*live;
        let (grace, signals) = (live.kill_grace(), live.stop_signals());
        let stopped = async {
            tokio::select! {
                outcome = stop_timer(live) => outcome,
                () = stop => Outcome::Cancelled,
            }
        };
        let (outcome, exit) = tokio::select! {
            status = child.wait() => {
                let status = status?;
                if !drained_within(&mut pumps, DRAIN_AFTER_EXIT).await? {
                    // Leftovers of the child hold the pipes: stop them, keep the exit status.
                    stop_leftovers(group, &signals, grace, &mut pumps).await?;
                }
                (Outcome::Completed, Some(exit_of(status)))
            }
            outcome = stopped => {
                let status = stop_group(group, &signals, grace, &mut child).await;
                let _ = tokio::time::timeout(DRAIN_AFTER_KILL, drain(&mut pumps)).await;
                (outcome, status.map(exit_of))
            }
        };
        let run = guard.disarm();
        unblock(move || run.finish(outcome, exit)).await?
    }
}

/// `spawn_blocking`, with a panic or shutdown of the pool as an I/O error.
async fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    spawn_blocking(f).await.map_err(io::Error::other)
}

/// Awaits every pump that has not finished yet (re-entrant: a drain interrupted by a timer
/// can be resumed).
async fn drain(pumps: &mut [Option<JoinHandle<io::Result<()>>>]) -> io::Result<()> {
    for slot in pumps.iter_mut() {
        if let Some(task) = slot {
            let result = task.await;
            *slot = None;
            result.map_err(io::Error::other)??;
        }
    }
    Ok(())
}

/// Drains the pumps for at most `limit`: `Ok(true)` when every pipe closed in time.
async fn drained_within(
    pumps: &mut [Option<JoinHandle<io::Result<()>>>],
    limit: Duration,
) -> io::Result<bool> {
    match tokio::time::timeout(limit, drain(pumps)).await {
        Ok(result) => result.map(|()| true),
        Err(_) => Ok(false),
    }
}

/// Stops what is left of the group after the child exited (each stop signal with the grace
/// after it, ended early once the pipes close, then SIGKILL) and drains what they wrote.
async fn stop_leftovers(
    group: Option<Pid>,
    signals: &[Signal],
    grace: Duration,
    pumps: &mut [Option<JoinHandle<io::Result<()>>>],
) -> io::Result<()> {
    for signal in signals {
        signal_group(group, *signal);
        if drained_within(pumps, grace).await? {
            return Ok(());
        }
    }
    signal_group(group, Signal::KILL);
    drained_within(pumps, DRAIN_AFTER_KILL).await.map(drop)
}

/// Resolves when the wall-clock timeout or the idle timeout fires (never, without either).
async fn stop_timer(live: &LiveRun) -> Outcome {
    let deadline = async {
        match live.timeout() {
            Some(t) => sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let idle = async {
        let Some(limit) = live.idle_timeout() else {
            return std::future::pending().await;
        };
        loop {
            let idle = live.idle_for();
            if idle >= limit {
                return;
            }
            sleep(limit - idle).await;
        }
    };
    tokio::select! {
        () = deadline => Outcome::TimedOut,
        () = idle => Outcome::IdleTimedOut,
    }
}

/// Each stop signal to the group (SIGTERM by default) with the grace period after it (ended
/// by the exit), then SIGKILL; always reaps the child.
async fn stop_group(
    group: Option<Pid>,
    signals: &[Signal],
    grace: Duration,
    child: &mut tokio::process::Child,
) -> Option<std::process::ExitStatus> {
    let mut exited = None;
    for signal in signals {
        signal_group(group, *signal);
        exited = tokio::time::timeout(grace, child.wait()).await.ok();
        if exited.is_some() {
            break;
        }
    }
    // Also after the leader exited: grandchildren in its group may still hold the pipes.
    signal_group(group, Signal::KILL);
    match exited {
        Some(status) => status.ok(),
        None => child.wait().await.ok(),
    }
}

/// Cancels the run when its future is dropped before the end (see [`LiveRun::cancel`]).
struct CancelGuard {
    group: Option<Pid>,
    run: Option<LiveRun>,
}

impl CancelGuard {
    fn live(&mut self) -> &mut LiveRun {
        self.run
            .as_mut()
            .expect("the guard holds the run until disarmed")
    }

    fn disarm(mut self) -> LiveRun {
        self.run
            .take()
            .expect("the guard holds the run until disarmed")
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(run) = self.run.take() {
            // The first stop signal at once; `cancel` sends the others.
            if let Some(first) = run.stop_signals().first() {
                signal_group(self.group, *first);
            }
            let group = self.group;
            // Drop cannot wait: finalize and escalate on the blocking pool (or a thread of
            // its own when the runtime is gone).
            let cancel = move || run.cancel(group);
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(cancel)),
                Err(_) => drop(std::thread::spawn(cancel)),
            }
        }
    }
}
