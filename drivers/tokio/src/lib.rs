//! agentrun-tokio: the agentrun process driver on tokio.
//!
//! This crate is the [`Runtime`](agentrun_process::Runtime) implementation for tokio (spawn
//! and wait with `tokio::process`, timers with `tokio::time`, blocking jobs with
//! `spawn_blocking`) and re-exports the driver's API. The driver itself
//! (`agentrun_process::Runner`) and the run lifecycle (`agentrun_core::lifecycle`) are shared
//! with `agentrun-smol`, which has the same API, name for name; one conformance suite
//! (`tests/tests/conformance.rs`) runs against both.
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

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use agentrun_process::ChildProcess;
pub use agentrun_process::api::*;

agentrun_process::runtime_types!(TokioRuntime, "tokio");

/// tokio as the runtime of the process driver (the current runtime of the calling task).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioRuntime;

impl agentrun_process::Runtime for TokioRuntime {
    type Child = TokioChild;

    fn spawn(
        &self,
        command: Command,
        [stdin, stdout, stderr]: [Stdio; 3],
    ) -> io::Result<TokioChild> {
        tokio::process::Command::from(command)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map(TokioChild)
    }

    /// tokio's clock: virtual while it is paused (`tokio::time::pause`, `start_paused`).
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        tokio::time::sleep_until(deadline.into())
    }

    fn spawn_blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = io::Result<T>> + Send + 'static {
        let (done, result) = tokio::sync::oneshot::channel();
        let job = move || {
            let _ = done.send(job());
        };
        // From a `Drop` after the runtime shut down there is no pool: a thread of its own.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(job)),
            Err(_) => drop(std::thread::spawn(job)),
        }
        async move {
            result
                .await
                .map_err(|_| io::Error::other("a blocking job of the run panicked"))
        }
    }
}

/// A child spawned by `tokio::process`.
#[derive(Debug)]
pub struct TokioChild(tokio::process::Child);

impl ChildProcess for TokioChild {
    fn id(&self) -> Option<u32> {
        self.0.id()
    }

    fn take_pipes(&mut self) -> io::Result<[Option<OwnedFd>; 3]> {
        Ok([
            self.0.stdin.take().map(|p| p.into_owned_fd()).transpose()?,
            self.0
                .stdout
                .take()
                .map(|p| p.into_owned_fd())
                .transpose()?,
            self.0
                .stderr
                .take()
                .map(|p| p.into_owned_fd())
                .transpose()?,
        ])
    }

    fn wait(&mut self) -> impl Future<Output = io::Result<ExitStatus>> + Send + '_ {
        self.0.wait()
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.0.try_wait()
    }
}
