//! agentrun-mcp: agentrun as a Model Context Protocol server.
//!
//! Any MCP client (Claude Code, Codex, OpenCode, …) gets four tools and the artifact store as
//! resources:
//!
//! - `run` runs a program (argv, never a shell) with its output retained in full, and answers
//!   with the bounded model-facing preview and exact `read(filePath="artifact://…",
//!   offset=N)` hints, the clean answer when the program wrote one, and the exit status;
//! - `read` pages an `artifact://` URI, a page exactly as stored plus continuation metadata;
//! - `agent` runs one turn of a coding agent CLI and answers with its final message;
//! - `compact` summarizes a transcript file with one pruned retry (the library's
//!   `Runner::compact`) and answers with the summary and read hints for what it retained;
//! - `artifact://{digest}` and `artifact://{digest}/{stream}` are resource templates whose
//!   `resources/read` returns the first page with the same metadata.
//!
//! `run`, `agent`, `compact` and `fanout` also run as tasks (MCP protocol revision
//! 2025-11-25): a `tools/call` with `task` is answered at once with a task id, which the client
//! polls with `tasks/get`, fetches with `tasks/result`, lists with `tasks/list` and stops with
//! `tasks/cancel`, on stdio and on each HTTP session alike.
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
//! rmcp transport; tasks are then not offered (they are served by this crate's transports:
//! [`McpServer::serve`], [`McpServer::serve_stdio`] and [`McpServer::bind_http`]).

mod args;
// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated by a protocol
// draft, but the released protocol versions clients speak have it: these two modules use it.
#[allow(deprecated)]
mod catalog;
#[allow(deprecated)]
mod handler;
mod http;
mod progress;
mod proxy;
mod render;
mod resources;
mod task_layer;
mod tasks;
mod tools;
mod transport;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrun_core::PreviewLimits;
use agentrun_core::limits::LimitsError;
use agentrun_fs::Store;
use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};

pub use args::ArgError;
pub use http::{HTTP_ENDPOINT, HttpError, HttpServer};
pub use proxy::{ProxyEnd, ProxyError};
pub use transport::DEFAULT_MAX_REQUEST_BYTES;

/// The default timeout of a `run` call that names none: 10 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest timeout a call may ask for: 24 hours.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// An MCP server over an artifact store. Cheap to clone: clones share the configuration and
/// the sessions told of new runs.
#[derive(Debug, Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
    /// The log level of the session this server serves (each HTTP session gets its own).
    log_level: catalog::LogLevel,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    limits: PreviewLimits,
    allow: Allow,
    /// The `PATH` programs run with when only some programs are allowed: the absolute
    /// entries of the server's `PATH`, so that neither an allowed program nor what it starts
    /// by name is looked up in a directory relative to the call's `cwd`. `None`: inherited.
    child_path: Option<OsString>,
    default_timeout: Duration,
    max_request_bytes: usize,
    structured_content: bool,
    /// The sessions that finished `initialize`, told `notifications/resources/list_changed`
    /// after each run (a closed one is dropped when telling it fails).
    peers: Mutex<Vec<rmcp::service::Peer<rmcp::RoleServer>>>,
    /// Told when the connection ends, so running calls stop their processes.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// Calls in flight, so that serving ends only after their processes were reaped.
    calls: tokio::sync::watch::Sender<usize>,
}

/// Which programs `run` may execute.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allow {
    /// Exactly these `command[0]` strings, each with the executable it was resolved to when
    /// the server was built (what runs), or why none was found (calls to it are refused with
    /// that explanation; the name is never looked up again).
    Programs(BTreeMap<String, Result<PathBuf, String>>),
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
    /// An allowed program is a relative path (`./tool`, `bin/tool`), which would be looked
    /// up from each call's working directory.
    #[error(
        "--allow {0:?}: a program path must be absolute (a relative one would be found from \
         each call's working directory, which the client chooses); give its full path, or \
         a bare name found in PATH"
    )]
    RelativeProgram(String),
    /// An allowed bare name is in no absolute directory of the search path.
    #[error(
        "--allow {program:?}: no executable named {program:?} in the absolute directories of \
         PATH ({path}); relative PATH entries (\".\", an empty entry, \"bin\") are not \
         searched, since they would be found from each call's working directory. Install \
         it, fix PATH, or allow it by its absolute path"
    )]
    ProgramNotFound {
        /// The allowed name.
        program: String,
        /// The absolute directories searched, `:`-separated.
        path: String,
    },
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
    allowed: BTreeSet<String>,
    search_path: Option<OsString>,
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
    /// up once, by [`build`](Self::build), in the absolute directories of the search path
    /// (relative entries are skipped), and calls run the executable found then; allowing
    /// `cargo` does not allow `/tmp/cargo` or `./cargo`; a name found nowhere is listed by
    /// [`McpServer::unavailable_programs`] and calls to it are refused. An absolute path is
    /// run as it is; a relative path is refused by `build`.
    pub fn allow(mut self, program: impl Into<String>) -> Self {
        self.allowed.insert(program.into());
        self
    }

    /// The search path allowed names are resolved in (default: the `PATH` of the process
    /// when [`build`](Self::build) runs; without one, `/usr/local/bin:/usr/bin:/bin`).
    pub fn search_path(mut self, path: impl Into<OsString>) -> Self {
        self.search_path = Some(path.into());
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

    /// Checks the configuration and resolves the allowed programs.
    pub fn build(self) -> Result<McpServer, ConfigError> {
        self.limits.validate()?;
        let search_path = self
            .search_path
            .clone()
            .or_else(|| std::env::var_os("PATH"));
        let absolute = absolute_dirs(search_path.as_deref());
        let (allow, child_path) = match self.allow {
            Allow::All => (Allow::All, None),
            Allow::Programs(_) => {
                let mut resolved = BTreeMap::new();
                for program in &self.allowed {
                    // A name missing on this machine does not stop the server (one shared
                    // configuration may list programs some machines lack): calls to it are
                    // refused. A malformed or relative entry is a mistake in the
                    // configuration itself, refused here.
                    let found = match resolve(program, &absolute) {
                        Ok(path) => Ok(path),
                        Err(e @ ConfigError::ProgramNotFound { .. }) => Err(e.to_string()),
                        Err(e) => return Err(e),
                    };
                    resolved.insert(program.clone(), found);
                }
                // Only the absolute entries: an allowed program that runs another by name
                // must not find it in the call's `cwd` either.
                let child_path = search_path
                    .map(|_| std::env::join_paths(&absolute).unwrap_or_else(|_| OsString::new()));
                (Allow::Programs(resolved), child_path)
            }
        };
        if self.default_timeout.is_zero() || self.default_timeout > MAX_TIMEOUT {
            return Err(ConfigError::Timeout(self.default_timeout));
        }
        if self.max_request_bytes < 64 * 1024 {
            return Err(ConfigError::RequestBound(self.max_request_bytes));
        }
        Ok(McpServer {
            log_level: catalog::LogLevel::default(),
            inner: Arc::new(Inner {
                store: self.store,
                limits: self.limits,
                allow,
                child_path,
                default_timeout: self.default_timeout,
                max_request_bytes: self.max_request_bytes,
                structured_content: self.structured_content,
                peers: Mutex::new(Vec::new()),
                shutdown: tokio::sync::watch::Sender::new(false),
                calls: tokio::sync::watch::Sender::new(0),
            }),
        })
    }
}

/// The absolute directories of a search path, in order (`.`, empty and relative entries
/// dropped); the default path when there is none.
fn absolute_dirs(path: Option<&OsStr>) -> Vec<PathBuf> {
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .collect()
}

/// The executable an allowed `program` runs: itself when it is an absolute path, else the
/// first executable regular file of that name in `dirs`.
fn resolve(program: &str, dirs: &[PathBuf]) -> Result<PathBuf, ConfigError> {
    if program.is_empty() || program.contains('\0') {
        return Err(ConfigError::Program(program.to_owned()));
    }
    if program.contains('/') {
        return if Path::new(program).is_absolute() {
            Ok(PathBuf::from(program))
        } else {
            Err(ConfigError::RelativeProgram(program.to_owned()))
        };
    }
    dirs.iter()
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| ConfigError::ProgramNotFound {
            program: program.to_owned(),
            path: std::env::join_paths(dirs)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        })
}

/// A regular file (after symlinks) with an execute bit: what `execvp` would run.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl McpServer {
    /// A builder for a server over `store` that allows no program yet.
    pub fn builder(store: Store) -> McpServerBuilder {
        McpServerBuilder {
            store,
            limits: PreviewLimits::default(),
            allow: Allow::Programs(BTreeMap::new()),
            allowed: BTreeSet::new(),
            search_path: None,
            default_timeout: DEFAULT_TIMEOUT,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            structured_content: false,
        }
    }

    /// A server for another session: the same configuration, store and calls, a log level of
    /// its own.
    pub(crate) fn for_new_session(&self) -> Self {
        McpServer {
            inner: self.inner.clone(),
            log_level: catalog::LogLevel::default(),
        }
    }

    /// The store the server runs and reads in.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The allowed programs that were found and the executables they run (resolved by
    /// [`McpServerBuilder::build`]), in name order; `None` when every program may run.
    pub fn allowed_programs(&self) -> Option<Vec<(&str, &Path)>> {
        match &self.inner.allow {
            Allow::All => None,
            Allow::Programs(set) => Some(
                set.iter()
                    .filter_map(|(name, path)| Some((name.as_str(), path.as_ref().ok()?.as_path())))
                    .collect(),
            ),
        }
    }

    /// The allowed names found in no absolute directory of the search path when the server
    /// was built, each with the explanation calls to it are refused with, in name order.
    pub fn unavailable_programs(&self) -> Vec<(&str, &str)> {
        match &self.inner.allow {
            Allow::All => Vec::new(),
            Allow::Programs(set) => set
                .iter()
                .filter_map(|(name, path)| Some((name.as_str(), path.as_ref().err()?.as_str())))
                .collect(),
        }
    }

    /// Serves one client on standard input and output until it disconnects or `stop`
    /// resolves (e.g. on SIGTERM; pass `std::future::pending()` for no such stop). Nothing but
    /// protocol messages is written to stdout; programs run by `run` never inherit it.
    pub async fn serve_stdio(self, stop: impl Future<Output = ()>) -> Result<(), ServeError> {
        self.serve(tokio::io::stdin(), tokio::io::stdout(), stop)
            .await
    }

    /// Serves one client on `read`/`write` (newline-delimited JSON-RPC) until it disconnects
    /// or `stop` resolves; then stops the process groups of calls still running (at once, as
    /// a cancel does: on end of input, before the last answers are written) and waits (at
    /// most 30 seconds) for them to be reaped and their output finalized.
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
        let transport = task_layer::TaskLayer::new(transport);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn allowed_names_resolve_in_absolute_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bin.join("plain"), "not executable").unwrap();
        let build = |path: &str, program: &str| {
            let store = Store::open(dir.path().join("store")).unwrap();
            McpServer::builder(store)
                .search_path(path)
                .allow(program)
                .build()
        };
        for relative in ["bin", ".", "", "./bin"] {
            // Not found: the server starts, says so, and refuses calls to it.
            let server = build(relative, "tool").unwrap();
            let unavailable = server.unavailable_programs();
            assert_eq!(unavailable.len(), 1);
            assert_eq!(unavailable[0].0, "tool");
            assert!(unavailable[0].1.contains("PATH"), "{}", unavailable[0].1);
            let err = server.inner.check_allowed("tool").unwrap_err();
            assert!(
                err.0.contains("tool") && err.0.contains("PATH"),
                "{}",
                err.0
            );
            assert_eq!(server.allowed_programs(), Some(vec![]));
        }
        let path = format!(".:{}:", bin.display());
        let server = build(&path, "tool").unwrap();
        assert_eq!(server.inner.check_allowed("tool").unwrap(), Some(tool));
        assert_eq!(
            server.inner.child_path.as_deref(),
            Some(bin.as_os_str()),
            "children get the absolute entries only"
        );
        let plain = build(&bin.display().to_string(), "plain").unwrap();
        assert!(
            plain.inner.check_allowed("plain").is_err(),
            "not executable"
        );
        assert!(matches!(
            build("/bin", "./tool").unwrap_err(),
            ConfigError::RelativeProgram(_)
        ));
    }
}
