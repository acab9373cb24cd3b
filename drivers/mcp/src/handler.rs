//! The MCP request handler: dispatches tool calls to `tools`, resource requests to
//! `resources`, and counts the calls in flight.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, JsonObject,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};

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

/// Blocking store work on tokio's blocking pool; a panic there is an internal error.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorData> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ErrorData::internal_error(format!("a blocking task failed: {e}"), None))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_instructions(
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
        Ok(ListToolsResult::with_all_items(vec![
            tools::run::run_tool(),
            tools::read::read_tool(),
            tools::agent::agent_tool(),
            tools::compact::compact_tool(),
            tools::fanout::fanout_tool(),
        ]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match name {
            "run" => Some(tools::run::run_tool()),
            "read" => Some(tools::read::read_tool()),
            "agent" => Some(tools::agent::agent_tool()),
            "compact" => Some(tools::compact::compact_tool()),
            "fanout" => Some(tools::fanout::fanout_tool()),
            _ => None,
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _call = CallGuard::new(&self.inner);
        let empty = JsonObject::new();
        let map = request.arguments.as_ref().unwrap_or(&empty);
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
        Ok(result.into())
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
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(self.recent_resources())
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
