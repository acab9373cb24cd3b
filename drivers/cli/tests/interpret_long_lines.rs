//! `agentrun interpret` bounds each line like the live `agent` path: a line longer than the
//! bound (64 MiB) is cut and reported as oversized (not as unrecognized), and the rest of the
//! stream is still decoded, so memory stays bounded whatever the input.

use std::io::Write;
use std::process::Stdio;

#[path = "support/sandbox.rs"]
mod sandbox;

fn interpret(input: &[u8]) -> (Option<i32>, String) {
    let env = sandbox::Sandbox::new();
    let mut child = env
        .cmd(&["interpret", "--harness", "claude", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let last = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    (out.status.code(), last)
}

#[test]
fn an_over_long_line_is_skipped_and_the_rest_still_decoded() {
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/harness/claude/agentrun-golden-synthetic.jsonl"
    ))
    .unwrap();
    let (code, want) = interpret(&fixture);
    assert_eq!(code, Some(0));
    assert!(want.contains("\"final_message\":\"root answer\""), "{want}");

    // 65 MiB of a JSON line in the middle: longer than the bound, so it is cut.
    let first_end = fixture.iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut input = fixture[..first_end].to_vec();
    input.extend_from_slice(b"{\"type\":\"assistant\",\"message\":{\"content\":\"");
    input.extend(std::iter::repeat_n(b'x', 65 << 20));
    input.extend_from_slice(b"\"}}\n");
    input.extend_from_slice(&fixture[first_end..]);
    // And one more over-long line without a newline at the very end.
    input.extend(std::iter::repeat_n(b'y', 65 << 20));
    let (code, got) = interpret(&input);
    assert_eq!(code, Some(0));
    // Everything the fixture yields, plus the two cut lines reported as too long (not as
    // unrecognized: the warning is the only one).
    let mut got: serde_json::Value = serde_json::from_str(&got).unwrap();
    let last = fixture.iter().filter(|&&b| b == b'\n').count() + 2;
    assert_eq!(
        got["report"]["warnings"],
        serde_json::json!([format!(
            "2 lines are longer than the line bound (64 MiB) (lines 2, {last}): they were cut \
             and not interpreted"
        )])
    );
    assert_eq!(
        got["report"]["oversized_lines"],
        serde_json::json!({"count": 2, "max_line_bytes": 64 << 20, "lines": [2, last]})
    );
    let report = got["report"].as_object_mut().unwrap();
    report.remove("oversized_lines");
    report.insert("warnings".into(), serde_json::json!([]));
    let want: serde_json::Value = serde_json::from_str(&want).unwrap();
    assert_eq!(got, want, "the lines after the long ones were decoded");
}
