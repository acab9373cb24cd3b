//! The Streamable HTTP transport: rmcp's session-keeping service behind an HTTP/1.1 server
//! (hyper), at one endpoint, `/mcp`.
//!
//! What this module adds to rmcp's service is the policy of `agentrun mcp --http`:
//!
//! - **DNS-rebinding protection on loopback.** A server bound to a loopback address accepts
//!   only the loopback names with the bound port in `Host` (`127.0.0.1:P`, `localhost:P`,
//!   `[::1]:P`) and, when a browser sends one, the same names as `Origin` (http or https);
//!   anything else gets `403`. A web page that rebinds its own name to 127.0.0.1 sends its own
//!   name in both headers, so it never reaches a tool.
//! - **A bearer token off loopback.** A non-loopback bind is refused without a token; with
//!   one, every request must carry `Authorization: Bearer TOKEN` (compared in constant time,
//!   as SHA-256 digests, so neither its bytes nor its length leak through timing) or gets
//!   `401`. The token is the protection there, so `Host` and `Origin` are not restricted to
//!   loopback names.
//! - **One endpoint.** Any other path is `404`.
//! - **Tasks.** Each session is served through a `TaskLayer` of its own (tasks of protocol
//!   revision 2025-11-25, see `task_layer`); a JSON `POST` body is read here, before rmcp
//!   parses it, so that a `tools/call`'s `task` param (which rmcp's typed params drop) goes
//!   with the request.
//!
//! Sessions (`Mcp-Session-Id`), SSE streams with event ids that a client resumes with
//! `Last-Event-ID`, `DELETE` to end a session and the per-request cancellation are rmcp's.
//! Stopping the server stops the calls still running (their process groups, as a cancel
//! does), waits for their answers, then ends the sessions and closes the connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

use crate::task_layer::{TaskLayer, task_param};
use crate::{McpServer, handler};

/// The path of the MCP endpoint.
pub const HTTP_ENDPOINT: &str = "/mcp";

/// How long, after the calls ended, open connections get to finish before they are dropped.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Why the HTTP server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// A non-loopback address was given without a bearer token.
    #[error(
        "{0} is not a loopback address: serving MCP there needs a bearer token \
         (--token-file FILE), or bind to 127.0.0.1"
    )]
    TokenRequired(SocketAddr),
    /// The bearer token is empty or not a valid HTTP header value.
    #[error(
        "the bearer token must be non-empty printable ASCII without spaces (it is sent in an \
         Authorization header)"
    )]
    BadToken,
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Accepting connections failed.
    #[error("accepting a connection failed: {0}")]
    Accept(#[source] std::io::Error),
}

/// An MCP server bound to a TCP address, ready to serve Streamable HTTP at `/mcp`; see
/// [`McpServer::bind_http`].
#[derive(Debug)]
pub struct HttpServer {
    server: McpServer,
    listener: TcpListener,
    addr: SocketAddr,
    token: Option<Arc<[u8; 32]>>,
}

impl McpServer {
    /// Binds `addr` for the Streamable HTTP transport. A loopback address needs no token
    /// (and then accepts only loopback `Host` and `Origin` names with the bound port); any
    /// other address needs `token`, which every request must then present as
    /// `Authorization: Bearer TOKEN`. Port 0 picks a free port: see
    /// [`HttpServer::local_addr`].
    pub async fn bind_http(
        self,
        addr: SocketAddr,
        token: Option<String>,
    ) -> Result<HttpServer, HttpError> {
        if let Some(token) = &token
            && (token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(HttpError::BadToken);
        }
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(HttpError::TokenRequired(addr));
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(HttpServer {
            server: self,
            listener,
            addr,
            token: token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into())),
        })
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(text.into()).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Whether the request presents the token: compared as digests, every byte, so the time
/// taken says nothing about how much of it matched.
fn authorized(request: &Request<Incoming>, token: &[u8; 32]) -> bool {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    let presented = match value.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &value[7..],
        _ => return false,
    };
    let presented: [u8; 32] = Sha256::digest(presented).into();
    presented
        .iter()
        .zip(token)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

impl HttpServer {
    /// The address the server listens on (with the port picked when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint's URL, `http://ADDR:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{HTTP_ENDPOINT}", self.addr)
    }

    fn config(&self) -> StreamableHttpServerConfig {
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(self.server.inner.max_request_bytes);
        if !self.addr.ip().is_loopback() {
            return config.disable_allowed_hosts().disable_allowed_origins();
        }
        let port = self.addr.port();
        let names = ["127.0.0.1", "localhost", "[::1]"];
        config
            .with_allowed_hosts(names.map(|name| format!("{name}:{port}")))
            .with_allowed_origins(
                ["http", "https"]
                    .into_iter()
                    .flat_map(|scheme| names.map(|name| format!("{scheme}://{name}:{port}"))),
            )
            .enforce_origin_validation()
    }

    /// Serves clients until `stop` resolves; then stops the process groups of calls still
    /// running, waits (at most 30 seconds) for their answers, ends the sessions and closes
    /// the connections (giving them 5 more seconds to finish).
    pub async fn serve(self, stop: impl Future<Output = ()>) -> Result<(), HttpError> {
        let config = self.config();
        let sessions = config.cancellation_token.clone();
        let server = self.server.clone();
        let service = Arc::new(StreamableHttpService::new(
            move || Ok(server.for_new_session()),
            Arc::new(TaskSessions(LocalSessionManager::default())),
            config,
        ));
        let token = self.token.clone();
        let max_body = self.server.inner.max_request_bytes;
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut stop = std::pin::pin!(stop);
        let ended = loop {
            let (stream, _) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    // A connection that failed before it was accepted (reset, out of file
                    // descriptors for a moment) does not end the server.
                    Err(e) if is_transient(&e) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    Err(e) => break Err(HttpError::Accept(e)),
                },
                () = stop.as_mut() => break Ok(()),
            };
            let service = service.clone();
            let token = token.clone();
            let handle = hyper::service::service_fn(move |request: Request<Incoming>| {
                let service = service.clone();
                let token = token.clone();
                async move {
                    if request.uri().path() != HTTP_ENDPOINT {
                        return Ok::<_, Infallible>(plain(
                            StatusCode::NOT_FOUND,
                            "Not Found: the MCP endpoint is /mcp",
                        ));
                    }
                    if let Some(token) = &token
                        && !authorized(&request, token)
                    {
                        let mut response = plain(
                            StatusCode::UNAUTHORIZED,
                            "Unauthorized: send Authorization: Bearer TOKEN",
                        );
                        response.headers_mut().insert(
                            header::WWW_AUTHENTICATE,
                            header::HeaderValue::from_static("Bearer"),
                        );
                        return Ok(response);
                    }
                    let is_json = request
                        .headers()
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim_start().get(..16))
                        .is_some_and(|v| v.eq_ignore_ascii_case("application/json"));
                    if request.method() != hyper::Method::POST || !is_json {
                        return Ok(service.handle(request).await);
                    }
                    // rmcp reads the whole body anyway; read here, its `tools/call` params'
                    // `task` (which rmcp's typed params drop) is kept with the request.
                    let (mut parts, body) = request.into_parts();
                    let body = match read_body(body, max_body).await {
                        Ok(body) => body,
                        Err(response) => return Ok(response),
                    };
                    if let Some(param) = task_param(&body) {
                        parts.extensions.insert(param);
                    }
                    Ok(service
                        .handle(Request::from_parts(parts, Full::new(body)))
                        .await)
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), handle);
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                // A client that hung up mid-request is its own business.
                let _ = connection.await;
            });
        };
        // Stop what is still running, let its answers go out, then end the sessions.
        let inner = self.server.inner.clone();
        inner.shutdown.send_replace(true);
        handler::wait_for_calls(&inner).await;
        sessions.cancel();
        let _ = tokio::time::timeout(CLOSE_WAIT, graceful.shutdown()).await;
        ended
    }
}

/// Accept errors that concern one connection, not the listener.
fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e.raw_os_error().is_some_and(|code| {
        // EMFILE, ENFILE: the server goes on once descriptors are free again.
        code == 24 || code == 23
    })
}

/// A request body, read whole up to `max` bytes (as rmcp reads it: a larger one is `413`).
async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, Response<Body>> {
    let mut collected = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Failed to read request body: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if data.len() > max.saturating_sub(collected.len()) {
                return Err(plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("Payload Too Large: request body exceeds {max} bytes"),
                ));
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(collected))
}

/// rmcp's sessions, each served through a [`TaskLayer`] of its own: a session's tasks are
/// its own, and no other session can see or cancel them.
struct TaskSessions(LocalSessionManager);

impl SessionManager for TaskSessions {
    type Error = LocalSessionManagerError;
    type Transport = TaskLayer;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.0.create_session().await?;
        Ok((id, TaskLayer::new(transport)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.0.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.0.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.0.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<
        impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.0.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<
        impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.0.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<
        impl futures_core::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.0.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.0.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => {
                RestoreOutcome::Restored(TaskLayer::new(transport))
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.0.event_store()
    }
}
