//! An agent turn whose progress callback panics (`AgentRunBuilder::on_progress`), on both
//! drivers: the harness is stopped and reaped, its run recorded, and the panic reaches the
//! task awaiting the turn, instead of the turn waiting for the harness to end by itself.
//! The harness is a `sh` script speaking Claude Code's stream that then waits a minute.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use agentrun_core::CaptureStatus;
use agentrun_core::harness::Harness;
use agentrun_fs::Store;
use agentrun_smol::AgentOptions;
use agentrun_tests::processes::ended;

/// A hang guard, not a timing assertion: the harness would wait a minute.
const BOUND: Duration = Duration::from_secs(30);

/// Writes `claude` into `dir`: it writes its pid to `dir/pid`, says its session started, then
/// waits a minute.
fn write_harness(dir: &Path) {
    let script = format!(
        "#!/bin/sh\necho $$ > '{pid}'\n\
         echo '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\",\"model\":\"m\"}}'\n\
         exec sleep 60\n",
        pid = dir.join("pid").display()
    );
    let path = dir.join("claude");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs one turn of the fake harness with a progress callback that panics, through `turn`
/// (one driver's `Runner::agent(options).on_progress(progress).await`, blocking), and checks
/// what is left.
fn a_panicking_progress_callback_stops_the_turn(
    turn: impl FnOnce(Store, AgentOptions, Box<dyn FnMut(&str) + Send>) + Send + 'static,
) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("store")).unwrap();
    write_harness(tmp.path());
    let options = AgentOptions::new(Harness::Claude, "wait")
        .env("PATH", format!("{}:/usr/bin:/bin", tmp.path().display()));
    let progress = Box::new(|_: &str| std::panic::panic_any("the progress callback broke"));
    let (ended_tx, ended_rx) = mpsc::channel();
    let runs = store.clone();
    std::thread::spawn(move || {
        let turn = std::panic::catch_unwind(AssertUnwindSafe(|| turn(runs, options, progress)));
        let _ = ended_tx.send(turn.map_err(|panic| panic.downcast_ref::<&str>().copied()));
    });
    let turn = ended_rx.recv_timeout(BOUND).expect("the turn ended");
    assert_eq!(turn, Err(Some("the progress callback broke")));
    let pid: i32 = fs::read_to_string(tmp.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(ended(pid), "the harness {pid} was stopped and reaped");
    let runs = store.records().unwrap();
    assert_eq!(runs.len(), 1, "the harness run was recorded");
    let record = store.record(&runs[0]).unwrap();
    assert_eq!(record.capture_status, CaptureStatus::Cancelled);
    let stdout = record.stream("stdout").expect("stdout is captured");
    let mut out = Vec::new();
    store.copy_to(&record.stream_uri(stdout), &mut out).unwrap();
    assert!(
        String::from_utf8_lossy(&out).contains("\"subtype\":\"init\""),
        "the line the callback panicked on was kept"
    );
}

#[test]
fn smol() {
    a_panicking_progress_callback_stops_the_turn(|store, options, progress| {
        let runner = agentrun_smol::Runner::new(store);
        let _ = smol::block_on(runner.agent(options).on_progress(progress).into_future());
    });
}

#[test]
fn tokio() {
    a_panicking_progress_callback_stops_the_turn(|store, options, progress| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let runner = agentrun_tokio::Runner::new(store);
        let _ = runtime.block_on(runner.agent(options).on_progress(progress).into_future());
    });
}
