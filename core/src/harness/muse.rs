//! The Muse decoder (`muse exec --json`, SPEC §12). Envelope
//! `{stream{kind,id}, payload_type, payload}`. Muse streams carry no live model or safeguard
//! evidence: the retained session log is the model and usage source, so this decoder never
//! returns evidence.

use std::collections::HashSet;

use serde_json::Value;

use super::json;
use super::progress;
use super::{Drift, Facts, StreamDecoder, StreamUpdate};

#[derive(Debug, Default)]
pub(crate) struct MuseDecoder {
    drift: Drift,
    session_id: Option<String>,
    started: bool,
    reply: String,
    completed_text: Option<String>,
    failure: Option<String>,
    terminal_seen: bool,
    shown_tasks: HashSet<String>,
}

/// Payload type prefixes Muse is known to emit.
const KNOWN_PREFIXES: &[&str] = &["run.", "task.", "session.", "stream."];

impl MuseDecoder {
    fn take_session(&mut self, v: &Value, update: &mut StreamUpdate) {
        if self.session_id.is_some() {
            return;
        }
        let from_stream = v
            .get("stream")
            .filter(|s| json::str(s, "kind") == Some("session"))
            .and_then(|s| json::nonempty(s, "id"));
        let from_payload = v
            .get("payload")
            .and_then(|p| json::first_str(p, &["session_id", "sessionId"]));
        if let Some(id) = from_stream.or(from_payload) {
            self.session_id = Some(id.to_owned());
            if !self.started {
                self.started = true;
                update.progress.push(progress::SESSION_STARTED.to_owned());
            }
        }
    }

    fn task(&mut self, v: &Value, payload: &Value, update: &mut StreamUpdate) {
        let task = payload
            .get("task")
            .filter(|t| t.is_object())
            .unwrap_or(payload);
        let kind = json::str(task, "kind").unwrap_or("");
        if kind.starts_with("model.") {
            // A new model turn starts a new reply.
            self.reply.clear();
        } else if let Some(tool) = kind.strip_prefix("tool.") {
            let id = json::str(task, "id")
                .or_else(|| v.get("stream").and_then(|s| json::str(s, "id")))
                .unwrap_or("");
            // Each call once: a repeated id is an update of a call already shown.
            if !id.is_empty() && !self.shown_tasks.insert(id.to_owned()) {
                return;
            }
            let input = task.get("input").unwrap_or(&Value::Null);
            let line = match json::str(input, "command") {
                Some(cmd) if matches!(tool, "shell" | "bash" | "exec") => progress::shell(cmd),
                _ => progress::tool(
                    tool,
                    json::first_str(input, &["path", "file_path", "pattern", "url", "query"])
                        .or_else(|| json::first_str(task, &["title", "summary"])),
                ),
            };
            update.progress.push(line);
        }
    }
}

impl StreamDecoder for MuseDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        let Some(v) = self.drift.object(line) else {
            return update;
        };
        let Some(kind) = json::str(&v, "payload_type") else {
            self.drift.malformed();
            return update;
        };
        self.take_session(&v, &mut update);
        let payload = v.get("payload").unwrap_or(&Value::Null);
        match kind {
            "run.output.delta" => {
                if let Some(d) = payload
                    .as_str()
                    .or_else(|| json::first_str(payload, &["delta", "text"]))
                {
                    self.reply.push_str(d);
                }
            }
            "task.lifecycle.proposed" => self.task(&v, payload, &mut update),
            "run.terminal.completed" => {
                self.terminal_seen = true;
                self.failure = None;
                self.completed_text = json::nonempty(payload, "text").map(str::to_owned);
            }
            "run.terminal.failed" => {
                self.terminal_seen = true;
                self.failure = Some(
                    json::nonempty(payload, "reason")
                        .unwrap_or("run failed")
                        .to_owned(),
                );
            }
            k if KNOWN_PREFIXES.iter().any(|p| k.starts_with(p)) => {}
            other => self.drift.unknown(other),
        }
        update
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        let final_message = if this.reply.is_empty() {
            this.completed_text
        } else {
            Some(this.reply)
        };
        let mut facts = Facts {
            session_id: this.session_id,
            final_message,
            failure: this.failure,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        this.drift.into_facts(&mut facts);
        facts
    }
}
