//! Replays every committed fuzz corpus input through its target's body on stable Rust, so CI
//! checks the seeds and every crash input ever found without nightly or cargo-fuzz.

use std::path::Path;

use agentrun_tests::fuzz_bodies;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "corpus {} is empty", dir.display());
    for path in inputs {
        let data = std::fs::read(&path).unwrap();
        // Name the input in the failure: the body's own panic message says which property broke.
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(
            outcome.is_ok(),
            "{target} corpus input {} violates a property",
            path.display()
        );
    }
}

#[test]
fn uri_corpus() {
    replay("uri", fuzz_bodies::uri);
}

#[test]
fn preview_corpus() {
    replay("preview", fuzz_bodies::preview);
}

#[test]
fn page_corpus() {
    replay("page", fuzz_bodies::page);
}

#[test]
fn auto_mode_text_corpus() {
    replay("auto_mode_text", fuzz_bodies::auto_mode_text);
}

#[test]
fn compaction_corpus() {
    replay("compaction", fuzz_bodies::compaction);
}

/// The harness decoders' corpora: both bodies of each dialect run on every input, as in the
/// fuzz targets.
macro_rules! harness_corpora {
    ($($test:ident, $target:literal => $bytes:ident, $events:ident;)*) => {$(
        #[test]
        fn $test() {
            replay($target, |data| {
                agentrun_core::harness::fuzzing::$bytes(data);
                agentrun_core::harness::fuzzing::$events(data);
            });
        }
    )*};
}

harness_corpora! {
    harness_claude_corpus, "harness_claude" => claude_bytes, claude_events;
    harness_grok_corpus, "harness_grok" => grok_bytes, grok_events;
    harness_agy_corpus, "harness_agy" => agy_bytes, agy_events;
    harness_codex_corpus, "harness_codex" => codex_bytes, codex_events;
    harness_muse_corpus, "harness_muse" => muse_bytes, muse_events;
    harness_opencode_corpus, "harness_opencode" => opencode_bytes, opencode_events;
}
