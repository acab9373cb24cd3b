//! `agentrun fanout (--attempt HARNESS[:MODEL] … | --copies N HARNESS[:MODEL]) -- PROMPT`:
//! several attempts at one task at once through the library (`agentrun_smol::Runner::fanout`,
//! i.e. `agentrun_process::fanout`). This file only parses the arguments and renders: a live
//! table on a terminal (one line per attempt, redrawn in place), plain lines otherwise, then
//! one line per attempt and the winner on stdout (or, with `--json`, the fan-out record).
//! Isolation, verification, selection, cleanup and the record are the library's.
//!
//! Exit codes: 0 with a winner; 1 without; 128+N when stopped by signal N (the record is still
//! written); 125 for usage errors and agentrun's own failures.

use std::fmt::Write as _;
use std::future::IntoFuture;
use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentrun_core::budget::{Budget, PriceTable};
use agentrun_core::fanout::{AttemptRecord, FanOutRecord, Selection};
use agentrun_fs::Store;
use agentrun_smol::{AttemptSpec, FanOutError, FanOutEvent, FanOutOptions};
use clap::{ArgGroup, Args};

use crate::interrupts::Interrupts;
use crate::{Failure, duration};

/// Arguments of `agentrun fanout`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("attempts").required(true).args(["attempt", "copies"])))]
pub(crate) struct FanOutArgs {
    /// An attempt: a harness and, after a colon, the model to ask it for (repeatable), e.g.
    /// `--attempt claude:opus --attempt codex:gpt-5 --attempt opencode`.
    #[arg(long, value_name = "HARNESS[:MODEL]", value_parser = parse_attempt)]
    attempt: Vec<AttemptSpec>,
    /// N attempts of the same harness and model, e.g. `--copies 5 claude:sonnet`.
    #[arg(long, num_args = 2, value_names = ["N", "HARNESS[:MODEL]"])]
    copies: Option<Vec<String>>,
    /// At most this many attempts at once [default: the number of attempts, at most 8].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// A command (`sh -c`, in each attempt's worktree) that must exit 0 for the attempt to
    /// win, e.g. "cargo test".
    #[arg(long, value_name = "CMD")]
    verify: Option<String>,
    /// first-verified: the first attempt that passes wins and the others are stopped; all:
    /// every attempt runs to its end and is reported with its verification.
    #[arg(long, value_name = "HOW", default_value = "first-verified", value_parser = parse_selection)]
    select: Selection,
    /// Each attempt is a whole auto-mode session (clarify, plan, execute, evaluate) with the
    /// verification as its own, instead of one agent run.
    #[arg(long)]
    auto: bool,
    /// With --auto: each session's last turn.
    #[arg(long, value_name = "N", requires = "auto")]
    max_turns: Option<u32>,
    /// Keep every attempt's worktree and branch, not only the winner's.
    #[arg(long)]
    keep: bool,
    /// An argument passed verbatim to every attempt's harness, before the prompt
    /// (repeatable; may start with `-`).
    #[arg(long = "harness-arg", value_name = "ARG", allow_hyphen_values = true)]
    harness_args: Vec<String>,
    /// Stop an attempt's harness turn after this long (e.g. 30s, 5m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    timeout: Option<Duration>,
    /// Stop an attempt's harness turn when it printed nothing for this long.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_timeout)]
    idle_timeout: Option<Duration>,
    /// Stop an attempt's harness turn when it emitted no event line for this long (`0`:
    /// never); the attempt's turn then fails as `stalled`.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10m")]
    stall_timeout: Duration,
    /// Cap each attempt's cost in US dollars (with --auto: each attempt's whole session). A
    /// harness that reports tokens but no cost is priced from the price table (estimated).
    #[arg(long, value_name = "USD", value_parser = crate::auto::parse_usd)]
    max_cost_usd: Option<f64>,
    /// Cap each attempt's tokens (input plus output), like `--max-cost-usd`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_tokens: Option<u64>,
    /// Print the fan-out record as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// The prompt (with --auto: the objective); several words are joined with spaces. Put
    /// it after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROMPT")]
    prompt: Vec<String>,
}

fn parse_attempt(text: &str) -> Result<AttemptSpec, String> {
    AttemptSpec::parse(text).map_err(|e| format!("{e} (expected HARNESS[:MODEL])"))
}

fn parse_selection(text: &str) -> Result<Selection, String> {
    Selection::from_name(text).map_err(|e| e.to_string())
}

impl FanOutArgs {
    fn attempts(&self) -> Result<Vec<AttemptSpec>, Failure> {
        let Some(copies) = &self.copies else {
            return Ok(self.attempt.clone());
        };
        let [n, spec] = copies.as_slice() else {
            return Err(Failure::usage("--copies takes N and HARNESS[:MODEL]"));
        };
        let n: usize =
            n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                Failure::usage(format!("--copies: {n:?} is not a positive count"))
            })?;
        let spec = parse_attempt(spec).map_err(|e| Failure::usage(format!("--copies: {e}")))?;
        Ok(vec![spec; n])
    }

    fn options(&self, prices: PriceTable) -> Result<FanOutOptions, Failure> {
        let mut options = FanOutOptions::new(self.attempts()?, self.prompt.join(" "))
            .stall_timeout(self.stall_timeout)
            .budget(Budget {
                max_cost_usd: self.max_cost_usd,
                max_tokens: self.max_tokens,
            })
            .prices(prices)
            .select(self.select)
            .auto(self.auto)
            .keep(self.keep);
        if let Some(j) = self.jobs {
            options = options.jobs(j);
        }
        if let Some(v) = &self.verify {
            options = options.verify(v);
        }
        if let Some(t) = self.max_turns {
            options = options.max_turns(t);
        }
        for arg in &self.harness_args {
            options = options.harness_arg(arg);
        }
        if let Some(t) = self.timeout {
            options = options.timeout(t);
        }
        if let Some(t) = self.idle_timeout {
            options = options.idle_timeout(t);
        }
        Ok(options)
    }
}

/// One line of the live table.
struct Row {
    label: String,
    state: &'static str,
    started: Option<Instant>,
    took: Option<Duration>,
    last: String,
    cost: Option<f64>,
}

/// The live view: the rows, and whether it redraws a table (a terminal) or prints lines.
struct View {
    rows: Vec<Row>,
    table: bool,
    drawn: usize,
}

impl View {
    fn line(&self, n: usize, width: usize) -> String {
        let r = &self.rows[n];
        let elapsed = r
            .took
            .or_else(|| r.started.map(|s| s.elapsed()))
            .map_or_else(|| "-".to_owned(), |d| format!("{:.0}s", d.as_secs_f64()));
        let cost = r.cost.map_or_else(String::new, |c| format!("${c:.4}"));
        let mut s = format!(
            "{n:>2} {:<24} {:<11} {:>6} {:>8}  {}",
            truncate(&r.label, 24),
            r.state,
            elapsed,
            cost,
            r.last
        );
        if s.chars().count() > width {
            s = truncate(&s, width);
        }
        s
    }

    /// Redraws the table in place on stderr.
    fn draw(&mut self) {
        if !self.table {
            return;
        }
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(100usize);
        let frame = self.frame(width);
        let _ = io::stderr().write_all(frame.as_bytes());
    }

    /// The bytes that redraw the table: up over the lines drawn before, then each line
    /// cleared and rewritten, cut to `width`.
    fn frame(&mut self, width: usize) -> String {
        let width = width.max(20);
        let mut s = String::new();
        if self.drawn > 0 {
            let _ = write!(s, "\x1b[{}A", self.drawn);
        }
        for n in 0..self.rows.len() {
            let _ = writeln!(s, "\r\x1b[2K{}", self.line(n, width - 1));
        }
        self.drawn = self.rows.len();
        s
    }

    fn event(&mut self, event: FanOutEvent<'_>) {
        match event {
            FanOutEvent::Started { attempt, worktree } => {
                let r = &mut self.rows[attempt];
                r.state = "running";
                r.started = Some(Instant::now());
                if !self.table {
                    say!(
                        "agentrun: attempt {attempt} ({}) started in {}",
                        r.label,
                        worktree.display()
                    );
                }
            }
            FanOutEvent::Progress { attempt, line } => {
                let r = &mut self.rows[attempt];
                r.last = line.replace(['\n', '\r', '\t'], " ");
                if !self.table {
                    say!("agentrun: [{attempt}] {}", r.last);
                }
            }
            FanOutEvent::Verifying { attempt } => {
                self.rows[attempt].state = "verifying";
                if !self.table {
                    say!("agentrun: attempt {attempt} verifying");
                }
            }
            FanOutEvent::Ended { attempt, record } => {
                let r = &mut self.rows[attempt];
                r.state = state_word(record);
                r.took = r.started.map(|s| s.elapsed());
                r.cost = record.usage.as_ref().and_then(|u| u.cost_usd);
                if !self.table {
                    say!("agentrun: attempt {attempt} ({}) {}", r.label, r.state);
                }
            }
            _ => {}
        }
        self.draw();
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// The state column: the status, and the verification when it decided.
fn state_word(a: &AttemptRecord) -> &'static str {
    match (a.status.as_str(), a.verified) {
        ("succeeded", Some(true)) => "verified",
        ("succeeded", Some(false)) => "unverified",
        (status, _) => status,
    }
}

/// Runs `agentrun fanout`.
pub(crate) fn run(store: Store, prices: PriceTable, args: FanOutArgs) -> Result<ExitCode, Failure> {
    let options = args.options(prices)?;
    let labels: Vec<String> = options.attempts().iter().map(AttemptSpec::label).collect();
    let view = Arc::new(Mutex::new(View {
        rows: labels
            .into_iter()
            .map(|label| Row {
                label,
                state: "queued",
                started: None,
                took: None,
                last: String::new(),
                cost: None,
            })
            .collect(),
        table: io::stderr().is_terminal(),
        drawn: 0,
    }));
    // The table's elapsed column ticks between events too.
    let done = Arc::new(AtomicBool::new(false));
    let ticker = view
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .table
        .then(|| {
            let (view, done) = (view.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    view.lock().unwrap_or_else(PoisonError::into_inner).draw();
                }
            })
        });
    let runner = agentrun_smol::Runner::new(store);
    let mut interrupts = Interrupts::install();
    let events = view.clone();
    let result = smol::block_on(
        runner
            .fanout(options)
            .on_event(move |e| {
                events
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .event(e)
            })
            .cancel_on(interrupts.requests())
            .into_future(),
    );
    done.store(true, Ordering::Relaxed);
    if let Some(t) = ticker {
        let _ = t.join();
    }
    let run = match result {
        Ok(run) => run,
        Err(
            e @ (FanOutError::Setup(_) | FanOutError::Launch { .. } | FanOutError::Options { .. }),
        ) => return Err(Failure::usage(agentrun_smol::error_chain(&e))),
        Err(e) => return Err(Failure::runtime(agentrun_smol::error_chain(&e))),
    };
    for (n, why) in &run.errors {
        say!("agentrun: attempt {n}: {why}");
    }
    let id = &run.record.fanout_id;
    match &run.record_error {
        Some(e) => say!(
            "agentrun: fanout {id}: the record could not be kept: {}",
            agentrun_smol::error_chain(e)
        ),
        None => say!("agentrun: fanout {id}: agentrun show {id}"),
    }
    let mut out = io::stdout().lock();
    let text = if args.json {
        crate::json_out::document(&run.record)?
    } else {
        render(&run.record)
    };
    crate::failure::write_or_quiet(&mut out, text.as_bytes())?;
    if run.interrupted
        && run.record.winner.is_none()
        && let Some(code) = interrupts.exit_code()
    {
        return Ok(ExitCode::from(code));
    }
    Ok(ExitCode::from(run.exit_code()))
}

/// The record for a person: one line per attempt, then the winner and how to merge it.
pub(crate) fn render(record: &FanOutRecord) -> String {
    let mut s = String::new();
    for (n, a) in record.attempts.iter().enumerate() {
        let label = match &a.model {
            Some(m) => format!("{}:{m}", a.harness),
            None => a.harness.clone(),
        };
        let _ = write!(
            s,
            "{n:>2} {label:<24} {:<11} {:>7.1}s",
            state_word(a),
            a.duration_ms as f64 / 1000.0
        );
        if let Some(c) = a.changes {
            let _ = write!(
                s,
                "  {} (+{} -{})",
                crate::failure::plural(c.files, "file", "files"),
                c.insertions,
                c.deletions
            );
        }
        if let Some(cost) = a.usage.as_ref().and_then(|u| u.cost_usd) {
            let _ = write!(s, "  ${cost:.4}");
        }
        if let Some(kind) = a.failure_kind {
            let _ = write!(s, "  ({})", kind.as_str());
        }
        if let Some(v) = &a.verification {
            let code = v
                .exit_code
                .map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"));
            let _ = write!(s, "  verify: {code}");
        }
        s.push('\n');
    }
    match record
        .winner
        .and_then(|w| record.attempts.get(w).map(|a| (w, a)))
    {
        Some((w, a)) => {
            let _ = writeln!(s, "winner: attempt {w}");
            if let Some(path) = &a.worktree {
                let _ = writeln!(s, "worktree: {path}");
            }
            if let Some(branch) = &a.branch {
                let _ = writeln!(s, "branch: {branch} (merge it with: git merge {branch})");
            }
        }
        None => s.push_str("winner: none\n"),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrun_core::fanout::AttemptStatus;

    fn view(table: bool) -> View {
        View {
            rows: ["claude:opus", "codex"]
                .map(|l| Row {
                    label: l.to_owned(),
                    state: "queued",
                    started: None,
                    took: None,
                    last: String::new(),
                    cost: None,
                })
                .into(),
            table,
            drawn: 0,
        }
    }

    #[test]
    fn the_table_is_redrawn_in_place_one_line_per_attempt() {
        let mut v = view(true);
        let first = v.frame(80);
        assert!(!first.contains("\x1b[2A"), "nothing to go up over yet");
        assert_eq!(first.matches("\x1b[2K").count(), 2);
        v.rows[0].state = "running";
        v.rows[0].last = "$ cargo test ".repeat(20);
        v.rows[1].cost = Some(0.25);
        let second = v.frame(100);
        assert!(second.starts_with("\x1b[2A"), "{second:?}");
        let lines: Vec<&str> = second.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("claude:opus") && lines[0].contains("running"));
        assert!(lines[0].contains("$ cargo test"));
        // Cut to the width (the escapes aside), so a long line never wraps and breaks the
        // redraw.
        let visible = lines[0].rsplit("\x1b[2K").next().unwrap();
        assert!(visible.chars().count() <= 99, "{visible:?}");
        assert!(lines[1].contains("$0.2500"), "{}", lines[1]);
    }

    #[test]
    fn the_state_says_whether_a_success_was_verified() {
        let mut a = AttemptRecord::new("claude", None);
        a.status = AttemptStatus::Succeeded;
        a.verified = Some(true);
        assert_eq!(state_word(&a), "verified");
        a.verified = Some(false);
        assert_eq!(state_word(&a), "unverified");
        a.status = AttemptStatus::Stopped;
        assert_eq!(state_word(&a), "stopped");
    }

    #[test]
    fn the_record_is_rendered_with_the_winner_and_its_merge() {
        let mut a = AttemptRecord::new("claude", Some("opus".into()));
        a.status = AttemptStatus::Succeeded;
        a.verified = Some(true);
        a.branch = Some("agentrun/x/0".into());
        a.worktree = Some("/w/0".into());
        let b = AttemptRecord::new("codex", None);
        let text = render(&FanOutRecord::new("x", vec![a, b], Some(0)));
        assert!(text.contains(" 0 claude:opus"), "{text}");
        assert!(text.contains("winner: attempt 0"), "{text}");
        assert!(text.contains("git merge agentrun/x/0"), "{text}");
        let none = render(&FanOutRecord::new("x", vec![], None));
        assert!(none.contains("winner: none"));
    }
}
