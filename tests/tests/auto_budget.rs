//! Budgets of auto sessions on both drivers: once the turns spent the session's cost or token
//! limit, no further turn starts; the session ends with status `budget`, and the spend and
//! the limit are in the state (on disk too) and the summary. The harness is a `sh` script
//! speaking Claude Code's stream: every call costs $0.30 and 600 tokens, and reports, as
//! Claude Code does, the session's running cost total.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentrun_core::auto_mode::SessionStatus;
use agentrun_core::budget::BudgetExceeded;
use agentrun_core::harness::Harness;
use agentrun_fs::Store;
use agentrun_fs::auto_session::SessionDir;

fn write_harness(dir: &Path) {
    let script = format!(
        r#"#!/bin/sh
d='{dir}'
n=$(cat "$d/n" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "$d/n"
cost=$(echo "$n" | awk '{{printf "%.2f", $1 * 0.3}}')
echo '{{"type":"system","subtype":"init","session_id":"sess-1","model":"m"}}'
echo '{{"type":"result","subtype":"success","is_error":false,"result":"turn '"$n"'","session_id":"sess-1","num_turns":1,"total_cost_usd":'"$cost"',"usage":{{"input_tokens":500,"output_tokens":100}}}}'
exit 0
"#,
        dir = dir.display()
    );
    let path = dir.join("claude");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

struct Fixture {
    tmp: tempfile::TempDir,
    calls: PathBuf,
    workspace: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let calls = tmp.path().join("calls");
        fs::create_dir(&calls).unwrap();
        write_harness(&calls);
        let workspace = tmp.path().join("work");
        fs::create_dir(&workspace).unwrap();
        Fixture {
            tmp,
            calls,
            workspace,
        }
    }

    fn calls_made(&self) -> u32 {
        fs::read_to_string(self.calls.join("n")).map_or(0, |n| n.trim().parse().unwrap())
    }

    fn options(&self) -> agentrun_smol::AutoSessionOptions {
        agentrun_smol::AutoSessionOptions::new(Harness::Claude, "make it so")
            .max_turns(10)
            .workspace(&self.workspace)
            .session_dir(self.tmp.path().join("session"))
    }
}

macro_rules! create_and_run {
    ($driver:ident, $fx:expr, $options:expr) => {{
        let fx: &Fixture = $fx;
        let runner = $driver::Runner::new(Store::open(fx.tmp.path().join("store")).unwrap());
        let path_var = format!("{}:/usr/bin:/bin", fx.calls.display());
        let options = $options;
        async move {
            $driver::AutoSession::create(runner, options)
                .await
                .unwrap()
                .env("PATH", path_var)
                .run(|_| {})
                .await
                .unwrap()
        }
    }};
}

fn tokio_block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn no_turn_starts_after_the_one_that_spent_the_cost_limit() {
    for tokio_driver in [false, true] {
        let fx = Fixture::new();
        // Turn 1 spends $0.30, turn 2 another $0.30 (reported as the running $0.60): $0.60
        // reaches $0.50, so turn 2 is the last.
        let options = fx.options().max_cost_usd(0.5);
        let outcome = if tokio_driver {
            tokio_block_on(create_and_run!(agentrun_tokio, &fx, options))
        } else {
            smol::block_on(create_and_run!(agentrun_smol, &fx, options))
        };
        assert_eq!(fx.calls_made(), 2, "no turn after the one that crossed");
        assert_eq!(outcome.status(), SessionStatus::Budget);
        let state = outcome.state();
        assert!(
            (state.spend.cost_usd - 0.6).abs() < 1e-9,
            "{:?}",
            state.spend
        );
        assert!(!state.spend.cost_estimated);
        assert_eq!(state.budget.max_cost_usd, Some(0.5));
        assert!(
            matches!(state.budget_exceeded, Some(BudgetExceeded::Cost { limit, .. }) if limit == 0.5),
            "{:?}",
            state.budget_exceeded
        );
        let summary = outcome.summary();
        assert!(summary.contains("status budget"), "{summary}");
        assert!(
            summary.contains("budget: spent $0.6000, 1200 tokens of $0.5000"),
            "{summary}"
        );
        let on_disk = SessionDir::open(outcome.dir())
            .unwrap()
            .read_state()
            .unwrap();
        assert_eq!(&on_disk, state);
        let json = serde_json::to_value(&on_disk).unwrap();
        assert_eq!(json["status"], "budget");
        assert_eq!(json["budget"]["max_cost_usd"], 0.5);
    }
}

#[test]
fn the_token_limit_stops_the_session_the_same_way() {
    let fx = Fixture::new();
    // 600 tokens a turn: turn 3 reaches 1800 >= 1500.
    let outcome = smol::block_on(create_and_run!(
        agentrun_smol,
        &fx,
        fx.options().max_tokens(1500)
    ));
    assert_eq!(fx.calls_made(), 3);
    assert_eq!(outcome.status(), SessionStatus::Budget);
    assert_eq!(outcome.state().spend.tokens, 1800);
}

#[test]
fn a_session_within_its_budget_runs_as_without_one() {
    let fx = Fixture::new();
    let outcome = smol::block_on(create_and_run!(
        agentrun_smol,
        &fx,
        fx.options().max_turns(3).max_cost_usd(100.0)
    ));
    assert_eq!(
        outcome.status(),
        SessionStatus::Stopped,
        "{}",
        outcome.summary()
    );
    assert_eq!(outcome.state().budget_exceeded, None);
}

#[test]
fn a_bad_limit_is_refused_before_anything_runs() {
    let fx = Fixture::new();
    let runner = agentrun_smol::Runner::new(Store::open(fx.tmp.path().join("store")).unwrap());
    let e = smol::block_on(agentrun_smol::AutoSession::create(
        runner,
        fx.options().max_cost_usd(-1.0),
    ))
    .unwrap_err();
    assert!(e.to_string().contains("cost limit"), "{e}");
    assert_eq!(fx.calls_made(), 0);
}
