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

/// Resolves when the call is cancelled by the client or the connection ends.
pub(crate) fn stop_future(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
) -> impl Future<Output = ()> + Send + 'static {
    let mut shutdown = inner.shutdown.subscribe();
    let cancelled = context.ct.clone();
    async move {
        tokio::select! {
            () = cancelled.cancelled() => {}
            _ = shutdown.wait_for(|gone| *gone) => {}
        }
    }
}
