//! The properties of the harness decoders through [`Interpretation`], as fuzz bodies: the fuzz
//! targets `harness_*` and the stable test suite (corpus replay, fixtures, property tests) run
//! exactly this code. Only the public interface is used.
//!
//! Every body panics only when a property is violated: feeding never panics, every progress
//! line is a single line, and the observed models (live and reported) never contain an empty
//! name, `<synthetic>` or a duplicate, never more than `MAX_MODELS` names nor a name longer
//! than the bound.

use agentrun_core::harness::interpretation::{
    MAX_MODEL_NAME_BYTES, MAX_MODELS, MODEL_NAME_CUT, SYNTHETIC_MODEL,
};
use agentrun_core::harness::{Harness, HarnessExit, Interpretation};

/// Most lines one input is split into (keeps each run fast).
const MAX_LINES: usize = 4096;

/// Most events one input of [`plausible_events`] is turned into. Every input byte stands for a
/// whole event of up to ~200 bytes, so without a bound a 4 KiB input fed ~600 KiB of JSON and
/// the targets ran at ~60 inputs per second; a few dozen events already reach every state the
/// decoders keep (session, model, refusal, terminal result, killed work) in any order.
pub const MAX_EVENTS: usize = 48;

fn check_models(models: &[String]) {
    assert!(models.len() <= MAX_MODELS, "{} models kept", models.len());
    for m in models {
        assert!(
            m.len() <= MAX_MODEL_NAME_BYTES + MODEL_NAME_CUT.len(),
            "a model name of {} bytes kept",
            m.len()
        );
        assert!(!m.trim().is_empty(), "empty observed model in {models:?}");
        assert_ne!(m.trim(), SYNTHETIC_MODEL, "synthetic observed model");
    }
    let mut sorted: Vec<&String> = models.iter().collect();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        models.len(),
        "duplicate observed model in {models:?}"
    );
}

/// Feeds `lines` to a fresh interpretation of `harness` and checks the properties. The first
/// byte of `control` (if any) chooses whether security is on (odd) and when it is reset.
pub fn check_lines<'a>(harness: Harness, control: u8, lines: impl IntoIterator<Item = &'a [u8]>) {
    let mut interp = Interpretation::new(harness);
    if control & 1 == 1 {
        interp.for_security(if control & 2 == 2 {
            Some("requested-model")
        } else {
            None
        });
    }
    let reset_at = usize::from(control >> 2);
    let mut checked = 0;
    for (i, line) in lines.into_iter().take(MAX_LINES).enumerate() {
        if i == reset_at && control & 1 == 1 {
            interp.for_security(None);
        }
        let progress = interp.handle_line(line);
        for p in &progress {
            assert!(!p.contains(['\n', '\r']), "multi-line progress {p:?}");
        }
        // Checked whenever the list grows rather than after every line (sorting it per line was
        // an eighth of the run time): the list is append-only.
        if interp.observed_models().len() != checked {
            checked = interp.observed_models().len();
            check_models(interp.observed_models());
        }
    }
    let before = interp.observed_models().to_vec();
    let finished = interp.finish(HarnessExit::Success);
    assert_eq!(finished.observed_models(), before.as_slice());
    let completion = finished.complete(None);
    check_models(&completion.report.models);
    let _ = serde_json::to_string(&completion);
}

/// Arbitrary bytes: byte 0 picks the harness (mod the number of harnesses), byte 1 the security control, the rest
/// is split into lines at `\n`.
pub fn arbitrary_bytes(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let harness = Harness::ALL[usize::from(pick) % Harness::ALL.len()];
    let (&control, rest) = rest.split_first().unwrap_or((&0, &[]));
    check_lines(harness, control, rest.split(|&b| b == b'\n'));
}

/// Plausible event fragments per dialect, combined by [`plausible_events`].
const FRAGMENTS: &[&str] = &[
    r#"{"type":"system","subtype":"init","session_id":"S","model":"req","apiKeySource":"none"}"#,
    r#"{"type":"assistant","message":{"model":"M","content":[{"type":"tool_use","name":"Bash","input":{"command":"git commit -m x && git push"}}]}}"#,
    r#"{"type":"assistant","parent_tool_use_id":"t","message":{"model":"D","content":[]}}"#,
    r#"{"type":"assistant","parent_tool_use_id":false,"message":{"model":"F"}}"#,
    r#"{"type":"assistant","is_api_error_message":true,"message":{"model":"E","content":[{"type":"text","text":"API Error: 500"}]}}"#,
    r#"{"type":"assistant","message":{"model":"<synthetic>"}}"#,
    r#"{"type":"assistant","message":{"model":""}}"#,
    r#"{"type":"assistant","message":{"model":" "}}"#,
    r#"{"type":"result","subtype":"success","result":"[cyber] no","num_turns":2,"total_cost_usd":0.5,"modelUsage":{"U":{},"":{},"<synthetic>":{}}}"#,
    r#"{"type":"result","parent_tool_use_id":"t","result":"API Error: x [cyber]","modelUsage":{"V":{}}}"#,
    r#"{"type":"system","subtype":"model_refusal_no_fallback","api_refusal_category":"cyber"}"#,
    r#"{"type":"system","subtype":"task_started","task_id":"k","description":"d"}"#,
    r#"{"type":"system","subtype":"task_updated","task_id":"k","patch":{"status":"killed"}}"#,
    r#"{"type":"error","message":"boom"}"#,
    r#"{"type":"text","data":"hi"}"#,
    r#"{"type":"tool_call","data":{"title":"bash","rawInput":{"command":"ls"}}}"#,
    r#"{"type":"end","sessionId":"g","stopReason":"EndTurn"}"#,
    r#"{"type":"thread.started","thread_id":"T"}"#,
    r#"{"type":"item.started","item":{"id":"i","type":"command_execution","command":"/bin/bash -lc 'ls'","status":"in_progress"}}"#,
    r#"{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"done"}}"#,
    r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":2}}"#,
    r#"{"type":"turn.failed","error":{"message":"Cybersecurity refusal"}}"#,
    r#"{"event":"init","conversation_id":"C","init":{"model":"A"}}"#,
    r#"{"event":"init","init":{"model":"B"},"parent_tool_use_id":"p"}"#,
    r#"{"event":"step_update","step_update":{"step_index":1,"step_type":"tool","tool_name":"run_command","tool_info":{"parameters":{"CommandLine":"x"}}}}"#,
    r#"{"event":"result","result":{"status":"ERROR","error":"e","response":"ok","usage":{"input_tokens":1,"thinking_tokens":2}}}"#,
    r#"{"stream":{"kind":"session","id":"m"},"payload_type":"run.output.delta","payload":{"delta":"x","model":"Z"}}"#,
    r#"{"stream":{"kind":"task","id":"t"},"payload_type":"task.lifecycle.proposed","payload":{"task":{"kind":"model.generate","model":"Y"}}}"#,
    r#"{"payload_type":"run.terminal.failed","payload":{"reason":"r"}}"#,
    r#"{"stream":{"kind":"run","id":"r"},"payload_type":"task.lifecycle.proposed","payload":{"event":{"task_id":"t","task_kind":"tool.bash","input":{"command":"x"}}}}"#,
    r#"{"stream":{"kind":"run","id":"r"},"payload_type":"task.lifecycle.cancelled","payload":{"event":{"task_id":"t","reason":"session ended"}}}"#,
    r#"{"type":"step_start","sessionID":"o","part":{"type":"step-start"}}"#,
    r#"{"type":"tool_use","sessionID":"o","part":{"tool":"bash","callID":"c","state":{"input":{"command":"echo"}}}}"#,
    r#"{"type":"text","sessionID":"o","part":{"text":"final","modelID":"W"}}"#,
    r#"{"type":"step_finish","part":{"reason":"stop","tokens":{"input":1,"output":2},"cost":0.1}}"#,
    r#"{"type":"error","error":{"name":"APIError","data":{"message":"m"}}}"#,
    r#"{"type":"system","subtype":"init","session_id":"q","model":"requested"}"#,
    r#"{"type":"assistant","session_id":"q","message":{"model":"requested","content":[{"type":"tool_use","name":"run_shell_command","input":{"command":"ls"}}],"usage":{"input_tokens":9,"cache_read_input_tokens":4}}}"#,
    r#"{"type":"result","subtype":"error_during_execution","is_error":true,"error":{"message":"[API Error: 400 context_length_exceeded]"}}"#,
    r#"{"type":"session","id":"p","cwd":"/w"}"#,
    r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"model":"req","responseModel":"R","usage":{"input":1,"cacheRead":2,"cost":{"total":0.1}},"stopReason":"stop"}}"#,
    r#"{"type":"message_end","message":{"role":"assistant","content":[],"responseModel":"","stopReason":"error","errorMessage":"500 boom"}}"#,
    r#"{"type":"tool_execution_start","toolName":"bash","args":{"command":"git push"}}"#,
    r#"{"type":"agent_end","messages":[{"role":"assistant","content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}"#,
    r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"errorMessage":"429"}"#,
    r#"{"type":"auto_retry_end","success":false,"finalError":"500 boom"}"#,
    r#"{"type":"init","session_id":"G","model":"requested"}"#,
    r#"{"type":"message","role":"assistant","content":"part","delta":true}"#,
    r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"g1","parameters":{"command":"ls"}}"#,
    r#"{"type":"tool_result","tool_id":"g1","status":"error","error":{"message":"no"}}"#,
    r#"{"type":"result","status":"success","stats":{"total_tokens":3,"input_tokens":1,"output_tokens":1,"models":{"served":{"total_tokens":3},"requested":{"total_tokens":0},"":{"total_tokens":1},"<synthetic>":{"input_tokens":1}}}}"#,
    r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":400,\"message\":\"m\"}}]"}}"#,
    "[1,2,3]",
    "{\"type\":\"assistant\",\"message\":{\"model\":\"tru",
    "\u{0}\u{7f}not json",
    "",
];

/// Arbitrary sequences of plausible events from every dialect, fed to every harness: byte 0
/// picks the harness, byte 1 the security control, then each byte picks a fragment; a byte
/// with the high bit set also mutates the fragment (truncation at a byte-derived length).
/// Only the first [`MAX_EVENTS`] bytes after the control byte are used.
pub fn plausible_events(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let harness = Harness::ALL[usize::from(pick) % Harness::ALL.len()];
    let (&control, rest) = rest.split_first().unwrap_or((&0, &[]));
    let lines: Vec<&[u8]> = rest
        .iter()
        .take(MAX_EVENTS)
        .map(|&b| {
            let f = FRAGMENTS[usize::from(b & 0x7f) % FRAGMENTS.len()].as_bytes();
            if b & 0x80 != 0 {
                &f[..f.len() * usize::from(b & 0x0f) / 16]
            } else {
                f
            }
        })
        .collect();
    check_lines(harness, control, lines);
}

/// Per-dialect entry points for the fuzz targets: arbitrary bytes for one harness.
macro_rules! per_dialect {
    ($($bytes:ident, $events:ident => $h:expr;)*) => {$(
        /// Arbitrary bytes for this harness: byte 0 is the security control, the rest lines.
        pub fn $bytes(data: &[u8]) {
            let (&control, rest) = data.split_first().unwrap_or((&0, &[]));
            check_lines($h, control, rest.split(|&b| b == b'\n'));
        }
        /// Plausible event sequences (every dialect's fragments) fed to this harness.
        pub fn $events(data: &[u8]) {
            let mut input = Vec::with_capacity(data.len() + 1);
            input.push($h as u8);
            input.extend_from_slice(data);
            plausible_events(&input);
        }
    )*};
}

per_dialect! {
    claude_bytes, claude_events => Harness::Claude;
    grok_bytes, grok_events => Harness::Grok;
    agy_bytes, agy_events => Harness::Antigravity;
    codex_bytes, codex_events => Harness::Codex;
    muse_bytes, muse_events => Harness::Muse;
    opencode_bytes, opencode_events => Harness::OpenCode;
    qwen_bytes, qwen_events => Harness::Qwen;
    pi_bytes, pi_events => Harness::Pi;
    gemini_bytes, gemini_events => Harness::Gemini;
}
