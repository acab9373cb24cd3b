//! The Muse decoder (`muse exec --json`). Envelope
//! `{stream{kind,id}, payload_type, payload}`. Muse streams carry no live model or safeguard
//! evidence: the retained session log is the model and usage source, so this decoder never
//! returns evidence.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::failure;
use super::json;
use super::progress;
use super::{Drift, Facts, StreamDecoder, StreamUpdate};

#[derive(Debug, Default)]
pub(crate) struct MuseDecoder {
    drift: Drift,
    /// `stream.id` of the last line of a `session` stream.
    session_id: Option<String>,
    /// `payload.session_id`, used only when no session stream named one.
    payload_session_id: Option<String>,
    started: bool,
    reply: String,
    /// Whether any `run.output.delta` came (then `run.terminal.completed` is not the reply).
    delta_seen: bool,
    completed_text: Option<String>,
    failure: Option<String>,
    terminal_seen: bool,
    /// Tool tasks proposed, by task id: their kind (`tool.bash`).
    tool_tasks: HashMap<String, String>,
    shown_tasks: HashSet<String>,
    killed: Vec<String>,
    /// The kinds in `killed`, for constant-time deduplication.
    killed_set: HashSet<String>,
}

/// Payload type prefixes Muse is known to emit.
const KNOWN_PREFIXES: &[&str] = &["run.", "task.", "session.", "stream."];

/// A task lifecycle payload's task fields: `payload.event{task_id, task_kind, …}`, or the
/// older `payload.task{id, kind, …}`.
struct TaskView<'a> {
    id: &'a str,
    kind: &'a str,
    fields: &'a Value,
}

fn task_view(payload: &Value) -> TaskView<'_> {
    if let Some(event) = payload.get("event").filter(|e| e.is_object()) {
        return TaskView {
            id: json::str(event, "task_id").unwrap_or(""),
            kind: json::str(event, "task_kind").unwrap_or(""),
            fields: event,
        };
    }
    let task = payload
        .get("task")
        .filter(|t| t.is_object())
        .unwrap_or(payload);
    TaskView {
        id: json::str(task, "id").unwrap_or(""),
        kind: json::str(task, "kind").unwrap_or(""),
        fields: task,
    }
}

impl MuseDecoder {
    fn take_session(&mut self, v: &Value) {
        // Last wins: a session stream line names the session it belongs to.
        if let Some(id) = v
            .get("stream")
            .filter(|s| json::str(s, "kind") == Some("session"))
            .and_then(|s| json::nonempty(s, "id"))
        {
            self.session_id = Some(id.to_owned());
        } else if self.payload_session_id.is_none()
            && let Some(id) = v
                .get("payload")
                .and_then(|p| json::first_str(p, &["session_id", "sessionId"]))
        {
            self.payload_session_id = Some(id.to_owned());
        }
    }

    fn start(&mut self, update: &mut StreamUpdate) {
        if !self.started {
            self.started = true;
            update.progress.push(progress::SESSION_STARTED.to_owned());
        }
    }

    fn proposed(&mut self, payload: &Value, update: &mut StreamUpdate) {
        let task = task_view(payload);
        if task.kind.starts_with("model.") {
            // A new model turn starts a new reply.
            self.reply.clear();
            return;
        }
        let Some(tool) = task.kind.strip_prefix("tool.") else {
            return;
        };
        if !task.id.is_empty() {
            self.tool_tasks
                .insert(task.id.to_owned(), task.kind.to_owned());
            // Each call once: a repeated id is an update of a call already shown.
            if !self.shown_tasks.insert(task.id.to_owned()) {
                return;
            }
        }
        let input = ["input", "arguments", "args"]
            .iter()
            .find_map(|k| task.fields.get(*k).filter(|v| v.is_object()))
            .unwrap_or(&Value::Null);
        let line = match json::str(input, "command") {
            Some(cmd) if matches!(tool, "shell" | "bash" | "exec") => progress::shell(cmd),
            _ => progress::tool(
                tool,
                json::first_str(input, &["path", "file_path", "pattern", "url", "query"])
                    .or_else(|| json::first_str(task.fields, &["title", "summary"])),
            ),
        };
        update.progress.push(line);
    }

    fn cancelled(&mut self, payload: &Value) {
        let task = task_view(payload);
        let reason = json::str(task.fields, "reason").unwrap_or("");
        if reason.contains("session ended")
            && let Some(kind) = self.tool_tasks.get(task.id)
            && self.killed_set.insert(kind.clone())
        {
            self.killed.push(kind.clone());
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
        self.take_session(&v);
        let payload = v.get("payload").unwrap_or(&Value::Null);
        match kind {
            "run.lifecycle.started" => self.start(&mut update),
            "run.output.delta" => {
                if let Some(d) = payload
                    .as_str()
                    .or_else(|| json::first_str(payload, &["text", "delta"]))
                {
                    self.delta_seen = true;
                    self.reply.push_str(d);
                }
            }
            "task.lifecycle.proposed" => self.proposed(payload, &mut update),
            "task.lifecycle.cancelled" => self.cancelled(payload),
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
        let final_message = if this.delta_seen {
            Some(this.reply).filter(|r| !r.is_empty())
        } else {
            this.completed_text
        };
        let mut facts = Facts {
            session_id: this.session_id.or(this.payload_session_id),
            final_message,
            // Muse passes the API's error through as the failure's reason.
            failure_kind: this
                .failure
                .as_deref()
                .and_then(|f| failure::classify(None, f)),
            failure: this.failure,
            killed_work: this.killed,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        this.drift.into_facts(&mut facts);
        facts
    }
}
