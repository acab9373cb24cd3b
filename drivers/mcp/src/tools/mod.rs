//! The tools: one module each, and what they share (error results, retained answers, stops).

pub(crate) mod agent;
pub(crate) mod compact;
pub(crate) mod fanout;
pub(crate) mod read;
pub(crate) mod run;

use std::sync::Arc;

use agentrun_core::capture::FullOutput;
use agentrun_core::{CaptureCompletion, CaptureStatus, OutputDeclaration};
use agentrun_tokio::SpawnFailure;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject};
use rmcp::service::RequestContext;
use serde_json::Value;

use crate::Inner;
use crate::args::ArgError;
use crate::handler::blocking;
use crate::render::{self, Answer};

pub(crate) fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are JSON objects"),
    }
}

/// An error result the model reads (not a protocol error: clients show those opaquely).
pub(crate) fn tool_error(message: impl Into<String>) -> CallToolResult {
    // Errors echo what the client sent (a program name, a path): bounded whatever it was.
    let message = render::clip(&message.into(), render::MAX_ERROR_BYTES);
    CallToolResult::error(vec![ContentBlock::text(message)])
}

impl From<ArgError> for CallToolResult {
    fn from(e: ArgError) -> Self {
        tool_error(e.0)
    }
}

/// Why a program did not start, with the exit code a shell gives that (the library's exit
/// policy: 127 no such program, 126 cannot be executed).
pub(crate) fn not_started(error: &dyn std::error::Error, spawn: SpawnFailure) -> String {
    // The code first: the error echoes the program's name, and a long one is cut.
    format!(
        "[Not started: exit code {}, as a shell gives it] {error}",
        spawn.exit_code()
    )
}

/// A text for the model (a clean answer, a final message): shown in full when it is within
/// the preview bound and the `room` its result has left, else kept as its own artifact so
/// that the model sees a bounded preview (or only a read hint) for the rest.
pub(crate) async fn retain_text(
    inner: &Inner,
    text: String,
    room: usize,
) -> Result<Answer, ErrorData> {
    if render::fits_inline(text.len(), room, inner.limits.max_bytes) {
        return Ok(Answer::Inline(text));
    }
    let (store, limits) = (inner.store.clone(), inner.limits);
    blocking(move || {
        let retained = store
            .begin_capture(OutputDeclaration::Single, limits)
            .and_then(|session| {
                session.finish(CaptureCompletion::Full {
                    display: None,
                    status: CaptureStatus::Succeeded,
                    outputs: FullOutput::Single(text.into_bytes()),
                })
            });
        match retained {
            Ok(record) => Answer::Retained(Box::new(record)),
            Err(e) => Answer::Missing(format!(
                "it is over the preview bound and retaining it failed: {e}"
            )),
        }
    })
    .await
}

/// Resolves when the call is cancelled by the client (`notifications/cancelled`, or
/// `tasks/cancel` for a call run as a task) or the connection ends.
pub(crate) fn stop_future(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
) -> impl Future<Output = ()> + Send + 'static {
    let mut shutdown = inner.shutdown.subscribe();
    let cancelled = context.ct.clone();
    let task = context
        .extensions
        .get::<crate::task_layer::TaskStop>()
        .map(|stop| stop.0.clone());
    async move {
        let task_cancelled = async move {
            match task {
                Some(mut stop) => {
                    // The layer went with its connection: stop as well.
                    let _ = stop.wait_for(|stop| *stop).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancelled.cancelled() => {}
            _ = shutdown.wait_for(|gone| *gone) => {}
            () = task_cancelled => {}
        }
    }
}

/// A `resource_link` for each artifact of a run's record: the manifest (for named output)
/// and each stream, with its name, media type and size, as many as fit `budget` bytes of
/// serialized content (a result stays within the payload bound). A client that follows
/// links reads them with `resources/read`; the text's read hints name the same URIs.
pub(crate) async fn record_links(
    inner: &Inner,
    record: &agentrun_core::ResultRecord,
    budget: usize,
) -> Vec<ContentBlock> {
    use agentrun_core::record::RecordOutput;
    use rmcp::model::Resource;
    let run = render::clip(&record.run_id, 128);
    let mut links = Vec::new();
    if let RecordOutput::Named { manifest, .. } = &record.output {
        // The manifest's size is its object's: one byte read says it.
        let (store, uri) = (
            inner.store.clone(),
            agentrun_core::ArtifactUri::new(*manifest),
        );
        let size = blocking(move || {
            let range = agentrun_core::page::ByteRange::new(0, 1).ok()?;
            store.read_bytes(&uri, range).ok().map(|p| p.total_bytes)
        })
        .await
        .ok()
        .flatten();
        let mut link = Resource::new(
            agentrun_core::ArtifactUri::new(*manifest).to_string(),
            format!("output manifest of run {run}"),
        )
        .with_mime_type("application/json");
        if let Some(size) = size {
            link = link.with_size(size);
        }
        links.push(link);
    }
    for stream in record.streams() {
        let name = stream.name.as_ref().map_or("output", |n| n.as_str());
        links.push(
            Resource::new(
                record.stream_uri(stream).to_string(),
                format!("{name} of run {run}"),
            )
            .with_mime_type("text/plain; charset=utf-8")
            .with_size(stream.bytes),
        );
    }
    let mut left = budget;
    let mut blocks = Vec::new();
    for link in links {
        let block = ContentBlock::resource_link(link);
        let size = serde_json::to_string(&block).map_or(usize::MAX, |s| s.len() + 1);
        if size > left {
            break;
        }
        left -= size;
        blocks.push(block);
    }
    blocks
}

/// The fields each tool's structured content documents (the JSON the text result is rendered
/// from); `error` is what an error result carries instead.
fn documented_fields(tool: &str) -> &'static [&'static str] {
    match tool {
        "run" => &[
            "run_id",
            "status",
            "reason",
            "outcome",
            "exit",
            "pid",
            "duration_ms",
            "artifacts",
            "model_text",
            "result",
            "result_artifact",
            "sink",
            "record",
        ],
        "read" => &[
            "offset",
            "lines",
            "bytes",
            "total_lines",
            "next_offset",
            "content_is_utf8",
            "byte_offset",
            "total_bytes",
            "next_byte_offset",
            "next",
        ],
        "agent" => &[
            "harness",
            "observed_models",
            "observed_models_omitted",
            "report",
            "outcome",
            "run_id",
            "status",
            "artifacts",
            "final_message_artifact",
        ],
        "compact" => &[
            "summary",
            "summary_artifact",
            "attempts",
            "retried",
            "retry_reason",
            "references",
            "omitted_artifact_reads",
            "retained",
        ],
        _ => &[],
    }
}

/// The `outputSchema` a tool declares with `--structured-content`: an object whose documented
/// fields may hold any JSON value (the payload bound may cut a string or set a long list to
/// `null`, see `render::bound_structured`), plus `strings_cut_at`, `omitted_fields` and
/// `error`. Permissive by design: a client validates every result against it, error results
/// included, and a schema a bounded result could violate would make a client reject it.
pub(crate) fn output_schema(tool: &str) -> Arc<JsonObject> {
    let mut properties = serde_json::Map::new();
    for field in documented_fields(tool) {
        properties.insert((*field).to_owned(), serde_json::json!({}));
    }
    properties.insert(
        "strings_cut_at".to_owned(),
        serde_json::json!({"type": "integer", "description": "Strings were cut to this many bytes to fit the payload bound."}),
    );
    properties.insert(
        "omitted_fields".to_owned(),
        serde_json::json!({"type": "array", "items": {"type": "string"}, "description": "JSON pointers of the fields set to null to fit the payload bound."}),
    );
    properties.insert(
        "error".to_owned(),
        serde_json::json!({"type": "string", "description": "Why the call failed (error results only)."}),
    );
    object(serde_json::json!({"type": "object", "properties": properties}))
}

/// With `--structured-content`, a result without structured content (an error result) gets
/// `{"error": TEXT}`, so that it matches the declared `outputSchema` as clients require.
pub(crate) fn ensure_structured(result: &mut CallToolResult) {
    if result.structured_content.is_some() {
        return;
    }
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    result.structured_content = Some(serde_json::json!({"error": text.join("\n")}));
}
