//! agentrun-smol: the process driver on smol and async-process.
//!
//! Only what differs by runtime lives here: spawning, waiting, timers and signals. The run
//! description and result types come from `agentrun_core::process`; capture and retention go
//! through `agentrun_fs`, whose blocking calls run on smol's blocking pool.
//!
//! ```no_run
//! # smol::block_on(async {
//! let store = agentrun_fs::Store::open("/tmp/agentrun-store")?;
//! let result = agentrun_smol::Runner::new(store)
//!     .run(agentrun_smol::RunOptions::new("ls").arg("-l"))
//!     .await?;
//! println!("{}", result.model_text());
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # });
//! ```

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use agentrun_core::process::{Exit, Outcome, ProcessResult, RunOptions, StdinMode};
use agentrun_core::{Completion, Status};
use agentrun_fs::{Store, StoreError};
use futures_lite::FutureExt as _;
use rustix::process::{Pid, Signal, kill_process_group};

use agentrun_fs::process::{SharedSession, blocking_pipe, captures, command, pump, stdio};

/// Why a run could not be carried out (a child that runs and fails is not an error).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program could not be started.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        /// The program as given.
        program: OsString,
        /// Why.
        source: std::io::Error,
    },
    /// The store refused to capture or publish.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Talking to the child failed.
    #[error("process I/O failed: {0}")]
    Io(#[from] std::io::Error),
}

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

    /// Runs one process to completion (or timeout) and returns its result.
    pub async fn run(&self, options: RunOptions) -> Result<ProcessResult, RunError> {
        let started = Instant::now();
        let store = self.store.clone();
        let (declaration, limits) = (options.declaration.clone(), options.limits);
        let session = blocking::unblock(move || store.begin_capture(declaration, limits)).await?;
        let stdout_ix = captures(&options, "stdout").and_then(|c| session.resolve(&c).ok());
        let stderr_ix = captures(&options, "stderr").and_then(|c| session.resolve(&c).ok());
        let session: SharedSession = Arc::new(Mutex::new(Some(session)));

        let [stdin, stdout, stderr] = stdio(&options);
        let mut child = async_process::Command::from(command(&options))
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| RunError::Spawn {
                program: options.program.clone(),
                source,
            })?;
        let group = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
        let mut guard = CancelGuard {
            group,
            grace: options.kill_grace,
            session: Some(session.clone()),
        };

        let mut pumps = Vec::new();
        for (pipe, ix) in [
            (child.stdout.take().map(OwnedFd::try_from), stdout_ix),
            (child.stderr.take().map(OwnedFd::try_from), stderr_ix),
        ] {
            let (Some(pipe), Some(ix)) = (pipe, ix) else {
                continue;
            };
            let file = blocking_pipe(pipe?)?;
            let session = session.clone();
            pumps.push(blocking::unblock(move || pump(&session, ix, file)));
        }
        if let (StdinMode::Bytes(bytes), Some(stdin)) = (&options.stdin, child.stdin.take()) {
            let file = blocking_pipe(OwnedFd::try_from(stdin)?)?;
            let bytes = bytes.clone();
            // A child that exits without reading its input is not an error.
            blocking::unblock(move || {
                let mut file = file;
                let _ = file.write_all(&bytes);
            })
            .detach();
        }

        let status = async { Some(child.status().await) };
        let deadline = async {
            match options.timeout {
                Some(t) => {
                    smol::Timer::after(t).await;
                    None
                }
                None => std::future::pending().await,
            }
        };
        let (outcome, exit) = match status.or(deadline).await {
            Some(status) => (Outcome::Completed, Some(exit_of(status?))),
            None => {
                let status = stop_group(group, options.kill_grace, &mut child).await;
                (Outcome::TimedOut, status.map(exit_of))
            }
        };
        for p in pumps {
            p.await?;
        }
        guard.session = None;
        let status = match outcome {
            Outcome::Completed => Status::Succeeded,
            Outcome::TimedOut => Status::Cancelled,
        };
        let taken = session.lock().unwrap_or_else(|p| p.into_inner()).take();
        let session = taken.ok_or_else(|| {
            RunError::Io(std::io::Error::other("capture session was finalized twice"))
        })?;
        let record = blocking::unblock(move || {
            session.finish(Completion::Streamed {
                display: None,
                status,
            })
        })
        .await?;
        Ok(ProcessResult {
            outcome,
            exit,
            duration: started.elapsed(),
            record,
        })
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}

/// Stops the run when its future is dropped before completion: SIGTERM to the group, SIGKILL
/// after the grace period, and the output captured so far finalized as cancelled (incomplete)
/// so it stays readable. Disarmed (`session = None`) once the run has finished normally.
struct CancelGuard {
    group: Option<Pid>,
    grace: Duration,
    session: Option<SharedSession>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some(shared) = self.session.take() else {
            return;
        };
        if let Some(group) = self.group {
            let _ = kill_process_group(group, Signal::TERM);
        }
        let (group, grace) = (self.group, self.grace);
        // Drop cannot wait: finalize and escalate on the blocking pool.
        blocking::unblock(move || {
            let session = shared.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(session) = session {
                let _ = session.finish(Completion::Streamed {
                    display: None,
                    status: Status::Cancelled,
                });
            }
            std::thread::sleep(grace);
            if let Some(group) = group {
                let _ = kill_process_group(group, Signal::KILL);
            }
        })
        .detach();
    }
}

/// SIGTERM to the group, the grace period, then SIGKILL; always reaps the child.
async fn stop_group(
    group: Option<Pid>,
    grace: Duration,
    child: &mut async_process::Child,
) -> Option<std::process::ExitStatus> {
    if let Some(group) = group {
        let _ = kill_process_group(group, Signal::TERM);
    }
    let exited = async { child.status().await.ok() }
        .or(async {
            smol::Timer::after(grace).await;
            None
        })
        .await;
    if exited.is_some() {
        return exited;
    }
    if let Some(group) = group {
        let _ = kill_process_group(group, Signal::KILL);
    }
    child.status().await.ok()
}
