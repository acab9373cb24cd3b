//! `agentrun`: run commands with retained, pageable output, and read it back.
//!
//! See `agentrun --help` and README.md. Exit codes: the child's code for `run` (124 on
//! timeout, 126/127 when the program cannot be run); for `agent` 0 when the session succeeded
//! and 1 when it did not (see `agent.rs`), 124 on timeout, 126/127 when the harness CLI cannot
//! be run; 0 for success of the other commands, 1 for runtime errors (missing or corrupt
//! artifacts, store problems), 2 for usage errors (including malformed URIs and limits).

mod agent;
mod duration;
mod failure;
mod interpret;
mod interrupts;
mod read;
mod run;
mod store_cmds;

use std::path::PathBuf;
use std::process::ExitCode;

use agentrun_fs::Store;
use clap::{Parser, Subcommand};

pub(crate) use failure::Failure;
pub(crate) use run::run_summary;

/// Run commands with retained, pageable output, and read any output back by its artifact URI.
///
/// Every run's stdout and stderr are captured in full into a content-addressed store; you see a
/// bounded preview per stream with an exact `read` hint for the rest.
#[derive(Debug, Parser)]
#[command(name = "agentrun", version, propagate_version = true)]
struct Cli {
    /// Artifact store directory [default: $AGENTRUN_HOME, else $XDG_DATA_HOME/agentrun, else
    /// ~/.local/share/agentrun].
    #[arg(long, global = true, value_name = "DIR")]
    store: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program, capture its output, print the bounded model-facing preview, and exit
    /// with the program's exit code (124 on timeout).
    ///
    /// With --sink the program also gets a clean result channel: a private file whose path is
    /// in $AGENTRUN_RESULT_SINK (see --sink-var). Then stdout carries only the clean answer,
    /// byte for byte, and the preview goes to stderr; when the program wrote no answer, stdout
    /// stays empty and stderr says why.
    Run(run::RunArgs),
    /// Page an artifact: raw stored bytes to stdout, continuation metadata to stderr.
    Read(read::ReadArgs),
    /// Remove artifacts no record references (after a grace period) and dead captures.
    Gc(store_cmds::GcArgs),
    /// Check every object's digest and index and every record's references.
    Verify(store_cmds::JsonArg),
    /// Decode a recorded or piped harness stream: progress lines as they are decoded, then
    /// the observed models and the completion report.
    Interpret(interpret::InterpretArgs),
    /// Launch a harness CLI (claude, grok, agy, codex, muse, opencode) with a prompt,
    /// interpret its output live, retain it as artifacts, and print the completion and the
    /// final message.
    ///
    /// Exit code: 0 when the session succeeded; 1 when it did not (a failed turn, a safeguard
    /// refusal under --security, a harness that exited non-zero); 124 on timeout; 127 when
    /// the harness program is not on PATH, 126 when it cannot be executed.
    Agent(agent::AgentArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("agentrun: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode, Failure> {
    let store = cli.store;
    match cli.command {
        // Decoding a stream touches no store: it works without one.
        Command::Interpret(args) => interpret::run(args),
        Command::Agent(args) => agent::run(open_store(store)?, args),
        Command::Run(args) => run::run(open_store(store)?, args),
        Command::Read(args) => read::read(&open_store(store)?, args),
        Command::Gc(args) => store_cmds::gc(&open_store(store)?, args),
        Command::Verify(args) => store_cmds::verify(&open_store(store)?, args),
    }
}

/// The store named by `--store`, else the default root; created owner-only if missing.
fn open_store(dir: Option<PathBuf>) -> Result<Store, Failure> {
    let root = match dir {
        Some(dir) => dir,
        None => Store::default_root().map_err(Failure::runtime)?,
    };
    Store::open(root).map_err(Failure::runtime)
}
