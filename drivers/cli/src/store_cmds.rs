//! Commands over the store: `show` and `runs` (recorded runs), `gc` and `verify`
//! (maintenance). None of them creates a store: on a missing one they say so, and the
//! whole-store commands (`runs`, `gc`, `verify`) then exit 0 with nothing listed.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentrun_core::ResultRecord;
use agentrun_core::process::Exit;
use agentrun_core::progress::{format_bytes, format_elapsed};
use agentrun_fs::config::{RetentionError, format_duration, parse_retention};
use agentrun_fs::{GcOptions, GcReport, LiveRun, RunEntry, RunListing};
use clap::Args;
use serde::Serialize;

use crate::duration;
use crate::failure::{FAILED, Failure, plural, write_or_quiet};
use crate::settings::{Settings, Source};

/// Arguments of `agentrun show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// A run, an auto session or a fan-out: its id (printed on stderr by `agentrun run`, listed
    /// by `agentrun runs` and `agentrun sessions`; a fan-out's printed by `agentrun fanout`), a
    /// unique prefix of a run or session id, or `last` (the newest run).
    #[arg(value_name = "RUN|SESSION")]
    run_id: String,
    /// Print the record as JSON: `{"run_id", "status", "artifacts", "model_text", "record"}`.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `agentrun runs`.
#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// How many runs to list, newest first (at least 1; runs in progress come besides).
    #[arg(long, short = 'n', value_name = "N", default_value = "20")]
    limit: std::num::NonZeroUsize,
    /// Only runs with this status (repeat for several).
    #[arg(long, value_name = "STATUS", value_parser = STATUSES)]
    status: Vec<String>,
    /// Only runs that started within DURATION (30m, 2d), or at or after a UTC date or time
    /// (2025-11-30, 2025-11-30T14:00:00).
    #[arg(long, value_name = "DURATION|DATE", value_parser = parse_since)]
    since: Option<Since>,
    /// Only runs labelled LABEL (`agentrun run --label LABEL`).
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// Print a JSON array of `{"run_id", "status", "reason", "exit", "started_unix_ms",
    /// "finished_unix_ms", "duration_ms", "cwd", "label", "command", "description",
    /// "incomplete", "streams": [{"name", "lines", "bytes", "uri"}]}`. A run in progress has
    /// status `running` (or `abandoned`: the process running it died), an `elapsed_ms` after
    /// `duration_ms`, null `reason`, `exit`, `finished_unix_ms`, `duration_ms`, `lines` and
    /// `uri`, and the bytes captured so far.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The statuses `runs --status` takes: how a recorded run ended, or the state of one in
/// progress.
const STATUSES: [&str; 5] = ["succeeded", "failed", "cancelled", "running", "abandoned"];

/// The statuses of runs in progress.
const LIVE_STATUSES: [&str; 2] = ["running", "abandoned"];

/// A `--since` value: a period back from now, or a moment.
#[derive(Debug, Clone, Copy)]
enum Since {
    Ago(Duration),
    At(SystemTime),
}

impl Since {
    fn at(self, now: SystemTime) -> SystemTime {
        match self {
            Since::Ago(d) => now.checked_sub(d).unwrap_or(UNIX_EPOCH),
            Since::At(t) => t,
        }
    }
}

/// `30m`, `2d` (see `duration::parse`), or a UTC date `YYYY-MM-DD` with an optional time
/// `THH:MM[:SS]` (or a space instead of `T`; a final `Z` is allowed).
fn parse_since(s: &str) -> Result<Since, String> {
    if s.len() >= 10 && s.as_bytes()[4] == b'-' {
        return parse_utc(s).map(Since::At).ok_or_else(|| {
            format!(
                "invalid date {s:?}: expected YYYY-MM-DD, optionally followed by THH:MM or \
                 THH:MM:SS (UTC)"
            )
        });
    }
    duration::parse(s)
        .map(Since::Ago)
        .map_err(|e| e.to_string())
}

/// A UTC date and optional time ([`parse_since`]).
fn parse_utc(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = match s.split_once(['T', ' ']) {
        Some((date, time)) => (date, Some(time)),
        None => (s, None),
    };
    let number = |t: &str, digits: usize| -> Option<u32> {
        (t.len() == digits && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    let mut parts = date.split('-');
    let (y, m, d) = (
        number(parts.next()?, 4)?,
        number(parts.next()?, 2)?,
        number(parts.next()?, 2)?,
    );
    if parts.next().is_some() || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    let (mut h, mut min, mut sec) = (0, 0, 0);
    if let Some(time) = time {
        let mut parts = time.split(':');
        h = number(parts.next()?, 2)?;
        min = number(parts.next()?, 2)?;
        if let Some(p) = parts.next() {
            sec = number(p, 2)?;
        }
        if parts.next().is_some() || h > 23 || min > 59 || sec > 59 {
            return None;
        }
    }
    let days = agentrun_core::time::days_from_civil(i64::from(y), m, d);
    let secs = u64::try_from(days).ok()? * 86_400 + u64::from(h * 3600 + min * 60 + sec);
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

fn days_in_month(y: u32, m: u32) -> u32 {
    let leap = (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Arguments of `agentrun gc`.
#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Forget the records of runs older than this (e.g. 7d, 12h), or `never` to keep every
    /// record [default: 30d, or `[retention] records` in the config file].
    #[arg(long, value_name = "DURATION|never", value_parser = parse_retention_arg,
          visible_alias = "expire-records")]
    retention: Option<Retention>,
    /// Keep unreferenced objects younger than this [default: 1h, or `[retention] grace`].
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    grace: Option<Duration>,
    /// Report what would be removed without removing anything.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A `--retention` value: a period, or `None` for `never`. A type of its own because clap
/// reads a field `Option<Option<T>>` as a flag whose value may be left out, and then refuses
/// the parser's `Option` at run time.
#[derive(Debug, Clone, Copy)]
struct Retention(Option<Duration>);

fn parse_retention_arg(s: &str) -> Result<Retention, RetentionError> {
    parse_retention(s).map(Retention)
}

/// `word` as a shell would need it typed: bare when it has only characters no shell treats
/// specially, else in single quotes, or in `$'…'` with escapes when it holds control
/// characters (so a newline in an argument cannot break the table's line).
fn shell_quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    if !word.chars().any(char::is_control) {
        return format!("'{}'", word.replace('\'', r"'\''"));
    }
    let mut out = String::from("$'");
    for c in word.chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\t' => out.push_str(r"\t"),
            '\'' => out.push_str(r"\'"),
            '\\' => out.push_str(r"\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Arguments of `agentrun verify`.
#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `agentrun show RUN|SESSION`: for a run, the recorded preview on stdout and the footer on stderr, as the
/// run printed them (from the record alone: nothing is rerun).
pub(crate) fn show(settings: &Settings, args: ShowArgs) -> Result<ExitCode, Failure> {
    let store = settings.store_to_read()?;
    let mut out = io::stdout().lock();
    // A fan-out id has the shape of a run id; its record is the fan-out's.
    if agentrun_fs::fanout::exists(&store, &args.run_id) {
        let record =
            agentrun_fs::fanout::read_record(&store, &args.run_id).map_err(Failure::runtime)?;
        let text = if args.json {
            crate::json_out::document(&record)?
        } else {
            crate::fanout::render(&record)
        };
        write_or_quiet(&mut out, text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let run_id = match store
        .resolve_run_or_session(&args.run_id)
        .map_err(Failure::runtime)?
    {
        agentrun_fs::Named::Session(id) => return crate::sessions::show(&store, &id, args.json),
        agentrun_fs::Named::Run(id) => id,
        other => return Err(Failure::runtime(format!("cannot show {other:?}"))),
    };
    let record = store.record(&run_id).map_err(Failure::runtime)?;
    if args.json {
        #[derive(Serialize)]
        struct Shown<'a> {
            run_id: &'a str,
            status: String,
            reason: Option<String>,
            command: Option<&'a [String]>,
            artifacts: agentrun_core::record::ArtifactUris,
            model_text: String,
            record: &'a ResultRecord,
        }
        let (status, reason) = status_of(&record);
        let shown = Shown {
            run_id: &record.run_id,
            status,
            reason,
            command: record.run.as_ref().map(|r| &r.command[..]),
            artifacts: record.artifact_uris(),
            model_text: record.render(),
            record: &record,
        };
        write_or_quiet(&mut out, crate::json_out::document(&shown)?.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    write_or_quiet(&mut out, record.render().as_bytes())?;
    say!("{}", crate::run::read_commands(&record, &summary(&record)));
    Ok(ExitCode::SUCCESS)
}

/// How a recorded run ended, in the words `run` printed: from the process run's own account
/// when the record has one, else from the record's status.
fn status_of(record: &ResultRecord) -> (String, Option<String>) {
    match &record.run {
        Some(run) => (
            run.outcome.status(run.exit).as_str().to_owned(),
            Some(run.outcome.reason(run.exit)),
        ),
        None => (record.capture_status.as_str().to_owned(), None),
    }
}

/// The run summary line, from the record alone.
fn summary(record: &ResultRecord) -> String {
    if let Some(run) = &record.run {
        return crate::run::run_summary(record, run.outcome, run.exit);
    }
    let mut s = format!(
        "agentrun: run {} {}",
        record.run_id,
        record.capture_status.as_str()
    );
    if record.incomplete {
        s.push_str(" (output incomplete)");
    }
    s.push_str(&crate::run::sizes(record));
    s
}

/// One line of `runs`: a run in progress or a recorded run, as the table and the JSON show it.
#[derive(Debug, Serialize)]
struct RunRow<'a> {
    run_id: &'a str,
    status: String,
    reason: Option<String>,
    exit: Option<Exit>,
    started_unix_ms: u64,
    finished_unix_ms: Option<u64>,
    duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    elapsed_ms: Option<u64>,
    cwd: Option<&'a str>,
    label: Option<&'a str>,
    command: Option<&'a [String]>,
    /// What a record that describes no command is (a compaction's retained output, say).
    description: Option<&'a str>,
    incomplete: bool,
    streams: Vec<StreamRow<'a>>,
}

#[derive(Debug, Serialize)]
struct StreamRow<'a> {
    name: &'a str,
    lines: Option<u64>,
    bytes: u64,
    uri: Option<String>,
}

impl<'a> RunRow<'a> {
    fn live(r: &'a LiveRun, now: SystemTime) -> Self {
        RunRow {
            run_id: &r.run_id,
            status: r.state.as_str().to_owned(),
            reason: None,
            exit: None,
            started_unix_ms: unix_ms(r.started),
            finished_unix_ms: None,
            duration_ms: None,
            elapsed_ms: Some(elapsed(r.started, now).as_millis() as u64),
            cwd: r.cwd.as_deref(),
            label: r.label.as_deref(),
            command: r.command.as_deref(),
            description: None,
            incomplete: false,
            streams: r
                .streams
                .iter()
                .map(|s| StreamRow {
                    name: &s.name,
                    lines: None,
                    bytes: s.bytes,
                    uri: None,
                })
                .collect(),
        }
    }

    fn recorded(r: &'a RunEntry) -> Self {
        let (status, reason) = status_of(&r.record);
        let run = r.record.run.as_ref();
        let display = r.record.display();
        RunRow {
            run_id: &r.run_id,
            status,
            reason,
            exit: run.and_then(|run| run.exit),
            started_unix_ms: run.map_or_else(|| unix_ms(r.started()), |run| run.started_unix_ms),
            finished_unix_ms: Some(unix_ms(r.finished)),
            duration_ms: run.map(|run| run.duration_ms),
            elapsed_ms: None,
            cwd: run.and_then(|run| run.cwd.as_deref()),
            label: run.and_then(|run| run.label.as_deref()),
            command: run.map(|run| &run.command[..]),
            description: (run.is_none() && !display.is_empty()).then_some(display),
            incomplete: r.record.incomplete,
            streams: r
                .record
                .streams()
                .iter()
                .map(|s| StreamRow {
                    name: s.name.as_ref().map_or("output", |n| n.as_str()),
                    lines: Some(s.lines),
                    bytes: s.bytes,
                    uri: Some(r.record.stream_uri(s).to_string()),
                })
                .collect(),
        }
    }

    /// The table's cells: run id, finished, duration, status, output, directory, command.
    fn cells(&self, home: Option<&str>) -> [String; 7] {
        let finished = self.finished_unix_ms.map_or("-".to_owned(), |ms| {
            utc(UNIX_EPOCH + Duration::from_millis(ms))
        });
        let duration = match (self.duration_ms, self.elapsed_ms) {
            (Some(ms), _) => format_run_duration(Duration::from_millis(ms)),
            (None, Some(ms)) => format_elapsed(Duration::from_millis(ms)),
            (None, None) => "-".to_owned(),
        };
        let mut status = match &self.reason {
            Some(reason) if self.status != "succeeded" => format!("{} ({reason})", self.status),
            _ => self.status.clone(),
        };
        if self.incomplete {
            status.push('*');
        }
        let output: Vec<String> = self
            .streams
            .iter()
            .map(|s| format!("{} {}", s.name, format_bytes(s.bytes)))
            .collect();
        let command = match (self.command, self.description) {
            (Some(command), _) => command_cell(command),
            (None, Some(description)) => format!("({})", one_line(description)),
            (None, None) => "(no command recorded)".to_owned(),
        };
        [
            self.run_id.to_owned(),
            finished,
            duration,
            status,
            output.join(", "),
            self.cwd.map_or("-".to_owned(), |dir| cwd_cell(dir, home)),
            command,
        ]
    }
}

/// What `runs` lists: the filters of its command line.
struct RunFilter {
    statuses: Vec<String>,
    since: Option<SystemTime>,
    label: Option<String>,
}

impl RunFilter {
    fn keeps(&self, row: &RunRow<'_>) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&row.status))
            && self.label.as_deref().is_none_or(|l| row.label == Some(l))
    }

    /// Whether some status asked for is one a record can have (none asked: every one).
    fn wants_records(&self) -> bool {
        self.statuses.is_empty()
            || self
                .statuses
                .iter()
                .any(|s| !LIVE_STATUSES.contains(&s.as_str()))
    }
}

/// `agentrun runs`: the most recent runs, newest first, the runs in progress before them.
pub(crate) fn runs(settings: &Settings, args: RunsArgs) -> Result<ExitCode, Failure> {
    let mut out = io::stdout().lock();
    let Some(store) = settings.existing_store()? else {
        if args.json {
            write_or_quiet(&mut out, b"[]\n")?;
        } else {
            say!(
                "agentrun: no runs yet: there is no store at {}",
                settings.store_root()?.value.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let now = SystemTime::now();
    let filter = RunFilter {
        statuses: args.status,
        since: args.since.map(|s| s.at(now)),
        label: args.label,
    };
    let listing = if filter.wants_records() {
        store
            .recent_runs_where(args.limit.get(), filter.since, |entry| {
                filter.keeps(&RunRow::recorded(entry))
            })
            .map_err(Failure::runtime)?
    } else {
        RunListing::default()
    };
    // Newest first, like the records, and before them: a run in progress started after every
    // run that has finished (or its writer died, which the status says).
    let mut live = store.live_runs().map_err(Failure::runtime)?;
    live.reverse();
    let rows: Vec<RunRow<'_>> = live
        .iter()
        .filter(|r| filter.since.is_none_or(|since| r.started >= since))
        .map(|r| RunRow::live(r, now))
        .filter(|row| filter.keeps(row))
        .chain(listing.runs.iter().map(RunRow::recorded))
        .collect();
    if args.json {
        write_or_quiet(&mut out, crate::json_out::document(&rows)?.as_bytes())?;
        return Ok(report_unreadable(&listing));
    }
    if rows.is_empty() {
        if listing.is_complete() {
            let filtered = !filter.statuses.is_empty() || filter.since.is_some();
            if filtered || filter.label.is_some() {
                say!("agentrun: no runs match in {}", store.root().display());
            } else {
                say!("agentrun: no runs recorded in {}", store.root().display());
            }
        }
        return Ok(report_unreadable(&listing));
    }
    let home = std::env::var("HOME").ok().filter(|h| h.len() > 1);
    let mut table = vec![[
        "RUN ID".to_owned(),
        "FINISHED (UTC)".to_owned(),
        "DURATION".to_owned(),
        "STATUS".to_owned(),
        "OUTPUT".to_owned(),
        "CWD".to_owned(),
        "COMMAND".to_owned(),
    ]];
    table.extend(rows.iter().map(|row| row.cells(home.as_deref())));
    write_or_quiet(&mut out, crate::sessions::table(&table).as_bytes())?;
    say!("agentrun: `agentrun show RUN_ID` shows a run again; * marks incomplete output");
    Ok(report_unreadable(&listing))
}

/// A run's duration as the table shows it: `85ms`, `2.3s`, then as [`format_elapsed`].
fn format_run_duration(d: Duration) -> String {
    match d.as_millis() {
        0..1000 => format!("{}ms", d.as_millis()),
        1000..60_000 => format!("{:.1}s", d.as_secs_f64()),
        _ => format_elapsed(d),
    }
}

/// A directory as the table shows it: under the home directory as `~/…`, and cut at the
/// front to its last 40 characters.
fn cwd_cell(dir: &str, home: Option<&str>) -> String {
    let dir = match home.and_then(|h| dir.strip_prefix(h)) {
        Some("") => "~".to_owned(),
        Some(rest) if rest.starts_with('/') => format!("~{rest}"),
        _ => dir.to_owned(),
    };
    let dir = one_line(&dir);
    let chars = dir.chars().count();
    if chars <= 40 {
        return dir;
    }
    let tail: String = dir.chars().skip(chars - 39).collect();
    format!("…{tail}")
}

/// `text`'s first line, control characters shown as `?`.
fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    first
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A command as the `runs` table shows it: shell-quoted, cut after 60 characters.
fn command_cell(command: &[String]) -> String {
    let words: Vec<String> = command.iter().map(|w| shell_quoted(w)).collect();
    let line = words.join(" ");
    match line.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// How long ago `started` was (zero for a clock that went back).
fn elapsed(started: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(started).unwrap_or_default()
}

/// One line on stderr per record `runs` could not read, naming the run and why; the exit code
/// is then [`FAILED`], so a script notices that the list is not complete.
fn report_unreadable(listing: &RunListing) -> ExitCode {
    if listing.is_complete() {
        return ExitCode::SUCCESS;
    }
    let mut err = io::stderr().lock();
    for bad in &listing.unreadable {
        let _ = writeln!(
            err,
            "agentrun: error: cannot list run {}: {}",
            bad.run_id, bad.error
        );
    }
    ExitCode::from(FAILED)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `2026-11-30 17:19:01`.
pub(crate) fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = agentrun_core::time::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `agentrun gc`: apply the retention period and remove what nothing references.
pub(crate) fn gc(settings: &Settings, args: GcArgs) -> Result<ExitCode, Failure> {
    let retention = settings.retention(args.retention.map(|r| r.0));
    let grace = settings.grace(args.grace);
    let Some(store) = settings.existing_store()? else {
        let root = settings.store_root()?.value;
        if args.json {
            let report = GcJson {
                report: &GcReport::default(),
                dry_run: args.dry_run,
                retention: retention.value.map(format_duration),
                grace: format_duration(grace.value),
                store_missing: Some(root.display().to_string()),
            };
            let text = crate::json_out::document(&report)?;
            write_or_quiet(&mut io::stdout().lock(), text.as_bytes())?;
        } else {
            say!(
                "agentrun: there is no store at {}; nothing to collect",
                root.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let options = GcOptions {
        grace: grace.value,
        dry_run: args.dry_run,
        now: SystemTime::now(),
        expire_records: retention.value,
    };
    let report = store.gc(&options).map_err(Failure::runtime)?;
    let mut out = io::stdout().lock();
    if args.json {
        let report = GcJson {
            report: &report,
            dry_run: args.dry_run,
            retention: retention.value.map(format_duration),
            grace: format_duration(grace.value),
            store_missing: None,
        };
        write_or_quiet(&mut out, crate::json_out::document(&report)?.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = gc_text(
        &report,
        args.dry_run,
        retention.value,
        &retention.source,
        grace.value,
    );
    write_or_quiet(&mut out, text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `gc --json`: the library's report, then what it was run with.
#[derive(Serialize)]
struct GcJson<'a> {
    #[serde(flatten)]
    report: &'a GcReport,
    dry_run: bool,
    retention: Option<String>,
    grace: String,
    /// The store that does not exist (nothing was collected).
    #[serde(skip_serializing_if = "Option::is_none")]
    store_missing: Option<String>,
}

/// `verify --json`: the library's report, and the store when it does not exist.
#[derive(Serialize)]
struct VerifyJson<'a> {
    #[serde(flatten)]
    report: &'a agentrun_fs::VerifyReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    store_missing: Option<String>,
}

/// What GC removed, then what it kept and why.
fn gc_text(
    report: &GcReport,
    dry_run: bool,
    retention: Option<Duration>,
    retention_source: &Source,
    grace: Duration,
) -> String {
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut removed = vec![format!(
        "{} ({})",
        plural(report.objects_removed, "object", "objects"),
        plural(report.bytes_removed, "byte", "bytes")
    )];
    if report.records_expired > 0 {
        removed.push(plural(
            report.records_expired,
            "expired record",
            "expired records",
        ));
    }
    if report.captures_removed > 0 {
        removed.push(plural(
            report.captures_removed,
            "capture of a crashed run",
            "captures of crashed runs",
        ));
    }
    if report.runtime_dirs_removed > 0 {
        removed.push(plural(
            report.runtime_dirs_removed,
            "leftover result-sink directory",
            "leftover result-sink directories",
        ));
    }
    let why_records = match retention {
        Some(period) => format!(
            "younger than the {} retention period ({retention_source})",
            format_duration(period)
        ),
        None => format!("records are kept forever (retention \"never\", {retention_source})"),
    };
    let referenced = report.objects_kept - report.objects_in_grace;
    let mut text = format!(
        "{verb} {}\nkept {} ({why_records}) and the {} {} reference{}",
        removed.join(", "),
        plural(report.records, "record", "records"),
        plural(referenced, "object", "objects"),
        if report.records == 1 { "it" } else { "they" },
        if report.records == 1 { "s" } else { "" },
    );
    if report.objects_in_grace > 0 {
        text.push_str(&format!(
            ", and {} no record references yet, younger than the {} grace period",
            plural(report.objects_in_grace, "object", "objects"),
            format_duration(grace)
        ));
    }
    text.push('\n');
    text
}

/// `agentrun verify`: exit 0 when healthy, 1 when problems were found.
pub(crate) fn verify(settings: &Settings, args: VerifyArgs) -> Result<ExitCode, Failure> {
    // One rule with `runs` and `gc`: a store that does not exist has nothing wrong with it,
    // so a whole-store command says so and exits 0 (only `read` and `show`, which name
    // something that must be there, fail on it).
    let Some(store) = settings.existing_store()? else {
        let root = settings.store_root()?.value;
        if args.json {
            let report = VerifyJson {
                report: &agentrun_fs::VerifyReport::default(),
                store_missing: Some(root.display().to_string()),
            };
            let text = crate::json_out::document(&report)?;
            write_or_quiet(&mut io::stdout().lock(), text.as_bytes())?;
        } else {
            say!(
                "agentrun: there is no store at {}; nothing to verify",
                root.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let report = store.verify().map_err(Failure::runtime)?;
    let mut out = io::stdout().lock();
    if args.json {
        let report = VerifyJson {
            report: &report,
            store_missing: None,
        };
        write_or_quiet(&mut out, crate::json_out::document(&report)?.as_bytes())?;
    } else {
        let mut text = String::new();
        for p in &report.problems {
            text.push_str(&format!("problem: {p}\n"));
        }
        text.push_str(&format!(
            "checked {} and {}: {}\n",
            plural(report.objects_checked, "object", "objects"),
            plural(report.records_checked, "record", "records"),
            if report.problems.is_empty() {
                "ok".to_owned()
            } else {
                plural(report.problems.len() as u64, "problem", "problems")
            }
        ));
        write_or_quiet(&mut out, text.as_bytes())?;
    }
    let _ = out.flush();
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_sizes_read_naturally() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00");
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_764_523_141)),
            "2025-11-30 17:19:01"
        );
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00"
        );
    }

    #[test]
    fn since_takes_a_period_or_a_utc_date_and_time() {
        let at = |s: &str| match parse_since(s) {
            Ok(Since::At(t)) => t,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(
            at("2025-11-30T17:19:01Z"),
            UNIX_EPOCH + Duration::from_secs(1_764_523_141)
        );
        assert_eq!(
            at("2025-11-30 17:19"),
            UNIX_EPOCH + Duration::from_secs(1_764_523_140)
        );
        assert_eq!(
            at("2000-02-29"),
            UNIX_EPOCH + Duration::from_secs(951_782_400)
        );
        assert!(matches!(parse_since("2h"), Ok(Since::Ago(d)) if d == Duration::from_secs(7200)));
        for bad in [
            "2025-13-01",
            "2025-02-29",
            "2025-1-01",
            "2025-11-30T24:00",
            "yesterday",
        ] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn directories_are_shortened_from_the_front() {
        assert_eq!(cwd_cell("/home/me", Some("/home/me")), "~");
        assert_eq!(cwd_cell("/home/me/src/app", Some("/home/me")), "~/src/app");
        assert_eq!(cwd_cell("/home/meow", Some("/home/me")), "/home/meow");
        let deep = format!("/{}", "d/".repeat(30));
        let cell = cwd_cell(&deep, None);
        assert_eq!(cell.chars().count(), 40);
        assert!(cell.starts_with('…') && cell.ends_with("d/"), "{cell}");
        assert_eq!(format_run_duration(Duration::from_millis(85)), "85ms");
        assert_eq!(format_run_duration(Duration::from_millis(2340)), "2.3s");
        assert_eq!(format_run_duration(Duration::from_secs(65)), "1m05s");
    }

    #[test]
    fn commands_are_listed_as_a_shell_would_need_them() {
        assert_eq!(shell_quoted("cargo"), "cargo");
        assert_eq!(shell_quoted("--flag=a/b.c"), "--flag=a/b.c");
        assert_eq!(shell_quoted(""), "''");
        assert_eq!(shell_quoted("trap \"\" TERM"), "'trap \"\" TERM'");
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
        assert_eq!(shell_quoted("a\nb\t'\\\u{7}"), r"$'a\nb\t\'\\\u0007'");
    }

    #[test]
    fn gc_says_what_it_kept_and_why() {
        let report = GcReport {
            objects_kept: 5,
            objects_in_grace: 2,
            records: 1,
            ..GcReport::default()
        };
        let text = gc_text(
            &report,
            false,
            Some(Duration::from_secs(30 * 86_400)),
            &Source::Default,
            Duration::from_secs(3600),
        );
        assert_eq!(
            text,
            "removed 0 objects (0 bytes)\nkept 1 record (younger than the 30d retention period \
             (default)) and the 3 objects it references, and 2 objects no record references \
             yet, younger than the 1h grace period\n"
        );
    }
}
