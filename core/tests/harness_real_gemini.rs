//! What the real Gemini CLI (0.61.0) printed in the real-CLI scenarios — a text turn, a tool
//! turn, an HTTP 400, the context-length error, a persistent HTTP 500, a 429 then success, a
//! prompt starting with `-`, a session and its resumption — recorded by
//! `scripts/record-harness-fixtures.sh gemini` into
//! `tests/fixtures/harness/gemini/gemini-cli-0.61.0-<scenario>.jsonl` with the session log
//! agentrun reads after each (`…-session.jsonl`), fed through `Interpretation` exactly as
//! `agentrun agent` feeds them.
//!
//! Every answer of the scripted Gemini API reports 140 prompt tokens (40 of them cached), 16
//! candidate tokens and 4 thinking tokens: one request is 140 / 40 / 20 / 4 in agentrun's
//! convention, the tool turn's two requests twice that.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::retained::parse_gemini_session_log;
use agentrun_core::harness::{
    Completion, FailureKind, Harness, HarnessExit, Interpretation, OutcomeStatus, UsageScope,
};
use harness_common::*;

const PREFIX: &str = "gemini/gemini-cli-0.61.0";
/// The model every recording requested (and, unless the script named another, the one the
/// scripted API said served it).
const REQUESTED: &str = "gemini-2.5-flash";
const SERVED: &str = "gemini-2.5-flash-served-001";

fn session_id(n: u32) -> String {
    format!("00000000-0000-4000-8000-00000000000{n}")
}

/// Decodes `<scenario>.jsonl` as a new session (or a resumed one), with its session log, the
/// CLI's exit code given: the models observed on the stream, and the completion.
fn decode(scenario: &str, exit: i32, resumed: bool) -> (Vec<String>, Completion) {
    let stream = fixture(&format!("{PREFIX}-{scenario}.jsonl"));
    let log = fixture(&format!("{PREFIX}-{scenario}-session.jsonl"));
    let (_, mut interp) = interpret(Harness::Gemini, None, &stream);
    if !resumed {
        interp.started_new_session();
    }
    let exit = match exit {
        0 => HarnessExit::Success,
        code => HarnessExit::Failed {
            diagnostic: format!("gemini exited with code {code}"),
        },
    };
    let finished = interp.finish(exit);
    let observed = finished.observed_models().to_vec();
    let request = finished
        .retained_request()
        .expect("gemini has a session log");
    let record = request
        .kind
        .parse(request.session_id.as_deref(), &log)
        .expect("the recorded session log parses");
    assert!(record.supplementary, "{scenario}");
    assert!(record.models.is_empty(), "{scenario}: {:?}", record.models);
    (observed, finished.complete(Some(record)))
}

fn tokens(c: &Completion) -> [u64; 4] {
    let u = c.report.usage.as_ref().expect("usage");
    [
        u.input_tokens,
        u.cached_input_tokens,
        u.output_tokens,
        u.reasoning_tokens,
    ]
}

#[test]
fn a_text_turn() {
    let (live, c) = decode("text-turn", 0, false);
    assert_eq!(live, [REQUESTED.to_owned()]);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(c.outcome.session_id, Some(session_id(1)));
    assert_eq!(
        c.outcome.final_message.as_deref(),
        Some("Hello from the scripted model.")
    );
    assert_eq!(tokens(&c), [140, 40, 20, 4]);
    assert_eq!(
        c.report.usage.as_ref().unwrap().tokens_scope,
        UsageScope::Run
    );
    assert!(c.report.retained);
    assert!(c.report.warnings.is_empty(), "{:?}", c.report.warnings);
    assert_eq!(
        c.report.summary.as_deref(),
        Some("140 input tokens, 20 output tokens, 40 cached, 4 reasoning")
    );
}

#[test]
fn a_tool_turn() {
    let stream = fixture(&format!("{PREFIX}-tool-turn.jsonl"));
    let (progress, _) = interpret(Harness::Gemini, None, &stream);
    assert_eq!(
        progress,
        strings(&["session started", "$ echo made > made.txt && echo wrote"])
    );
    let (_, c) = decode("tool-turn", 0, false);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(c.outcome.final_message.as_deref(), Some("all done"));
    assert_eq!(tokens(&c), [280, 80, 40, 8]);
}

#[test]
fn an_http_400_is_a_failed_turn_naming_the_status() {
    let (live, c) = decode("failure", 144, false);
    // The requested model, listed with no tokens, is no observation.
    assert!(live.is_empty(), "{:?}", live);
    assert!(c.report.models.is_empty());
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "Invalid request (HTTP 400, INVALID_ARGUMENT)".to_owned()
        }
    );
    assert_eq!(c.outcome.failure_kind, None);
    assert_eq!(c.outcome.final_message, None);
}

#[test]
fn the_context_length_error_is_classified() {
    let (_, c) = decode("context-length", 144, false);
    assert!(matches!(c.outcome.status, OutcomeStatus::TurnFailed { .. }));
    assert_eq!(c.outcome.failure_kind, Some(FailureKind::ContextLength));
}

#[test]
fn a_persistent_500_is_a_failed_turn() {
    let (_, c) = decode("server-error", 244, false);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "Internal server error (HTTP 500, INTERNAL)".to_owned()
        }
    );
}

#[test]
fn a_429_then_success_observes_only_the_served_model() {
    let (live, c) = decode("rate-limited", 0, false);
    assert_eq!(live, [SERVED.to_owned()]);
    assert_eq!(c.report.models, [SERVED.to_owned()]);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(c.outcome.final_message.as_deref(), Some("after the retry"));
    // With security on, the served model is the main loop's.
    let stream = fixture(&format!("{PREFIX}-rate-limited.jsonl"));
    let (progress, _) = interpret(Harness::Gemini, Some(Some(REQUESTED)), &stream);
    assert_eq!(model_lines(&progress), [format!("Model: {SERVED}")]);
}

#[test]
fn a_prompt_starting_with_a_dash() {
    let (_, c) = decode("dash-prompt", 0, false);
    assert_eq!(c.outcome.final_message.as_deref(), Some("ok -x"));
    assert_eq!(c.report.models, [SERVED.to_owned()]);
}

#[test]
fn a_session_and_its_resumption_report_each_run_alone() {
    let (_, first) = decode("resume-first", 0, false);
    let (_, second) = decode("resume", 0, true);
    for (c, answer) in [(&first, "first answer"), (&second, "second answer")] {
        assert_eq!(c.outcome.session_id, Some(session_id(5)));
        assert_eq!(c.outcome.final_message.as_deref(), Some(answer));
        assert_eq!(tokens(c), [140, 40, 20, 4]);
        assert_eq!(
            c.report.usage.as_ref().unwrap().tokens_scope,
            UsageScope::Run
        );
    }
    // The resumed run's log holds both runs; only the second one's message is this run's.
    let log = fixture(&format!("{PREFIX}-resume-session.jsonl"));
    let record = parse_gemini_session_log(Some(&session_id(5)), &log).unwrap();
    assert_eq!(record.final_message.as_deref(), Some("second answer"));
    let usage = record.usage.unwrap();
    assert_eq!(usage.input_tokens, 140);
    assert_eq!(usage.reasoning_tokens, 4);
}

#[test]
fn the_session_log_fills_in_what_a_cut_stream_lacks() {
    // The stream cut after its first answer delta, before the result: a failed turn; the
    // log still names the message as the CLI committed it, and its usage.
    let stream = fixture(&format!("{PREFIX}-text-turn.jsonl"));
    let cut: Vec<u8> = lines(&stream)
        .iter()
        .filter(|l| !l.starts_with(br#"{"type":"result""#))
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    let (_, interp) = interpret(Harness::Gemini, None, &cut);
    let log = fixture(&format!("{PREFIX}-text-turn-session.jsonl"));
    let record = parse_gemini_session_log(Some(&session_id(1)), &log).unwrap();
    let c = complete_with(interp, Some(record));
    assert!(!c.outcome.terminal_seen);
    assert!(matches!(c.outcome.status, OutcomeStatus::TurnFailed { .. }));
    assert_eq!(tokens(&c), [140, 40, 20, 4]);
    assert!(c.report.models.is_empty());
    // A log of another session is refused.
    let err = parse_gemini_session_log(Some("other"), &log).unwrap_err();
    assert!(err.to_string().contains("another session"), "{err}");
}

#[test]
fn a_result_cut_anywhere_leaves_the_turn_unfinished_and_the_rest_decoded() {
    let stream = fixture(&format!("{PREFIX}-rate-limited.jsonl"));
    let all = lines(&stream);
    let (result, before) = all.split_last().unwrap();
    for cut in [1, result.len() / 2, result.len() - 1] {
        let mut interp = Interpretation::new(Harness::Gemini);
        for line in before {
            interp.handle_line(line);
        }
        // A cut line is malformed, not an event: and the next line still decodes.
        interp.handle_line(&result[..cut]);
        interp.handle_line(b"\xff\xfe not json");
        let c = interp.finish(HarnessExit::Success).complete(None);
        assert!(!c.outcome.terminal_seen, "cut at {cut}");
        assert_eq!(
            c.outcome.status,
            OutcomeStatus::TurnFailed {
                diagnostic: agentrun_core::harness::UNFINISHED.to_owned()
            },
            "cut at {cut}"
        );
        assert_eq!(c.outcome.session_id, Some(session_id(5)));
        assert_eq!(c.outcome.final_message.as_deref(), Some("after the retry"));
        assert!(c.report.models.is_empty(), "no model from a cut result");
        assert!(
            c.report.warnings[0].starts_with("2 unrecognized lines"),
            "{:?}",
            c.report.warnings
        );
    }
}
