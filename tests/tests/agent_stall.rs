//! The stall watchdog of an agent turn, on both drivers: a harness that prints one event and
//! then hangs is stopped with its stop signals once no event line arrived for the stall
//! timeout, and the turn ends failed `stalled`, naming the last event seen; a harness that
//! finishes before the timeout is not touched. The harness is a `sh` script speaking Claude
//! Code's stream.

use std::fs;
use std::future::IntoFuture;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use agentrun_core::harness::{FailureKind, Harness, OutcomeStatus};
use agentrun_fs::Store;
use agentrun_smol::{AgentOptions, AgentRun};
use agentrun_tests::processes::ended;

const INIT: &str = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;
const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s-1","num_turns":1,"total_cost_usd":0.25,"usage":{"input_tokens":10,"output_tokens":5}}"#;

/// Writes `claude` into `dir`: it writes its pid to `dir/pid`, prints `lines`, then runs `then`.
fn write_harness(dir: &Path, lines: &[&str], then: &str) {
    let mut script = format!("#!/bin/sh\necho $$ > '{}'\n", dir.join("pid").display());
    for line in lines {
        script.push_str(&format!("echo '{line}'\n"));
    }
    script.push_str(then);
    script.push('\n');
    let path = dir.join("claude");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn options(dir: &Path, stall: Duration) -> AgentOptions {
    AgentOptions::new(Harness::Claude, "work")
        .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
        .env("HOME", dir)
        .stall_timeout(stall)
}

fn on_smol(store: Store, options: AgentOptions) -> AgentRun {
    let runner = agentrun_smol::Runner::new(store);
    smol::block_on(runner.agent(options).into_future()).unwrap()
}

fn on_tokio(store: Store, options: AgentOptions) -> AgentRun {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runner = agentrun_tokio::Runner::new(store);
    runtime
        .block_on(runner.agent(options).into_future())
        .unwrap()
}

fn a_hanging_harness_is_stopped_and_reported_stalled(turn: fn(Store, AgentOptions) -> AgentRun) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store")).unwrap();
    // `exec sleep`: the harness itself hangs (SIGTERM, its stop signal, ends it).
    write_harness(tmp.path(), &[INIT], "exec sleep 120");
    let run = turn(store, options(tmp.path(), Duration::from_secs(1)));
    let completion = run
        .completion
        .as_ref()
        .expect("a stalled turn has an outcome");
    assert_eq!(completion.outcome.failure_kind, Some(FailureKind::Stalled));
    let OutcomeStatus::TurnFailed { diagnostic } = &completion.outcome.status else {
        panic!("{:?}", completion.outcome.status);
    };
    assert!(diagnostic.contains("\"system\""), "{diagnostic}");
    assert!(diagnostic.contains("stall timeout of 1s"), "{diagnostic}");
    assert_eq!(completion.outcome.session_id.as_deref(), Some("s-1"));
    assert!(!run.succeeded());
    assert_eq!(
        run.stopped(),
        None,
        "stalled is an outcome, not an interruption"
    );
    assert_eq!(agentrun_process::agent_exit_code(&run), 124);
    assert_eq!(agentrun_process::turn_exit_code(&run), Some(124));
    let json = serde_json::to_value(&run).unwrap();
    assert_eq!(json["outcome"]["failure_kind"], "stalled", "{json:#}");
    let pid: i32 = fs::read_to_string(tmp.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ended(pid), "the harness {pid} was stopped and reaped");
}

fn a_harness_that_finishes_in_time_is_not_touched(turn: fn(Store, AgentOptions) -> AgentRun) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store")).unwrap();
    write_harness(tmp.path(), &[INIT, RESULT], "exit 0");
    let run = turn(store, options(tmp.path(), Duration::from_secs(600)));
    assert!(run.succeeded(), "{:?}", run.completion);
}

#[test]
fn smol_stalled() {
    a_hanging_harness_is_stopped_and_reported_stalled(on_smol);
}

#[test]
fn tokio_stalled() {
    a_hanging_harness_is_stopped_and_reported_stalled(on_tokio);
}

#[test]
fn smol_in_time() {
    a_harness_that_finishes_in_time_is_not_touched(on_smol);
}

#[test]
fn tokio_in_time() {
    a_harness_that_finishes_in_time_is_not_touched(on_tokio);
}

/// A run stopped by its timeout keeps what its stream said it spent (`usage` beside
/// `interrupted`); a stalled one keeps it in its report.
fn stopped_runs_keep_their_usage(turn: fn(Store, AgentOptions) -> AgentRun) {
    let tmp = tempfile::tempdir().unwrap();
    // The result line, then a hang: the run never completes by itself.
    write_harness(tmp.path(), &[INIT, RESULT], "exec sleep 120");
    let timed = AgentOptions::new(Harness::Claude, "work")
        .env("PATH", format!("{}:/usr/bin:/bin", tmp.path().display()))
        .env("HOME", tmp.path())
        .timeout(Duration::from_secs(1));
    let run = turn(Store::open(tmp.path().join("store")).unwrap(), timed);
    assert!(
        run.stopped().is_some_and(|o| o.timed_out()),
        "{:?}",
        run.stopped()
    );
    let usage = run.stopped_usage.as_ref().expect("the usage seen is kept");
    assert_eq!(usage.cost_usd, Some(0.25));
    let json = serde_json::to_value(&run).unwrap();
    assert_eq!(json["usage"]["cost_usd"], 0.25, "{json:#}");

    let tmp = tempfile::tempdir().unwrap();
    write_harness(tmp.path(), &[INIT, RESULT], "exec sleep 120");
    let run = turn(
        Store::open(tmp.path().join("store")).unwrap(),
        options(tmp.path(), Duration::from_secs(1)),
    );
    let completion = run.completion.as_ref().unwrap();
    assert_eq!(completion.outcome.failure_kind, Some(FailureKind::Stalled));
    assert_eq!(
        completion.report.usage.as_ref().and_then(|u| u.cost_usd),
        Some(0.25)
    );
}

#[test]
fn smol_stopped_usage() {
    stopped_runs_keep_their_usage(on_smol);
}

#[test]
fn tokio_stopped_usage() {
    stopped_runs_keep_their_usage(on_tokio);
}

/// A budget reached while the harness runs (OpenCode reports each step's cost) stops it: the
/// turn fails `budget`, naming the spend and the limit.
fn a_budget_reached_mid_turn_stops_the_harness(turn: fn(Store, AgentOptions) -> AgentRun) {
    let tmp = tempfile::tempdir().unwrap();
    let step = r#"{"type":"step_finish","sessionID":"ses_1","part":{"reason":"tool-calls","tokens":{"input":100,"output":20},"cost":0.3}}"#;
    let mut script = format!(
        "#!/bin/sh\necho $$ > '{}'\necho '{step}'\nexec sleep 120\n",
        tmp.path().join("pid").display()
    );
    script.push('\n');
    let path = tmp.path().join("opencode");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    let options = AgentOptions::new(Harness::OpenCode, "work")
        .env("PATH", format!("{}:/usr/bin:/bin", tmp.path().display()))
        .env("HOME", tmp.path())
        .budget(agentrun_core::budget::Budget {
            max_cost_usd: Some(0.2),
            max_tokens: None,
        });
    let run = turn(Store::open(tmp.path().join("store")).unwrap(), options);
    let completion = run
        .completion
        .as_ref()
        .expect("a budget stop has an outcome");
    assert_eq!(completion.outcome.failure_kind, Some(FailureKind::Budget));
    let OutcomeStatus::TurnFailed { diagnostic } = &completion.outcome.status else {
        panic!("{:?}", completion.outcome.status);
    };
    assert!(diagnostic.contains("$0.3000 of $0.2000"), "{diagnostic}");
    assert!(run.budget_exceeded.is_some());
    let json = serde_json::to_value(&run).unwrap();
    assert_eq!(json["outcome"]["failure_kind"], "budget", "{json:#}");
    assert_eq!(json["budget_exceeded"]["kind"], "cost", "{json:#}");
    assert_eq!(
        completion.report.usage.as_ref().and_then(|u| u.cost_usd),
        Some(0.3)
    );
    let pid: i32 = fs::read_to_string(tmp.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ended(pid), "the harness {pid} was stopped and reaped");
}

/// A run that finished is checked on its final usage: it keeps its outcome, and says which
/// limit it reached.
fn a_finished_run_over_its_budget_says_so(turn: fn(Store, AgentOptions) -> AgentRun) {
    let tmp = tempfile::tempdir().unwrap();
    write_harness(tmp.path(), &[INIT, RESULT], "exit 0");
    let options = options(tmp.path(), Duration::ZERO).budget(agentrun_core::budget::Budget {
        max_cost_usd: None,
        max_tokens: Some(10),
    });
    let run = turn(Store::open(tmp.path().join("store")).unwrap(), options);
    assert!(run.succeeded());
    assert_eq!(
        run.budget_exceeded,
        Some(agentrun_core::budget::BudgetExceeded::Tokens {
            limit: 10,
            spent: 15
        })
    );
}

#[test]
fn smol_budget() {
    a_budget_reached_mid_turn_stops_the_harness(on_smol);
    a_finished_run_over_its_budget_says_so(on_smol);
}

#[test]
fn tokio_budget() {
    a_budget_reached_mid_turn_stops_the_harness(on_tokio);
    a_finished_run_over_its_budget_says_so(on_tokio);
}
