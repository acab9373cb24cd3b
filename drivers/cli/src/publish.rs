//! `agentrun publish`: the runs a shared store's spool holds that did not reach the bucket,
//! sent there (or given up with `--discard`).

use std::io;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::failure::{Failure, plural, write_or_quiet};
use crate::settings::Settings;

/// Arguments of `agentrun publish`.
#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    /// Print what was published as JSON: `{"published": [RUN_ID...], "failed": [{"run_id",
    /// "error"}]}`.
    #[arg(long)]
    pub(crate) json: bool,
    /// Instead of publishing, give up RUN_ID, a run that can never be published (`publish`
    /// says why): its record leaves the spool and the next `agentrun gc` collects its output.
    /// The run is lost.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "json")]
    pub(crate) discard: Option<String>,
    /// Before publishing, make RUN_ID, a run of this home that waits for no bucket (recorded
    /// while it was a local store, or spooled by an agentrun that did not yet note the bucket
    /// of each run), one that waits for this store; then publish as usual.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "discard")]
    pub(crate) adopt: Option<String>,
}

/// `publish --json`.
#[derive(Serialize)]
struct PublishJson {
    published: Vec<String>,
    failed: Vec<PublishFailure>,
}

#[derive(Serialize)]
struct PublishFailure {
    run_id: String,
    error: String,
}

/// `agentrun publish`: every run the spool of a shared store holds that is not in the bucket
/// yet, published, oldest first. Exit 0 when all went up (or there was nothing to publish), 1
/// when one could not.
pub(crate) fn publish(settings: &Settings, args: PublishArgs) -> Result<ExitCode, Failure> {
    let Some(store) = settings.existing_store()? else {
        let root = settings.store_root()?.value;
        say!(
            "agentrun: there is no store at {}; nothing to publish",
            root.display()
        );
        return Ok(ExitCode::SUCCESS);
    };
    if store.url().is_none() {
        say!(
            "agentrun: the store at {} is a local store: its runs are where they are read; \
             publish sends a shared store's runs to its bucket (--store s3://BUCKET/PREFIX)",
            store.root().display()
        );
        if args.discard.is_some() {
            return Err(Failure::usage(
                "--discard gives up a shared store's unpublished run",
            ));
        }
        if args.adopt.is_some() {
            return Err(Failure::usage(
                "--adopt gives a local run to a shared store (--store s3://BUCKET/PREFIX)",
            ));
        }
    }
    if let Some(run_id) = &args.adopt {
        match store.adopt_unpublished(run_id) {
            Ok(true) => say!(
                "agentrun: {run_id} now waits for {}",
                store.url().unwrap_or("")
            ),
            Ok(false) => {}
            Err(agentrun_fs::StoreError::UnknownRun(_)) => {
                return Err(Failure::runtime(format!(
                    "the spool at {} holds no run {run_id} (`agentrun --store {} runs` lists \
                     the runs it holds)",
                    store.root().display(),
                    store.root().display()
                )));
            }
            Err(e) => return Err(Failure::runtime(e)),
        }
    }
    if let Some(run_id) = &args.discard {
        return match store.discard_unpublished(run_id) {
            Ok(true) => {
                say!("agentrun: discarded {run_id}: the next `agentrun gc` removes its output");
                Ok(ExitCode::SUCCESS)
            }
            Ok(false) => Err(Failure::runtime(format!(
                "{run_id} is being published by another process right now; not discarded"
            ))),
            Err(agentrun_fs::StoreError::UnknownRun(_)) => Err(Failure::runtime(format!(
                "the spool holds no unpublished run {run_id} (`agentrun publish` lists them \
                 as it tries each)"
            ))),
            Err(e) => Err(Failure::runtime(e)),
        };
    }
    let mut report = PublishJson {
        published: Vec::new(),
        failed: Vec::new(),
    };
    for run_id in store.unpublished().map_err(Failure::runtime)? {
        match store.publish(&run_id) {
            Ok(true) => {
                if !args.json {
                    say!("agentrun: published {run_id}");
                }
                report.published.push(run_id);
            }
            // Being published by another process (its own capture), or published meanwhile.
            Ok(false) | Err(agentrun_fs::StoreError::UnknownRun(_)) => {}
            Err(e) => {
                if !args.json {
                    say!("agentrun: cannot publish {run_id}: {e}");
                    // Not for what publishing later can mend, nor for a damaged mark, which
                    // --discard cannot get past either (its message says what to do).
                    if !matches!(
                        e,
                        agentrun_fs::StoreError::Remote(_)
                            | agentrun_fs::StoreError::CorruptOutboxMark { .. }
                    ) {
                        say!(
                            "agentrun: if it can never go up, `agentrun publish --discard \
                             {run_id}` gives it up"
                        );
                    }
                }
                report.failed.push(PublishFailure {
                    run_id,
                    error: e.to_string(),
                });
            }
        }
    }
    if args.json {
        let text = crate::json_out::document(&report)?;
        write_or_quiet(&mut io::stdout().lock(), text.as_bytes())?;
    } else if let Some(url) = store.url() {
        let mut line = match report.published.len() {
            0 if report.failed.is_empty() => format!("every run captured for {url} is in it"),
            n => format!("published {} to {url}", plural(n as u64, "run", "runs")),
        };
        if !report.failed.is_empty() {
            line.push_str(&format!(
                "; {} could not be, and stay in the spool",
                plural(report.failed.len() as u64, "run", "runs")
            ));
        }
        say!("agentrun: {line}");
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
