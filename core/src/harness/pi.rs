//! The pi decoder (`pi --mode json`).
//!
//! pi streams its agent loop's events: `session{id}` first, then per attempt `agent_start`,
//! `turn_start`, `message_start|message_update|message_end{message}`,
//! `tool_execution_start|update|end`, `turn_end`, `agent_end{messages}`. A failed request
//! is an assistant message with `stopReason: "error"` and `errorMessage`; pi then may retry
//! the whole attempt (`auto_retry_start{attempt, maxAttempts, delayMs, errorMessage}`, a new
//! `agent_start` … `agent_end`, and `auto_retry_end{success, finalError}`). pi exits 0 in
//! this mode even when the turn failed, so the stream alone says whether it did. After a
//! context overflow it may compact the session (`compaction_start{reason}`,
//! `compaction_end{willRetry, errorMessage}`) and, when it says so, retry.
//!
//! Assistant messages carry `model` (the requested one, never evidence) and `responseModel`
//! (the model that answered: main-loop evidence; pi 0.73 writes it only when the response
//! names another model than the requested one, so without it the requested-model fallback
//! applies), `usage{input, output, cacheRead,
//! cacheWrite, cost{total}}` per request (summed), and their content blocks (`text`,
//! `thinking`, `toolCall`).

use serde_json::Value;

use super::failure;
use super::json;
use super::progress;
use super::scan;
use super::{Drift, Evidence, Facts, ModelScope, StreamDecoder, StreamUpdate, Usage};

/// Event types that produce nothing here. `message_update` and `tool_execution_update` are
/// most of a stream's bytes (each repeats the partial message), so they are only peeked at.
const QUIET_TYPES: &[&str] = &[
    "message_update",
    "tool_execution_update",
    "message_start",
    "agent_start",
    "turn_start",
    "turn_end",
    "tool_execution_end",
];

/// Most non-fatal diagnostics kept.
const MAX_DIAGNOSTICS: usize = 16;

/// What is still read of a line past the JSON value budget: the ends of messages, attempts
/// and retries with the fields their handling reads; the bulk (contents, tool results, the
/// message list of `agent_end`) is skipped.
const PARTIAL: json::Partial = {
    use json::Keep::{Fields, Scalar};
    json::Partial {
        types: &["message_end", "agent_end", "auto_retry_end", "session"],
        fields: &[
            ("type", Scalar),
            ("id", Scalar),
            ("success", Scalar),
            ("finalError", Scalar),
            (
                "message",
                Fields(&[
                    ("role", Scalar),
                    ("responseModel", Scalar),
                    ("stopReason", Scalar),
                    ("errorMessage", Scalar),
                    (
                        "usage",
                        Fields(&[
                            ("input", Scalar),
                            ("output", Scalar),
                            ("cacheRead", Scalar),
                            ("cacheWrite", Scalar),
                            ("cost", Fields(&[("total", Scalar)])),
                        ]),
                    ),
                ]),
            ),
        ],
    }
};

/// What one assistant message says about the turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AssistantMessage {
    /// The model that answered (`responseModel`).
    pub(crate) served_model: Option<String>,
    /// The text blocks, joined with newlines; `None` when there is no text.
    pub(crate) text: Option<String>,
    /// The error of a failed request (`stopReason` `error` or `aborted`).
    pub(crate) failure: Option<String>,
    /// The request's token counts and cost.
    pub(crate) usage: Option<Usage>,
}

/// Reads an assistant message (`role: "assistant"`); `None` for any other message.
pub(crate) fn assistant_message(message: &Value) -> Option<AssistantMessage> {
    if json::str(message, "role") != Some("assistant") {
        return None;
    }
    let texts: Vec<&str> = json::array(message, "content")
        .iter()
        .filter(|b| json::str(b, "type") == Some("text"))
        .filter_map(|b| json::str(b, "text"))
        .filter(|t| !t.is_empty())
        .collect();
    let failure = match json::str(message, "stopReason") {
        Some("error") => Some(
            json::nonempty(message, "errorMessage")
                .unwrap_or("the model request failed")
                .to_owned(),
        ),
        Some("aborted") => Some(
            json::nonempty(message, "errorMessage")
                .unwrap_or("the request was aborted")
                .to_owned(),
        ),
        _ => None,
    };
    Some(AssistantMessage {
        served_model: json::nonempty(message, "responseModel").map(str::to_owned),
        text: (!texts.is_empty()).then(|| texts.join("\n")),
        failure,
        usage: message.get("usage").filter(|u| u.is_object()).map(usage_of),
    })
}

/// pi's token counts in the common convention: `input` leaves out the cache reads and
/// writes, so they are added back; `output` includes the reasoning.
fn usage_of(u: &Value) -> Usage {
    let get = |k: &str| json::u64(u, k).unwrap_or(0);
    let cached = get("cacheRead");
    Usage {
        input_tokens: get("input")
            .saturating_add(cached)
            .saturating_add(get("cacheWrite")),
        cached_input_tokens: cached,
        output_tokens: get("output"),
        cost_usd: u.get("cost").and_then(|c| json::f64(c, "total")),
        ..Usage::default()
    }
}

#[derive(Debug, Default)]
pub(crate) struct PiDecoder {
    drift: Drift,
    /// The line scan's buffers, kept between lines.
    scratch: scan::Scratch,
    session_id: Option<String>,
    started: bool,
    /// The last assistant message of the current attempt.
    last: Option<AssistantMessage>,
    final_message: Option<String>,
    failure: Option<String>,
    usage: Option<Usage>,
    terminal_seen: bool,
    diagnostics: Vec<String>,
}

impl PiDecoder {
    fn diagnostic(&mut self, text: String) {
        if self.diagnostics.len() < MAX_DIAGNOSTICS {
            self.diagnostics.push(progress::detail(&text));
        }
    }

    fn message_end(&mut self, v: &Value, update: &mut StreamUpdate) {
        let Some(message) = v.get("message").and_then(assistant_message) else {
            return;
        };
        // Evidence first: the model that answered, also when the request failed later. pi
        // writes `responseModel` only when the response names a model other than the one
        // requested; without it the requested model applies (never an observation).
        match &message.served_model {
            Some(model) => update.evidence.push(Evidence::ObservedModel {
                name: model.clone(),
                scope: ModelScope::MainLoop,
            }),
            None => update.evidence.push(Evidence::RequestedModelFallback),
        }
        if let Some(u) = &message.usage {
            self.usage.get_or_insert_with(Usage::default).accumulate(u);
        }
        self.last = Some(message);
    }

    /// `agent_end`: the attempt is over; its last assistant message is the answer, or the
    /// failure.
    fn agent_end(&mut self, v: &Value) {
        self.terminal_seen = true;
        let last = json::array(v, "messages")
            .iter()
            .rev()
            .find_map(assistant_message)
            .or_else(|| self.last.take());
        self.last = None;
        match last {
            Some(m) => {
                self.failure = m.failure;
                if m.text.is_some() {
                    self.final_message = m.text;
                }
            }
            None => self.failure = None,
        }
    }

    fn tool(&mut self, v: &Value, update: &mut StreamUpdate) {
        let name = json::nonempty(v, "toolName").unwrap_or("tool");
        let args = v.get("args").unwrap_or(&Value::Null);
        let line = match json::str(args, "command") {
            Some(cmd) if name == "bash" => progress::shell(cmd),
            _ => progress::tool(
                name,
                json::first_str(args, &["path", "file_path", "pattern", "url", "query"]),
            ),
        };
        update.progress.push(line);
    }
}

impl StreamDecoder for PiDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        // Quiet lines are only scanned (validated at close to the speed of a line count);
        // where the scan is unsure, `is_quiet` asks the full peek, as before.
        if json::may_be(line, json::leading_type(line), QUIET_TYPES) {
            let checked = scan::check(line, &mut self.scratch);
            if json::is_quiet(line, QUIET_TYPES, checked.as_ref()) {
                return update;
            }
        }
        let Some(v) = self.drift.object_or_partial(line, Some(&PARTIAL)) else {
            return update;
        };
        let Some(kind) = json::str(&v, "type") else {
            self.drift.malformed();
            return update;
        };
        match kind {
            "session" => {
                if self.session_id.is_none()
                    && let Some(id) = json::nonempty(&v, "id")
                {
                    self.session_id = Some(id.to_owned());
                }
                if !self.started {
                    self.started = true;
                    update.progress.push(progress::SESSION_STARTED.to_owned());
                }
            }
            "message_end" => self.message_end(&v, &mut update),
            "tool_execution_start" => self.tool(&v, &mut update),
            "agent_end" => self.agent_end(&v),
            "auto_retry_start" => {
                // Another attempt follows: the turn is not over until it ends (a stream cut
                // off now did not finish; the attempt's error stays a diagnostic).
                self.terminal_seen = false;
                self.failure = None;
                let error = json::nonempty(&v, "errorMessage").unwrap_or("error");
                // pi's own retry: shown as `rate limited, retry 1/3 in 2.0 s`, the error kept
                // in the diagnostics.
                update.progress.push(failure::retry_progress(
                    failure::classify(None, error),
                    json::u64(&v, "attempt"),
                    json::u64(&v, "maxAttempts"),
                    json::u64(&v, "delayMs"),
                ));
                let attempt = match (json::u64(&v, "attempt"), json::u64(&v, "maxAttempts")) {
                    (Some(n), Some(max)) => format!(" (attempt {n}/{max})"),
                    (Some(n), None) => format!(" (attempt {n})"),
                    _ => String::new(),
                };
                self.diagnostic(format!("retrying{attempt}: {error}"));
            }
            "compaction_start" => {
                let reason = json::nonempty(&v, "reason").unwrap_or("compaction");
                update.progress.push(progress::detail(&format!(
                    "compacting the context ({reason})"
                )));
            }
            "compaction_end" => {
                // A compaction after a context overflow may retry the attempt.
                if json::bool(&v, "willRetry") == Some(true) {
                    self.terminal_seen = false;
                    self.failure = None;
                }
                if let Some(e) = json::nonempty(&v, "errorMessage") {
                    self.diagnostic(format!("compaction failed: {e}"));
                }
            }
            "auto_retry_end" => {
                if json::bool(&v, "success") != Some(true) {
                    self.terminal_seen = true;
                    if let Some(e) = json::nonempty(&v, "finalError") {
                        self.failure = Some(e.to_owned());
                    } else if self.failure.is_none() {
                        self.failure = Some("the retries failed".to_owned());
                    }
                }
            }
            k if QUIET_TYPES.contains(&k) => {}
            other => self.drift.unknown(other),
        }
        update
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        // pi's error messages start with the HTTP status (`429 slow down`) or are the
        // provider's wording (`Connection error.`).
        let failure_kind = this
            .failure
            .as_deref()
            .and_then(|f| failure::classify(None, f));
        let mut facts = Facts {
            session_id: this.session_id,
            final_message: this.final_message,
            failure: this.failure,
            failure_kind,
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
