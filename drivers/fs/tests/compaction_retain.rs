//! Before a compaction retry, every ordinary tool output without an artifact is retained, so
//! each reference in the retry input reads back exactly the output it replaced.

mod common;

use agentrun_core::compaction::{
    ARTIFACT_READ_OMITTED, Action, AttemptKind, Claim, Compaction, CompactionConfig, Holds,
    SummarizerFailure, claims, prune,
};
use agentrun_core::digest::Digest;
use agentrun_core::record::RecordOutput;
use agentrun_core::transcript::{Transcript, TranscriptLimits};
use agentrun_core::{ArtifactUri, StreamName};
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
    let retained = store.retain_outputs(&pruned.retain).unwrap();
    // Two identical bash outputs and a filesystem read: two artifacts; the artifact read none.
    assert_eq!(retained.len(), 2);
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
    // Each retained output has a record, so GC keeps it.
    for r in &retained {
        let record = store.record(&r.run_id).unwrap();
        assert_eq!(record.output_uri(), ArtifactUri::new(r.digest));
        assert_eq!(record.display(), agentrun_fs::RETAINED_DISPLAY);
    }
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
                let result = store.retain_outputs(&outputs).map(drop);
                c.handle_retained(result.map_err(|e| e.to_string()))
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
    assert_eq!(store.retain_outputs(&twice).unwrap().len(), 2);
    assert_eq!(store.records().unwrap().len(), 2);
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

/// Prunes `t` with the claims the store confirms and retains what it must; returns the
/// references and how many outputs were stored.
fn prune_against(store: &agentrun_fs::Store, t: &Transcript) -> (Vec<(String, bool)>, usize) {
    let confirmed = claims(t)
        .into_iter()
        .filter(|c| store.confirms(c))
        .collect();
    let pruned = prune(t, &confirmed);
    let retained = store.retain_outputs(&pruned.retain).unwrap();
    let references = pruned
        .references
        .iter()
        .map(|r| (r.uri.clone(), r.existing))
        .collect();
    (references, retained.len())
}

#[test]
fn transcript_artifacts_are_reused_only_when_they_hold_the_output() {
    let (_tmp, store) = common::store();
    let output = "the real output\n";
    let own = |uri: &str| read_all(&store, &ArtifactUri::parse(uri).unwrap());
    // Valid: reused, nothing retained again.
    let valid = common::capture_single(&store, output.as_bytes(), 64).output_uri();
    let records_before = store.records().unwrap().len();
    let (refs, stored) = prune_against(&store, &named_result(output, std::slice::from_ref(&valid)));
    assert_eq!(refs, [(valid.to_string(), true)]);
    assert_eq!(stored, 0);
    assert_eq!(
        store.records().unwrap().len(),
        records_before,
        "nothing re-retained"
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
