//! Work and memory bounds of interpretation: a model list keeps at most `MAX_MODELS` names
//! (the rest counted), each at most `MAX_MODEL_NAME_BYTES`; adding a model is constant time,
//! so a stream of many distinct names decodes in linear time. A line past the JSON budget
//! (depth, values) is skipped before any value is built, with a warning; one that ends an
//! item or a turn is still read for the few small fields that do.

use agentrun_core::harness::interpretation::{MAX_MODEL_NAME_BYTES, MAX_MODELS, MODEL_NAME_CUT};
use agentrun_core::harness::{
    Harness, HarnessExit, Interpretation, MAX_JSON_DEPTH, MAX_JSON_VALUES, OutcomeStatus,
    RetainedError, RetainedKind, TurnSummary, UNREADABLE_END,
};

fn assistant(model: &str) -> String {
    format!(r#"{{"type":"assistant","message":{{"model":"{model}","content":[]}}}}"#)
}

/// 100 000 distinct names: with a linear scan per name (the quadratic accumulation) this is
/// about 5·10⁹ string comparisons, minutes on a small machine; with a set it is a moment. The
/// test asserts the result, not the time, but a regression makes it impractically slow.
#[test]
fn many_distinct_models_keep_the_first_ones_and_count_the_rest() {
    const N: usize = 100_000;
    let mut interp = Interpretation::new(Harness::Claude);
    interp.for_security(None);
    for i in 0..N {
        interp.handle_line(assistant(&format!("model-{i}")).as_bytes());
    }
    // Seen again: neither kept twice nor counted twice.
    for i in [0, 1, MAX_MODELS - 1, MAX_MODELS, N - 1] {
        interp.handle_line(assistant(&format!("model-{i}")).as_bytes());
    }
    let expected: Vec<String> = (0..MAX_MODELS).map(|i| format!("model-{i}")).collect();
    assert_eq!(interp.observed_models(), expected.as_slice());
    let omitted = (N - MAX_MODELS) as u64;
    assert_eq!(interp.observed_models_omitted(), omitted);
    // Its debug form shows the count, not what was left out.
    let debug = format!("{interp:?}");
    assert!(debug.len() < 10_000 && debug.contains(&format!("omitted: {omitted}")));
    let finished = interp.finish(HarnessExit::Success);
    assert_eq!(finished.observed_models_omitted(), omitted);
    let models = finished.observed_models().to_vec();
    let completion = finished.complete(None);
    assert_eq!(completion.report.models, expected);
    assert_eq!(completion.report.models_omitted, omitted);
    let json = serde_json::to_value(
        TurnSummary::new(Harness::Claude, &models, Some(&completion))
            .with_observed_models_omitted(omitted),
    )
    .expect("json");
    assert_eq!(json["observed_models_omitted"], omitted);
    assert_eq!(json["report"]["models_omitted"], omitted);
}

#[test]
fn a_model_beyond_the_cap_is_still_shown_as_progress() {
    let mut interp = Interpretation::new(Harness::Claude);
    interp.for_security(None);
    for i in 0..MAX_MODELS {
        interp.handle_line(assistant(&format!("m{i}")).as_bytes());
    }
    let progress = interp.handle_line(assistant("the-one-beyond").as_bytes());
    assert_eq!(progress, vec!["Model: the-one-beyond".to_owned()]);
    assert_eq!(interp.observed_models().len(), MAX_MODELS);
    assert_eq!(interp.observed_models_omitted(), 1);
}

#[test]
fn no_omitted_count_in_json_when_nothing_was_left_out() {
    let mut interp = Interpretation::new(Harness::Claude);
    interp.handle_line(assistant("m").as_bytes());
    assert_eq!(interp.observed_models_omitted(), 0);
    let completion = interp.finish(HarnessExit::Success).complete(None);
    let json = serde_json::to_value(TurnSummary::new(
        Harness::Claude,
        &completion.report.models,
        Some(&completion),
    ))
    .expect("json");
    assert!(json.get("observed_models_omitted").is_none(), "{json}");
    assert!(json["report"].get("models_omitted").is_none(), "{json}");
}

#[test]
fn a_huge_model_name_is_cut_on_a_character_boundary_with_a_marker() {
    // Three-byte characters, so the byte bound falls inside one.
    let huge = "é".to_owned() + &"€".repeat((5 << 20) / 3);
    assert!(huge.len() > 5_000_000);
    let mut interp = Interpretation::new(Harness::Claude);
    interp.for_security(None);
    let progress = interp.handle_line(assistant(&huge).as_bytes());
    let kept = &interp.observed_models()[0];
    assert!(kept.ends_with(MODEL_NAME_CUT), "{}", kept.len());
    let body = kept.strip_suffix(MODEL_NAME_CUT).expect("marker");
    assert!(body.len() <= MAX_MODEL_NAME_BYTES);
    assert!(body.len() > MAX_MODEL_NAME_BYTES - 4);
    assert!(huge.starts_with(body));
    // The progress line shows the cut name, not 5 MB.
    assert_eq!(progress, vec![format!("Model: {kept}")]);
    // The same huge name again is the same model.
    interp.handle_line(assistant(&huge).as_bytes());
    assert_eq!(interp.observed_models().len(), 1);
    assert_eq!(interp.observed_models_omitted(), 0);
}

#[test]
fn a_name_at_the_bound_is_kept_whole() {
    let name = "a".repeat(MAX_MODEL_NAME_BYTES);
    let mut interp = Interpretation::new(Harness::Claude);
    interp.handle_line(assistant(&name).as_bytes());
    assert_eq!(interp.observed_models(), [name]);
}

#[test]
fn one_result_naming_many_models_is_bounded_too() {
    let keys: Vec<String> = (0..1000).map(|i| format!(r#""u{i}":{{}}"#)).collect();
    let line = format!(
        r#"{{"type":"result","subtype":"success","result":"ok","modelUsage":{{{}}}}}"#,
        keys.join(",")
    );
    let mut interp = Interpretation::new(Harness::Claude);
    interp.handle_line(line.as_bytes());
    assert_eq!(interp.observed_models().len(), MAX_MODELS);
    assert_eq!(interp.observed_models_omitted(), 1000 - MAX_MODELS as u64);
}

#[test]
fn retained_records_cap_their_model_lists() {
    // OpenCode export.
    let messages: Vec<String> = (0..200)
        .map(|i| format!(r#"{{"info":{{"role":"assistant","providerID":"p","modelID":"m{i}"}}}}"#))
        .collect();
    let doc = format!(
        r#"{{"info":{{"id":"s"}},"messages":[{}]}}"#,
        messages.join(",")
    );
    let record = RetainedKind::OpenCodeExport
        .parse(None, doc.as_bytes())
        .expect("export");
    assert_eq!(record.models.len(), MAX_MODELS);
    assert_eq!(record.models[0], "p/m0");
    assert_eq!(record.models_omitted, 200 - MAX_MODELS as u64);
    // Codex session file, with a huge name among them.
    let mut lines: Vec<String> = (0..100)
        .map(|i| format!(r#"{{"type":"turn_context","payload":{{"model":"c{i}"}}}}"#))
        .collect();
    lines.insert(
        0,
        format!(
            r#"{{"type":"turn_context","payload":{{"model":"{}"}}}}"#,
            "x".repeat(1 << 20)
        ),
    );
    let record = RetainedKind::CodexSession
        .parse(None, lines.join("\n").as_bytes())
        .expect("codex");
    assert_eq!(record.models.len(), MAX_MODELS);
    assert!(record.models[0].len() <= MAX_MODEL_NAME_BYTES + MODEL_NAME_CUT.len());
    assert_eq!(record.models_omitted, 101 - MAX_MODELS as u64);
    // The completion carries the record's count.
    let mut interp = Interpretation::new(Harness::Codex);
    interp.handle_line(br#"{"type":"thread.started","thread_id":"t"}"#);
    let completion = interp.finish(HarnessExit::Success).complete(Some(record));
    assert_eq!(completion.report.models_omitted, 101 - MAX_MODELS as u64);
    // Muse session log.
    let lines: Vec<String> = (0..100)
        .map(|i| {
            format!(
                r#"{{"stream":{{"kind":"session","id":"s"}},"payload":{{"kind":"run","event":{{"kind":"model_completed","model":"u{i}"}}}}}}"#
            )
        })
        .collect();
    let record = RetainedKind::MuseSessionLog
        .parse(Some("s"), lines.join("\n").as_bytes())
        .expect("muse");
    assert_eq!(record.models.len(), MAX_MODELS);
    assert_eq!(record.models_omitted, 100 - MAX_MODELS as u64);
}

/// Killed work is deduplicated with a set as well: many distinct killed tasks decode in
/// linear time and keep their order.
#[test]
fn many_killed_tasks_keep_their_order() {
    const N: usize = 50_000;
    let mut interp = Interpretation::new(Harness::Claude);
    for i in 0..N {
        let line = format!(
            r#"{{"type":"system","subtype":"task_notification","status":"stopped","task_id":"t{i}"}}"#
        );
        interp.handle_line(line.as_bytes());
        // Twice: deduplicated.
        interp.handle_line(line.as_bytes());
    }
    let completion = interp.finish(HarnessExit::Success).complete(None);
    assert_eq!(completion.outcome.killed_work.len(), N);
    assert_eq!(completion.outcome.killed_work[0], "t0");
    assert_eq!(completion.outcome.killed_work[N - 1], format!("t{}", N - 1));
}

#[test]
fn many_unfinished_codex_items_are_killed_work_in_start_order() {
    const N: usize = 50_000;
    let mut interp = Interpretation::new(Harness::Codex);
    interp.handle_line(br#"{"type":"thread.started","thread_id":"t"}"#);
    for i in 0..N {
        let line = format!(
            r#"{{"type":"item.started","item":{{"id":"i{i}","type":"command_execution","command":"c{i}","status":"in_progress"}}}}"#
        );
        interp.handle_line(line.as_bytes());
    }
    // Every other one completes.
    for i in (0..N).step_by(2) {
        let line = format!(
            r#"{{"type":"item.completed","item":{{"id":"i{i}","type":"command_execution","command":"c{i}","status":"completed"}}}}"#
        );
        interp.handle_line(line.as_bytes());
    }
    interp.handle_line(br#"{"type":"turn.completed","usage":{}}"#);
    let completion = interp.finish(HarnessExit::Success).complete(None);
    let killed = &completion.outcome.killed_work;
    assert_eq!(killed.len(), N / 2);
    assert!(killed[0].contains("c1"), "{}", killed[0]);
    assert!(killed[N / 2 - 1].contains(&format!("c{}", N - 1)));
}

/// A line of `n` empty arrays inside an event of `h`'s dialect.
fn wide_line(h: Harness, n: usize) -> String {
    let body = format!("[{}[]]", "[],".repeat(n - 1));
    match h {
        Harness::Claude | Harness::Grok | Harness::Qwen => {
            format!(r#"{{"type":"result","subtype":"success","result":"ok","x":{body}}}"#)
        }
        Harness::Pi => format!(r#"{{"type":"agent_end","messages":[],"x":{body}}}"#),
        Harness::Antigravity => format!(r#"{{"event":"result","x":{body}}}"#),
        Harness::Codex => format!(r#"{{"type":"turn.completed","usage":{{}},"x":{body}}}"#),
        Harness::Muse => format!(r#"{{"payload_type":"run.terminal.completed","x":{body}}}"#),
        Harness::OpenCode => format!(r#"{{"type":"step_finish","x":{body}}}"#),
        Harness::Gemini => format!(r#"{{"type":"result","status":"success","x":{body}}}"#),
        // `Harness` is non-exhaustive: a harness added later fails here, loudly, until it is
        // given an event of its dialect, rather than being checked with another's.
        other => panic!("no wide line for the {other} dialect yet: add one"),
    }
}

/// A line nested `depth` deep, long enough (a long string) to be scanned for the budget.
fn deep_line(depth: usize) -> String {
    // The object is depth 1; `depth - 1` nested arrays inside it.
    format!(
        r#"{{"type":"result","subtype":"success","result":"ok","pad":"{}","x":{}{}}}"#,
        "p".repeat(MAX_JSON_VALUES),
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

#[test]
fn a_line_over_the_value_budget_is_skipped_with_a_warning_and_later_lines_decode() {
    for h in Harness::ALL {
        let mut interp = Interpretation::new(h);
        let progress = interp.handle_line(wide_line(h, MAX_JSON_VALUES + 1).as_bytes());
        assert!(progress.is_empty(), "{h}: {progress:?}");
        // The next line still decodes.
        let probe = match h {
            Harness::Claude | Harness::Grok => {
                r#"{"type":"assistant","message":{"model":"after","content":[]}}"#
            }
            Harness::Antigravity => r#"{"event":"init","init":{"model":"after"}}"#,
            _ => "",
        };
        if !probe.is_empty() {
            interp.handle_line(probe.as_bytes());
            assert_eq!(interp.observed_models(), ["after".to_owned()], "{h}");
        }
        let c = interp.finish(HarnessExit::Success).complete(None);
        assert!(
            c.report
                .warnings
                .iter()
                .any(|w| w.starts_with("1 line exceeds the JSON budget")),
            "{h}: {:?}",
            c.report.warnings
        );
        // Not format drift.
        assert!(
            !c.report.warnings.iter().any(|w| w.contains("unrecognized")),
            "{h}: {:?}",
            c.report.warnings
        );
    }
}

#[test]
fn a_line_within_the_budget_decodes() {
    // The widest and the deepest line the budget allows are events as usual.
    let mut interp = Interpretation::new(Harness::Claude);
    // `[` + n-1 × `[],` + `[]]`: n + 1 containers and n - 1 commas, plus the object and its
    // 3 commas: 2n + 4 values, exactly the budget.
    interp.handle_line(wide_line(Harness::Claude, MAX_JSON_VALUES / 2 - 2).as_bytes());
    interp.handle_line(deep_line(MAX_JSON_DEPTH).as_bytes());
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(c.report.warnings.is_empty(), "{:?}", c.report.warnings);
    assert!(c.outcome.terminal_seen);
}

#[test]
fn a_line_nested_past_the_depth_budget_is_skipped_and_named_in_the_diagnostic() {
    let mut interp = Interpretation::new(Harness::Claude);
    assert!(
        interp
            .handle_line(deep_line(MAX_JSON_DEPTH + 1).as_bytes())
            .is_empty()
    );
    // A short line nested as deep is refused by the parser itself: malformed.
    let short = format!(
        r#"{{"type":"result","x":{}}}"#,
        "[".repeat(MAX_JSON_DEPTH + 1)
    );
    assert!(interp.handle_line(short.as_bytes()).is_empty());
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(
        c.report
            .warnings
            .iter()
            .any(|w| w.starts_with("1 unrecognized line")),
        "{:?}",
        c.report.warnings
    );
    // The only result was the skipped line: the end is unreadable, not known to be missing.
    match &c.outcome.status {
        OutcomeStatus::TurnFailed { diagnostic } => {
            assert!(diagnostic.starts_with(UNREADABLE_END), "{diagnostic}");
            assert!(diagnostic.contains("JSON budget"), "{diagnostic}");
        }
        other => panic!("{other:?}"),
    }
}

/// Brackets and commas inside strings are text, not values.
#[test]
fn strings_do_not_count_against_the_budget() {
    let text = "[[{,".repeat(MAX_JSON_VALUES) + "\\\"[[[";
    let line =
        format!(r#"{{"type":"result","subtype":"success","result":"{text}","num_turns":1}}"#);
    let mut interp = Interpretation::new(Harness::Claude);
    interp.handle_line(line.as_bytes());
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(c.report.warnings.is_empty(), "{:?}", c.report.warnings);
    assert!(
        c.outcome
            .final_message
            .is_some_and(|m| m.ends_with("\"[[["))
    );
}

/// An assistant frame of many empty blocks (each costs a whole typed view) is refused before
/// it is read, on the typed path and the value fallback alike.
#[test]
fn an_assistant_frame_of_many_empty_blocks_is_over_budget() {
    let blocks = "{},".repeat(MAX_JSON_VALUES);
    let line =
        format!(r#"{{"type":"assistant","message":{{"model":"bomb","content":[{blocks}{{}}]}}}}"#);
    let mut interp = Interpretation::new(Harness::Claude);
    interp.for_security(None);
    assert!(interp.handle_line(line.as_bytes()).is_empty());
    assert!(interp.observed_models().is_empty());
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(
        c.report.warnings.iter().any(|w| w.contains("JSON budget")),
        "{:?}",
        c.report.warnings
    );
}

#[test]
fn a_retained_line_over_the_budget_makes_the_record_unreadable() {
    let line = format!(
        r#"{{"stream":{{"kind":"session","id":"s"}},"x":[{}0]}}"#,
        "0,".repeat(MAX_JSON_VALUES)
    );
    let err = RetainedKind::MuseSessionLog
        .parse(Some("s"), line.as_bytes())
        .expect_err("over budget");
    assert!(
        matches!(err, RetainedError::LineOverBudget { line: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("more than"), "{err}");
}

#[test]
fn an_opencode_export_over_the_document_budget_is_unreadable() {
    let doc = format!(
        r#"{{"info":{{"id":"s"}},"messages":[],"x":[{}[]]}}"#,
        "[],".repeat(agentrun_core::harness::MAX_JSON_DOCUMENT_VALUES)
    );
    let err = RetainedKind::OpenCodeExport
        .parse(None, doc.as_bytes())
        .expect_err("over budget");
    assert_eq!(err, RetainedError::DocumentOverBudget);
    // Within it (and past the per-line budget), the export parses.
    let doc = format!(
        r#"{{"info":{{"id":"s"}},"messages":[],"x":[{}[]]}}"#,
        "[],".repeat(MAX_JSON_VALUES)
    );
    assert!(
        RetainedKind::OpenCodeExport
            .parse(None, doc.as_bytes())
            .is_ok()
    );
}

/// A Codex `item.completed` past the value budget (an MCP result of 300 000 numbers, a
/// 600 KB line) still ends its item: the turn succeeds with no work reported killed.
#[test]
fn a_codex_item_completed_over_the_budget_still_ends_its_item() {
    let mut interp = Interpretation::new(Harness::Codex);
    interp.handle_line(br#"{"type":"thread.started","thread_id":"t"}"#);
    interp.handle_line(
        br#"{"type":"item.started","item":{"id":"item_1","type":"mcp_tool_call","server":"srv","tool":"numbers","status":"in_progress"}}"#,
    );
    let numbers = vec!["1"; 300_000].join(",");
    let completed = format!(
        r#"{{"type":"item.completed","item":{{"id":"item_1","type":"mcp_tool_call","server":"srv","tool":"numbers","arguments":{{}},"result":{{"content":[],"structured_content":{{"values":[{numbers}]}}}},"error":null,"status":"completed"}}}}"#
    );
    assert!(completed.len() > MAX_JSON_VALUES);
    interp.handle_line(completed.as_bytes());
    interp.handle_line(
        br#"{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"done"}}"#,
    );
    interp.handle_line(br#"{"type":"turn.completed","usage":{"input_tokens":5}}"#);
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(
        c.outcome.killed_work.is_empty(),
        "{:?}",
        c.outcome.killed_work
    );
    assert!(
        matches!(c.outcome.status, OutcomeStatus::Succeeded),
        "{:?}",
        c.outcome.status
    );
    // Still reported as past the budget.
    assert!(
        c.report
            .warnings
            .iter()
            .any(|w| w.starts_with("1 line exceeds the JSON budget")),
        "{:?}",
        c.report.warnings
    );
}

/// A Claude `result` past the value budget (a huge `modelUsage` and payload) still ends the
/// turn with its outcome and result text.
#[test]
fn a_claude_result_over_the_budget_still_ends_the_turn() {
    let mut interp = Interpretation::new(Harness::Claude);
    interp
        .handle_line(br#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-x"}"#);
    let payload = vec!["{}"; 300_000].join(",");
    let result = format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"payload":[{payload}],"modelUsage":{{"claude-x":{{"inputTokens":1}}}},"result":"all done","num_turns":2,"total_cost_usd":0.5,"usage":{{"input_tokens":3,"output_tokens":4}}}}"#
    );
    assert!(result.len() > MAX_JSON_VALUES);
    interp.handle_line(result.as_bytes());
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(c.outcome.terminal_seen);
    assert!(
        matches!(c.outcome.status, OutcomeStatus::Succeeded),
        "{:?}",
        c.outcome.status
    );
    assert_eq!(c.outcome.final_message.as_deref(), Some("all done"));
    assert!(
        c.report
            .warnings
            .iter()
            .any(|w| w.starts_with("1 line exceeds the JSON budget")),
        "{:?}",
        c.report.warnings
    );
}

/// An OpenCode `step_finish` past the value budget still ends the turn with its tokens, and
/// an `error` past it still fails it with its message.
#[test]
fn an_opencode_step_finish_or_error_over_the_budget_still_ends_the_turn() {
    let bulk = vec!["[]"; 300_000].join(",");
    let mut interp = Interpretation::new(Harness::OpenCode);
    interp.handle_line(
        format!(
            r#"{{"type":"step_finish","sessionID":"ses_1","part":{{"snapshot":[{bulk}],"reason":"stop","cost":0,"tokens":{{"input":7,"output":2,"cache":{{"read":1,"write":0}}}}}}}}"#
        )
        .as_bytes(),
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    assert!(c.outcome.terminal_seen);
    assert_eq!(c.outcome.session_id.as_deref(), Some("ses_1"));
    assert!(
        matches!(c.outcome.status, OutcomeStatus::Succeeded),
        "{:?}",
        c.outcome.status
    );
    let mut interp = Interpretation::new(Harness::OpenCode);
    interp.handle_line(
        format!(
            r#"{{"type":"error","sessionID":"ses_1","error":{{"name":"APIError","data":{{"message":"boom","responseBody":[{bulk}]}}}}}}"#
        )
        .as_bytes(),
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    match &c.outcome.status {
        OutcomeStatus::TurnFailed { diagnostic } => {
            assert!(diagnostic.contains("APIError: boom"), "{diagnostic}");
        }
        other => panic!("{other:?}"),
    }
}

/// A Qwen `assistant` message past the value budget (a tool call with a large input) still
/// counts its tokens: after a resume its messages' usage is the only count of the run's own.
#[test]
fn a_qwen_assistant_message_over_the_budget_still_counts_its_usage() {
    let numbers = vec!["1"; MAX_JSON_VALUES].join(",");
    let big = format!(
        r#"{{"type":"assistant","session_id":"s1","parent_tool_use_id":null,"message":{{"model":"qwen-x","content":[{{"type":"tool_use","id":"t","name":"write_file","input":{{"values":[{numbers}]}}}}],"usage":{{"input_tokens":100,"cache_read_input_tokens":40,"output_tokens":7,"reasoning_tokens":2}}}}}}"#
    );
    let mut interp = Interpretation::new(Harness::Qwen);
    interp.handle_line(big.as_bytes());
    interp.handle_line(
        br#"{"type":"assistant","session_id":"s1","parent_tool_use_id":null,"message":{"model":"qwen-x","content":[{"type":"text","text":"done"}],"usage":{"input_tokens":150,"output_tokens":3}}}"#,
    );
    // The result's usage is the session's running total: not the run's.
    interp.handle_line(
        br#"{"type":"result","subtype":"success","session_id":"s1","is_error":false,"num_turns":2,"result":"done","usage":{"input_tokens":9999,"output_tokens":9999}}"#,
    );
    let c = interp.finish(HarnessExit::Success).complete(None);
    let usage = c.report.usage.expect("usage");
    assert_eq!(
        (
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.output_tokens,
            usage.reasoning_tokens
        ),
        (250, 40, 10, 2)
    );
    assert_eq!(c.outcome.session_id.as_deref(), Some("s1"));
    // Still reported as past the budget.
    assert!(
        c.report.warnings.iter().any(|w| w.contains("JSON budget")),
        "{:?}",
        c.report.warnings
    );
}
