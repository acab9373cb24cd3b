//! The OS layer: the child command, its process group and signals, its pipes, and `PATH`
//! lookup. Blocking code; nothing here depends on an async runtime.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrun_core::harness::StopSignal;
use agentrun_core::process::{Exit, RunOptions, StdinMode};
use agentrun_core::stream::{OutputChannel, OutputDeclaration, StreamIndex};
use agentrun_fs::CaptureSession;
use rustix::process::{Pid, Signal};

/// Pipe reads go straight into the capture file; larger reads mean fewer wakeups and syscalls.
const READ_BUF: usize = 256 * 1024;

/// Linux pipes default to 64 KiB; a bigger pipe lets a fast child run ahead of the capture.
const PIPE_SIZE: usize = 1 << 20;

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
/// removed otherwise; every other known sink variable
/// ([`KNOWN_SINK_VARS`](agentrun_core::sink::KNOWN_SINK_VARS)) is removed too unless the
/// caller's environment changes set it, so a value inherited from an ancestor never reaches
/// the child.
pub fn command(options: &RunOptions, sink: Option<&Path>) -> Command {
    let mut cmd = Command::new(&options.program);
    cmd.args(&options.args);
    if let Some(dir) = &options.current_dir {
        cmd.current_dir(dir);
    }
    for known in agentrun_core::sink::KNOWN_SINK_VARS {
        cmd.env_remove(known);
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
pub fn captures(options: &RunOptions, pipe: &str) -> Option<OutputChannel> {
    match &options.declaration {
        OutputDeclaration::Single => (pipe == "stdout").then_some(OutputChannel::Single),
        OutputDeclaration::Named(names) => names
            .iter()
            .find(|n| n.as_str() == pipe)
            .cloned()
            .map(OutputChannel::Named),
    }
}

/// Turns a pipe end into a non-blocking file for the pump and the stdin writer, which wait
/// for it together with the run's stop [`LatchWatch`] (a blocking read could not be
/// interrupted).
pub(crate) fn nonblocking_pipe(fd: OwnedFd) -> io::Result<File> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(&fd)?;
    fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?;
    // Best effort: a smaller pipe only costs throughput.
    let _ = rustix::pipe::fcntl_setpipe_size(&fd, PIPE_SIZE);
    Ok(File::from(fd))
}

/// A latch that trips when its last holder lets go, and that a blocking thread can wait on
/// together with a pipe: a pipe whose write end only the [`Latch`] clones hold, so the read
/// end ([`LatchWatch`]) reaches end of file (turns readable) once the last clone is dropped.
/// A run holds one until it finishes (dropping it stops the pumps and the stdin writer, even
/// when a process that left the group keeps their pipes open), and the pump jobs hold
/// another (it trips when every pump ended).
#[derive(Debug, Clone)]
pub(crate) struct Latch(#[allow(dead_code)] Arc<OwnedFd>);

/// The side of a [`Latch`] that waits for it to trip.
#[derive(Debug, Clone)]
pub(crate) struct LatchWatch(Arc<OwnedFd>);

/// A new latch and its watch.
pub(crate) fn latch() -> io::Result<(Latch, LatchWatch)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((Latch(Arc::new(write)), LatchWatch(Arc::new(read))))
}

impl LatchWatch {
    /// Whether every holder let go.
    pub(crate) fn tripped(&self) -> bool {
        wait_any(&[self.0.as_fd()], Some(Duration::ZERO)).is_ok_and(|ready| ready[0])
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Waits until one of `fds` is readable (or at its end, or in error) or `timeout` passed
/// (`None`: no limit), and says which are.
pub(crate) fn wait_any(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    // A timeout too long for a timespec is as good as none.
    let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
    loop {
        match poll(&mut polled, timeout.as_ref()) {
            Ok(_) => return Ok(polled.iter().map(|p| !p.revents().is_empty()).collect()),
            // A signal handler ran: the remaining time is not tracked, the caller loops anyway.
            Err(rustix::io::Errno::INTR) if timeout.is_some() => {
                return Ok(vec![false; fds.len()]);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits until `pipe` is ready for `events` (or at its end) and returns `true`, or until the
/// latch of `stop` tripped and returns `false`.
fn wait_ready(
    pipe: &File,
    events: rustix::event::PollFlags,
    stop: &LatchWatch,
) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [
        PollFd::new(pipe, events),
        PollFd::new(&*stop.0, PollFlags::IN),
    ];
    loop {
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if !fds[1].revents().is_empty() {
            return Ok(false);
        }
        if !fds[0].revents().is_empty() {
            return Ok(true);
        }
    }
}

/// A descriptor that turns readable when the child with id `pid` exits (a pidfd), so a
/// blocking thread can wait for the exit without polling; `None` where the kernel has no
/// pidfds (before Linux 5.3) or the id is unknown. Open it right after the spawn, while the
/// child cannot have been reaped (its id cannot name another process yet).
pub(crate) fn exit_watch(pid: Option<u32>) -> Option<OwnedFd> {
    let pid = group_of(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Writes `bytes` to the child's stdin `pipe` (non-blocking, see [`nonblocking_pipe`]) and
/// closes it. Returns early when the child stops reading (a closed pipe is not an error: the
/// child need not read its input) or when `stop` fires.
pub(crate) fn feed_stdin(mut pipe: File, bytes: &[u8], stop: &LatchWatch) -> io::Result<()> {
    use std::io::Write as _;
    let mut rest = bytes;
    while !rest.is_empty() {
        match pipe.write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !wait_ready(&pipe, rustix::event::PollFlags::OUT, stop)? {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The OS signal for a stop signal.
pub fn os_signal(signal: StopSignal) -> Signal {
    match signal {
        StopSignal::Interrupt => Signal::INT,
        StopSignal::Terminate => Signal::TERM,
    }
}

/// Whether a signal sent to a process group found a process in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// The group exists (the signal was sent).
    Sent,
    /// The group has no process left (or there was no group to signal).
    NoGroup,
}

/// Sends `signal` to process group `group`.
pub fn signal_group(group: Option<Pid>, signal: Signal) -> Delivery {
    match group {
        Some(group) => match rustix::process::kill_process_group(group, signal) {
            Err(rustix::io::Errno::SRCH) => Delivery::NoGroup,
            // EPERM and the like: the group is there, we cannot do more than try.
            _ => Delivery::Sent,
        },
        None => Delivery::NoGroup,
    }
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

/// The session shared by the pumps of one run; `None` once the run has finalized it.
pub(crate) type SharedSession = Arc<Mutex<Option<CaptureSession>>>;

/// When output last arrived on any stream of a run (for the idle timeout). The pumps record
/// it without waking the driver; the driver reports it to the run lifecycle when it wakes.
#[derive(Debug)]
pub(crate) struct Activity {
    origin: Instant,
    /// Nanoseconds after `origin` of the last output.
    last: AtomicU64,
}

impl Activity {
    pub(crate) fn new(origin: Instant) -> Self {
        Self {
            origin,
            last: AtomicU64::new(0),
        }
    }

    /// Records output now.
    fn touch(&self) {
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// When output last arrived (the origin when none did).
    pub(crate) fn last_output(&self) -> Instant {
        self.origin + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

/// A live tap on the child's stdout (or stderr): called with each chunk as it is captured, cut
/// anywhere (use `agentrun_core::lines::LineSplitter` for lines).
pub type StdoutObserver = Box<dyn FnMut(&[u8]) + Send + 'static>;

/// How a pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum PumpEnd {
    /// Its live tap panicked (the panic is the pump's error, [`TapPanic`]): the chunk it was
    /// given is captured, nothing after it is read.
    TapPanicked,
    /// The pipe reached end of file and every byte of it was captured.
    EndOfFile,
    /// The run finished (the session was finalized, or its stop [`Latch`] tripped) while the
    /// pipe was still open: what comes later is not captured.
    Stopped,
    /// Reading the pipe failed; the fault is recorded in the session.
    Failed,
}

/// A live tap: sees each chunk of a pipe right after it was captured.
pub(crate) type Tap<'a> = dyn FnMut(&[u8]) + 'a;

/// The panic of a live tap, caught so the run can be stopped and its record published before
/// the panic is resumed in the caller.
pub(crate) type TapPanic = Box<dyn std::any::Any + Send + 'static>;

/// Copies `pipe` (non-blocking, see [`nonblocking_pipe`]) into stream `stream` of the session
/// until end of file, recording activity and handing each chunk to `observer`, if any, right
/// after it was written to the capture (the session lock is released first). Without an
/// observer the session takes the bytes from the pipe itself
/// ([`CaptureSession::write_from_pipe`]: no copy through this thread). Backpressure, not
/// dropping: the child blocks on a full pipe while a chunk is written or observed. Ends early
/// once the session was finalized or `stop` fired (the run is over), even while a process
/// outside the group keeps the pipe open, so no pump outlives its run.
///
/// When `stop` fires while the pump is busy (a slow live tap or capture write holds it back),
/// the bytes already in the pipe at that moment are still captured and observed, so nothing
/// the run's own processes wrote is lost to backpressure; only what arrives after that (from a
/// process outside the group) is left uncaptured.
///
/// A tap that panics ends the pump with its panic as the error, after the chunk it was given
/// was captured; the pipe is not read any more (the caller decides what becomes of it).
pub(crate) fn pump(
    session: &SharedSession,
    stream: StreamIndex,
    pipe: &File,
    activity: &Activity,
    mut observer: Option<&mut Tap<'_>>,
    stop: &LatchWatch,
) -> Result<PumpEnd, TapPanic> {
    let mut reader = pipe;
    // With a live tap the bytes must pass through this thread: read, then write. Without one
    // the session moves them from the pipe into the capture file itself (splice where the
    // kernel allows it), at most a pipe's worth at a time.
    let (mut buf, most) = match observer {
        Some(_) => (vec![0u8; READ_BUF], READ_BUF),
        None => (Vec::new(), PIPE_SIZE),
    };
    // Bytes still to take after `stop` fired: what the pipe held at that moment. Once they
    // are taken, one last read tells end of file (every writer gone) from a pipe still held.
    let mut after_stop: Option<u64> = None;
    let mut last_read = false;
    loop {
        if after_stop.is_none() && stop.tripped() {
            after_stop = Some(rustix::io::ioctl_fionread(pipe).unwrap_or(0));
        }
        if last_read {
            return Ok(PumpEnd::Stopped);
        }
        let want = match after_stop {
            Some(0) => {
                last_read = true;
                most
            }
            Some(left) => most.min(usize::try_from(left).unwrap_or(usize::MAX)),
            None => most,
        };
        let taken = match observer {
            Some(_) => reader.read(&mut buf[..want]),
            None => {
                let mut guard = session.lock().unwrap_or_else(|p| p.into_inner());
                let Some(session) = guard.as_mut() else {
                    return Ok(PumpEnd::Stopped);
                };
                // A capture fault is recorded in the session (the output becomes
                // incomplete) and the bytes are still taken, so the child never blocks on a
                // full pipe.
                session.write_from_pipe(stream, pipe.as_fd(), want)
            }
        };
        let n = match taken {
            Ok(0) => return Ok(PumpEnd::EndOfFile),
            Ok(n) => {
                if let Some(left) = after_stop.as_mut() {
                    *left = left.saturating_sub(n as u64);
                }
                n
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if after_stop.is_some() {
                    return Ok(PumpEnd::Stopped);
                }
                match wait_ready(pipe, rustix::event::PollFlags::IN, stop) {
                    // Readable, or stopped: the loop's top takes what the pipe holds.
                    Ok(_) => continue,
                    Err(e) => return Ok(read_failed(session, stream, &e)),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Ok(read_failed(session, stream, &e)),
        };
        activity.touch();
        if let Some(observer) = observer.as_mut() {
            let mut guard = session.lock().unwrap_or_else(|p| p.into_inner());
            let Some(session) = guard.as_mut() else {
                return Ok(PumpEnd::Stopped);
            };
            // A write error is recorded in the session (the output becomes incomplete); keep
            // draining the pipe so the child is not blocked forever on a full pipe.
            let _ = session.write(stream, &buf[..n]);
            drop(guard);
            // The tap holds no lock of ours while it runs: its panic poisons nothing here.
            let chunk = &buf[..n];
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| observer(chunk)))?;
        }
    }
}

/// Reading a pipe failed: the bytes after it are lost, so the capture says so.
fn read_failed(session: &SharedSession, stream: StreamIndex, e: &io::Error) -> PumpEnd {
    let mut guard = session.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(session) = guard.as_mut() {
        let _ = session.record_fault(Some(stream), &format!("reading the pipe failed: {e}"));
    }
    PumpEnd::Failed
}

/// The watchdog's script: on "done" the run ended normally and it exits; on end of file (the
/// runner died without saying so) it stops the group the way a timeout would: each stop
/// signal with the grace after it, then SIGKILL. Its arguments are the group id, the grace
/// in seconds and the stop signals' names; nothing of the caller's reaches the script text.
const WATCHDOG_SCRIPT: &str = r#"read -r word
[ "$word" = done ] && exit 0
group=$1 grace=$2
shift 2
for sig in "$@"; do
    kill -s "$sig" -- "-$group" 2>/dev/null || exit 0
    sleep "$grace"
done
kill -s KILL -- "-$group" 2>/dev/null
exit 0
"#;

/// Stops the child's process group if the runner dies without ending the run (SIGKILL, a
/// crash): a tiny `/bin/sh` process in a group of its own, holding the read end of a pipe
/// whose write end only the runner has. The kernel closes that end when the runner dies, for
/// whatever reason; the watchdog then reads end of file and stops the group. A parent-death
/// signal would reach only the child, not the processes it started, and is tied to the
/// thread that spawned it.
///
/// Public for embedders that spawn processes of their own (and for measuring its cost): the
/// runner starts one per run. Dropping it without [`Watchdog::stand_down`] closes the pipe
/// just as the runner's death would, and the watchdog stops the group.
#[derive(Debug)]
#[must_use = "dropping a watchdog without stand_down stops the group it guards"]
pub struct Watchdog {
    alarm: File,
    process: std::process::Child,
}

impl Watchdog {
    /// Starts the watchdog of `group`, which on the runner's death gets each of `signals`
    /// with `grace` after it, then SIGKILL. Best effort: without `/bin/sh` (or on any spawn
    /// error) the run goes on unguarded, as it would have before (`None`).
    pub fn start(group: Option<Pid>, signals: &[StopSignal], grace: Duration) -> Option<Self> {
        let group = group?;
        // Close-on-exec: no other child (of this run or a concurrent one) may inherit the
        // write end, or the watchdog would not see the runner die.
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let names = signals.iter().map(|s| match s {
            StopSignal::Interrupt => "INT",
            StopSignal::Terminate => "TERM",
        });
        let process = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("agentrun-watchdog")
            .arg(group.as_raw_pid().to_string())
            .arg(format!("{}.{:03}", grace.as_secs(), grace.subsec_millis()))
            .args(names)
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Not in the terminal's foreground group: a Ctrl-C meant for the runner must not
            // end the watchdog.
            .process_group(0)
            .spawn()
            .ok()?;
        Some(Self {
            alarm: File::from(write),
            process,
        })
    }

    /// The run is over: tells the watchdog to exit without signalling, and reaps it
    /// (blocking, briefly).
    pub fn stand_down(mut self) {
        use std::io::Write as _;
        let _ = self.alarm.write_all(b"done\n");
        drop(self.alarm);
        let _ = self.process.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use agentrun_core::limits::PreviewLimits;
    use agentrun_core::stream::OutputDeclaration;
    use std::sync::mpsc;

    /// A capture of single output in a new store under `dir`, shared as a run's pumps share
    /// it, and its stream.
    fn shared_capture(dir: &Path) -> (SharedSession, StreamIndex) {
        let store = agentrun_fs::Store::open(dir.join("store")).unwrap();
        let session = store
            .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
            .unwrap();
        let stream = session.resolve(&OutputChannel::Single).unwrap();
        (Arc::new(Mutex::new(Some(session))), stream)
    }

    /// Finalizes the shared capture; its record rendered.
    fn finish_rendered(shared: &SharedSession) -> String {
        let session = shared.lock().unwrap().take().unwrap();
        let record = session
            .finish(agentrun_core::CaptureCompletion::Streamed {
                display: None,
                status: agentrun_core::CaptureStatus::Succeeded,
            })
            .unwrap();
        record.render()
    }

    /// A pump on a pipe whose write end stays open (as when a process that left the group
    /// holds it) ends as soon as its run's latch trips, having captured what came before; a
    /// blocked pump would otherwise outlive its run and pile up in a long-lived server.
    fn a_pump_stops_when_its_run_ends(observed: bool) {
        let tmp = tempfile::tempdir().unwrap();
        let (shared, stream) = shared_capture(tmp.path());
        let (read, write) = rustix::pipe::pipe().unwrap();
        let pipe = nonblocking_pipe(read).unwrap();
        let (stop, stopped) = latch().unwrap();
        let (ended, end) = mpsc::channel();
        let pumped = shared.clone();
        let (seen, first_chunk) = mpsc::channel();
        rustix::io::write(&write, b"early\n").unwrap();
        std::thread::spawn(move || {
            let activity = Activity::new(Instant::now());
            let mut observer = |_: &[u8]| {
                let _ = seen.send(());
            };
            let observer = observed.then_some(&mut observer as &mut Tap<'_>);
            let end = pump(&pumped, stream, &pipe, &activity, observer, &stopped);
            let _ = ended.send(end.ok());
        });
        if observed {
            first_chunk.recv().unwrap();
            assert!(end.try_recv().is_err(), "the pump waits for more");
        }
        // Unobserved, the stop may come before the pump took anything: what the pipe held
        // then is still taken.
        drop(stop);
        let end = end.recv_timeout(Duration::from_secs(60));
        assert_eq!(
            end,
            Ok(Some(PumpEnd::Stopped)),
            "the pump ended with its run"
        );
        let rendered = finish_rendered(&shared);
        assert!(rendered.contains("early"), "{rendered}");
        drop(write);
    }

    #[test]
    fn a_pump_with_a_tap_stops_when_its_run_ends_though_the_pipe_stays_open() {
        a_pump_stops_when_its_run_ends(true);
    }

    #[test]
    fn a_splicing_pump_stops_when_its_run_ends_though_the_pipe_stays_open() {
        a_pump_stops_when_its_run_ends(false);
    }

    /// A tap that panics ends its pump with the panic, after the chunk it was given was
    /// captured, and the pump reads no more of the pipe.
    #[test]
    fn a_panicking_tap_ends_its_pump_with_the_panic_after_the_chunk_was_captured() {
        let tmp = tempfile::tempdir().unwrap();
        let (shared, stream) = shared_capture(tmp.path());
        let (read, write) = rustix::pipe::pipe().unwrap();
        let pipe = nonblocking_pipe(read).unwrap();
        let (_stop, stopped) = latch().unwrap();
        rustix::io::write(&write, b"first\n").unwrap();
        let mut calls = 0;
        let mut observer = |_: &[u8]| {
            calls += 1;
            std::panic::panic_any("the tap broke");
        };
        let activity = Activity::new(Instant::now());
        let panic = pump(
            &shared,
            stream,
            &pipe,
            &activity,
            Some(&mut observer),
            &stopped,
        )
        .expect_err("the tap's panic ends the pump");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the tap broke"));
        assert_eq!(calls, 1);
        // Written after the panic: left in the pipe, not captured.
        rustix::io::write(&write, b"second\n").unwrap();
        assert_eq!(rustix::io::ioctl_fionread(&pipe).unwrap(), 7);
        let rendered = finish_rendered(&shared);
        assert_eq!(rendered, "first\n", "the observed chunk was captured");
    }

    /// The stdin writer stops with its run too, when nothing reads the pipe.
    #[test]
    fn the_stdin_writer_stops_when_its_run_ends_though_nobody_reads() {
        let (read, write) = rustix::pipe::pipe().unwrap();
        let pipe = nonblocking_pipe(write).unwrap();
        let (stop, stopped) = latch().unwrap();
        let (ended, end) = mpsc::channel();
        std::thread::spawn(move || {
            // More than any pipe holds.
            let _ = ended.send(feed_stdin(pipe, &vec![b'x'; 8 << 20], &stopped).is_ok());
        });
        assert!(end.recv_timeout(Duration::from_millis(100)).is_err());
        drop(stop);
        assert_eq!(end.recv_timeout(Duration::from_secs(60)), Ok(true));
        drop(read);
    }

    fn env_of(cmd: &Command) -> Vec<(String, Option<String>)> {
        cmd.get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect()
    }

    #[test]
    fn every_known_sink_variable_is_removed_unless_opted_in_or_set_by_the_caller() {
        let removed = |name: &str| (name.to_owned(), None);
        let plain = env_of(&command(&RunOptions::new("true"), None));
        assert!(
            plain.contains(&removed("AGENTRUN_RESULT_SINK")),
            "{plain:?}"
        );
        assert!(
            plain.contains(&removed("AMPLIHACK_RESULT_SINK")),
            "{plain:?}"
        );

        let opted = RunOptions::new("true").sink_var("AMPLIHACK_RESULT_SINK");
        let env = env_of(&command(&opted, Some(Path::new("/sink"))));
        assert!(
            env.contains(&("AMPLIHACK_RESULT_SINK".to_owned(), Some("/sink".to_owned()))),
            "{env:?}"
        );
        assert!(env.contains(&removed("AGENTRUN_RESULT_SINK")), "{env:?}");

        // An explicit caller entry for another tool's variable is the caller's choice.
        let explicit = RunOptions::new("true").env("AMPLIHACK_RESULT_SINK", "/theirs");
        let env = env_of(&command(&explicit, None));
        assert!(
            env.contains(&(
                "AMPLIHACK_RESULT_SINK".to_owned(),
                Some("/theirs".to_owned())
            )),
            "{env:?}"
        );
    }
}
