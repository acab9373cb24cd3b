//! Before a compaction retry, every ordinary tool output without an artifact is retained, so
//! each reference in the retry input reads back exactly the output it replaced.

mod common;

use std::time::{Duration, SystemTime};

use agentrun_core::compaction::{
    ARTIFACT_READ_OMITTED, Action, AttemptKind, Claim, Compaction, CompactionConfig, Holds,
    Retention, RetentionFailure, SummarizerFailure, claims, prune,
};
use agentrun_core::digest::Digest;
use agentrun_core::record::RecordOutput;
use agentrun_core::transcript::{Transcript, TranscriptLimits};
use agentrun_core::{ArtifactUri, StreamName};
use agentrun_fs::{GcOptions, Retained, Store};
use serde_json::json;

const D: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fn transcript() -> Transcript {
    let big = "line of build output\n".repeat(5000);
    let doc = json!([
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "make"}},
            {"type": "tool_use", "id": "b", "name": "bash", "input": {"command": "make again"}},
            {"type": "tool_use", "id": "c", "name": "read", "input": {"filePath": format!("artifact://{D}")}},
            {"type": "tool_use", "id": "d", "name": "read", "input": {"filePath": "/etc/hostname"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": big},
            {"type": "tool_result", "tool_use_id": "b", "content": big},
            {"type": "tool_result", "tool_use_id": "c", "content": "artifact page"},
            {"type": "tool_result", "tool_use_id": "d", "content": [{"type": "text", "text": "host"}]}
        ]}
    ]);
    Transcript::from_value(doc, &TranscriptLimits::default()).unwrap()
}

/// One compaction's retention: stores `outputs` and writes the one record.
fn retain_all(store: &Store, outputs: &[Retention]) -> Option<Retained> {
    let mut session = store.begin_retention().unwrap();
    session.retain(outputs).unwrap();
    session.finish().unwrap()
}

fn read_all(store: &agentrun_fs::Store, uri: &ArtifactUri) -> Vec<u8> {
    let mut out = Vec::new();
    store.copy_to(uri, &mut out).unwrap();
    out
}

#[test]
fn every_reference_reads_back_the_output_it_replaced() {
    let (_tmp, store) = common::store();
    let t = transcript();
    let pruned = prune(&t, &Default::default());
    let retained = retain_all(&store, &pruned.retain).unwrap();
    // Two identical bash outputs and a filesystem read: two artifacts; the artifact read none.
    assert_eq!(retained.stored.len(), 2);
    assert_eq!(pruned.references.len(), 3);
    let outputs = ["line of build output\n".repeat(5000), "host".to_owned()];
    for reference in &pruned.references {
        let uri = ArtifactUri::parse(&reference.uri).unwrap();
        let bytes = read_all(&store, &uri);
        let expected = if reference.tool_use_id == "d" {
            &outputs[1]
        } else {
            &outputs[0]
        };
        assert_eq!(bytes, expected.as_bytes(), "{}", reference.tool_use_id);
    }
    // One record keeps them all, so GC keeps them; its output lists them.
    assert_eq!(
        store.records().unwrap(),
        std::slice::from_ref(&retained.run_id)
    );
    let record = store.record(&retained.run_id).unwrap();
    assert_eq!(record.display(), agentrun_fs::RETAINED_DISPLAY);
    assert_eq!(record.keeps, retained.stored);
    let listing: String = retained
        .stored
        .iter()
        .map(|d| format!("artifact://{d}\n"))
        .collect();
    assert_eq!(read_all(&store, &record.output_uri()), listing.as_bytes());
    // The omission marker is never stored.
    for run_id in store.records().unwrap() {
        let record = store.record(&run_id).unwrap();
        assert_ne!(
            read_all(&store, &record.output_uri()),
            ARTIFACT_READ_OMITTED.as_bytes()
        );
    }
}

#[test]
fn the_machine_and_the_store_together_retain_before_the_retry() {
    let (_tmp, store) = common::store();
    let t = transcript();
    let mut c = Compaction::new(&t, CompactionConfig::default());
    let mut order = Vec::new();
    let summary = loop {
        match c.poll_action().unwrap() {
            Action::Summarize(input) if input.kind == AttemptKind::First => {
                order.push("first");
                c.handle_failure(SummarizerFailure::ContextLength {
                    detail: "prompt is too long".into(),
                })
                .unwrap();
            }
            Action::Verify(claims) => {
                order.push("verify");
                let ok: Vec<Claim> = claims.into_iter().filter(|c| store.confirms(c)).collect();
                c.handle_verified(ok).unwrap();
            }
            Action::Retain(outputs) => {
                order.push("retain");
                let mut session = store.begin_retention().unwrap();
                let result = session.retain(&outputs).and_then(|()| session.finish());
                c.handle_retained(result.map(drop).map_err(RetentionFailure::new))
                    .unwrap();
            }
            Action::Summarize(input) => {
                order.push("retry");
                // Every reference the retry input shows resolves in the store.
                for (i, _) in input.text.match_indices("read(filePath=\"artifact://") {
                    let uri = input.text[i + "read(filePath=\"".len()..]
                        .split('"')
                        .next()
                        .unwrap();
                    let Ok(uri) = ArtifactUri::parse(uri) else {
                        continue; // the instructions' example
                    };
                    assert!(!read_all(&store, &uri).is_empty());
                }
                c.handle_summary(b"summary").unwrap();
            }
            Action::Done(done) => break done.summary,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(order, ["first", "retain", "retry"]);
    assert_eq!(summary, "summary");
}

#[test]
fn duplicate_digests_in_one_call_are_stored_once() {
    let (_tmp, store) = common::store();
    let pruned = prune(&transcript(), &Default::default());
    let mut twice = pruned.retain.clone();
    twice.extend(pruned.retain.clone());
    assert_eq!(retain_all(&store, &twice).unwrap().stored.len(), 2);
    assert_eq!(store.records().unwrap().len(), 1);
}

fn claim(uri: &ArtifactUri, output: &[u8]) -> Claim {
    Claim {
        uri: uri.clone(),
        holds: Holds::Output(Digest::of(output)),
    }
}

#[test]
fn a_claim_is_confirmed_only_when_the_store_holds_exactly_that_output() {
    let (_tmp, store) = common::store();
    let output = b"test a ... ok\ntest b ... FAILED\n";
    let single = common::capture_single(&store, output, 7).output_uri();
    assert!(
        store.confirms(&claim(&single, output)),
        "a valid single artifact"
    );
    // A digest nothing in the store holds.
    let bogus = ArtifactUri::new(Digest::of(b"never stored"));
    assert!(!store.confirms(&claim(&bogus, b"never stored")));
    // A present artifact holding other bytes than the output.
    assert!(!store.confirms(&claim(&single, b"test a ... ok\n")));
    // Named output: the stream holding the output is confirmed; a stream the manifest does not
    // declare, the manifest's own digest, and a stream whose object is gone are not.
    let record = common::capture_named(&store, &[("stdout", output), ("stderr", b"warning\n")]);
    let RecordOutput::Named { manifest, .. } = record.output else {
        panic!("named output")
    };
    let stream = |name: &str| ArtifactUri::stream(manifest, StreamName::new(name).unwrap());
    assert!(store.confirms(&claim(&stream("stdout"), output)));
    assert!(!store.confirms(&claim(&stream("stdout"), b"warning\n")));
    assert!(!store.confirms(&claim(&stream("result"), output)));
    assert!(!store.confirms(&claim(&ArtifactUri::new(manifest), output)));
    let stderr_object = record.stream("stderr").unwrap().sha256;
    std::fs::remove_file(common::object_path(&store, &stderr_object)).unwrap();
    assert!(!store.confirms(&claim(&stream("stderr"), b"warning\n")));
    // A reference that only has to resolve (a result that is a reference already).
    let readable = |uri: &ArtifactUri| {
        store.confirms(&Claim {
            uri: uri.clone(),
            holds: Holds::Readable,
        })
    };
    assert!(readable(&single) && readable(&stream("stdout")));
    assert!(!readable(&bogus) && !readable(&stream("stderr")));
}

/// A result naming `artifacts` for `output`, as `agentrun run` reports them.
fn named_result(output: &str, artifacts: &[ArtifactUri]) -> Transcript {
    let artifacts: Vec<String> = artifacts.iter().map(ToString::to_string).collect();
    let doc = json!([
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "make"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": output, "artifacts": artifacts}]}
    ]);
    Transcript::from_value(doc, &TranscriptLimits::default()).unwrap()
}

/// Prunes `t` with the claims the store confirms and retains what it must, as one compaction;
/// returns the references and what the retention kept.
fn prune_against(store: &Store, t: &Transcript) -> (Vec<(String, bool)>, Retained) {
    let mut session = store.begin_retention().unwrap();
    let confirmed = session.confirm(claims(t)).unwrap().into_iter().collect();
    let pruned = prune(t, &confirmed);
    session.retain(&pruned.retain).unwrap();
    let retained = session.finish().unwrap().expect("something is kept");
    let references = pruned
        .references
        .iter()
        .map(|r| (r.uri.clone(), r.existing))
        .collect();
    (references, retained)
}

#[test]
fn transcript_artifacts_are_reused_only_when_they_hold_the_output() {
    let (_tmp, store) = common::store();
    let output = "the real output\n";
    let own = |uri: &str| read_all(&store, &ArtifactUri::parse(uri).unwrap());
    // Valid: reused, nothing retained again.
    let valid = common::capture_single(&store, output.as_bytes(), 64).output_uri();
    let (refs, retained) =
        prune_against(&store, &named_result(output, std::slice::from_ref(&valid)));
    assert_eq!(refs, [(valid.to_string(), true)]);
    assert!(retained.stored.is_empty(), "nothing re-retained");
    // The compaction's record keeps the reused artifact too.
    assert_eq!(retained.kept, std::slice::from_ref(&valid));
    assert_eq!(
        store.record(&retained.run_id).unwrap().keeps,
        [valid.digest]
    );
    // The content is a preview of a readable artifact (what `agentrun run` shows): the shown
    // text is retained for the reference, and the artifact the preview's hints point at is
    // kept by the same record.
    let full = common::capture_single(&store, b"line 1\nline 2\nline 3\n", 64).output_uri();
    let (refs, retained) = prune_against(
        &store,
        &named_result(
            "line 1\n[Truncated. Read more: ...]",
            std::slice::from_ref(&full),
        ),
    );
    assert_eq!(refs.len(), 1);
    assert!(!refs[0].1, "a preview is not the output");
    assert!(retained.kept.contains(&full), "{:?}", retained.kept);
    assert!(
        store
            .record(&retained.run_id)
            .unwrap()
            .keeps
            .contains(&full.digest)
    );
    // Wrong in every way: the output is retained and the reference reads it back.
    let other = common::capture_single(&store, b"something else", 64).output_uri();
    let record = common::capture_named(&store, &[("stdout", b"x")]);
    let missing_stream = ArtifactUri::stream(
        record.output_uri().digest,
        StreamName::new("stderr").unwrap(),
    );
    for wrong in [
        vec![ArtifactUri::new(Digest::of(b"bogus"))],
        vec![other],
        vec![missing_stream],
        vec![valid.clone(), ArtifactUri::new(Digest::of(b"bogus"))],
    ] {
        let (refs, _) = prune_against(&store, &named_result(output, &wrong));
        assert_eq!(refs.len(), 1, "{wrong:?}");
        let (uri, existing) = &refs[0];
        assert!(!existing, "{wrong:?}");
        assert_eq!(own(uri), output.as_bytes(), "{wrong:?}");
    }
}

fn retention(text: &str) -> Retention {
    Retention {
        digest: Digest::of(text.as_bytes()),
        text: text.to_owned(),
    }
}

/// Dates a record's file back, so `gc --expire-records` treats it as old.
fn age_record(store: &Store, run_id: &str, age: Duration) {
    let path = store.root().join("records").join(format!("{run_id}.json"));
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

fn gc_expiring(store: &Store, age: Duration) -> agentrun_fs::GcReport {
    store
        .gc(&GcOptions {
            grace: Duration::ZERO,
            expire_records: Some(age),
            ..GcOptions::default()
        })
        .unwrap()
}

#[test]
fn one_record_keeps_every_reference_and_they_expire_together() {
    let (_tmp, store) = common::store();
    let day = Duration::from_secs(86_400);
    // An artifact of an earlier run the transcript names, whose own record is old.
    let earlier = common::capture_single(&store, b"earlier output\n", 64);
    let existing = earlier.output_uri();
    let mut session = store.begin_retention().unwrap();
    let confirming = vec![claim(&existing, b"earlier output\n")];
    assert_eq!(session.confirm(confirming.clone()).unwrap(), confirming);
    let outputs: Vec<Retention> = (0..50)
        .map(|i| retention(&format!("output {i}\n")))
        .collect();
    session.retain(&outputs).unwrap();
    let retained = session.finish().unwrap().unwrap();
    assert_eq!(retained.stored.len(), 50);
    assert_eq!(retained.kept.len(), 51);
    // Two records in all: the earlier run's and the compaction's one.
    assert_eq!(store.records().unwrap().len(), 2);
    // The earlier run's record expires; the compaction's record still keeps its artifact.
    age_record(&store, &earlier.run_id, 2 * day);
    let report = gc_expiring(&store, day);
    assert_eq!(report.records_expired, 1);
    let resolves = |uri: &ArtifactUri| store.copy_to(uri, &mut std::io::sink()).is_ok();
    assert!(retained.kept.iter().all(resolves), "all kept by one record");
    // When the compaction's record expires, all its references stop resolving together.
    age_record(&store, &retained.run_id, 2 * day);
    let report = gc_expiring(&store, day);
    assert_eq!(report.records_expired, 1);
    assert!(!retained.kept.iter().any(resolves), "expired together");
}

#[test]
fn a_gc_during_the_retention_removes_nothing_it_stored_or_confirmed() {
    let (_tmp, store) = common::store();
    let day = Duration::from_secs(86_400);
    let earlier = common::capture_single(&store, b"earlier output\n", 64);
    age_record(&store, &earlier.run_id, 2 * day);
    let mut session = store.begin_retention().unwrap();
    // Confirmed, then its own record expires in a GC with no grace: the session protects it.
    let confirming = vec![claim(&earlier.output_uri(), b"earlier output\n")];
    assert_eq!(session.confirm(confirming.clone()).unwrap(), confirming);
    session
        .retain(&[retention("stored before the gc\n")])
        .unwrap();
    let report = gc_expiring(&store, day);
    assert_eq!(report.records_expired, 1);
    assert_eq!(report.objects_removed, 0, "{report:?}");
    let retained = session.finish().unwrap().unwrap();
    let report = gc_expiring(&store, day);
    assert_eq!(report.objects_removed, 0, "{report:?}");
    for uri in &retained.kept {
        assert!(!read_all(&store, uri).is_empty(), "{uri}");
    }
    // Nothing to keep: no record at all.
    let empty = store.begin_retention().unwrap();
    assert_eq!(empty.finish().unwrap(), None);
    assert_eq!(
        store.records().unwrap(),
        std::slice::from_ref(&retained.run_id)
    );
}

#[test]
fn every_claim_and_output_of_a_batch_is_protected_when_the_call_returns() {
    let (_tmp, store) = common::store();
    let day = Duration::from_secs(86_400);
    // Several earlier runs, each the only keeper of its artifact, all about to expire.
    let texts: Vec<String> = (0..5).map(|i| format!("earlier output {i}\n")).collect();
    let earlier: Vec<_> = texts
        .iter()
        .map(|t| common::capture_single(&store, t.as_bytes(), 64))
        .collect();
    for record in &earlier {
        age_record(&store, &record.run_id, 2 * day);
    }
    let mut session = store.begin_retention().unwrap();
    // One call confirms them all, and one that names nothing in the store.
    let mut claims: Vec<Claim> = earlier
        .iter()
        .zip(&texts)
        .map(|(r, t)| claim(&r.output_uri(), t.as_bytes()))
        .collect();
    let absent = claim(&ArtifactUri::new(Digest::of(b"absent")), b"absent");
    claims.insert(2, absent);
    let confirmed = session.confirm(claims.clone()).unwrap();
    claims.remove(2);
    assert_eq!(
        confirmed, claims,
        "confirmed in order, the absent one left out"
    );
    // Several outputs in one call, one of them twice.
    let outputs: Vec<Retention> = ["a\n", "b\n", "a\n", "c\n"]
        .iter()
        .map(|t| retention(t))
        .collect();
    session.retain(&outputs).unwrap();
    // Every record of the earlier runs expires and no grace keeps young objects: only the
    // session's protection keeps the confirmed artifacts (each claim of the batch, not only
    // the first) and the stored outputs.
    let report = gc_expiring(&store, day);
    assert_eq!(report.records_expired, 5);
    assert_eq!(report.objects_removed, 0, "{report:?}");
    for claim in &claims {
        assert!(!read_all(&store, &claim.uri).is_empty(), "{}", claim.uri);
    }
    for output in &outputs {
        let uri = ArtifactUri::new(output.digest);
        assert_eq!(read_all(&store, &uri), output.text.as_bytes());
    }
    // Then the record keeps them, in one record.
    let retained = session.finish().unwrap().unwrap();
    assert_eq!(retained.stored.len(), 3);
    assert_eq!(retained.kept.len(), 8);
    assert_eq!(gc_expiring(&store, day).objects_removed, 0);
}

#[test]
fn an_output_whose_bytes_are_not_its_digest_is_refused_and_protected_like_the_others() {
    let (_tmp, store) = common::store();
    let mut session = store.begin_retention().unwrap();
    let wrong = Retention {
        digest: Digest::of(b"what the reference names"),
        text: "what was handed over\n".to_owned(),
    };
    let error = session
        .retain(&[retention("fine\n"), wrong.clone()])
        .unwrap_err();
    assert!(
        matches!(error, agentrun_fs::RetainError::DigestMismatch { expected, .. } if expected == wrong.digest),
        "{error}"
    );
    // What was published is protected while the session lives, the stray object included
    // (its digest was not in the batch protected up front).
    let stored = ArtifactUri::new(Digest::of(wrong.text.as_bytes()));
    assert_eq!(gc_expiring(&store, Duration::ZERO).objects_removed, 0);
    assert_eq!(read_all(&store, &stored), wrong.text.as_bytes());
    drop(session);
}

#[test]
fn the_record_that_keeps_artifacts_is_v2_and_gc_keeps_what_it_keeps() {
    let (_tmp, store) = common::store();
    let record_file = |run_id: &str| store.root().join("records").join(format!("{run_id}.json"));
    let format_on_disk = |run_id: &str| {
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(record_file(run_id)).unwrap()).unwrap();
        json["format"].as_str().unwrap().to_owned()
    };
    // An earlier run, whose record keeps only its output: v1, readable by older agentruns.
    let earlier = common::capture_single(&store, b"earlier output\n", 64);
    assert_eq!(format_on_disk(&earlier.run_id), "agentrun.record.v1");
    let mut session = store.begin_retention().unwrap();
    let confirming = vec![claim(&earlier.output_uri(), b"earlier output\n")];
    assert_eq!(session.confirm(confirming.clone()).unwrap(), confirming);
    let retained = session.finish().unwrap().unwrap();
    // The compaction's record keeps the earlier artifact: v2, so an older agentrun refuses it
    // rather than ignore what it keeps.
    assert_eq!(format_on_disk(&retained.run_id), "agentrun.record.v2");
    assert_eq!(
        store.record(&retained.run_id).unwrap().keeps,
        [earlier.output_uri().digest]
    );
    // The earlier record is gone: only the v2 record's keeps root the artifact.
    std::fs::remove_file(record_file(&earlier.run_id)).unwrap();
    let report = store
        .gc(&GcOptions {
            grace: Duration::ZERO,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(report.objects_removed, 0, "{report:?}");
    assert_eq!(read_all(&store, &earlier.output_uri()), b"earlier output\n");
}
