//! Verification reports every kind of damage.

mod common;

use std::fs;

use agentrun_core::Digest;
use common::*;

#[test]
fn a_healthy_store_verifies_clean() {
    let (_tmp, store) = store();
    capture_named(&store, &[("stdout", &lines(20_000)), ("stderr", b"")]);
    capture_single(&store, b"x", 1);
    let report = store.verify().unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems);
    assert_eq!((report.objects_checked, report.records_checked), (4, 2));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["objects_checked"], 4);
}

#[test]
fn damage_is_reported_per_object_and_record() {
    let (_tmp, store) = store();
    let big = lines(20_000);
    capture_single(&store, &big, 10_000);
    let small = capture_single(&store, b"small\n", 1);
    capture_single(&store, b"gone\n", 1);
    let big_d = Digest::of(&big);
    flip(&object_path(&store, &big_d), 70_000, 0x40);
    flip(&index_path(&store, &Digest::of(b"small\n")), 3, 0x40);
    fs::remove_file(object_path(&store, &Digest::of(b"gone\n"))).unwrap();
    fs::write(store.root().join("records").join("1-1-1.json"), b"[]").unwrap();

    let report = store.verify().unwrap();
    let problems = report.problems.join("\n");
    assert!(
        problems.contains(&format!("artifact {big_d}: block 1 does not match")),
        "{problems}"
    );
    assert!(
        problems.contains(&format!("artifact {big_d}: content hashes to")),
        "{problems}"
    );
    assert!(
        problems.contains(&format!(
            "line index of artifact {}",
            Digest::of(b"small\n")
        )),
        "{problems}"
    );
    assert!(
        problems.contains(&format!(
            "artifact {}, which is missing",
            Digest::of(b"gone\n")
        )),
        "{problems}"
    );
    assert!(problems.contains("1-1-1.json is corrupt"), "{problems}");
    assert_eq!(report.records_checked, 4);
    assert!(!report.is_healthy());
    drop(small);
}

#[test]
fn an_oversized_record_is_a_problem_and_the_other_records_are_still_checked() {
    let (_tmp, store) = store();
    let good = capture_single(&store, b"good\n", 1);
    let huge = store.root().join("records").join("1-1-1.json");
    // Sparse: one byte past the largest record, without using the disk space.
    fs::File::create(&huge)
        .unwrap()
        .set_len(agentrun_core::record::MAX_RECORD_BYTES + 1)
        .unwrap();
    // The good record's artifact is gone: verify must still check it after the bad one.
    fs::remove_file(object_path(&store, &Digest::of(b"good\n"))).unwrap();

    let report = store.verify().unwrap();
    assert_eq!(report.records_checked, 2);
    let problems = report.problems.join("\n");
    let size = agentrun_core::record::MAX_RECORD_BYTES + 1;
    assert!(
        problems.contains(&format!("record {} is {size} bytes", huge.display())),
        "{problems}"
    );
    assert!(
        problems.contains(&format!("{}.json references artifact", good.run_id)),
        "{problems}"
    );
}

#[test]
fn a_record_whose_run_id_is_not_its_file_name_is_refused_everywhere() {
    let (_tmp, store) = store();
    let good = capture_single(&store, b"good\n", 1);
    let forged = capture_single(&store, b"forged\n", 1);
    let records = store.root().join("records");
    let path = records.join(format!("{}.json", forged.run_id));
    let mut json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    json["run_id"] = "../../../etc/x".into();
    fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();

    let err = store.record(&forged.run_id).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, agentrun_fs::StoreError::RecordRunIdMismatch { run_id, .. }
            if run_id == "../../../etc/x"),
        "{err:?}"
    );
    assert!(message.contains(&forged.run_id), "{message}");
    // `runs` lists the good one and names the forged one as unreadable.
    let listing = store.recent_runs(10).unwrap();
    let listed: Vec<&str> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(listed, [good.run_id.as_str()]);
    assert_eq!(listing.unreadable.len(), 1);
    assert_eq!(listing.unreadable[0].run_id, forged.run_id);
    // Verify reports it as a problem.
    let report = store.verify().unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("../../../etc/x") && p.contains(&forged.run_id)),
        "{:?}",
        report.problems
    );
}
