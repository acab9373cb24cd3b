//! Completion facts for every dialect: every recorded fixture through `Interpretation`, with
//! concrete session ids, final messages, failures, killed work and usage summaries.
// Reading fixture files is the test harness's I/O, not the core's (the sans-IO rule covers
// core/src; see scripts/check-sans-io.sh).
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{Completion, Harness, OutcomeStatus};
use harness_common::*;

fn run(h: Harness, path: &str) -> (Vec<String>, Completion) {
    let (progress, interp) = interpret(h, None, &fixture(path));
    (progress, complete(interp))
}

fn final_message(c: &Completion) -> &str {
    c.outcome.final_message.as_deref().unwrap_or("")
}

#[track_caller]
fn no_drift(c: &Completion) {
    assert!(
        c.report
            .warnings
            .iter()
            .all(|w| !w.contains("unrecognized")),
        "{:?}",
        c.report.warnings
    );
}

#[test]
fn claude_morpheus() {
    let (progress, c) = run(Harness::Claude, "claude/morpheus-claude_stream.jsonl");
    assert_eq!(
        progress,
        strings(&["session started", "Read /work/sample.txt"])
    );
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("1ce8213d-f999-4838-8e26-c634d5150284")
    );
    assert_eq!(
        final_message(&c),
        "The file contains one line:\n\n```\nhello from a file\n```"
    );
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    // apiKeySource "none": a subscription.
    assert_eq!(
        c.report.summary.as_deref(),
        Some("2 turns, $0.03 at API prices")
    );
    assert_eq!(
        c.report.models,
        strings(&["claude-sonnet-4-6", "claude-haiku-4-5-20251001"])
    );
    no_drift(&c);
}

#[test]
fn claude_ccagent_long_session() {
    let (progress, c) = run(Harness::Claude, "claude/ccagent-claude_response1.jsonl");
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("13fd3e32-9028-43ba-9306-4e08bca82525")
    );
    assert!(final_message(&c).ends_with("unrelated to the service architecture changes. 🚀"));
    assert_eq!(c.report.models, strings(&["claude-sonnet-4-20250514"]));
    assert_eq!(
        c.report.summary.as_deref(),
        Some("139 turns, $2.46 at API prices")
    );
    // 53 tool uses, one progress line each, plus "session started".
    assert_eq!(progress.len(), 54);
    assert_eq!(
        progress.iter().filter(|p| p.starts_with("Edit ")).count(),
        18
    );
    assert_eq!(
        progress
            .iter()
            .filter(|p| p.starts_with("TodoWrite"))
            .count(),
        7
    );
    assert!(progress.contains(&"$ make build".to_owned()));
    for p in &progress {
        assert!(p.chars().count() <= 100 + "MultiEdit ".len() + 1, "{p}");
    }
    no_drift(&c);
}

#[test]
fn claude_takopi_two_sessions() {
    let (progress, c) = run(
        Harness::Claude,
        "claude/takopi-claude_stream_json_session-synthetic.jsonl",
    );
    // Only the first init sets the session id.
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa")
    );
    assert_eq!(
        progress.iter().filter(|p| *p == "session started").count(),
        1
    );
    assert!(progress.contains(&"$ ls".to_owned()), "{progress:?}");
    // The last root result failed; its errors[] is the diagnostic.
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "Permission denied: cannot write to /root/secret.txt".to_owned()
        }
    );
    assert_eq!(c.report.summary.as_deref(), Some("1 turn, $0.00"));
    no_drift(&c);
}

#[test]
fn claude_killed_work_after_the_last_root_result() {
    let (_, c) = run(
        Harness::Claude,
        "claude/agentrun-killed-tasks-synthetic.jsonl",
    );
    assert_eq!(
        c.outcome.killed_work,
        strings(&["run the test suite", "watch the logs"])
    );
    // A later root success clears the earlier failure.
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(final_message(&c), "all done");
    assert_eq!(c.report.summary.as_deref(), Some("4 turns, $1.50"));
}

#[test]
fn grok_acp_streaming_json() {
    let (progress, c) = run(Harness::Grok, "grok/task-mgr-framework-grok_stream.jsonl");
    assert!(progress.is_empty());
    assert_eq!(final_message(&c), "<task-status>TEST-1:done</task-status>");
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("019e69d1-5079-7552-bd4c-0d4fe21dc6a3")
    );
    assert!(c.outcome.terminal_seen);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    no_drift(&c);
}

#[test]
fn grok_streaming_messages_json() {
    let (progress, c) = run(Harness::Grok, "grok/agentrun-messages-synthetic.jsonl");
    // Session id from the first event that carries one (no init here).
    assert_eq!(c.outcome.session_id.as_deref(), Some("grok-session-7"));
    assert_eq!(progress, strings(&["$ ls -la", "commit"]));
    assert_eq!(final_message(&c), "Two files.");
    // Zero cost: token counts; modelUsage is no evidence for Grok.
    assert_eq!(
        c.report.summary.as_deref(),
        Some("1200 input tokens, 34 output tokens")
    );
    assert_eq!(c.report.models, strings(&["grok-code-fast-1"]));
    assert!(c.outcome.killed_work.is_empty());

    let (_, c) = run(Harness::Grok, "grok/agentrun-error-synthetic.jsonl");
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "rate limited: try again later".to_owned()
        }
    );
}

#[test]
fn antigravity_print_envelope() {
    let (progress, c) = run(
        Harness::Antigravity,
        "antigravity/openagent-antigravity_print.jsonl",
    );
    assert_eq!(progress, strings(&["session started"]));
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("938442f7-bca6-422b-b9d8-f8aa598de783")
    );
    assert_eq!(final_message(&c), "OK42\n");
    assert_eq!(
        c.report.summary.as_deref(),
        Some("1 turn, 39941 input tokens, 7 output tokens")
    );
    no_drift(&c);
}

#[test]
fn codex_every_recorded_stream() {
    struct Case {
        file: &'static str,
        session: &'static str,
        final_starts: &'static str,
        summary: &'static str,
        failed: Option<&'static str>,
    }
    let cases = [
        Case {
            file: "claude-codes-hello_world.jsonl",
            session: "019c8140-6f07-7fb1-86f8-4813739c32bb",
            final_starts: "hello world",
            summary: "7464 input tokens, 25 output tokens, 6528 cached",
            failed: None,
        },
        Case {
            file: "claude-codes-failed_command.jsonl",
            session: "019c8143-0e53-7271-89e8-3eec4d067c77",
            final_starts: "The command exited with code `42`.",
            summary: "15086 input tokens, 114 output tokens, 14080 cached",
            failed: None,
        },
        Case {
            file: "claude-codes-file_change.jsonl",
            session: "019c8143-62bb-7e43-8f0a-66dac76af4d4",
            final_starts: "Updated `test.txt` via a direct file edit.",
            summary: "22857 input tokens, 250 output tokens, 20736 cached",
            failed: None,
        },
        Case {
            file: "claude-codes-file_create.jsonl",
            session: "019c8142-d8f0-7dd0-ad95-5fa85af406da",
            final_starts: "Created `/tmp/codex_test_file.txt`",
            summary: "15115 input tokens, 137 output tokens, 13184 cached",
            failed: None,
        },
        Case {
            file: "claude-codes-list_files.jsonl",
            session: "019c8140-cd1c-7581-977c-e10f043ac849",
            final_starts: "Here are the files.",
            summary: "15562 input tokens, 599 output tokens, 13184 cached",
            failed: None,
        },
        Case {
            file: "claude-codes-multi_command.jsonl",
            session: "019c8143-abe2-7722-9bd1-fd70f687175b",
            final_starts: "`echo step1` → `step1`",
            summary: "30669 input tokens, 205 output tokens, 28288 cached",
            failed: None,
        },
        Case {
            file: "heru-T0001-merge-resolver.jsonl",
            session: "019d78d0-6497-7450-a942-efe1514b9101",
            final_starts: "Resolved the `uv.lock` merge conflict",
            summary: "377620 input tokens, 2680 output tokens, 339840 cached",
            failed: None,
        },
        Case {
            file: "heru-T0008-reviewer.jsonl",
            session: "019d7924-eda8-7530-862f-d82f7caf2c2f",
            final_starts: "Accepted and recorded with `litehive report --verdict pass`.",
            summary: "218488 input tokens, 2593 output tokens, 180480 cached",
            failed: None,
        },
        Case {
            file: "heru-T0014-planner-todo_list.jsonl",
            session: "019d7b72-582e-77b3-a393-26ecad950f9c",
            final_starts: "Grooming passed",
            summary: "662589 input tokens, 5751 output tokens, 610816 cached",
            failed: None,
        },
        Case {
            file: "openagent-codex_v0142_edit.jsonl",
            session: "019f61b5-2816-7771-91f1-7d01dbfbc58d",
            final_starts: "Added [test_calc.py](/workspace/test_calc.py)",
            summary: "124998 input tokens, 1111 output tokens, 115840 cached, 158 reasoning",
            failed: None,
        },
        Case {
            file: "openagent-codex_v0142_plan.jsonl",
            session: "019f61b2-c5f2-71e1-9ee9-957c9d231fe3",
            final_starts: "Plan completed:",
            summary: "167620 input tokens, 2269 output tokens, 156032 cached, 275 reasoning",
            failed: None,
        },
        Case {
            file: "openagent-codex_v0142_websearch.jsonl",
            session: "019f61b3-0000-7000-8000-000000000001",
            final_starts: "The latest stable Python release",
            summary: "12000 input tokens, 120 output tokens, 8000 cached, 64 reasoning",
            failed: None,
        },
        Case {
            file: "openagent-codex_usage_limit.jsonl",
            session: "019f5337-b70f-7060-a4e1-1e520604129d",
            final_starts: "",
            summary: "",
            failed: Some("You've hit your usage limit."),
        },
        Case {
            file: "openagent-codex_v0142_failure.jsonl",
            session: "019f61b1-0000-7000-8000-000000000002",
            final_starts: "",
            summary: "",
            // The provider's JSON body, unwrapped to its message.
            failed: Some(
                "The 'gpt-5.6-sol' model requires a newer version of Codex. Please upgrade to the \
                 latest app or CLI and try again. (invalid_request_error, HTTP 400)",
            ),
        },
        Case {
            file: "takopi-codex_exec_json_all_formats-synthetic.jsonl",
            session: "0199a213-81c0-7800-8aa1-bbab2a035a53",
            final_starts: "Updated src/compute_answer.py and tests pass.",
            summary: "1840 input tokens, 732 output tokens, 256 cached",
            failed: Some("Aborted: required dependency `npm` is missing"),
        },
    ];
    for case in cases {
        let (_, c) = run(Harness::Codex, &format!("codex/{}", case.file));
        assert_eq!(
            c.outcome.session_id.as_deref(),
            Some(case.session),
            "{}",
            case.file
        );
        assert!(
            final_message(&c).starts_with(case.final_starts),
            "{}: {:?}",
            case.file,
            c.outcome.final_message
        );
        assert_eq!(
            c.report.summary.as_deref().unwrap_or(""),
            case.summary,
            "{}",
            case.file
        );
        match case.failed {
            None => assert_eq!(c.outcome.status, OutcomeStatus::Succeeded, "{}", case.file),
            Some(prefix) => assert!(
                matches!(&c.outcome.status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic.starts_with(prefix)),
                "{}: {:?}",
                case.file,
                c.outcome.status
            ),
        }
        assert!(c.report.models.is_empty(), "{}", case.file);
        no_drift(&c);
    }
}

#[test]
fn codex_progress_and_killed_work() {
    let (progress, _) = run(Harness::Codex, "codex/openagent-codex_v0142_edit.jsonl");
    assert_eq!(
        progress,
        strings(&[
            "session started",
            "$ git status --short",
            "$ rg --files",
            "$ sed -n '1,200p' calc.py",
            "Add /workspace/test_calc.py",
            "$ python3 -m pytest",
            "Edit /workspace/test_calc.py",
            "$ python3 test_calc.py",
        ])
    );
    let (progress, _) = run(Harness::Codex, "codex/heru-T0001-merge-resolver.jsonl");
    assert!(
        progress.contains(&"commit".to_owned()),
        "git commit --no-edit renders as commit"
    );
    let (progress, _) = run(
        Harness::Codex,
        "codex/takopi-codex_exec_json_all_formats-synthetic.jsonl",
    );
    assert!(progress.contains(&"github search_issues".to_owned()));
    assert!(progress.contains(&"web search codex exec --json schema".to_owned()));
    assert!(progress.contains(&"Edit src/compute_answer.py, Add README.md".to_owned()));
    let (progress, c) = run(
        Harness::Codex,
        "codex/openagent-codex_v0142_websearch.jsonl",
    );
    assert_eq!(
        progress,
        strings(&[
            "session started",
            "web search Python latest stable version official downloads"
        ])
    );
    assert!(c.outcome.killed_work.is_empty());
    let (_, c) = run(Harness::Codex, "codex/agentrun-resume-synthetic.jsonl");
    assert_eq!(c.outcome.killed_work, strings(&["$ sleep 600"]));
    assert_eq!(
        c.report.summary.as_deref(),
        Some("300 input tokens, 12 output tokens, 30 cached")
    );
}

#[test]
fn opencode_every_recorded_stream() {
    let (progress, c) = run(
        Harness::OpenCode,
        "opencode/takopi-opencode_stream_success.jsonl",
    );
    assert_eq!(progress, strings(&["session started", "$ echo hello"]));
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("ses_494719016ffe85dkDMj0FPRbHK")
    );
    assert_eq!(final_message(&c), "```\nhello\n```");
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    let usage = c.report.usage.clone().expect("usage");
    // Input includes the cache reads OpenCode counts apart: 21772 + 671 + 21415.
    assert_eq!((usage.input_tokens, usage.output_tokens), (43858, 118));
    assert_eq!(usage.cached_input_tokens, 21415);

    let (_, c) = run(Harness::OpenCode, "opencode/noldor-opencode-events.jsonl");
    assert_eq!(
        c.outcome.session_id.as_deref(),
        Some("ses_09ec7fc10ffekAtgUWHv9M6Y0T")
    );
    assert_eq!(final_message(&c), "alpha\nbravo\ncharlie");
    assert_eq!(
        c.report.summary.as_deref(),
        Some("19577 input tokens, 38 output tokens")
    );
    no_drift(&c);

    let (progress, c) = run(
        Harness::OpenCode,
        "opencode/takopi-opencode_run_json-synthetic.jsonl",
    );
    assert_eq!(progress, strings(&["session started", "$ rg --version"]));
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "APIError: Upstream timeout while calling provider".to_owned()
        }
    );
    assert_eq!(final_message(&c), "Found ripgrep 13.0.0.");
    no_drift(&c);
}

#[test]
fn muse_streams() {
    let (progress, c) = run(Harness::Muse, "muse/agentrun-exec-synthetic.jsonl");
    // One line per proposed tool task (a re-proposal of t2 is not repeated).
    assert_eq!(
        progress,
        strings(&["session started", "$ cargo test --workspace", "$ sleep 600"])
    );
    assert_eq!(c.outcome.session_id.as_deref(), Some("muse-sess-42"));
    // The model task started a new reply; the terminal text is only a fallback.
    assert_eq!(final_message(&c), "All tests pass.");
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    // The tool task cancelled because the session ended is killed work, named by its kind;
    // a cancellation of a task never proposed is not.
    assert_eq!(c.outcome.killed_work, strings(&["tool.bash"]));

    let (_, c) = run(Harness::Muse, "muse/agentrun-failed-synthetic.jsonl");
    assert_eq!(final_message(&c), "only the fallback");
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "sandbox denied write to /etc".to_owned()
        }
    );
}

#[test]
fn streams_without_a_terminal_event_are_decoded_but_not_successes() {
    for (h, path, keep) in [
        (Harness::Claude, "claude/morpheus-claude_stream.jsonl", 7),
        (Harness::Codex, "codex/claude-codes-multi_command.jsonl", 9),
        (
            Harness::OpenCode,
            "opencode/takopi-opencode_stream_success.jsonl",
            5,
        ),
        (
            Harness::Antigravity,
            "antigravity/agentrun-stream-synthetic.jsonl",
            8,
        ),
        (Harness::Muse, "muse/agentrun-exec-synthetic.jsonl", 7),
        (
            Harness::Grok,
            "grok/task-mgr-framework-grok_stream.jsonl",
            40,
        ),
    ] {
        let bytes = fixture(path);
        let cut: Vec<u8> = lines(&bytes)[..keep].join(&b'\n');
        let (_, interp) = interpret(h, None, &cut);
        let c = complete(interp);
        assert!(!c.outcome.terminal_seen, "{path}");
        assert_eq!(
            c.outcome.status,
            OutcomeStatus::TurnFailed {
                diagnostic: agentrun_core::harness::UNFINISHED.to_owned()
            },
            "{path}"
        );
        assert!(
            c.outcome.session_id.is_some() || h == Harness::Grok,
            "{path}"
        );
    }
    // Codex: the last agent message so far is the answer.
    let bytes = fixture("codex/claude-codes-multi_command.jsonl");
    let cut: Vec<u8> = lines(&bytes)[..4].join(&b'\n');
    let (_, interp) = interpret(Harness::Codex, None, &cut);
    assert_eq!(
        complete(interp).outcome.final_message.as_deref(),
        Some("Running the three commands sequentially now and I'll report each output in order.")
    );
}

#[test]
fn retained_parsers() {
    use agentrun_core::harness::retained::{parse_muse_session_log, parse_opencode_export};
    let log = parse_muse_session_log(
        Some("muse-sess-42"),
        &fixture("muse/agentrun-session-log-synthetic.jsonl"),
    )
    .expect("parses");
    assert_eq!(log.session_id.as_deref(), Some("muse-sess-42"));
    // Other sessions' records and non-run records do not count; wrapped records do.
    assert_eq!(log.models, strings(&["muse-large-2026", "muse-small-2026"]));
    assert_eq!(log.final_message.as_deref(), Some("All tests pass."));
    let usage = log.usage.expect("usage");
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens
        ),
        (1200, 60, 400)
    );
    assert!(parse_muse_session_log(None, b"garbage\n\n").is_err());
    assert!(parse_muse_session_log(None, b"").is_err());
    // One malformed line makes the whole log unreadable.
    let mut damaged = fixture("muse/agentrun-session-log-synthetic.jsonl");
    damaged.extend_from_slice(b"{\"truncated\n");
    assert!(parse_muse_session_log(Some("muse-sess-42"), &damaged).is_err());

    let export = parse_opencode_export(&fixture("opencode/agentrun-session-export-synthetic.json"))
        .expect("parses");
    assert_eq!(
        export.session_id.as_deref(),
        Some("ses_494719016ffe85dkDMj0FPRbHK")
    );
    assert_eq!(export.models, strings(&["anthropic/claude-sonnet-4-5"]));
    assert!(parse_opencode_export(b"[]").is_err());
    assert!(parse_opencode_export(b"{\"info\":{}}").is_err());
    assert!(parse_opencode_export(b"{\"messages\":[").is_err());
}
