//! Pure parsers for the retained records that are authoritative for models and usage: the
//! Muse session log, the OpenCode session export and the Codex session file. Reading them is
//! the driver's job; it hands the bytes to [`RetainedKind::parse`] and the record to
//! [`Finished::complete`](super::Finished::complete).
//!
//! Formats (where the public documentation is silent, this is the reading agentrun
//! implements, documented in `docs/interpretation.md`):
//!
//! * **Muse session log** (`…/muse/sessions/<yyyy>/<mm>/<dd>/<id>/session.jsonl`): JSON
//!   lines, each a record `{stream{kind,id}, payload_type, payload}` or a wrapper
//!   `{"retained_frame":…,"children":[{"record_json":"<record as a JSON string>"}]}`. Only
//!   records of the session (`stream.id == <id>`) with `payload.kind == "run"` count:
//!   `payload.event.kind == "assistant_message_committed"` gives the reply (last wins, from
//!   `text`), `"model_completed"` the usage (`input_tokens`, `cached_tokens`,
//!   `output_tokens`, from `usage` or the event itself; summed) and the model
//!   (`payload.event.model`). A malformed line makes the whole log unreadable.
//! * **OpenCode session export** (`opencode export ID`): one JSON document
//!   `{info{id,…}, messages[{info{role, providerID, modelID, tokens{input, output,
//!   reasoning, cache{read,write}}, cost, error}, parts[…]}]}`. Only the messages after the
//!   last user message count (a resumed session's export holds the earlier runs too). Each
//!   assistant message names the model `providerID/modelID` (or `modelID` alone); tokens and
//!   cost are summed; the last text part of the last assistant message is the final message;
//!   an assistant message's `error` fails the turn.
//! * **Codex session file** (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<thread_id>.jsonl`):
//!   JSON lines `{type, payload}`. The lines a run appended name the model it used in each
//!   `turn_context`'s `payload.model`. Codex reports the thread's running token total after
//!   a resume, so the total recorded before the run ([`codex_token_total`] of the file as it
//!   was) becomes the record's [`RetainedRecord::usage_baseline`].
//! * **Qwen Code session log** (`~/.qwen/projects/<cwd with / as ->/chats/<id>.jsonl`):
//!   JSON lines, each a record `{type, sessionId, message, systemPayload, …}`; a resumed
//!   session appends to the same file, so only the records after the last `type: "user"`
//!   record are the run's. Its `type: "system"`, `subtype: "ui_telemetry"` records whose
//!   `systemPayload.uiEvent["event.name"]` is `qwen-code.api_response` name the model that
//!   answered (`model`, the served one; the stream names only the requested one) and the
//!   request's tokens (`input_token_count` (cache reads included),
//!   `cached_content_token_count`, `output_token_count`, `thoughts_token_count`); the text
//!   parts of the last `type: "assistant"` record are the final message.
//! * **pi session log** (`~/.pi/agent/sessions/--<cwd with / as ->--/<time>_<id>.jsonl`):
//!   JSON lines; `type: "message"` records hold a `message` as the stream's `message_end`
//!   has it. The run's records are those after the last user message: each assistant
//!   message names the model that answered (`responseModel`) and its usage (summed); the
//!   last one's text is the final message, its `stopReason: "error"` a failure.
//! * **Gemini session log** (`~/.gemini/tmp/<project>/chats/session-<date>-<id8>.jsonl`):
//!   see [`parse_gemini_session_log`](super::gemini::parse_gemini_session_log). It names
//!   only the requested model, so it is [`RetainedRecord::supplementary`].
//!
//! Model lists are ordered by first appearance, deduplicated, trimmed, and exclude empty
//! names and `<synthetic>`, exactly like live evidence.

use serde_json::Value;

use super::Usage;
pub use super::gemini::parse_gemini_session_log;
use super::interpretation::ModelList;
use super::json;

/// Which retained record a harness has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetainedKind {
    /// Muse's session log.
    MuseSessionLog,
    /// OpenCode's `opencode export ID` document.
    OpenCodeExport,
    /// The lines Codex appended to its session file during the run.
    CodexSession,
    /// Qwen Code's session log (`~/.qwen/projects/<project>/chats/<id>.jsonl`).
    QwenSessionLog,
    /// pi's session log (`~/.pi/agent/sessions/<project>/<time>_<id>.jsonl`).
    PiSessionLog,
    /// Gemini CLI's session log (`~/.gemini/tmp/<project>/chats/session-…-<id8>.jsonl`).
    GeminiSessionLog,
}

impl RetainedKind {
    /// Parses the record's bytes; `session_id` selects the session's records where the record
    /// holds several (Muse), and is ignored otherwise.
    pub fn parse(
        self,
        session_id: Option<&str>,
        bytes: &[u8],
    ) -> Result<RetainedRecord, RetainedError> {
        match self {
            RetainedKind::MuseSessionLog => parse_muse_session_log(session_id, bytes),
            RetainedKind::OpenCodeExport => parse_opencode_export(bytes),
            RetainedKind::CodexSession => parse_codex_session(bytes),
            RetainedKind::QwenSessionLog => parse_qwen_session_log(bytes),
            RetainedKind::PiSessionLog => parse_pi_session_log(bytes),
            RetainedKind::GeminiSessionLog => {
                super::gemini::parse_gemini_session_log(session_id, bytes)
            }
        }
    }

    /// What the record is called in messages (`the OpenCode session export`).
    pub fn description(self) -> &'static str {
        match self {
            RetainedKind::MuseSessionLog => "the Muse session log",
            RetainedKind::OpenCodeExport => "the OpenCode session export",
            RetainedKind::CodexSession => "the Codex session file",
            RetainedKind::QwenSessionLog => "the Qwen Code session log",
            RetainedKind::PiSessionLog => "the pi session log",
            RetainedKind::GeminiSessionLog => "the Gemini session log",
        }
    }

    /// Whether the stream is complete without the record, so that a missing one is no
    /// warning: the Codex stream lacks only the model (and says so), the Gemini stream has
    /// everything the log has but the message as committed.
    pub fn optional(self) -> bool {
        matches!(
            self,
            RetainedKind::CodexSession | RetainedKind::GeminiSessionLog
        )
    }
}

/// What the caller should read before completing: the record kind and the session it
/// belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedRequest {
    /// The record kind.
    pub kind: RetainedKind,
    /// The session id from the stream (`None` when the stream supplied none; the caller may
    /// still know it, e.g. from `--session-id`).
    pub session_id: Option<String>,
}

/// A parsed retained record: the authoritative model list and usage.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RetainedRecord {
    /// The session id the record names, if any.
    pub session_id: Option<String>,
    /// Models, ordered by first appearance, deduplicated (may be empty: still authoritative);
    /// at most [`MAX_MODELS`](super::interpretation::MAX_MODELS), names bounded like the
    /// stream's.
    pub models: Vec<String>,
    /// How many distinct models `models` left out (beyond the cap).
    pub models_omitted: u64,
    /// Summed usage, when the record carries any.
    pub usage: Option<Usage>,
    /// The final message, when the record has one (it replaces the stream's).
    pub final_message: Option<String>,
    /// A turn failure the record reports (used when the stream reported none).
    pub failure: Option<String>,
    /// The kind of [`RetainedRecord::failure`] when the record says more than its text (an
    /// OpenCode export's error names the API's status); otherwise the completion classifies
    /// the text.
    pub failure_kind: Option<super::FailureKind>,
    /// Tokens the stream's usage already counted before this run (Codex's running total
    /// after a resume); subtracted from the stream's usage.
    pub usage_baseline: Option<Usage>,
    /// The record only fills in what the stream lacks: the stream's models stand (the record
    /// names none, or only requested ones), and its usage when the stream reported some
    /// (Gemini's session log). Its final message still replaces the stream's.
    pub supplementary: bool,
}

impl RetainedRecord {
    /// Moves a parser's model list into the record.
    pub(crate) fn set_models(&mut self, list: ModelList) {
        (self.models, self.models_omitted) = list.into_parts();
    }
}

/// Why a retained record could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetainedError {
    /// A line of a JSON-lines record is past the JSON budget
    /// ([`MAX_JSON_DEPTH`](super::MAX_JSON_DEPTH), [`MAX_JSON_VALUES`](super::MAX_JSON_VALUES)).
    #[error(
        "line {line} of {what} is nested deeper than {} or holds more than {} values",
        super::MAX_JSON_DEPTH,
        super::MAX_JSON_VALUES
    )]
    LineOverBudget {
        /// Which record (`the Muse session log`).
        what: &'static str,
        /// The 1-based line number.
        line: usize,
    },
    /// The OpenCode export is nested deeper than [`MAX_JSON_DEPTH`](super::MAX_JSON_DEPTH)
    /// or holds more than [`MAX_JSON_DOCUMENT_VALUES`](super::MAX_JSON_DOCUMENT_VALUES)
    /// values.
    #[error(
        "the OpenCode session export is nested deeper than {} or holds more than {} values",
        super::MAX_JSON_DEPTH,
        super::MAX_JSON_DOCUMENT_VALUES
    )]
    DocumentOverBudget,
    /// The OpenCode export is not a JSON object.
    #[error("the OpenCode session export is not a JSON object: {0}")]
    NotJson(String),
    /// The OpenCode export has no `messages` array.
    #[error("the OpenCode session export has no messages array")]
    NoMessages,
    /// The Muse session log has no parseable record.
    #[error("the Muse session log has no parseable record")]
    EmptyLog,
    /// A session log holds no user message, so no record is known to be the run's.
    #[error("{what} holds no user message")]
    NoUserMessage {
        /// Which record (`the pi session log`).
        what: &'static str,
    },
    /// The record belongs to another session than the one asked for.
    #[error("{what} belongs to another session ({found})")]
    OtherSession {
        /// Which record (`the Gemini session log`).
        what: &'static str,
        /// The session id it names (at most 256 characters).
        found: String,
    },
    /// A line of a JSON-lines record is not JSON.
    #[error("line {line} of {what} is not a JSON object")]
    MalformedLine {
        /// Which record (`the Muse session log`).
        what: &'static str,
        /// The 1-based line number.
        line: usize,
    },
}

/// The JSON objects of a JSON-lines record, blank lines skipped; a line that is not an
/// object is an error naming it.
fn object_lines<'a>(
    bytes: &'a [u8],
    what: &'static str,
) -> impl Iterator<Item = Result<(usize, Value), RetainedError>> + 'a {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter_map(move |(n, line)| match json::parse(line) {
            json::Line::Blank => None,
            json::Line::Object(v) => Some(Ok((n + 1, v))),
            json::Line::Malformed => Some(Err(RetainedError::MalformedLine { what, line: n + 1 })),
            json::Line::OverBudget => {
                Some(Err(RetainedError::LineOverBudget { what, line: n + 1 }))
            }
        })
}

/// Parses a Muse session log (JSON lines), keeping the records of session `session_id` (all
/// records when `None`).
pub fn parse_muse_session_log(
    session_id: Option<&str>,
    bytes: &[u8],
) -> Result<RetainedRecord, RetainedError> {
    const WHAT: &str = "the Muse session log";
    let mut record = RetainedRecord {
        session_id: session_id.map(str::to_owned),
        ..RetainedRecord::default()
    };
    let mut models = ModelList::default();
    // Each record is applied as it is read (in log order), so only one line's value is held
    // at a time, never the whole log's.
    let mut any = false;
    for line in object_lines(bytes, WHAT) {
        let (n, v) = line?;
        match v.get("children").and_then(Value::as_array) {
            Some(children) if v.get("retained_frame").is_some() => {
                for child in children {
                    let record_value = json::str(child, "record_json")
                        .and_then(|text| match json::parse(text.as_bytes()) {
                            json::Line::Object(v) => Some(v),
                            _ => None,
                        })
                        .ok_or(RetainedError::MalformedLine {
                            what: WHAT,
                            line: n,
                        })?;
                    any = true;
                    apply_muse_record(session_id, &record_value, &mut record, &mut models);
                }
            }
            _ => {
                any = true;
                apply_muse_record(session_id, &v, &mut record, &mut models);
            }
        }
    }
    if !any {
        return Err(RetainedError::EmptyLog);
    }
    record.set_models(models);
    Ok(record)
}

/// Applies one Muse log record to the record being built.
fn apply_muse_record(
    session_id: Option<&str>,
    v: &Value,
    record: &mut RetainedRecord,
    models: &mut ModelList,
) {
    let stream_id = v.get("stream").and_then(|s| json::str(s, "id"));
    if session_id.is_some() && stream_id != session_id {
        return;
    }
    let Some(payload) = v
        .get("payload")
        .filter(|p| json::str(p, "kind") == Some("run"))
    else {
        return;
    };
    let event = payload.get("event").unwrap_or(&Value::Null);
    match json::str(event, "kind") {
        Some("assistant_message_committed") => {
            if let Some(text) = json::first_str(event, &["text", "content", "message"]) {
                record.final_message = Some(text.to_owned());
            }
        }
        Some("model_completed") => {
            if let Some(model) = json::str(event, "model") {
                models.add(model);
            }
            let usage = event
                .get("usage")
                .filter(|u| u.is_object())
                .unwrap_or(event);
            record.usage.get_or_insert_with(Usage::default).add_tokens(
                usage,
                [
                    "input_tokens",
                    "cached_tokens",
                    "output_tokens",
                    "reasoning_tokens",
                ],
            );
        }
        _ => {}
    }
}

/// Parses an OpenCode session export (one JSON document).
pub fn parse_opencode_export(bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
    if !json::within_values(bytes, json::MAX_JSON_DOCUMENT_VALUES) {
        return Err(RetainedError::DocumentOverBudget);
    }
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| RetainedError::NotJson(e.to_string()))?;
    if !doc.is_object() {
        return Err(RetainedError::NotJson("not an object".to_owned()));
    }
    let messages = doc
        .get("messages")
        .and_then(Value::as_array)
        .ok_or(RetainedError::NoMessages)?;
    let mut record = RetainedRecord {
        session_id: doc
            .get("info")
            .and_then(|i| json::nonempty(i, "id"))
            .map(str::to_owned),
        ..RetainedRecord::default()
    };
    let mut models = ModelList::default();
    // One `opencode run` adds one user message and the assistant's answers to it; a resumed
    // session's export holds the earlier runs too, which are not this run's.
    let role = |m: &Value| json::str(m.get("info").unwrap_or(m), "role").map(str::to_owned);
    let this_run = messages
        .iter()
        .rposition(|m| role(m).as_deref() == Some("user"))
        .map_or(0, |i| i + 1);
    for message in &messages[this_run..] {
        let info = message.get("info").unwrap_or(message);
        if json::str(info, "role") != Some("assistant") {
            continue;
        }
        if let Some(model) = json::nonempty(info, "modelID") {
            match json::nonempty(info, "providerID") {
                Some(provider) => models.add(&format!("{provider}/{model}")),
                None => models.add(model),
            };
        }
        if let Some(t) = info.get("tokens") {
            super::opencode::add_tokens(record.usage.get_or_insert_with(Usage::default), t);
        }
        if let Some(c) = json::f64(info, "cost") {
            record.usage.get_or_insert_with(Usage::default).add_cost(c);
        }
        // The last assistant message decides the answer and the failure.
        record.final_message = json::array(message, "parts")
            .iter()
            .filter(|p| json::str(p, "type") == Some("text"))
            .filter_map(|p| json::str(p, "text"))
            .next_back()
            .map(str::to_owned);
        let error = info.get("error").filter(|e| !e.is_null());
        record.failure = error.map(|e| super::opencode::error_text(e).1);
        record.failure_kind = error.and_then(super::opencode::error_kind);
    }
    record.set_models(models);
    Ok(record)
}

/// Parses the lines Codex appended to its session file during a run: the models of its
/// `turn_context` records, and the session id of a `session_meta` record.
pub fn parse_codex_session(bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
    let mut record = RetainedRecord::default();
    let mut models = ModelList::default();
    for line in object_lines(bytes, "the Codex session file") {
        let (_, v) = line?;
        let payload = v.get("payload").unwrap_or(&Value::Null);
        match json::str(&v, "type") {
            Some("turn_context") => {
                if let Some(model) = json::str(payload, "model") {
                    models.add(model);
                }
            }
            Some("session_meta") if record.session_id.is_none() => {
                record.session_id = json::nonempty(payload, "id").map(str::to_owned);
            }
            _ => {}
        }
    }
    record.set_models(models);
    Ok(record)
}

/// The thread's running token total recorded in a Codex session file: the last
/// `token_count` event's `info.total_token_usage`. `None` when there is none (or a line is
/// not JSON: a baseline must not be guessed).
pub fn codex_token_total(bytes: &[u8]) -> Option<Usage> {
    let mut total = None;
    for line in object_lines(bytes, "the Codex session file") {
        let (_, v) = line.ok()?;
        let payload = v.get("payload").unwrap_or(&Value::Null);
        if json::str(&v, "type") == Some("event_msg")
            && json::str(payload, "type") == Some("token_count")
            && let Some(t) = payload.get("info").and_then(|i| i.get("total_token_usage"))
        {
            let mut usage = Usage::default();
            usage.add_tokens(t, super::codex::TOKEN_KEYS);
            total = Some(usage);
        }
    }
    total
}

/// The records of a JSON-lines session log after its last record that `is_user` accepts (a
/// resumed session's log holds the earlier runs too, and each run starts with its prompt).
fn run_records(
    bytes: &[u8],
    what: &'static str,
    is_user: impl Fn(&Value) -> bool,
) -> Result<Vec<Value>, RetainedError> {
    let mut run: Option<Vec<Value>> = None;
    for line in object_lines(bytes, what) {
        let (_, v) = line?;
        if is_user(&v) {
            // Only the current run's records are held, never the whole log's.
            run = Some(Vec::new());
        } else if let Some(run) = &mut run {
            run.push(v);
        }
    }
    run.ok_or(RetainedError::NoUserMessage { what })
}

/// Parses a Qwen Code session log: the run's served models, usage and final message.
pub fn parse_qwen_session_log(bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
    const WHAT: &str = "the Qwen Code session log";
    let mut record = RetainedRecord::default();
    let mut models = ModelList::default();
    let records = run_records(bytes, WHAT, |v| json::str(v, "type") == Some("user"))?;
    for v in &records {
        if record.session_id.is_none() {
            record.session_id = json::nonempty(v, "sessionId").map(str::to_owned);
        }
        match json::str(v, "type") {
            Some("system") if json::str(v, "subtype") == Some("ui_telemetry") => {
                let Some(event) = v.get("systemPayload").and_then(|p| p.get("uiEvent")) else {
                    continue;
                };
                if json::str(event, "event.name") != Some("qwen-code.api_response") {
                    continue;
                }
                if let Some(model) = json::str(event, "model") {
                    models.add(model);
                }
                record.usage.get_or_insert_with(Usage::default).add_tokens(
                    event,
                    [
                        "input_token_count",
                        "cached_content_token_count",
                        "output_token_count",
                        "thoughts_token_count",
                    ],
                );
            }
            Some("assistant") => {
                let parts = v
                    .get("message")
                    .map(|m| json::array(m, "parts"))
                    .unwrap_or_default();
                let texts: Vec<&str> = parts
                    .iter()
                    .filter(|p| json::bool(p, "thought") != Some(true))
                    .filter_map(|p| json::str(p, "text"))
                    .filter(|t| !t.is_empty())
                    .collect();
                if !texts.is_empty() {
                    record.final_message = Some(texts.concat());
                }
            }
            _ => {}
        }
    }
    record.set_models(models);
    Ok(record)
}

/// Parses a pi session log: the run's served models, usage, final message and failure.
pub fn parse_pi_session_log(bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
    const WHAT: &str = "the pi session log";
    let message = |v: &Value| -> Option<Value> {
        (json::str(v, "type") == Some("message"))
            .then(|| v.get("message").cloned())
            .flatten()
    };
    let mut record = RetainedRecord::default();
    let mut models = ModelList::default();
    let mut session_id = None;
    let records = run_records(bytes, WHAT, |v| {
        if json::str(v, "type") == Some("session") {
            return false;
        }
        v.get("message")
            .is_some_and(|m| json::str(m, "role") == Some("user"))
            && json::str(v, "type") == Some("message")
    })?;
    // The session record is the log's first line, before any user message.
    for line in object_lines(bytes, WHAT) {
        let (_, v) = line?;
        if json::str(&v, "type") == Some("session") {
            session_id = json::nonempty(&v, "id").map(str::to_owned);
            break;
        }
    }
    record.session_id = session_id;
    for v in &records {
        let Some(m) = message(v).as_ref().and_then(super::pi::assistant_message) else {
            continue;
        };
        if let Some(model) = &m.served_model {
            models.add(model);
        }
        if let Some(u) = &m.usage {
            record
                .usage
                .get_or_insert_with(Usage::default)
                .accumulate(u);
        }
        // The last assistant message decides the answer and the failure.
        record.failure = m.failure;
        if m.text.is_some() {
            record.final_message = m.text;
        }
    }
    record.set_models(models);
    Ok(record)
}
