//! Garbage collection: roots, grace, live captures, dead captures, strays.

mod common;

use std::fs;
use std::time::{Duration, SystemTime};

use agentrun_core::record::RecordOutput;
use agentrun_core::{
    ArtifactUri, CaptureCompletion, CaptureStatus, Digest, OutputChannel, OutputDeclaration,
    PageRequest, PreviewLimits, StreamName,
};
use agentrun_fs::{GcOptions, GcReport, StoreError};
use common::*;

/// Options under which every unreferenced object is past its grace.
fn later() -> GcOptions {
    GcOptions {
        now: SystemTime::now() + Duration::from_secs(2 * 3600),
        ..GcOptions::default()
    }
}

fn object_count(store: &agentrun_fs::Store) -> usize {
    let mut n = 0;
    for fan in fs::read_dir(store.root().join("objects")).unwrap() {
        for f in fs::read_dir(fan.unwrap().path()).unwrap() {
            if !f.unwrap().file_name().to_string_lossy().ends_with(".idx") {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn records_keep_manifests_and_their_streams() {
    let (_tmp, store) = store();
    let named = capture_named(&store, &[("stdout", b"out\n"), ("stderr", b"err\n")]);
    let single = capture_single(&store, b"single\n", 3);
    let report = store.gc(&later()).unwrap();
    assert_eq!(
        report,
        GcReport {
            objects_kept: 4,
            objects_in_grace: 0,
            objects_removed: 0,
            bytes_removed: 0,
            captures_removed: 0,
            runtime_dirs_removed: 0,
            records: 2,
            records_expired: 0,
        }
    );
    let RecordOutput::Named { manifest, .. } = named.output else {
        panic!()
    };
    let u = ArtifactUri::stream(manifest, StreamName::new("stderr").unwrap());
    assert_eq!(read_all_pages(&store, &u, 10).unwrap(), b"err\n");
    assert_eq!(
        read_all_pages(&store, &single.output_uri(), 10).unwrap(),
        b"single\n"
    );
}

#[test]
fn a_manifest_alone_roots_its_streams() {
    let (_tmp, store) = store();
    let named = capture_named(&store, &[("stdout", b"out\n")]);
    let RecordOutput::Named { manifest, .. } = &named.output else {
        panic!()
    };
    // Rewrite the record so that it references only the manifest: the stream must survive
    // through the manifest.
    let path = store
        .root()
        .join("records")
        .join(format!("{}.json", named.run_id));
    let mut record = named.clone();
    let RecordOutput::Named { streams, .. } = &mut record.output else {
        panic!()
    };
    let keep = streams[0].sha256;
    streams[0].sha256 = *manifest;
    fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    let report = store.gc(&later()).unwrap();
    assert_eq!(report.objects_removed, 0);
    assert!(object_path(&store, &keep).exists());
}

#[test]
fn unreferenced_objects_go_after_the_grace_period_only() {
    let (_tmp, store) = store();
    let kept = capture_single(&store, b"kept\n", 100);
    let dropped = capture_single(&store, b"dropped\n", 100);
    fs::remove_file(
        store
            .root()
            .join("records")
            .join(format!("{}.json", dropped.run_id)),
    )
    .unwrap();
    let d = Digest::of(b"dropped\n");

    // Within grace: kept.
    let report = store.gc(&GcOptions::default()).unwrap();
    assert_eq!(
        (report.objects_kept, report.objects_removed, report.records),
        (2, 0, 1)
    );
    assert!(object_path(&store, &d).exists());

    // Dry run past grace: counted, not removed.
    let dry = store
        .gc(&GcOptions {
            dry_run: true,
            ..later()
        })
        .unwrap();
    assert_eq!((dry.objects_kept, dry.objects_removed), (1, 1));
    assert!(dry.bytes_removed > 8);
    assert!(object_path(&store, &d).exists());

    // Past grace: removed with its index.
    let report = store.gc(&later()).unwrap();
    assert_eq!(report, dry);
    assert!(!object_path(&store, &d).exists());
    assert!(!index_path(&store, &d).exists());
    assert_eq!(
        read_all_pages(&store, &kept.output_uri(), 10).unwrap(),
        b"kept\n"
    );
    assert_eq!(object_count(&store), 1);
}

#[test]
fn gc_beside_a_live_capture_deletes_nothing_of_it() {
    let (_tmp, store) = store();
    let mut session = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    let content = lines(10_000);
    let stdout = OutputChannel::Named(StreamName::new("stdout").unwrap());
    session.write_channel(&stdout, &content[..300_000]).unwrap();
    let before: Vec<_> = fs::read_dir(session.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    let report = store.gc(&later()).unwrap();
    assert_eq!(report.captures_removed, 0);
    let after: Vec<_> = fs::read_dir(session.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after);

    session.write_channel(&stdout, &content[300_000..]).unwrap();
    let record = session.finish(done()).unwrap();
    let u = record.stream_uri(record.stream("stdout").unwrap());
    assert_eq!(read_all_pages(&store, &u, 2000).unwrap(), content);
    assert_eq!(store.gc(&later()).unwrap().objects_removed, 0);
}

#[test]
fn capture_directories_of_dead_runs_are_cleaned() {
    let (_tmp, store) = store();
    let captures = store.root().join("captures");
    // A run that died with its lock file (the kernel released the lock) ...
    let dead = captures.join("1-1-1");
    fs::create_dir(&dead).unwrap();
    fs::write(dead.join("lock"), b"").unwrap();
    fs::write(dead.join("s0"), b"partial output").unwrap();
    fs::write(dead.join("s0.idx"), [0u8; 80]).unwrap();
    // ... and one that died before creating it.
    let early = captures.join("1-1-2");
    fs::create_dir(&early).unwrap();
    let live = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();

    let dry = store
        .gc(&GcOptions {
            dry_run: true,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(dry.captures_removed, 2);
    assert!(dead.exists());

    let report = store.gc(&GcOptions::default()).unwrap();
    assert_eq!(report.captures_removed, 2);
    assert!(!dead.exists() && !early.exists());
    assert!(live.dir().exists());
    live.finish(done()).unwrap();
}

#[test]
fn stray_temporary_files_and_orphan_indexes_are_removed() {
    let (_tmp, store) = store();
    let r = capture_single(&store, b"x\n", 1);
    let d = Digest::of(b"x\n");
    let tmp_record = store.root().join("records").join("9-9-9.json.tmp");
    fs::write(&tmp_record, b"{").unwrap();
    // An index whose object is gone (a GC or publish interrupted between the two files).
    fs::remove_file(
        store
            .root()
            .join("records")
            .join(format!("{}.json", r.run_id)),
    )
    .unwrap();
    fs::remove_file(object_path(&store, &d)).unwrap();
    store.gc(&GcOptions::default()).unwrap();
    assert!(!tmp_record.exists());
    assert!(!index_path(&store, &d).exists());
}

#[test]
fn a_corrupt_record_stops_gc_instead_of_losing_its_artifacts() {
    let (_tmp, store) = store();
    capture_single(&store, b"precious\n", 100);
    let bad = store.root().join("records").join("1-1-1.json");
    fs::write(&bad, b"{not json").unwrap();
    let err = store.gc(&later()).unwrap_err();
    assert!(matches!(err, StoreError::GcRefused { .. }), "{err:?}");
    assert!(err.to_string().contains("1-1-1.json"));
    assert!(object_path(&store, &Digest::of(b"precious\n")).exists());
}

#[test]
fn an_oversized_record_stops_gc_and_is_named_with_its_size() {
    let (_tmp, store) = store();
    capture_single(&store, b"precious\n", 100);
    // An unreferenced object past its grace, which gc would otherwise remove.
    let loose = capture_single(&store, b"unreferenced\n", 100);
    let records = store.root().join("records");
    fs::remove_file(records.join(format!("{}.json", loose.run_id))).unwrap();
    // Sparse: one byte past the largest record, without using the disk space.
    let huge = records.join("1-1-1.json");
    let size = agentrun_core::record::MAX_RECORD_BYTES + 1;
    fs::File::create(&huge).unwrap().set_len(size).unwrap();

    let before = object_count(&store);
    let err = store.gc(&later()).unwrap_err();
    assert!(
        matches!(&err, StoreError::GcRefused { path, .. } if *path == huge),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("removed nothing"), "{message}");
    assert!(message.contains(&format!("is {size} bytes")), "{message}");
    assert_eq!(object_count(&store), before, "nothing removed");
    assert!(object_path(&store, &Digest::of(b"unreferenced\n")).exists());
    assert!(huge.exists());
    // Without it, gc collects again.
    fs::remove_file(&huge).unwrap();
    assert_eq!(store.gc(&later()).unwrap().objects_removed, 1);
}

#[test]
fn a_record_of_an_unknown_format_stops_gc_and_is_named_for_its_format() {
    let (_tmp, store) = store();
    let kept = capture_single(&store, b"kept by a newer record\n", 100);
    // An unreferenced object past its grace, which gc would otherwise remove.
    let loose = capture_single(&store, b"unreferenced\n", 100);
    let path = |r: &agentrun_core::ResultRecord| {
        store
            .root()
            .join("records")
            .join(format!("{}.json", r.run_id))
    };
    fs::remove_file(path(&loose)).unwrap();
    // A newer agentrun's record: parses as a record, but names its format, and keeps something
    // in a field this version does not know.
    let mut future: serde_json::Value =
        serde_json::from_slice(&fs::read(path(&kept)).unwrap()).unwrap();
    future["format"] = "agentrun.record.v3".into();
    future["pins"] = serde_json::json!([Digest::of(b"unreferenced\n").to_string()]);
    fs::write(path(&kept), future.to_string()).unwrap();

    let before = object_count(&store);
    let err = store.gc(&later()).unwrap_err();
    assert!(
        matches!(&err, StoreError::GcRecordFormatUnknown { format, .. } if format == "agentrun.record.v3"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("{}.json", kept.run_id)),
        "{message}"
    );
    assert!(message.contains("agentrun.record.v3"), "{message}");
    assert!(message.contains("removed nothing"), "{message}");
    assert_eq!(object_count(&store), before, "nothing removed");
    assert!(object_path(&store, &Digest::of(b"unreferenced\n")).exists());
    // Reading it is refused the same way, not read as something it is not.
    let err = store.record(&kept.run_id).unwrap_err();
    assert!(
        matches!(&err, StoreError::RecordFormatUnknown { format, .. } if format == "agentrun.record.v3"),
        "{err:?}"
    );
    // Without it, gc collects again.
    fs::remove_file(path(&kept)).unwrap();
    assert_eq!(store.gc(&later()).unwrap().objects_removed, 2);
}

#[test]
fn expired_records_stop_rooting_their_artifacts() {
    let (_tmp, store) = store();
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    s.write_channel(&OutputChannel::Single, b"old output\n")
        .unwrap();
    let record = s
        .finish(CaptureCompletion::Streamed {
            display: None,
            status: CaptureStatus::Succeeded,
        })
        .unwrap();
    // Within the retention period the record and its artifact stay.
    let kept = store
        .gc(&GcOptions {
            expire_records: Some(Duration::from_secs(3 * 3600)),
            ..later()
        })
        .unwrap();
    assert_eq!(
        (kept.records, kept.records_expired, kept.objects_removed),
        (1, 0, 0)
    );
    // Past it, the record goes first and its artifact is collected in the same pass.
    let expired = store
        .gc(&GcOptions {
            expire_records: Some(Duration::from_secs(3600)),
            ..later()
        })
        .unwrap();
    assert_eq!(
        (
            expired.records,
            expired.records_expired,
            expired.objects_removed
        ),
        (0, 1, 1)
    );
    assert!(store.record(&record.run_id).is_err());
    assert!(
        store
            .read_page(&record.output_uri(), PageRequest::default())
            .is_err()
    );
}
