//! The child's pipes: non-blocking ends, the run's stop latch, waiting on descriptors, and
//! the stdin writers (bytes, or a FIFO passed on as it comes).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// Linux pipes default to 64 KiB; a bigger pipe lets a fast child run ahead of the capture.
pub(crate) const PIPE_SIZE: usize = 1 << 20;

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
    poll_fds(fds, rustix::event::PollFlags::IN, timeout)
}

/// Waits until one of `fds` is ready for `events` (or at its end, or in error) or `timeout`
/// passed (`None`: no limit), and says which are. A signal ends a wait with a timeout early,
/// with none ready: the callers loop and track their own deadlines.
pub(crate) fn poll_fds(
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
pub(crate) fn wait_ready(
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::mpsc;

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
}
