//! Before a compaction retry, every ordinary tool output without an artifact is retained, so
//! each reference in the retry input reads back exactly the output it replaced.

mod common;

use agentrun_core::ArtifactUri;
use agentrun_core::compaction::{
    ARTIFACT_READ_OMITTED, Action, AttemptKind, Compaction, CompactionConfig, SummarizerFailure,
    prune,
};
use agentrun_core::transcript::{Transcript, TranscriptLimits};
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
    let pruned = prune(&t);
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
    let pruned = prune(&transcript());
    let mut twice = pruned.retain.clone();
    twice.extend(pruned.retain.clone());
    assert_eq!(store.retain_outputs(&twice).unwrap().len(), 2);
    assert_eq!(store.records().unwrap().len(), 2);
}
