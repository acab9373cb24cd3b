//! The failure taxonomy of the dialects without an installable CLI (Muse, Antigravity), on
//! fake-harness streams in their documented shapes: the failure's reason (Muse's
//! `run.terminal.failed.reason`, Antigravity's `result.error` of `status: "ERROR"`) is the
//! API's error passed through, classified by the shared rules (its HTTP status, its wording).
//! A failure with no known status or wording stays unclassified, and a stream cut before its
//! terminal event is never a success.

// The shared helpers read fixtures from disk; the tests themselves do no I/O.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{FailureKind, Harness, OutcomeStatus};
use harness_common::{complete, interpret};

use FailureKind::*;

fn outcome(harness: Harness, stream: &str) -> (OutcomeStatus, Option<FailureKind>) {
    let (_, interp) = interpret(harness, None, stream.as_bytes());
    let outcome = complete(interp).outcome;
    (outcome.status, outcome.failure_kind)
}

/// The reasons an API failure reaches these harnesses' streams with, and their kinds.
const REASONS: &[(&str, Option<FailureKind>)] = &[
    (
        "model request failed: 429 Too Many Requests",
        Some(RateLimited),
    ),
    ("rate limit exceeded, retry later", Some(RateLimited)),
    ("quota exceeded", Some(RateLimited)),
    ("API error (HTTP 529): Overloaded", Some(Overloaded)),
    ("status 503: service unavailable", Some(Overloaded)),
    ("HTTP 500: internal server error", Some(ServerError)),
    ("HTTP 401: invalid api key", Some(Auth)),
    ("error sending request: connection refused", Some(Network)),
    (
        "prompt is too long: 250000 tokens > 200000 maximum",
        Some(ContextLength),
    ),
    ("sandbox denied write to /etc", None),
];

fn muse_failed(reason: &str) -> String {
    format!(
        "{}\n{}\n",
        r#"{"stream":{"kind":"session","id":"muse-s1"},"payload_type":"run.lifecycle.started","payload":{}}"#,
        serde_json::json!({
            "stream": {"kind": "run", "id": "r1"},
            "payload_type": "run.terminal.failed",
            "payload": {"reason": reason},
        })
    )
}

fn agy_failed(reason: &str) -> String {
    format!(
        "{}\n{}\n",
        r#"{"event":"init","conversation_id":"agy-c1","init":{"model":"gemini-3-pro"}}"#,
        serde_json::json!({
            "event": "result",
            "result": {"conversation_id": "agy-c1", "status": "ERROR", "error": reason, "num_turns": 1},
        })
    )
}

#[test]
fn muse_failures_are_classified_by_their_reason() {
    for (reason, kind) in REASONS {
        let (status, k) = outcome(Harness::Muse, &muse_failed(reason));
        assert!(
            matches!(&status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic == reason),
            "{reason}: {status:?}"
        );
        assert_eq!(k, *kind, "{reason}");
    }
}

#[test]
fn antigravity_failures_are_classified_by_their_error() {
    for (reason, kind) in REASONS {
        let (status, k) = outcome(Harness::Antigravity, &agy_failed(reason));
        assert!(
            matches!(&status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic == reason),
            "{reason}: {status:?}"
        );
        assert_eq!(k, *kind, "{reason}");
    }
}

#[test]
fn successes_carry_no_kind_and_cut_streams_are_not_successes() {
    let muse_ok = r#"{"stream":{"kind":"session","id":"m"},"payload_type":"run.lifecycle.started","payload":{}}
{"stream":{"kind":"run","id":"r"},"payload_type":"run.terminal.completed","payload":{"text":"rate limit docs written"}}"#;
    assert_eq!(
        outcome(Harness::Muse, muse_ok),
        (OutcomeStatus::Succeeded, None)
    );
    let agy_ok = r#"{"event":"result","result":{"conversation_id":"c","status":"SUCCESS","response":"HTTP 500 handled","num_turns":1}}"#;
    assert_eq!(
        outcome(Harness::Antigravity, agy_ok),
        (OutcomeStatus::Succeeded, None)
    );
    // Cut before the terminal event: a failed turn, whatever kind the shared rules give it.
    for (harness, cut) in [
        (
            Harness::Muse,
            r#"{"stream":{"kind":"session","id":"m"},"payload_type":"run.lifecycle.started","payload":{}}"#,
        ),
        (
            Harness::Antigravity,
            r#"{"event":"init","conversation_id":"c","init":{"model":"m"}}"#,
        ),
    ] {
        let (status, kind) = outcome(harness, cut);
        assert!(
            matches!(status, OutcomeStatus::TurnFailed { .. }),
            "{harness}: {status:?}"
        );
        assert!(matches!(kind, None | Some(CutOff)), "{harness}: {kind:?}");
    }
}
