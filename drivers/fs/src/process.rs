//! Blocking process plumbing shared by every process driver: building the child command from
//! [`RunOptions`], and pumping a pipe into a capture session.
//!
//! The async drivers only spawn the command with their runtime, run [`pump`] on their blocking
//! pool for each captured pipe, and wait; nothing here depends on a runtime.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::CaptureSession;
use agentrun_core::process::{RunOptions, StdinMode};
use agentrun_core::stream::{Channel, OutputDeclaration, StreamIndex};

/// Pipe reads go straight into the capture file; larger reads mean fewer wakeups and syscalls.
const READ_BUF: usize = 256 * 1024;

/// Linux pipes default to 64 KiB; a bigger pipe lets a fast child run ahead of the capture.
const PIPE_SIZE: usize = 1 << 20;

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
/// directory, and its own process group.
pub fn command(options: &RunOptions) -> Command {
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

/// Copies `pipe` into stream `stream` of the session until end of file. Backpressure, not
/// dropping: the child blocks on a full pipe while a chunk is being written.
pub fn pump(session: &SharedSession, stream: StreamIndex, mut pipe: File) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut guard = session.lock().unwrap_or_else(|p| p.into_inner());
        let Some(session) = guard.as_mut() else {
            return Ok(());
        };
        // A write error is recorded in the session (the output becomes incomplete); keep
        // draining the pipe so the child is not blocked forever on a full pipe.
        let _ = session.write(stream, &buf[..n]);
    }
}
