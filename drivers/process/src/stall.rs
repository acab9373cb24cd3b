//! The stall watchdog's driver side: the stdout tap notes when the last event line arrived
//! (one clock read per chunk that completed a line, never a wake-up), and a future on the
//! runtime's clock wakes at the core [`StallWatch`]'s deadline, feeds it that note and, when the
//! turn is stalled, asks the run to stop through the run's ordinary stop requests (the
//! harness's stop signals, grace, SIGKILL: the run lifecycle's escalation).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use agentrun_core::stall::{EVENT_HEAD_BYTES, Stall, StallWatch};
use futures_lite::Stream;

use crate::driver::Runtime;

/// The last event line the tap saw: when it arrived and its first bytes.
#[derive(Debug, Default)]
pub(crate) struct LastLine {
    pub(crate) at: Option<Instant>,
    head: Vec<u8>,
    /// A line completed in the chunk being fed (its instant is read once, after the chunk).
    pending: bool,
}

impl LastLine {
    /// A non-blank line was fed: keep its head (a copy of at most [`EVENT_HEAD_BYTES`]).
    pub(crate) fn line(&mut self, bytes: &[u8]) {
        if bytes.first().is_none_or(|b| b.is_ascii_whitespace()) && bytes.trim_ascii().is_empty() {
            return;
        }
        self.head.clear();
        self.head
            .extend_from_slice(&bytes[..bytes.len().min(EVENT_HEAD_BYTES)]);
        self.pending = true;
    }

    /// The chunk was fed: stamp the lines it completed with `now` (read only then).
    pub(crate) fn chunk_done(&mut self, now: impl FnOnce() -> Instant) {
        if self.pending {
            self.pending = false;
            self.at = Some(now());
        }
    }
}

/// Reads the tap's last line (a lock of the tap's state: the tap holds it per chunk).
pub(crate) type ReadLast = Arc<dyn Fn(&mut StallWatch) + Send + Sync>;

/// Feeds `last` into `watch`.
pub(crate) fn feed(watch: &mut StallWatch, last: &LastLine) {
    if let Some(at) = last.at {
        watch.handle_line(at, &last.head);
    }
}

/// Resolves when the turn is stalled, with the stall (also left in `found`); never when
/// `timeout` is `None`.
pub(crate) fn watch<R: Runtime>(
    rt: R,
    timeout: Option<Duration>,
    read_last: ReadLast,
    found: Arc<Mutex<Option<Stall>>>,
) -> impl Future<Output = ()> + Send + 'static {
    let mut watch = StallWatch::new(timeout, rt.now());
    async move {
        loop {
            let Some(at) = watch.poll_timeout() else {
                return std::future::pending().await;
            };
            rt.sleep_until(at).await;
            read_last(&mut watch);
            if let Some(stall) = watch.handle_timeout(rt.now()) {
                *found.lock().unwrap_or_else(|p| p.into_inner()) = Some(stall);
                return;
            }
        }
    }
}

/// The caller's stop requests, and one more when `stall` resolves: what the run is cancelled
/// on. Ends once both have ended (a stall fires once).
pub(crate) struct StopOrStall<'a> {
    pub(crate) user: Option<Pin<Box<dyn Stream<Item = ()> + Send + 'a>>>,
    pub(crate) stall: Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>,
}

impl Stream for StopOrStall<'_> {
    type Item = ();

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<()>> {
        if let Some(user) = self.user.as_mut() {
            match user.as_mut().poll_next(cx) {
                Poll::Ready(Some(())) => return Poll::Ready(Some(())),
                Poll::Ready(None) => self.user = None,
                Poll::Pending => {}
            }
        }
        if let Some(stall) = self.stall.as_mut()
            && stall.as_mut().poll(cx).is_ready()
        {
            self.stall = None;
            return Poll::Ready(Some(()));
        }
        if self.user.is_none() && self.stall.is_none() {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_non_blank_lines_are_events_and_each_chunk_reads_the_clock_once() {
        let mut last = LastLine::default();
        let mut reads = 0;
        last.line(b"   ");
        last.chunk_done(|| {
            reads += 1;
            Instant::now()
        });
        assert_eq!((last.at, reads), (None, 0));
        for _ in 0..100 {
            last.line(br#"{"type":"assistant"}"#);
        }
        last.chunk_done(|| {
            reads += 1;
            Instant::now()
        });
        assert_eq!(reads, 1);
        assert!(last.at.is_some());
        let big = vec![b'x'; 10_000];
        last.line(&big);
        assert_eq!(last.head.len(), EVENT_HEAD_BYTES);
    }
}
