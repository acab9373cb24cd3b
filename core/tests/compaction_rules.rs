//! The eight compaction rules, one test each, plus the structural recognition cases, driven
//! through the public `Compaction` machine and `prune`.

use std::collections::HashSet;

use agentrun_core::ArtifactUri;
use agentrun_core::compaction::{
    ARTIFACT_READ_OMITTED, Action, AttemptKind, AttemptResult, Claim, Compacted, Compaction,
    CompactionConfig, CompactionError, Failed, Holds, RetentionFailure, SummarizerFailure,
    SummarizerInput, Trigger, claims, is_artifact_read, prune, reference_text,
};
use agentrun_core::digest::Digest;
use agentrun_core::transcript::{Block, Transcript, TranscriptLimits};
use serde_json::{Value, json};

const D: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fn transcript(v: Value) -> Transcript {
    Transcript::from_value(v, &TranscriptLimits::default()).unwrap()
}

fn call(id: &str, name: &str, input: Value) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": input}]})
}

fn result(id: &str, content: Value) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": content}]})
}

/// A build log long enough that referencing it saves space.
fn bash_output() -> String {
    format!(
        "BASH OUTPUT line 1\nline 2\n{}",
        "warning: unused\n".repeat(200)
    )
}

/// A transcript with a prior summary, an ordinary bash output, a filesystem read, an artifact
/// read (with metadata and attachments) and a recent suffix of two messages.
fn sample() -> Transcript {
    let mut artifact_result = result(
        "t3",
        json!([{"type": "text", "text": "ARTIFACT PAGE"}, {"type": "image", "source": {"data": "AAAA"}}]),
    );
    let block = &mut artifact_result["content"][0];
    block["is_error"] = json!(false);
    block["metadata"] = json!({"total_lines": 10});
    block["attachments"] = json!([{"name": "a.png"}]);
    block["messages"] = json!([{"role": "user", "content": "emitted"}]);
    transcript(json!({
        "summary": "PRIOR SUMMARY",
        "discarded_log": "OLD DISCARDED TURN",
        "messages": [
            {"role": "user", "content": "fix the build"},
            call("t1", "bash", json!({"command": "make"})),
            result("t1", json!(bash_output())),
            call("t2", "read", json!({"filePath": "/src/main.rs"})),
            result("t2", json!("FILE CONTENT")),
            call("t3", "read", json!({"filePath": format!("artifact://{D}/stdout"), "offset": 0})),
            artifact_result,
            {"role": "assistant", "content": "RECENT ANSWER"},
            {"role": "user", "content": "RECENT QUESTION"}
        ],
        "recent_start": 7
    }))
}

/// No claim confirmed.
fn none() -> HashSet<Claim> {
    HashSet::new()
}

/// The claims a store holding `store` (single-output artifacts) confirms.
fn confirmed(claims: &[Claim], store: &[(Digest, String)]) -> HashSet<Claim> {
    let has = |d: &Digest| store.iter().any(|(x, _)| x == d);
    claims
        .iter()
        .filter(|c| {
            c.uri.stream.is_none()
                && has(&c.uri.digest)
                && match c.holds {
                    Holds::Output(d) => d == c.uri.digest,
                    _ => true,
                }
        })
        .cloned()
        .collect()
}

/// Drives the machine: answers each summarizer input with `answer(kind, text)`, checks claims
/// against `store` and stores retained outputs in it.
fn drive(
    t: &Transcript,
    config: CompactionConfig,
    store: &mut Vec<(Digest, String)>,
    mut answer: impl FnMut(&SummarizerInput) -> Result<String, SummarizerFailure>,
) -> (Result<Compacted, Failed>, Vec<SummarizerInput>) {
    let mut c = Compaction::new(t, config);
    let mut inputs = Vec::new();
    loop {
        match c
            .poll_action()
            .expect("the machine always has a next action here")
        {
            Action::Summarize(input) => {
                match answer(&input) {
                    Ok(summary) => c.handle_summary(summary.as_bytes()).unwrap(),
                    Err(failure) => c.handle_failure(failure).unwrap(),
                }
                inputs.push(input);
            }
            Action::Verify(claims) => {
                let ok = confirmed(&claims, store);
                c.handle_verified(ok).unwrap();
            }
            Action::Retain(outputs) => {
                for r in outputs {
                    assert_eq!(Digest::of(r.text.as_bytes()), r.digest);
                    store.push((r.digest, r.text));
                }
                c.handle_retained(Ok(())).unwrap();
            }
            Action::Done(done) => {
                assert_eq!(c.poll_action(), None);
                return (Ok(*done), inputs);
            }
            Action::Failed(failed) => {
                assert_eq!(c.poll_action(), None);
                return (Err(failed), inputs);
            }
            _ => unreachable!("no other actions exist"),
        }
    }
}

/// A scripted summarizer.
type Summarizer = fn(&SummarizerInput) -> Result<String, SummarizerFailure>;

fn too_long(_: &SummarizerInput) -> SummarizerFailure {
    SummarizerFailure::ContextLength {
        detail: "prompt is too long".into(),
    }
}

/// First attempt fails on size, retry succeeds.
fn retry_run(t: &Transcript) -> (Compacted, Vec<SummarizerInput>, Vec<(Digest, String)>) {
    let mut store = Vec::new();
    let (outcome, inputs) = drive(t, CompactionConfig::default(), &mut store, |i| {
        if i.kind == AttemptKind::First {
            Err(too_long(i))
        } else {
            Ok("NEW SUMMARY".into())
        }
    });
    (outcome.unwrap(), inputs, store)
}

#[test]
fn rule_1_first_attempt_includes_the_entire_active_history() {
    let t = sample();
    let mut store = Vec::new();
    let (outcome, inputs) = drive(&t, CompactionConfig::default(), &mut store, |_| {
        Ok("S".into())
    });
    let compacted = outcome.unwrap();
    assert_eq!(inputs.len(), 1);
    let first = &inputs[0];
    assert_eq!(first.kind, AttemptKind::First);
    for part in [
        "PRIOR SUMMARY",
        "fix the build",
        "BASH OUTPUT line 1",
        "FILE CONTENT",
        "ARTIFACT PAGE",
        "RECENT ANSWER",
        "RECENT QUESTION",
    ] {
        assert!(first.text.contains(part), "first input lacks {part}");
    }
    // Discarded logs stay discarded: fields outside the active history are never rendered.
    assert!(!first.text.contains("OLD DISCARDED TURN"));
    assert!(store.is_empty(), "nothing is retained without a retry");
    // The result: the new summary, then the recent suffix verbatim.
    assert_eq!(compacted.transcript.summary.as_deref(), Some("S"));
    assert_eq!(compacted.transcript.messages, t.recent_suffix());
}

#[test]
fn rule_2_only_a_size_failure_permits_one_pruned_retry() {
    let t = sample();
    // A provider context-length error: one retry.
    let (compacted, inputs, _) = retry_run(&t);
    assert_eq!(
        inputs.iter().map(|i| i.kind).collect::<Vec<_>>(),
        [AttemptKind::First, AttemptKind::Retry]
    );
    assert_eq!(compacted.attempts.len(), 2);
    // A local fit rejection: the summarizer never sees the first input.
    let first_len = sample_first_len(&t);
    let mut store = Vec::new();
    let config = CompactionConfig::default().max_input_bytes(Some(first_len - 1));
    let (outcome, inputs) = drive(&t, config, &mut store, |_| Ok("S".into()));
    let compacted = outcome.unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].kind, AttemptKind::Retry);
    assert!(matches!(
        compacted.attempts[0].result,
        AttemptResult::DoesNotFit { .. }
    ));
    // Unrelated errors and parent overflow alone never prune.
    for trigger in [Trigger::Requested, Trigger::ParentOverflow] {
        let mut store = Vec::new();
        let config = CompactionConfig::default().trigger(trigger);
        let (outcome, inputs) = drive(&t, config, &mut store, |_| {
            Err(SummarizerFailure::Other {
                detail: "rate limited".into(),
            })
        });
        let failed = outcome.unwrap_err();
        assert_eq!(inputs.len(), 1);
        assert_eq!(inputs[0].kind, AttemptKind::First);
        assert!(
            inputs[0].text.contains("BASH OUTPUT"),
            "first input is unpruned"
        );
        assert!(matches!(failed.error, CompactionError::Summarizer { .. }));
        assert!(store.is_empty());
    }
    // A second size failure ends it: no third attempt.
    let mut store = Vec::new();
    let (outcome, inputs) = drive(&t, CompactionConfig::default(), &mut store, |i| {
        Err(too_long(i))
    });
    assert_eq!(inputs.len(), 2);
    assert!(matches!(
        outcome.unwrap_err().error,
        CompactionError::RetryTooLarge { .. }
    ));
}

fn sample_first_len(t: &Transcript) -> usize {
    let mut c = Compaction::new(t, CompactionConfig::default());
    match c.poll_action() {
        Some(Action::Summarize(i)) => i.text.len(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn rule_3_the_retry_replaces_ordinary_tool_output_with_artifact_references() {
    let t = sample();
    let (compacted, inputs, store) = retry_run(&t);
    let retry = &inputs[1].text;
    for (output, what) in [
        (bash_output(), "bash"),
        ("FILE CONTENT".to_owned(), "filesystem read"),
    ] {
        assert!(
            !retry.contains(&output),
            "{what} output is still in the retry"
        );
        let digest = Digest::of(output.as_bytes());
        assert!(retry.contains(&reference_text(&ArtifactUri::new(digest))));
        assert!(store.contains(&(digest, output.clone())), "{what} retained");
    }
    // Short and recent outputs too: a one-byte result is referenced like a large one.
    let tiny = transcript(json!([
        call("t", "bash", json!({})),
        result("t", json!("x"))
    ]));
    let (_, inputs, store) = retry_run(&tiny);
    assert!(!inputs[1].text.contains("\nx\n"));
    assert_eq!(store, [(Digest::of(b"x"), "x".to_owned())]);
    assert_eq!(compacted.references.len(), 2);
    assert!(compacted.references.iter().all(|r| !r.existing));
}

#[test]
fn rule_4_artifact_read_output_is_omitted_entirely_with_pairing_intact() {
    let t = sample();
    let pruned = prune(&t, &none());
    let Block::ToolResult(r) = &pruned.snapshot.messages[6].blocks()[0] else {
        panic!("the result block stays a result block");
    };
    assert_eq!(r.tool_use_id, "t3", "paired to its call");
    assert_eq!(r.content, Some(json!(ARTIFACT_READ_OMITTED)));
    assert_eq!(r.is_error, None);
    assert!(
        r.extra.is_empty(),
        "metadata, attachments and messages dropped"
    );
    assert_eq!(pruned.omitted, 1);
    let (_, inputs, store) = retry_run(&t);
    let retry = &inputs[1].text;
    for gone in ["ARTIFACT PAGE", "AAAA", "a.png", "emitted", "total_lines"] {
        assert!(!retry.contains(gone), "{gone} survived");
    }
    assert!(!store.iter().any(|(_, text)| text.contains("ARTIFACT PAGE")));
    // Any size and any stream: a bare URI and a one-line page are omitted just the same.
    let small = transcript(json!([
        call("a", "read", json!({"filePath": format!("artifact://{D}")})),
        result("a", json!("1")),
    ]));
    let pruned = prune(&small, &none());
    assert_eq!(pruned.omitted, 1);
    assert!(pruned.retain.is_empty());
}

#[test]
fn rule_5_an_ordinary_filesystem_read_is_recognized_structurally() {
    let read = |input: Value| agentrun_core::transcript::ToolUse {
        id: "x".into(),
        name: "read".into(),
        input,
        extra: Default::default(),
    };
    assert!(is_artifact_read(&read(
        json!({"filePath": format!("artifact://{D}")})
    )));
    // Each of these takes the ordinary path.
    let ordinary = [
        read(json!({"filePath": "/home/me/artifact.txt"})),
        read(json!(format!("{{\"filePath\": \"artifact://{D}\"}}"))),
        read(json!({"path": format!("artifact://{D}")})),
        read(json!({"filePath": format!("see artifact://{D}")})),
        read(json!({"filePath": "artifact://not-a-digest"})),
        read(json!({"filePath": [format!("artifact://{D}")]})),
        read(json!(null)),
    ];
    for call in &ordinary {
        assert!(!is_artifact_read(call), "{:?}", call.input);
    }
    let renamed = agentrun_core::transcript::ToolUse {
        name: "cat".into(),
        ..read(json!({"filePath": format!("artifact://{D}")}))
    };
    assert!(!is_artifact_read(&renamed));
    // Through prune: every one is retained and referenced, none omitted.
    let mut messages = Vec::new();
    for (i, call) in ordinary.iter().chain([&renamed]).enumerate() {
        let id = format!("c{i}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": call.name, "input": call.input}]}));
        messages.push(result(&id, json!(format!("output {i}"))));
    }
    let pruned = prune(&transcript(Value::Array(messages)), &none());
    assert_eq!(pruned.omitted, 0);
    assert_eq!(pruned.retain.len(), ordinary.len() + 1);
}

#[test]
fn rule_6_the_marker_replaces_artifact_read_output_and_is_never_retained() {
    let t = sample();
    let (_, inputs, store) = retry_run(&t);
    assert!(inputs[1].text.contains(ARTIFACT_READ_OMITTED));
    assert!(
        store
            .iter()
            .all(|(_, text)| !text.contains(ARTIFACT_READ_OMITTED))
    );
    // Pruning the snapshot again retains nothing new, so the marker never becomes an artifact.
    let once = prune(&t, &none());
    let stored: Vec<(Digest, String)> = once
        .retain
        .iter()
        .map(|r| (r.digest, r.text.clone()))
        .collect();
    let twice = prune(&once.snapshot, &confirmed(&claims(&once.snapshot), &stored));
    assert!(twice.retain.is_empty());
    assert_eq!(twice.snapshot, once.snapshot);
}

#[test]
fn rule_7_pruning_never_mutates_history_and_failures_keep_the_context() {
    let t = sample();
    let before = t.clone();
    let (compacted, _, _) = retry_run(&t);
    assert_eq!(t, before, "saved history untouched by a successful retry");
    assert_eq!(compacted.transcript.messages, before.recent_suffix());
    let failures: [Summarizer; 4] = [
        |_| Ok(String::new()),
        |_| Ok("  \n\t".into()),
        |_| {
            Err(SummarizerFailure::Other {
                detail: "crashed".into(),
            })
        },
        |i| {
            if i.kind == AttemptKind::First {
                Err(too_long(i))
            } else {
                Ok(String::new())
            }
        },
    ];
    for answer in failures {
        let mut store = Vec::new();
        let (outcome, _) = drive(&t, CompactionConfig::default(), &mut store, answer);
        assert!(outcome.is_err());
        assert_eq!(t, before);
    }
    // Non-text output is invalid.
    let mut c = Compaction::new(&t, CompactionConfig::default());
    let _ = c.poll_action();
    c.handle_summary(&[0xff, 0xfe]).unwrap();
    let Some(Action::Failed(failed)) = c.poll_action() else {
        panic!("non-text output must fail");
    };
    assert!(matches!(
        failed.error,
        CompactionError::InvalidSummary { .. }
    ));
    assert_eq!(t, before);
}

#[test]
fn rule_8_every_hint_uses_read_with_the_public_artifact_uri() {
    let t = sample();
    let (_, inputs, _) = retry_run(&t);
    // The instructions mention the syntax; the hints are those inside the transcript.
    let retry = inputs[1].text.split_once("<transcript>").unwrap().1;
    let hints: Vec<&str> = retry
        .match_indices("read(filePath=\"")
        .map(|(i, _)| &retry[i..])
        .collect();
    assert_eq!(hints.len(), 2);
    for hint in hints {
        let uri = hint["read(filePath=\"".len()..].split('"').next().unwrap();
        let parsed = ArtifactUri::parse(uri).expect("a public artifact URI");
        assert_eq!(parsed.to_string(), uri);
        assert!(!uri.contains("sha256/"));
    }
}

/// A result whose output is the preview of an artifact `agentrun run` reported.
fn with_artifacts(content: &str, artifacts: &[String]) -> Transcript {
    transcript(json!([
        call("t", "bash", json!({"command": "seq 1000000"})),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
            "content": content, "artifacts": artifacts}]}
    ]))
}

#[test]
fn confirmed_existing_artifacts_are_referenced_instead_of_retained_again() {
    let output = "1\n2\n3\n";
    let uri = ArtifactUri::new(Digest::of(output.as_bytes()));
    let t = with_artifacts(output, &[uri.to_string()]);
    let claims = claims(&t);
    assert_eq!(
        claims,
        [Claim {
            uri: uri.clone(),
            holds: Holds::Output(Digest::of(output.as_bytes())),
        }]
    );
    let pruned = prune(&t, &claims.iter().cloned().collect());
    assert!(pruned.retain.is_empty());
    assert_eq!(pruned.references.len(), 1);
    assert!(pruned.references[0].existing);
    assert_eq!(pruned.references[0].uri, uri.to_string());
    // The machine still hands out a retention, with nothing to store, so the caller keeps the
    // reused artifact with the compaction.
    let mut c = Compaction::new(&t, CompactionConfig::default());
    let _ = c.poll_action();
    c.handle_failure(too_long_plain()).unwrap();
    let Some(Action::Verify(asked)) = c.poll_action() else {
        panic!()
    };
    c.handle_verified(asked).unwrap();
    assert_eq!(c.poll_action(), Some(Action::Retain(Vec::new())));
}

#[test]
fn unconfirmed_artifacts_are_never_referenced_the_output_is_retained() {
    // A digest nothing holds, and a stream of a manifest: unless the store confirms them, the
    // reference would not read back this output.
    let bogus = format!("artifact://{D}");
    let stream = format!("artifact://{D}/stdout");
    for artifacts in [
        vec![bogus.clone()],
        vec![stream.clone()],
        vec![bogus, stream],
    ] {
        let t = with_artifacts("the output", &artifacts);
        let pruned = prune(&t, &none());
        let digest = Digest::of(b"the output");
        assert_eq!(pruned.retain.len(), 1);
        assert_eq!(pruned.retain[0].digest, digest);
        assert_eq!(pruned.references.len(), 1);
        assert_eq!(
            pruned.references[0].uri,
            ArtifactUri::new(digest).to_string()
        );
        assert!(!pruned.references[0].existing);
        // One of two confirmed is not enough: every named artifact must hold the output.
        if artifacts.len() == 2 {
            let first_only: HashSet<Claim> = claims(&t).into_iter().take(1).collect();
            assert_eq!(prune(&t, &first_only).retain.len(), 1);
        }
    }
    // Through the machine: the claims are handed out before the retention, and an unconfirmed
    // one leads to the output being retained.
    let t = with_artifacts("the output", &[format!("artifact://{D}")]);
    let mut c = Compaction::new(&t, CompactionConfig::default());
    let Some(Action::Summarize(_)) = c.poll_action() else {
        panic!()
    };
    assert!(c.handle_verified(none()).is_err(), "no check is due yet");
    c.handle_failure(too_long_plain()).unwrap();
    let Some(Action::Verify(asked)) = c.poll_action() else {
        panic!("the claims are checked first")
    };
    assert_eq!(asked, claims(&t));
    assert_eq!(c.poll_action(), None, "waiting for the check");
    c.handle_verified(none()).unwrap();
    let Some(Action::Retain(outputs)) = c.poll_action() else {
        panic!()
    };
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].text, "the output");
}

#[test]
fn a_pruned_snapshot_gives_nothing_to_retry() {
    // Compacting a snapshot again: its references stand (their artifacts resolve), so the
    // retry input would be the first input again.
    let t = sample();
    let once = prune(&t, &none());
    let mut store: Vec<(Digest, String)> = once
        .retain
        .iter()
        .map(|r| (r.digest, r.text.clone()))
        .collect();
    let (outcome, inputs) = drive(
        &once.snapshot,
        CompactionConfig::default(),
        &mut store,
        |i| Err(too_long(i)),
    );
    assert_eq!(inputs.len(), 1);
    assert!(matches!(
        outcome.unwrap_err().error,
        CompactionError::NothingToPrune { .. }
    ));
}

#[test]
fn nothing_to_prune_fails_without_a_pointless_retry() {
    let t = transcript(json!([{"role": "user", "content": "a long question"}]));
    let mut store = Vec::new();
    let (outcome, inputs) = drive(&t, CompactionConfig::default(), &mut store, |i| {
        Err(too_long(i))
    });
    assert_eq!(inputs.len(), 1);
    assert!(matches!(
        outcome.unwrap_err().error,
        CompactionError::NothingToPrune { .. }
    ));
}

#[test]
fn handle_calls_out_of_order_are_refused() {
    let t = sample();
    let mut c = Compaction::new(&t, CompactionConfig::default());
    assert!(c.handle_summary(b"x").is_err());
    assert!(c.handle_retained(Ok(())).is_err());
    let Some(Action::Summarize(_)) = c.poll_action() else {
        panic!()
    };
    assert_eq!(c.poll_action(), None, "waiting for the summarizer");
    assert!(c.handle_retained(Ok(())).is_err());
    c.handle_failure(too_long_plain()).unwrap();
    let Some(Action::Retain(outputs)) = c.poll_action() else {
        panic!()
    };
    assert_eq!(outputs.len(), 2);
    assert!(c.handle_summary(b"x").is_err());
    c.handle_retained(Err("disk full".into())).unwrap();
    let Some(Action::Failed(failed)) = c.poll_action() else {
        panic!()
    };
    assert_eq!(failed.error, CompactionError::Retention("disk full".into()));
}

/// A failed retention keeps the caller's error as the source of the compaction's error, so a
/// caller can tell an I/O error from a store error and report the whole chain.
#[test]
fn a_failed_retention_keeps_the_callers_error_as_its_source() {
    let t = sample();
    let mut c = Compaction::new(&t, CompactionConfig::default());
    let Some(Action::Summarize(_)) = c.poll_action() else {
        panic!()
    };
    c.handle_failure(too_long_plain()).unwrap();
    let Some(Action::Retain(_)) = c.poll_action() else {
        panic!()
    };
    let cause = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device");
    c.handle_retained(Err(RetentionFailure::new(cause)))
        .unwrap();
    let Some(Action::Failed(failed)) = c.poll_action() else {
        panic!()
    };
    let source = std::error::Error::source(&failed.error).expect("the retention failure");
    assert_eq!(source.to_string(), "no space left on device");
    let retention = source
        .downcast_ref::<RetentionFailure>()
        .expect("a RetentionFailure");
    let io = retention
        .get_ref()
        .downcast_ref::<std::io::Error>()
        .expect("the caller's own error");
    assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
}

fn too_long_plain() -> SummarizerFailure {
    SummarizerFailure::ContextLength {
        detail: "too long".into(),
    }
}

/// The summarizer input is allocated once at its exact size (a string grown by doubling can
/// hold twice the text, and the input can be as large as the transcript).
#[test]
fn the_rendered_input_is_allocated_at_its_exact_size() {
    let mut messages = vec![json!({"role": "user", "content": "start ✓"})];
    for i in 0..200 {
        messages.push(call(
            &format!("t{i}"),
            "bash",
            json!({"command": format!("make {i}")}),
        ));
        messages.push(result(
            &format!("t{i}"),
            json!(format!("output {i}\n").repeat(i)),
        ));
    }
    messages.push(json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "…"}, {"type": "image"}]}));
    let t = transcript(json!({"summary": "before", "messages": messages}));
    let text = agentrun_core::compaction::render("Summarize.", &t);
    assert_eq!(text.capacity(), text.len());
    assert!(text.starts_with("Summarize.\n\n<transcript>\n[summary of the earlier conversation]\nbefore\n[user]\nstart ✓\n"));
    assert!(
        text.ends_with("[thinking]\n…\n[image block]\n</transcript>\n"),
        "{}",
        &text[text.len() - 80..]
    );
}
