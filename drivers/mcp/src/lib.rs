//! agentrun-mcp: agentrun as a Model Context Protocol server.
//!
//! Any MCP client (Claude Code, Codex, OpenCode, …) gets three tools and the artifact store as
//! resources:
//!
//! - `run` runs a program (argv, never a shell) with its output retained in full, and answers
//!   with the bounded model-facing preview and exact `read(filePath="artifact://…",
//!   offset=N)` hints, the clean answer when the program wrote one, and the exit status;
//! - `read` pages an `artifact://` URI, a page exactly as stored plus continuation metadata;
//! - `artifact://{digest}` and `artifact://{digest}/{stream}` are resource templates whose
//!   `resources/read` returns the first page with the same metadata.
//!
//! Safety: `run` executes only programs the server was configured to allow; every call has a
//! timeout; a client's `notifications/cancelled` stops the call's process group; calls are
//! independent; a client that asks for progress gets `notifications/progress` while a
//! program runs. Bad arguments give error results that say what to fix.
//!
//! The server runs on tokio (the `agentrun-tokio` driver). Embedding it:
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = agentrun_fs::Store::open("/tmp/agentrun-store")?;
//! let server = agentrun_mcp::McpServer::builder(store)
//!     .allow("cargo")
//!     .allow("git")
//!     .build()?;
//! server.serve_stdio(std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`McpServer`] implements rmcp's `ServerHandler`, so it can also be served on any other
//! rmcp transport.

mod agent;
mod args;
mod handler;
mod render;
mod transport;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::PreviewLimits;
use agentrun_core::limits::LimitsError;
use agentrun_fs::Store;
use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};

pub use args::ArgError;
pub use transport::DEFAULT_MAX_REQUEST_BYTES;

/// The default timeout of a `run` call that names none: 10 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest timeout a call may ask for: 24 hours.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How many recent runs `resources/list` offers.
const RECENT_RUNS: usize = 64;

/// An MCP server over an artifact store. Cheap to clone: clones share the configuration and
/// the list of recent runs.
#[derive(Debug, Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    limits: PreviewLimits,
    allow: Allow,
    default_timeout: Duration,
    max_request_bytes: usize,
    structured_content: bool,
    /// Output URIs of the latest runs, newest last, for `resources/list`.
    recent: Mutex<Vec<handler::RecentRun>>,
    /// Told when the connection ends, so running calls stop their processes.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// Calls in flight, so that serving ends only after their processes were reaped.
    calls: tokio::sync::watch::Sender<usize>,
}

/// Which programs `run` may execute.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allow {
    /// Exactly these `command[0]` strings.
    Programs(BTreeSet<String>),
    /// Any program.
    All,
}

/// Why a server configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The preview limits are invalid.
    #[error("invalid preview limits: {0}")]
    Limits(#[from] LimitsError),
    /// An allowed program name is empty or contains a NUL byte.
    #[error("--allow {0:?}: a program name must be non-empty and contain no NUL byte")]
    Program(String),
    /// The default timeout is zero or above [`MAX_TIMEOUT`].
    #[error("the default timeout must be between 1 second and 24 hours, not {0:?}")]
    Timeout(Duration),
    /// The request bound is below 64 KiB.
    #[error("the request bound must be at least 65536 bytes, not {0}")]
    RequestBound(usize),
}

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The MCP session could not start (the client closed the connection or sent no valid
    /// `initialize`).
    #[error("the MCP session did not start: {0}")]
    Start(String),
    /// The session's task failed.
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// Builds an [`McpServer`]; see [`McpServer::builder`].
#[derive(Debug)]
#[must_use]
pub struct McpServerBuilder {
    store: Store,
    limits: PreviewLimits,
    allow: Allow,
    default_timeout: Duration,
    max_request_bytes: usize,
    structured_content: bool,
}

impl McpServerBuilder {
    /// Preview limits of `run` results (default: 2000 lines and 51 200 bytes per stream, 1 MiB
    /// in all).
    pub fn limits(mut self, limits: PreviewLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Lets `run` execute `program`: a `command[0]` equal to this string. A bare name is looked
    /// up in `PATH`; allowing `cargo` does not allow `/tmp/cargo` or `./cargo`.
    pub fn allow(mut self, program: impl Into<String>) -> Self {
        if let Allow::Programs(set) = &mut self.allow {
            set.insert(program.into());
        }
        self
    }

    /// Lets `run` execute any program. The client (and the model behind it) can then do
    /// anything the server's user can.
    pub fn allow_all(mut self) -> Self {
        self.allow = Allow::All;
        self
    }

    /// Timeout of `run` calls that name none (default [`DEFAULT_TIMEOUT`]).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// Bound on one incoming JSON-RPC message for [`McpServer::serve`] (default
    /// [`DEFAULT_MAX_REQUEST_BYTES`]).
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Also return each result's JSON as `structuredContent` (default off): the `run` result
    /// record, a page's metadata. Off by default because some clients (Claude Code among
    /// them) then give the model the JSON *instead of* the text content, so the model would
    /// lose the read hints and the page text. Turn it on for programmatic clients.
    pub fn structured_content(mut self, on: bool) -> Self {
        self.structured_content = on;
        self
    }

    /// Checks the configuration.
    pub fn build(self) -> Result<McpServer, ConfigError> {
        self.limits.validate()?;
        if let Allow::Programs(set) = &self.allow
            && let Some(bad) = set.iter().find(|p| p.is_empty() || p.contains('\0'))
        {
            return Err(ConfigError::Program(bad.clone()));
        }
        if self.default_timeout.is_zero() || self.default_timeout > MAX_TIMEOUT {
            return Err(ConfigError::Timeout(self.default_timeout));
        }
        if self.max_request_bytes < 64 * 1024 {
            return Err(ConfigError::RequestBound(self.max_request_bytes));
        }
        Ok(McpServer {
            inner: Arc::new(Inner {
                store: self.store,
                limits: self.limits,
                allow: self.allow,
                default_timeout: self.default_timeout,
                max_request_bytes: self.max_request_bytes,
                structured_content: self.structured_content,
                recent: Mutex::new(Vec::new()),
                shutdown: tokio::sync::watch::Sender::new(false),
                calls: tokio::sync::watch::Sender::new(0),
            }),
        })
    }
}

impl McpServer {
    /// A builder for a server over `store` that allows no program yet.
    pub fn builder(store: Store) -> McpServerBuilder {
        McpServerBuilder {
            store,
            limits: PreviewLimits::default(),
            allow: Allow::Programs(BTreeSet::new()),
            default_timeout: DEFAULT_TIMEOUT,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            structured_content: false,
        }
    }

    /// The store the server runs and reads in.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Serves one client on standard input and output until it disconnects or `stop`
    /// resolves (e.g. on SIGTERM; pass `std::future::pending()` for no such stop). Nothing but
    /// protocol messages is written to stdout; programs run by `run` never inherit it.
    pub async fn serve_stdio(self, stop: impl Future<Output = ()>) -> Result<(), ServeError> {
        self.serve(tokio::io::stdin(), tokio::io::stdout(), stop)
            .await
    }

    /// Serves one client on `read`/`write` (newline-delimited JSON-RPC) until it disconnects
    /// or `stop` resolves; then stops the process groups of calls still running and waits
    /// (at most 30 seconds) for them to be reaped and their output finalized.
    pub async fn serve<R, W>(
        self,
        read: R,
        write: W,
        stop: impl Future<Output = ()>,
    ) -> Result<(), ServeError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let inner = self.inner.clone();
        // The client hung up: stop the calls still running now, as a cancel does, while rmcp
        // drains their answers (it waits 5 s for them before it gives up and cancels them).
        let ended = inner.clone();
        let transport =
            transport::LineTransport::new(BufReader::new(read), write, inner.max_request_bytes)
                .on_end(move || {
                    ended.shutdown.send_replace(true);
                });
        let mut stop = std::pin::pin!(stop);
        let running = tokio::select! {
            running = ServiceExt::serve(self, transport) => {
                running.map_err(|e| ServeError::Start(e.to_string()))?
            }
            () = stop.as_mut() => return Ok(()),
        };
        let quit = tokio::select! {
            quit = running.waiting() => quit.map(drop).map_err(|e| ServeError::Session(e.to_string())),
            () = stop => Ok(()),
        };
        // The client is gone (or the server is told to stop): stop what is still running and
        // let it be finalized.
        inner.shutdown.send_replace(true);
        handler::wait_for_calls(&inner).await;
        quit
    }
}
