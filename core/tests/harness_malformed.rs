//! Malformed input never panics and never stops later lines from decoding; property tests of
//! arbitrary line sequences through `Interpretation` (the fuzz bodies' own tests are in the
//! test crate, tests/tests/harness_fuzz_bodies.rs).
// Reading fixture files is the test harness's I/O, not the core's (the sans-IO rule covers
// core/src; see scripts/check-sans-io.sh).
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{
    Completion, Harness, HarnessExit, Interpretation, OutcomeStatus, OversizedLines, UNREADABLE_END,
};
use agentrun_core::lines::LineSplitter;
use harness_common::*;
use proptest::prelude::*;

/// A valid line for `h` whose progress line is known; `n` keeps ids distinct.
fn probe(h: Harness, n: usize) -> (Vec<u8>, String) {
    let line = match h {
        Harness::Claude | Harness::Grok | Harness::Qwen => format!(
            r#"{{"type":"assistant","message":{{"model":"probe-model","content":[{{"type":"tool_use","name":"Read","input":{{"file_path":"/p{n}"}}}}]}}}}"#
        ),
        Harness::Pi => format!(
            r#"{{"type":"tool_execution_start","toolCallId":"c{n}","toolName":"Read","args":{{"path":"/p{n}"}}}}"#
        ),
        Harness::Antigravity => format!(
            r#"{{"event":"step_update","step_update":{{"step_index":{n},"step_type":"tool","tool_name":"view_file","tool_info":{{"parameters":{{"AbsolutePath":"/p{n}"}}}}}}}}"#
        ),
        Harness::Codex => format!(
            r#"{{"type":"item.started","item":{{"id":"i{n}","type":"file_change","changes":[{{"path":"/p{n}","kind":"update"}}]}}}}"#
        ),
        Harness::Muse => format!(
            r#"{{"payload_type":"task.lifecycle.proposed","payload":{{"task":{{"id":"t{n}","kind":"tool.Read","input":{{"path":"/p{n}"}}}}}}}}"#
        ),
        Harness::OpenCode => format!(
            r#"{{"type":"tool_use","part":{{"callID":"c{n}","tool":"Read","state":{{"input":{{"filePath":"/p{n}"}}}}}}}}"#
        ),
        Harness::Gemini => format!(
            r#"{{"type":"tool_use","tool_name":"Read","tool_id":"g{n}","parameters":{{"file_path":"/p{n}"}}}}"#
        ),
        // `Harness` is non-exhaustive: a harness added later fails here until it has a probe
        // in its own dialect.
        other => panic!("no probe line for the {other} dialect yet: add one"),
    };
    let expected = match h {
        Harness::Codex => format!("Edit /p{n}"),
        Harness::Antigravity => format!("view_file /p{n}"),
        _ => format!("Read /p{n}"),
    };
    (line.into_bytes(), expected)
}

fn malformed_lines() -> Vec<(&'static str, Vec<u8>)> {
    let mut v: Vec<(&'static str, Vec<u8>)> = vec![
        (
            "truncated",
            br#"{"type":"assistant","message":{"model":"trunc"#.to_vec(),
        ),
        (
            "array",
            br#"[{"type":"assistant","message":{"model":"in-array"}}]"#.to_vec(),
        ),
        ("number", b"42".to_vec()),
        ("string", br#""{\"type\":\"result\"}""#.to_vec()),
        ("null", b"null".to_vec()),
        (
            "non-utf8",
            b"{\"type\":\"assistant\",\"message\":{\"model\":\"\xff\xfe\"}}".to_vec(),
        ),
        ("binary", vec![0, 159, 146, 150, 0xc3, 0x28, b'\r']),
        ("bom", b"\xef\xbb\xbf{\"type\":\"user\"}".to_vec()),
        (
            "trailing garbage",
            br#"{"type":"user"} {"type":"user"}"#.to_vec(),
        ),
        (
            "wrong types",
            br#"{"type":7,"event":[],"payload_type":{},"message":"m","item":1,"part":false}"#
                .to_vec(),
        ),
        (
            "wrong inner types",
            br#"{"type":"assistant","message":{"model":5,"content":"x"},"parent_tool_use_id":{}}"#
                .to_vec(),
        ),
        (
            "duplicate keys",
            br#"{"type":"assistant","type":"result","result":"dup"}"#.to_vec(),
        ),
        ("empty object", b"{}".to_vec()),
        ("whitespace", b"   \t ".to_vec()),
    ];
    // 10 MB lines: one valid event carrying a huge string, one run of garbage.
    let mut huge = br#"{"type":"user","message":{"content":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'x', 10 << 20));
    huge.extend_from_slice(b"\"}}");
    v.push(("10 MB event", huge));
    v.push(("10 MB garbage", vec![b'{'; 10 << 20]));
    let mut huge_model = br#"{"type":"assistant","message":{"model":""#.to_vec();
    huge_model.extend(std::iter::repeat_n(b'm', 10 << 20));
    huge_model.extend_from_slice(b"\"}}");
    v.push(("10 MB model name", huge_model));
    // Deep nesting, past serde_json's recursion limit and far past any stack.
    v.push(("deep arrays", vec![b'['; 1 << 20]));
    let mut deep_obj = br#"{"type":"assistant","message":"#.to_vec();
    for _ in 0..100_000 {
        deep_obj.extend_from_slice(br#"{"a":"#);
    }
    v.push(("deep objects", deep_obj));
    let mut deep_ok =
        br#"{"type":"assistant","message":{"model":"deep-but-fine","content":"#.to_vec();
    deep_ok.extend(std::iter::repeat_n(b'[', 100));
    deep_ok.extend(std::iter::repeat_n(b']', 100));
    deep_ok.extend_from_slice(b"}}");
    v.push(("nested within the limit", deep_ok));
    v
}

#[test]
fn malformed_lines_never_panic_nor_stop_later_lines() {
    let bad = malformed_lines();
    for h in Harness::ALL {
        for security in [false, true] {
            let mut interp = Interpretation::new(h);
            if security {
                interp.for_security(Some("requested"));
            }
            for (i, (name, line)) in bad.iter().enumerate() {
                let _ = interp.handle_line(line);
                let (probe, expected) = probe(h, i);
                let progress = interp.handle_line(&probe);
                assert!(
                    progress.contains(&expected),
                    "{h}: after {name}: {progress:?}"
                );
            }
            for m in interp.observed_models() {
                assert!(!m.trim().is_empty() && m != "<synthetic>");
            }
            let c = interp.finish(HarnessExit::Success).complete(None);
            assert!(
                c.report.warnings.iter().any(|w| w.contains("unrecognized")),
                "{h}: {:?}",
                c.report.warnings
            );
        }
    }
}

#[test]
fn a_huge_model_name_is_cut_and_a_truncated_one_is_not_invented() {
    let bad = malformed_lines();
    let mut interp = Interpretation::new(Harness::Claude);
    for (_, line) in &bad {
        interp.handle_line(line);
    }
    let models = interp.observed_models();
    assert!(!models.iter().any(|m| m == "trunc" || m == "in-array"));
    // The 10 MiB name is kept as its first bytes and the cut marker, not whole.
    assert!(models.iter().any(|m| m.len()
        == agentrun_core::harness::interpretation::MAX_MODEL_NAME_BYTES
            + agentrun_core::harness::interpretation::MODEL_NAME_CUT.len()));
    assert!(models.iter().all(|m| m.len() < 1024));
    assert!(models.iter().any(|m| m == "deep-but-fine"));
}

#[test]
fn malformed_counts_in_the_drift_warning() {
    let stream = b"{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.sta\n[]\n\xff\n{\"type\":\"item.weird\"}\n{\"type\":\"turn.completed\",\"usage\":{}}\n";
    let (_, interp) = interpret(Harness::Codex, None, stream);
    let c = complete(interp);
    assert_eq!(c.outcome.session_id.as_deref(), Some("t"));
    assert!(c.outcome.terminal_seen);
    assert_eq!(
        c.report.warnings,
        vec!["4 unrecognized lines (unknown event types: item.weird); the codex stream format may have changed".to_owned()]
    );
}

/// Lines that look like events of any dialect, with arbitrary model names.
fn event_line() -> impl Strategy<Value = Vec<u8>> {
    let model = prop_oneof![
        Just(String::new()),
        Just(" ".to_owned()),
        Just("<synthetic>".to_owned()),
        Just(" <synthetic> ".to_owned()),
        "[a-z0-9<>. -]{0,12}",
        any::<String>(),
    ];
    let parent = prop_oneof![
        Just("null".to_owned()),
        Just("false".to_owned()),
        Just("\"toolu\"".to_owned()),
        Just("0".to_owned()),
    ];
    prop_oneof![
        (model.clone(), parent.clone(), any::<bool>()).prop_map(|(m, p, e)| {
            serde_json::json!({"type":"assistant","is_api_error_message":e,
                "message":{"model":m,"content":[{"type":"tool_use","name":"Bash","input":{"command":m}}]}})
            .to_string()
            .replace("\"is_api_error_message\"", &format!("\"parent_tool_use_id\":{p},\"is_api_error_message\""))
            .into_bytes()
        }),
        (model.clone(), any::<String>()).prop_map(|(m, r)| serde_json::json!({"type":"result","result":r,"modelUsage":{m:{}}}).to_string().into_bytes()),
        model.clone().prop_map(|m| serde_json::json!({"event":"init","conversation_id":m,"init":{"model":m}}).to_string().into_bytes()),
        model.clone().prop_map(|m| serde_json::json!({"type":"thread.started","thread_id":m}).to_string().into_bytes()),
        model.clone().prop_map(|m| serde_json::json!({"type":"turn.failed","error":{"message":m}}).to_string().into_bytes()),
        model.clone().prop_map(|m| serde_json::json!({"payload_type":"run.output.delta","payload":{"delta":m,"model":m}}).to_string().into_bytes()),
        model.prop_map(|m| serde_json::json!({"type":"text","sessionID":m,"part":{"text":m}}).to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..200),
    ]
}

/// Feeds `input` through a bounded splitter in `chunk`-byte chunks, as `agentrun interpret`
/// and the live agent tap do: cut lines go to `handle_oversized_line`.
fn split_and_interpret(harness: Harness, input: &[u8], bound: usize, chunk: usize) -> Completion {
    let mut interp = Interpretation::new(harness);
    let mut splitter = LineSplitter::new(bound);
    let mut on_line = |line: agentrun_core::lines::Line<'_>| {
        if line.truncated {
            interp.handle_oversized_line(bound);
        } else {
            interp.handle_line(line.bytes);
        }
    };
    for piece in input.chunks(chunk.max(1)) {
        splitter.push(piece, &mut on_line);
    }
    splitter.finish(&mut on_line);
    interp.finish(HarnessExit::Success).complete(None)
}

/// The golden Claude stream with an over-long event after its first line and an over-long
/// unterminated line at the end; the bound is the stream's longest line, and the line numbers
/// of the long ones.
fn with_oversized_lines() -> (Vec<u8>, Vec<u8>, usize, [u64; 2]) {
    let golden = fixture("claude/agentrun-golden-synthetic.jsonl");
    let bound = lines(&golden).iter().map(|l| l.len()).max().unwrap();
    let first_end = golden.iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut input = golden[..first_end].to_vec();
    // A result event whose text runs past the bound: decoded from its prefix it would be
    // malformed, and decoded whole it would end the session early.
    input.extend_from_slice(br#"{"type":"result","subtype":"success","result":""#);
    input.extend(std::iter::repeat_n(b'x', bound));
    input.extend_from_slice(b"\"}\n");
    input.extend_from_slice(&golden[first_end..]);
    input.extend(std::iter::repeat_n(b'y', bound + 1));
    let last = lines(&golden).len() as u64 + 2;
    (golden, input, bound, [2, last])
}

#[test]
fn an_oversized_line_is_reported_as_such_and_the_rest_still_decodes() {
    let (golden, input, bound, numbers) = with_oversized_lines();
    let want = complete(interpret(Harness::Claude, None, &golden).1);
    assert!(
        want.report.warnings.is_empty(),
        "{:?}",
        want.report.warnings
    );
    let got = split_and_interpret(Harness::Claude, &input, bound, 4096);
    let oversized = OversizedLines {
        count: 2,
        max_line_bytes: bound as u64,
        lines: numbers.to_vec(),
    };
    assert_eq!(got.report.oversized_lines.as_ref(), Some(&oversized));
    assert_eq!(
        got.report.warnings,
        [format!(
            "2 lines are longer than the line bound ({bound} bytes) (lines 2, {}): they were cut \
             and not interpreted",
            numbers[1]
        )]
    );
    // Not one unrecognized line, and everything else exactly as without the long lines.
    let mut same = got.clone();
    same.report.warnings.clear();
    same.report.oversized_lines = None;
    assert_eq!(same, want);
    let json = serde_json::to_value(&got.report).unwrap();
    assert_eq!(json["oversized_lines"]["lines"], serde_json::json!(numbers));
    assert!(
        serde_json::to_value(&want.report)
            .unwrap()
            .get("oversized_lines")
            .is_none()
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A final result too long to decode: the session is not claimed finished, nor claimed cut
/// off: the diagnostic names the long line.
#[test]
fn a_final_result_too_long_to_decode_is_named_in_the_diagnostic() {
    let golden = fixture("claude/agentrun-golden-synthetic.jsonl");
    // The stream without its root result, then a root result longer than any other line.
    let rest: Vec<&[u8]> = lines(&golden)
        .into_iter()
        .filter(|l| {
            !l.starts_with(br#"{"type":"result""#) || !contains(l, b"\"parent_tool_use_id\":null")
        })
        .collect();
    assert_eq!(rest.len() + 1, lines(&golden).len(), "one root result");
    let bound = rest.iter().map(|l| l.len()).max().unwrap();
    let mut input = rest.join(&b'\n');
    input.extend_from_slice(b"\n{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"");
    input.extend(std::iter::repeat_n(b'x', bound));
    input.extend_from_slice(b"\"}\n");
    let got = split_and_interpret(Harness::Claude, &input, bound, 4096);
    assert!(!got.outcome.terminal_seen);
    let warning = &got.report.warnings[0];
    assert_eq!(
        got.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: format!("{UNREADABLE_END}: {warning}")
        }
    );
}

#[test]
fn one_oversized_line_names_its_number_and_a_mib_bound() {
    let mut interp = Interpretation::new(Harness::Codex);
    interp.handle_line(b"");
    interp.handle_oversized_line(64 << 20);
    let c = complete(interp);
    assert_eq!(
        c.report.warnings,
        ["line 2 is longer than the line bound (64 MiB): it was cut and not interpreted"]
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_line_sequences_never_panic_and_models_stay_clean(
        pick in 0usize..6,
        control in any::<u8>(),
        lines in proptest::collection::vec(event_line(), 0..40),
    ) {
        let h = Harness::ALL[pick];
        let mut interp = Interpretation::new(h);
        if control & 1 == 1 {
            interp.for_security(None);
        }
        for (i, line) in lines.iter().enumerate() {
            if i == usize::from(control >> 3) {
                interp.for_security(Some("r"));
            }
            interp.handle_line(line);
            for m in interp.observed_models() {
                prop_assert!(!m.trim().is_empty());
                prop_assert_ne!(m.trim(), "<synthetic>");
            }
        }
        let models = interp.observed_models().to_vec();
        let c = interp.finish(HarnessExit::Success).complete(None);
        prop_assert_eq!(c.report.models, models);
    }

    /// However the stream is chunked, the long lines are reported the same and nothing else
    /// changes.
    #[test]
    fn oversized_lines_are_reported_the_same_for_any_chunking(chunk in 1usize..700) {
        let (_, input, bound, numbers) = with_oversized_lines();
        let whole = split_and_interpret(Harness::Claude, &input, bound, input.len());
        let got = split_and_interpret(Harness::Claude, &input, bound, chunk);
        prop_assert_eq!(&got, &whole);
        let lines = got.report.oversized_lines.as_ref().map(|o| o.lines.clone());
        prop_assert_eq!(lines, Some(numbers.to_vec()));
    }
}

/// Token counts near `u64::MAX` saturate instead of overflowing (a panic in debug builds, a
/// silent wrap in release).
#[test]
fn huge_token_counts_saturate() {
    let max = u64::MAX;
    let cases: [(Harness, Vec<String>); 2] = [
        (
            Harness::Codex,
            vec![
                r#"{"type":"thread.started","thread_id":"t1"}"#.to_owned(),
                format!(r#"{{"type":"turn.completed","usage":{{"input_tokens":{max},"output_tokens":{max}}}}}"#),
                r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#.to_owned(),
            ],
        ),
        (
            Harness::OpenCode,
            vec![
                format!(r#"{{"type":"step_finish","sessionID":"s","part":{{"tokens":{{"input":{max},"output":{max},"cache":{{"read":{max}}}}}}}}}"#),
                r#"{"type":"step_finish","sessionID":"s","part":{"tokens":{"input":1,"output":1,"cache":{"read":1}}}}"#.to_owned(),
            ],
        ),
    ];
    for (h, lines) in cases {
        let mut interp = Interpretation::new(h);
        for line in &lines {
            interp.handle_line(line.as_bytes());
        }
        let c = interp.finish(HarnessExit::Success).complete(None);
        let usage = c
            .report
            .usage
            .unwrap_or_else(|| panic!("{h:?} reports usage"));
        assert_eq!(usage.input_tokens, max, "{h:?}");
        assert_eq!(usage.output_tokens, max, "{h:?}");
    }
}
