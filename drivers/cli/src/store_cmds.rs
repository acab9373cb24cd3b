//! Store maintenance: `agentrun gc` and `agentrun verify`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use agentrun_fs::{GcOptions, Store};
use clap::Args;

use crate::duration;
use crate::failure::Failure;

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Keep unreferenced objects younger than this.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "1h")]
    grace: Duration,
    /// Report what would be removed without removing anything.
    #[arg(long)]
    dry_run: bool,
    /// Forget the records of runs older than this (e.g. 30d) so their output can be
    /// collected. Without it, every recorded run's output is kept forever.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    expire_records: Option<Duration>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct JsonArg {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn gc(store: &Store, args: GcArgs) -> Result<ExitCode, Failure> {
    let options = GcOptions {
        grace: args.grace,
        dry_run: args.dry_run,
        now: SystemTime::now(),
        expire_records: args.expire_records,
    };
    let report = store.gc(&options).map_err(Failure::runtime)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Failure::runtime)?
        );
    } else {
        let verb = if args.dry_run {
            "would remove"
        } else {
            "removed"
        };
        println!(
            "{verb} {} objects ({} bytes), {} dead captures, {} dead result-sink directories and \
             {} expired records; kept {} objects for {} records",
            report.objects_removed,
            report.bytes_removed,
            report.captures_removed,
            report.runtime_dirs_removed,
            report.records_expired,
            report.objects_kept,
            report.records
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn verify(store: &Store, args: JsonArg) -> Result<ExitCode, Failure> {
    let report = store.verify().map_err(Failure::runtime)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Failure::runtime)?
        );
    } else {
        for p in &report.problems {
            println!("problem: {p}");
        }
        println!(
            "checked {} objects and {} records: {}",
            report.objects_checked,
            report.records_checked,
            if report.problems.is_empty() {
                "ok".to_owned()
            } else {
                format!("{} problems", report.problems.len())
            }
        );
    }
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
