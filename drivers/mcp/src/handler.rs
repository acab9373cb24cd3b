//! The MCP request handler: dispatches tool calls to `tools`, resource requests to
//! `resources`, and counts the calls in flight.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, ErrorData,
    Implementation, JsonObject, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    LoggingLevel, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};

use crate::catalog;
use crate::render;
use crate::tools;
use crate::{Inner, McpServer};

/// How long the server waits, after the client left, for stopped runs to be finalized.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

/// Counts a call in flight for as long as it lives.
struct CallGuard(Arc<Inner>);

impl CallGuard {
    fn new(inner: &Arc<Inner>) -> Self {
        inner.calls.send_modify(|n| *n += 1);
        Self(inner.clone())
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.calls.send_modify(|n| *n -= 1);
    }
}

/// Waits (bounded) until no call is in flight.
pub(crate) async fn wait_for_calls(inner: &Inner) {
    let mut calls = inner.calls.subscribe();
    let _ = tokio::time::timeout(SHUTDOWN_WAIT, calls.wait_for(|n| *n == 0)).await;
}

/// Tells every session that the list of resources changed; a session that is gone (the
/// notification cannot be sent) is forgotten.
async fn notify_list_changed(inner: &Inner) {
    let peers = inner
        .peers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut gone = Vec::new();
    for (i, peer) in peers.iter().enumerate() {
        if peer.notify_resource_list_changed().await.is_err() {
            gone.push(i);
        }
    }
    if !gone.is_empty() {
        let mut live = inner.peers.lock().unwrap_or_else(|e| e.into_inner());
        // Only the peers that were there when we looked: new ones were appended after them.
        let mut index = 0;
        live.retain(|_| {
            let keep = !gone.contains(&index);
            index += 1;
            keep
        });
    }
}

/// Blocking store work on tokio's blocking pool; a panic there is an internal error.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorData::internal_error(format!("a blocking task failed: {e}"), None))
}

impl McpServer {
    /// With `--structured-content` every tool declares an `outputSchema` (and every result
    /// carries matching structured content); without it none does, since clients reject a
    /// declared schema on a result without structured content.
    fn with_schema(&self, mut tool: Tool) -> Tool {
        tool.output_schema = self
            .inner
            .structured_content
            .then(|| tools::output_schema(&tool.name));
        tool
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_tools()
            .build();
        let mut info = ServerConfig::new(capabilities).with_instructions(
            "agentrun runs programs with their whole output retained and shows you a bounded \
             preview per stream. When a preview was cut, the result says `[Truncated. Read \
             more: read(filePath=\"artifact://...\", offset=N)]`: call this server's `read` \
             tool with that filePath and offset to continue, page by page, until the line \
             that says the artifact ended.",
        );
        info.server_info = Implementation::new("agentrun", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = vec![
            tools::run::run_tool(),
            tools::read::read_tool(),
            tools::agent::agent_tool(),
            tools::compact::compact_tool(),
            tools::fanout::fanout_tool(),
        ];
        Ok(ListToolsResult::with_all_items(
            tools.into_iter().map(|t| self.with_schema(t)).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let tool = match name {
            "run" => Some(tools::run::run_tool()),
            "read" => Some(tools::read::read_tool()),
            "agent" => Some(tools::agent::agent_tool()),
            "compact" => Some(tools::compact::compact_tool()),
            "fanout" => Some(tools::fanout::fanout_tool()),
            _ => None,
        };
        tool.map(|t| self.with_schema(t))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _call = CallGuard::new(&self.inner);
        let empty = JsonObject::new();
        let map = request.arguments.as_ref().unwrap_or(&empty);
        let name = request.name.clone();
        let peer = context.peer.clone();
        let result = match request.name.as_ref() {
            "run" => self.call_run(map, context).await?,
            "read" => self.call_read(map).await?,
            "agent" => self.call_agent(map, context).await?,
            "compact" => self.call_compact(map, context).await?,
            "fanout" => self.call_fanout(map, context).await?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool {:?}; this server's tools are: run, read, agent, compact, fanout",
                        render::clip(other, 200)
                    ),
                    None,
                ));
            }
        };
        let mut result = result;
        if self.inner.structured_content {
            tools::ensure_structured(&mut result);
        }
        if matches!(name.as_ref(), "run" | "agent" | "compact") {
            // The call made a run (or tried to): the store's list of runs changed.
            notify_list_changed(&self.inner).await;
        }
        if result.is_error == Some(true) {
            // The model reads the error text; whoever runs the client sees it in the log.
            let first = result
                .content
                .iter()
                .find_map(|c| {
                    c.as_text()
                        .map(|t| t.text.lines().next().unwrap_or("").to_owned())
                })
                .unwrap_or_default();
            self.log_level
                .log(
                    &peer,
                    LoggingLevel::Warning,
                    format!(
                        "tool {name} answered with an error: {}",
                        render::clip(&first, 1024)
                    ),
                )
                .await;
        }
        Ok(result.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let mut peers = self.inner.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.push(context.peer);
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        // The start-up warnings, which went to stderr before the client could be told.
        for (program, why) in self.unavailable_programs() {
            self.log_level
                .log(
                    &context.peer,
                    LoggingLevel::Warning,
                    format!("{program} is allowed but cannot run: {why}"),
                )
                .await;
        }
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        catalog::complete(&self.inner.store, request).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(Self::templates())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.list_store_resources(request.and_then(|r| r.cursor))
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let _call = CallGuard::new(&self.inner);
        self.read_resource_page(request).await
    }
}
