//! The Codex decoder (`codex exec --json`).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::failure;
use super::json;
use super::progress;
use super::{
    Drift, Evidence, Facts, FailureKind, RefusalCategory, StreamDecoder, StreamUpdate, Usage,
};

/// Where Codex keeps token counts (`turn.completed.usage` and the session file's totals):
/// input (cached included), cached input, output (reasoning included), reasoning.
pub(crate) const TOKEN_KEYS: [&str; 4] = [
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
];

/// What is still read of a line past the JSON value budget: an item's end (an MCP result can
/// hold far more values than the budget) and the turn's end, with the small fields their
/// handling reads; the bulk (results, arguments, file changes) is skipped.
const PARTIAL: json::Partial = {
    use json::Keep::{Fields, Scalar};
    json::Partial {
        types: &[
            "item.started",
            "item.updated",
            "item.completed",
            "turn.completed",
            "turn.failed",
        ],
        fields: &[
            ("type", Scalar),
            ("message", Scalar),
            ("error", Fields(&[("message", Scalar)])),
            (
                "usage",
                Fields(&[
                    (TOKEN_KEYS[0], Scalar),
                    (TOKEN_KEYS[1], Scalar),
                    (TOKEN_KEYS[2], Scalar),
                    (TOKEN_KEYS[3], Scalar),
                ]),
            ),
            (
                "item",
                Fields(&[
                    ("id", Scalar),
                    ("type", Scalar),
                    ("status", Scalar),
                    ("text", Scalar),
                    ("message", Scalar),
                    ("command", Scalar),
                    ("server", Scalar),
                    ("tool", Scalar),
                    ("query", Scalar),
                    ("action", Fields(&[("query", Scalar)])),
                ]),
            ),
        ],
    }
};

#[derive(Debug, Default)]
pub(crate) struct CodexDecoder {
    drift: Drift,
    session_id: Option<String>,
    started: bool,
    /// Item ids that already produced their progress line.
    shown: HashSet<String>,
    /// Items started and not yet completed: id → start order, and start order →
    /// description (two maps, so a stream of many items costs linear time, in start order).
    in_progress: HashMap<String, u64>,
    in_progress_order: BTreeMap<u64, String>,
    started_items: u64,
    killed: Vec<String>,
    /// The descriptions in `killed`, for constant-time deduplication.
    killed_set: HashSet<String>,
    final_message: Option<String>,
    failure: Option<String>,
    failure_kind: Option<FailureKind>,
    diagnostics: Vec<String>,
    usage: Option<Usage>,
    terminal_seen: bool,
}

/// Most non-fatal diagnostics kept.
const MAX_DIAGNOSTICS: usize = 16;

impl CodexDecoder {
    fn diagnostic(&mut self, text: &str) {
        if self.diagnostics.len() < MAX_DIAGNOSTICS {
            self.diagnostics.push(progress::detail(text));
        }
    }

    fn item(&mut self, event: &str, v: &Value, update: &mut StreamUpdate) {
        let Some(item) = v.get("item").filter(|i| i.is_object()) else {
            return;
        };
        let id = json::str(item, "id").unwrap_or("");
        let kind = json::str(item, "type").unwrap_or("");
        let line = render_item(kind, item);
        // The item's own status decides whether it is still running: Codex re-emits an item
        // it gave up on as `item.completed` with `status: "in_progress"`, and that is
        // unfinished work, not a finished item.
        let running = match json::str(item, "status") {
            Some(status) => status == "in_progress",
            None => event != "item.completed",
        };
        if !running {
            if let Some(seq) = self.in_progress.remove(id) {
                self.in_progress_order.remove(&seq);
            }
        } else if let Some(line) = &line
            && !self.in_progress.contains_key(id)
        {
            let seq = self.started_items;
            self.started_items += 1;
            self.in_progress.insert(id.to_owned(), seq);
            self.in_progress_order.insert(seq, line.clone());
        }
        if let Some(line) = line
            && !self.shown.contains(id)
        {
            self.shown.insert(id.to_owned());
            update.progress.push(line);
        }
        if event == "item.completed" {
            match kind {
                "agent_message" => {
                    if let Some(text) = json::str(item, "text") {
                        self.final_message = Some(text.to_owned());
                    }
                }
                "error" => {
                    if let Some(m) = json::nonempty(item, "message") {
                        self.diagnostic(m);
                    }
                }
                _ => {}
            }
        }
    }
}

/// The text a user can act on in an error Codex passes through as the provider's JSON body
/// (`{"type":"error","status":400,"error":{"type":…,"message":…}}`): the inner message, then
/// the error type and HTTP status. `None` when `message` is not such a body.
fn provider_error_text(message: &str) -> Option<String> {
    // The line was within the JSON budget, but a string in it may hold a document that is
    // not.
    if !message.starts_with('{') || !json::within_budget(message.as_bytes()) {
        return None;
    }
    let body: Value = serde_json::from_str(message).ok()?;
    let error = body.get("error")?;
    let text = json::nonempty(error, "message")?;
    let details: Vec<String> = [
        json::nonempty(error, "type").map(str::to_owned),
        json::u64(&body, "status").map(|s| format!("HTTP {s}")),
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

/// The progress line of Codex's own retry, `Reconnecting... 2/5 (<why>)`: `rate limited, retry
/// 2/5` (the kind from the reason, when it names one). `None` for any other message.
fn reconnect_progress(message: &str) -> Option<String> {
    let rest = message.trim().strip_prefix("Reconnecting...")?.trim_start();
    let counts = rest.split_whitespace().next().unwrap_or("");
    let (n, max) = counts.split_once('/')?;
    let (n, max) = (n.parse().ok()?, max.parse().ok()?);
    let reason = rest[counts.len()..].trim();
    Some(failure::retry_progress(
        failure::classify(None, reason),
        Some(n),
        Some(max),
        None,
    ))
}

fn render_item(kind: &str, item: &Value) -> Option<String> {
    match kind {
        "command_execution" => {
            let cmd = json::str(item, "command")?;
            Some(progress::shell(&progress::strip_shell_wrapper(cmd)))
        }
        "file_change" => {
            let parts: Vec<String> = json::array(item, "changes")
                .iter()
                .filter_map(|c| {
                    let path = json::nonempty(c, "path")?;
                    let verb = match json::str(c, "kind") {
                        Some("add") => "Add",
                        Some("delete") => "Delete",
                        _ => "Edit",
                    };
                    Some(format!("{verb} {}", progress::detail(path)))
                })
                .collect();
            (!parts.is_empty()).then(|| parts.join(", "))
        }
        "mcp_tool_call" => {
            let server = json::str(item, "server").unwrap_or("mcp");
            let tool = json::str(item, "tool").unwrap_or("tool");
            Some(format!("{server} {tool}"))
        }
        "web_search" => {
            let q = json::nonempty(item, "query")
                .or_else(|| item.get("action").and_then(|a| json::nonempty(a, "query")))?;
            Some(format!("web search {}", progress::detail(q)))
        }
        _ => None,
    }
}

impl StreamDecoder for CodexDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        let Some(v) = self.drift.object_or_partial(line, Some(&PARTIAL)) else {
            return update;
        };
        let Some(kind) = json::str(&v, "type") else {
            self.drift.malformed();
            return update;
        };
        match kind {
            "thread.started" => {
                // Every start signals the requested-model fallback (Codex streams carry no
                // model), independently of identity acceptance.
                update.evidence.push(Evidence::RequestedModelFallback);
                if self.session_id.is_none()
                    && let Some(id) = json::nonempty(&v, "thread_id")
                {
                    self.session_id = Some(id.to_owned());
                }
                if !self.started {
                    self.started = true;
                    update.progress.push(progress::SESSION_STARTED.to_owned());
                }
            }
            "turn.started" => {}
            "item.started" | "item.updated" | "item.completed" => {
                self.item(kind, &v, &mut update);
            }
            "turn.completed" => {
                self.terminal_seen = true;
                self.failure = None;
                self.failure_kind = None;
                if let Some(u) = v.get("usage") {
                    self.usage
                        .get_or_insert_with(Usage::default)
                        .add_tokens(u, TOKEN_KEYS);
                }
                self.in_progress.clear();
                for desc in std::mem::take(&mut self.in_progress_order).into_values() {
                    if self.killed_set.insert(desc.clone()) {
                        self.killed.push(desc);
                    }
                }
            }
            "turn.failed" => {
                self.terminal_seen = true;
                let message = v
                    .get("error")
                    .and_then(|e| json::str(e, "message"))
                    .or_else(|| json::str(&v, "message"));
                let lower = message.map(str::to_lowercase).unwrap_or_default();
                if lower.contains("cybersecurity") {
                    update
                        .evidence
                        .push(Evidence::Refusal(RefusalCategory::CodexCyber));
                }
                let failure = match message {
                    Some(m) => provider_error_text(m).unwrap_or_else(|| m.to_owned()),
                    None => "turn failed".to_owned(),
                };
                // "Codex ran out of room in the model's context window. …", "exceeded retry
                // limit, last status: 429 Too Many Requests", "We're currently experiencing
                // high demand", a provider body's HTTP status.
                self.failure_kind = failure::classify(None, &failure);
                self.failure = Some(failure);
            }
            // A diagnostic only: `Reconnecting... 1/5` must not fail the turn. Codex's own
            // retries become progress lines.
            "error" => {
                if let Some(m) = json::nonempty(&v, "message") {
                    if let Some(line) = reconnect_progress(m) {
                        update.progress.push(line);
                    }
                    match provider_error_text(m) {
                        Some(text) => self.diagnostic(&text),
                        None => self.diagnostic(m),
                    }
                }
            }
            other => self.drift.unknown(other),
        }
        update
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        let mut facts = Facts {
            session_id: this.session_id,
            final_message: this.final_message,
            failure: this.failure,
            failure_kind: this.failure_kind,
            killed_work: this.killed,
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

#[cfg(test)]
mod tests {
    use super::{provider_error_text, reconnect_progress};

    #[test]
    fn codex_reconnects_are_retry_progress() {
        assert_eq!(
            reconnect_progress(
                "Reconnecting... 2/5 (exceeded retry limit, last status: 429 Too Many Requests)"
            )
            .as_deref(),
            Some("rate limited, retry 2/5")
        );
        assert_eq!(
            reconnect_progress("Reconnecting... 1/5 (stream disconnected before completion)")
                .as_deref(),
            Some("network error, retry 1/5")
        );
        assert_eq!(
            reconnect_progress("Reconnecting... 1/3").as_deref(),
            Some("API error, retry 1/3")
        );
        for other in ["Reconnecting...", "Reconnecting... x/5", "stream error", ""] {
            assert_eq!(reconnect_progress(other), None, "{other}");
        }
    }

    #[test]
    fn a_provider_body_is_unwrapped_to_its_message() {
        let body =
            r#"{"type":"error","status":429,"error":{"type":"rate_limit","message":"slow down"}}"#;
        assert_eq!(
            provider_error_text(body).as_deref(),
            Some("slow down (rate_limit, HTTP 429)")
        );
        let bare = r#"{"error":{"message":"no details"}}"#;
        assert_eq!(provider_error_text(bare).as_deref(), Some("no details"));
        // Anything else stays as Codex wrote it.
        for other in [
            "stream disconnected before completion",
            r#"{"error":{"message":""}}"#,
            r#"{"error":"flat"}"#,
            r#"{"type":"error""#,
            r#" {"error":{"message":"leading space"}}"#,
        ] {
            assert_eq!(provider_error_text(other), None, "{other}");
        }
    }
}
