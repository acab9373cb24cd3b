//! The Antigravity decoder (`agy -p --output-format stream-json`). Lines are keyed
//! by `event`. The single `--print --output-format json` envelope (no `event`, with
//! `conversation_id` and `status`) is accepted too, as a result.

use std::collections::HashSet;

use serde_json::Value;

use super::failure;
use super::json;
use super::progress;
use super::usage::turns_text;
use super::{Drift, Evidence, Facts, ModelScope, StreamDecoder, StreamUpdate, Usage};

const QUIET_EVENTS: &[&str] = &["message", "text", "thinking", "heartbeat"];

#[derive(Debug, Default)]
pub(crate) struct AgyDecoder {
    drift: Drift,
    session_id: Option<String>,
    started: bool,
    shown_steps: HashSet<u64>,
    final_message: Option<String>,
    failure: Option<String>,
    usage: Option<Usage>,
    terminal_seen: bool,
    diagnostics: Vec<String>,
}

/// The body of an event: nested under a key of the event's own name
/// (`{"event":"result","result":{…}}`), or, for older flat streams, the event itself.
fn body<'a>(v: &'a Value, event: &str) -> &'a Value {
    v.get(event).filter(|b| b.is_object()).unwrap_or(v)
}

impl AgyDecoder {
    fn take_session(&mut self, id: Option<&str>, update: &mut StreamUpdate) {
        if self.session_id.is_none()
            && let Some(id) = id
        {
            self.session_id = Some(id.to_owned());
            if !self.started {
                self.started = true;
                update.progress.push(progress::SESSION_STARTED.to_owned());
            }
        }
    }

    fn init(&mut self, v: &Value, update: &mut StreamUpdate) {
        let init = body(v, "init");
        // Every init can supply model evidence, whether or not identity was accepted before.
        // A delegated agent's init carries the parent's tool use id.
        if let Some(model) = json::str(init, "model") {
            let delegated = json::non_null(v, "parent_tool_use_id");
            update.evidence.push(Evidence::ObservedModel {
                name: model.to_owned(),
                scope: if delegated {
                    ModelScope::AttributionOnly
                } else {
                    ModelScope::MainLoop
                },
            });
        }
        // Identity while none: an init without one leaves the next init to supply it.
        let id = json::nonempty(v, "conversation_id");
        self.take_session(id, update);
    }

    fn step(&mut self, v: &Value, update: &mut StreamUpdate) {
        let step = body(v, "step_update");
        if json::str(step, "step_type") != Some("tool") {
            return;
        }
        let Some(index) = json::u64(step, "step_index") else {
            return;
        };
        if !self.shown_steps.insert(index) {
            return;
        }
        let info = step.get("tool_info").unwrap_or(&Value::Null);
        let name = json::nonempty(step, "tool_name")
            .or_else(|| json::nonempty(info, "name"))
            .unwrap_or("tool");
        let params = info
            .get("parameters")
            .or_else(|| step.get("input"))
            .unwrap_or(&Value::Null);
        let line = match json::first_str(params, &["CommandLine", "command"]) {
            Some(cmd) if name == "run_command" => progress::shell(cmd),
            _ => progress::tool(
                name,
                json::first_str(
                    params,
                    &[
                        "AbsolutePath",
                        "TargetFile",
                        "SearchPath",
                        "Query",
                        "Description",
                    ],
                ),
            ),
        };
        update.progress.push(line);
    }

    fn result(&mut self, v: &Value, update: &mut StreamUpdate) {
        let result = body(v, "result");
        let id = json::nonempty(result, "conversation_id")
            .or_else(|| json::nonempty(v, "conversation_id"));
        self.take_session(id, update);
        // Last result wins.
        self.terminal_seen = true;
        self.final_message = json::str(result, "response")
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        let error = json::nonempty(result, "error").or_else(|| {
            result
                .get("error")
                .and_then(|e| json::nonempty(e, "message"))
        });
        if let Some(e) = error {
            update
                .progress
                .push(format!("error: {}", progress::detail(e)));
        }
        self.failure = (json::str(result, "status") == Some("ERROR"))
            .then(|| error.unwrap_or("status ERROR").to_owned());
        if let Some(u) = result.get("usage") {
            // Antigravity counts thinking apart from output; the common convention counts
            // output including reasoning.
            let thinking = json::u64(u, "thinking_tokens").unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: json::u64(u, "input_tokens").unwrap_or(0),
                cached_input_tokens: json::u64(u, "cache_read_tokens").unwrap_or(0),
                output_tokens: json::u64(u, "output_tokens")
                    .unwrap_or(0)
                    .saturating_add(thinking),
                reasoning_tokens: thinking,
                cost_usd: None,
                turns: json::u64(result, "num_turns"),
                ..Usage::default()
            });
        } else if let Some(turns) = json::u64(result, "num_turns") {
            self.usage.get_or_insert_with(Usage::default).turns = Some(turns);
        }
    }
}

impl StreamDecoder for AgyDecoder {
    fn condense(&mut self, line: &[u8]) -> StreamUpdate {
        let mut update = StreamUpdate::default();
        let Some(v) = self.drift.object(line) else {
            return update;
        };
        let Some(event) = json::str(&v, "event") else {
            if v.get("status").is_some_and(Value::is_string) && v.get("conversation_id").is_some() {
                self.result(&v, &mut update);
            } else {
                self.drift.malformed();
            }
            return update;
        };
        match event {
            "init" => self.init(&v, &mut update),
            "step_update" => self.step(&v, &mut update),
            "result" => self.result(&v, &mut update),
            "error" => {
                if let Some(m) =
                    json::nonempty(&v, "message").or_else(|| json::nonempty(&v, "error"))
                    && self.diagnostics.len() < 16
                {
                    self.diagnostics.push(progress::detail(m));
                }
            }
            e if QUIET_EVENTS.contains(&e) => {}
            other => self.drift.unknown(other),
        }
        update
    }

    fn complete(self: Box<Self>) -> Facts {
        let this = *self;
        let summary = this.usage.as_ref().map(|u| match u.turns {
            Some(t) => format!(
                "{}, {} input tokens, {} output tokens",
                turns_text(t),
                u.input_tokens,
                u.output_tokens
            ),
            None => u.summary(),
        });
        let mut facts = Facts {
            session_id: this.session_id,
            final_message: this.final_message,
            // The result's `error` is the API's error as Antigravity passes it through.
            failure_kind: this
                .failure
                .as_deref()
                .and_then(|f| failure::classify(None, f)),
            failure: this.failure,
            summary,
            usage: this.usage,
            diagnostics: this.diagnostics,
            terminal_seen: this.terminal_seen,
            ..Facts::default()
        };
        this.drift.into_facts(&mut facts);
        facts
    }
}
