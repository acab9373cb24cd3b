//! Progress notifications of a running call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;

use crate::render;

/// How often a run reports progress to a client that asked for it.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What a running call has shown so far, for progress messages: stdout bytes and lines, and
/// the latest progress line of an agent.
#[derive(Default)]
pub(crate) struct Watch {
    bytes: AtomicU64,
    lines: AtomicU64,
    last_line: Mutex<Option<String>>,
}

impl Watch {
    /// Counts a stdout chunk.
    pub(crate) fn add(&self, chunk: &[u8]) {
        self.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        let newlines = chunk.iter().filter(|&&b| b == b'\n').count();
        self.lines.fetch_add(newlines as u64, Ordering::Relaxed);
    }

    /// Notes an agent's latest progress line.
    pub(crate) fn progress_line(&self, line: &str) {
        // A progress line can quote a harness's event (a model name): bounded.
        *self.last_line.lock().unwrap_or_else(|e| e.into_inner()) = Some(render::clip(line, 1024));
    }

    fn message(&self, elapsed: Duration) -> String {
        let last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        match last.as_deref() {
            Some(line) => format!("running for {}s; latest: {line}", elapsed.as_secs()),
            None => format!(
                "running for {}s; stdout so far: {} lines, {} bytes",
                elapsed.as_secs(),
                self.lines.load(Ordering::Relaxed),
                self.bytes.load(Ordering::Relaxed)
            ),
        }
    }
}

/// Sends a progress notification every [`PROGRESS_EVERY`] while the call lasts, when the
/// client asked for progress (a `progressToken` in the request). Progress is the elapsed time
/// against the timeout; the message says what the call has shown so far. Never returns.
pub(crate) async fn report_progress(
    context: &RequestContext<RoleServer>,
    watch: &Watch,
    timeout: Duration,
) -> std::convert::Infallible {
    let Some(token) = context.meta.get_progress_token() else {
        return std::future::pending().await;
    };
    let start = Instant::now();
    let mut ticks =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        ticks.tick().await;
        let elapsed = start.elapsed();
        let mut param = ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64())
            .with_total(timeout.as_secs_f64());
        param.message = Some(watch.message(elapsed));
        // A client that went away cannot be told; the call goes on until it is stopped.
        let _ = context.peer.notify_progress(param).await;
    }
}
