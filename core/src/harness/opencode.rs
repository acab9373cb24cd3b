//! The OpenCode decoder (`opencode run --format json`). OpenCode streams carry no
//! live model or safeguard evidence: the session export is authoritative, so this decoder
//! never returns evidence.

use std::collections::HashSet;

use serde_json::Value;

use super::failure;
use super::json;
use super::progress;
use super::{Drift, Facts, FailureKind, RetryAfter, StreamDecoder, StreamUpdate, Usage};

/// Adds OpenCode token counts (`tokens{input, output, reasoning, cache{read, write}}` of live
/// `step_finish` parts and of the session export alike) in the common convention. OpenCode
/// counts the cache reads and writes apart from `input`, and the reasoning apart from
/// `output` (seen on opencode 1.18: a request of 15 prompt tokens, 5 cached, and 4
/// completion tokens, 3 of them reasoning, is stored as input 10, cache.read 5, output 1,
/// reasoning 3).
pub(crate) fn add_tokens(usage: &mut Usage, tokens: &Value) {
    let count = |v: Option<&Value>, key: &str| v.and_then(|v| json::u64(v, key)).unwrap_or(0);
    let cache = tokens.get("cache");
    let (read, write) = (count(cache, "read"), count(cache, "write"));
    let reasoning = count(Some(tokens), "reasoning");
    let input = count(Some(tokens), "input")
        .saturating_add(read)
        .saturating_add(write);
    let output = count(Some(tokens), "output").saturating_add(reasoning);
    usage.input_tokens = usage.input_tokens.saturating_add(input);
    usage.cached_input_tokens = usage.cached_input_tokens.saturating_add(read);
    usage.output_tokens = usage.output_tokens.saturating_add(output);
    usage.reasoning_tokens = usage.reasoning_tokens.saturating_add(reasoning);
}

/// What is still read of a line past the JSON value budget: the step's end and an error, with
/// the fields their handling reads; the bulk is skipped.
const PARTIAL: json::Partial = {
    use json::Keep::{Fields, Scalar};
    json::Partial {
        types: &["step_finish", "error"],
        fields: &[
            ("type", Scalar),
            ("sessionID", Scalar),
            (
                "part",
                Fields(&[
                    ("reason", Scalar),
                    ("cost", Scalar),
                    (
                        "tokens",
                        Fields(&[
                            ("input", Scalar),
                            ("output", Scalar),
                            ("reasoning", Scalar),
                            ("cache", Fields(&[("read", Scalar), ("write", Scalar)])),
                        ]),
                    ),
                ]),
            ),
            (
                "error",
                Fields(&[
                    ("type", Scalar),
                    ("name", Scalar),
                    ("message", Scalar),
                    (
                        "data",
                        Fields(&[
                            ("message", Scalar),
                            ("statusCode", Scalar),
                            (
                                "responseHeaders",
                                Fields(&[("retry-after", Scalar), ("retry-after-ms", Scalar)]),
                            ),
                        ]),
                    ),
                ]),
            ),
        ],
    }
};

#[derive(Debug, Default)]
pub(crate) struct OpenCodeDecoder {
    drift: Drift,
    session_id: Option<String>,
    started: bool,
    shown: HashSet<String>,
    final_message: Option<String>,
    failure: Option<String>,
    failure_kind: Option<FailureKind>,
    retry_after: Option<RetryAfter>,
    usage: Option<Usage>,
    terminal_seen: bool,
}

const QUIET_TYPES: &[&str] = &["step_start", "reasoning", "snapshot", "patch", "file"];

impl OpenCodeDecoder {
    fn tool(&mut self, part: &Value, update: &mut StreamUpdate) {
        let id = json::first_str(part, &["callID", "id"]).unwrap_or("");
        // Each call once: a repeated id is an update of a call already shown.
        if !id.is_empty() && !self.shown.insert(id.to_owned()) {
            return;
        }
        let name = json::nonempty(part, "tool").unwrap_or("tool");
        let state = part.get("state").unwrap_or(&Value::Null);
        let input = state.get("input").unwrap_or(&Value::Null);
        let line = match json::str(input, "command") {
            Some(cmd) if name == "bash" => progress::shell(cmd),
            _ => progress::tool(
                name,
                json::first_str(
                    input,
                    &[
                        "filePath",
                        "file_path",
                        "pattern",
                        "description",
                        "url",
                        "query",
                    ],
                )
                .or_else(|| json::nonempty(state, "title")),
            ),
        };
        update.progress.push(line);
    }
}

/// An OpenCode error as `<type>: <message>`, with its type: the error is a string, an object
/// `{type, message}`, or `{name, data{message}}` (the shape `opencode run` prints).
pub(crate) fn error_text(error: &Value) -> (Option<&str>, String) {
    if let Some(text) = error.as_str() {
        return (None, text.to_owned());
    }
    let kind = json::nonempty(error, "type").or_else(|| json::nonempty(error, "name"));
    let message = json::nonempty(error, "message")
        .or_else(|| error.get("data").and_then(|d| json::nonempty(d, "message")));
    let text = match (kind, message) {
        (Some(k), Some(m)) => format!("{k}: {m}"),
        (Some(k), None) => k.to_owned(),
        (None, Some(m)) => m.to_owned(),
        (None, None) => "unknown error".to_owned(),
    };
    (kind, text)
}

/// The kind of an OpenCode error, and the API's retry time: `ContextOverflowError` is a
/// context overflow; an `APIError{data{statusCode, message, responseHeaders}}` is classified
/// by its status and message, its `retry-after(-ms)` header the retry time. `(None, None)`
/// for an error that carries neither.
fn classify_error(name: Option<&str>, error: &Value) -> (Option<FailureKind>, Option<RetryAfter>) {
    if name == Some("ContextOverflowError") {
        return (Some(FailureKind::ContextLength), None);
    }
    let data = error.get("data").unwrap_or(&Value::Null);
    let status = json::u64(data, "statusCode").and_then(|s| u16::try_from(s).ok());
    let message = json::str(data, "message").unwrap_or("");
    let kind = failure::classify(status, message);
    let retry_after = data
        .get("responseHeaders")
        .and_then(Value::as_object)
        .and_then(|headers| {
            failure::retry_after_of_headers(
                headers
                    .iter()
                    .filter_map(|(name, value)| Some((name.as_str(), value.as_str()?))),
            )
        });
    (kind, retry_after)
}

/// The kind of an OpenCode error wherever it appears (the stream's `error` event, an exported
/// message's `error`): by its name, status and message, else by its text.
pub(crate) fn error_kind(error: &Value) -> Option<FailureKind> {
    let (name, text) = error_text(error);
    classify_error(name, error)
        .0
        .or_else(|| failure::classify(None, &text))
}

impl StreamDecoder for OpenCodeDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        let Some(v) = self.drift.object_or_partial(line, Some(&PARTIAL)) else {
            return update;
        };
        let Some(kind) = json::str(&v, "type") else {
            self.drift.malformed();
            return update;
        };
        if self.session_id.is_none()
            && let Some(id) = json::nonempty(&v, "sessionID")
        {
            self.session_id = Some(id.to_owned());
            if !self.started {
                self.started = true;
                update.progress.push(progress::SESSION_STARTED.to_owned());
            }
        }
        let part = v.get("part").unwrap_or(&Value::Null);
        match kind {
            "text" => {
                if let Some(text) = json::str(part, "text") {
                    self.final_message = Some(text.to_owned());
                }
            }
            "tool_use" => self.tool(part, &mut update),
            "step_finish" => {
                self.terminal_seen =
                    json::str(part, "reason") == Some("stop") || self.terminal_seen;
                if let Some(t) = part.get("tokens") {
                    add_tokens(self.usage.get_or_insert_with(Usage::default), t);
                }
                if let Some(cost) = json::f64(part, "cost") {
                    self.usage.get_or_insert_with(Usage::default).add_cost(cost);
                }
            }
            "error" => {
                self.terminal_seen = true;
                let error = v.get("error").unwrap_or(&Value::Null);
                let (kind, text) = error_text(error);
                let (failure_kind, retry_after) = classify_error(kind, error);
                self.failure_kind = failure_kind.or_else(|| failure::classify(None, &text));
                self.retry_after = retry_after;
                self.failure = Some(text);
            }
            k if QUIET_TYPES.contains(&k) => {}
            other => self.drift.unknown(other),
        }
        update
    }

    fn usage_so_far(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        let summary = this.usage.as_ref().map(|u| {
            let mut s = format!(
                "{} input tokens, {} output tokens",
                u.input_tokens, u.output_tokens
            );
            if let Some(c) = u.cost_usd.filter(|c| *c > 0.0) {
                s.push_str(&format!(", ${c:.2}"));
            }
            s
        });
        let mut facts = Facts {
            session_id: this.session_id,
            final_message: this.final_message,
            failure: this.failure,
            failure_kind: this.failure_kind,
            retry_after: this.retry_after,
            summary,
            usage: this.usage,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        this.drift.into_facts(&mut facts);
        facts
    }
}
