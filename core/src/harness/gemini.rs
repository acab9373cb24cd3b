//! The Gemini CLI decoder (`gemini --output-format stream-json`) and the parser of its session
//! log (`~/.gemini/tmp/<project>/chats/session-<date>-<id8>.jsonl`).
//!
//! Events, read off Gemini CLI 0.61 run offline against a scripted Gemini API:
//!
//! * `init{session_id, model}`: the session id; `model` is the *requested* model (or an alias
//!   such as `auto`), never evidence.
//! * `message{role, content, delta}`: the answer is the concatenation of the assistant's
//!   `delta: true` messages after the last tool call or result (a message without `delta`
//!   replaces it).
//! * `tool_use{tool_name, tool_id, parameters}` (the shell is `run_shell_command` with
//!   `parameters.command`) and `tool_result{tool_id, status, output, error}`.
//! * `error{severity, message}`: `severity: "warning"` (loop detection: "Loop detected,
//!   stopping execution") is a diagnostic and the turn's fate is the result's; `severity:
//!   "error"` is fatal even though the CLI follows it with a `result` of `status: "success"`
//!   (the turn limit: "Maximum session turns exceeded"), and it is the only reason given when
//!   a `result` of `status: "error"` has no `error` object (an invalid stream).
//! * `result{status, error{type, message}, stats{total_tokens, input_tokens, output_tokens,
//!   cached, tool_calls, models{<model>: {total_tokens, input_tokens, output_tokens, …}}}}`:
//!   the terminal event. `stats.models` names the models the API said served the requests
//!   (the responses' `modelVersion`), but the CLI also lists the requested model there with
//!   all-zero counts once a request to it failed (a 429 before a success, every API error):
//!   only models with tokens counted are evidence.
//!
//! An API error ends the turn with a `result` of `status: "error"` whose message is
//! `[API Error: <the API's JSON error body>]`, and the CLI exits with the HTTP status modulo
//! 256 (400 gives 144). Its own retries (429 and 5xx, up to `general.maxAttempts`) are only on
//! stderr.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::failure;
use super::interpretation::ModelList;
use super::json;
use super::json::lenient::{self, Bool, Str};
use super::progress;
use super::retained::{RetainedError, RetainedRecord};
use super::{Drift, Evidence, Facts, FailureKind, ModelScope, StreamDecoder, StreamUpdate, Usage};

/// What is still read of a line past the JSON value budget: the result (it ends the turn) with
/// the fields its handling reads; the bulk is skipped. Not its models: a partial read keeps
/// their names without their counts, and a name without counts may be the requested model.
const PARTIAL: json::Partial = {
    use json::Keep::{Fields, Scalar};
    json::Partial {
        types: &["result"],
        fields: &[
            ("type", Scalar),
            ("status", Scalar),
            ("error", Fields(&[("type", Scalar), ("message", Scalar)])),
            (
                "stats",
                Fields(&[
                    ("total_tokens", Scalar),
                    ("input_tokens", Scalar),
                    ("output_tokens", Scalar),
                    ("cached", Scalar),
                ]),
            ),
        ],
    }
};

/// Most non-fatal diagnostics kept.
const MAX_DIAGNOSTICS: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct GeminiDecoder {
    drift: Drift,
    session_id: Option<String>,
    started: bool,
    /// Tool ids already shown.
    shown: HashSet<String>,
    /// The assistant's reply since the last tool call.
    reply: String,
    /// A tool call or a result came since the last assistant text: the next text starts a
    /// new reply (so the reply holds one turn's text, not a whole stream's).
    reply_closed: bool,
    /// Whether any assistant text came.
    replied: bool,
    failure: Option<String>,
    failure_kind: Option<FailureKind>,
    /// The message of the last `error` event of `severity: "error"` since the last result:
    /// it fails the turn the next result ends, whatever that result's status.
    fatal_error: Option<String>,
    usage: Option<Usage>,
    diagnostics: Vec<String>,
    terminal_seen: bool,
}

/// The fields of the hot events; every other field is skipped unbuilt.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct HotEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Str<'a>,
    #[serde(borrow)]
    role: Str<'a>,
    #[serde(borrow)]
    content: Str<'a>,
    delta: Bool,
    #[serde(borrow)]
    status: Str<'a>,
    #[serde(borrow)]
    session_id: Str<'a>,
}

/// The tool parameters that name what a tool works on, in order of preference.
const DETAIL_KEYS: &[&str] = &[
    "file_path",
    "absolute_path",
    "dir_path",
    "path",
    "pattern",
    "query",
    "url",
    "description",
];

impl GeminiDecoder {
    fn diagnostic(&mut self, text: &str) {
        if self.diagnostics.len() < MAX_DIAGNOSTICS {
            self.diagnostics.push(progress::detail(text));
        }
    }

    fn message(&mut self, role: Option<&str>, content: Option<&str>, delta: Option<bool>) {
        if role != Some("assistant") {
            return;
        }
        let Some(content) = content else {
            return;
        };
        if self.reply_closed || delta != Some(true) {
            self.reply.clear();
            self.reply_closed = false;
        }
        self.reply.push_str(content);
        self.replied = true;
    }

    /// The session id of the first init that names one; `session started` once.
    fn init(&mut self, id: Option<&str>, update: &mut StreamUpdate) {
        if self.session_id.is_none()
            && let Some(id) = id
        {
            self.session_id = Some(id.to_owned());
        }
        if !self.started {
            self.started = true;
            update.progress.push(progress::SESSION_STARTED.to_owned());
        }
    }

    /// The hot events (`init`, `message`, a successful `tool_result`: most of a stream's
    /// lines and bytes, the tool output) read straight from the line into a borrowed view, without
    /// building a value tree; `false` when the line is another event or the view refuses it
    /// (not an object, past the budget, a duplicate key), which the full parse then handles
    /// with the same rules.
    fn hot(&mut self, line: &[u8], update: &mut StreamUpdate) -> bool {
        let Some(view) = lenient::from_slice::<HotEvent<'_>>(line) else {
            return false;
        };
        match view.kind.get() {
            Some("init") => {
                self.init(view.session_id.get().filter(|id| !id.is_empty()), update);
                true
            }
            Some("message") => {
                self.message(view.role.get(), view.content.get(), view.delta.0);
                true
            }
            Some("tool_result") => view.status.get() != Some("error"),
            _ => false,
        }
    }

    fn tool_use(&mut self, v: &Value, update: &mut StreamUpdate) {
        self.reply_closed = true;
        let id = json::str(v, "tool_id").unwrap_or("");
        if !id.is_empty() && !self.shown.insert(id.to_owned()) {
            return;
        }
        let name = json::nonempty(v, "tool_name").unwrap_or("tool");
        let params = v.get("parameters").unwrap_or(&Value::Null);
        let line = match json::str(params, "command") {
            Some(cmd) if name == "run_shell_command" => progress::shell(cmd),
            _ => progress::tool(name, json::first_str(params, DETAIL_KEYS)),
        };
        update.progress.push(line);
    }

    fn result(&mut self, v: &Value, update: &mut StreamUpdate) {
        let stats = v.get("stats").unwrap_or(&Value::Null);
        // Evidence first, whatever the status: the models that served a request.
        let served = served_models(stats);
        let scope = if served.len() == 1 {
            ModelScope::MainLoop
        } else {
            // Several models counted tokens (a routing classifier, a utility call beside the
            // main loop): the stream does not say which one answered.
            ModelScope::AttributionOnly
        };
        for name in served {
            update.evidence.push(Evidence::ObservedModel {
                name: name.to_owned(),
                scope,
            });
        }
        self.terminal_seen = true;
        // A result ends the turn: text after it is another turn's answer.
        self.reply_closed = true;
        if stats.is_object() {
            self.usage = Some(stream_usage(stats));
        }
        let fatal = self.fatal_error.take();
        let failed = json::str(v, "status") == Some("error");
        // An error that names neither a message nor a type says nothing.
        let own = v.get("error").filter(|e| {
            json::nonempty(e, "message").is_some()
                || json::nonempty(e, "type").is_some_and(|t| t != "unknown")
        });
        let (failure, kind) = match own {
            // The result's own error is the most specific reason.
            Some(error) if failed => {
                let (text, kind) = error_text(error);
                (Some(text), kind)
            }
            // A fatal error event before the result is the reason: the CLI reports an
            // invalid stream as a bare `status: "error"`, and its turn limit as a success.
            _ => match fatal {
                Some(m) => {
                    let kind = failure_kind(&m, None);
                    (Some(m), kind)
                }
                None if failed => (Some("the turn failed".to_owned()), None),
                None => (None, None),
            },
        };
        self.failure = failure;
        self.failure_kind = kind;
    }

    fn error_event(&mut self, v: &Value, update: &mut StreamUpdate) {
        let Some(m) = json::nonempty(v, "message") else {
            return;
        };
        let severity = json::nonempty(v, "severity");
        if severity == Some("error") {
            self.fatal_error = Some(m.to_owned());
        }
        // Shown either way: a warning is the only trace of why the turn stopped early, and
        // a fatal error keeps its severity in the diagnostics beside the failure it causes.
        let line = match severity {
            Some(s) => format!("{s}: {m}"),
            None => m.to_owned(),
        };
        self.diagnostic(&line);
        update.progress.push(progress::detail(&line));
    }
}

/// The models of `stats.models` that counted tokens, in the stream's order.
fn served_models(stats: &Value) -> Vec<&str> {
    let Some(models) = stats.get("models").and_then(Value::as_object) else {
        return Vec::new();
    };
    models
        .iter()
        .filter(|(_, m)| {
            ["total_tokens", "input_tokens", "output_tokens"]
                .iter()
                .any(|k| json::u64(m, k).is_some_and(|n| n > 0))
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

/// The result's `stats` in the common convention. Gemini's `input_tokens` includes the
/// `cached` ones; its `output_tokens` leaves out the thinking tokens, which only
/// `total_tokens` counts: what the total holds beyond input and output is the reasoning.
fn stream_usage(stats: &Value) -> Usage {
    let count = |key: &str| json::u64(stats, key).unwrap_or(0);
    let (input, output) = (count("input_tokens"), count("output_tokens"));
    let reasoning = count("total_tokens").saturating_sub(input.saturating_add(output));
    Usage {
        input_tokens: input,
        cached_input_tokens: count("cached"),
        output_tokens: output.saturating_add(reasoning),
        reasoning_tokens: reasoning,
        ..Usage::default()
    }
}

/// The diagnostic of a failed result and its kind. An API error's message is
/// `[API Error: {"error":{"code":400,"message":…,"status":"INVALID_ARGUMENT"}}]`: its inner
/// message, then the HTTP status and the API's status name.
fn error_text(error: &Value) -> (String, Option<FailureKind>) {
    let message = json::nonempty(error, "message");
    let kind = json::nonempty(error, "type").filter(|t| *t != "unknown");
    let text = match message {
        Some(m) => api_error_text(m).unwrap_or_else(|| match kind {
            Some(k) => format!("{k}: {m}"),
            None => m.to_owned(),
        }),
        None => kind.unwrap_or("the turn failed").to_owned(),
    };
    let kind = failure_kind(&text, kind);
    (text, kind)
}

/// The failure kind of a diagnostic `text` (of a result whose error has type `kind`): the
/// shared classifier reads the HTTP status `api_error_text` put in it and the API's wording
/// (the Gemini API's over-long request: "The input token count (N) exceeds the maximum number
/// of tokens allowed (M)."); the CLI's own check names the context window in its type.
fn failure_kind(text: &str, kind: Option<&str>) -> Option<FailureKind> {
    let lower = text.to_lowercase();
    if (lower.contains("input token count") && lower.contains("exceeds the maximum"))
        || kind == Some("context_window_overflow")
    {
        return Some(FailureKind::ContextLength);
    }
    failure::classify(None, text)
}

/// `message (HTTP 400, INVALID_ARGUMENT)` from `[API Error: <the API's error body>]`; `None`
/// when `message` is not such a wrapper.
fn api_error_text(message: &str) -> Option<String> {
    let body = message
        .trim()
        .strip_prefix("[API Error:")?
        .trim()
        .strip_suffix(']')?
        .trim();
    if !body.starts_with('{') || !json::within_budget(body.as_bytes()) {
        return None;
    }
    let body: Value = serde_json::from_str(body).ok()?;
    let error = body.get("error").filter(|e| e.is_object()).unwrap_or(&body);
    let text = json::nonempty(error, "message")?;
    let details: Vec<String> = [
        json::u64(error, "code").map(|c| format!("HTTP {c}")),
        json::nonempty(error, "status").map(str::to_owned),
    ]
    .into_iter()
    .flatten()
    .collect();
    Some(if details.is_empty() {
        text.to_owned()
    } else {
        format!("{text} ({})", details.join(", "))
    })
}

impl StreamDecoder for GeminiDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        if self.hot(line, &mut update) {
            return update;
        }
        let Some(v) = self.drift.object_or_partial(line, Some(&PARTIAL)) else {
            return update;
        };
        let Some(kind) = json::str(&v, "type") else {
            self.drift.malformed();
            return update;
        };
        match kind {
            "init" => self.init(json::nonempty(&v, "session_id"), &mut update),
            "message" => self.message(
                json::str(&v, "role"),
                json::str(&v, "content"),
                json::bool(&v, "delta"),
            ),
            "tool_use" => self.tool_use(&v, &mut update),
            "tool_result" => {
                if json::str(&v, "status") == Some("error") {
                    let error = v.get("error").unwrap_or(&Value::Null);
                    if let Some(m) =
                        json::nonempty(error, "message").or_else(|| json::nonempty(&v, "output"))
                    {
                        self.diagnostic(&format!("tool failed: {m}"));
                    }
                }
            }
            "error" => self.error_event(&v, &mut update),
            "result" => self.result(&v, &mut update),
            other => self.drift.unknown(other),
        }
        update
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        let mut facts = Facts {
            session_id: this.session_id,
            final_message: this.replied.then_some(this.reply),
            failure: this.failure,
            failure_kind: this.failure_kind,
            summary: this.usage.as_ref().map(Usage::summary),
            usage: this.usage,
            diagnostics: this.diagnostics,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        this.drift.into_facts(&mut facts);
        facts
    }
}

const WHAT: &str = "the Gemini session log";

/// Parses a Gemini CLI session log (`~/.gemini/tmp/<project>/chats/session-<date>-<id8>.jsonl`,
/// JSON lines): a header `{sessionId, projectHash, startTime, kind}`, then message records
/// `{id, type: "user"|"gemini"|…, content, tokens{input, output, cached, thoughts, tool,
/// total}, model}` (a record repeating an id replaces the earlier one: a call's record is
/// rewritten once its tool calls ran) and `{"$set": {…}}` updates (a `messages` array there
/// replaces the list).
///
/// Only this run's messages count: those after the last user message that carries text (the
/// prompt; tool results come back as user messages of `functionResponse` parts). Their
/// `gemini` messages give the usage (summed) and the final message (the last non-empty
/// `content`). The log's `model` is the model the CLI *requested*, not the one that served
/// (that is in the stream's result): it is never reported, and the record leaves the
/// stream's models and usage standing ([`RetainedRecord::supplementary`]).
pub fn parse_gemini_session_log(
    session_id: Option<&str>,
    bytes: &[u8],
) -> Result<RetainedRecord, RetainedError> {
    let mut messages: Vec<Value> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut header_id: Option<String> = None;
    let mut any = false;
    for (n, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let v = match json::parse(line) {
            json::Line::Blank => continue,
            json::Line::Object(v) => v,
            json::Line::Malformed => {
                return Err(RetainedError::MalformedLine {
                    what: WHAT,
                    line: n + 1,
                });
            }
            json::Line::OverBudget => {
                return Err(RetainedError::LineOverBudget {
                    what: WHAT,
                    line: n + 1,
                });
            }
        };
        any = true;
        if let Some(set) = v.get("$set") {
            if let Some(list) = set.get("messages").and_then(Value::as_array) {
                messages.clone_from(list);
                by_id = messages
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| json::str(m, "id").map(|id| (id.to_owned(), i)))
                    .collect();
            }
            continue;
        }
        if header_id.is_none()
            && let Some(id) = json::nonempty(&v, "sessionId")
        {
            header_id = Some(id.to_owned());
            continue;
        }
        if json::str(&v, "type").is_none() {
            continue;
        }
        match json::str(&v, "id").map(str::to_owned) {
            Some(id) => match by_id.get(&id) {
                Some(&i) => messages[i] = v,
                None => {
                    by_id.insert(id, messages.len());
                    messages.push(v);
                }
            },
            None => messages.push(v),
        }
    }
    if !any {
        return Err(RetainedError::EmptyLog);
    }
    if let (Some(wanted), Some(found)) = (session_id, &header_id)
        && wanted != found
    {
        return Err(RetainedError::OtherSession {
            what: WHAT,
            found: found.chars().take(256).collect(),
        });
    }
    let is_prompt = |m: &Value| {
        json::str(m, "type") == Some("user")
            && json::array(m, "content")
                .iter()
                .any(|p| json::str(p, "text").is_some())
    };
    let this_run = messages.iter().rposition(is_prompt).map_or(0, |i| i + 1);
    let mut record = RetainedRecord {
        session_id: header_id.or_else(|| session_id.map(str::to_owned)),
        supplementary: true,
        ..RetainedRecord::default()
    };
    for m in &messages[this_run..] {
        if json::str(m, "type") != Some("gemini") {
            continue;
        }
        if let Some(tokens) = m.get("tokens").filter(|t| t.is_object()) {
            let count = |key: &str| json::u64(tokens, key).unwrap_or(0);
            let usage = record.usage.get_or_insert_with(Usage::default);
            let thoughts = count("thoughts");
            usage.input_tokens = usage.input_tokens.saturating_add(count("input"));
            usage.cached_input_tokens = usage.cached_input_tokens.saturating_add(count("cached"));
            usage.output_tokens = usage
                .output_tokens
                .saturating_add(count("output").saturating_add(thoughts));
            usage.reasoning_tokens = usage.reasoning_tokens.saturating_add(thoughts);
        }
        if let Some(text) = json::nonempty(m, "content") {
            record.final_message = Some(text.to_owned());
        }
    }
    // No model: the log names the requested one only.
    record.set_models(ModelList::default());
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_names_its_message_status_and_status_name() {
        let error = serde_json::json!({"type": "unknown", "message":
            "[API Error: {\"error\":{\"code\":400,\"message\":\"bad\",\"status\":\"INVALID_ARGUMENT\"}}]"});
        assert_eq!(
            error_text(&error),
            ("bad (HTTP 400, INVALID_ARGUMENT)".to_owned(), None)
        );
        let plain = serde_json::json!({"type": "FatalTurnLimitedError", "message": "too many"});
        assert_eq!(
            error_text(&plain).0,
            "FatalTurnLimitedError: too many".to_owned()
        );
        let context = serde_json::json!({"message": "[API Error: {\"error\":{\"code\":400,\
            \"message\":\"The input token count (2000000) exceeds the maximum number of tokens \
            allowed (1048576).\",\"status\":\"INVALID_ARGUMENT\"}}]"});
        assert_eq!(error_text(&context).1, Some(FailureKind::ContextLength));
        for odd in ["[API Error: not json]", "[API Error: {\"error\":{}}]", "{"] {
            assert_eq!(api_error_text(odd), None, "{odd}");
        }
    }

    fn feed(lines: &[&str]) -> Facts {
        let mut d = Box::new(GeminiDecoder::default());
        for l in lines {
            d.condense(l.as_bytes());
        }
        d.complete()
    }

    #[test]
    fn a_fatal_error_event_fails_a_turn_the_result_calls_a_success() {
        // Gemini CLI 0.61 at its turn limit.
        let facts = feed(&[
            r#"{"type":"init","session_id":"s","model":"m"}"#,
            r#"{"type":"message","role":"assistant","content":"working","delta":true}"#,
            r#"{"type":"error","severity":"error","message":"Maximum session turns exceeded"}"#,
            r#"{"type":"result","status":"success","stats":{"total_tokens":3}}"#,
        ]);
        assert_eq!(
            facts.failure.as_deref(),
            Some("Maximum session turns exceeded")
        );
        assert_eq!(
            facts.diagnostics,
            vec!["error: Maximum session turns exceeded".to_owned()]
        );
        // A warning leaves the success standing and stays a diagnostic.
        let facts = feed(&[
            r#"{"type":"error","severity":"warning","message":"Loop detected, stopping execution"}"#,
            r#"{"type":"result","status":"success"}"#,
        ]);
        assert_eq!(facts.failure, None);
        assert_eq!(
            facts.diagnostics,
            vec!["warning: Loop detected, stopping execution".to_owned()]
        );
        // A fatal error belongs to the turn the next result ends, not to a later one.
        let facts = feed(&[
            r#"{"type":"error","severity":"error","message":"Maximum session turns exceeded"}"#,
            r#"{"type":"result","status":"success"}"#,
            r#"{"type":"result","status":"success"}"#,
        ]);
        assert_eq!(facts.failure, None);
    }

    #[test]
    fn a_bare_error_result_takes_the_reason_of_the_fatal_error_event() {
        // An invalid stream: the result carries no error object.
        let facts = feed(&[
            r#"{"type":"error","severity":"error","message":"Model stream ended with an invalid chunk"}"#,
            r#"{"type":"result","status":"error"}"#,
        ]);
        assert_eq!(
            facts.failure.as_deref(),
            Some("Model stream ended with an invalid chunk")
        );
        let facts = feed(&[
            r#"{"type":"error","severity":"error","message":"the input token count exceeds the maximum"}"#,
            r#"{"type":"result","status":"error","error":{"type":"unknown"}}"#,
        ]);
        assert_eq!(
            facts.failure.as_deref(),
            Some("the input token count exceeds the maximum")
        );
        assert_eq!(facts.failure_kind, Some(FailureKind::ContextLength));
        // The result's own error wins over the event's.
        let facts = feed(&[
            r#"{"type":"error","severity":"error","message":"earlier"}"#,
            r#"{"type":"result","status":"error","error":{"message":"own"}}"#,
        ]);
        assert_eq!(facts.failure.as_deref(), Some("own"));
        // Neither: the generic text.
        let facts = feed(&[
            r#"{"type":"error","severity":"warning","message":"a warning"}"#,
            r#"{"type":"result","status":"error"}"#,
        ]);
        assert_eq!(facts.failure.as_deref(), Some("the turn failed"));
    }

    #[test]
    fn the_hot_path_reads_messages_as_the_full_parse_does() {
        let feed = |lines: &[&str]| {
            let mut d = Box::new(GeminiDecoder::default());
            for l in lines {
                d.condense(l.as_bytes());
            }
            d.complete()
        };
        // A duplicate key is refused by the view and read by the full parse (last wins).
        let facts = feed(&[
            r#"{"type":"message","role":"assistant","content":"a","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"x","content":"b","delta":true}"#,
            r#"{"type":"message","role":"user","content":"not the answer"}"#,
            r#"{"type":"message","role":"assistant","content":7,"delta":true}"#,
            r#"{"type":"tool_result","tool_id":"t","status":"success","output":"o"}"#,
            r#"{"type":"message","role":"assistant","content":"cé","delta":"yes"}"#,
        ]);
        // `delta` that is not `true` starts the reply over.
        assert_eq!(facts.final_message.as_deref(), Some("cé"));
        assert_eq!(facts.unrecognized_lines, 0);
        let facts = feed(&[
            r#"{"type":"message","role":"assistant","content":"a","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"x","content":"b","delta":true}"#,
        ]);
        assert_eq!(facts.final_message.as_deref(), Some("ab"));
        // A result ends the reply: a later turn's text is a new one.
        let facts = feed(&[
            r#"{"type":"message","role":"assistant","content":"one","delta":true}"#,
            r#"{"type":"result","status":"success"}"#,
            r#"{"type":"message","role":"assistant","content":"two","delta":true}"#,
        ]);
        assert_eq!(facts.final_message.as_deref(), Some("two"));
        // A cut hot line is malformed, counted once.
        let facts = feed(&[r#"{"type":"message","role":"assistant","content":"a"#]);
        assert_eq!(facts.unrecognized_lines, 1);
        assert_eq!(facts.final_message, None);
    }
}
