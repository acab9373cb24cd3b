//! A scripted fake harness for the `agentrun auto` tests (`drivers/cli/tests/auto.rs`).
//! Test-only, std only, compiled by the tests with `rustc`.
//!
//! Invoked under a harness program name (a symlink `claude`, `grok`, `agy`, `codex`, `muse`
//! or `opencode`), it plays one turn per invocation from a script and speaks that harness's
//! stream dialect, with a fixed session id per dialect.
//!
//! * `FAKE_AUTO_DIR`: a directory holding `script` (one turn per line:
//!   `EXIT|SINK|TEXT`, SINK `-` for none, TEXT the final message; TEXT `SLEEP` sleeps 30 s
//!   after the first event, to be interrupted) and the counter `n`. Each call writes
//!   `call-<n>.argv` (one argument per line) and `call-<n>.prompt` (the prompt: the last
//!   argument, or stdin for opencode). `opencode export ID` prints an empty export and is not
//!   counted as a turn. TEXT `RATE_LIMITED` (claude, grok) ends the turn the way Claude Code
//!   reports an HTTP 429 it gave up on: an `api_error` result with `api_error_status` 429.
//! * `AGENTRUN_RESULT_SINK`: where SINK is written.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The stream of one turn in `name`'s dialect: the session start, then the final message.
fn stream(name: &str, session: &str, text: &str, failed: bool) -> (String, String) {
    let t = json_str(text);
    let s = json_str(session);
    match name {
        "claude" | "grok" => (
            format!(
                "{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":{s},\"model\":\"fake-model\"}}\n\
                 {{\"type\":\"assistant\",\"session_id\":{s},\"message\":{{\"model\":\"fake-model\",\"content\":[{{\"type\":\"text\",\"text\":{t}}}]}}}}\n"
            ),
            format!(
                "{{\"type\":\"result\",\"subtype\":\"{}\",\"is_error\":{failed},\"result\":{t},\"session_id\":{s},\"num_turns\":1,\"total_cost_usd\":0.01}}\n",
                if failed { "error_during_execution" } else { "success" }
            ),
        ),
        "codex" => (
            format!("{{\"type\":\"thread.started\",\"thread_id\":{s}}}\n"),
            if failed {
                format!("{{\"type\":\"turn.failed\",\"error\":{{\"message\":{t}}}}}\n")
            } else {
                format!(
                    "{{\"type\":\"item.completed\",\"item\":{{\"id\":\"i1\",\"type\":\"agent_message\",\"text\":{t}}}}}\n\
                     {{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":10,\"output_tokens\":5}}}}\n"
                )
            },
        ),
        "agy" => (
            format!("{{\"event\":\"init\",\"conversation_id\":{s},\"init\":{{\"model\":\"fake-model\"}}}}\n"),
            format!(
                "{{\"event\":\"result\",\"result\":{{\"conversation_id\":{s},\"status\":\"{}\",\"response\":{t},\"num_turns\":1}}}}\n",
                if failed { "ERROR" } else { "SUCCESS" }
            ),
        ),
        "muse" => (
            format!("{{\"stream\":{{\"kind\":\"session\",\"id\":{s}}},\"payload_type\":\"run.started\",\"payload\":{{}}}}\n"),
            if failed {
                format!("{{\"stream\":{{\"kind\":\"run\",\"id\":\"r\"}},\"payload_type\":\"run.terminal.failed\",\"payload\":{{\"reason\":{t}}}}}\n")
            } else {
                format!("{{\"stream\":{{\"kind\":\"run\",\"id\":\"r\"}},\"payload_type\":\"run.terminal.completed\",\"payload\":{{\"text\":{t}}}}}\n")
            },
        ),
        _ => (
            format!("{{\"type\":\"step_start\",\"sessionID\":{s},\"part\":{{\"type\":\"step-start\"}}}}\n"),
            format!(
                "{{\"type\":\"text\",\"sessionID\":{s},\"part\":{{\"type\":\"text\",\"text\":{t}}}}}\n\
                 {{\"type\":\"step_finish\",\"sessionID\":{s},\"part\":{{\"type\":\"step-finish\",\"reason\":\"stop\"}}}}\n"
            ),
        ),
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let name = Path::new(&argv[0])
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `opencode export ID` (the retained record read after each turn) is not a turn: an
    // empty export leaves the stream's facts in place.
    if name == "opencode" && argv.get(1).is_some_and(|a| a == "export") {
        println!("{{}}");
        return ExitCode::SUCCESS;
    }
    let Some(dir) = std::env::var_os("FAKE_AUTO_DIR").map(PathBuf::from) else {
        eprintln!("fake {name}: FAKE_AUTO_DIR is not set");
        return ExitCode::from(90);
    };
    let n: usize = std::fs::read_to_string(dir.join("n"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    std::fs::write(dir.join("n"), (n + 1).to_string()).unwrap();
    let script = std::fs::read_to_string(dir.join("script")).unwrap_or_default();
    let Some(line) = script.lines().nth(n) else {
        eprintln!("fake {name}: the script has no turn {}", n + 1);
        return ExitCode::from(91);
    };
    let mut parts = line.splitn(3, '|');
    let exit: u8 = parts.next().unwrap_or("0").parse().unwrap_or(0);
    let sink = parts.next().unwrap_or("-");
    let text = parts.next().unwrap_or("").replace("\\n", "\n");

    let args = &argv[1..];
    std::fs::write(dir.join(format!("call-{}.argv", n + 1)), args.join("\n")).unwrap();
    let prompt = if name == "opencode" {
        let mut s = String::new();
        let _ = std::io::stdin().read_to_string(&mut s);
        s
    } else {
        args.last().cloned().unwrap_or_default()
    };
    std::fs::write(dir.join(format!("call-{}.prompt", n + 1)), &prompt).unwrap();

    let session = format!("{name}-session-1");
    let (start, mut end) = stream(&name, &session, &text, exit != 0);
    if text == "RATE_LIMITED" {
        end = format!(
            "{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"terminal_reason\":\"api_error\",\"api_error_status\":429,\"result\":\"API Error: 429 rate limited\",\"session_id\":{},\"num_turns\":1,\"total_cost_usd\":0}}\n",
            json_str(&session)
        );
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(start.as_bytes());
    let _ = out.flush();
    if text == "SLEEP" {
        std::thread::sleep(Duration::from_secs(30));
    }
    if sink != "-"
        && let Some(path) = std::env::var_os("AGENTRUN_RESULT_SINK")
    {
        std::fs::write(path, sink).unwrap();
    }
    let _ = out.write_all(end.as_bytes());
    let _ = out.flush();
    ExitCode::from(exit)
}
