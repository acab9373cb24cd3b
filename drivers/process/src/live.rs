//! One run's blocking side: checking the options, opening the capture and the result sink,
//! the pump and stdin jobs, and finishing the run (sink read, capture finalization, result
//! assembly).

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use agentrun_core::process::{
    Exit, OptionsError, ProcessResult, RunInfo, RunOptions, RunOutcome, StdinMode,
};
use agentrun_core::sink::SinkOutcome;
use agentrun_core::stream::StreamIndex;
use agentrun_core::{CaptureCompletion, CaptureStatus};
use agentrun_fs::{PreparedSink, Store, StoreError};

use crate::os::{self, Activity, SharedSession, StdoutObserver};

/// Why a run could not be carried out (a child that runs and fails is not an error).
/// Re-exported as `agentrun_smol::RunError` and `agentrun_tokio::RunError`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The options were refused before anything was spawned.
    #[error("invalid run options: {0}")]
    InvalidOptions(#[from] OptionsError),
    /// The working directory does not exist or is not a directory.
    #[error(
        "cannot run {program:?} in {}: {source}; create the directory or choose another \
         working directory",
        .dir.display()
    )]
    WorkingDirectory {
        /// The program as given.
        program: OsString,
        /// The working directory as given.
        dir: PathBuf,
        /// Why it cannot be used.
        source: io::Error,
    },
    /// The program could not be started.
    #[error("cannot run {program:?}: {source}{}", spawn_hint(.program, .source))]
    Spawn {
        /// The program as given.
        program: OsString,
        /// Why.
        source: io::Error,
    },
    /// The store refused to capture or publish, or the result sink could not be prepared.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Talking to the child failed.
    #[error("process I/O failed: {0}")]
    Io(#[from] io::Error),
}

fn spawn_hint(program: &OsStr, e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::NotFound if os::program_exists(program) => {
            " (the program exists: its interpreter, named on its #! line, was not found)"
        }
        io::ErrorKind::NotFound => {
            " (no such program; a name without '/' is looked up in PATH, never run by a shell)"
        }
        io::ErrorKind::PermissionDenied => " (is the file executable? chmod +x)",
        _ => "",
    }
}

/// A blocking job of a run.
pub(crate) type Job = Box<dyn FnOnce() -> io::Result<()> + Send + 'static>;

/// Everything needed to spawn the child, from [`prepare`].
pub(crate) struct Prepared {
    pub(crate) command: Command,
    pub(crate) stdio: [Stdio; 3],
    pub(crate) run: LiveRun,
}

/// Checks `options` and opens the run: the capture session and, on opt-in, the result sink.
/// Blocking; nothing is spawned. Errors name what to fix.
pub(crate) fn prepare(store: &Store, options: RunOptions) -> Result<Prepared, RunError> {
    options.validate()?;
    if let Some(dir) = &options.current_dir {
        let problem = match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => None,
            Ok(_) => Some(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            )),
            Err(e) => Some(e),
        };
        if let Some(source) = problem {
            return Err(RunError::WorkingDirectory {
                program: options.program.clone(),
                dir: dir.clone(),
                source,
            });
        }
    }
    let session = store.begin_capture(options.declaration.clone(), options.limits)?;
    let sink = match &options.result_sink {
        Some(sink) => Some(store.prepare_sink(sink, session.run_id())?),
        None => None,
    };
    let stdout = os::captures(&options, "stdout").and_then(|c| session.resolve(&c).ok());
    let stderr = os::captures(&options, "stderr").and_then(|c| session.resolve(&c).ok());
    let command = os::command(&options, sink.as_ref().map(PreparedSink::path));
    let stdio = os::stdio(&options);
    let stdin = match &options.stdin {
        StdinMode::Bytes(bytes) => Some(bytes.clone()),
        _ => None,
    };
    let started = Instant::now();
    let started_wall = SystemTime::now();
    Ok(Prepared {
        command,
        stdio,
        run: LiveRun {
            started,
            started_wall,
            session: Arc::new(Mutex::new(Some(session))),
            activity: Arc::new(Activity::new(started)),
            streams: [stdout, stderr],
            stdin,
            sink,
            pid: None,
            options,
        },
    })
}

/// One run between [`prepare`] and [`LiveRun::finish`].
pub(crate) struct LiveRun {
    started: Instant,
    /// The same moment on the wall clock, for the record.
    started_wall: SystemTime,
    session: SharedSession,
    activity: Arc<Activity>,
    streams: [Option<StreamIndex>; 2],
    stdin: Option<Vec<u8>>,
    sink: Option<PreparedSink>,
    pid: Option<u32>,
    options: RunOptions,
}

impl LiveRun {
    pub(crate) fn options(&self) -> &RunOptions {
        &self.options
    }

    /// When output last arrived (or the spawn).
    pub(crate) fn last_output(&self) -> Instant {
        self.activity.last_output()
    }

    /// The spawn failed: nothing ran, nothing is read; the capture and an allocated sink are
    /// removed when the run is dropped.
    pub(crate) fn spawn_failed(self, source: io::Error) -> RunError {
        RunError::Spawn {
            program: self.options.program.clone(),
            source,
        }
    }

    /// Marks the spawn at `now`: the idle clock starts.
    pub(crate) fn spawned(&mut self, pid: Option<u32>, now: Instant) {
        self.activity = Arc::new(Activity::new(now));
        self.pid = pid;
    }

    /// The pump jobs for the child's stdout and stderr pipes (none for a pipe that is not
    /// captured). Each runs until its pipe is at end of file and carries its pipe's tap, if
    /// any.
    pub(crate) fn output_jobs(
        &mut self,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
        observers: [Option<StdoutObserver>; 2],
    ) -> io::Result<Vec<Job>> {
        let mut jobs: Vec<Job> = Vec::new();
        let pipes = [stdout, stderr].into_iter().zip(self.streams);
        for ((pipe, stream), mut observer) in pipes.zip(observers) {
            let (Some(pipe), Some(stream)) = (pipe, stream) else {
                continue;
            };
            let file = os::blocking_pipe(pipe)?;
            let (session, activity) = (self.session.clone(), self.activity.clone());
            jobs.push(Box::new(move || {
                let observer: &mut dyn FnMut(&[u8]) = match observer.as_mut() {
                    Some(observer) => observer,
                    None => &mut |_: &[u8]| {},
                };
                os::pump(&session, stream, file, &activity, observer)
            }));
        }
        Ok(jobs)
    }

    /// The job writing [`StdinMode::Bytes`] to the child's stdin, then closing it. It runs
    /// beside the pumps, so a child that writes before it reads cannot deadlock; a child
    /// that exits without reading its input is not an error.
    pub(crate) fn stdin_job(&mut self, stdin: Option<OwnedFd>) -> io::Result<Option<Job>> {
        let (Some(pipe), Some(bytes)) = (stdin, self.stdin.take()) else {
            return Ok(None);
        };
        let mut file = os::blocking_pipe(pipe)?;
        Ok(Some(Box::new(move || {
            let _ = file.write_all(&bytes);
            Ok(())
        })))
    }

    /// Ends the run (blocking): after a normal exit reads the sink, removes an allocated sink
    /// (best effort), finalizes the capture (incomplete when stopped) and assembles the
    /// result. The pumps stop at their next chunk.
    pub(crate) fn finish(
        self,
        outcome: RunOutcome,
        exit: Option<Exit>,
    ) -> Result<ProcessResult, RunError> {
        let taken = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let session =
            taken.ok_or_else(|| io::Error::other("capture session was finalized twice"))?;
        let (sink, result) = match (&self.sink, outcome.sink_not_read()) {
            (None, _) => (SinkOutcome::NotRequested, None),
            (Some(_), Some(reason)) => (SinkOutcome::NotRead { reason }, None),
            (Some(sink), None) => sink.read(self.options.sink_cap),
        };
        // Best effort, like the drop of a `PreparedSink`: a directory that cannot be removed is
        // owner-only and harmless, and must not cost the caller the run's result.
        if let Some(sink) = self.sink {
            let _ = sink.remove();
        }
        let mut session = session;
        session.describe_run(RunInfo {
            command: std::iter::once(&self.options.program)
                .chain(&self.options.args)
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            outcome,
            exit,
            started_unix_ms: self
                .started_wall
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            duration_ms: self.started.elapsed().as_millis() as u64,
        });
        let record = session.finish(CaptureCompletion::Streamed {
            display: None,
            status: outcome.capture_status(),
        })?;
        Ok(ProcessResult {
            outcome,
            exit,
            duration: self.started.elapsed(),
            record,
            result,
            sink,
            pid: self.pid,
            label: self.options.label,
        })
    }

    /// The run future was dropped and the group is stopped: the output captured so far is
    /// finalized as cancelled (incomplete, readable) and the allocated sink removed.
    pub(crate) fn abandon(self) {
        let taken = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(session) = taken {
            let _ = session.finish(CaptureCompletion::Streamed {
                display: None,
                status: CaptureStatus::Cancelled,
            });
        }
        drop(self.sink);
    }
}
