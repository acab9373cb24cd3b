//! Blocking process plumbing shared by every process driver (SPEC §7): checking the options,
//! opening the capture and the result sink, building the child command, pumping pipes into the
//! capture, and finishing the run (sink read, capture finalization, result assembly).
//!
//! An async driver does only what differs by runtime:
//!
//! 1. run [`prepare`] on its blocking pool; spawn [`Prepared::command`] with
//!    [`Prepared::stdio`] (on spawn failure, return [`LiveRun::spawn_failed`]);
//! 2. optionally install a live stdout tap with [`LiveRun::observe_stdout`]; run the jobs of
//!    [`LiveRun::output_jobs`] and [`LiveRun::stdin_job`] on its blocking pool;
//! 3. wait for the child and the output jobs, racing the wall-clock timeout and the idle
//!    timeout ([`LiveRun::idle_for`]); on a timeout, send each of [`LiveRun::stop_signals`]
//!    (SIGTERM by default) to the group ([`signal_group`]), waiting up to
//!    [`LiveRun::kill_grace`] after each for the exit, then SIGKILL, reap;
//! 4. run [`LiveRun::finish`] on its blocking pool.
//!
//! If the run future is dropped before step 4, the driver runs [`LiveRun::cancel`] on its
//! blocking pool (from `Drop`, so it cannot wait): the group is stopped and the output captured
//! so far is finalized as cancelled (incomplete) and stays readable.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrun_core::harness::StopSignal;
use agentrun_core::process::{Exit, OptionsError, Outcome, ProcessResult, RunOptions, StdinMode};
use agentrun_core::sink::SinkOutcome;
use agentrun_core::stream::{Channel, OutputDeclaration, StreamIndex};
use agentrun_core::{Completion, Status};
use rustix::process::{Pid, Signal};

use crate::sink::PreparedSink;
use crate::{CaptureSession, Store, StoreError};

/// Pipe reads go straight into the capture file; larger reads mean fewer wakeups and syscalls.
const READ_BUF: usize = 256 * 1024;

/// Linux pipes default to 64 KiB; a bigger pipe lets a fast child run ahead of the capture.
const PIPE_SIZE: usize = 1 << 20;

/// How long a driver waits for the output jobs after the group was killed. Every process of
/// the group is gone by then, so the pipes are at end of file; only a process that left the
/// group (`setsid`) can hold them open, and the run does not wait for it.
pub const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// How long a driver waits for the output pipes to close after the child exited by itself.
/// Longer means a process the child left behind in its group (a background server, a stray
/// `cmd &`) still holds them: the driver then stops the rest of the group, so a finished run
/// neither hangs nor turns into a timeout, and keeps its exit status and its answer.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Why a run could not be carried out (a child that runs and fails is not an error). Shared by
/// every driver, re-exported as `agentrun_smol::RunError` and `agentrun_tokio::RunError`.
#[derive(Debug, thiserror::Error)]
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
        io::ErrorKind::NotFound if program_exists(program) => {
            " (the program exists: its interpreter, named on its #! line, was not found)"
        }
        io::ErrorKind::NotFound => {
            " (no such program; a name without '/' is looked up in PATH, never run by a shell)"
        }
        io::ErrorKind::PermissionDenied => " (is the file executable? chmod +x)",
        _ => "",
    }
}

/// Whether `program` names an existing file: as a path when it has a `/`, else in `PATH`.
pub fn program_exists(program: &OsStr) -> bool {
    let name = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return name.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// The child's stdin, stdout and stderr for `options`. Set separately from [`command`]
/// because a runtime's command wrapper may reset the standard streams when it adopts a std
/// command (async-process does).
pub fn stdio(options: &RunOptions) -> [Stdio; 3] {
    let captured = |name: &str| {
        if captures(options, name).is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let stdin = match options.stdin {
        StdinMode::Null => Stdio::null(),
        StdinMode::Bytes(_) => Stdio::piped(),
        StdinMode::Inherit => Stdio::inherit(),
    };
    [stdin, captured("stdout"), captured("stderr")]
}

/// The std command for `options`: argv only (never a shell), environment changes, working
/// directory, its own process group, and the result-sink variable: set to `sink` when given,
/// removed otherwise (so a value inherited from an ancestor never reaches the child).
pub fn command(options: &RunOptions, sink: Option<&Path>) -> Command {
    let mut cmd = Command::new(&options.program);
    cmd.args(&options.args);
    if let Some(dir) = &options.current_dir {
        cmd.current_dir(dir);
    }
    for (key, value) in &options.env {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    match sink {
        Some(path) => cmd.env(&options.sink_var, path),
        None => cmd.env_remove(&options.sink_var),
    };
    // Its own group, so a timeout or cancellation can stop grandchildren too.
    cmd.process_group(0);
    cmd
}

/// The channel a child pipe (`stdout` or `stderr`) is captured into: the declared stream of
/// that name, or for single output the stdout pipe. Pipes not captured are connected to
/// `/dev/null` rather than left unread (an unread pipe would block the child).
pub fn captures(options: &RunOptions, pipe: &str) -> Option<Channel> {
    match &options.declaration {
        OutputDeclaration::Single => (pipe == "stdout").then_some(Channel::Single),
        OutputDeclaration::Named(names) => names
            .iter()
            .find(|n| n.as_str() == pipe)
            .cloned()
            .map(Channel::Named),
    }
}

/// Turns an async pipe end into a blocking file for [`pump`].
pub fn blocking_pipe(fd: OwnedFd) -> io::Result<File> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(&fd)?;
    fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    // Best effort: a smaller pipe only costs throughput.
    let _ = rustix::pipe::fcntl_setpipe_size(&fd, PIPE_SIZE);
    Ok(File::from(fd))
}

/// The session shared by the pumps of one run; `None` once the run has finalized it.
pub type SharedSession = Arc<Mutex<Option<CaptureSession>>>;

/// When output last arrived on any stream of a run (for the idle timeout).
#[derive(Debug)]
pub struct Activity {
    origin: Instant,
    /// Nanoseconds after `origin` of the last output.
    last: AtomicU64,
}

impl Activity {
    /// Activity starting now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// Records output now.
    pub fn touch(&self) {
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// Time since the last output (or since the start).
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_nanos(self.last.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

/// A live tap on the child's stdout (see [`LiveRun::observe_stdout`]): called with each chunk
/// as it is captured, cut anywhere (use `agentrun_core::lines::LineSplitter` for lines).
pub type StdoutObserver = Box<dyn FnMut(&[u8]) + Send + 'static>;

/// Copies `pipe` into stream `stream` of the session until end of file, recording activity.
/// Backpressure, not dropping: the child blocks on a full pipe while a chunk is written. Ends
/// early (quietly) once the session was finalized by a stop or a cancellation.
pub fn pump(
    session: &SharedSession,
    stream: StreamIndex,
    pipe: File,
    activity: &Activity,
) -> io::Result<()> {
    pump_observed(session, stream, pipe, activity, &mut |_: &[u8]| {})
}

/// [`pump`], handing each chunk to `observer` right after it was written to the capture (the
/// session lock is released first). The observer runs on the pump's thread: while it runs the
/// pipe is not read, so a slow observer slows the child down (backpressure), never loses
/// bytes.
pub fn pump_observed(
    session: &SharedSession,
    stream: StreamIndex,
    mut pipe: File,
    activity: &Activity,
    observer: &mut dyn FnMut(&[u8]),
) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        activity.touch();
        let mut guard = session.lock().unwrap_or_else(|p| p.into_inner());
        let Some(session) = guard.as_mut() else {
            return Ok(());
        };
        // A write error is recorded in the session (the output becomes incomplete); keep
        // draining the pipe so the child is not blocked forever on a full pipe.
        let _ = session.write(stream, &buf[..n]);
        drop(guard);
        observer(&buf[..n]);
    }
}

/// A blocking job for the driver's blocking pool.
pub type Job = Box<dyn FnOnce() -> io::Result<()> + Send + 'static>;

/// Everything needed to spawn the child, from [`prepare`].
#[derive(Debug)]
pub struct Prepared {
    /// The command: argv, environment (with the sink variable set or removed), working
    /// directory, own process group.
    pub command: Command,
    /// stdin, stdout, stderr.
    pub stdio: [Stdio; 3],
    /// The run's capture and sink.
    pub run: LiveRun,
}

/// Checks `options` and opens the run: the capture session and, on opt-in, the result sink.
/// Blocking; nothing is spawned. Errors name what to fix.
pub fn prepare(store: &Store, options: RunOptions) -> Result<Prepared, RunError> {
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
    let stdout = captures(&options, "stdout").and_then(|c| session.resolve(&c).ok());
    let stderr = captures(&options, "stderr").and_then(|c| session.resolve(&c).ok());
    let command = command(&options, sink.as_ref().map(PreparedSink::path));
    let stdio = stdio(&options);
    let stdin = match &options.stdin {
        StdinMode::Bytes(bytes) => Some(bytes.clone()),
        _ => None,
    };
    Ok(Prepared {
        command,
        stdio,
        run: LiveRun {
            started: Instant::now(),
            session: Arc::new(Mutex::new(Some(session))),
            activity: Arc::new(Activity::new()),
            streams: [stdout, stderr],
            stdin,
            sink,
            observer: Mutex::new(None),
            pid: None,
            options,
        },
    })
}

/// One run between [`prepare`] and [`LiveRun::finish`] (or [`LiveRun::cancel`]).
pub struct LiveRun {
    started: Instant,
    session: SharedSession,
    activity: Arc<Activity>,
    streams: [Option<StreamIndex>; 2],
    stdin: Option<Vec<u8>>,
    sink: Option<PreparedSink>,
    // In a mutex only so that `LiveRun` stays `Sync` (drivers hold `&LiveRun` across awaits).
    observer: Mutex<Option<StdoutObserver>>,
    pid: Option<u32>,
    options: RunOptions,
}

impl std::fmt::Debug for LiveRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRun")
            .field("started", &self.started)
            .field("streams", &self.streams)
            .field("sink", &self.sink)
            .field("observer", &"..")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl LiveRun {
    /// The wall-clock timeout.
    pub fn timeout(&self) -> Option<Duration> {
        self.options.timeout
    }

    /// The idle timeout.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.options.idle_timeout
    }

    /// The grace after each stop signal.
    pub fn kill_grace(&self) -> Duration {
        self.options.kill_grace
    }

    /// The signals that stop the group, in order, before SIGKILL (SIGTERM by default).
    pub fn stop_signals(&self) -> Vec<Signal> {
        self.options
            .stop_signals
            .iter()
            .map(|s| match s {
                StopSignal::Interrupt => Signal::INT,
                StopSignal::Terminate => Signal::TERM,
            })
            .collect()
    }

    /// Time since output last arrived (or since the spawn).
    pub fn idle_for(&self) -> Duration {
        self.activity.idle_for()
    }

    /// The spawn failed: nothing ran, nothing is read; the capture and an allocated sink are
    /// removed (blocking, small).
    pub fn spawn_failed(self, source: io::Error) -> RunError {
        RunError::Spawn {
            program: self.options.program.clone(),
            source,
        }
    }

    /// Marks the spawn: the idle clock starts now.
    pub fn spawned(&mut self, pid: Option<u32>) {
        self.activity = Arc::new(Activity::new());
        self.pid = pid;
    }

    /// Installs a live tap on the child's stdout, before [`LiveRun::output_jobs`]: the stdout
    /// pump calls `observer` on its blocking thread with every chunk, after the chunk was
    /// written to the capture, so the retained artifact is byte-identical to what the tap saw
    /// (see [`pump_observed`] for backpressure). Nothing is observed when stdout is not
    /// captured.
    pub fn observe_stdout(&mut self, observer: StdoutObserver) {
        *self.observer.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(observer);
    }

    /// The pump jobs for the child's stdout and stderr pipes (`None` for a pipe that is not
    /// captured). Each runs until its pipe is at end of file. The stdout job carries the tap
    /// of [`LiveRun::observe_stdout`], if any.
    pub fn output_jobs(
        &mut self,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
    ) -> io::Result<Vec<Job>> {
        let mut jobs: Vec<Job> = Vec::new();
        let mut observer = self
            .observer
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for (pipe, stream) in [stdout, stderr].into_iter().zip(self.streams) {
            let (Some(pipe), Some(stream)) = (pipe, stream) else {
                observer = None;
                continue;
            };
            let file = blocking_pipe(pipe)?;
            let (session, activity) = (self.session.clone(), self.activity.clone());
            match observer.take() {
                Some(mut observer) => jobs.push(Box::new(move || {
                    pump_observed(&session, stream, file, &activity, &mut observer)
                })),
                None => jobs.push(Box::new(move || pump(&session, stream, file, &activity))),
            }
        }
        Ok(jobs)
    }

    /// The job writing [`StdinMode::Bytes`] to the child's stdin, then closing it. It runs
    /// beside the pumps, so a child that writes before it reads cannot deadlock; a child
    /// that exits without reading its input is not an error.
    pub fn stdin_job(&mut self, stdin: Option<OwnedFd>) -> io::Result<Option<Job>> {
        let (Some(pipe), Some(bytes)) = (stdin, self.stdin.take()) else {
            return Ok(None);
        };
        let mut file = blocking_pipe(pipe)?;
        Ok(Some(Box::new(move || {
            let _ = file.write_all(&bytes);
            Ok(())
        })))
    }

    /// Ends the run (blocking): after a normal exit reads the sink, removes an allocated sink
    /// (best effort), finalizes the capture (incomplete when stopped) and assembles the
    /// result.
    pub fn finish(self, outcome: Outcome, exit: Option<Exit>) -> Result<ProcessResult, RunError> {
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
        let record = session.finish(Completion::Streamed {
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

    /// The run future was dropped (blocking; run from `Drop` on the blocking pool). The
    /// driver's drop guard has already sent the first stop signal (SIGTERM by default) to
    /// `group`, at once: it is not sent again (a second SIGINT means "quit now" to many
    /// CLIs). Then the grace period and each further stop signal with its grace (ended early
    /// when the group is gone), SIGKILL if the group is still there, and only then the output
    /// captured so far is finalized as cancelled (incomplete, readable) and the allocated sink
    /// removed. The child is reaped by the runtime's reaper of dropped children.
    pub fn cancel(self, group: Option<Pid>) {
        // Stop first, finalize after: what the child writes while it shuts down (during the
        // grace) is still captured by the pumps.
        for (i, signal) in self.stop_signals().iter().enumerate() {
            if !group_alive(group) {
                break;
            }
            if i > 0 {
                signal_group(group, *signal);
            }
            let deadline = Instant::now() + self.options.kill_grace;
            while Instant::now() < deadline && group_alive(group) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if group_alive(group) {
            signal_group(group, Signal::KILL);
        }
        let taken = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(session) = taken {
            let _ = session.finish(Completion::Streamed {
                display: None,
                status: Status::Cancelled,
            });
        }
        drop(self.sink);
    }
}

/// Sends `signal` to process group `group` (best effort: the group may be gone).
pub fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, signal);
    }
}

fn group_alive(group: Option<Pid>) -> bool {
    group.is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
}

/// The process group of a child with id `pid` (its own, see [`command`]).
pub fn group_of(pid: Option<u32>) -> Option<Pid> {
    pid.and_then(|p| i32::try_from(p).ok())
        .and_then(Pid::from_raw)
}

/// How a reaped child ended.
pub fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}
