//! Commands over the store: `show` and `runs` (recorded runs), `gc` and `verify`
//! (maintenance). None of them creates a store: on a missing one they say so, and the
//! whole-store commands (`runs`, `gc`, `verify`) then exit 0 with nothing listed.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentrun_core::ResultRecord;
use agentrun_fs::config::{RetentionError, format_duration, parse_retention};
use agentrun_fs::{GcOptions, GcReport, RunListing};
use clap::Args;

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
    /// How many runs to list, newest first (at least 1).
    #[arg(long, short = 'n', value_name = "N", default_value = "20")]
    limit: std::num::NonZeroUsize,
    /// Print a JSON array of `{"run_id", "started_unix_ms", "finished_unix_ms", "command",
    /// "exit", "status", "reason", "incomplete", "streams": [{"name", "lines", "bytes",
    /// "uri"}]}`. A run in progress has status `running` (or `abandoned`: the process
    /// running it died), an `elapsed_ms`, null `finished_unix_ms`, `exit`, `lines` and `uri`,
    /// and the bytes captured so far.
    #[arg(long)]
    pub(crate) json: bool,
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
            format!(
                "{:#}\n",
                serde_json::to_value(&record).map_err(Failure::runtime)?
            )
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
        let (status, reason) = status_of(&record);
        let json = serde_json::json!({
            "run_id": record.run_id,
            "status": status,
            "reason": reason,
            "command": record.run.as_ref().map(|r| &r.command),
            "artifacts": record.artifact_uris(),
            "model_text": record.render(),
            "record": record,
        });
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
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

/// `agentrun runs`: the most recent runs, newest first.
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
    let listing = store
        .recent_runs(args.limit.get())
        .map_err(Failure::runtime)?;
    // Newest first, like the records, and before them: a run in progress started after every
    // run that has finished (or its writer died, which the status says).
    let mut live = store.live_runs().map_err(Failure::runtime)?;
    live.reverse();
    let now = SystemTime::now();
    let runs = &listing.runs;
    if args.json {
        let live_json = live.iter().map(|r| {
            let streams: Vec<serde_json::Value> = r
                .streams
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "name": s.name,
                        "lines": null,
                        "bytes": s.bytes,
                        "uri": null,
                    })
                })
                .collect();
            serde_json::json!({
                "run_id": r.run_id,
                "started_unix_ms": unix_ms(r.started),
                "finished_unix_ms": null,
                "elapsed_ms": elapsed(r.started, now).as_millis() as u64,
                "command": r.command,
                "exit": null,
                "status": r.state.as_str(),
                "reason": null,
                "incomplete": false,
                "streams": streams,
            })
        });
        let list: Vec<serde_json::Value> = live_json
            .chain(runs.iter().map(|r| {
                let streams: Vec<serde_json::Value> = r
                    .record
                    .streams()
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "name": s.name.as_ref().map(|n| n.as_str()),
                            "lines": s.lines,
                            "bytes": s.bytes,
                            "uri": r.record.stream_uri(s).to_string(),
                        })
                    })
                    .collect();
                let (status, reason) = status_of(&r.record);
                let run = r.record.run.as_ref();
                serde_json::json!({
                    "run_id": r.run_id,
                    "started_unix_ms": run.map(|run| run.started_unix_ms),
                    "finished_unix_ms": unix_ms(r.finished),
                    "command": run.map(|run| &run.command),
                    "exit": run.and_then(|run| run.exit),
                    "status": status,
                    "reason": reason,
                    "incomplete": r.record.incomplete,
                    "streams": streams,
                })
            }))
            .collect();
        let json = serde_json::Value::from(list);
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
        return Ok(report_unreadable(&listing));
    }
    if runs.is_empty() && live.is_empty() {
        if listing.is_complete() {
            say!("agentrun: no runs recorded in {}", store.root().display());
        }
        return Ok(report_unreadable(&listing));
    }
    let mut rows = vec![[
        "RUN ID".to_owned(),
        "FINISHED (UTC)".to_owned(),
        "STATUS".to_owned(),
        "OUTPUT".to_owned(),
        "COMMAND".to_owned(),
    ]];
    for r in &live {
        let sizes: Vec<String> = r
            .streams
            .iter()
            .map(|s| format!("{} {}", s.name, human_bytes(s.bytes)))
            .collect();
        rows.push([
            r.run_id.clone(),
            format!(
                "({} for {})",
                r.state.as_str(),
                format_duration_coarse(elapsed(r.started, now))
            ),
            r.state.as_str().to_owned(),
            sizes.join(", "),
            r.command.as_deref().map_or(String::new(), command_cell),
        ]);
    }
    for r in runs {
        let sizes: Vec<String> = r
            .record
            .streams()
            .iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s.name.as_ref().map_or("output", |n| n.as_str()),
                    human_bytes(s.bytes)
                )
            })
            .collect();
        let (status, reason) = status_of(&r.record);
        let mut status = match reason {
            Some(reason) if status != "succeeded" => format!("{status} ({reason})"),
            _ => status,
        };
        if r.record.incomplete {
            status.push('*');
        }
        let command = r
            .record
            .run
            .as_ref()
            .map_or(String::new(), |run| command_cell(&run.command));
        rows.push([
            r.run_id.clone(),
            utc(r.finished),
            status,
            sizes.join(", "),
            command,
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    write_or_quiet(&mut out, text.as_bytes())?;
    say!("agentrun: `agentrun show RUN_ID` shows a run again; * marks incomplete output");
    Ok(report_unreadable(&listing))
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

/// `12s`, `3m05s`, `2h07m`: an elapsed time to the second, as people read it.
pub(crate) fn format_duration_coarse(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
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

/// `812 B`, `4.2 KiB`, `3.0 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `agentrun gc`: apply the retention period and remove what nothing references.
pub(crate) fn gc(settings: &Settings, args: GcArgs) -> Result<ExitCode, Failure> {
    let retention = settings.retention(args.retention.map(|r| r.0));
    let grace = settings.grace(args.grace);
    let Some(store) = settings.existing_store()? else {
        let root = settings.store_root()?.value;
        if args.json {
            let json = serde_json::json!({ "store_missing": root.display().to_string() });
            write_or_quiet(&mut io::stdout().lock(), format!("{json:#}\n").as_bytes())?;
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
        let mut json = serde_json::to_value(&report).map_err(Failure::runtime)?;
        json["dry_run"] = args.dry_run.into();
        json["retention"] = retention.value.map(format_duration).into();
        json["grace"] = format_duration(grace.value).into();
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
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
            let mut json = serde_json::to_value(agentrun_fs::VerifyReport::default())
                .map_err(Failure::runtime)?;
            json["store_missing"] = root.display().to_string().into();
            write_or_quiet(&mut io::stdout().lock(), format!("{json:#}\n").as_bytes())?;
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
        let json = serde_json::to_value(&report).map_err(Failure::runtime)?;
        write_or_quiet(&mut out, format!("{json:#}\n").as_bytes())?;
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
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(4300), "4.2 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
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
