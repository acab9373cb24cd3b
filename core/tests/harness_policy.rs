//! Scenario tests of the shared model and security policy (docs/interpretation.md), through
//! `Interpretation` only.
// Reading fixture files is the test harness's I/O, not the core's (the sans-IO rule covers
// core/src; see scripts/check-sans-io.sh).
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{
    Harness, HarnessExit, Interpretation, OutcomeStatus, RefusalCategory, RetainedKind,
    RetainedRecord,
};
use harness_common::*;

const GOLDEN: &str = "claude/agentrun-golden-synthetic.jsonl";

#[test]
fn golden_models_claude() {
    let bytes = fixture(GOLDEN);
    let (progress, interp) = interpret(Harness::Claude, Some(None), &bytes);
    assert_eq!(
        interp.observed_models(),
        strings(&[
            "child-haiku",
            "false-parent",
            "root-opus",
            "next-sonnet",
            "usage-only-model"
        ])
    );
    assert_eq!(
        model_lines(&progress),
        strings(&["Model: root-opus", "Model: next-sonnet", "Model: root-opus"])
    );
    let c = complete(interp);
    assert_eq!(c.outcome.final_message.as_deref(), Some("root answer"));
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(c.outcome.session_id.as_deref(), Some("golden-session"));
    assert_eq!(c.report.models.len(), 5);
    assert_eq!(
        c.report.summary.as_deref(),
        Some("3 turns, $0.12 at API prices")
    );
}

#[test]
fn golden_models_grok() {
    let bytes = fixture(GOLDEN);
    let (progress, interp) = interpret(Harness::Grok, Some(None), &bytes);
    // Same assistant predicates and scope, but no result-usage evidence.
    assert_eq!(
        interp.observed_models(),
        strings(&["child-haiku", "false-parent", "root-opus", "next-sonnet"])
    );
    assert_eq!(
        model_lines(&progress),
        strings(&["Model: root-opus", "Model: next-sonnet", "Model: root-opus"])
    );
    // Grok does not skip delegated results: the last result wins.
    let c = complete(interp);
    assert_eq!(c.outcome.final_message.as_deref(), Some("delegated answer"));
}

#[test]
fn security_progress_follows_ordinary_progress_on_the_same_line() {
    let bytes = fixture(GOLDEN);
    let mut interp = Interpretation::new(Harness::Claude);
    interp.for_security(None);
    let all = lines(&bytes);
    let mut per_line = Vec::new();
    for l in &all {
        per_line.push(interp.handle_line(l));
    }
    assert_eq!(per_line[0], strings(&["session started"]));
    // The root Bash line: ordinary progress, then the security line.
    assert_eq!(
        per_line[6],
        strings(&["commit and push", "Model: root-opus"])
    );
    // The same model again: suppressed.
    assert!(per_line[7].is_empty());
    assert_eq!(
        per_line[8],
        strings(&["Grep fn main", "Model: next-sonnet"])
    );
}

#[test]
fn models_are_readable_before_completion_and_without_security() {
    let bytes = fixture(GOLDEN);
    let mut interp = Interpretation::new(Harness::Claude);
    let all = lines(&bytes);
    for l in &all[..3] {
        let progress = interp.handle_line(l);
        assert!(
            model_lines(&progress).is_empty(),
            "no Model lines without security"
        );
    }
    assert_eq!(
        interp.observed_models(),
        strings(&["child-haiku", "false-parent"])
    );
}

#[test]
fn requested_models_never_become_observations() {
    let bytes = fixture(GOLDEN);
    let (_, interp) = interpret(Harness::Claude, Some(Some("my-requested")), &bytes);
    // init.model is "requested-opus": requested, never observed.
    assert!(
        !interp
            .observed_models()
            .iter()
            .any(|m| m == "requested-opus")
    );
    assert!(!interp.observed_models().iter().any(|m| m == "my-requested"));
    for h in [Harness::Codex, Harness::Muse, Harness::OpenCode] {
        let (progress, interp) = interpret(
            h,
            Some(Some("gpt-5-codex")),
            &fixture("codex/agentrun-resume-synthetic.jsonl"),
        );
        assert!(interp.observed_models().is_empty(), "{h}");
        let c = complete(interp);
        assert!(c.report.models.is_empty(), "{h}");
        if h == Harness::Codex {
            assert_eq!(
                model_lines(&progress),
                strings(&["Model: gpt-5-codex (requested)"])
            );
        }
    }
}

#[test]
fn codex_requested_and_default_wording_once_per_security_reset() {
    let bytes = fixture("codex/agentrun-resume-synthetic.jsonl");
    // Two thread.started events: printed once.
    let (progress, interp) = interpret(Harness::Codex, Some(Some("gpt-5-codex")), &bytes);
    assert_eq!(
        model_lines(&progress),
        strings(&["Model: gpt-5-codex (requested)"])
    );
    let c = complete(interp);
    assert_eq!(c.outcome.session_id.as_deref(), Some("codex-first-thread"));

    let (progress, _) = interpret(Harness::Codex, Some(None), &bytes);
    assert_eq!(
        model_lines(&progress),
        strings(&["Model: Harness default (no Model requested)"])
    );

    // Ordinary sessions print nothing.
    let (progress, _) = interpret(Harness::Codex, None, &bytes);
    assert!(model_lines(&progress).is_empty());

    // A reset (security session for a resume) prints again on the next start, not at once.
    let all = lines(&bytes);
    let mut interp = Interpretation::new(Harness::Codex);
    interp.for_security(Some("gpt-5-codex"));
    let mut progress = Vec::new();
    for l in &all[..4] {
        progress.extend(interp.handle_line(l));
    }
    interp.for_security(Some("gpt-5.1-codex"));
    assert_eq!(
        model_lines(&progress),
        strings(&["Model: gpt-5-codex (requested)"])
    );
    let mut after = Vec::new();
    for l in &all[4..] {
        after.extend(interp.handle_line(l));
    }
    assert_eq!(
        model_lines(&after),
        strings(&["Model: gpt-5.1-codex (requested)"])
    );
    assert!(interp.observed_models().is_empty());
    // Session identity stays with the first thread.
    let c = complete(interp);
    assert_eq!(c.outcome.session_id.as_deref(), Some("codex-first-thread"));
    assert_eq!(c.outcome.final_message.as_deref(), Some("second answer"));
}

#[test]
fn codex_security_enabled_after_start_does_not_replay() {
    let bytes = fixture("codex/claude-codes-hello_world.jsonl");
    let all = lines(&bytes);
    let mut interp = Interpretation::new(Harness::Codex);
    let mut progress = interp.handle_line(all[0]);
    interp.for_security(None);
    for l in &all[1..] {
        progress.extend(interp.handle_line(l));
    }
    assert!(model_lines(&progress).is_empty());
}

#[test]
fn agy_every_init_supplies_evidence_even_after_identity() {
    let bytes = fixture("antigravity/agentrun-stream-synthetic.jsonl");
    let (progress, interp) = interpret(Harness::Antigravity, Some(None), &bytes);
    assert_eq!(
        interp.observed_models(),
        strings(&["gemini-3-pro", "gemini-3-flash", "gemini-3-subagent"])
    );
    // The delegated init is attribution-only: no Model line for it.
    assert_eq!(
        model_lines(&progress),
        strings(&["Model: gemini-3-pro", "Model: gemini-3-flash"])
    );
    assert_eq!(
        progress.iter().filter(|p| *p == "session started").count(),
        1
    );
    assert!(progress.contains(&"view_file /work/README.md".to_owned()));
    assert!(progress.contains(&"commit and push".to_owned()));
    assert_eq!(
        progress
            .iter()
            .filter(|p| p.starts_with("view_file"))
            .count(),
        1,
        "one line per step index"
    );
    let c = complete(interp);
    // The first init had no identity: the next one supplied it, later ones did not replace it.
    assert_eq!(c.outcome.session_id.as_deref(), Some("agy-conv-1"));
    // The last result wins.
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(
        c.outcome.final_message.as_deref(),
        Some("README updated and pushed.")
    );
}

#[test]
fn claude_refusal_on_delegated_result_is_sticky_with_security() {
    let bytes = fixture("claude/agentrun-cyber-refusals-synthetic.jsonl");
    let (_, interp) = interpret(Harness::Claude, Some(None), &bytes);
    // The later ordinary success does not clear it.
    assert_eq!(interp.refusal(), Some(RefusalCategory::ClaudeCyber));
    let c = complete(interp);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::Refused {
            category: RefusalCategory::ClaudeCyber
        }
    );
    assert_eq!(c.report.models, strings(&["claude-opus-4-1"]));
}

#[test]
fn ordinary_sessions_keep_their_outcomes() {
    let bytes = fixture("claude/agentrun-cyber-refusals-synthetic.jsonl");
    let (_, interp) = interpret(Harness::Claude, None, &bytes);
    assert_eq!(interp.refusal(), None);
    let c = complete(interp);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
    assert_eq!(
        c.outcome.final_message.as_deref(),
        Some("The scan finished; nothing found.")
    );

    let bytes = fixture("codex/agentrun-cyber-synthetic.jsonl");
    let (_, interp) = interpret(Harness::Codex, None, &bytes);
    let c = complete(interp);
    assert!(matches!(c.outcome.status, OutcomeStatus::TurnFailed { .. }));
}

#[test]
fn enabling_security_later_does_not_replay_refusals_or_clear_models() {
    let bytes = fixture("claude/agentrun-cyber-refusals-synthetic.jsonl");
    let all = lines(&bytes);
    let mut interp = Interpretation::new(Harness::Claude);
    for l in &all[..3] {
        interp.handle_line(l); // includes the [cyber] result
    }
    interp.for_security(None);
    assert_eq!(interp.refusal(), None);
    assert_eq!(interp.observed_models(), strings(&["claude-opus-4-1"]));
    for l in &all[3..] {
        interp.handle_line(l);
    }
    let c = complete(interp);
    assert_eq!(c.outcome.status, OutcomeStatus::Succeeded);
}

#[test]
fn resetting_security_clears_the_refusal_but_keeps_models() {
    let bytes = fixture("claude/agentrun-cyber-refusals-synthetic.jsonl");
    let (_, mut interp) = interpret(Harness::Claude, Some(None), &bytes);
    assert!(interp.refusal().is_some());
    interp.for_security(Some("claude-opus-4-1"));
    assert_eq!(interp.refusal(), None);
    assert_eq!(interp.observed_models(), strings(&["claude-opus-4-1"]));
    // The last model line is forgotten too: the same model prints again after a reset.
    let again = interp
        .handle_line(br#"{"type":"assistant","message":{"model":"claude-opus-4-1","content":[]}}"#);
    assert_eq!(again, strings(&["Model: claude-opus-4-1"]));
}

#[test]
fn discussing_cyber_is_not_a_refusal() {
    let bytes = fixture("claude/agentrun-cyber-discussion-synthetic.jsonl");
    let (_, interp) = interpret(Harness::Claude, Some(None), &bytes);
    assert_eq!(interp.refusal(), None);
    assert_eq!(complete(interp).outcome.status, OutcomeStatus::Succeeded);
}

#[test]
fn claude_refusal_predicates() {
    let cases: &[(&str, bool)] = &[
        (
            r#"{"type":"system","subtype":"model_refusal_no_fallback","api_refusal_category":"cyber"}"#,
            true,
        ),
        (
            r#"{"type":"system","subtype":"model_refusal_no_fallback","api_refusal_category":"bio"}"#,
            false,
        ),
        (
            r#"{"type":"result","subtype":"success","result":"\n\t [cyber] refused"}"#,
            true,
        ),
        (
            r#"{"type":"result","subtype":"success","result":"API Error: 400 {\"message\":\"[cyber] blocked\"}"}"#,
            true,
        ),
        (
            r#"{"type":"result","subtype":"success","parent_tool_use_id":"t","result":"API Error: x [cyber]"}"#,
            true,
        ),
        (
            r#"{"type":"result","subtype":"success","result":"API Error: 500 overloaded"}"#,
            false,
        ),
        (
            r#"{"type":"result","subtype":"success","result":"see [cyber] later"}"#,
            false,
        ),
        (
            r#"{"type":"result","subtype":"success","result":42}"#,
            false,
        ),
        (
            r#"{"type":"assistant","message":{"model":"m","content":[{"type":"text","text":"[cyber] in an assistant"}]}}"#,
            false,
        ),
    ];
    for (line, refused) in cases {
        let mut interp = Interpretation::new(Harness::Claude);
        interp.for_security(None);
        interp.handle_line(line.as_bytes());
        assert_eq!(interp.refusal().is_some(), *refused, "{line}");
        // Grok shares the frames but not the refusal rules.
        let mut grok = Interpretation::new(Harness::Grok);
        grok.for_security(None);
        grok.handle_line(line.as_bytes());
        assert_eq!(grok.refusal(), None, "grok: {line}");
    }
}

#[test]
fn codex_refusal_only_on_turn_failed() {
    let bytes = fixture("codex/agentrun-cyber-synthetic.jsonl");
    let all = lines(&bytes);
    let mut interp = Interpretation::new(Harness::Codex);
    interp.for_security(None);
    for l in &all[..all.len() - 1] {
        interp.handle_line(l);
    }
    // The top-level error mentioning cybersecurity did not refuse.
    assert_eq!(interp.refusal(), None);
    interp.handle_line(all[all.len() - 1]);
    assert_eq!(interp.refusal(), Some(RefusalCategory::CodexCyber));
    let c = complete(interp);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::Refused {
            category: RefusalCategory::CodexCyber
        }
    );
    assert_eq!(c.report.diagnostics.len(), 2);
    // Reconnecting does not fail a turn.
    let (_, interp) = interpret(
        Harness::Codex,
        Some(None),
        b"{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n{\"type\":\"turn.completed\",\"usage\":{}}\n",
    );
    assert_eq!(complete(interp).outcome.status, OutcomeStatus::Succeeded);
}

/// Every fixture of every dialect (plus the golden case).
fn all_fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/harness");
    let mut out = Vec::new();
    for d in ["claude", "grok", "antigravity", "codex", "muse", "opencode"] {
        let mut entries: Vec<_> = std::fs::read_dir(format!("{dir}/{d}"))
            .expect("fixture dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            out.push((p.display().to_string(), std::fs::read(&p).expect("fixture")));
        }
    }
    out
}

#[test]
fn muse_and_opencode_invent_no_evidence_even_from_other_dialects() {
    for h in [Harness::Muse, Harness::OpenCode] {
        for (name, bytes) in all_fixtures() {
            let (progress, interp) = interpret(h, Some(Some("requested")), &bytes);
            assert!(interp.observed_models().is_empty(), "{h} {name}");
            assert!(
                model_lines(&progress).is_empty(),
                "{h} {name}: {progress:?}"
            );
            assert_eq!(interp.refusal(), None, "{h} {name}");
            let c = complete(interp);
            assert!(c.report.models.is_empty(), "{h} {name}");
            assert!(
                !matches!(c.outcome.status, OutcomeStatus::Refused { .. }),
                "{h} {name}"
            );
        }
    }
}

#[test]
fn observed_models_never_contain_empty_or_synthetic_names() {
    for h in Harness::ALL {
        for (name, bytes) in all_fixtures() {
            let (_, interp) = interpret(h, Some(None), &bytes);
            for m in interp.observed_models() {
                assert!(
                    !m.trim().is_empty() && m != "<synthetic>",
                    "{h} {name}: {m:?}"
                );
            }
        }
    }
}

#[test]
fn retained_record_present_replaces_even_when_empty_absent_keeps() {
    let stream = fixture("opencode/takopi-opencode_stream_success.jsonl");

    let record = RetainedKind::OpenCodeExport
        .parse(
            None,
            &fixture("opencode/agentrun-session-export-synthetic.json"),
        )
        .expect("export parses");
    let (_, interp) = interpret(Harness::OpenCode, None, &stream);
    let finished = interp.finish(HarnessExit::Success);
    let request = finished
        .retained_request()
        .expect("opencode has a retained record");
    assert_eq!(request.kind, RetainedKind::OpenCodeExport);
    assert_eq!(
        request.session_id.as_deref(),
        Some("ses_494719016ffe85dkDMj0FPRbHK")
    );
    let c = finished.complete(Some(record));
    assert!(c.report.retained);
    assert_eq!(c.report.models, strings(&["anthropic/claude-sonnet-4-5"]));
    let usage = c.report.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (43858, 118));
    assert!(c.report.warnings.is_empty(), "{:?}", c.report.warnings);

    let empty = RetainedKind::OpenCodeExport
        .parse(
            None,
            &fixture("opencode/agentrun-session-export-empty-synthetic.json"),
        )
        .expect("empty export parses");
    assert!(empty.models.is_empty());
    let (_, interp) = interpret(Harness::OpenCode, None, &stream);
    let c = complete_with(interp, Some(empty));
    assert!(c.report.retained);
    assert!(c.report.models.is_empty());

    // Absent: stream evidence (and stream usage) kept, with a warning.
    let (_, interp) = interpret(
        Harness::Muse,
        None,
        &fixture("muse/agentrun-exec-synthetic.jsonl"),
    );
    let observed = interp.observed_models().to_vec();
    let c = complete_with(interp, None);
    assert!(!c.report.retained);
    assert_eq!(c.report.models, observed);
    assert!(
        c.report
            .warnings
            .iter()
            .any(|w| w.contains("Muse session log"))
    );

    // A present record with models replaces an empty stream list for Muse too.
    let log = RetainedKind::MuseSessionLog
        .parse(
            Some("muse-sess-42"),
            &fixture("muse/agentrun-session-log-synthetic.jsonl"),
        )
        .expect("log parses");
    let (_, interp) = interpret(
        Harness::Muse,
        None,
        &fixture("muse/agentrun-exec-synthetic.jsonl"),
    );
    let c = complete_with(interp, Some(log));
    assert_eq!(
        c.report.models,
        strings(&["muse-large-2026", "muse-small-2026"])
    );
    assert_eq!(c.outcome.final_message.as_deref(), Some("All tests pass."));

    // A harness without a retained record ignores one: its stream models stay.
    let (_, interp) = interpret(Harness::Claude, None, &fixture(GOLDEN));
    let finished = interp.finish(HarnessExit::Success);
    assert!(finished.retained_request().is_none());
    let c = finished.complete(Some(RetainedRecord::default()));
    assert_eq!(c.report.models.len(), 5);
}

#[test]
fn interruption_suppresses_the_report_but_keeps_models() {
    let bytes = fixture(GOLDEN);
    let all = lines(&bytes);
    let mut interp = Interpretation::new(Harness::Claude);
    for l in &all[..8] {
        interp.handle_line(l);
    }
    let interrupted = interp.interrupt();
    assert_eq!(
        interrupted.observed_models(),
        strings(&["child-haiku", "false-parent", "root-opus"])
    );
    // Muse: no retained read either (there is no `Finished` to ask).
    let (_, interp) = interpret(
        Harness::Muse,
        None,
        &fixture("muse/agentrun-exec-synthetic.jsonl"),
    );
    assert!(interp.interrupt().observed_models().is_empty());
}

#[test]
fn outcome_precedence_refusal_turn_failure_execution_failure() {
    let ok = fixture("claude/morpheus-claude_stream.jsonl");
    let (_, interp) = interpret(Harness::Claude, None, &ok);
    let c = interp
        .finish(HarnessExit::Failed {
            diagnostic: "exit 1".to_owned(),
        })
        .complete(None);
    assert_eq!(
        c.outcome.status,
        OutcomeStatus::ExecutionFailed {
            diagnostic: "exit 1".to_owned()
        }
    );
    // The report is still complete.
    assert_eq!(
        c.report.summary.as_deref(),
        Some("2 turns, $0.03 at API prices")
    );

    let failed = fixture("codex/openagent-codex_usage_limit.jsonl");
    let (_, interp) = interpret(Harness::Codex, None, &failed);
    let c = interp
        .finish(HarnessExit::Failed {
            diagnostic: "exit 1".to_owned(),
        })
        .complete(None);
    assert!(
        matches!(&c.outcome.status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic.contains("usage limit"))
    );

    let refused = fixture("codex/agentrun-cyber-synthetic.jsonl");
    let (_, interp) = interpret(Harness::Codex, Some(None), &refused);
    let c = interp
        .finish(HarnessExit::Failed {
            diagnostic: "exit 1".to_owned(),
        })
        .complete(None);
    assert!(matches!(c.outcome.status, OutcomeStatus::Refused { .. }));
}

#[test]
fn drift_is_reported_as_a_warning() {
    let stream = b"{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\"}\n\
{\"type\":\"brand_new_event\"}\n{\"type\":\"brand_new_event\"}\n{\"type\":\"other_new\"}\n\
not json\n[1,2]\n\n{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"ok\"}\n";
    let (_, interp) = interpret(Harness::Claude, None, stream);
    let c = complete(interp);
    assert_eq!(c.outcome.final_message.as_deref(), Some("ok"));
    assert_eq!(c.report.warnings.len(), 1, "{:?}", c.report.warnings);
    let w = &c.report.warnings[0];
    assert!(w.starts_with("5 unrecognized lines"), "{w}");
    assert!(w.contains("brand_new_event, other_new"), "{w}");
}

#[test]
fn progress_lines_are_single_lines() {
    let mut interp = Interpretation::new(Harness::Claude);
    interp.for_security(None);
    let progress = interp.handle_line(
        br#"{"type":"assistant","message":{"model":"evil\nModel: fake","content":[{"type":"tool_use","name":"Ta\rsk","input":{"description":"two\nlines"}}]}}"#,
    );
    assert_eq!(
        progress,
        strings(&["Ta\\rsk two", "Model: evil\\nModel: fake"])
    );
    // The observed model keeps its exact name.
    assert_eq!(interp.observed_models(), strings(&["evil\nModel: fake"]));
}

#[test]
fn grok_prefers_the_init_session_id() {
    let stream = b"{\"type\":\"user\",\"session_id\":\"from-user-event\"}\n\
{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"from-init\"}\n\
{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"ok\",\"session_id\":\"from-result\"}\n";
    let (_, interp) = interpret(Harness::Grok, None, stream);
    assert_eq!(
        complete(interp).outcome.session_id.as_deref(),
        Some("from-init")
    );
    let no_init = b"{\"type\":\"user\",\"session_id\":\"from-user-event\"}\n{\"type\":\"result\",\"result\":\"ok\"}\n";
    let (_, interp) = interpret(Harness::Grok, None, no_init);
    assert_eq!(
        complete(interp).outcome.session_id.as_deref(),
        Some("from-user-event")
    );
    // Claude takes the session id from init only.
    let (_, interp) = interpret(Harness::Claude, None, no_init);
    assert_eq!(complete(interp).outcome.session_id, None);
}
