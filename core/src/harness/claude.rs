//! The Claude-shaped decoder, shared by Claude Code (`stream-json`), Grok
//! (`streaming-messages-json`, plus Grok's ACP-derived `streaming-json`) and Qwen Code
//! (`stream-json`). The dialect differences are private to this file.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::failure;
use super::json;
use super::json::lenient::{self, Obj, Str};
use super::progress;
use super::scan;
use super::usage::turns_text;
use super::{
    Drift, Evidence, Facts, FailureKind, ModelScope, RefusalCategory, RetryAfter, StreamDecoder,
    StreamUpdate, Usage,
};

/// Which Claude-shaped dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Claude,
    Grok,
    /// Qwen Code: its frames name only the requested model (no live model evidence), its
    /// tokens follow the OpenAI convention (input includes the cache reads), and its result
    /// `usage` is the session's running total after a resume, so the run's tokens are the
    /// sum of its assistant messages' `usage`.
    Qwen,
}

/// Event types the dialects know but that produce nothing here.
const QUIET_TYPES: &[&str] = &[
    "user",
    "stream_event",
    "control_request",
    "control_response",
    "control_cancel_request",
    "keep_alive",
];

/// Grok ACP (`streaming-json`) event types.
const ACP_QUIET_TYPES: &[&str] = &[
    "thought",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
];

#[derive(Debug)]
pub(crate) struct ClaudeDecoder {
    dialect: Dialect,
    drift: Drift,
    /// The session id from the first init.
    session_id: Option<String>,
    /// Whether an init was seen: only the first one names the session, even when it names
    /// none (a later init belongs to another session, e.g. a resumed or nested one).
    init_seen: bool,
    /// Grok: the first `session_id`/`sessionId` on any event (used when no init has one).
    any_session_id: Option<String>,
    started: bool,
    subscription: bool,
    final_message: Option<String>,
    failure: Option<String>,
    failure_kind: Option<FailureKind>,
    turns: Option<u64>,
    cost: Option<f64>,
    usage: Option<Usage>,
    terminal_seen: bool,
    /// The text of the last root API-error assistant message (a diagnostic of last resort).
    api_error_text: Option<String>,
    /// The kind the last root API-error assistant message names in its `error` field.
    api_error_kind: Option<FailureKind>,
    /// Whether the last root assistant message of the current turn was an API error: the
    /// turn then ended on it, whatever the result says.
    ended_on_api_error: bool,
    /// The last of the harness's own retries (`system`/`api_retry`) this turn: its kind and
    /// delay.
    last_retry: Option<(Option<FailureKind>, Option<u64>)>,
    /// A `rate_limit_event` whose status is `rejected` was the last one: the limit was hit,
    /// with the time it resets when the event says.
    rate_limit_rejected: Option<Option<u64>>,
    retry_after: Option<RetryAfter>,
    /// Task descriptions by id, for killed-work rendering.
    tasks: HashMap<String, String>,
    /// Tasks killed since the last root result, in order, deduplicated.
    killed: Vec<String>,
    /// The ids in `killed`, for constant-time deduplication.
    killed_set: HashSet<String>,
    /// Grok ACP: the text of the current reply.
    acp_text: String,
    acp_tool_since_text: bool,
    /// The line scan's buffers, reused line after line.
    scratch: scan::Scratch,
}

impl ClaudeDecoder {
    pub(crate) fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            drift: Drift::default(),
            session_id: None,
            init_seen: false,
            any_session_id: None,
            started: false,
            subscription: false,
            final_message: None,
            failure: None,
            failure_kind: None,
            turns: None,
            cost: None,
            usage: None,
            terminal_seen: false,
            api_error_text: None,
            api_error_kind: None,
            ended_on_api_error: false,
            last_retry: None,
            rate_limit_rejected: None,
            retry_after: None,
            tasks: HashMap::new(),
            killed: Vec::new(),
            killed_set: HashSet::new(),
            acp_text: String::new(),
            acp_tool_since_text: false,
            scratch: scan::Scratch::default(),
        }
    }

    fn start_session(&mut self, update: &mut StreamUpdate) {
        if !self.started {
            self.started = true;
            update.progress.push(progress::SESSION_STARTED.to_owned());
        }
    }

    fn system(&mut self, v: &Value, update: &mut StreamUpdate) {
        let subtype = json::str(v, "subtype").unwrap_or("");
        if self.dialect == Dialect::Claude
            && subtype == "model_refusal_no_fallback"
            && json::str(v, "api_refusal_category") == Some("cyber")
        {
            update
                .evidence
                .push(Evidence::Refusal(RefusalCategory::ClaudeCyber));
        }
        match subtype {
            // Init's `model` is the requested model: never evidence.
            "init" => {
                // Qwen's stream never names the model that answered (its init and
                // assistant `model` is the requested one): the requested model applies
                // until the session log says otherwise.
                self.init(
                    json::str(v, "session_id"),
                    json::str(v, "apiKeySource"),
                    update,
                );
            }
            // Claude Code's own retry of a failed API request (`CLAUDE_CODE_MAX_RETRIES`).
            "api_retry" => {
                let status = json::u64(v, "error_status");
                let kind = status
                    .and_then(status_kind)
                    .or_else(|| json::str(v, "error").and_then(error_field_kind));
                let delay = json::u64(v, "retry_delay_ms");
                update.progress.push(retry_line(
                    kind,
                    status,
                    json::u64(v, "attempt"),
                    json::u64(v, "max_retries"),
                    delay,
                ));
                self.last_retry = Some((kind, delay));
            }
            // Qwen Code's own retry (`data{attempt, maxRetries, delayMs}`; a second `retry`
            // event without them only marks the retry's start). It names no status.
            "retry" if self.dialect == Dialect::Qwen => {
                let data = v.get("data").unwrap_or(&Value::Null);
                if let Some(attempt) = json::u64(data, "attempt") {
                    update.progress.push(retry_line(
                        None,
                        None,
                        Some(attempt),
                        json::u64(data, "maxRetries"),
                        json::u64(data, "delayMs"),
                    ));
                }
            }
            "task_started" if self.dialect == Dialect::Claude => {
                if let Some(id) = json::nonempty(v, "task_id") {
                    let desc = json::first_str(v, &["description", "prompt"]).unwrap_or(id);
                    self.tasks
                        .entry(id.to_owned())
                        .or_insert_with(|| desc.to_owned());
                }
            }
            "task_updated" if self.dialect == Dialect::Claude => {
                let killed = v
                    .get("patch")
                    .is_some_and(|p| json::str(p, "status") == Some("killed"));
                if killed && let Some(id) = json::nonempty(v, "task_id") {
                    self.kill(id);
                }
            }
            "task_notification" if self.dialect == Dialect::Claude => {
                if json::str(v, "status") == Some("stopped")
                    && let Some(id) = json::nonempty(v, "task_id")
                {
                    self.kill(id);
                }
            }
            _ => {}
        }
    }

    /// A `system/init` frame, with its `session_id` and `apiKeySource` strings.
    fn init(
        &mut self,
        session_id: Option<&str>,
        api_key_source: Option<&str>,
        update: &mut StreamUpdate,
    ) {
        if self.dialect == Dialect::Qwen {
            update.evidence.push(Evidence::RequestedModelFallback);
        }
        if !self.init_seen {
            self.init_seen = true;
            self.session_id = session_id.filter(|s| !s.is_empty()).map(str::to_owned);
            self.subscription = api_key_source == Some("none");
        }
        self.start_session(update);
    }

    fn kill(&mut self, id: &str) {
        if self.killed_set.insert(id.to_owned()) {
            self.killed.push(id.to_owned());
        }
    }

    /// An assistant frame; `error_text` is its text when it is the main loop's API error
    /// ([`AssistantFrame::error_text`]).
    fn assistant(
        &mut self,
        frame: &AssistantFrame<'_>,
        error_text: Option<String>,
        update: &mut StreamUpdate,
    ) {
        let root = !frame.parent_tool_use_id.0;
        let message = frame.message.0.as_ref();
        let api_error = frame.is_api_error();
        // Evidence first, before any guard. Qwen's `message.model` is the requested model.
        if self.dialect != Dialect::Qwen
            && !api_error
            && let Some(model) = message.and_then(|m| m.model.get())
        {
            update.evidence.push(Evidence::ObservedModel {
                name: model.to_owned(),
                scope: if root {
                    ModelScope::MainLoop
                } else {
                    ModelScope::AttributionOnly
                },
            });
        }
        let Some(message) = message else { return };
        if root {
            self.ended_on_api_error = api_error;
        }
        if api_error {
            if root {
                self.api_error_kind = frame.error.get().and_then(error_field_kind);
                if error_text.is_some() {
                    self.api_error_text = error_text;
                }
            }
            return;
        }
        for block in &message.content.0 {
            if block.kind.get() != Some("tool_use") {
                continue;
            }
            let Some(name) = block.name.get().filter(|n| !n.is_empty()) else {
                continue;
            };
            update
                .progress
                .push(self.tool_line(name, block.input.0.as_ref()));
        }
    }

    fn tool_line(&self, name: &str, input: Option<&ToolInput<'_>>) -> String {
        let shell = match self.dialect {
            Dialect::Claude => name == "Bash",
            Dialect::Grok => matches!(name, "bash" | "run_terminal_command" | "Bash"),
            Dialect::Qwen => name == "run_shell_command",
        };
        let Some(input) = input else {
            return progress::tool(name, None);
        };
        if shell && let Some(cmd) = input.command.get() {
            return progress::shell(cmd);
        }
        if name == "Skill"
            && let Some(skill) = first(&[&input.skill, &input.command, &input.name])
        {
            return progress::tool("skill", Some(skill));
        }
        let detail = first(&[
            &input.file_path,
            &input.absolute_path,
            &input.pattern,
            &input.description,
            &input.url,
            &input.query,
        ]);
        progress::tool(name, detail)
    }

    fn result(&mut self, v: &Value, update: &mut StreamUpdate) {
        let delegated = json::non_null(v, "parent_tool_use_id");
        let text = json::str(v, "result");
        // Evidence from every result, delegated or not, before the completion guard.
        if self.dialect == Dialect::Claude {
            if let Some(usage) = v.get("modelUsage").and_then(Value::as_object) {
                for name in usage.keys() {
                    update.evidence.push(Evidence::ObservedModel {
                        name: name.clone(),
                        scope: ModelScope::AttributionOnly,
                    });
                }
            }
            if text.is_some_and(is_cyber_refusal_text) {
                update
                    .evidence
                    .push(Evidence::Refusal(RefusalCategory::ClaudeCyber));
            }
        }
        if delegated && matches!(self.dialect, Dialect::Claude | Dialect::Qwen) {
            return;
        }
        self.terminal_seen = true;
        // Claude Code has reported a turn that ended on an API error as `subtype: "success"`:
        // the API error on the result, or an API-error message ending the turn, fails it.
        let api_error = self.dialect == Dialect::Claude
            && (json::str(v, "terminal_reason") == Some("api_error")
                || json::u64(v, "api_error_status").is_some_and(|s| s >= 400)
                || self.ended_on_api_error);
        let failed = json::str(v, "subtype").is_some_and(|s| s != "success")
            || json::bool(v, "is_error") == Some(true)
            || api_error;
        self.final_message = text.filter(|t| !t.is_empty()).map(str::to_owned);
        self.turns = json::u64(v, "num_turns").or(self.turns);
        self.cost = json::f64(v, "total_cost_usd").or(self.cost);
        if self.dialect == Dialect::Qwen {
            // The result's `usage` is the session's running total after a resume: the run's
            // tokens are its assistant messages' (summed as they came).
            if let Some(usage) = &mut self.usage {
                usage.turns = self.turns;
            }
        } else if let Some(u) = v.get("usage") {
            let mut usage = token_usage(u);
            usage.turns = json::u64(v, "num_turns");
            usage.cost_usd = json::f64(v, "total_cost_usd");
            self.usage = Some(usage);
        }
        if failed {
            let errors: Vec<&str> = json::array(v, "errors")
                .iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .collect();
            let error_message = v.get("error").and_then(|e| json::nonempty(e, "message"));
            let diagnostic = if !errors.is_empty() {
                errors.join("; ")
            } else if let Some(m) = error_message.filter(|_| self.dialect == Dialect::Qwen) {
                m.to_owned()
            } else if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
                t.to_owned()
            } else if let Some(t) = &self.api_error_text {
                t.clone()
            } else {
                format!(
                    "result {}",
                    json::str(v, "subtype").unwrap_or("error (is_error)")
                )
            };
            self.failure_kind = self.failure_kind_of(v, text, &diagnostic);
            self.retry_after = self.retry_after_of(self.failure_kind);
            self.failure = Some(diagnostic);
        } else {
            self.failure = None;
            self.failure_kind = None;
            self.retry_after = None;
        }
        // Killed work counts only after the last root result, and an API error belongs to
        // the turn this result ended.
        self.killed.clear();
        self.killed_set.clear();
        self.api_error_text = None;
        self.api_error_kind = None;
        self.ended_on_api_error = false;
        self.last_retry = None;
    }

    /// The kind of a failed root result: a context overflow; else the API's status (on the
    /// result, or in the text); the words of the diagnostic (a timeout, a refused
    /// connection); the `error` of the API-error message that ended the turn; a rejected rate
    /// limit; and, when nothing else failed the turn, the tools its permission mode denied.
    fn failure_kind_of(
        &self,
        v: &Value,
        text: Option<&str>,
        diagnostic: &str,
    ) -> Option<FailureKind> {
        let overflow = match self.dialect {
            // Qwen Code passes the API's error through as `[API Error: <status> <message>]`.
            Dialect::Qwen => failure::is_context_overflow(diagnostic),
            _ => is_prompt_too_long(v, text),
        };
        if overflow {
            return Some(FailureKind::ContextLength);
        }
        json::u64(v, "api_error_status")
            .and_then(status_kind)
            .or_else(|| failure::classify(None, diagnostic))
            .or(self.api_error_kind)
            .or_else(|| self.rate_limit_rejected.map(|_| FailureKind::RateLimited))
            .or_else(|| {
                (!json::array(v, "permission_denials").is_empty())
                    .then_some(FailureKind::PermissionDenied)
            })
    }

    /// When a retryable failure passes: a rejected rate limit's reset time, else the delay of
    /// the harness's last own retry of the same kind.
    fn retry_after_of(&self, kind: Option<FailureKind>) -> Option<RetryAfter> {
        let kind = kind.filter(|k| k.is_retryable())?;
        if kind == FailureKind::RateLimited
            && let Some(Some(at)) = self.rate_limit_rejected
        {
            return Some(RetryAfter::ResetAtUnixSecs(at));
        }
        match self.last_retry {
            Some((Some(k), Some(ms))) if k == kind => Some(RetryAfter::DelayMs(ms)),
            _ => None,
        }
    }

    /// Claude Code's `rate_limit_event`: a `rejected` status names when the limit resets;
    /// any other status means requests are served again.
    fn rate_limit_event(&mut self, v: &Value) {
        let Some(info) = v.get("rate_limit_info") else {
            return;
        };
        self.rate_limit_rejected =
            (json::str(info, "status") == Some("rejected")).then(|| json::u64(info, "resetsAt"));
    }

    /// Qwen: adds one request's token counts (OpenAI convention: `input_tokens` already
    /// includes `cache_read_input_tokens`).
    fn add_qwen_usage(&mut self, u: &Value) {
        let get = |k: &str| json::u64(u, k).unwrap_or(0);
        self.add_qwen_counts(&QwenUsage {
            input_tokens: lenient::U64(Some(get("input_tokens"))),
            cache_read_input_tokens: lenient::U64(Some(get("cache_read_input_tokens"))),
            output_tokens: lenient::U64(Some(get("output_tokens"))),
            reasoning_tokens: lenient::U64(Some(get("reasoning_tokens"))),
        });
    }

    /// [`Self::add_qwen_usage`] from the borrowed view of the counts.
    fn add_qwen_counts(&mut self, u: &QwenUsage) {
        let get = |n: &lenient::U64| n.0.unwrap_or(0);
        let add = Usage {
            input_tokens: get(&u.input_tokens),
            cached_input_tokens: get(&u.cache_read_input_tokens),
            output_tokens: get(&u.output_tokens),
            reasoning_tokens: get(&u.reasoning_tokens),
            ..Usage::default()
        };
        self.usage
            .get_or_insert_with(Usage::default)
            .accumulate(&add);
    }

    /// Grok: remembers the first session id seen on any event.
    fn take_any_session_id(&mut self, v: &Value) {
        if self.any_session_id.is_none()
            && let Some(id) = json::first_str(v, &["session_id", "sessionId"])
        {
            self.any_session_id = Some(id.to_owned());
        }
    }

    /// Grok ACP (`--output-format streaming-json`) events.
    fn acp(&mut self, kind: &str, v: &Value, update: &mut StreamUpdate) -> bool {
        let data = v.get("data").unwrap_or(&Value::Null);
        match kind {
            "text" => {
                let chunk = data.as_str().or_else(|| json::str(data, "text"));
                if let Some(chunk) = chunk {
                    if self.acp_tool_since_text {
                        self.acp_text.clear();
                        self.acp_tool_since_text = false;
                    }
                    self.acp_text.push_str(chunk);
                }
            }
            "tool_call" => {
                let obj = if data.is_object() { data } else { v };
                let name = json::first_str(obj, &["title", "name", "kind"]).unwrap_or("tool");
                let input: Option<Obj<ToolInput<'_>>> = obj
                    .get("rawInput")
                    .or_else(|| obj.get("input"))
                    .and_then(lenient::from_value);
                let input = input.and_then(|o| o.0);
                update.progress.push(self.tool_line(name, input.as_ref()));
                self.acp_tool_since_text = true;
            }
            "usage" => {
                let obj = if data.is_object() { data } else { v };
                self.usage = Some(token_usage(obj));
            }
            "end" => {
                self.terminal_seen = true;
                if !self.acp_text.is_empty() {
                    self.final_message = Some(self.acp_text.clone());
                }
            }
            k if ACP_QUIET_TYPES.contains(&k) => {}
            _ => return false,
        }
        true
    }
}

/// The first non-empty string among `fields`.
fn first<'a>(fields: &[&'a Str<'_>]) -> Option<&'a str> {
    fields
        .iter()
        .find_map(|f| f.get().filter(|s| !s.is_empty()))
}

/// The token counts of a `usage` object the decoders read (a result's, or a Qwen assistant
/// message's).
const USAGE_FIELDS: json::Keep = json::Keep::Fields(&[
    ("input_tokens", json::Keep::Scalar),
    ("inputTokens", json::Keep::Scalar),
    ("prompt_tokens", json::Keep::Scalar),
    ("cache_read_input_tokens", json::Keep::Scalar),
    ("cached_input_tokens", json::Keep::Scalar),
    ("cacheReadInputTokens", json::Keep::Scalar),
    ("cachedTokens", json::Keep::Scalar),
    ("cache_creation_input_tokens", json::Keep::Scalar),
    ("output_tokens", json::Keep::Scalar),
    ("outputTokens", json::Keep::Scalar),
    ("completion_tokens", json::Keep::Scalar),
    ("reasoning_tokens", json::Keep::Scalar),
    ("reasoningTokens", json::Keep::Scalar),
    ("thoughtTokens", json::Keep::Scalar),
    (
        "output_tokens_details",
        json::Keep::Fields(&[("thinking_tokens", json::Keep::Scalar)]),
    ),
]);

/// The fields a partial read keeps, of every type it reads.
const PARTIAL_FIELDS: &[(&str, json::Keep)] = {
    use json::Keep::{Fields, Keys, Present, Scalar, Strings};
    &[
        ("type", Scalar),
        ("subtype", Scalar),
        ("is_error", Scalar),
        ("result", Scalar),
        ("parent_tool_use_id", Present),
        ("num_turns", Scalar),
        ("total_cost_usd", Scalar),
        ("terminal_reason", Scalar),
        ("api_error_status", Scalar),
        ("errors", Strings),
        ("modelUsage", Keys),
        ("session_id", Scalar),
        ("sessionId", Scalar),
        // A Grok error's text, or a Qwen assistant message's model and usage (a string is
        // kept as is).
        (
            "message",
            Fields(&[
                ("model", Scalar),
                ("is_api_error_message", Scalar),
                ("usage", USAGE_FIELDS),
            ]),
        ),
        ("is_api_error_message", Scalar),
        ("data", Scalar),
        ("usage", USAGE_FIELDS),
    ]
};

/// What is still read of a line past the JSON value budget: the turn's end (a `result`, or a
/// Grok `error`) with the fields [`ClaudeDecoder::result`] reads, so a large payload does not
/// make the turn look cut off; the bulk is skipped.
const PARTIAL: json::Partial = json::Partial {
    types: &["result", "error"],
    fields: PARTIAL_FIELDS,
};

/// Qwen's partial read: also its `assistant` messages, whose `usage` is the only count of the
/// run's own tokens after a resume (a message carrying a large tool call must still count).
const QWEN_PARTIAL: json::Partial = json::Partial {
    types: &["result", "error", "assistant"],
    fields: PARTIAL_FIELDS,
};

/// Claude Code's over-long request: `terminal_reason: "prompt_too_long"` (2.1), or, from
/// versions without that field, the result text it writes for the API's 400 answer.
fn is_prompt_too_long(v: &Value, text: Option<&str>) -> bool {
    json::str(v, "terminal_reason") == Some("prompt_too_long")
        || text.is_some_and(|t| t.trim_start().starts_with("Prompt is too long"))
}

/// The kind of a status field the stream carries as a JSON number (`api_error_status`,
/// `error_status`); a number no HTTP status can be names none.
fn status_kind(status: u64) -> Option<FailureKind> {
    u16::try_from(status).ok().and_then(failure::kind_of_status)
}

/// The kind an API-error message's or a retry's `error` field names.
fn error_field_kind(error: &str) -> Option<FailureKind> {
    match error {
        "rate_limit" => Some(FailureKind::RateLimited),
        "overloaded" => Some(FailureKind::Overloaded),
        "server_error" => Some(FailureKind::ServerError),
        "authentication_failed" | "oauth_org_not_allowed" => Some(FailureKind::Auth),
        _ => None,
    }
}

/// The progress line of the harness's own retry: `rate limited, retry 3/10 in 2.3 s`.
fn retry_line(
    kind: Option<FailureKind>,
    status: Option<u64>,
    attempt: Option<u64>,
    max: Option<u64>,
    delay_ms: Option<u64>,
) -> String {
    let what = match (kind, status) {
        (Some(FailureKind::RateLimited), _) => "rate limited".to_owned(),
        (Some(FailureKind::Overloaded), _) => "overloaded".to_owned(),
        (Some(FailureKind::Auth), _) => "authentication failed".to_owned(),
        (Some(FailureKind::ServerError), Some(status)) => format!("server error {status}"),
        (Some(FailureKind::ServerError), None) => "server error".to_owned(),
        (_, Some(status)) => format!("API error {status}"),
        _ => "API request failed".to_owned(),
    };
    let mut line = format!("{what}, retry");
    match (attempt, max) {
        (Some(a), Some(m)) => line.push_str(&format!(" {a}/{m}")),
        (Some(a), None) => line.push_str(&format!(" {a}")),
        _ => {}
    }
    if let Some(ms) = delay_ms {
        line.push_str(&format!(" in {:.1} s", ms as f64 / 1000.0));
    }
    line
}

/// Claude's result-text refusal predicates: after leading whitespace, `[cyber]` at the start,
/// or `API Error:` at the start with `[cyber]` anywhere.
fn is_cyber_refusal_text(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("[cyber]") || (t.starts_with("API Error:") && t.contains("[cyber]"))
}

/// Token counts from a `usage` object (snake or camel case), in the common convention: input
/// including cached, cached, output including reasoning, reasoning. Claude's `input_tokens`
/// leaves out the prompt-cache reads and writes, so they are added back.
fn token_usage(u: &Value) -> Usage {
    let get = |keys: &[&str]| keys.iter().find_map(|k| json::u64(u, k)).unwrap_or(0);
    let cache_read = get(&[
        "cache_read_input_tokens",
        "cached_input_tokens",
        "cacheReadInputTokens",
        "cachedTokens",
    ]);
    let uncached = json::u64(u, "cache_read_input_tokens").is_some()
        || json::u64(u, "cache_creation_input_tokens").is_some();
    let mut input = get(&["input_tokens", "inputTokens", "prompt_tokens"]);
    if uncached {
        input = input
            .saturating_add(cache_read)
            .saturating_add(get(&["cache_creation_input_tokens"]));
    }
    let reasoning = u
        .get("output_tokens_details")
        .and_then(|d| json::u64(d, "thinking_tokens"))
        .unwrap_or_else(|| get(&["reasoning_tokens", "reasoningTokens", "thoughtTokens"]));
    Usage {
        input_tokens: input,
        cached_input_tokens: cache_read,
        output_tokens: get(&["output_tokens", "outputTokens", "completion_tokens"]),
        reasoning_tokens: reasoning,
        cost_usd: None,
        turns: None,
        ..Usage::default()
    }
}

impl StreamDecoder for ClaudeDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        // Quiet events (tool results are most of a stream's bytes) are only scanned. Grok
        // still needs every line while it has no session id.
        // The scan runs only when the line may be of a quiet type or of a type read below
        // (a hint: the line's leading type, or a type name quoted near its start), so other
        // lines are not scanned twice; when it runs it still validates the whole line.
        let leading = json::leading_type(line);
        let quiet = (self.dialect == Dialect::Claude || self.any_session_id.is_some())
            && json::may_be(line, leading, QUIET_TYPES);
        // Assistant frames of Claude are read into a borrowed typed view (no value tree)
        // through the scan's index; any failure (duplicate keys, another type) falls back to
        // the value parse.
        let claude_assistant =
            self.dialect == Dialect::Claude && json::may_be(line, leading, &["assistant"]);
        // Qwen's init and assistant frames (most of its stream) once its session id is known
        // (so no session id is left to take from them) are read into borrowed views too; any
        // failure falls back to the value parse below, as for Claude.
        // The view skips what it does not read; the value parse would refuse a line with
        // invalid UTF-8 or an out-of-range number there, so only lines it certainly parses
        // take this path.
        // Init frames (Claude's, and Qwen's once its session id is known) are read into a
        // borrowed view too: a long list of tools and servers the decoder does not read.
        let init_view = match self.dialect {
            Dialect::Claude => true,
            Dialect::Qwen => self.any_session_id.is_some(),
            Dialect::Grok => false,
        } && json::may_be(line, leading, &["system"]);
        let qwen_assistant = self.dialect == Dialect::Qwen
            && self.any_session_id.is_some()
            && json::may_be(line, leading, &["assistant"]);
        if quiet || claude_assistant || init_view || qwen_assistant {
            let checked = scan::check(line, &mut self.scratch);
            if quiet && json::is_quiet(line, QUIET_TYPES, checked.as_ref()) {
                return update;
            }
            if claude_assistant
                && let Some(frame) =
                    lenient::from_checked::<AssistantFrame<'_>>(line, checked.as_ref())
                && frame.kind.get() == Some("assistant")
            {
                let text = frame.error_text(FrameSource::Line(line, checked.as_ref()));
                self.assistant(&frame, text, &mut update);
                return update;
            }
            let value_safe = checked.filter(|c| c.parses_as_value());
            if let Some(c) = &value_safe {
                if init_view
                    && let Some(frame) = lenient::from_checked::<InitFrame<'_>>(line, Some(c))
                    && frame.kind.get() == Some("system")
                    && frame.subtype.get() == Some("init")
                {
                    self.init(
                        frame.session_id.get(),
                        frame.api_key_source.get(),
                        &mut update,
                    );
                    return update;
                }
                if qwen_assistant
                    && let Some(frame) = lenient::from_checked::<AssistantFrame<'_>>(line, Some(c))
                    && frame.kind.get() == Some("assistant")
                {
                    let text = frame.error_text(FrameSource::Line(line, Some(c)));
                    self.assistant(&frame, text, &mut update);
                    if !frame.parent_tool_use_id.0
                        && let Some(usage) =
                            frame.message.0.as_ref().and_then(|m| m.usage.0.as_ref())
                    {
                        self.add_qwen_counts(usage);
                    }
                    return update;
                }
            }
        }
        let partial = if self.dialect == Dialect::Qwen {
            &QWEN_PARTIAL
        } else {
            &PARTIAL
        };
        let Some(v) = self.drift.object_or_partial(line, Some(partial)) else {
            return update;
        };
        let Some(kind) = json::str(&v, "type") else {
            self.drift.malformed();
            return update;
        };
        if matches!(self.dialect, Dialect::Grok | Dialect::Qwen) {
            self.take_any_session_id(&v);
        }
        match kind {
            "system" => self.system(&v, &mut update),
            "assistant" => {
                if let Some(frame) = lenient::from_value::<AssistantFrame<'_>>(&v) {
                    let text = frame.error_text(FrameSource::Value(&v));
                    self.assistant(&frame, text, &mut update);
                }
                if self.dialect == Dialect::Qwen
                    && !json::non_null(&v, "parent_tool_use_id")
                    && let Some(u) = v.get("message").and_then(|m| m.get("usage"))
                {
                    self.add_qwen_usage(u);
                }
            }
            "result" => self.result(&v, &mut update),
            "rate_limit_event" => self.rate_limit_event(&v),
            "error" if self.dialect == Dialect::Grok => {
                self.terminal_seen = true;
                let message = json::nonempty(&v, "message")
                    .or_else(|| v.get("data").and_then(|d| d.as_str()))
                    .unwrap_or("error");
                self.failure_kind = failure::classify(None, message);
                self.failure = Some(message.to_owned());
            }
            k if QUIET_TYPES.contains(&k) => {}
            k if self.dialect == Dialect::Grok && self.acp(k, &v, &mut update) => {}
            other => self.drift.unknown(other),
        }
        update
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        let session_id = match this.dialect {
            Dialect::Claude => this.session_id,
            Dialect::Grok | Dialect::Qwen => this.session_id.or(this.any_session_id),
        };
        let mut facts = Facts {
            session_id,
            final_message: this.final_message,
            failure: this.failure,
            failure_kind: this.failure_kind,
            retry_after: this.retry_after,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        match this.dialect {
            Dialect::Claude => {
                facts.killed_work = this
                    .killed
                    .iter()
                    .map(|id| this.tasks.get(id).map_or_else(|| id.clone(), Clone::clone))
                    .collect();
                if let Some(turns) = this.turns {
                    let cost = this.cost.unwrap_or(0.0);
                    let mut s = format!("{}, ${cost:.2}", turns_text(turns));
                    if this.subscription {
                        s.push_str(" at API prices");
                    }
                    facts.summary = Some(s);
                }
            }
            Dialect::Qwen => {
                // No cost: the token counts, with the turns when known.
                facts.summary = this.usage.as_ref().map(|u| match this.turns {
                    Some(turns) => format!("{}, {}", turns_text(turns), u.summary()),
                    None => u.summary(),
                });
            }
            Dialect::Grok => {
                facts.summary = match (this.turns, this.cost) {
                    (Some(turns), Some(cost)) if cost > 0.0 => {
                        Some(format!("{}, ${cost:.2}", turns_text(turns)))
                    }
                    _ => this.usage.as_ref().map(|u| {
                        format!(
                            "{} input tokens, {} output tokens",
                            u.input_tokens, u.output_tokens
                        )
                    }),
                };
            }
        }
        facts.usage = this.usage;
        this.drift.into_facts(&mut facts);
        facts
    }
}

mod views;
use views::{AssistantFrame, FrameSource, InitFrame, QwenUsage, ToolInput};

#[cfg(test)]
mod view_tests;
