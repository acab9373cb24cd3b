//! What the server knows about the store as a whole: `completion/complete` for the resource
//! templates' `{digest}` and `{stream}` arguments (from the store's records), and the log
//! level a client set with `logging/setLevel`, with the diagnostics sent at it.

use std::sync::{Arc, Mutex};

use agentrun_core::Digest;
use agentrun_core::record::RecordOutput;
use agentrun_fs::Store;
use rmcp::RoleServer;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ErrorData, LoggingLevel,
    LoggingMessageNotificationParam, Reference,
};
use rmcp::service::Peer;
use serde_json::json;

use crate::handler::blocking;

/// How many of the newest records completion looks through: enough for any store a person
/// browses, bounded so that a completion never reads a whole large store.
const COMPLETION_RECORDS: usize = 2000;

/// The log level a session asked for (`None`: it asked for none, and is sent no log
/// messages). Shared by the clones that serve one session.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogLevel(Arc<Mutex<Option<LoggingLevel>>>);

/// A level's rank, lowest (`debug`) first, as RFC 5424's severities in reverse.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl LogLevel {
    pub(crate) fn set(&self, level: LoggingLevel) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(level);
    }

    /// Whether a message at `level` goes out.
    fn wants(&self, level: LoggingLevel) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|min| rank(level) >= rank(min))
    }

    /// Sends `message` as a `notifications/message` from logger `agentrun` when the session
    /// asked for that level or a lower one.
    pub(crate) async fn log(&self, peer: &Peer<RoleServer>, level: LoggingLevel, message: String) {
        if !self.wants(level) {
            return;
        }
        let mut param = LoggingMessageNotificationParam::new(level, json!(message));
        param.logger = Some("agentrun".to_owned());
        // A client that went away cannot be told.
        let _ = peer.notify_logging_message(param).await;
    }
}

/// The two resource templates' URIs, as `resources/templates/list` names them.
const DIGEST_TEMPLATE: &str = "artifact://{digest}";
const STREAM_TEMPLATE: &str = "artifact://{digest}/{stream}";

/// Answers `completion/complete`. For the artifact templates: `digest` completes to the
/// output digests of the store's newest records that start with the typed prefix (newest
/// first); `stream` to the streams of the manifest the `digest` argument (in the request's
/// context) names, or, without one, the stream names of the newest records. Any other
/// reference, a prompt included (this server has none), or argument gets no values: an
/// empty completion, not an error, as the protocol's conformance suite expects.
pub(crate) async fn complete(
    store: &Store,
    request: CompleteRequestParams,
) -> Result<CompleteResult, ErrorData> {
    let Reference::Resource(template) = &request.r#ref else {
        return Ok(CompleteResult::default());
    };
    let (uri, argument) = (template.uri.as_str(), request.argument.name.as_str());
    let prefix = request.argument.value.clone();
    let digest = request
        .context
        .as_ref()
        .and_then(|c| c.arguments.as_ref())
        .and_then(|args| args.get("digest"))
        .and_then(|d| Digest::from_hex(d).ok());
    let wanted = match (uri, argument) {
        (DIGEST_TEMPLATE | STREAM_TEMPLATE, "digest") => Wanted::Digest,
        (STREAM_TEMPLATE, "stream") => Wanted::Stream(digest),
        _ => return Ok(CompleteResult::default()),
    };
    let store = store.clone();
    let mut values = blocking(move || candidates(&store, &wanted)).await?;
    values.retain(|v| v.starts_with(&prefix));
    let total = values.len();
    values.truncate(CompletionInfo::MAX_VALUES);
    let mut info =
        CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    info.total = Some(u32::try_from(total).unwrap_or(u32::MAX));
    info.has_more = Some(total > CompletionInfo::MAX_VALUES);
    Ok(CompleteResult::new(info))
}

enum Wanted {
    Digest,
    Stream(Option<Digest>),
}

/// Every candidate value, newest first, without duplicates. Unreadable records are skipped:
/// a completion is a suggestion, not a listing.
fn candidates(store: &Store, wanted: &Wanted) -> Vec<String> {
    let mut values: Vec<String> = Vec::new();
    let mut push = |value: String| {
        if !values.contains(&value) {
            values.push(value);
        }
    };
    if let Wanted::Stream(Some(digest)) = wanted {
        if let Ok(Some(manifest)) = store.manifest(digest) {
            for entry in manifest.streams {
                push(entry.name.to_string());
            }
        }
        return values;
    }
    let ids = store.records().unwrap_or_default();
    for id in ids.iter().rev().take(COMPLETION_RECORDS) {
        let Ok(record) = store.record(id) else {
            continue;
        };
        match wanted {
            Wanted::Digest => push(record.output_uri().digest.to_hex()),
            Wanted::Stream(_) => {
                if let RecordOutput::Named { streams, .. } = &record.output {
                    for stream in streams {
                        if let Some(name) = &stream.name {
                            push(name.to_string());
                        }
                    }
                }
            }
        }
    }
    values
}
