//! Capture sessions end to end: publish, records, manifests, dedupe, completion modes.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime};

use agentrun_core::capture::CaptureError;
use agentrun_core::record::RecordOutput;
use agentrun_core::{
    ArtifactUri, ByteRange, CaptureCompletion, CaptureStatus, Digest, FullOutput, Manifest,
    OutputChannel, OutputDeclaration, PageRequest, PreviewLimits, StreamName,
};
use agentrun_fs::{CaptureWriteError, StoreError};
use common::*;

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn single_output_is_published_recorded_and_readable() {
    let (_tmp, store) = store();
    let content = lines(20_000); // several 64 KiB blocks
    let record = capture_single(&store, &content, 7_001);
    let digest = Digest::of(&content);
    assert_eq!(record.output_uri(), uri(digest));
    assert!(!record.incomplete);
    assert_eq!(store.record(&record.run_id).unwrap(), record);
    assert_eq!(store.records().unwrap(), vec![record.run_id.clone()]);
    // Layout and modes.
    assert_eq!(mode(&object_path(&store, &digest)), 0o600);
    assert_eq!(mode(&index_path(&store, &digest)), 0o600);
    assert_eq!(mode(object_path(&store, &digest).parent().unwrap()), 0o700);
    let record_file = store
        .root()
        .join("records")
        .join(format!("{}.json", record.run_id));
    assert_eq!(mode(&record_file), 0o600);
    // The capture directory is gone.
    assert_eq!(
        fs::read_dir(store.root().join("captures")).unwrap().count(),
        0
    );
    // Everything reads back.
    assert_eq!(read_all_pages(&store, &uri(digest), 2000).unwrap(), content);
    assert_eq!(read_all_pages(&store, &uri(digest), 7).unwrap(), content);
    let mut out = Vec::new();
    assert_eq!(
        store.copy_to(&uri(digest), &mut out).unwrap(),
        content.len() as u64
    );
    assert_eq!(out, content);
    let page = store
        .read_page(&uri(digest), PageRequest::new(19_999, 10).unwrap())
        .unwrap();
    assert_eq!(
        page.bytes,
        format!("line 19999 {}\n", "x".repeat(19_999 % 97)).into_bytes()
    );
    assert_eq!((page.total_lines, page.next_offset), (20_000, None));
    // Not a manifest.
    assert_eq!(store.manifest(&digest).unwrap(), None);
}

#[test]
fn named_output_publishes_streams_and_a_manifest() {
    let (_tmp, store) = store();
    let record = capture_named(
        &store,
        &[
            ("results", b"r1\nr2\n"),
            ("diagnostics", b"warn\n"),
            ("empty", b""),
        ],
    );
    let RecordOutput::Named { manifest, streams } = &record.output else {
        panic!()
    };
    assert_eq!(streams.len(), 3);
    let m = store.manifest(manifest).unwrap().expect("a manifest");
    assert_eq!(m.streams[0].sha256, Digest::of(b"r1\nr2\n"));
    assert_eq!(m.streams[2].sha256, Digest::of(b""));
    // A bare manifest URI reads the manifest JSON.
    let json = read_all_pages(&store, &uri(*manifest), 2000).unwrap();
    assert_eq!(Manifest::parse(&json).unwrap(), m);
    // Stream URIs read the streams, including the declared empty one.
    for (name, want) in [
        ("results", &b"r1\nr2\n"[..]),
        ("diagnostics", b"warn\n"),
        ("empty", b""),
    ] {
        let u = ArtifactUri::stream(*manifest, StreamName::new(name).unwrap());
        assert_eq!(read_all_pages(&store, &u, 2000).unwrap(), want, "{name}");
        let mut out = Vec::new();
        store.copy_to(&u, &mut out).unwrap();
        assert_eq!(out, want);
    }
    let u = ArtifactUri::stream(*manifest, StreamName::new("results").unwrap());
    let bytes = store.read_bytes(&u, ByteRange::new(1, 3).unwrap()).unwrap();
    assert_eq!(
        (bytes.bytes.as_slice(), bytes.next_byte_offset),
        (&b"1\nr"[..], Some(4))
    );
    assert_eq!(record.artifacts().len(), 4);
}

#[test]
fn full_completion_goes_through_the_same_pipeline() {
    let (_tmp, store) = store();
    let s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    let full = CaptureCompletion::Full {
        display: Some("done".into()),
        status: CaptureStatus::Succeeded,
        outputs: FullOutput::Single(b"all at once\n".to_vec()),
    };
    let record = s.finish(full).unwrap();
    assert_eq!(record.display(), "done");
    assert_eq!(
        read_all_pages(&store, &record.output_uri(), 10).unwrap(),
        b"all at once\n"
    );

    let decl = OutputDeclaration::stdout_stderr();
    let s = store.begin_capture(decl, PreviewLimits::default()).unwrap();
    let stderr = StreamName::new("stderr").unwrap();
    let full = CaptureCompletion::Full {
        display: None,
        status: CaptureStatus::Failed,
        outputs: FullOutput::Named(vec![(stderr, b"boom\n".to_vec())]),
    };
    let record = s.finish(full).unwrap();
    assert!(record.incomplete);
    assert_eq!(record.stream("stdout").unwrap().bytes, 0);
    assert_eq!(
        record.stream("stderr").unwrap().sha256,
        Digest::of(b"boom\n")
    );
}

#[test]
fn full_completion_after_streamed_chunks_is_refused_and_keeps_the_streamed_output() {
    let (_tmp, store) = store();
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    s.write_channel(&OutputChannel::Single, b"streamed")
        .unwrap();
    let dir = s.dir().to_owned();
    let full = CaptureCompletion::Full {
        display: None,
        status: CaptureStatus::Succeeded,
        outputs: FullOutput::Single(b"again".to_vec()),
    };
    let err = s.finish(full).unwrap_err();
    let StoreError::CompletionRejected { error, run_id } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*error, CaptureError::MixedCompletion);
    assert!(err.to_string().contains(run_id.as_str()), "{err}");
    assert!(!dir.exists());
    // Refusing the completion loses nothing that was streamed.
    let record = store.record(run_id).unwrap();
    assert!(record.incomplete);
    assert_eq!(record.capture_status, CaptureStatus::Failed);
    assert_eq!(
        read_all_pages(&store, &record.output_uri(), 10).unwrap(),
        b"streamed"
    );
}

#[test]
fn chunks_that_do_not_fit_the_declaration_are_rejected() {
    let (_tmp, store) = store();
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    let err = s.write_channel(&named("results"), b"x").unwrap_err();
    assert!(matches!(err, CaptureWriteError::Rejected(_)));
    assert!(
        err.to_string().contains("declared: stdout, stderr"),
        "{err}"
    );
    assert!(matches!(
        s.resolve(&OutputChannel::Single),
        Err(CaptureWriteError::Rejected(_))
    ));
    s.write_channel(&named("stdout"), b"ok\n").unwrap();
    s.display("live text");
    let record = s.finish(done()).unwrap();
    assert_eq!(record.display(), "live text");
    assert_eq!(record.stream("stdout").unwrap().bytes, 3);
}

#[test]
fn dedupe_hits_share_the_object_and_refresh_its_mtime() {
    let (_tmp, store) = store();
    let a = capture_single(&store, b"same\n", 2);
    let path = object_path(&store, &Digest::of(b"same\n"));
    let old = SystemTime::now() - Duration::from_secs(10 * 3600);
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let b = capture_single(&store, b"same\n", 5);
    assert_ne!(a.run_id, b.run_id);
    assert_eq!(a.output_uri(), b.output_uri());
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    assert!(
        mtime > old + Duration::from_secs(3600),
        "mtime was not refreshed"
    );
    assert_eq!(store.records().unwrap().len(), 2);
}

#[test]
fn a_dedupe_hit_on_a_read_only_object_refreshes_its_mtime() {
    // Root ignores file modes: drop the override from this thread so 0400 means read-only
    // here as it does for any other user (a no-op when the tests run unprivileged).
    without_permission_override();
    let (_tmp, store) = store();
    let a = capture_single(&store, b"kept read-only\n", 3);
    let path = object_path(&store, &Digest::of(b"kept read-only\n"));
    let old = SystemTime::now() - Duration::from_secs(10 * 3600);
    fs::File::open(&path).unwrap().set_modified(old).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
    assert!(
        fs::File::options().write(true).open(&path).is_err(),
        "the object must not be writable for this test to mean anything"
    );
    let b = capture_single(&store, b"kept read-only\n", 4);
    assert_eq!(a.output_uri(), b.output_uri());
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    assert!(
        mtime > old + Duration::from_secs(3600),
        "mtime was not refreshed"
    );
    assert_eq!(mode(&path), 0o400, "the object's mode is left alone");
    assert_eq!(
        read_all_pages(&store, &b.output_uri(), 10).unwrap(),
        b"kept read-only\n"
    );
}

/// Removes CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the calling thread's effective set.
fn without_permission_override() {
    use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
    let mut sets = capabilities(None).unwrap();
    sets.effective
        .remove(CapabilitySet::DAC_OVERRIDE | CapabilitySet::DAC_READ_SEARCH);
    set_capabilities(None, sets).unwrap();
}

#[test]
fn a_dropped_session_leaves_nothing_behind() {
    let (_tmp, store) = store();
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    s.write_channel(&OutputChannel::Single, b"never finished")
        .unwrap();
    let dir = s.dir().to_owned();
    assert!(dir.join("lock").exists());
    drop(s);
    assert!(!dir.exists());
    assert!(store.records().unwrap().is_empty());
    assert_eq!(
        fs::read_dir(store.root().join("objects")).unwrap().count(),
        0
    );
}

#[test]
fn invalid_limits_are_refused_before_anything_is_created() {
    let (_tmp, store) = store();
    let limits = PreviewLimits {
        max_lines: 0,
        ..Default::default()
    };
    let err = store
        .begin_capture(OutputDeclaration::Single, limits)
        .unwrap_err();
    assert!(matches!(err, StoreError::Limits(_)), "{err:?}");
    assert_eq!(
        fs::read_dir(store.root().join("captures")).unwrap().count(),
        0
    );
}

#[test]
fn the_record_renders_previews_with_hints_that_read_back() {
    let (_tmp, store) = store();
    let limits = PreviewLimits {
        max_lines: 3,
        ..Default::default()
    };
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), limits)
        .unwrap();
    let content = lines(10);
    s.write_channel(&named("stdout"), &content).unwrap();
    let record = s.finish(done()).unwrap();
    let stdout = record.stream("stdout").unwrap();
    assert!(stdout.preview.truncated);
    let hint_uri = record.stream_uri(stdout);
    let rest = store
        .read_page(
            &hint_uri,
            PageRequest::new(stdout.preview.newlines, 2000).unwrap(),
        )
        .unwrap();
    let mut rebuilt = stdout.preview.text.clone().into_bytes();
    rebuilt.extend_from_slice(&rest.bytes);
    assert_eq!(rebuilt, content);
}

#[test]
fn concurrent_sessions_get_distinct_run_ids() {
    let (_tmp, store) = store();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            std::thread::spawn(move || {
                capture_single(&store, format!("{i}\n").as_bytes(), 1).run_id
            })
        })
        .collect();
    let mut ids: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8);
}

#[test]
fn failed_and_cancelled_runs_publish_what_was_accepted_marked_incomplete() {
    for status in [CaptureStatus::Failed, CaptureStatus::Cancelled] {
        let (_tmp, store) = store();
        let mut s = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        let stdout = OutputChannel::Named(StreamName::new("stdout").unwrap());
        s.write_channel(&stdout, b"partial line 1\npartial")
            .unwrap();
        s.display("still running");
        let record = s
            .finish(CaptureCompletion::Streamed {
                display: None,
                status,
            })
            .unwrap();
        assert!(record.incomplete);
        assert_eq!(record.capture_status, status);
        assert_eq!(record.display(), "still running");
        let text = record.render();
        assert!(
            text.starts_with(&format!(
                "[Incomplete output: the run {}]\n[stdout]\n",
                status.as_str()
            )),
            "{text}"
        );
        let uri = record.stream_uri(record.stream("stdout").unwrap());
        assert_eq!(
            read_all_pages(&store, &uri, 1).unwrap(),
            b"partial line 1\npartial"
        );
        assert_eq!(store.record(&record.run_id).unwrap(), record);
    }
}
