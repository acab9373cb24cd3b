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
        // The driver replaces this with the opened file when it is a regular one.
        _ => Stdio::piped(),
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

/// How long a watchdog may leave its pipe full before it is taken for stuck and replaced.
const WATCHDOG_STUCK: Duration = Duration::from_secs(2);

/// Waits until one of `fds` is readable (or at its end, or in error) or `timeout` passed
/// (`None`: no limit), and says which are.
pub(crate) fn wait_any(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    poll_fds(fds, rustix::event::PollFlags::IN, timeout)
}

/// Waits until one of `fds` is ready for `events` (or at its end, or in error) or `timeout`
/// passed (`None`: no limit), and says which are. A signal ends a wait with a timeout early,
/// with none ready: the callers loop and track their own deadlines.
fn poll_fds(
    fds: &[BorrowedFd<'_>],
    events: rustix::event::PollFlags,
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    use rustix::event::{PollFd, Timespec, poll};
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, events))
        .collect();
    // A timeout too long for a timespec is as good as none.
    let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
    loop {
        match poll(&mut polled, timeout.as_ref()) {
            Ok(_) => return Ok(polled.iter().map(|p| !p.revents().is_empty()).collect()),
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
    write_stdin(&mut pipe, bytes, stop).map(drop)
}

/// Writes `bytes` to the child's stdin `pipe`; `false` when the child stopped reading or
/// `stop` fired before all were written.
fn write_stdin(pipe: &mut File, bytes: &[u8], stop: &LatchWatch) -> io::Result<bool> {
    use std::io::Write as _;
    let mut rest = bytes;
    while !rest.is_empty() {
        match pipe.write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !wait_ready(pipe, rustix::event::PollFlags::OUT, stop)? {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Passes what `source` (a FIFO, pipe or character device opened with `O_NONBLOCK`) sends on
/// to the child's stdin `pipe` as it comes, then closes the pipe at the source's end. Never
/// blocks the run: it waits on the source, the child's side of the pipe and `stop` at once,
/// and returns when the child stops reading or `stop` fires, even if no writer ever opened
/// the FIFO. (A FIFO opened without waiting reads as at its end until a writer opened it;
/// `poll` reports that end only after a writer came and went, so an empty read after
/// `poll` is the real end.)
pub(crate) fn pump_stdin(source: File, mut pipe: File, stop: &LatchWatch) -> io::Result<()> {
    use rustix::event::{PollFd, PollFlags, poll};
    use std::io::Read as _;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (source_ready, child_gone, stopped) = {
            let mut fds = [
                PollFd::new(&source, PollFlags::IN),
                // No events asked: POLLERR comes when the child's side is closed.
                PollFd::new(&pipe, PollFlags::empty()),
                PollFd::new(&*stop.0, PollFlags::IN),
            ];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            (
                !fds[0].revents().is_empty(),
                !fds[1].revents().is_empty(),
                !fds[2].revents().is_empty(),
            )
        };
        if stopped || child_gone {
            return Ok(());
        }
        if !source_ready {
            continue;
        }
        match (&source).read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                if !write_stdin(&mut pipe, &buf[..n], stop)? {
                    return Ok(());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
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
    /// The group exists (the signal, if any, was sent).
    Sent,
    /// The group has no process left (or there was no group to signal).
    NoGroup,
    /// Signal 0 still finds the group, but a scan of `/proc` saw no member that runs (only
    /// zombies, or none at all): it gets SIGKILL before it counts as empty, since the scan
    /// may have missed one ([`probe_group`]).
    OnlyZombies,
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

/// Looks whether process group `group` still has a process (signal 0), without signalling it.
/// With `scan`, a group in which `/proc` shows no member that runs is
/// [`Delivery::OnlyZombies`] (see [`has_live_member`]); the scan reads `/proc`, so callers
/// do it now and then, not on every probe. Only [`Delivery::NoGroup`] proves the group
/// empty: the scan can miss a live member, so its verdict must be followed by SIGKILL.
pub fn probe_group(group: Option<Pid>, scan: bool) -> Delivery {
    let Some(group) = group else {
        return Delivery::NoGroup;
    };
    match rustix::process::test_kill_process_group(group) {
        Err(rustix::io::Errno::SRCH) => Delivery::NoGroup,
        _ if scan && has_live_member(group) == Some(false) => Delivery::OnlyZombies,
        // EPERM and the like: a process is there, only not ours to signal.
        _ => Delivery::Sent,
    }
}

/// Whether process group `group` has a member that runs, from `/proc` (`None`: `/proc`
/// cannot be read, or is not this process's view of the system). Signal 0 counts zombies,
/// and an orphan's zombie stays in its group for as long as the reaper of orphans does not
/// reap it (forever when that is a container's first process that never waits for
/// strangers, such as the runner itself): no grace would end early for a group holding one.
/// A zombie runs no code, so it cleans up nothing; and it keeps its group's id taken, so no
/// other group can get it meanwhile.
///
/// `Some(false)` is no proof: a process hidden from us (a `/proc` mounted with `hidepid`)
/// is not seen, which is why the caller kills the group on it rather than trusting it.
fn has_live_member(group: Pid) -> Option<bool> {
    // A `/proc` of another PID namespace (a `unshare --pid` without its own mount) lists
    // other ids than the ones our signals use: no group would ever be found in it.
    let own = std::fs::read_link("/proc/self").ok()?;
    if !proc_is_ours(own.as_os_str(), std::process::id()) {
        return None;
    }
    let group = group.as_raw_pid();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // Gone since the listing, or not readable: not a member we can see.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if is_live_member(&stat, group, || {
            std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
        }) {
            return Some(true);
        }
    }
    Some(false)
}

/// Whether `/proc/self` (whose target is `link`) names this process (`pid`), i.e. the ids in
/// `/proc` are the ones our signals use.
fn proc_is_ours(link: &std::ffi::OsStr, pid: u32) -> bool {
    link.to_str().and_then(|l| l.parse::<u32>().ok()) == Some(pid)
}

/// Whether the process with `/proc/<pid>/stat` contents `stat` is a member of group `group`
/// that runs. A zombie state is not enough to rule it out: the state is its main thread's,
/// and a main thread that called `pthread_exit` is a zombie while the other threads run; so
/// for a zombie member, `status` (its `/proc/<pid>/status`, read only then) decides: more
/// than one thread means one still runs.
fn is_live_member(stat: &str, group: i32, status: impl FnOnce() -> Option<String>) -> bool {
    // After the command in parentheses (which may hold anything): state, ppid, pgrp.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_ascii_whitespace();
    let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    if pgrp.parse() != Ok(group) {
        return false;
    }
    if !matches!(state, "Z" | "X" | "x") {
        return true;
    }
    // Unreadable: it is gone or hidden; the caller's SIGKILL covers what we cannot see.
    status().is_some_and(|status| threads_of(&status).is_some_and(|n| n > 1))
}

/// The `Threads:` count of a `/proc/<pid>/status`.
fn threads_of(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
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

/// The watchdog's script. It reads one line per request from the runner: `guard ENTRY` adds
/// a group to those it guards, `release ENTRY` removes it (the run ended normally), `stop
/// ENTRY` removes it and stops it now (a guard dropped without standing down). An entry is
/// `ID:GROUP:GRACE:SIGNALS`, the signals' names separated by commas; the runner makes every
/// entry, so nothing of the caller's reaches the script text. On end of file (the runner
/// died) it stops every group still guarded, all at once, each the way a timeout would: each
/// of its stop signals with its grace after it, then SIGKILL. A stop request runs in a
/// grandchild that init (or the nearest subreaper) reaps, so the script never waits for it
/// and keeps no zombie; the list holds only the groups of runs in flight. A grace is waited
/// in tenths of a second and cut short once the group is gone: its id may then be reused,
/// and a later signal must not reach another group.
const WATCHDOG_SCRIPT: &str = r#"stop() {
    IFS=:
    set -- $1
    group=$2 grace=$3
    ms=${grace#*.}
    ms=${ms#0}
    ms=${ms#0}
    IFS=,
    for sig in $4; do
        kill -s "$sig" -- "-$group" 2>/dev/null || exit 0
        tenths=$(( ${grace%.*} * 10 + ms / 100 ))
        while [ "$tenths" -gt 0 ]; do
            kill -s 0 -- "-$group" 2>/dev/null || exit 0
            sleep 0.1
            tenths=$(( tenths - 1 ))
        done
    done
    kill -s KILL -- "-$group" 2>/dev/null
    exit 0
}
guarded=' '
while read -r verb entry; do
    case $guarded in
    *" $entry "*) guarded="${guarded%% $entry *} ${guarded#* $entry }" ;;
    esac
    case $verb in
    guard) guarded="$guarded$entry " ;;
    stop) ( (stop "$entry") & ) ;;
    esac
done
for entry in $guarded; do
    (stop "$entry") &
done
wait
"#;

/// The process-wide watchdog: a tiny `/bin/sh` process in a group of its own, holding the
/// read end of a pipe whose write end only this process has.
#[derive(Debug)]
struct SharedWatchdog {
    /// The pipe's write end: close-on-exec, so no child inherits it (the watchdog would never
    /// see end of file), and non-blocking, so a watchdog that stopped reading cannot hang a
    /// run: a pipe it leaves full for [`WATCHDOG_STUCK`] counts as a stuck watchdog.
    alarm: File,
    process: std::process::Child,
    /// Readable once the watchdog exited (a pidfd; `None` before Linux 5.3), for the monitor.
    exit: Option<Arc<OwnedFd>>,
    /// Tells this watchdog from the one that replaced it.
    generation: u64,
}

/// What every [`Watchdog`] of this process shares: the watchdog process (started with the
/// first guard, replaced when found dead) and the entries of the guards alive, kept so that a
/// replacement is told every group still guarded.
#[derive(Debug)]
struct Guarded {
    watchdog: Option<SharedWatchdog>,
    entries: std::collections::BTreeMap<u64, String>,
    next_id: u64,
    generations: u64,
    /// Whether the monitor thread runs.
    monitored: bool,
}

static SHARED: Mutex<Guarded> = Mutex::new(Guarded {
    watchdog: None,
    entries: std::collections::BTreeMap::new(),
    next_id: 0,
    generations: 0,
    monitored: false,
});

/// Notified when a watchdog starts, for the monitor waiting for one.
static STARTED: std::sync::Condvar = std::sync::Condvar::new();

/// How often the monitor looks at the watchdog when the kernel gives no pidfd to wait on.
const MONITOR_POLL: Duration = Duration::from_millis(100);

impl SharedWatchdog {
    fn spawn(generation: u64) -> io::Result<Self> {
        // Close-on-exec on both ends: no other child (of a run or a concurrent spawn) may
        // inherit the write end; the read end becomes the watchdog's stdin, which the spawn
        // makes inheritable for it alone.
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
        fcntl_setfl(&write, fcntl_getfl(&write)? | OFlags::NONBLOCK)?;
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("agentrun-watchdog")
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Not in the terminal's foreground group: a Ctrl-C meant for the runner must not
            // end the watchdog.
            .process_group(0);
        let process = command.spawn()?;
        // The command holds this process's copy of the read end: closed now, or a watchdog
        // that died would leave writes succeeding into a pipe nobody reads.
        drop(command);
        Ok(Self {
            alarm: File::from(write),
            exit: exit_watch(Some(process.id())).map(Arc::new),
            process,
            generation,
        })
    }

    /// Writes one request. Lines are far below the pipe's atomic write size, so a line is
    /// written whole or not at all. A full pipe is waited on, up to [`WATCHDOG_STUCK`]: a
    /// watchdog just started, handed every entry in flight, or one slow to be scheduled is
    /// behind, not stuck, and replacing it would only replay the same lines into a new pipe.
    fn send(&mut self, verb: &str, entry: &str) -> io::Result<()> {
        use std::io::Write as _;
        if self.process.try_wait()?.is_some() {
            return Err(io::Error::other("the watchdog exited"));
        }
        let line = format!("{verb} {entry}\n");
        let deadline = Instant::now() + WATCHDOG_STUCK;
        loop {
            match self.alarm.write(line.as_bytes()) {
                Ok(n) if n == line.len() => return Ok(()),
                Ok(_) => return Err(io::Error::other("the watchdog's pipe took part of a line")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::other("the watchdog reads nothing: stuck"));
                    }
                    // Ready or not, the write is retried and the deadline checked again.
                    poll_fds(
                        &[self.alarm.as_fd()],
                        rustix::event::PollFlags::OUT,
                        Some(left),
                    )?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends a watchdog found dead or stuck: killed before its pipe is closed, since a live
    /// watchdog reading end of file would stop every group it guards, runs still in flight.
    fn end(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Guarded {
    /// Replaces the watchdog (if any) with a new one told every entry still guarded.
    fn restart(&mut self) -> io::Result<()> {
        if let Some(old) = self.watchdog.take() {
            old.end();
        }
        self.generations += 1;
        let mut watchdog = SharedWatchdog::spawn(self.generations)?;
        for entry in self.entries.values() {
            if let Err(e) = watchdog.send("guard", entry) {
                watchdog.end();
                return Err(e);
            }
        }
        self.watchdog = Some(watchdog);
        if !self.monitored {
            // Without the thread a dead watchdog is still noticed, at the next request.
            self.monitored = std::thread::Builder::new()
                .name("agentrun-watchdog".into())
                .spawn(monitor)
                .is_ok();
        }
        STARTED.notify_all();
        Ok(())
    }

    /// Replaces a watchdog found dead or stuck, or with nothing left to guard only ends it
    /// (the next guard starts one).
    fn replace_dead(&mut self) -> io::Result<()> {
        if self.entries.is_empty() {
            if let Some(old) = self.watchdog.take() {
                old.end();
            }
            Ok(())
        } else {
            self.restart()
        }
    }

    /// Sends a request, replacing the watchdog if it is not running or does not take it.
    /// `Err` when no watchdog runs.
    fn send(&mut self, verb: &str, entry: &str) -> io::Result<()> {
        if let Some(watchdog) = self.watchdog.as_mut()
            && watchdog.send(verb, entry).is_ok()
        {
            return Ok(());
        }
        if verb == "release" && self.entries.is_empty() {
            self.replace_dead()?;
            return Ok(());
        }
        // A guard's entry is among those the new watchdog is told.
        self.restart()?;
        match self.watchdog.as_mut() {
            Some(watchdog) if verb != "guard" => watchdog.send(verb, entry),
            _ => Ok(()),
        }
    }
}

/// Waits for each watchdog to exit, and replaces one that did (someone killed it) at once,
/// telling the new one every group still guarded: the runs in flight are unguarded only for
/// the moment this takes. A request written to a watchdog that was dying is lost with it,
/// but its entry is among those the replacement is told.
fn monitor() {
    loop {
        let (exit, generation) = {
            let mut shared = shared();
            loop {
                if let Some(watchdog) = &shared.watchdog {
                    break (watchdog.exit.clone(), watchdog.generation);
                }
                shared = STARTED.wait(shared).unwrap_or_else(|p| p.into_inner());
            }
        };
        let waited = match &exit {
            Some(exit) => wait_any(&[exit.as_fd()], None).is_ok(),
            None => false,
        };
        if !waited {
            std::thread::sleep(MONITOR_POLL);
        }
        let mut shared = shared();
        let Some(watchdog) = shared.watchdog.as_mut() else {
            continue;
        };
        if watchdog.generation != generation || matches!(watchdog.process.try_wait(), Ok(None)) {
            continue;
        }
        // On failure no watchdog runs; the next guard tries again.
        let _ = shared.replace_dead();
    }
}

/// The shared state; a poisoned lock is taken as is (every step leaves it consistent).
fn shared() -> std::sync::MutexGuard<'static, Guarded> {
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops the child's process group if the runner dies without ending the run (SIGKILL, a
/// crash). One watchdog per process guards every run in flight: a tiny `/bin/sh` process in
/// a group of its own, started with the first run, holding the read end of a pipe whose write
/// end only the runner has. Each run tells it its group, stop signals and grace when it
/// starts and tells it again when it ends. The kernel closes the write end when the runner
/// dies, for whatever reason; the watchdog then reads end of file and stops every group still
/// guarded, in parallel. A parent-death signal would reach only the child, not the processes
/// it started, and is tied to the thread that spawned it. A watchdog found dead (someone
/// killed it) at a run's start or end is replaced, and the new one is told every group still
/// guarded.
///
/// Public for embedders that spawn processes of their own (and for measuring its cost).
/// Dropping it without [`Watchdog::stand_down`] stops the group as the runner's death would.
#[derive(Debug)]
#[must_use = "dropping a watchdog without stand_down stops the group it guards"]
pub struct Watchdog {
    id: u64,
}

impl Watchdog {
    /// Guards `group`, which on the runner's death gets each of `signals` with `grace` after
    /// it, then SIGKILL. Best effort: without `/bin/sh` (or on any spawn error) the run goes
    /// on unguarded, as it would have before (`None`).
    pub fn start(group: Option<Pid>, signals: &[StopSignal], grace: Duration) -> Option<Self> {
        let group = group?;
        let names: Vec<&str> = signals
            .iter()
            .map(|s| match s {
                StopSignal::Interrupt => "INT",
                StopSignal::Terminate => "TERM",
            })
            .collect();
        let mut shared = shared();
        let id = shared.next_id;
        shared.next_id += 1;
        let entry = format!(
            "{id}:{}:{}.{:03}:{}",
            group.as_raw_pid(),
            grace.as_secs(),
            grace.subsec_millis(),
            names.join(",")
        );
        shared.entries.insert(id, entry.clone());
        if shared.send("guard", &entry).is_err() {
            shared.entries.remove(&id);
            return None;
        }
        Some(Self { id })
    }

    /// The run is over: the watchdog forgets the group without signalling it.
    pub fn stand_down(self) {
        let id = self.id;
        std::mem::forget(self);
        Self::end(id, "release");
    }

    fn end(id: u64, verb: &str) {
        let mut shared = shared();
        if let Some(entry) = shared.entries.remove(&id) {
            // A release that finds no watchdog leaves nothing to do for this group; a stop
            // request is carried out by a restarted one.
            let _ = shared.send(verb, &entry);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        Self::end(self.id, "stop");
    }
}

/// The shared watchdog's process id, started if none runs (for tests that kill it).
#[cfg(test)]
fn shared_watchdog_pid() -> Option<u32> {
    let mut shared = shared();
    if shared.watchdog.is_none() {
        shared.restart().ok()?;
    }
    shared.watchdog.as_ref().map(|w| w.process.id())
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

    /// A `/proc/<pid>/stat` line of a process in group `pgrp` with state `state`, whose
    /// command holds parentheses and spaces (as any command may).
    fn stat(state: &str, pgrp: i32) -> String {
        format!("4242 (a) b (c) {state} 1 {pgrp} {pgrp} 0 -1 4194560 95 0 0 0 0 0 0 0 20 0 1 0\n")
    }

    /// A `/proc/<pid>/status` with this state and thread count.
    fn status(state: &str, threads: u32) -> Option<String> {
        Some(format!(
            "Name:\tz\nState:\t{state}\nTgid:\t4242\nPid:\t4242\nPPid:\t1\n\
             Threads:\t{threads}\nSigQ:\t0/63437\n"
        ))
    }

    #[test]
    fn a_zombie_leader_with_a_running_thread_is_a_live_member() {
        // Running, sleeping, stopped members run (or will); the status is not even read.
        for state in ["R", "S", "D", "T", "t", "I"] {
            assert!(
                is_live_member(&stat(state, 77), 77, || unreachable!()),
                "{state}"
            );
        }
        // The main thread called pthread_exit: a zombie leader, but another thread runs.
        assert!(is_live_member(&stat("Z", 77), 77, || status(
            "Z (zombie)",
            2
        )));
        // A true zombie: its last thread is gone.
        assert!(!is_live_member(&stat("Z", 77), 77, || status(
            "Z (zombie)",
            1
        )));
        assert!(!is_live_member(&stat("X", 77), 77, || status(
            "X (dead)", 1
        )));
        // A zombie whose status is gone or unreadable: not seen running (the caller kills
        // the group on this verdict, so a missed thread dies anyway).
        assert!(!is_live_member(&stat("Z", 77), 77, || None));
        assert!(!is_live_member(&stat("Z", 77), 77, || Some(
            "Name:\tz\n".into()
        )));
        // Another group's process, or an unreadable line: no member.
        assert!(!is_live_member(&stat("R", 78), 77, || unreachable!()));
        assert!(!is_live_member("4242 (no end", 77, || unreachable!()));
        assert!(!is_live_member("4242 (a) R", 77, || unreachable!()));
        assert!(!is_live_member("", 77, || unreachable!()));
    }

    #[test]
    fn proc_is_trusted_only_when_it_shows_this_process() {
        use std::ffi::OsStr;
        assert!(proc_is_ours(OsStr::new("1234"), 1234));
        // A /proc of the parent PID namespace: /proc/self is our id there, not ours.
        assert!(!proc_is_ours(OsStr::new("81234"), 1));
        assert!(!proc_is_ours(OsStr::new("self"), 1234));
        assert!(!proc_is_ours(OsStr::new(""), 1234));
        // The real /proc of this test process.
        let own = std::fs::read_link("/proc/self").unwrap();
        assert!(proc_is_ours(own.as_os_str(), std::process::id()));
    }

    /// A process `sleep 300` in a group of its own, and that group.
    fn sleeper() -> (std::process::Child, Option<Pid>) {
        let child = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = group_of(Some(child.id()));
        (child, group)
    }

    /// Whether `child` ended within half a minute (reaped if so), long before its sleep.
    fn ends(child: &mut std::process::Child) -> bool {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn guard(group: Option<Pid>) -> Watchdog {
        Watchdog::start(group, &[StopSignal::Terminate], Duration::from_secs(1)).unwrap()
    }

    /// What the runner's death does to the shared watchdog: its pipe's write end closed.
    /// Returns once the watchdog exited, that is once every stop it started ended.
    fn close_as_a_dying_runner_would() {
        let watchdog = shared().watchdog.take();
        if let Some(SharedWatchdog {
            alarm, mut process, ..
        }) = watchdog
        {
            drop(alarm);
            process.wait().unwrap();
        }
    }

    /// A group that ends on its first stop signal gets no other: the grace is cut short once
    /// the group is gone (its id may be reused), so the script ends long before the grace.
    #[test]
    fn a_stopped_group_ends_the_grace_and_gets_no_more_signals() {
        use std::io::Write as _;
        let (mut sleeper, group) = sleeper();
        let mut script = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let entry = format!("1:{}:300.000:TERM", group.unwrap().as_raw_pid());
        let mut stdin = script.stdin.take().unwrap();
        writeln!(stdin, "guard {entry}").unwrap();
        drop(stdin); // end of file: the script stops every group it guards
        assert!(ends(&mut sleeper), "the group got its stop signal");
        // Hang guard only: before, the script slept the whole 300 s grace.
        assert!(ends(&mut script), "the grace ended with the group");
    }

    /// More requests than the pipe holds, before the new shell read any (a replacement told
    /// every run in flight): the writer waits for the watchdog instead of taking it for stuck.
    #[test]
    fn a_watchdog_behind_on_a_full_pipe_is_waited_for_not_replaced() {
        let mut watchdog = SharedWatchdog::spawn(u64::MAX).unwrap();
        // The smallest pipe the kernel gives: one page, about a hundred lines.
        rustix::pipe::fcntl_setpipe_size(&watchdog.alarm, 4096).unwrap();
        // Group ids no process has: the watchdog is killed below, never told end of file.
        for i in 0..2000 {
            let entry = format!("{i}:2147480000:0.000:TERM");
            watchdog.send("guard", &entry).unwrap();
        }
        assert!(
            watchdog.process.try_wait().unwrap().is_none(),
            "still running"
        );
        watchdog.end();
    }

    /// One watchdog serves every guard of the process. Killed while runs are in flight, it
    /// is replaced at the next request and told every group still guarded: at end of file
    /// the new one stops both the group guarded before the kill and the one guarded after,
    /// each with its own signals (the second ignores SIGTERM and needs the SIGKILL after its
    /// grace), and leaves alone a group stood down. A guard dropped without standing down
    /// stops its group at once.
    #[test]
    fn a_killed_watchdog_is_replaced_and_guards_the_groups_in_flight() {
        let (mut before, before_group) = sleeper();
        let before_guard = guard(before_group);
        let first = shared_watchdog_pid().unwrap();
        let (mut released, released_group) = sleeper();
        let released_guard = guard(released_group);
        assert_eq!(shared_watchdog_pid(), Some(first), "one watchdog for both");
        rustix::process::kill_process(Pid::from_raw(first as i32).unwrap(), Signal::KILL).unwrap();
        let mut after = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 300"])
            .process_group(0)
            .spawn()
            .unwrap();
        let after_guard = guard(group_of(Some(after.id())));
        // The guard may have written to the watchdog while it was dying, before anyone could
        // tell: the monitor replaces it once it is gone.
        let until = Instant::now() + Duration::from_secs(60);
        while shared_watchdog_pid() == Some(first) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_ne!(
            shared_watchdog_pid(),
            Some(first),
            "the killed watchdog was replaced"
        );
        released_guard.stand_down();
        close_as_a_dying_runner_would();
        assert!(
            ends(&mut before),
            "the group guarded before the kill was stopped"
        );
        assert!(
            ends(&mut after),
            "the group guarded after the kill was stopped"
        );
        assert!(
            released.try_wait().unwrap().is_none(),
            "a group stood down is left alone"
        );
        released.kill().unwrap();
        released.wait().unwrap();
        // Their groups are gone: standing down only tells a new watchdog to forget them.
        before_guard.stand_down();
        after_guard.stand_down();
        let (mut dropped, dropped_group) = sleeper();
        drop(guard(dropped_group));
        assert!(ends(&mut dropped), "a dropped guard stopped its group");
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
