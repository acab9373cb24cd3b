//! Compacts a transcript with a summarizer command, as a library call on tokio: here a tiny
//! shell summarizer that refuses an input over 2 000 bytes as too long, so the pruned retry
//! (tool output moved into artifacts) is what gets summarized.
//!
//! ```text
//! cargo run -p agentrun-tokio --example compact [TRANSCRIPT.json]
//! ```
//!
//! Without an argument it compacts a built-in transcript.

use agentrun_fs::Store;
use agentrun_tokio::{CompactError, CompactOptions, Runner, Summarizer, TranscriptInput};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::open(std::env::temp_dir().join("agentrun-example-store"))?;
    let runner = Runner::new(store);
    let input = match std::env::args_os().nth(1) {
        Some(path) => TranscriptInput::Path(path.into()),
        None => TranscriptInput::Bytes(sample().into_bytes()),
    };
    let summarizer = Summarizer::command(
        "/bin/sh",
        [
            "-c",
            "n=$(wc -c); [ \"$n\" -le 2000 ] || { echo agentrun:context-length-exceeded >&2; \
             exit 1; }; echo \"A summary of $n bytes of conversation.\"",
        ],
    );
    let outcome = runner
        .compact(input, CompactOptions::new(summarizer))
        .on_progress(|event| eprintln!("agentrun: {event}"))
        .await;
    match outcome {
        Ok(done) => {
            println!("{}", done.summary);
            for reference in &done.references {
                println!("{} -> {}", reference.tool_use_id, reference.uri);
            }
            Ok(())
        }
        Err(CompactError::Compaction(failed)) => {
            eprintln!("compaction failed: {failed}");
            std::process::exit(1)
        }
        Err(e) => Err(e.into()),
    }
}

fn sample() -> String {
    let log = "test tests::fixture ... FAILED\n".repeat(200);
    format!(
        r#"{{"messages": [
  {{"role": "user", "content": "Why do the tests fail?"}},
  {{"role": "assistant", "content": [{{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {{"command": "cargo test"}}}}]}},
  {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "toolu_1", "content": {log:?}}}]}},
  {{"role": "assistant", "content": "The fixture path changed."}}
]}}"#
    )
}
