//! One run's blocking side: checking the options, opening the capture and the result sink,
//! the pump and stdin jobs, and finishing the run (sink read, capture finalization, result
//! assembly).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use agentrun_core::lifecycle::EXIT_AFTER_KILL;
use agentrun_core::process::{
    Exit, OptionsError, ProcessResult, RunInfo, RunOptions, RunOutcome, StdinMode,
};
use agentrun_core::progress::RunProgress;
use agentrun_core::sink::SinkOutcome;
use agentrun_core::stream::StreamIndex;
use agentrun_core::{CaptureCompletion, CaptureStatus};
use agentrun_fs::special::{InputError, InputFile, open_input};
use agentrun_fs::{CaptureProgress, CaptureSession, PreparedSink, Store, StoreError};

use crate::exit::SpawnFailure;
use crate::os::{
    self, Activity, Clock, Latch, LatchWatch, PumpEnd, SharedSession, StdoutObserver, TapPanic,
};

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
    /// The child would inherit a terminal as its standard input. It runs in a process group
    /// of its own (so that stopping a run stops everything it started), which is never the
    /// terminal's foreground group, so its first read from the terminal would stop it
    /// (SIGTTIN) until it is killed. Refused before anything runs.
    #[error(
        "the program's standard input would be the terminal, which it cannot read: it runs in \
         a process group of its own, not the terminal's foreground group, so reading would \
         stop it (SIGTTIN); give it input through a pipe or a file, or none"
    )]
    StdinIsTerminal,
    /// The store refused to capture or publish, or the result sink could not be prepared.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The file given as the program's standard input ([`StdinMode::File`]) cannot be
    /// opened, or is something that cannot be read as input (a directory, a socket, a
    /// terminal). Refused before anything runs.
    #[error("cannot use {} as the program's standard input: {source}", .path.display())]
    StdinFile {
        /// The path as given.
        path: PathBuf,
        /// Why.
        source: InputError,
    },
    /// The program ran to its end, but its output could not be published or its record
    /// written (the store's disk is full even after the room set aside for it, say). How it
    /// ended is still told; what was captured stays in the store for `agentrun gc` to clear.
    /// On a shared store whose bucket refused the run ([`StoreError::NotPublished`]) the run
    /// is recorded in the spool and waits for `agentrun publish` instead.
    #[error("the program {}, but {}", ended(.exit), unrecorded(.source))]
    Unrecorded {
        /// How the program ended (`None` if that is unknown).
        exit: Option<Exit>,
        /// Why publication failed.
        source: StoreError,
    },
    /// Talking to the child failed.
    #[error("process I/O failed: {0}")]
    Io(#[from] io::Error),
}

/// Why the result of a program that ran was not recorded, for an error message. A run the
/// spool of a shared store holds was recorded, only not published: its error says so.
fn unrecorded(source: &StoreError) -> String {
    match source {
        StoreError::NotPublished { .. } => source.to_string(),
        _ => format!("its result could not be recorded: {source}"),
    }
}

/// How a program ended, for an error message.
fn ended(exit: &Option<Exit>) -> String {
    match exit {
        Some(Exit::Code(code)) => format!("exited with code {code}"),
        Some(Exit::Signal(signal)) => format!("was killed by signal {signal}"),
        None => "ended in a way that is unknown".to_owned(),
    }
}

impl RunError {
    /// Why the program could not be started, when that is the error ([`RunError::Spawn`]).
    pub fn spawn_failure(&self) -> Option<SpawnFailure> {
        match self {
            RunError::Spawn { program, source } => Some(SpawnFailure::classify(program, source)),
            _ => None,
        }
    }

    /// The exit code a shell gives a program this error kept from starting
    /// ([`SpawnFailure::exit_code`]). `None` for an error that is not about the program.
    pub fn exit_code(&self) -> Option<u8> {
        self.spawn_failure().map(SpawnFailure::exit_code)
    }
}

fn spawn_hint(program: &OsStr, e: &io::Error) -> String {
    format!(" ({})", SpawnFailure::classify(program, e).explanation(e))
}

/// A blocking job of a run (a pump or the stdin writer): it ends at the end of its pipe or
/// when the run finishes, whichever comes first, and reports its own failures in the capture.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// A pump's [`Job`]; it returns whether its live tap panicked (the run must then be stopped).
pub(crate) type PumpJob = Box<dyn FnOnce() -> bool + Send + 'static>;

/// The live taps of a run that panicked: the first panic, resumed in the caller once the run
/// is over, and their pipes, held open until then so that the child blocks on a full pipe
/// rather than dying of SIGPIPE before the run's stop signals reach it.
#[derive(Default)]
pub(crate) struct TapPanics {
    first: Option<TapPanic>,
    pipes: Vec<File>,
}

/// [`TapPanics`], shared by a run and its pumps.
pub(crate) type SharedTapPanics = Arc<Mutex<TapPanics>>;

impl TapPanics {
    /// The first panic, if a tap panicked; the held pipes are closed.
    pub(crate) fn take(shared: &SharedTapPanics) -> Option<TapPanic> {
        let mut panics = shared.lock().unwrap_or_else(|p| p.into_inner());
        panics.pipes.clear();
        panics.first.take()
    }
}

/// How a run ended, as the run lifecycle said ([`agentrun_core::lifecycle::RunAction::Finish`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending {
    pub(crate) outcome: RunOutcome,
    pub(crate) exit: Option<Exit>,
    /// An output pipe was still open (held by a process outside the group).
    pub(crate) pipes_open: bool,
    /// Whether the child was reaped.
    pub(crate) reaped: bool,
}

/// The capture fault of a stream whose pipe was still open when the run ended. Everything in
/// the pipe at that moment was captured; only a process outside the run's group can write
/// to it later.
const PIPE_HELD_OPEN: &str = "output may be missing: a process outside the run's process \
    group (started with setsid?) kept this pipe open after the run ended; what it wrote after \
    that was not captured";

/// The capture fault of a stream whose live tap panicked (the run was stopped for it).
const TAP_PANICKED: &str = "output may be missing: the live tap (observer) of this stream \
    panicked, so the run was stopped; what the program wrote after the chunk the tap panicked \
    on was not captured";

/// The capture fault of a stream whose pump never returned (it panicked outside its tap).
const PUMP_DIED: &str = "output may be missing: capturing this stream stopped early (its pump \
    panicked); what came after was not captured";

/// `ends` of a pump that has not returned.
const NOT_ENDED: u8 = u8::MAX;

/// Everything needed to spawn the child, from [`prepare`].
pub(crate) struct Prepared {
    pub(crate) command: Command,
    pub(crate) stdio: [Stdio; 3],
    pub(crate) run: LiveRun,
}

/// Checks `options` and opens the run: the capture session and, on opt-in, the result sink.
/// Blocking; nothing is spawned. Errors name what to fix.
pub(crate) fn prepare(store: &Store, mut options: RunOptions) -> Result<Prepared, RunError> {
    options.validate()?;
    // Giving the child's group the terminal instead (tcsetpgrp) would also hand it the job
    // control keys: a Ctrl-Z would stop it where the runner cannot see it, with the terminal
    // still held by the stopped group.
    if *options.get_stdin() == StdinMode::Inherit && io::stdin().is_terminal() {
        return Err(RunError::StdinIsTerminal);
    }
    if let Some(dir) = options.get_current_dir() {
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
                program: options.get_program().to_owned(),
                dir: dir.to_owned(),
                source,
            });
        }
    }
    // Opened now, before the capture starts and without waiting for a writer: a regular
    // file becomes the child's stdin itself, anything else that can be read is passed on
    // by the stdin job as it comes.
    let mut stdin = match options.get_stdin_mut() {
        // Moved, not copied: a summarizer's input may be hundreds of megabytes.
        StdinMode::Bytes(bytes) => Some(StdinFeed::Bytes(std::mem::take(bytes))),
        StdinMode::File(path) => {
            let refused = |source| RunError::StdinFile {
                path: path.clone(),
                source,
            };
            match open_input(path).map_err(refused)? {
                InputFile::Regular(file) => Some(StdinFeed::File(file)),
                InputFile::Stream(file) => Some(StdinFeed::Stream(file)),
                _ => {
                    return Err(refused(InputError::Io(io::Error::other(
                        "unknown input kind",
                    ))));
                }
            }
        }
        _ => None,
    };
    let mut session =
        store.begin_capture(options.get_declaration().clone(), options.get_limits())?;
    // Room for the command in the record, which is written at the end, when the disk may be
    // full: taken now, before anything runs.
    let cwd = run_dir(&options);
    let label_bytes = options.get_label().map_or(0, str::len);
    session.reserve_record_room(
        agentrun_core::process::command_bytes(&options.command())
            + label_bytes
            + cwd.as_ref().map_or(0, String::len),
    )?;
    // So that listings of runs in progress can say what this one runs.
    session.announce_run(&options.command(), cwd.as_deref(), options.get_label());
    let sink = match options.get_result_sink() {
        Some(sink) => Some(store.prepare_sink(sink, session.run_id())?),
        None => None,
    };
    let stdout = os::captures(&options, "stdout").and_then(|c| session.resolve(&c).ok());
    let stderr = os::captures(&options, "stderr").and_then(|c| session.resolve(&c).ok());
    let command = os::command(&options, sink.as_ref().map(PreparedSink::path));
    let mut stdio = os::stdio(&options);
    if let Some(StdinFeed::File(file)) = stdin.take_if(|s| matches!(s, StdinFeed::File(_))) {
        // The child reads the file itself, with blocking reads as from any `< file`.
        let flags = rustix::fs::fcntl_getfl(&file).map_err(io::Error::from)?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)
            .map_err(io::Error::from)?;
        stdio[0] = Stdio::from(file);
    }
    let (stop, stopped) = os::latch()?;
    let started = Instant::now();
    let started_wall = SystemTime::now();
    Ok(Prepared {
        command,
        stdio,
        run: LiveRun {
            started,
            started_wall,
            progress: session.progress(),
            cwd,
            session: Arc::new(Mutex::new(Some(session))),
            activity: Arc::new(Activity::new(started)),
            streams: [stdout, stderr],
            ends: Arc::new([AtomicU8::new(NOT_ENDED), AtomicU8::new(NOT_ENDED)]),
            tap_panics: SharedTapPanics::default(),
            stop: Some(stop),
            stopped,
            stdin,
            sink,
            pid: None,
            options,
        },
    })
}

/// The directory the child runs in, absolute, as its record keeps it: `None` when the
/// runner's own cannot be read or the path is longer than a record holds.
fn run_dir(options: &RunOptions) -> Option<String> {
    let dir = match options.get_current_dir() {
        Some(dir) if dir.is_absolute() => dir.to_owned(),
        Some(dir) => std::env::current_dir().ok()?.join(dir),
        None => std::env::current_dir().ok()?,
    };
    // `a/./b` as `a/b`; `..` stays (it may cross a symbolic link).
    let dir: PathBuf = dir.components().collect();
    let dir = dir.to_string_lossy().into_owned();
    (dir.len() <= agentrun_core::process::MAX_CWD_BYTES).then_some(dir)
}

/// What the stdin job gives the child.
enum StdinFeed {
    /// These bytes.
    Bytes(Vec<u8>),
    /// A regular file, handed to the child as its stdin before the spawn (never to the job).
    File(std::fs::File),
    /// What this FIFO, pipe or device sends, as it comes.
    Stream(std::fs::File),
}

/// One run between [`prepare`] and [`LiveRun::finish`].
pub(crate) struct LiveRun {
    started: Instant,
    /// The same moment on the wall clock, for the record.
    started_wall: SystemTime,
    /// What the capture accepted so far, read without the session's lock.
    progress: CaptureProgress,
    /// The directory the child runs in, for the record.
    cwd: Option<String>,
    session: SharedSession,
    activity: Arc<Activity>,
    streams: [Option<StreamIndex>; 2],
    /// Per pipe (stdout, stderr): how its pump ended ([`NOT_ENDED`] while it runs, and when
    /// it never returned: a pump that panicked outside its tap).
    ends: Arc<[AtomicU8; 2]>,
    /// What the live taps left when they panicked.
    tap_panics: SharedTapPanics,
    /// Held until the run finishes; dropping it stops the pumps and the stdin writer.
    stop: Option<Latch>,
    stopped: LatchWatch,
    stdin: Option<StdinFeed>,
    sink: Option<PreparedSink>,
    pid: Option<u32>,
    options: RunOptions,
}

impl LiveRun {
    pub(crate) fn options(&self) -> &RunOptions {
        &self.options
    }

    /// What the run's live taps leave when they panic ([`TapPanics::take`]).
    pub(crate) fn tap_panics(&self) -> SharedTapPanics {
        self.tap_panics.clone()
    }

    /// How long the child has been running at `now` (on the runtime's clock) and what each
    /// stream holds so far.
    pub(crate) fn progress(&self, now: Instant) -> RunProgress {
        RunProgress::new(
            now.saturating_duration_since(self.started),
            self.progress.streams(),
        )
    }

    /// When output last arrived (or the spawn).
    pub(crate) fn last_output(&self) -> Instant {
        self.activity.last_output()
    }

    /// The spawn failed: nothing ran, nothing is read; the capture and an allocated sink are
    /// removed when the run is dropped.
    pub(crate) fn spawn_failed(self, source: io::Error) -> RunError {
        RunError::Spawn {
            program: self.options.get_program().to_owned(),
            source,
        }
    }

    /// Marks the spawn at `now` on the runtime's `clock`: the idle clock and the run's
    /// duration start.
    pub(crate) fn spawned(&mut self, pid: Option<u32>, now: Instant, clock: Clock) {
        self.started = now;
        self.activity = Arc::new(Activity::on_clock(now, clock));
        self.pid = pid;
    }

    /// The pump jobs for the child's stdout and stderr pipes (none for a pipe that is not
    /// captured). Each runs until its pipe is at end of file or the run finishes, or its tap
    /// panics, and carries its pipe's tap, if any.
    pub(crate) fn output_jobs(
        &mut self,
        stdout: Option<OwnedFd>,
        stderr: Option<OwnedFd>,
        observers: [Option<StdoutObserver>; 2],
    ) -> io::Result<Vec<PumpJob>> {
        let mut jobs: Vec<PumpJob> = Vec::new();
        let pipes = [stdout, stderr].into_iter().zip(self.streams);
        for (i, ((pipe, stream), mut observer)) in pipes.zip(observers).enumerate() {
            let (Some(pipe), Some(stream)) = (pipe, stream) else {
                continue;
            };
            let file = os::nonblocking_pipe(pipe)?;
            let (session, activity) = (self.session.clone(), self.activity.clone());
            let (ends, stop) = (self.ends.clone(), self.stopped.clone());
            let panics = self.tap_panics.clone();
            jobs.push(Box::new(move || {
                let observer = observer.as_mut().map(|o| o as &mut os::Tap<'_>);
                let end = match os::pump(&session, stream, &file, &activity, observer, &stop) {
                    Ok(end) => end,
                    Err(panic) => {
                        let mut panics = panics.lock().unwrap_or_else(|p| p.into_inner());
                        panics.first.get_or_insert(panic);
                        panics.pipes.push(file);
                        PumpEnd::TapPanicked
                    }
                };
                ends[i].store(end as u8, Ordering::Release);
                end == PumpEnd::TapPanicked
            }));
        }
        Ok(jobs)
    }

    /// The job writing [`StdinMode::Bytes`] to the child's stdin, then closing it. It runs
    /// beside the pumps, so a child that writes before it reads cannot deadlock; a child
    /// that exits without reading its input is not an error, and the job ends with the run
    /// even when a process outside the group holds the pipe without reading it.
    pub(crate) fn stdin_job(&mut self, stdin: Option<OwnedFd>) -> io::Result<Option<Job>> {
        let (Some(pipe), Some(feed)) = (stdin, self.stdin.take()) else {
            return Ok(None);
        };
        let file = os::nonblocking_pipe(pipe)?;
        let stop = self.stopped.clone();
        Ok(Some(match feed {
            StdinFeed::Bytes(bytes) => Box::new(move || {
                let _ = os::feed_stdin(file, &bytes, &stop);
            }),
            StdinFeed::Stream(source) => Box::new(move || {
                let _ = os::pump_stdin(source, file, &stop);
            }),
            // Given to the child at the spawn: there is no pipe to feed.
            StdinFeed::File(_) => return Ok(None),
        }))
    }

    /// Takes the capture session from the pumps and records what the run's end left
    /// unfinished. The pumps are told to stop first; with `pumps_done` (the normal end) they
    /// are waited for, so the bytes already in a pipe are captured even when a slow live tap
    /// held its pump back (backpressure delays the end instead of losing output). Without it
    /// (a dropped run) they stop at their next chunk.
    fn close_capture(
        &mut self,
        ending: Ending,
        pumps_done: Option<&LatchWatch>,
    ) -> Option<CaptureSession> {
        drop(self.stop.take());
        if let Some(done) = pumps_done {
            let _ = os::wait_any(&[done.as_fd()], None);
        }
        let mut session = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        for (stream, end) in self.streams.iter().zip(self.ends.iter()) {
            let Some(stream) = *stream else { continue };
            let end = end.load(Ordering::Acquire);
            let fault = if end == PumpEnd::Stopped as u8 && ending.pipes_open {
                Some(PIPE_HELD_OPEN)
            } else if end == PumpEnd::TapPanicked as u8 {
                Some(TAP_PANICKED)
            } else if end == NOT_ENDED && pumps_done.is_some() {
                Some(PUMP_DIED)
            } else {
                // End of file; a read failure (already recorded); a dropped run (cancelled).
                None
            };
            if let Some(fault) = fault {
                let _ = session.record_fault(Some(stream), fault);
            }
        }
        if !ending.reaped {
            let _ = session.record_fault(
                None,
                &format!(
                    "the child did not exit within {} s of SIGKILL (stuck in the kernel, e.g. \
                     on a hung file system); how it ended is unknown",
                    EXIT_AFTER_KILL.as_secs()
                ),
            );
        }
        Some(session)
    }

    /// Ends the run (blocking): stops the pumps, records what the end left unfinished (output
    /// pipes still open, an exit never seen) as capture faults, after a normal exit reads the
    /// sink, removes an allocated sink (a failure is reported in the result), finalizes the
    /// capture (incomplete when stopped) and assembles the result.
    ///
    /// `ended` is called once the pumps have stopped, before the sink is read and the record
    /// published ([`RunBuilder::on_ended`](crate::RunBuilder::on_ended)); it must not panic
    /// (the driver catches a caller's panic around it).
    pub(crate) fn finish(
        mut self,
        ending: Ending,
        pumps_done: Option<&LatchWatch>,
        ended: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<ProcessResult, RunError> {
        let Ending { outcome, exit, .. } = ending;
        let session = self
            .close_capture(ending, pumps_done)
            .ok_or_else(|| io::Error::other("capture session was finalized twice"))?;
        if let Some(ended) = ended {
            ended();
        }
        let (sink, result) = match (&self.sink, outcome.sink_not_read()) {
            (None, _) => (SinkOutcome::NotRequested, None),
            (Some(_), Some(reason)) => (SinkOutcome::NotRead { reason }, None),
            (Some(sink), None) => sink.read(self.options.get_sink_cap()),
        };
        // A directory that cannot be removed is owner-only and harmless, and must not cost the
        // caller the run's result: it is reported beside it, and `agentrun gc` removes it.
        let sink_cleanup_error = match self.sink.take().map(PreparedSink::remove) {
            Some(Err(e)) => Some(e.to_string()),
            Some(Ok(())) | None => None,
        };
        let mut session = session;
        let described = session.describe_run(RunInfo {
            command: self.options.command(),
            outcome,
            exit,
            started_unix_ms: self
                .started_wall
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            duration_ms: self
                .activity
                .now()
                .saturating_duration_since(self.started)
                .as_millis() as u64,
            cwd: self.cwd.take(),
            label: self.options.get_label().map(str::to_owned),
        });
        if let Err(e) = described {
            // Not reached: the options were validated with the same bound before the spawn.
            // Were it reached, the output is kept all the same, and the record says why it
            // describes no run.
            let _ = session.record_fault(None, &e.to_string());
        }
        let record = session
            .finish(CaptureCompletion::Streamed {
                display: None,
                status: outcome.capture_status(),
            })
            .map_err(|source| RunError::Unrecorded { exit, source })?;
        let duration = self.activity.now().saturating_duration_since(self.started);
        let mut run = ProcessResult::new(outcome, exit, duration, record);
        run.result = result;
        run.sink = sink;
        run.sink_cleanup_error = sink_cleanup_error;
        run.pid = self.pid;
        run.label = self.options.get_label().map(str::to_owned);
        Ok(run)
    }

    /// The run future was dropped and the group is stopped: the output captured so far is
    /// finalized as cancelled (incomplete, readable) and the allocated sink removed.
    pub(crate) fn abandon(mut self, ending: Ending) {
        if let Some(session) = self.close_capture(ending, None) {
            let _ = session.finish(CaptureCompletion::Streamed {
                display: None,
                status: CaptureStatus::Cancelled,
            });
        }
        drop(self.sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_full() -> StoreError {
        StoreError::Io(agentrun_fs::IoError {
            op: "write",
            path: Some(PathBuf::from("/s/records/r.json")),
            source: io::Error::from_raw_os_error(28),
        })
    }

    #[test]
    fn a_result_that_could_not_be_recorded_still_says_how_the_program_ended() {
        let e = RunError::Unrecorded {
            exit: Some(Exit::Code(3)),
            source: disk_full(),
        };
        let message = e.to_string();
        assert!(message.contains("exited with code 3"), "{message}");
        assert!(message.contains("No space left on device"), "{message}");
        let e = RunError::Unrecorded {
            exit: Some(Exit::Signal(9)),
            source: disk_full(),
        };
        assert!(e.to_string().contains("killed by signal 9"), "{e}");
    }
}
