//! The OS layer: the child command, its process group and signals, its pipes, and `PATH`
//! lookup. Blocking code; nothing here depends on an async runtime.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
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

/// Turns a (possibly non-blocking) pipe end into a blocking file for [`pump`].
pub fn blocking_pipe(fd: OwnedFd) -> io::Result<File> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(&fd)?;
    fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    // Best effort: a smaller pipe only costs throughput.
    let _ = rustix::pipe::fcntl_setpipe_size(&fd, PIPE_SIZE);
    Ok(File::from(fd))
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

/// Copies `pipe` into stream `stream` of the session until end of file, recording activity
/// and handing each chunk to `observer` right after it was written to the capture (the
/// session lock is released first). Backpressure, not dropping: the child blocks on a full
/// pipe while a chunk is written or observed. Ends early (quietly) once the session was
/// finalized by a stop or a cancellation.
pub(crate) fn pump(
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
#[derive(Debug)]
pub(crate) struct Watchdog {
    alarm: File,
    process: std::process::Child,
}

impl Watchdog {
    /// Starts the watchdog of `group`. Best effort: without `/bin/sh` (or on any spawn error)
    /// the run goes on unguarded, as it would have before.
    pub(crate) fn start(
        group: Option<Pid>,
        signals: &[StopSignal],
        grace: Duration,
    ) -> Option<Self> {
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
    pub(crate) fn stand_down(mut self) {
        use std::io::Write as _;
        let _ = self.alarm.write_all(b"done\n");
        drop(self.alarm);
        let _ = self.process.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
