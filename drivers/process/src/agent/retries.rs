//! A turn run again after each rate limit or overload, as the retry machine allows.

use super::*;

/// Runs the turn, and again after each rate limit or overload the retry machine allows:
/// every run gets the same progress callback and stop requests; a stop request during a wait
/// ends the turn with the failed run.
pub(super) async fn run_with_retries<R: Runtime>(
    runner: &Runner<R>,
    mut options: AgentOptions,
    progress: Option<Progress>,
    stop: Option<StopInput<'_>>,
    mut on_retry_wait: Option<RetryNotice>,
    on_ended: Option<EndedHook>,
) -> Result<AgentRun, AgentError> {
    let progress = progress.map(|p| Arc::new(Mutex::new(p)));
    let stop = stop.map(|s| Arc::new(Mutex::new(s)));
    let stop_stream = || {
        stop.clone().map(|shared| {
            Box::pin(futures_lite::stream::poll_fn(move |cx| {
                let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
                match s.as_mut().poll_next(cx) {
                    // An ended stop stream stops nothing more.
                    std::task::Poll::Ready(None) => std::task::Poll::Pending,
                    other => other,
                }
            })) as StopInput<'_>
        })
    };
    let mut retry = Retry::new(options.retry, random_seed());
    loop {
        let each = progress.clone().map(|shared| {
            Box::new(move |line: &str| (shared.lock().unwrap_or_else(|p| p.into_inner()))(line))
                as Progress
        });
        let mut run = run_turn(
            runner,
            options.clone(),
            each,
            stop_stream(),
            on_ended.clone(),
        )
        .await?;
        run.retries = retry.retries();
        let Some(completion) = &run.completion else {
            return Ok(run);
        };
        if completion.outcome.status == OutcomeStatus::Succeeded {
            return Ok(run);
        }
        let outcome = &completion.outcome;
        let now = std::time::SystemTime::now();
        if retry
            .handle_failure(now, outcome.failure_kind, outcome.retry_after)
            .is_err()
        {
            return Ok(run);
        }
        loop {
            match retry.poll_event() {
                Some(RetryEvent::Wait(wait)) => {
                    if let Some(notice) = &mut on_retry_wait {
                        notice(&wait);
                    }
                    let remaining = wait
                        .until()
                        .duration_since(std::time::SystemTime::now())
                        .unwrap_or(Duration::ZERO);
                    let sleep = runner.runtime.sleep_until(runner.runtime.now() + remaining);
                    if wait_unless_stopped(sleep, stop_stream()).await {
                        return Ok(run);
                    }
                    // Woken: a retry, or the rest of the wait.
                    let _ = retry.handle_timeout(std::time::SystemTime::now());
                }
                Some(RetryEvent::Retry { .. }) => break,
                _ => return Ok(run),
            }
        }
        // The retry continues the session the failed run reported, when the harness resumes.
        if let Some(id) = &completion.outcome.session_id
            && options.harness.resumes_sessions()
        {
            options = options.resume(id.clone());
        }
    }
}

/// A random value for the backoff's jitter, so that runs limited together do not all come
/// back at once (std's per-process random hash keys; no generator needed).
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Sleeps out `sleep` unless a stop request comes first; whether one came.
pub(crate) async fn wait_unless_stopped(
    sleep: impl Future<Output = ()>,
    stop: Option<impl Stream<Item = ()>>,
) -> bool {
    let Some(stop) = stop else {
        sleep.await;
        return false;
    };
    let mut stop = std::pin::pin!(stop);
    futures_lite::future::or(
        async {
            sleep.await;
            false
        },
        async {
            futures_lite::StreamExt::next(&mut stop).await;
            true
        },
    )
    .await
}
