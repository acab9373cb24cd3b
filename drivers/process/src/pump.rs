//! The pumps: each copies one child pipe into its stream of the run's capture, recording
//! activity for the idle timeout and handing chunks to a live tap.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrun_core::stream::StreamIndex;
use agentrun_fs::CaptureSession;

use crate::os::{LatchWatch, PIPE_SIZE, wait_ready};

/// Pipe reads go straight into the capture file; larger reads mean fewer wakeups and syscalls.
const READ_BUF: usize = 256 * 1024;

/// The session shared by the pumps of one run; `None` once the run has finalized it.
pub(crate) type SharedSession = Arc<Mutex<Option<CaptureSession>>>;

/// A monotonic clock: the runtime's ([`Runtime::now`](crate::Runtime::now)), so that output
/// times and the run's other instants are on one clock (a paused tokio clock included).
pub(crate) type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// When output last arrived on any stream of a run (for the idle timeout). The pumps record
/// it without waking the driver; the driver reports it to the run lifecycle when it wakes.
pub(crate) struct Activity {
    origin: Instant,
    /// Nanoseconds after `origin` of the last output.
    last: AtomicU64,
    clock: Clock,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity")
            .field("origin", &self.origin)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Activity {
    /// Activity from `origin` on, timed with the thread's clock (until the spawn, which
    /// replaces it with one on the runtime's clock, [`Activity::on_clock`]).
    pub(crate) fn new(origin: Instant) -> Self {
        Self::on_clock(origin, Arc::new(Instant::now))
    }

    /// Activity from `origin` on, timed with `clock` (on which `origin` was read).
    pub(crate) fn on_clock(origin: Instant, clock: Clock) -> Self {
        Self {
            origin,
            last: AtomicU64::new(0),
            clock,
        }
    }

    /// The time on this activity's clock.
    pub(crate) fn now(&self) -> Instant {
        (self.clock)()
    }

    /// Records output now.
    fn touch(&self) {
        let since = self.now().saturating_duration_since(self.origin);
        let now = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
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
    /// The run finished (the session was finalized, or its stop [`Latch`](crate::os::Latch) tripped) while the
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

/// Copies `pipe` (non-blocking, see [`nonblocking_pipe`](crate::os::nonblocking_pipe)) into stream `stream` of the session
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::os::{latch, nonblocking_pipe};
    use agentrun_core::limits::PreviewLimits;
    use agentrun_core::stream::{OutputChannel, OutputDeclaration};
    use std::path::Path;
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
}
