//! Pure parsers for the retained records that are authoritative for models and usage: the
//! Muse session log and the OpenCode session export. Reading them is the driver's job; it
//! hands the bytes to [`RetainedKind::parse`] and the record to
//! [`Finished::complete`](super::Finished::complete).
//!
//! Formats (SPEC §12; where the public documentation is silent, this is the reading
//! agentrun implements, documented in `docs/interpretation.md`):
//!
//! * **Muse session log**: JSON lines with the stream envelope
//!   `{stream{kind,id}, payload_type, payload}`. A payload's string `model` (or a
//!   `payload.task.model` on `task.lifecycle.*`) names a model that answered; records with
//!   `payload_type == "model.usage"` also carry `input_tokens`, `output_tokens`,
//!   `cached_input_tokens`, `reasoning_tokens` and `cost_usd`, which are summed. Malformed
//!   lines are skipped; a log with no parseable line at all is an error.
//! * **OpenCode session export** (`opencode session export ID`): one JSON document
//!   `{info{id,…}, messages[{info{role, providerID, modelID, tokens{input, output,
//!   reasoning, cache{read,write}}, cost}, parts[…]}]}`. Each assistant message names the model
//!   `providerID/modelID` (or `modelID` alone); tokens and cost are summed.
//!
//! Model lists are ordered by first appearance, deduplicated, and exclude empty names and
//! `<synthetic>`, exactly like live evidence.

use serde_json::Value;

use super::Usage;
use super::json;

/// Which retained record a harness has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetainedKind {
    /// Muse's session log.
    MuseSessionLog,
    /// OpenCode's `opencode session export ID` document.
    OpenCodeExport,
}

impl RetainedKind {
    /// Parses the record's bytes.
    pub fn parse(self, bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
        match self {
            RetainedKind::MuseSessionLog => parse_muse_session_log(bytes),
            RetainedKind::OpenCodeExport => parse_opencode_export(bytes),
        }
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
pub struct RetainedRecord {
    /// The session id the record names, if any.
    pub session_id: Option<String>,
    /// Models, ordered by first appearance, deduplicated (may be empty: still authoritative).
    pub models: Vec<String>,
    /// Summed usage, when the record carries any.
    pub usage: Option<Usage>,
}

impl RetainedRecord {
    fn add_model(&mut self, name: &str) {
        if super::interpretation::is_reportable_model(name)
            && !self.models.iter().any(|m| m == name)
        {
            self.models.push(name.to_owned());
        }
    }
}

/// Why a retained record could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetainedError {
    /// The OpenCode export is not a JSON object.
    #[error("the OpenCode session export is not a JSON object: {0}")]
    NotJson(String),
    /// The OpenCode export has no `messages` array.
    #[error("the OpenCode session export has no messages array")]
    NoMessages,
    /// The Muse session log has no parseable record.
    #[error("the Muse session log has no parseable record")]
    EmptyLog,
}

/// Parses a Muse session log (JSON lines).
pub fn parse_muse_session_log(bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
    let mut record = RetainedRecord::default();
    let mut parsed_any = false;
    for line in bytes.split(|&b| b == b'\n') {
        let json::Line::Object(v) = json::parse(line) else {
            continue;
        };
        parsed_any = true;
        if record.session_id.is_none() {
            record.session_id = v
                .get("stream")
                .filter(|s| json::str(s, "kind") == Some("session"))
                .and_then(|s| json::nonempty(s, "id"))
                .map(str::to_owned);
        }
        let Some(payload) = v.get("payload") else {
            continue;
        };
        let kind = json::str(&v, "payload_type").unwrap_or("");
        if let Some(model) = json::str(payload, "model") {
            record.add_model(model);
        } else if kind.starts_with("task.lifecycle.")
            && let Some(model) = payload.get("task").and_then(|t| json::str(t, "model"))
        {
            record.add_model(model);
        }
        if kind == "model.usage" {
            let usage = record.usage.get_or_insert_with(Usage::default);
            usage.add_tokens(
                payload,
                [
                    "input_tokens",
                    "cached_input_tokens",
                    "output_tokens",
                    "reasoning_tokens",
                ],
            );
            if let Some(c) = json::f64(payload, "cost_usd") {
                usage.add_cost(c);
            }
        }
    }
    if parsed_any {
        Ok(record)
    } else {
        Err(RetainedError::EmptyLog)
    }
}

/// Parses an OpenCode session export (one JSON document).
pub fn parse_opencode_export(bytes: &[u8]) -> Result<RetainedRecord, RetainedError> {
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
    for message in messages {
        let info = message.get("info").unwrap_or(message);
        if json::str(info, "role") != Some("assistant") {
            continue;
        }
        if let Some(model) = json::nonempty(info, "modelID") {
            match json::nonempty(info, "providerID") {
                Some(provider) => record.add_model(&format!("{provider}/{model}")),
                None => record.add_model(model),
            }
        }
        if let Some(t) = info.get("tokens") {
            let usage = record.usage.get_or_insert_with(Usage::default);
            usage.add_tokens(t, super::opencode::TOKEN_KEYS);
        }
        if let Some(c) = json::f64(info, "cost") {
            record.usage.get_or_insert_with(Usage::default).add_cost(c);
        }
    }
    Ok(record)
}
