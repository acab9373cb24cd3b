//! The assistant frame's view read from the reduced line (`lenient::from_slice_reduced`) is
//! the view read from the line itself, on recorded, mutated and generated lines.

use proptest::prelude::*;

use super::{ASSISTANT_SHAPE, AssistantFrame};
use crate::harness::json::lenient;

const RECORDED: &[&str] = &[
    include_str!("../../../../tests/fixtures/harness/claude/ccagent-claude_response1.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/morpheus-claude_stream.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-tool-turn.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-failure.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/agentrun-killed-tasks-synthetic.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/agentrun-golden-synthetic.jsonl"),
];

fn lines() -> Vec<&'static str> {
    RECORDED
        .iter()
        .flat_map(|s| s.lines())
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// Both reads, as text (a borrowed and an owned string print alike).
fn both(line: &[u8]) -> (String, String) {
    let full = format!("{:?}", lenient::from_slice::<AssistantFrame<'_>>(line));
    let mut buf = Vec::new();
    let reduced = format!(
        "{:?}",
        lenient::from_slice_reduced::<AssistantFrame<'_>>(line, &ASSISTANT_SHAPE, &mut buf)
    );
    (full, reduced)
}

#[test]
fn recorded_assistant_frames_read_the_same_and_shrink() {
    let mut assistant = 0;
    for line in lines() {
        let (full, reduced) = both(line.as_bytes());
        assert_eq!(full, reduced, "{line}");
        if line.contains(r#""type":"assistant""#) && full.starts_with("Some") {
            assistant += 1;
        }
    }
    assert!(assistant > 20);
    // The reduction does remove the bulk the view skips (a Write tool's file content).
    let write = lines()
        .into_iter()
        .find(|l| l.contains(r#""name":"Write""#))
        .expect("a Write tool call");
    let mut buf = Vec::new();
    assert!(crate::harness::scan::reduce(
        write.as_bytes(),
        &ASSISTANT_SHAPE,
        &mut buf
    ));
    assert!(
        buf.len() * 2 < write.len(),
        "{}",
        String::from_utf8_lossy(&buf)
    );
}

/// JSON values built from the view's own keys and others, strings long enough to be emptied.
fn value() -> impl Strategy<Value = serde_json::Value> {
    let key = prop_oneof![
        Just("type"),
        Just("message"),
        Just("model"),
        Just("content"),
        Just("name"),
        Just("text"),
        Just("input"),
        Just("command"),
        Just("file_path"),
        Just("parent_tool_use_id"),
        Just("is_api_error_message"),
        Just("thinking"),
        Just("other"),
    ];
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i32>().prop_map(serde_json::Value::from),
        "[a-z\"\\\\\n é]{0,40}".prop_map(serde_json::Value::String),
        Just(serde_json::Value::String("assistant".into())),
        Just(serde_json::Value::String("tool_use".into())),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..6).prop_map(|kv| {
                serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn generated_frames_read_the_same(
        v in value(),
        dup in proptest::option::of(("type|message|model|other", "[a-z]{0,20}")),
    ) {
        let mut obj = serde_json::Map::new();
        obj.insert("type".into(), "assistant".into());
        obj.insert("message".into(), v);
        let mut line = serde_json::to_string(&serde_json::Value::Object(obj)).expect("json");
        if let Some((k, s)) = dup {
            // A repeated key (the derived view refuses it; the reduction must too).
            line.insert_str(1, &format!(r#""{k}":"{s}","#));
        }
        let (full, reduced) = both(line.as_bytes());
        prop_assert_eq!(full, reduced, "{}", line);
    }

    #[test]
    fn mutated_recorded_lines_read_the_same(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop_oneof![
            Just(b'"'), Just(b'\\'), Just(b'{'), Just(b'}'), Just(b'['), Just(b']'), Just(b','),
            Just(b':'), Just(b' '), Just(b'0'), Just(0xffu8), any::<u8>(),
        ]), 0..3),
    ) {
        let lines = lines();
        let mut line = lines[which.index(lines.len())].as_bytes().to_vec();
        for (at, op, byte) in edits {
            if line.is_empty() { break; }
            let i = at.index(line.len());
            match op {
                0 => line[i] = byte,
                1 => line.insert(i, byte),
                _ => { line.remove(i); }
            }
        }
        let (full, reduced) = both(&line);
        prop_assert_eq!(full, reduced, "{}", String::from_utf8_lossy(&line));
    }
}
