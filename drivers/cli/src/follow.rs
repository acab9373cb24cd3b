//! `agentrun follow RUN`: a run's streams as they grow, read through the store's library
//! (the capture files stay private to the store), then the run's exit code.

use std::io::{self, Write};
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use agentrun_core::ResultRecord;
use agentrun_core::process::RunOutcome;
use agentrun_fs::{LiveFollower, Store};
use agentrun_process::exit::{FAILED, INTERRUPTED, TIMED_OUT};
use clap::Args;

use crate::failure::Failure;
use crate::settings::Settings;

/// How often a running capture is looked at for new bytes.
const POLL: Duration = Duration::from_millis(100);
/// Bytes read per call.
const CHUNK: usize = 64 * 1024;

/// Arguments of `agentrun follow`.
#[derive(Debug, Args)]
pub(crate) struct FollowArgs {
    /// The run: its id, a unique prefix of one, or `last` (the newest run, in progress or
    /// not).
    #[arg(value_name = "RUN")]
    run: String,
    /// Start with the last N lines of each stream instead of from its start.
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<u64>,
}

/// Where a stream's bytes go: stderr for `stderr`, stdout for every other stream.
fn sink_for(name: &str) -> Box<dyn Write> {
    if name == "stderr" {
        Box::new(io::stderr())
    } else {
        Box::new(io::stdout())
    }
}

/// Runs `agentrun follow`.
pub(crate) fn follow(settings: &Settings, args: FollowArgs) -> Result<ExitCode, Failure> {
    let store = settings.store_to_read()?;
    let run_id = store
        .resolve_run_or_live(&args.run)
        .map_err(Failure::runtime)?;
    match store.follow_live(&run_id).map_err(Failure::runtime)? {
        Some(follower) => follow_live(&store, &follower, args.tail),
        None => finished(&store, &run_id, args.tail),
    }
}

fn follow_live(
    store: &Store,
    follower: &LiveFollower,
    tail: Option<u64>,
) -> Result<ExitCode, Failure> {
    let names = follower.stream_names();
    let mut sinks: Vec<Box<dyn Write>> = names.iter().map(|n| sink_for(n)).collect();
    let mut offsets = Vec::with_capacity(names.len());
    for i in 0..names.len() {
        let len = follower.len(i).map_err(Failure::runtime)?;
        offsets.push(match tail {
            Some(n) => tail_start(follower, i, len, n)?,
            None => 0,
        });
    }
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Probed before the last read: once the writer is gone nothing more is appended, so
        // the read after seeing it gone gets every byte.
        let running = follower.is_running().map_err(Failure::runtime)?;
        for (i, sink) in sinks.iter_mut().enumerate() {
            loop {
                let n = follower
                    .read_at(i, offsets[i], &mut buf)
                    .map_err(Failure::runtime)?;
                if n == 0 {
                    break;
                }
                offsets[i] += n as u64;
                if let Err(e) = sink.write_all(&buf[..n]) {
                    return gone(e);
                }
            }
            if let Err(e) = sink.flush() {
                return gone(e);
            }
        }
        if !running {
            break;
        }
        thread::sleep(POLL);
    }
    match store.record(follower.run_id()) {
        Ok(record) => Ok(ExitCode::from(exit_code(&record))),
        Err(agentrun_fs::StoreError::UnknownRun(_)) => Err(Failure::runtime(format!(
            "run {} ended without a record: the process running it stopped before it \
             finished (`agentrun gc` removes what it left)",
            follower.run_id()
        ))),
        Err(e) => Err(Failure::runtime(e)),
    }
}

/// The reader of our output went away (`follow … | head`): stop quietly.
fn gone(e: io::Error) -> Result<ExitCode, Failure> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Failure::stdout_write(e))
    }
}

/// The offset where the last `n` lines of stream `i`'s first `len` bytes start (a final line
/// without its newline counts as a line).
fn tail_start(follower: &LiveFollower, i: usize, len: u64, n: u64) -> Result<u64, Failure> {
    if n == 0 {
        return Ok(len);
    }
    let mut buf = vec![0u8; CHUNK];
    let mut end = len;
    let mut seen = 0;
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let part = &mut buf[..(end - start) as usize];
        let mut got = 0;
        while got < part.len() {
            let r = follower
                .read_at(i, start + got as u64, &mut part[got..])
                .map_err(Failure::runtime)?;
            if r == 0 {
                break;
            }
            got += r;
        }
        for (k, b) in part[..got].iter().enumerate().rev() {
            let at = start + k as u64;
            // The newline ending the last line does not start a line.
            if *b == b'\n' && at + 1 != len {
                seen += 1;
                if seen == n {
                    return Ok(at + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// A finished run: its streams (whole, or their last lines) and its exit code, at once.
fn finished(store: &Store, run_id: &str, tail: Option<u64>) -> Result<ExitCode, Failure> {
    let record = store.record(run_id).map_err(Failure::runtime)?;
    for stream in record.streams() {
        let name = stream.name.as_ref().map_or("output", |n| n.as_str());
        let skip = tail.map_or(0, |n| stream.lines.saturating_sub(n));
        let mut sink = SkipLines {
            skip,
            out: sink_for(name),
        };
        let uri = record.stream_uri(stream);
        match store.copy_to(&uri, &mut sink) {
            Ok(_) => {}
            Err(agentrun_fs::ReadError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(Failure::runtime(e)),
        }
        if let Err(e) = sink.out.flush() {
            return gone(e);
        }
    }
    Ok(ExitCode::from(exit_code(&record)))
}

/// A writer dropping everything up to and including the `skip`th newline.
struct SkipLines {
    skip: u64,
    out: Box<dyn Write>,
}

impl Write for SkipLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while self.skip > 0 {
            match rest.iter().position(|b| *b == b'\n') {
                Some(p) => {
                    self.skip -= 1;
                    rest = &rest[p + 1..];
                }
                None => return Ok(buf.len()),
            }
        }
        self.out.write_all(rest)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The exit code `run` exited with, from the record: the program's own code, 124 for a
/// timeout, 130 for an interrupted run; a record of no process run (a compaction, say) exits
/// 0 when its capture succeeded, else 1.
fn exit_code(record: &ResultRecord) -> u8 {
    let Some(run) = &record.run else {
        return if record.capture_status.as_str() == "succeeded" {
            0
        } else {
            1
        };
    };
    let code = match (run.outcome, run.exit) {
        (RunOutcome::TimedOut | RunOutcome::IdleTimedOut, _) => TIMED_OUT,
        (RunOutcome::Cancelled, _) => INTERRUPTED,
        (RunOutcome::Completed, Some(exit)) => exit.shell_code().clamp(0, 255) as u8,
        _ => FAILED,
    };
    if code == 0 && !record.faults.is_empty() {
        FAILED
    } else {
        code
    }
}
