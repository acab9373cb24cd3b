//! The failure taxonomy on what the real Codex, OpenCode, Gemini CLI and pi printed when the
//! scripted model server answered every request with one failure: HTTP 429 without and with
//! `Retry-After`, 503, 500, 401, a stream cut mid-answer, and a request never answered (the
//! CLI stopped after waiting). Recorded by `scripts/record-harness-fixtures.sh` (the
//! `*-failures` scenarios of `tests/tests/record_real_streams.rs`, the CLIs' own retries kept
//! few) into `tests/fixtures/harness/<harness>/<cli>-<version>-<scenario>.jsonl`, and fed
//! through `Interpretation` as `agentrun agent` feeds them: each is a failed turn of the right
//! kind, never a success, and the CLI's own retries shown on the stream are progress lines.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{
    Completion, FailureKind, Harness, HarnessExit, OutcomeStatus, RetryAfter,
};
use harness_common::*;

use FailureKind::*;

/// One recorded failure: the scenario, the kind it decodes to, the retry time the stream
/// gave, and the retry progress lines the CLI's own retries became.
struct Case {
    scenario: &'static str,
    kind: FailureKind,
    retry_after: Option<RetryAfter>,
    retries: &'static [&'static str],
}

const fn case(
    scenario: &'static str,
    kind: FailureKind,
    retry_after: Option<RetryAfter>,
    retries: &'static [&'static str],
) -> Case {
    Case {
        scenario,
        kind,
        retry_after,
        retries,
    }
}

/// Decodes `<prefix>-<scenario>.jsonl` as `harness`, the CLI's exit as recorded (pi exits 0
/// whatever happened; the others exit non-zero on a failed turn).
fn decode(harness: Harness, prefix: &str, scenario: &str) -> (Vec<String>, Completion) {
    let stream = fixture(&format!("{prefix}-{scenario}.jsonl"));
    let (progress, interp) = interpret(harness, None, &stream);
    // The stopped CLI's exit status is the stop's, not the turn's: the stream alone is
    // judged, as `agentrun interpret` judges a recorded one.
    let exit = if harness == Harness::Pi || scenario == "no-answer" {
        HarnessExit::Success
    } else {
        HarnessExit::Failed {
            diagnostic: format!("{harness} exited with code 1"),
        }
    };
    let completion = interp.finish(exit).complete(None);
    assert!(
        !completion
            .report
            .warnings
            .iter()
            .any(|w| w.contains("unrecognized")),
        "{prefix} {scenario}: {:?}",
        completion.report.warnings
    );
    (progress, completion)
}

/// The retry progress lines among `progress` (`<kind>, retry …`).
fn retry_lines(progress: &[String]) -> Vec<String> {
    progress
        .iter()
        .filter(|p| p.contains(", retry"))
        .cloned()
        .collect()
}

#[track_caller]
fn check(harness: Harness, prefix: &str, cases: &[Case]) {
    for c in cases {
        let (progress, completion) = decode(harness, prefix, c.scenario);
        let outcome = &completion.outcome;
        assert!(
            matches!(outcome.status, OutcomeStatus::TurnFailed { .. }),
            "{prefix} {}: {:?}",
            c.scenario,
            outcome.status
        );
        assert_eq!(
            outcome.failure_kind,
            Some(c.kind),
            "{prefix} {}",
            c.scenario
        );
        assert_eq!(
            outcome.retry_after, c.retry_after,
            "{prefix} {}",
            c.scenario
        );
        assert_eq!(
            retry_lines(&progress),
            strings(c.retries),
            "{prefix} {}",
            c.scenario
        );
    }
}

/// A request never answered, the CLI stopped: the stream has no terminal event, so the turn
/// did not finish (never a success, and not one of the API's kinds).
#[track_caller]
fn check_no_answer(harness: Harness, prefix: &str) {
    let (_, completion) = decode(harness, prefix, "no-answer");
    let outcome = &completion.outcome;
    assert!(!outcome.terminal_seen, "{prefix}");
    assert!(
        matches!(outcome.status, OutcomeStatus::TurnFailed { .. }),
        "{prefix}: {:?}",
        outcome.status
    );
    assert!(
        matches!(outcome.failure_kind, None | Some(CutOff)),
        "{prefix}: {:?}",
        outcome.failure_kind
    );
}

#[test]
fn codex() {
    const PREFIX: &str = "codex/codex-0.171.0";
    check(
        Harness::Codex,
        PREFIX,
        &[
            // Codex retries a 429 without `Retry-After` inside its request retries, silently.
            case("http-429", RateLimited, None, &[]),
            case(
                "http-429-retry-after",
                RateLimited,
                None,
                &["rate limited, retry 1/2", "rate limited, retry 2/2"],
            ),
            case(
                "http-503",
                Overloaded,
                None,
                &["overloaded, retry 1/2", "overloaded, retry 2/2"],
            ),
            // Codex words an HTTP 500 as "high demand": an overload.
            case(
                "http-500",
                Overloaded,
                None,
                &["overloaded, retry 1/2", "overloaded, retry 2/2"],
            ),
            case(
                "http-401",
                Auth,
                None,
                &["auth error, retry 1/2", "auth error, retry 2/2"],
            ),
            case(
                "disconnect",
                Network,
                None,
                &["network error, retry 1/2", "network error, retry 2/2"],
            ),
        ],
    );
    check_no_answer(Harness::Codex, PREFIX);
}

#[test]
fn pi() {
    const PREFIX: &str = "pi/pi-0.73.1";
    check(
        Harness::Pi,
        PREFIX,
        &[
            case(
                "http-429",
                RateLimited,
                None,
                &[
                    "rate limited, retry 1/2 in 0.5 s",
                    "rate limited, retry 2/2 in 1.0 s",
                ],
            ),
            case(
                "http-429-retry-after",
                RateLimited,
                None,
                &[
                    "rate limited, retry 1/2 in 0.5 s",
                    "rate limited, retry 2/2 in 1.0 s",
                ],
            ),
            case(
                "http-503",
                Overloaded,
                None,
                &[
                    "overloaded, retry 1/2 in 0.5 s",
                    "overloaded, retry 2/2 in 1.0 s",
                ],
            ),
            case(
                "http-500",
                ServerError,
                None,
                &[
                    "server error, retry 1/2 in 0.5 s",
                    "server error, retry 2/2 in 1.0 s",
                ],
            ),
            // Not retried.
            case("http-401", Auth, None, &[]),
            // pi's provider reports the cut connection as `terminated`.
            case(
                "disconnect",
                Network,
                None,
                &[
                    "network error, retry 1/2 in 0.5 s",
                    "network error, retry 2/2 in 1.0 s",
                ],
            ),
        ],
    );
    check_no_answer(Harness::Pi, PREFIX);
}

#[test]
fn gemini_cli() {
    const PREFIX: &str = "gemini/gemini-cli-0.61.0";
    // Gemini CLI retries on stderr only: no retry progress on the stream. It passes a 429's
    // and a 503's message without the API's body (so without the status: the wording
    // classifies them; its exit code, the status mod 256, still names it), a 500's and a
    // 401's with it.
    check(
        Harness::Gemini,
        PREFIX,
        &[
            case("http-429", RateLimited, None, &[]),
            case("http-429-retry-after", RateLimited, None, &[]),
            case("http-503", Overloaded, None, &[]),
            case("http-500", ServerError, None, &[]),
            case("http-401", Auth, None, &[]),
            // The cut connection, as its HTTP client words it: `[API Error: terminated]`.
            case("disconnect", Network, None, &[]),
        ],
    );
    check_no_answer(Harness::Gemini, PREFIX);
}

#[test]
fn opencode() {
    const PREFIX: &str = "opencode/opencode-1.18.33";
    // OpenCode retries 429 and 5xx five times on its own, silently; its `error` event names
    // the status and keeps the response headers, so the API's `Retry-After` is passed on
    // (kept for the retryable kinds only).
    check(
        Harness::OpenCode,
        PREFIX,
        &[
            case("http-429", RateLimited, None, &[]),
            case(
                "http-429-retry-after",
                RateLimited,
                Some(RetryAfter::DelayMs(1_000)),
                &[],
            ),
            case("http-503", Overloaded, Some(RetryAfter::DelayMs(0)), &[]),
            case("http-500", ServerError, None, &[]),
            case("http-401", Auth, None, &[]),
            // "Cannot connect to API: The socket connection was closed unexpectedly."
            case("disconnect", Network, None, &[]),
        ],
    );
    // Stopped while waiting, OpenCode had printed nothing.
    assert!(fixture(&format!("{PREFIX}-no-answer.jsonl")).is_empty());
    check_no_answer(Harness::OpenCode, PREFIX);
}

/// Gemini CLI's exit code is the failed request's HTTP status modulo 256 (173 = 429, 247 =
/// 503, 244 = 500, 145 = 401, 144 = 400). It passes a 429's and a 503's message on without
/// the API's body, so the stream names the kind only when the API's own wording does: where
/// it does not, the exit code does; where the stream names a kind, that kind stands.
#[test]
fn gemini_cli_exit_code_names_the_status_the_stream_drops() {
    const PREFIX: &str = "gemini/gemini-cli-0.61.0";
    let completion = |stream: &[u8], code: i32| {
        let (_, mut interp) = interpret(Harness::Gemini, None, stream);
        interp.handle_exit_code(code);
        interp
            .finish(HarnessExit::Failed {
                diagnostic: format!("gemini exited with code {code}"),
            })
            .complete(None)
    };
    // The recorded failures with the exit codes the CLI gave them: the exit code agrees.
    for (scenario, code, kind) in [
        ("http-429", 173, Some(RateLimited)),
        ("http-429-retry-after", 173, Some(RateLimited)),
        ("http-503", 247, Some(Overloaded)),
        ("http-500", 244, Some(ServerError)),
        ("http-401", 145, Some(Auth)),
        ("failure", 144, None),
    ] {
        let stream = fixture(&format!("{PREFIX}-{scenario}.jsonl"));
        let c = completion(&stream, code);
        assert!(
            matches!(c.outcome.status, OutcomeStatus::TurnFailed { .. }),
            "{scenario}: {:?}",
            c.outcome.status
        );
        assert_eq!(c.outcome.failure_kind, kind, "{scenario}");
    }
    // The recorded 503 with an API message that names no kind (the API words its errors as it
    // likes; the CLI passes the words on without the status). A 429's message always names
    // its kind: the CLI adds its own quota hint to it.
    let recorded = fixture(&format!("{PREFIX}-http-503.jsonl"));
    let stream = String::from_utf8(recorded.clone()).unwrap().replace(
        "[API Error: The server is overloaded]",
        "[API Error: Please try again later]",
    );
    assert_ne!(stream.as_bytes(), recorded);
    assert_eq!(
        completion(stream.as_bytes(), 1).outcome.failure_kind,
        None,
        "the words alone name no kind"
    );
    assert_eq!(
        completion(stream.as_bytes(), 247).outcome.failure_kind,
        Some(Overloaded)
    );
    // A kind the stream names stands: the 401's body names its status.
    let stream = fixture(&format!("{PREFIX}-http-401.jsonl"));
    assert_eq!(completion(&stream, 173).outcome.failure_kind, Some(Auth));
    // A run that printed nothing: the exit code alone classifies it.
    let c = completion(b"", 173);
    assert!(matches!(
        c.outcome.status,
        OutcomeStatus::ExecutionFailed { .. }
    ));
    assert_eq!(c.outcome.failure_kind, Some(RateLimited));
    // The other harnesses' exit codes name no status.
    let stream = fixture("pi/pi-0.73.1-failure.jsonl");
    let (_, mut interp) = interpret(Harness::Pi, None, &stream);
    interp.handle_exit_code(173);
    assert_eq!(
        interp
            .finish(HarnessExit::Success)
            .complete(None)
            .outcome
            .failure_kind,
        None
    );
}
