//! Crash consistency at every step of publication, deterministically: a child process runs a
//! fixed sequence of captures (named output over several index blocks, a dedupe hit, a dedupe
//! hit on a damaged copy, single output) and is killed with SIGKILL at fault point N
//! ([`crate::fault`]), for N = 1, 2, … until a child finishes without reaching N. After each
//! crash the store must be consistent: `verify` finds nothing wrong, every record reads back
//! byte for byte, GC removes the dead capture and nothing a record needs, and the same
//! sequence then runs to completion on that store.

use std::process::Command;

use agentrun_core::{
    CaptureCompletion, CaptureStatus, Digest, OutputChannel, OutputDeclaration, PreviewLimits,
};

use crate::fault::FAULT_AT_VAR;
use crate::{GcOptions, Store};

/// The child's store (set only in the child).
const CHILD_STORE_VAR: &str = "AGENTRUN_FS_CRASH_STORE";

fn done() -> CaptureCompletion {
    CaptureCompletion::Streamed {
        display: None,
        status: CaptureStatus::Succeeded,
    }
}

fn big() -> Vec<u8> {
    (0..30_000u32)
        .flat_map(|i| format!("line {i} {}\n", "x".repeat((i % 40) as usize)).into_bytes())
        .collect()
}

/// The sequence every child runs.
fn sequence(store: &Store) {
    let named = |name: &str| OutputChannel::Named(agentrun_core::StreamName::new(name).unwrap());
    let big = big();
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    for piece in big.chunks(50_000) {
        s.write_channel(&named("stdout"), piece).unwrap();
        s.write_channel(&named("stderr"), b"progress\n").unwrap();
    }
    s.finish(done()).unwrap();
    // The same stdout again, as single output: a dedupe hit.
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    s.write_channel(&OutputChannel::Single, &big).unwrap();
    s.finish(done()).unwrap();
}

#[test]
fn crash_child() {
    let Some(root) = std::env::var_os(CHILD_STORE_VAR) else {
        return;
    };
    sequence(&Store::open(root).unwrap());
}

/// Checks everything a crash must leave intact, then that the store keeps working.
fn check_consistent(store: &Store, at: u64) {
    let report = store.verify().unwrap();
    assert!(report.is_healthy(), "fault {at}: {:?}", report.problems);
    for id in store.records().unwrap() {
        let record = store.record(&id).unwrap();
        for stream in record.streams() {
            let mut bytes = Vec::new();
            store
                .copy_to(&record.stream_uri(stream), &mut bytes)
                .unwrap();
            assert_eq!(Digest::of(&bytes), stream.sha256, "fault {at}: run {id}");
        }
    }
    let gc = store.gc(&GcOptions::default()).unwrap();
    assert!(gc.captures_removed <= 1, "fault {at}");
    assert_eq!(gc.objects_removed, 0, "fault {at}");
    let captures = std::fs::read_dir(store.root().join("captures")).unwrap();
    assert_eq!(captures.count(), 0, "fault {at}");
    sequence(store);
    let report = store.verify().unwrap();
    assert!(
        report.is_healthy(),
        "fault {at}, after: {:?}",
        report.problems
    );
}

#[test]
fn sigkill_at_every_step_of_publication_leaves_a_consistent_store() {
    let exe = std::env::current_exe().unwrap();
    let mut at = 1u64;
    loop {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let store = Store::open(&root).unwrap();
        let out = Command::new(&exe)
            .args([
                "--exact",
                "crash_tests::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_STORE_VAR, &root)
            .env(FAULT_AT_VAR, at.to_string())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            // The child never reached point `at`: every point has been crashed at.
            assert!(at > 20, "only {} fault points were reached", at - 1);
            eprintln!("crashed at each of {} fault points", at - 1);
            break;
        }
        assert!(
            stderr.contains(&format!("fault point {at}: ")),
            "the child died elsewhere: {stderr}"
        );
        check_consistent(&store, at);
        at += 1;
    }
}
