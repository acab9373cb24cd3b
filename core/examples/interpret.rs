//! Interpreting an agent CLI's JSON-lines stream with the sans-IO core: the bytes come from
//! standard input here, but could come from a pipe, a socket or a file; the core only sees
//! chunks.
//!
//! ```text
//! cargo run -p agentrun-core --example interpret -- claude \
//!     < tests/fixtures/harness/claude/morpheus-claude_stream.jsonl
//! ```
//!
//! Prints the progress lines as they are decoded, then the completion: session id, final
//! message, models, usage and how the session ended. The harness name is one of `claude`,
//! `codex`, `grok`, `antigravity`, `muse`, `opencode`, `gemini`.

use std::io::Read;

use agentrun_core::harness::Harness;
use agentrun_core::harness::interpretation::{HarnessExit, Interpretation};
use agentrun_core::lines::LineSplitter;

/// Longest line kept for decoding; the rest of a longer line is dropped (and the line counted
/// as unrecognized), so memory stays bounded whatever the input.
const MAX_LINE: usize = 16 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "claude".to_owned());
    let harness = Harness::from_name(&name)?;
    let mut interpretation = Interpretation::new(harness);
    let mut splitter = LineSplitter::new(MAX_LINE);
    let mut stdin = std::io::stdin().lock();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let n = stdin.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        splitter.push(&chunk[..n], |line| show(&mut interpretation, line.bytes));
    }
    splitter.finish(|line| show(&mut interpretation, line.bytes));

    // A recorded stream has no process: it counts as a success. A live driver passes the
    // child's exit here and, for harnesses with a retained record, reads that record first.
    let completion = interpretation.finish(HarnessExit::Success).complete(None);
    println!("{}", serde_json::to_string_pretty(&completion)?);
    Ok(())
}

/// Decodes one line and shows the progress it yields.
fn show(interpretation: &mut Interpretation, line: &[u8]) {
    for progress in interpretation.handle_line(line) {
        println!("  {progress}");
    }
}
