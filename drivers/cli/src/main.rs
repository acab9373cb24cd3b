//! `agentrun`: run commands with retained, pageable output, and read it back.
//!
//! Layout: this file holds the command tree and the dispatch; each subcommand lives in its
//! own module (`run.rs`, `read.rs`, `store_cmds.rs` for gc/verify/show/runs, `settings.rs`
//! for the config file and `agentrun config`, `agent.rs`, `interpret.rs`, `mcp.rs`,
//! `docs_cmds.rs` for completions and the man page). A new subcommand is a variant of
//! `Command` with its `after_help` examples, a line in `Command::json` and one in `dispatch`. Failures and exit codes are in `failure.rs`: the
//! child's code passes through, agentrun's own failures (usage errors included) exit 125,
//! a timeout 124, a program that cannot be run 126/127 — the table is `EXIT_CODES` below.

/// `eprintln!` that never panics: a diagnostic that cannot be written (stderr closed, or on a
/// full device) is dropped, and the command keeps its own exit code.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics (see `say!`).
macro_rules! say_inline {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod agent;
mod auto;
mod compact;
mod docs_cmds;
mod duration;
mod failure;
mod fanout;
mod follow;
mod harness_arg;
mod interpret;
mod interrupts;
mod json_out;
mod mcp;
mod publish;
mod read;
mod run;
mod sessions;
mod settings;
mod status_line;
mod store_cmds;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

pub(crate) use failure::Failure;
use json_out::JsonStyle;
pub(crate) use run::run_summary;
use settings::Settings;

/// The exit-code table, shown by `agentrun --help` and in docs/guide.md (a macro so that the
/// help text, a literal, can include it).
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0        success (for `run`: the program exited 0)
  1-255    `run`: the program's own exit code, passed through (some collide with
           the codes below; --json tells them apart)
  1        `agent`, `interpret`: the session did not succeed; `fanout`: no
           attempt won; `verify`: problems were found; `run --sink
           --require-result`: the program exited 0 but wrote no usable result
  124      the program was stopped by --timeout or --idle-timeout
  125      agentrun itself failed (bad usage, missing artifact, store error)
  126      the program was found but cannot be executed
  127      the program was not found
  128+N    the program was killed by signal N, or agentrun was stopped by it"
    };
}

#[cfg(test)]
const EXIT_CODES: &str = exit_codes!();

/// Run commands with retained, pageable output, and read any output back by its artifact URI.
///
/// Every run's stdout and stderr are captured in full into a content-addressed store; you see
/// a bounded preview per stream, and stderr names the `agentrun read` command for each stream.
#[derive(Debug, Parser)]
#[command(
    name = "agentrun",
    bin_name = "agentrun",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = concat!(
        "Examples:
  agentrun run cargo test           run, preview, keep everything
  agentrun read artifact://<sha256>/stdout --offset 2000
  agentrun runs                     recent runs
  agentrun agent claude \"fix the failing test\"

",
        exit_codes!()
    ),
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

/// Options every command accepts.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Artifact store: a directory, or a shared store on object storage
    /// (s3://BUCKET/PREFIX, gs://…, az://…, file:///PATH; captures spool in $AGENTRUN_HOME)
    /// [default: $AGENTRUN_STORE, else the config file's `store` URL, else $AGENTRUN_HOME,
    /// else the config file's `store`, else $XDG_DATA_HOME/agentrun, else
    /// ~/.local/share/agentrun].
    #[arg(
        long,
        global = true,
        value_name = "DIR|URL",
        help_heading = "Global options"
    )]
    pub(crate) store: Option<PathBuf>,
    /// Settings file [default: $XDG_CONFIG_HOME/agentrun/config.toml, else
    /// ~/.config/agentrun/config.toml].
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        help_heading = "Global options"
    )]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program, capture its output, print the bounded preview, exit with its code.
    ///
    /// Everything after PROGRAM belongs to the program (put agentrun's options before it, or
    /// separate with `--`). The program runs directly, never through a shell. stdout gets the
    /// model-facing preview of each stream; stderr gets a summary line and one `agentrun read`
    /// command per non-empty stream.
    ///
    /// With --sink the program also gets a clean result channel: a private file whose path is
    /// in $AGENTRUN_RESULT_SINK (see --sink-var). Then stdout carries only the clean answer,
    /// byte for byte, and the preview goes to stderr; when the program wrote no answer, stdout
    /// stays empty and stderr says why.
    ///
    /// While the program runs, a status line on stderr (only when stderr is a terminal, and
    /// not with NO_COLOR, --quiet or --live) says how long it has been running and each
    /// stream's lines and bytes so far; it is erased before anything else is printed.
    #[command(after_help = "Examples:
  agentrun run seq 1 100000                 preview of the first 2000 lines, the rest stored
  agentrun run --live cargo build           show the output as it comes, keep it all
  agentrun run --timeout 5m -- make -j8     stop after 5 minutes (exit 124)
  agentrun run --cwd ../app --env RUST_LOG=debug --label smoke cargo test
  echo hi | agentrun run --stdin inherit cat
  agentrun run --json ls -la                the record, with an artifact URI per stream")]
    Run(run::RunArgs),
    /// Page an artifact or a run's stream: raw stored bytes to stdout, continuation metadata
    /// to stderr.
    ///
    /// The target is an artifact URI, or RUN/STREAM: the stream (stdout, stderr; `output` for
    /// a run with one stream) of a run named by its id, a unique prefix of one, or `last`
    /// (the newest run); the continuation on stderr then names the stream's artifact URI.
    #[command(after_help = "Examples:
  agentrun read last/stdout                               the newest run's stdout
  agentrun read 1764512345123-0004821-000000/stderr --offset 100
  agentrun read artifact://<sha256>/stdout                first 2000 lines
  agentrun read artifact://<sha256>/stdout --offset 2000 --limit 100
  agentrun read artifact://<sha256>/stdout --byte-offset 51200   inside a very long line
  agentrun read artifact://<sha256>/stdout --all > out.txt       the exact bytes")]
    Read(read::ReadArgs),
    /// Show a recorded run again (its preview and read commands, without rerunning it), an
    /// auto session's turns, or a fan-out's record.
    ///
    /// RUN|SESSION is a run, session or fan-out id, a unique prefix of a run or session id, or
    /// `last` (the newest run). A full id is looked up among runs and sessions; a prefix
    /// matching several is an error listing them.
    #[command(after_help = "Examples:
  agentrun show last                           the newest run
  agentrun show 1764512345123-0004821-000000   the run id printed on stderr by `run`
  agentrun show 17645123                       a unique prefix of a run or session id
  agentrun show --json 1764512345123-0004821-000000")]
    Show(store_cmds::ShowArgs),
    /// Print a run's streams as they grow (stdout to stdout, stderr to stderr), then exit
    /// with the run's exit code, as `run` did.
    ///
    /// RUN is a run id, a unique prefix of one, or `last` (the newest run, in progress or
    /// not; `agentrun runs` lists runs in progress first). A finished run's streams are
    /// printed at once.
    #[command(after_help = "Examples:
  agentrun follow last                          the newest run, from its start
  agentrun follow --tail 20 17645123            its last 20 lines, then what comes")]
    Follow(follow::FollowArgs),
    /// List the auto sessions in the store: id, status, turns, when each was last updated,
    /// the objective.
    #[command(after_help = "Examples:
  agentrun sessions
  agentrun sessions --json
  agentrun show <session id>                 its turns, with their read commands")]
    Sessions(sessions::SessionsArgs),
    /// List recent runs: id, when each finished, how long it took, how it ended, the size of
    /// each stream, its directory and its command.
    ///
    /// Runs in progress come first, as `running` with how long they have been running and
    /// the bytes captured so far (`abandoned`: the process running it died; `agentrun gc`
    /// removes what it left); `agentrun follow RUN` prints one as it grows. The filters
    /// narrow the list; -n counts the runs that pass them.
    #[command(after_help = "Examples:
  agentrun runs                             runs in progress, then the 20 most recent runs
  agentrun runs --status failed --since 1d  what failed today
  agentrun runs --label nightly -n 5        the last five runs labelled nightly
  agentrun runs --limit 100 --json")]
    Runs(store_cmds::RunsArgs),
    /// Forget expired runs and remove the output nothing references any more.
    ///
    /// A run's record is kept for the retention period (30 days unless `[retention] records`
    /// in the config file or --retention says otherwise); the output of kept records is always
    /// kept. Objects no record references are removed after a grace period (1 hour), so a run
    /// that is being published is never touched.
    #[command(after_help = "Examples:
  agentrun gc                               apply the retention period
  agentrun gc --dry-run                     say what would go
  agentrun gc --retention 7d                keep only the last week")]
    Gc(store_cmds::GcArgs),
    /// Send the runs a shared store's spool holds to the bucket, when their publication failed.
    ///
    /// On a shared store (--store s3://…) each run is captured into the local spool and
    /// published to the bucket as it ends. When the bucket cannot be reached (or refuses the
    /// credentials) the run stays complete in the spool and the run fails with that error;
    /// `agentrun publish` sends every such run, oldest first, once the bucket is back: only the
    /// runs captured for this store (its URL, and its endpoint when one is configured); a
    /// local store's runs in the same home stay local unless adopted (--adopt).
    #[command(after_help = "Examples:
  agentrun --store s3://team-bucket/agentrun publish
  agentrun publish --json                   with AGENTRUN_STORE or [store] in the config
  agentrun publish --discard RUN_ID         give up a run that can never be published
  agentrun publish --adopt RUN_ID           send a run of this home that waits for no bucket")]
    Publish(publish::PublishArgs),
    /// Check every object's digest and index and every record's references.
    #[command(after_help = "Examples:
  agentrun verify
  agentrun verify --json")]
    Verify(store_cmds::VerifyArgs),
    /// Print the effective settings and where each comes from.
    #[command(after_help = "Examples:
  agentrun config
  agentrun --config ./agentrun.toml config --json
  agentrun config --init                    write a commented sample config file")]
    Config(settings::ConfigArgs),
    /// Decode a recorded or piped harness stream: progress lines as they are decoded, then
    /// the observed models and the completion report.
    ///
    /// Exit code: 0 when the interpreted session succeeded; 1 when it did not (a failed turn,
    /// a refusal, a stream that ended without a final result); 125 when agentrun itself failed
    /// (an unreadable input, a write error).
    #[command(after_help = "Examples:
  agentrun interpret --harness claude session.jsonl
  claude -p --output-format stream-json --verbose hi | agentrun interpret --harness claude")]
    Interpret(interpret::InterpretArgs),
    /// Launch a harness CLI (claude, grok, agy, codex, muse, opencode, qwen, pi, gemini) with a
    /// prompt, interpret its output live, retain it as artifacts, and print the completion and
    /// the final message.
    ///
    /// Exit code: 0 when the session succeeded; 1 when it did not (a failed turn, a safeguard
    /// refusal under --security, a harness that exited non-zero); 124 on timeout; 127 when
    /// the harness program is not on PATH, 126 when it cannot be executed; 125 when agentrun
    /// itself failed.
    #[command(after_help = "Examples:
  agentrun agent claude fix the failing test
  agentrun agent codex --model gpt-5 -- \"explain src/main.rs\"
  agentrun agent claude --json --timeout 10m \"refactor the parser\"")]
    Agent(agent::AgentArgs),
    /// Summarize a whole agent transcript; when the summarizer's input is too large, retry
    /// once with tool output moved into artifacts and replaced by read references.
    ///
    /// The transcript (JSON in the Anthropic Messages shape) is never modified. The summary
    /// goes to stdout, progress to stderr. Exit code: 0 with a summary, 1 when compaction
    /// failed, 125 when agentrun itself failed. See docs/compaction.md.
    #[command(after_help = "Examples:
  agentrun compact session.json --harness claude
  agentrun compact session.json --harness claude --model haiku --max-input-bytes 400000
  agentrun compact session.json --summarizer 'llm -m gpt-4o-mini' --json")]
    Compact(compact::CompactArgs),
    /// Drive a harness through clarify, plan, execute and evaluate turns until its objective
    /// is done and verified, or the turns run out. See docs/auto-mode.md.
    ///
    /// Exit code: 0 when completed or stopped at max turns; the evaluate turn's code when it
    /// failed; a required phase's code when it failed (the session aborts); 127/126 when the
    /// harness cannot be started; 128+N when stopped by signal N (continue with --continue).
    #[command(after_help = "Examples:
  agentrun auto claude --verify 'cargo test' --harness-arg=--permission-mode \\
      --harness-arg=acceptEdits -- make the failing tests pass
  agentrun auto --continue 1764512345123-0004821-000000
  agentrun append 1764512345123-0004821-000000 'also update the changelog'")]
    Auto(auto::AutoArgs),
    /// Run several agents on one task at once, each in its own git worktree (or a private
    /// copy of the workspace), verify each, keep the winner's worktree and branch. See
    /// docs/fanout.md.
    ///
    /// Exit code: 0 when an attempt won; 1 when none did; 128+N when stopped by signal N (every
    /// attempt is stopped and the record is still written); 125 when agentrun itself failed.
    #[command(after_help = "Examples:
  agentrun fanout --attempt claude:opus --attempt claude:sonnet --attempt codex \
      --verify 'cargo test' -- make the failing test pass
  agentrun fanout --copies 5 claude --auto --verify 'make check' -- fix issue 12
  agentrun fanout --copies 3 codex --select all --json -- refactor the parser")]
    Fanout(fanout::FanOutArgs),
    /// Queue an instruction for the next execute turn of a running auto-mode session.
    #[command(after_help = "Examples:
  agentrun append 1764512345123-0004821-000000 'keep the public API unchanged'
  echo 'use tabs' | agentrun append ./my-session -")]
    Append(auto::AppendArgs),
    /// Serve the run, read and agent tools and the artifact store to an MCP client (Claude
    /// Code, Codex, OpenCode, ...) on stdin/stdout. See docs/mcp.md.
    #[command(after_help = "Examples:
  agentrun mcp --allow cargo --allow git
  claude mcp add agentrun -- agentrun mcp --allow cargo")]
    Mcp(mcp::McpArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Examples:
  agentrun completions bash > ~/.local/share/bash-completion/completions/agentrun
  agentrun completions zsh > ~/.zfunc/_agentrun   with fpath=(~/.zfunc $fpath) before
                                                  compinit in ~/.zshrc
  agentrun completions fish > ~/.config/fish/completions/agentrun.fish")]
    Completions(docs_cmds::CompletionsArgs),
    /// Print the man page (roff) of agentrun and its commands.
    #[command(after_help = "Examples:
  agentrun man > ~/.local/share/man/man1/agentrun.1 && man agentrun")]
    Man,
}

impl Command {
    /// The JSON style the command was asked for, if any (its errors are then JSON too, in
    /// the same style).
    fn json(&self) -> Option<JsonStyle> {
        let (asked, name) = match self {
            Command::Run(a) => (a.json, "run"),
            Command::Read(a) => (a.json, "read"),
            Command::Show(a) => (a.json, "show"),
            Command::Sessions(a) => (a.json, "sessions"),
            Command::Runs(a) => (a.json, "runs"),
            Command::Gc(a) => (a.json, "gc"),
            Command::Verify(a) => (a.json, "verify"),
            Command::Publish(a) => (a.json, "publish"),
            Command::Config(a) => (a.json, "config"),
            Command::Interpret(a) => (a.json, "interpret"),
            Command::Agent(a) => (a.json, "agent"),
            Command::Compact(a) => (a.json, "compact"),
            Command::Auto(a) => (a.json, "auto"),
            Command::Fanout(a) => (a.json, "fanout"),
            Command::Append(_) | Command::Follow(_) => (false, ""),
            Command::Mcp(_) => (false, ""),
            Command::Completions(_) | Command::Man => (false, ""),
        };
        asked.then(|| json_out::style_of(name))
    }
}

/// The command tree, with the global options hidden from the commands that ignore them
/// (`interpret` reads no store and no settings; neither do `completions` and `man`): a
/// subcommand's own hidden `--store`/`--config` takes the place of the global one there, so
/// `--store` is still accepted (and ignored) but not advertised.
fn command_tree() -> clap::Command {
    let mut cmd = Cli::command();
    for name in ["interpret", "completions", "man"] {
        cmd = cmd.mut_subcommand(name, |sub| {
            sub.arg(ignored_path("store", "DIR"))
                .arg(ignored_path("config", "FILE"))
        });
    }
    cmd
}

fn ignored_path(name: &'static str, value_name: &'static str) -> clap::Arg {
    clap::Arg::new(name)
        .long(name)
        .value_name(value_name)
        .value_parser(clap::value_parser!(PathBuf))
        .hide(true)
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = command_tree()
        .try_get_matches_from(&args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return failure::clap_error(e, &args),
    };
    let json = cli.command.json();
    match dispatch(cli) {
        Ok(code) => code,
        Err(f) => f.report(json),
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode, Failure> {
    let Cli { global, command } = cli;
    // Read only by the commands that need them, so `interpret`, `completions` and `man`
    // work whatever the config file says.
    let settings = || Settings::load(&global);
    match command {
        Command::Interpret(args) => interpret::run(args),
        Command::Completions(args) => docs_cmds::completions(command_tree(), args),
        Command::Man => docs_cmds::man(command_tree()),
        Command::Run(args) => run::run(&settings()?, args),
        Command::Agent(args) => {
            let settings = settings()?;
            agent::run(settings.open_store()?, settings.price_table(), args)
        }
        Command::Compact(args) => compact::run(&settings()?, args),
        Command::Auto(args) => {
            let settings = settings()?;
            auto::run(settings.open_store()?, settings.price_table(), args)
        }
        Command::Fanout(args) => {
            let settings = settings()?;
            fanout::run(settings.open_store()?, settings.price_table(), args)
        }
        Command::Append(args) => auto::append(settings()?.open_store()?, args),
        Command::Read(args) => read::read(&settings()?, args),
        Command::Follow(args) => follow::follow(&settings()?, args),
        Command::Show(args) => store_cmds::show(&settings()?, args),
        Command::Sessions(args) => sessions::sessions(&settings()?, args),
        Command::Runs(args) => store_cmds::runs(&settings()?, args),
        Command::Gc(args) => store_cmds::gc(&settings()?, args),
        Command::Verify(args) => store_cmds::verify(&settings()?, args),
        Command::Publish(args) => publish::publish(&settings()?, args),
        // Before the settings are read: the file it writes need not exist yet.
        Command::Config(args) if args.init => settings::init(&global, &args),
        Command::Config(args) => settings::show(&settings()?, args),
        Command::Mcp(args) => mcp::run(&settings()?, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
        command_tree().debug_assert();
    }

    #[test]
    fn help_and_docs_share_the_exit_code_table() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(EXIT_CODES), "{help}");
    }
}
