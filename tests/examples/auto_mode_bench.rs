//! agentrun's own cost per auto-mode turn (results in docs/benchmarks.md).
//!
//! ```text
//! cargo run --release -p agentrun-tests --example auto_mode_bench -- [TURNS] [DIR]
//! ```
//!
//! Runs one session of TURNS turns (default 1000: Clarify, Plan, then Execute and Evaluate
//! per turn, every Evaluate answering `IN PROGRESS`) through `run_session_loop` with the real
//! `agentrun_smol::AutoModeChannel` over a session directory in DIR (default: a temporary
//! directory): machine transitions, prompt rendering, `state.json` replaced atomically with
//! `fsync` after every transition, the log appended, `append/` scanned before every Execute.
//! The harness answers instantly in-process, so what is measured is everything except the
//! harness. Prints the median and 99th percentile wall time per harness turn (from prompt
//! request to the next prompt request) and the resident set after 10 %, 50 % and 100 % of
//! the turns.

use std::time::{Duration, Instant, SystemTime};

use agentrun_core::auto_mode::{AutoMode, Settings};
use agentrun_core::turn::{AgentSession, TurnError, TurnOutput, run_session_loop};
use agentrun_fs::Store;
use agentrun_fs::auto_session::SessionDir;

/// Answers every prompt at once; records when each turn started and the RSS at checkpoints.
struct Instant0 {
    started: Vec<Instant>,
    rss: Vec<(usize, u64)>,
    checkpoints: Vec<usize>,
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl AgentSession for Instant0 {
    async fn run_turn(&mut self, prompt: &str) -> Result<TurnOutput, TurnError> {
        self.started.push(Instant::now());
        let n = self.started.len();
        if self.checkpoints.contains(&n) {
            self.rss.push((n, rss_kib()));
        }
        let answer = if prompt.contains("This is the Evaluate phase") {
            "IN PROGRESS"
        } else {
            "ok"
        };
        Ok(TurnOutput::from_text(answer)
            .with_exit_code(0)
            .with_harness_session_id("bench-session"))
    }

    fn session_id(&self) -> &str {
        "bench"
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let turns: u32 = args.next().map_or(1000, |a| a.parse().expect("TURNS"));
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let base = args.next().map_or(tmp.path().to_owned(), Into::into);
    let store = Store::open(base.join("store")).expect("a store");
    let dir = SessionDir::create(base.join(format!("session-{}", std::process::id())))
        .expect("a session directory");
    let settings = Settings {
        objective: "benchmark the turn loop".into(),
        harness: "claude".into(),
        model: None,
        effort: None,
        harness_args: vec![],
        verify: None,
        workspace: None,
        max_turns: turns,
        result_sink_var: "AGENTRUN_RESULT_SINK".into(),
        harness_resumes: true,
        max_retries: 0,
        retry_backoff_ms: 30_000,
    };
    let harness_turns = 2 + 2 * (turns as usize - 2);
    let mut session = Instant0 {
        started: Vec::with_capacity(harness_turns + 1),
        rss: Vec::new(),
        checkpoints: vec![harness_turns / 10, harness_turns / 2, harness_turns],
    };
    let machine = AutoMode::new("bench", settings, SystemTime::now()).expect("settings");
    let began = Instant::now();
    let ended = smol::block_on(async {
        let runner = agentrun_smol::Runner::new(store);
        let mut channel =
            agentrun_smol::AutoModeChannel::new(machine, dir, runner, agentrun_smol::SmolRuntime)
                .await
                .expect("channel");
        run_session_loop(&mut session, &mut channel, || async {})
            .await
            .expect("loop");
        assert_eq!(channel.state().status.as_str(), "stopped");
        Instant::now()
    });
    let mut per_turn: Vec<Duration> = session.started.windows(2).map(|w| w[1] - w[0]).collect();
    per_turn.sort();
    let pct = |p: usize| per_turn[(per_turn.len() - 1) * p / 100];
    println!(
        "{} harness turns in {:.3} s: median {:.3} ms, p99 {:.3} ms, max {:.3} ms per turn",
        session.started.len(),
        (ended - began).as_secs_f64(),
        pct(50).as_secs_f64() * 1e3,
        pct(99).as_secs_f64() * 1e3,
        per_turn.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
    for (n, kib) in &session.rss {
        println!("RSS after {n} turns: {:.1} MiB", *kib as f64 / 1024.0);
    }
}
