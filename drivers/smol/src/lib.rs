//! agentrun-smol: the agentrun process driver on smol and async-process.
//!
//! This crate is the [`Runtime`](agentrun_process::Runtime) implementation for smol (spawn
//! and wait with async-process, timers with `smol::Timer`, blocking jobs on smol's blocking
//! pool) and re-exports the driver's API. The driver itself (`agentrun_process::Runner`) and
//! the run lifecycle (`agentrun_core::lifecycle`) are shared with `agentrun-tokio`, which has
//! the same API, name for name; one conformance suite (`tests/tests/conformance.rs`) runs
//! against both.
//!
//! ```no_run
//! # smol::block_on(async {
//! use agentrun_smol::{ResultSink, RunOptions, Runner};
//! let store = agentrun_fs::Store::open("/tmp/agentrun-store")?;
//! let result = Runner::new(store)
//!     .run(RunOptions::new("my-agent").with_result_sink(ResultSink::Allocate))
//!     .await?;
//! // The clean answer when the child wrote one, else the stdout preview.
//! println!("{}", result.answer());
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # });
//! ```

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use agentrun_process::ChildProcess;
pub use agentrun_process::api::*;

agentrun_process::runtime_types!(SmolRuntime, "smol");

/// smol as the runtime of the process driver.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmolRuntime;

impl agentrun_process::Runtime for SmolRuntime {
    type Child = SmolChild;

    fn spawn(
        &self,
        command: Command,
        [stdin, stdout, stderr]: [Stdio; 3],
    ) -> io::Result<SmolChild> {
        async_process::Command::from(command)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map(SmolChild)
    }

    /// The std clock (smol's timers use it).
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        let timer = smol::Timer::at(deadline);
        async move {
            timer.await;
        }
    }

    fn spawn_blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = io::Result<T>> + Send + 'static {
        // A channel rather than the task itself: dropping a `blocking` task that has not
        // started would cancel the job, and the driver relies on its jobs running to the end.
        let (done, result) = smol::channel::bounded(1);
        blocking::unblock(move || {
            let _ = done.send_blocking(job());
        })
        .detach();
        async move {
            result
                .recv()
                .await
                .map_err(|_| io::Error::other("a blocking job of the run panicked"))
        }
    }
}

/// A child spawned by async-process.
#[derive(Debug)]
pub struct SmolChild(async_process::Child);

impl ChildProcess for SmolChild {
    fn id(&self) -> Option<u32> {
        Some(self.0.id())
    }

    fn take_pipes(&mut self) -> io::Result<[Option<OwnedFd>; 3]> {
        Ok([
            self.0.stdin.take().map(OwnedFd::try_from).transpose()?,
            self.0.stdout.take().map(OwnedFd::try_from).transpose()?,
            self.0.stderr.take().map(OwnedFd::try_from).transpose()?,
        ])
    }

    fn wait(&mut self) -> impl Future<Output = io::Result<ExitStatus>> + Send + '_ {
        self.0.status()
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.0.try_status()
    }
}
