//! Benchmark body for `scripts/bench-compaction.sh`: reads a transcript file, parses it, builds
//! the pruned retry snapshot and renders the retry input, the work a compaction retry does
//! before the summarizer runs (storing the outputs aside). Prints what it did on stderr.
//!
//! Usage: `cargo run --release -p agentrun-tests --example prune_bench -- FILE`

use std::time::Instant;

use agentrun_core::compaction::{DEFAULT_INSTRUCTIONS, prune, render};
use agentrun_core::transcript::{Transcript, TranscriptLimits};

fn main() {
    let path = std::env::args_os()
        .nth(1)
        .expect("usage: prune_bench TRANSCRIPT");
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
}
