//! The driver on tokio's paused clock: a run's timeout and its escalation (the stop signal,
//! the grace after it, SIGKILL) happen in virtual time, moved on by the test, while the child
//! is a real process. An hour's timeout and an hour's grace take no hour.

use std::future::{Future, IntoFuture};
use std::pin::pin;
use std::time::Duration;

use agentrun_tokio::{Exit, ProcessResult, RunError, RunOptions, RunOutcome, Runner};
use tokio::sync::mpsc::UnboundedReceiver;

const HOUR: Duration = Duration::from_secs(3600);

/// What the child wrote so far, and the channel its live tap feeds.
struct Output {
    seen: String,
    chunks: UnboundedReceiver<Vec<u8>>,
}

impl Output {
    /// Waits until the output holds `marker` after byte `from`; the run must not end first.
    async fn wait_for<F: Future>(
        &mut self,
        run: &mut std::pin::Pin<&mut F>,
        marker: &str,
        from: usize,
    ) where
        F::Output: std::fmt::Debug,
    {
        while !self.seen[from..].contains(marker) {
            tokio::select! {
                chunk = self.chunks.recv() => {
                    let chunk = chunk.expect("the tap lives as long as the run");
                    self.seen.push_str(&String::from_utf8_lossy(&chunk));
                }
                ended = run.as_mut() => {
                    panic!("the run ended before {marker:?} (output {:?}): {ended:?}", self.seen)
                }
            }
        }
    }
}

/// The run, driven on a current-thread runtime whose clock starts paused. The pumps are
/// blocking jobs, which keep tokio from moving a paused clock on by itself while they run:
/// every step of virtual time is the test's own `advance`.
fn run_on_a_paused_clock() -> (Result<ProcessResult, RunError>, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let tmp = tempfile::tempdir().unwrap();
        let runner = Runner::new(agentrun_fs::Store::open(tmp.path().join("store")).unwrap());
        // The shell survives SIGTERM (its trap says so and it goes on), so only SIGKILL after
        // the grace ends it; each `alive` shows it still runs.
        let script = "trap 'echo got-term' TERM; echo started; \
                      while :; do sleep 0.05; echo alive; done";
        let options = RunOptions::new("sh")
            .args(["-c", script])
            .timeout(HOUR)
            .kill_grace(HOUR);
        let (tap, chunks) = tokio::sync::mpsc::unbounded_channel();
        let run = runner
            .run(options)
            .observe_stdout(move |chunk| {
                let _ = tap.send(chunk.to_vec());
            })
            .into_future();
        let mut run = pin!(run);
        let mut output = Output {
            seen: String::new(),
            chunks,
        };
        output.wait_for(&mut run, "started", 0).await;
        // Past the deadline: the stop signal, which the shell traps.
        tokio::time::advance(HOUR + Duration::from_secs(1)).await;
        output.wait_for(&mut run, "got-term", 0).await;
        // Half the grace: the shell is not killed yet and goes on writing.
        tokio::time::advance(HOUR / 2).await;
        let after_term = output.seen.find("got-term").unwrap() + "got-term".len();
        output.wait_for(&mut run, "alive", after_term).await;
        // Past the grace: SIGKILL. From here small steps, for the lifecycle's own short
        // waits (probes of the group, the pipes' drain), until the run is over. The clock
        // never runs ahead of the real one here: the killed shell takes real time to die and
        // be reaped (more on a busy machine), and a virtual minute without its exit would end
        // the run with the exit unknown.
        tokio::time::advance(HOUR).await;
        let result = loop {
            tokio::select! {
                biased;
                result = run.as_mut() => break result,
                () = tokio::time::advance(Duration::from_millis(10)) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        while let Ok(chunk) = output.chunks.try_recv() {
            output.seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        (result, output.seen)
    })
}

#[test]
fn a_timeout_and_its_escalation_run_in_virtual_time_on_a_paused_clock() {
    // The run is on a thread of its own so that a driver reading another clock (it would
    // wait for the real hour) fails this test instead of hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(run_on_a_paused_clock());
    });
    let (result, output) = finished
        .recv_timeout(Duration::from_secs(600))
        .expect("the run ended in virtual time");
    let result = result.expect("the run was carried out");
    assert_eq!(result.outcome, RunOutcome::TimedOut, "{output}");
    // The stop signal came first (trapped), and the kill only after the grace.
    assert!(output.contains("got-term"), "{output}");
    assert_eq!(result.exit, Some(Exit::Signal(9)), "{output}");
    // The duration is on the runtime's clock: the deadline and the whole grace.
    assert!(result.duration >= 2 * HOUR, "{:?}", result.duration);
}
