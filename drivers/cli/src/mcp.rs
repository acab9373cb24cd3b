//! `agentrun mcp`: the Model Context Protocol server (agentrun-mcp) on standard input and
//! output, on a tokio runtime of its own.
//!
//! stdout carries only protocol messages; the start line and any failure go to stderr.
//! SIGINT, SIGTERM and SIGHUP stop the server the way a disconnecting client does: the process
//! groups of calls still running are stopped and their output is finalized before it exits.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::interrupts::Interrupts;
use crate::settings::{LimitFlags, Settings};
use crate::{Failure, duration};

/// Arguments of `agentrun mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
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
}

/// Runs the server until the client disconnects or a stop signal arrives.
pub(crate) fn run(settings: &Settings, args: McpArgs) -> Result<ExitCode, Failure> {
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
    say!(
        "agentrun mcp: serving MCP on stdio; store {}; run allows {allowed}",
        root.display()
    );
    let mut interrupts = Interrupts::install();
    let served = runtime.block_on(server.serve_stdio(interrupts.stopped()));
    // tokio's stdin reads on a blocking thread that cannot be interrupted: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    served.map_err(Failure::runtime)?;
    Ok(match interrupts.exit_code() {
        Some(code) => ExitCode::from(code),
        None => ExitCode::SUCCESS,
    })
}
