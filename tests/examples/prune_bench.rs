//! Benchmark body for `scripts/bench-compaction.sh`: reads a transcript file, parses it, builds
//! the pruned retry snapshot and renders the retry input, the work a compaction retry does
//! before the summarizer runs. With a store directory it then also stores the outputs the
//! snapshot refers to, as `agentrun compact` does (one retention, one record). Prints what it
//! did on stderr.
//!
//! Usage: `cargo run --release -p agentrun-tests --example prune_bench -- FILE [STORE_DIR]`

use std::time::Instant;

use agentrun_core::compaction::{DEFAULT_INSTRUCTIONS, prune, render};
use agentrun_core::transcript::{Transcript, TranscriptLimits};

fn main() {
    let mut args = std::env::args_os().skip(1);
    let path = args
        .next()
        .expect("usage: prune_bench TRANSCRIPT [STORE_DIR]");
    let store_dir = args.next();
    let start = Instant::now();
    let bytes = std::fs::read(&path).expect("read the transcript");
    let size = bytes.len();
    let transcript =
        Transcript::from_json(&bytes, &TranscriptLimits::default()).expect("a valid transcript");
    drop(bytes);
    let parsed = start.elapsed();
    let pruned = prune(&transcript, &Default::default());
    let retry = render(DEFAULT_INSTRUCTIONS, &pruned.snapshot);
    let retained: usize = pruned.retain.iter().map(|r| r.text.len()).sum();
    eprintln!(
        "{size} bytes, {} messages: parsed in {:.3} s, pruned and rendered in {:.3} s; \
         {} outputs to retain ({retained} bytes), {} references, {} artifact reads omitted, \
         retry input {} bytes",
        transcript.messages.len(),
        parsed.as_secs_f64(),
        (start.elapsed() - parsed).as_secs_f64(),
        pruned.retain.len(),
        pruned.references.len(),
        pruned.omitted,
        retry.len()
    );
    let Some(dir) = store_dir else {
        return;
    };
    let store = agentrun_fs::Store::open(dir).expect("open the store");
    let begun = Instant::now();
    let mut session = store.begin_retention().expect("begin the retention");
    session.retain(&pruned.retain).expect("store the outputs");
    let kept = session.finish().expect("write the record");
    eprintln!(
        "retained {} outputs in {:.3} s; {} record(s) in the store, {} artifacts kept by {}",
        pruned.retain.len(),
        begun.elapsed().as_secs_f64(),
        store.records().expect("list the records").len(),
        kept.as_ref().map_or(0, |k| k.kept.len()),
        kept.as_ref().map_or("none", |k| k.run_id.as_str()),
    );
}
