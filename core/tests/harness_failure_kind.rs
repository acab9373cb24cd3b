//! Failure kinds decoded from the streams: context-length failures (so a summarizer that is a
//! harness run can trigger the pruned compaction retry), Claude Code's API errors, and the
//! shared completion rules (a cut-off stream, a refusal, stderr where the stream says nothing).

// The shared helpers read fixtures from disk; the tests themselves do no I/O.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{FailureKind, Harness, HarnessExit, OutcomeStatus, RetryAfter};
use harness_common::{complete, interpret};

fn kind(harness: Harness, stream: &str) -> (OutcomeStatus, Option<FailureKind>) {
    let (_, interp) = interpret(harness, None, stream.as_bytes());
    let outcome = complete(interp).outcome;
    (outcome.status, outcome.failure_kind)
}

/// The shape Claude Code 2.1 prints when the API refuses an over-long request: a synthetic
/// assistant message with `error: "invalid_request"`, then an error result.
const CLAUDE_PROMPT_TOO_LONG: &str = r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"Prompt is too long"}]},"parent_tool_use_id":null,"error":"invalid_request","session_id":"s1"}
{"type":"result","subtype":"success","is_error":true,"api_error_status":400,"terminal_reason":"prompt_too_long","result":"Prompt is too long","num_turns":1,"total_cost_usd":0,"session_id":"s1"}
"#;

#[test]
fn claude_prompt_too_long_is_a_context_length_failure() {
    let (status, kind) = kind(Harness::Claude, CLAUDE_PROMPT_TOO_LONG);
    assert!(
        matches!(status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic == "Prompt is too long")
    );
    assert_eq!(kind, Some(FailureKind::ContextLength));
}

#[test]
fn claude_result_text_alone_classifies_without_terminal_reason() {
    let stream = r#"{"type":"result","subtype":"success","is_error":true,"result":"Prompt is too long: 210000 tokens > 200000 maximum"}"#;
    assert_eq!(
        kind(Harness::Claude, stream).1,
        Some(FailureKind::ContextLength)
    );
}

#[test]
fn other_claude_failures_are_classified_by_their_text_and_successes_are_not() {
    let rate_limited = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 429 rate limited"}"#;
    let (status, k) = kind(Harness::Claude, rate_limited);
    assert!(matches!(status, OutcomeStatus::TurnFailed { .. }));
    assert_eq!(k, Some(FailureKind::RateLimited));
    // A failure nothing names stays unclassified.
    let max_turns =
        r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3}"#;
    let (status, k) = kind(Harness::Claude, max_turns);
    assert!(matches!(status, OutcomeStatus::TurnFailed { .. }));
    assert_eq!(k, None);
    // Mentioning the phrase in a successful answer is not a failure.
    let success = r#"{"type":"result","subtype":"success","is_error":false,"result":"Prompt is too long, said the user"}"#;
    assert_eq!(
        kind(Harness::Claude, success),
        (OutcomeStatus::Succeeded, None)
    );
    // A later root success clears the earlier context-length failure.
    let recovered = format!(
        "{CLAUDE_PROMPT_TOO_LONG}{}\n",
        r#"{"type":"result","subtype":"success","is_error":false,"result":"done"}"#
    );
    assert_eq!(
        kind(Harness::Claude, &recovered),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn codex_context_window_turn_failure_is_classified() {
    let stream = r#"{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying."}}
"#;
    assert_eq!(
        kind(Harness::Codex, stream).1,
        Some(FailureKind::ContextLength)
    );
    // A plan's usage limit is a rate limit; a failure without a known wording has no kind.
    let usage = r#"{"type":"turn.failed","error":{"message":"You've hit your usage limit."}}"#;
    assert_eq!(
        kind(Harness::Codex, usage).1,
        Some(FailureKind::RateLimited)
    );
    let other = r#"{"type":"turn.failed","error":{"message":"the sandbox broke"}}"#;
    assert_eq!(kind(Harness::Codex, other).1, None);
    // A top-level `error` event is a diagnostic, never a turn failure of any kind.
    let diagnostic = r#"{"type":"error","message":"context window exceeded"}
{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#;
    assert_eq!(
        kind(Harness::Codex, diagnostic),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn opencode_context_overflow_error_is_classified() {
    let stream = r#"{"type":"error","sessionID":"ses_1","error":{"name":"ContextOverflowError","data":{"message":"prompt is too long"}}}"#;
    let (status, k) = kind(Harness::OpenCode, stream);
    assert!(
        matches!(status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic.starts_with("ContextOverflowError"))
    );
    assert_eq!(k, Some(FailureKind::ContextLength));
    let overloaded = r#"{"type":"error","sessionID":"ses_1","error":{"name":"APIError","data":{"message":"overloaded"}}}"#;
    assert_eq!(
        kind(Harness::OpenCode, overloaded).1,
        Some(FailureKind::Overloaded)
    );
    let other = r#"{"type":"error","sessionID":"ses_1","error":{"name":"UnknownError","data":{"message":"the disk is full"}}}"#;
    assert_eq!(kind(Harness::OpenCode, other).1, None);
}

#[test]
fn failure_kind_is_serialized_only_when_present() {
    let (_, interp) = interpret(Harness::Claude, None, CLAUDE_PROMPT_TOO_LONG.as_bytes());
    let json = serde_json::to_value(complete(interp).outcome).unwrap();
    assert_eq!(json["failure_kind"], "context_length");
    let (_, interp) = interpret(
        Harness::Claude,
        None,
        br#"{"type":"result","subtype":"success","result":"ok"}"#,
    );
    let json = serde_json::to_value(complete(interp).outcome).unwrap();
    assert!(json.get("failure_kind").is_none());
}

#[test]
fn every_kind_serializes_as_its_stable_name_and_only_rate_limits_and_overloads_retry() {
    for kind in FailureKind::ALL {
        let json = serde_json::to_value(kind).unwrap();
        assert_eq!(json, kind.as_str(), "{kind:?}");
        assert_eq!(kind.to_string(), kind.as_str());
        let back: FailureKind = serde_json::from_value(json).unwrap();
        assert_eq!(back, kind);
    }
    let retryable: Vec<_> = FailureKind::ALL
        .into_iter()
        .filter(|k| k.is_retryable())
        .collect();
    assert_eq!(
        retryable,
        [FailureKind::RateLimited, FailureKind::Overloaded]
    );
}

const INIT: &str =
    r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5"}"#;

/// Claude Code 2.1's own retry of a rate-limited request, then the API-error message and the
/// result it ends the turn with.
fn claude_api_error(status: u16, error: &str, subtype: &str, is_error: bool) -> String {
    format!(
        r#"{INIT}
{{"type":"system","subtype":"api_retry","attempt":3,"max_retries":10,"retry_delay_ms":2300,"error_status":{status},"error":"{error}","session_id":"s1"}}
{{"type":"assistant","message":{{"model":"<synthetic>","role":"assistant","content":[{{"type":"text","text":"API Error: the request failed"}}]}},"parent_tool_use_id":null,"error":"{error}","is_api_error_message":true,"api_error_status":{status},"session_id":"s1"}}
{{"type":"result","subtype":"{subtype}","is_error":{is_error},"terminal_reason":"api_error","api_error_status":{status},"result":"API Error: the request failed","num_turns":1,"total_cost_usd":0,"session_id":"s1"}}
"#
    )
}

#[test]
fn claude_api_error_statuses_decode_to_their_kinds() {
    for (status, error, expected) in [
        (429, "rate_limit", FailureKind::RateLimited),
        (529, "overloaded", FailureKind::Overloaded),
        (503, "server_error", FailureKind::Overloaded),
        (500, "server_error", FailureKind::ServerError),
        (502, "server_error", FailureKind::ServerError),
        (401, "authentication_failed", FailureKind::Auth),
        (403, "authentication_failed", FailureKind::Auth),
    ] {
        let stream = claude_api_error(status, error, "success", true);
        let (status_, k) = kind(Harness::Claude, &stream);
        assert!(
            matches!(&status_, OutcomeStatus::TurnFailed { diagnostic } if diagnostic == "API Error: the request failed"),
            "{status}: {status_:?}"
        );
        assert_eq!(k, Some(expected), "{status}");
    }
}

#[test]
fn claude_retries_are_progress_lines_and_the_last_delay_is_the_retry_hint() {
    let (progress, interp) = interpret(
        Harness::Claude,
        None,
        claude_api_error(429, "rate_limit", "success", true).as_bytes(),
    );
    assert_eq!(
        progress,
        ["session started", "rate limited, retry 3/10 in 2.3 s"]
    );
    let outcome = complete(interp).outcome;
    assert_eq!(outcome.failure_kind, Some(FailureKind::RateLimited));
    assert_eq!(outcome.retry_after, Some(RetryAfter::DelayMs(2300)));
    // Other statuses word their retries by kind; a hint is kept only for a retryable kind.
    for (status, error, line) in [
        (529, "overloaded", "overloaded, retry 3/10 in 2.3 s"),
        (500, "server_error", "server error 500, retry 3/10 in 2.3 s"),
        (
            401,
            "authentication_failed",
            "authentication failed, retry 3/10 in 2.3 s",
        ),
    ] {
        let (progress, interp) = interpret(
            Harness::Claude,
            None,
            claude_api_error(status, error, "success", true).as_bytes(),
        );
        assert_eq!(progress[1], line);
        let outcome = complete(interp).outcome;
        assert_eq!(
            outcome.retry_after.is_some(),
            outcome.failure_kind.is_some_and(FailureKind::is_retryable),
            "{status}"
        );
    }
    let unknown = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":503,"error_status":null,"error":"unknown"}"#;
    let (progress, _) = interpret(Harness::Claude, None, unknown.as_bytes());
    assert_eq!(progress, ["API request failed, retry 1/1 in 0.5 s"]);
}

#[test]
fn a_success_that_ended_on_an_api_error_is_not_a_success() {
    // `is_error: false` and `subtype: "success"`, but the turn ended on an API error.
    let stream = claude_api_error(429, "rate_limit", "success", false);
    assert_eq!(
        kind(Harness::Claude, &stream).1,
        Some(FailureKind::RateLimited)
    );
    // Without `terminal_reason` or a status on the result: the API-error message that ended
    // the turn is enough.
    let bare = format!(
        "{INIT}\n{}\n{}\n",
        r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: Request rejected (429) · This request would exceed your rate limit"}]},"parent_tool_use_id":null,"error":"rate_limit","is_api_error_message":true}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"","num_turns":1}"#
    );
    let (status, k) = kind(Harness::Claude, &bare);
    assert!(
        matches!(&status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic.contains("429")),
        "{status:?}"
    );
    assert_eq!(k, Some(FailureKind::RateLimited));
    // An API error the turn recovered from (a real answer came after it) is not the end.
    let recovered = format!(
        "{INIT}\n{}\n{}\n{}\n",
        r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: 529"}]},"parent_tool_use_id":null,"is_api_error_message":true}"#,
        r#"{"type":"assistant","message":{"model":"claude-sonnet-4-5","content":[{"type":"text","text":"done"}]},"parent_tool_use_id":null}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1}"#
    );
    assert_eq!(
        kind(Harness::Claude, &recovered),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn a_rejected_rate_limit_event_names_the_reset_time() {
    let stream = format!(
        "{INIT}\n{}\n{}\n{}\n",
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1778565600,"rateLimitType":"five_hour"}}"#,
        r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"You've hit your limit · resets 2pm"}]},"parent_tool_use_id":null,"is_api_error_message":true}"#,
        r#"{"type":"result","subtype":"success","is_error":true,"result":"You've hit your limit · resets 2pm","num_turns":1}"#
    );
    let (_, interp) = interpret(Harness::Claude, None, stream.as_bytes());
    let outcome = complete(interp).outcome;
    assert_eq!(outcome.failure_kind, Some(FailureKind::RateLimited));
    assert_eq!(
        outcome.retry_after,
        Some(RetryAfter::ResetAtUnixSecs(1_778_565_600))
    );
    // An `allowed` event is information only.
    let allowed = format!(
        "{INIT}\n{}\n{}\n",
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1778565600}}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","num_turns":1}"#
    );
    assert_eq!(
        kind(Harness::Claude, &allowed),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn permission_denials_classify_a_turn_they_failed_and_never_a_success() {
    let failed = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":2,"permission_denials":[{"tool_name":"Bash","tool_use_id":"t1","tool_input":{"command":"rm -rf x"}}]}"#;
    assert_eq!(
        kind(Harness::Claude, failed).1,
        Some(FailureKind::PermissionDenied)
    );
    let succeeded = r#"{"type":"result","subtype":"success","is_error":false,"result":"did without","permission_denials":[{"tool_name":"Bash"}]}"#;
    assert_eq!(
        kind(Harness::Claude, succeeded),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn qwen_and_grok_errors_decode_to_their_kinds() {
    let qwen = |message: &str| {
        format!(
            r#"{{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":1,"session_id":"q1","permission_denials":[],"error":{{"message":"{message}"}}}}"#
        )
    };
    for (message, expected) in [
        ("[API Error: 429 slow down]", Some(FailureKind::RateLimited)),
        (
            "[API Error: 503 Service Unavailable]",
            Some(FailureKind::Overloaded),
        ),
        (
            "[API Error: 500 the scripted outage]",
            Some(FailureKind::ServerError),
        ),
        (
            "[API Error: 401 Incorrect API key provided]",
            Some(FailureKind::Auth),
        ),
        (
            "[API Error: Connection error. (cause: fetch failed)]",
            Some(FailureKind::Network),
        ),
        ("[API Error: 400 Invalid value for 'messages']", None),
    ] {
        assert_eq!(kind(Harness::Qwen, &qwen(message)).1, expected, "{message}");
    }
    let grok = r#"{"type":"error","message":"429 Too Many Requests"}"#;
    assert_eq!(kind(Harness::Grok, grok).1, Some(FailureKind::RateLimited));
}

#[test]
fn a_cut_off_stream_is_cut_off_and_a_refusal_is_refused() {
    let (status, k) = kind(Harness::Claude, INIT);
    assert!(
        matches!(status, OutcomeStatus::TurnFailed { .. }),
        "{status:?}"
    );
    assert_eq!(k, Some(FailureKind::CutOff));
    // A process that died before the terminal event: its stream was cut off too.
    let (_, interp) = interpret(Harness::Claude, None, INIT.as_bytes());
    let outcome = interp
        .finish(HarnessExit::Failed {
            diagnostic: "claude was killed by signal 9".to_owned(),
        })
        .complete(None)
        .outcome;
    assert!(matches!(
        outcome.status,
        OutcomeStatus::ExecutionFailed { .. }
    ));
    assert_eq!(outcome.failure_kind, Some(FailureKind::CutOff));
    // A failed process that printed nothing never started a stream: not cut off.
    let outcome = agentrun_core::harness::Interpretation::new(Harness::Claude)
        .finish(HarnessExit::Failed {
            diagnostic: "codex exited with code 1: Not inside a trusted directory".to_owned(),
        })
        .complete(None)
        .outcome;
    assert!(matches!(
        outcome.status,
        OutcomeStatus::ExecutionFailed { .. }
    ));
    assert_eq!(outcome.failure_kind, None);
    let refusal = r#"{"type":"system","subtype":"model_refusal_no_fallback","api_refusal_category":"cyber"}
{"type":"result","subtype":"success","is_error":false,"result":"no"}"#;
    let (_, interp) = interpret(Harness::Claude, Some(None), refusal.as_bytes());
    let outcome = complete(interp).outcome;
    assert!(matches!(outcome.status, OutcomeStatus::Refused { .. }));
    assert_eq!(outcome.failure_kind, Some(FailureKind::Refused));
    assert_eq!(outcome.retry_after, None);
}

#[test]
fn stderr_classifies_only_a_failure_the_stream_does_not() {
    let ended = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#;
    // A process that failed after a complete stream, its API error only on stderr.
    let (_, mut interp) = interpret(Harness::Claude, None, ended.as_bytes());
    interp.handle_stderr_line(b"Error: 429 Too Many Requests");
    interp.handle_stderr_line(b"   at node:internal/process");
    let outcome = interp
        .finish(HarnessExit::Failed {
            diagnostic: "claude exited with code 1".to_owned(),
        })
        .complete(None)
        .outcome;
    assert!(matches!(
        outcome.status,
        OutcomeStatus::ExecutionFailed { .. }
    ));
    assert_eq!(outcome.failure_kind, Some(FailureKind::RateLimited));
    // A success stays a success whatever stderr says.
    let (_, mut interp) = interpret(Harness::Claude, None, ended.as_bytes());
    interp.handle_stderr_line(b"warning: 503 once, retried");
    assert_eq!((complete(interp).outcome.failure_kind), None);
    // The stream's own kind wins over stderr's.
    let (_, mut interp) = interpret(Harness::Claude, None, CLAUDE_PROMPT_TOO_LONG.as_bytes());
    interp.handle_stderr_line(b"ECONNREFUSED");
    assert_eq!(
        complete(interp).outcome.failure_kind,
        Some(FailureKind::ContextLength)
    );
    // An unclassified turn failure takes stderr's kind.
    let (_, mut interp) = interpret(
        Harness::Claude,
        None,
        br#"{"type":"result","subtype":"error_during_execution","is_error":true}"#,
    );
    interp.handle_stderr_line(b"getaddrinfo ENOTFOUND api.anthropic.com");
    assert_eq!(
        complete(interp).outcome.failure_kind,
        Some(FailureKind::Network)
    );
}
