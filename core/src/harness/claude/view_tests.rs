//! The assistant frame's view read through the scan's index (`lenient::from_checked`) is the
//! view `serde_json` reads from the line itself, on recorded, mutated and generated lines.

use proptest::prelude::*;

use super::views::ErrorTextFrame;
use super::{AssistantFrame, FrameSource};
use crate::harness::json::lenient;
use crate::harness::scan;

const RECORDED: &[&str] = &[
    include_str!("../../../../tests/fixtures/harness/claude/ccagent-claude_response1.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/morpheus-claude_stream.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-tool-turn.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-failure.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-auth-401.jsonl"),
    include_str!(
        "../../../../tests/fixtures/harness/claude/claude-code-2.1.332-overloaded-529.jsonl"
    ),
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

/// Both reads, as text (a borrowed and an owned string print alike): the frame's view, then
/// the view of its text blocks that an API error is read again with.
fn both(line: &[u8]) -> (String, String) {
    let mut scratch = scan::Scratch::default();
    let checked = scan::check(line, &mut scratch);
    let full = format!(
        "{:?} {:?}",
        lenient::from_slice::<AssistantFrame<'_>>(line),
        lenient::from_slice::<ErrorTextFrame<'_>>(line)
    );
    let fast = format!(
        "{:?} {:?}",
        lenient::from_checked::<AssistantFrame<'_>>(line, checked.as_ref()),
        lenient::from_checked::<ErrorTextFrame<'_>>(line, checked.as_ref())
    );
    (full, fast)
}

#[test]
fn recorded_assistant_frames_read_the_same_through_the_index() {
    let mut assistant = 0;
    for line in lines() {
        let (full, fast) = both(line.as_bytes());
        assert_eq!(full, fast, "{line}");
        if line.contains(r#""type":"assistant""#) && full.starts_with("Some") {
            assistant += 1;
            // The recorded frames do take the index.
            assert!(
                scan::check(line.as_bytes(), &mut scan::Scratch::default()).is_some(),
                "{line}"
            );
        }
    }
    assert!(assistant > 20);
}

#[test]
fn an_api_error_frame_keeps_its_error_kind() {
    // The `error` of an API-error message names the failure (longer than a short string).
    let line = br#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"Invalid API key"}],"is_api_error_message":true},"error":"authentication_failed"}"#;
    let (full, fast) = both(line);
    assert_eq!(full, fast);
    let mut scratch = scan::Scratch::default();
    let checked = scan::check(line, &mut scratch).expect("a plain line");
    let frame: AssistantFrame<'_> =
        lenient::from_checked(line, Some(&checked)).expect("an assistant frame");
    assert_eq!(frame.error.get(), Some("authentication_failed"));
    // Its text is read again, from the line or from its value alike; a frame that is no API
    // error, or a subagent's, gives none.
    let text = frame.error_text(FrameSource::Line(line, Some(&checked)));
    assert_eq!(text.as_deref(), Some("Invalid API key"));
    let value: serde_json::Value = serde_json::from_slice(line).unwrap();
    assert_eq!(frame.error_text(FrameSource::Value(&value)), text);
    let plain = br#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#;
    let frame: AssistantFrame<'_> = lenient::from_slice(plain).unwrap();
    assert_eq!(frame.error_text(FrameSource::Line(plain, None)), None);
    let sub = br#"{"type":"assistant","parent_tool_use_id":"t1","message":{"content":[{"type":"text","text":"x"}],"is_api_error_message":true}}"#;
    let frame: AssistantFrame<'_> = lenient::from_slice(sub).unwrap();
    assert_eq!(frame.error_text(FrameSource::Line(sub, None)), None);
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
            // A repeated key (the derived view refuses it; the read through the index must too).
            line.insert_str(1, &format!(r#""{k}":"{s}","#));
        }
        let (full, fast) = both(line.as_bytes());
        prop_assert_eq!(full, fast, "{}", line);
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
        let (full, fast) = both(&line);
        prop_assert_eq!(full, fast, "{}", String::from_utf8_lossy(&line));
    }
}

const QWEN: &[&str] = &[
    include_str!("../../../../tests/fixtures/harness/qwen/qwen-code-0.24.4-tool-turn.jsonl"),
    include_str!("../../../../tests/fixtures/harness/qwen/qwen-code-0.24.4-resume.jsonl"),
    include_str!("../../../../tests/fixtures/harness/qwen/qwen-code-0.24.4-rate-limited.jsonl"),
    include_str!("../../../../tests/fixtures/harness/qwen/qwen-code-0.24.4-failure.jsonl"),
];

/// Qwen's borrowed reads agree with the value reads of the same line: the init frame's two
/// strings, and the assistant frame's view and token counts.
fn qwen_agrees(line: &[u8]) {
    use crate::harness::json;
    let value = match json::parse(line) {
        json::Line::Object(v) => Some(v),
        _ => None,
    };
    // The decoder reads the views only from lines the scan says parse as values.
    let mut scratch = scan::Scratch::default();
    let Some(checked) = scan::check(line, &mut scratch).filter(|c| c.parses_as_value()) else {
        return;
    };
    assert!(value.is_some(), "{}", String::from_utf8_lossy(line));
    if let Some(frame) = lenient::from_checked::<super::InitFrame<'_>>(line, Some(&checked)) {
        let v = value.as_ref().expect("a view implies a value");
        assert_eq!(frame.kind.get(), json::str(v, "type"));
        assert_eq!(frame.subtype.get(), json::str(v, "subtype"));
        assert_eq!(frame.session_id.get(), json::str(v, "session_id"));
        assert_eq!(frame.api_key_source.get(), json::str(v, "apiKeySource"));
    }
    if let Some(frame) = lenient::from_checked::<AssistantFrame<'_>>(line, Some(&checked)) {
        let v = value.as_ref().expect("a view implies a value");
        let from_value = lenient::from_value::<AssistantFrame<'_>>(v);
        assert_eq!(
            format!("{:?}", Some(&frame)),
            format!("{:?}", from_value.as_ref())
        );
        let counts = |u: &super::QwenUsage| {
            [
                u.input_tokens.0.unwrap_or(0),
                u.cache_read_input_tokens.0.unwrap_or(0),
                u.output_tokens.0.unwrap_or(0),
                u.reasoning_tokens.0.unwrap_or(0),
            ]
        };
        let viewed = frame
            .message
            .0
            .as_ref()
            .and_then(|m| m.usage.0.as_ref())
            .map(counts);
        let valued = v.get("message").and_then(|m| m.get("usage")).map(|u| {
            let get = |k: &str| json::u64(u, k).unwrap_or(0);
            [
                get("input_tokens"),
                get("cache_read_input_tokens"),
                get("output_tokens"),
                get("reasoning_tokens"),
            ]
        });
        assert_eq!(viewed, valued, "{}", String::from_utf8_lossy(line));
    }
}

#[test]
fn qwen_recorded_frames_read_the_same() {
    let mut fast = 0;
    for line in QWEN.iter().flat_map(|s| s.lines()) {
        qwen_agrees(line.as_bytes());
        fast += usize::from(scan::parses_as_value(line.as_bytes()));
    }
    // The recorded frames do take the fast path.
    assert!(fast > 10);
    for line in [
        r#"{"type":"assistant","message":{"usage":null}}"#,
        r#"{"type":"assistant","message":{"usage":"x"}}"#,
        r#"{"type":"assistant","message":{"usage":{"input_tokens":-3,"output_tokens":2.9,"cache_read_input_tokens":1e3,"reasoning_tokens":"7"}}}"#,
        r#"{"type":"assistant","message":"text"}"#,
        r#"{"type":"system","subtype":"init","session_id":1,"apiKeySource":["none"]}"#,
        r#"{"type":"system","subtype":"init","session_id":"a","session_id":"b"}"#,
    ] {
        qwen_agrees(line.as_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn qwen_mutated_frames_read_the_same(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop_oneof![
            Just(b'"'), Just(b'\\'), Just(b'{'), Just(b'}'), Just(b'['), Just(b']'), Just(b','),
            Just(b':'), Just(b'1'), Just(b'-'), Just(b'.'), Just(0xffu8), any::<u8>(),
        ]), 0..3),
    ) {
        let lines: Vec<&str> = QWEN.iter().flat_map(|s| s.lines()).collect();
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
        qwen_agrees(&line);
    }
}

/// Claude's init frames take the same borrowed view as Qwen's: it reads what the value does.
#[test]
fn claude_recorded_init_frames_read_the_same() {
    let mut inits = 0;
    for line in lines() {
        qwen_agrees(line.as_bytes());
        inits += usize::from(line.contains(r#""subtype":"init""#));
    }
    assert!(inits > 3);
}
