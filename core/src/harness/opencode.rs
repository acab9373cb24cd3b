//! The OpenCode decoder (`opencode run --format json`, SPEC §12). OpenCode streams carry no
//! live model or safeguard evidence: the session export is authoritative, so this decoder
//! never returns evidence.

use std::collections::HashSet;

use serde_json::Value;

use super::json;
use super::progress;
use super::{Drift, Facts, FailureKind, StreamDecoder, StreamUpdate, Usage};

/// Where OpenCode keeps token counts (live `step_finish` parts and the session export alike):
/// input, cached input, output, reasoning.
pub(crate) const TOKEN_KEYS: [&str; 4] = ["input", "cache.read", "output", "reasoning"];

#[derive(Debug, Default)]
pub(crate) struct OpenCodeDecoder {
    drift: Drift,
    session_id: Option<String>,
    started: bool,
    shown: HashSet<String>,
    final_message: Option<String>,
    failure: Option<String>,
    failure_kind: Option<FailureKind>,
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

impl StreamDecoder for OpenCodeDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        let Some(v) = self.drift.object(line) else {
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
                    let usage = self.usage.get_or_insert_with(Usage::default);
                    usage.add_tokens(t, TOKEN_KEYS);
                }
                if let Some(cost) = json::f64(part, "cost") {
                    self.usage.get_or_insert_with(Usage::default).add_cost(cost);
                }
            }
            "error" => {
                self.terminal_seen = true;
                let error = v.get("error").unwrap_or(&Value::Null);
                let name = json::nonempty(error, "name").unwrap_or("Error");
                let message = error
                    .get("data")
                    .and_then(|d| json::nonempty(d, "message"))
                    .or_else(|| json::nonempty(error, "message"))
                    .or_else(|| error.as_str())
                    .unwrap_or("unknown error");
                self.failure = Some(format!("{name}: {message}"));
                self.failure_kind =
                    (name == "ContextOverflowError").then_some(FailureKind::ContextLength);
            }
            k if QUIET_TYPES.contains(&k) => {}
            other => self.drift.unknown(other),
        }
        update
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
            summary,
            usage: this.usage,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        this.drift.into_facts(&mut facts);
        facts
    }
}
