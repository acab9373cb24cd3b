//! `agentrun mcp`: the Model Context Protocol server (agentrun-mcp) on standard input and
//! output, or with `--http ADDR:PORT` on Streamable HTTP at `/mcp`, on a tokio runtime of its
//! own.
//!
//! stdout carries only protocol messages (nothing with `--http`); the start line and any
//! failure go to stderr.
//! SIGINT, SIGTERM and SIGHUP stop the server the way a disconnecting client does: the process
//! groups of calls still running are stopped and their output is finalized before it exits.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::interrupts::Interrupts;
use crate::settings::{LimitFlags, Settings};
use crate::{Failure, duration};

/// Arguments of `agentrun mcp`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct McpArgs {
    #[command(subcommand)]
    command: Option<McpCommand>,
    /// The previews of `run` results.
    #[command(flatten)]
    limits: LimitFlags,
    /// Let the `run` tool execute PROGRAM: a command whose first element is exactly this
    /// string. A bare name is looked up at start-up in the absolute directories of PATH
    /// (relative entries such as `.` are skipped) and runs from there (a name not found
    /// there is a warning, and calls to it are refused); a path must be absolute. Repeatable. Without --allow or --allow-all, `run` refuses every program.
    #[arg(long, value_name = "PROGRAM")]
    allow: Vec<String>,
    /// Let the `run` tool execute ANY program. The MCP client, and the model behind it, can
    /// then do anything your user account can.
    #[arg(long, conflicts_with = "allow")]
    allow_all: bool,
    /// Also return each result's JSON as MCP structured content (the run's record, a page's
    /// metadata). Off by default: some clients, Claude Code among them, then show the model
    /// the JSON instead of the text with its read hints.
    #[arg(long)]
    structured_content: bool,
    /// Timeout of `run` calls that name none (e.g. 30s, 10m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout, default_value = "10m")]
    timeout: Duration,
    /// Serve Streamable HTTP at http://ADDR:PORT/mcp instead of stdio (e.g. 127.0.0.1:8765;
    /// port 0 picks a free one, named on stderr). On a loopback address only loopback Host and
    /// Origin names with that port are accepted; any other address needs --token-file.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_http_addr)]
    http: Option<SocketAddr>,
    /// With --http: every request must send `Authorization: Bearer TOKEN`, TOKEN being this
    /// file's content (surrounding whitespace removed). Required off loopback.
    #[arg(long, value_name = "FILE", requires = "http")]
    token_file: Option<PathBuf>,
}

/// The subcommands of `agentrun mcp`.
#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Run any MCP server on stdio behind bounded previews: its tools, resources and prompts
    /// pass unchanged, except that a tool result over the preview bounds is retained in the
    /// store and replaced by its bounded preview with read hints, and a `read` tool pages
    /// the rest. See docs/mcp.md.
    #[command(after_help = "Examples:
  agentrun mcp proxy -- npx @modelcontextprotocol/server-filesystem ~/src
  claude mcp add files -- agentrun mcp proxy -- npx @modelcontextprotocol/server-filesystem ~/src")]
    Proxy(ProxyArgs),
}

/// Arguments of `agentrun mcp proxy`.
#[derive(Debug, Args)]
struct ProxyArgs {
    /// The bounds of proxied tool results.
    #[command(flatten)]
    limits: LimitFlags,
    /// The MCP server to run and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "SERVER")]
    command: Vec<OsString>,
}

/// `ADDR:PORT` of `--http`: an IP address and port (`127.0.0.1:8765`, `[::1]:8765`), or
/// `localhost:PORT` for 127.0.0.1.
fn parse_http_addr(value: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    if let Some(port) = value.strip_prefix("localhost:")
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(format!(
        "expected ADDR:PORT with an IP address (127.0.0.1:8765, [::1]:8765, 0.0.0.0:8765) or \
         localhost:PORT, not {value:?}"
    ))
}

/// The bearer token in `path`: its content without surrounding whitespace.
fn read_token(path: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(format!(
            "--token-file {}: cannot read it: {e}",
            path.display()
        ))
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Failure::usage(format!(
            "--token-file {}: the file is empty; put the bearer token in it",
            path.display()
        )));
    }
    Ok(token.to_owned())
}

/// Runs the server until the client disconnects or a stop signal arrives.
pub(crate) fn run(settings: &Settings, args: McpArgs) -> Result<ExitCode, Failure> {
    if let Some(McpCommand::Proxy(proxy)) = args.command {
        return run_proxy(settings, proxy);
    }
    let limits = settings.limits(&args.limits)?;
    let store = settings.open_store()?;
    let root = store.root().to_path_buf();
    let mut builder = agentrun_mcp::McpServer::builder(store)
        .limits(limits)
        .default_timeout(args.timeout)
        .structured_content(args.structured_content);
    if args.allow_all {
        builder = builder.allow_all();
    }
    for program in &args.allow {
        builder = builder.allow(program);
    }
    let server = builder.build().map_err(Failure::usage)?;
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the async runtime: {e}")))?;
    // Each allowed name with the executable it runs, found once, now.
    let allowed = match server.allowed_programs() {
        None => "every program (--allow-all)".to_owned(),
        Some(programs) if programs.is_empty() => "no program (add --allow PROGRAM)".to_owned(),
        Some(programs) => programs
            .iter()
            .map(|(name, path)| {
                if Path::new(name) == *path {
                    (*name).to_owned()
                } else {
                    format!("{name} ({})", path.display())
                }
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    // A missing program does not keep the client from connecting; calls to it are refused
    // with the same explanation.
    for (name, why) in server.unavailable_programs() {
        say!("agentrun mcp: warning: {name} is allowed but cannot run: {why}");
    }
    let mut interrupts = Interrupts::install();
    let served = match args.http {
        Some(addr) => runtime.block_on(async {
            let http = server.bind_http(addr, token).await.map_err(|e| match e {
                agentrun_mcp::HttpError::Bind { .. } => Failure::runtime(e),
                _ => Failure::usage(e),
            })?;
            say!(
                "agentrun mcp: serving MCP on {}; store {}; run allows {allowed}",
                http.url(),
                root.display()
            );
            http.serve(interrupts.stopped())
                .await
                .map_err(Failure::runtime)
        }),
        None => {
            say!(
                "agentrun mcp: serving MCP on stdio; store {}; run allows {allowed}",
                root.display()
            );
            runtime
                .block_on(server.serve_stdio(interrupts.stopped()))
                .map_err(Failure::runtime)
        }
    };
    // tokio's stdin reads on a blocking thread that cannot be interrupted: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    served?;
    Ok(match interrupts.exit_code() {
        Some(code) => ExitCode::from(code),
        None => ExitCode::SUCCESS,
    })
}

/// `agentrun mcp proxy`: relays until the client or the server ends; exits with the
/// server's status when it ended first.
fn run_proxy(settings: &Settings, args: ProxyArgs) -> Result<ExitCode, Failure> {
    let limits = settings.limits(&args.limits)?;
    let store = settings.open_store()?;
    let root = store.root().to_path_buf();
    let server = agentrun_mcp::McpServer::builder(store)
        .limits(limits)
        .build()
        .map_err(Failure::usage)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the async runtime: {e}")))?;
    say!(
        "agentrun mcp proxy: serving {} on stdio; store {}",
        args.command[0].to_string_lossy(),
        root.display()
    );
    let mut interrupts = Interrupts::install();
    let end = runtime.block_on(server.proxy_stdio(&args.command, interrupts.stopped()));
    // tokio's stdin reads on a blocking thread that cannot be interrupted: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    let end = end.map_err(|e| match e {
        agentrun_mcp::ProxyError::Spawn { .. } => Failure::usage(e),
        _ => Failure::runtime(e),
    })?;
    if let Some(code) = interrupts.exit_code() {
        return Ok(ExitCode::from(code));
    }
    Ok(match end {
        agentrun_mcp::ProxyEnd::ChildExited(status) => {
            use std::os::unix::process::ExitStatusExt;
            let code = status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        _ => ExitCode::SUCCESS,
    })
}
