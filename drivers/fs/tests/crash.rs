//! SIGKILL at arbitrary points: the store stays consistent and GC cleans up after the dead run.
//!
//! The test binary re-runs itself as the child (`crash_child`, active only when
//! `AGENTRUN_FS_CRASH_CHILD` names a store), which captures and finishes runs in a loop until
//! the parent kills it.

mod common;

use std::process::Command;
use std::time::Duration;

use agentrun_core::{OutputChannel, OutputDeclaration, PreviewLimits};
use agentrun_fs::{GcOptions, Store};
use common::*;

const CHILD_ENV: &str = "AGENTRUN_FS_CRASH_CHILD";

#[test]
fn crash_child() {
    let Some(root) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store = Store::open(root).unwrap();
    for i in 0u64.. {
        let decl = OutputDeclaration::stdout_stderr();
        let mut s = store.begin_capture(decl, PreviewLimits::default()).unwrap();
        for k in 0..20 {
            let text = format!(
                "run {i} chunk {k} {}\n",
                "z".repeat((i * 7919 + k) as usize % 5000)
            );
            s.write_channel(&named("stdout"), text.repeat(10).as_bytes())
                .unwrap();
            s.write_channel(&named("stderr"), text.as_bytes()).unwrap();
        }
        s.finish(done()).unwrap();
    }
}

#[test]
fn sigkill_at_any_point_leaves_a_consistent_store() {
    let (_tmp, store) = store();
    let exe = std::env::current_exe().unwrap();
    for (round, delay_ms) in [37u64, 90, 150, 230, 400].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, store.root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        // Every object matches its name and index; every record's artifacts exist.
        let report = store.verify().unwrap();
        assert!(report.is_healthy(), "round {round}: {:?}", report.problems);
        // The dead run's capture directory (if it died mid-capture) is cleaned; objects it
        // published without a record stay for the grace period.
        let gc = store.gc(&GcOptions::default()).unwrap();
        assert!(gc.captures_removed <= 1);
        assert_eq!(gc.objects_removed, 0);
        assert_eq!(
            std::fs::read_dir(store.root().join("captures"))
                .unwrap()
                .count(),
            0
        );
        // Every recorded run reads back in full.
        for id in store.records().unwrap() {
            let record = store.record(&id).unwrap();
            for s in record.streams() {
                let bytes = read_all_pages(&store, &record.stream_uri(s), 2000).unwrap();
                assert_eq!(bytes.len() as u64, s.bytes);
            }
        }
    }
    assert!(
        !store.records().unwrap().is_empty(),
        "the child never finished a run"
    );
    // The store still works for a new run.
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    s.write_channel(&OutputChannel::Single, b"after\n").unwrap();
    s.finish(done()).unwrap();
}
