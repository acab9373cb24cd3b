//! Fidelity to the real CLIs: the launch invocations and stop signals, the field rules each
//! decoder gets right (found by reading the decoders against the dialects' documented
//! shapes), the one token convention, and the retained records (Codex session file, Muse
//! session log, OpenCode export) with their effect on the completion.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::retained::{codex_token_total, parse_codex_session};
use agentrun_core::harness::{
    Harness, HarnessExit, Interpretation, LaunchRequest, OutcomeStatus, RetainedKind, Stdin,
    StopSignal, Usage, UsageLedger, UsageScope,
};
use harness_common::*;

fn request(prompt: &str) -> LaunchRequest {
    LaunchRequest {
        prompt: prompt.to_owned(),
        ..LaunchRequest::default()
    }
}

fn feed_str(h: Harness, text: &str) -> (Vec<String>, Interpretation) {
    interpret(h, None, text.as_bytes())
}

/// Feeds `lines`, one event each.
fn feed_lines(h: Harness, lines: &[&str]) -> (Vec<String>, Interpretation) {
    feed_str(h, &lines.join("\n"))
}

#[test]
fn prompts_come_after_the_end_of_options_or_on_stdin() {
    for prompt in ["-x", "--help me", "help", "resume"] {
        for h in [
            Harness::Claude,
            Harness::Antigravity,
            Harness::Codex,
            Harness::Muse,
        ] {
            let inv = h.invocation(&request(prompt)).unwrap();
            let n = inv.args.len();
            assert_eq!(inv.args[n - 2..], ["--", prompt], "{h}: {:?}", inv.args);
            assert_eq!(inv.stdin, Stdin::Null);
        }
        let grok = Harness::Grok.invocation(&request(prompt)).unwrap();
        assert_eq!(grok.args.last().unwrap(), &format!("--single={prompt}"));
        let opencode = Harness::OpenCode.invocation(&request(prompt)).unwrap();
        assert_eq!(opencode.stdin, Stdin::Prompt(prompt.to_owned()));
        assert!(!opencode.args.iter().any(|a| a == prompt));
    }
    // Codex resumes with the `resume` subcommand before the end of options.
    let inv = Harness::Codex
        .invocation(&LaunchRequest {
            resume: Some("th-1".to_owned()),
            model: Some("gpt-5.5".to_owned()),
            effort: Some("high".to_owned()),
            skip_git_repo_check: true,
            ..request("resume")
        })
        .unwrap();
    assert_eq!(
        inv.args,
        [
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-m",
            "gpt-5.5",
            "-c",
            "model_reasoning_effort=\"high\"",
            "resume",
            "th-1",
            "--",
            "resume"
        ]
    );
    // The Git-repository escape hatch is Codex's alone.
    let claude = Harness::Claude
        .invocation(&LaunchRequest {
            skip_git_repo_check: true,
            ..request("p")
        })
        .unwrap();
    assert!(!claude.args.iter().any(|a| a == "--skip-git-repo-check"));
}

#[test]
fn opencode_passes_the_effort_as_its_variant_and_every_cli_disables_self_updates() {
    let inv = Harness::OpenCode
        .invocation(&LaunchRequest {
            model: Some("p/m".to_owned()),
            effort: Some("high".to_owned()),
            resume: Some("ses_1".to_owned()),
            ..request("hi")
        })
        .unwrap();
    assert_eq!(
        inv.args,
        [
            "run",
            "--format",
            "json",
            "-m",
            "p/m",
            "--variant",
            "high",
            "-s",
            "ses_1"
        ]
    );
    for (h, key, value) in [
        (Harness::OpenCode, "OPENCODE_DISABLE_AUTOUPDATE", "1"),
        (Harness::Antigravity, "AGY_CLI_DISABLE_AUTO_UPDATE", "true"),
        (Harness::Muse, "MUSE_NO_AUTO_UPDATE", "1"),
        (Harness::Grok, "GROK_DISABLE_AUTOUPDATER", "1"),
    ] {
        let env = h.invocation(&request("p")).unwrap().env;
        assert_eq!(env, [(key.to_owned(), value.to_owned())], "{h}");
    }
}

#[test]
fn codex_is_interrupted_first_and_the_others_terminated() {
    for h in Harness::ALL {
        let expected: &[StopSignal] = match h {
            Harness::Codex => &[StopSignal::Interrupt, StopSignal::Terminate],
            _ => &[StopSignal::Terminate],
        };
        assert_eq!(h.stop_signals().sequence, expected, "{h}");
    }
}

#[test]
fn antigravity_reads_the_nested_bodies_and_an_error_result_fails() {
    let (progress, interp) = feed_lines(
        Harness::Antigravity,
        &[
            r#"{"event":"init","conversation_id":"c1","init":{"model":"gemini-3-pro"}}"#,
            r#"{"event":"step_update","step_update":{"step_index":4,"state":"ACTIVE","step_type":"tool","tool_name":"grep_search","tool_info":{"name":"grep_search","parameters":{"SearchPath":"/src","Query":"fn main"}}}}"#,
            r#"{"event":"step_update","step_update":{"step_index":5,"state":"ACTIVE","step_type":"tool","tool_info":{"name":"run_command","parameters":{"CommandLine":"cargo build\nmore"}}}}"#,
            r#"{"event":"result","result":{"conversation_id":"c1","status":"ERROR","error":"model overloaded","response":"","num_turns":2,"usage":{"input_tokens":100,"output_tokens":10,"thinking_tokens":5,"cache_read_tokens":40}}}"#,
        ],
    );
    assert_eq!(
        progress,
        strings(&[
            "session started",
            "grep_search /src",
            "$ cargo build",
            "error: model overloaded"
        ])
    );
    let c = complete(interp);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "model overloaded".to_owned()
        }
    );
    assert_eq!(c.outcome.final_message, None);
    let usage = c.report.usage.expect("usage");
    // Output includes the thinking Antigravity counts apart.
    assert_eq!(
        (
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.output_tokens,
            usage.reasoning_tokens
        ),
        (100, 40, 15, 5)
    );
}

#[test]
fn antigravity_delegation_is_keyed_on_the_parent_tool_use_id() {
    let (_, mut interp) = (
        Vec::<String>::new(),
        Interpretation::new(Harness::Antigravity),
    );
    interp.for_security(None);
    let p1 = interp.handle_line(
        br#"{"event":"init","conversation_id":"c","parent_id":"x","init":{"model":"main"}}"#,
    );
    let p2 = interp
        .handle_line(br#"{"event":"init","parent_tool_use_id":"t1","init":{"model":"delegate"}}"#);
    assert!(p1.contains(&"Model: main".to_owned()), "{p1:?}");
    assert!(p2.is_empty(), "attribution only: {p2:?}");
    assert_eq!(interp.observed_models(), strings(&["main", "delegate"]));
}

#[test]
fn codex_items_reemitted_completed_but_in_progress_are_killed_work() {
    let (_, interp) = feed_lines(
        Harness::Codex,
        &[
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"/bin/bash -lc 'sleep 100'","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"/bin/bash -lc 'sleep 100'","status":"in_progress"}}"#,
            r#"{"type":"item.started","item":{"id":"i2","type":"command_execution","command":"true","status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i2","type":"command_execution","command":"true","status":"completed","exit_code":0}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"output_tokens":3,"reasoning_output_tokens":1}}"#,
        ],
    );
    let c = complete(interp);
    assert_eq!(c.outcome.killed_work, strings(&["$ sleep 100"]));
}

#[test]
fn claude_takes_the_session_from_the_first_init_only() {
    let (_, interp) = feed_lines(
        Harness::Claude,
        &[
            r#"{"type":"system","subtype":"init","model":"m"}"#,
            r#"{"type":"system","subtype":"init","session_id":"later-session"}"#,
        ],
    );
    assert_eq!(complete(interp).outcome.session_id, None);
}

#[test]
fn claude_forgets_an_api_error_once_its_turn_ended() {
    let (_, interp) = feed_lines(
        Harness::Claude,
        &[
            r#"{"type":"system","subtype":"init","session_id":"s"}"#,
            r#"{"type":"assistant","isApiErrorMessage":true,"is_api_error_message":true,"message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: 500 first turn"}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"recovered"}"#,
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":""}"#,
        ],
    );
    let c = complete(interp);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "result error_during_execution".to_owned()
        }
    );
}

#[test]
fn opencode_errors_read_type_and_message_in_every_shape() {
    for (error, expected) in [
        (
            r#"{"type":"ProviderAuthError","message":"bad key"}"#,
            "ProviderAuthError: bad key",
        ),
        (
            r#"{"name":"APIError","data":{"message":"Internal server error","statusCode":500}}"#,
            "APIError: Internal server error",
        ),
        (r#""plain words""#, "plain words"),
        (r#"{"message":"only a message"}"#, "only a message"),
    ] {
        let line = format!(r#"{{"type":"error","sessionID":"ses_1","error":{error}}}"#);
        let (_, interp) = feed_str(Harness::OpenCode, &line);
        assert_eq!(
            complete(interp).outcome.status,
            OutcomeStatus::TurnFailed {
                diagnostic: expected.to_owned()
            },
            "{error}"
        );
    }
}

#[test]
fn model_names_are_trimmed_before_they_are_stored() {
    let (_, interp) = feed_lines(
        Harness::Claude,
        &[
            r#"{"type":"assistant","message":{"model":" m ","content":[]}}"#,
            r#"{"type":"assistant","message":{"model":"m","content":[]}}"#,
            r#"{"type":"assistant","message":{"model":"   ","content":[]}}"#,
        ],
    );
    assert_eq!(interp.observed_models(), strings(&["m"]));
    let record = RetainedKind::OpenCodeExport
        .parse(
            None,
            br#"{"messages":[{"info":{"role":"assistant","modelID":" m "}},{"info":{"role":"assistant","modelID":"m"}}]}"#,
        )
        .unwrap();
    assert_eq!(record.models, strings(&["m"]));
}

fn counts(u: &Usage) -> (u64, u64, u64, u64) {
    (
        u.input_tokens,
        u.cached_input_tokens,
        u.output_tokens,
        u.reasoning_tokens,
    )
}

#[test]
fn one_token_convention_input_with_cached_output_with_reasoning() {
    // Claude counts cache reads and writes apart from input_tokens.
    let (_, interp) = feed_str(
        Harness::Claude,
        r#"{"type":"result","subtype":"success","result":"x","usage":{"input_tokens":10,"cache_read_input_tokens":30,"cache_creation_input_tokens":5,"output_tokens":8,"output_tokens_details":{"thinking_tokens":2}}}"#,
    );
    assert_eq!(
        counts(&complete(interp).report.usage.unwrap()),
        (45, 30, 8, 2)
    );
    // Codex already counts cached inside input and reasoning inside output.
    let (_, interp) = feed_str(
        Harness::Codex,
        r#"{"type":"turn.completed","usage":{"input_tokens":40,"cached_input_tokens":30,"output_tokens":8,"reasoning_output_tokens":2}}"#,
    );
    assert_eq!(
        counts(&complete(interp).report.usage.unwrap()),
        (40, 30, 8, 2)
    );
    // OpenCode counts both apart.
    let (_, interp) = feed_str(
        Harness::OpenCode,
        r#"{"type":"step_finish","sessionID":"s","part":{"reason":"stop","tokens":{"input":10,"output":6,"reasoning":2,"cache":{"read":30,"write":5}}}}"#,
    );
    assert_eq!(
        counts(&complete(interp).report.usage.unwrap()),
        (45, 30, 8, 2)
    );
}

const CODEX_SESSION_BEFORE: &str = concat!(
    r#"{"type":"session_meta","payload":{"id":"th-1","cli_version":"0.171.0"}}"#,
    "\n",
    r#"{"type":"turn_context","payload":{"model":"gpt-5.5"}}"#,
    "\n",
    r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"cached_input_tokens":20,"output_tokens":10,"reasoning_output_tokens":4}}}}"#,
    "\n",
);

const CODEX_SESSION_APPENDED: &str = concat!(
    r#"{"type":"turn_context","payload":{"model":" gpt-5.5-mini "}}"#,
    "\n",
    r#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":250,"cached_input_tokens":50,"output_tokens":30,"reasoning_output_tokens":9}}}}"#,
    "\n",
);

const CODEX_RESUMED_STREAM: &str = concat!(
    r#"{"type":"thread.started","thread_id":"th-1"}"#,
    "\n",
    r#"{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"again"}}"#,
    "\n",
    r#"{"type":"turn.completed","usage":{"input_tokens":250,"cached_input_tokens":50,"output_tokens":30,"reasoning_output_tokens":9}}"#,
);

#[test]
fn codex_session_file_gives_the_model_used_and_the_usage_of_this_run() {
    let before = codex_token_total(CODEX_SESSION_BEFORE.as_bytes()).expect("a total");
    assert_eq!(counts(&before), (100, 20, 10, 4));
    let mut record = parse_codex_session(CODEX_SESSION_APPENDED.as_bytes()).unwrap();
    assert_eq!(record.models, strings(&["gpt-5.5-mini"]));
    record.usage_baseline = Some(before);

    let (_, interp) = feed_str(Harness::Codex, CODEX_RESUMED_STREAM);
    let finished = interp.finish(HarnessExit::Success);
    let request = finished
        .retained_request()
        .expect("codex has a session file");
    assert_eq!(request.kind, RetainedKind::CodexSession);
    assert_eq!(request.session_id.as_deref(), Some("th-1"));
    let c = finished.complete(Some(record));
    assert_eq!(c.report.models, strings(&["gpt-5.5-mini"]));
    assert_eq!(counts(c.report.usage.as_ref().unwrap()), (150, 30, 20, 5));
    assert_eq!(
        c.report.summary.as_deref(),
        Some("150 input tokens, 20 output tokens, 30 cached, 5 reasoning")
    );
    // The running totals the share came from stay available to a session ledger, which
    // must also count what stopped runs spent between the baseline and its own last record.
    let session = c.report.session_usage.as_ref().expect("the running totals");
    assert_eq!(counts(session), (250, 50, 30, 9));
    assert_eq!(session.tokens_scope, UsageScope::Session);
    let mut ledger = UsageLedger::default();
    let first = Usage {
        input_tokens: 60,
        output_tokens: 6,
        tokens_scope: UsageScope::Run,
        ..Usage::default()
    };
    ledger.record(Some("th-1"), &first);
    // A stopped run spent up to the baseline (100 in, 10 out) and reported nothing.
    ledger.record(Some("th-1"), session);
    let total = ledger.total().unwrap();
    assert_eq!((total.input_tokens, total.output_tokens), (250, 30));
    assert_eq!(c.outcome.final_message.as_deref(), Some("again"));

    // Without the file: the stream's usage as reported, no model, and no warning (the
    // requested-model fallback covers the model).
    let (_, interp) = feed_str(Harness::Codex, CODEX_RESUMED_STREAM);
    let c = complete_with(interp, None);
    assert!(c.report.models.is_empty());
    assert_eq!(counts(c.report.usage.as_ref().unwrap()), (250, 50, 30, 9));
    assert!(c.report.warnings.is_empty(), "{:?}", c.report.warnings);
}

#[test]
fn a_baseline_above_the_reported_usage_is_not_subtracted() {
    let reported = Usage {
        input_tokens: 10,
        output_tokens: 5,
        ..Usage::default()
    };
    let before = Usage {
        input_tokens: 100,
        ..Usage::default()
    };
    assert_eq!(reported.since(&before), reported);
    assert!(codex_token_total(b"not json\n").is_none());
    assert!(parse_codex_session(b"{\"type\":\"turn_context\"}\nnot json\n").is_err());
}

#[test]
fn the_opencode_export_gives_the_answer_and_its_failure() {
    let export = br#"{"info":{"id":"ses_1"},"messages":[
        {"info":{"role":"user"},"parts":[{"type":"text","text":"question"}]},
        {"info":{"role":"assistant","providerID":"p","modelID":"m"},"parts":[{"type":"text","text":"first"}]},
        {"info":{"role":"assistant","providerID":"p","modelID":"m","error":{"name":"APIError","data":{"message":"boom"}}},
         "parts":[{"type":"step-start"},{"type":"text","text":"partial"},{"type":"text","text":"last words"}]}]}"#;
    let record = RetainedKind::OpenCodeExport.parse(None, export).unwrap();
    assert_eq!(record.final_message.as_deref(), Some("last words"));
    assert_eq!(record.failure.as_deref(), Some("APIError: boom"));
    let (_, interp) = feed_str(
        Harness::OpenCode,
        r#"{"type":"text","sessionID":"ses_1","part":{"text":"stream text"}}"#,
    );
    let c = complete_with(interp, Some(record));
    assert_eq!(c.outcome.final_message.as_deref(), Some("last words"));
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "APIError: boom".to_owned()
        }
    );
    // A readable export without text is still authoritative for the models.
    let bare = RetainedKind::OpenCodeExport
        .parse(None, br#"{"messages":[]}"#)
        .unwrap();
    let (_, interp) = feed_str(
        Harness::OpenCode,
        r#"{"type":"text","sessionID":"ses_1","part":{"text":"stream text"}}
{"type":"step_finish","sessionID":"ses_1","part":{"reason":"stop"}}"#,
    );
    let c = complete_with(interp, Some(bare));
    assert!(c.report.retained);
    assert_eq!(c.outcome.final_message.as_deref(), Some("stream text"));
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
}

#[test]
fn a_resumed_opencode_export_counts_only_this_runs_messages() {
    let export = br#"{"info":{"id":"ses_1"},"messages":[
        {"info":{"role":"user"},"parts":[{"type":"text","text":"first"}]},
        {"info":{"role":"assistant","providerID":"p","modelID":"old","tokens":{"input":100,"output":10}},"parts":[{"type":"text","text":"first answer"}]},
        {"info":{"role":"user"},"parts":[{"type":"text","text":"second"}]},
        {"info":{"role":"assistant","providerID":"p","modelID":"new","tokens":{"input":7,"output":3}},"parts":[{"type":"text","text":"second answer"}]}]}"#;
    let record = RetainedKind::OpenCodeExport.parse(None, export).unwrap();
    assert_eq!(record.models, strings(&["p/new"]));
    assert_eq!(counts(record.usage.as_ref().unwrap()), (7, 0, 3, 0));
    assert_eq!(record.final_message.as_deref(), Some("second answer"));
}

#[test]
fn qwen_gets_the_prompt_joined_to_its_option_and_refuses_an_effort() {
    for prompt in ["-x", "--help me", "help", "a=b"] {
        let inv = Harness::Qwen
            .invocation(&LaunchRequest {
                prompt: prompt.into(),
                model: Some("m".into()),
                resume: Some("S".into()),
                harness_args: vec!["--approval-mode".into(), "yolo".into()],
                ..LaunchRequest::default()
            })
            .unwrap();
        assert_eq!(inv.program, "qwen");
        assert_eq!(
            inv.args,
            [
                "--output-format",
                "stream-json",
                "-m",
                "m",
                "--approval-mode",
                "yolo",
                "--resume",
                "S",
                &format!("--prompt={prompt}"),
            ]
        );
        // Qwen drops a prompt given after `--`.
        assert!(!inv.args.iter().any(|a| a == "--"));
        assert_eq!(inv.stdin, Stdin::Null);
        assert_eq!(
            inv.env,
            [(
                "QWEN_USAGE_STATISTICS_ENABLED".to_owned(),
                "false".to_owned()
            )]
        );
    }
    let err = Harness::Qwen
        .invocation(&LaunchRequest {
            prompt: "p".into(),
            effort: Some("high".into()),
            ..LaunchRequest::default()
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("qwen takes no reasoning effort on its command line"),
        "{err}"
    );
}

#[test]
fn pi_reads_the_prompt_on_stdin_and_gets_the_effort_as_its_thinking_level() {
    for prompt in ["-x", "--help me", "help", "@file"] {
        let inv = Harness::Pi
            .invocation(&LaunchRequest {
                prompt: prompt.into(),
                model: Some("p/m".into()),
                effort: Some("high".into()),
                resume: Some("S".into()),
                ..LaunchRequest::default()
            })
            .unwrap();
        assert_eq!(inv.program, "pi");
        // pi has no `--`: the prompt is never an argument.
        assert_eq!(
            inv.args,
            [
                "--mode",
                "json",
                "--model",
                "p/m",
                "--thinking",
                "high",
                "--session",
                "S",
                "-p"
            ]
        );
        assert_eq!(inv.stdin, Stdin::Prompt(prompt.to_owned()));
        assert_eq!(
            inv.env,
            [
                ("PI_SKIP_VERSION_CHECK".to_owned(), "1".to_owned()),
                ("PI_TELEMETRY".to_owned(), "0".to_owned()),
            ]
        );
    }
}

#[test]
fn pi_exit_0_after_a_failed_request_is_a_failed_turn() {
    let (_, interp) = feed_lines(
        Harness::Pi,
        &[
            r#"{"type":"session","id":"s1"}"#,
            r#"{"type":"message_end","message":{"role":"assistant","content":[],"model":"req","stopReason":"error","errorMessage":"400 bad"}}"#,
            r#"{"type":"agent_end","messages":[{"role":"assistant","content":[],"stopReason":"error","errorMessage":"400 bad"}]}"#,
        ],
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::TurnFailed {
            diagnostic: "400 bad".to_owned()
        }
    );
    // The requested model is never an observation.
    assert!(c.report.models.is_empty());
    // A retry that succeeds clears it.
    let (_, interp) = feed_lines(
        Harness::Pi,
        &[
            r#"{"type":"session","id":"s1"}"#,
            r#"{"type":"agent_end","messages":[{"role":"assistant","content":[],"stopReason":"error","errorMessage":"429 slow"}]}"#,
            r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000,"errorMessage":"429 slow"}"#,
            r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"ok"}],"responseModel":"served","stopReason":"stop","usage":{"input":10,"cacheRead":5,"output":2,"cost":{"total":0.5}}}}"#,
            r#"{"type":"auto_retry_end","success":true,"attempt":1}"#,
            r#"{"type":"agent_end","messages":[{"role":"assistant","content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}"#,
        ],
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(c.outcome.final_message.as_deref(), Some("ok"));
    assert_eq!(c.report.models, ["served".to_owned()]);
    let u = c.report.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cached_input_tokens, u.output_tokens),
        (15, 5, 2)
    );
    assert_eq!(u.cost_usd, Some(0.5));
}

#[test]
fn qwen_counts_its_assistant_messages_not_the_sessions_running_total() {
    let (_, interp) = feed_lines(
        Harness::Qwen,
        &[
            r#"{"type":"system","subtype":"init","session_id":"q1","model":"requested"}"#,
            r#"{"type":"assistant","session_id":"q1","parent_tool_use_id":null,"message":{"model":"requested","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":140,"output_tokens":20,"cache_read_input_tokens":40}}}"#,
            r#"{"type":"result","subtype":"success","session_id":"q1","is_error":false,"num_turns":1,"result":"hi","usage":{"input_tokens":280,"output_tokens":40,"cache_read_input_tokens":80}}"#,
        ],
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert!(
        c.report.models.is_empty(),
        "the stream names only the requested model"
    );
    let u = c.report.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.cached_input_tokens, u.output_tokens),
        (140, 40, 20)
    );
    assert_eq!(c.outcome.session_id.as_deref(), Some("q1"));
}
