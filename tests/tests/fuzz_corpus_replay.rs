//! Replays every committed fuzz corpus input through its target's body on stable Rust, so CI
//! checks the seeds and every crash input ever found without nightly or cargo-fuzz. The targets
//! are the `[[bin]]` entries of `fuzz/Cargo.toml`, the list `scripts/fuzz.sh` fuzzes. Also
//! checks that the typed seeds of the sequence targets are committed as
//! `make-fuzz-seeds` writes them and decode back to themselves.

use std::path::{Path, PathBuf};

use agentrun_tests::fuzz_bodies::{Body, TARGETS};
use agentrun_tests::fuzz_inputs::{Encode, decode, encode};
use agentrun_tests::fuzz_seeds::{self, Seed};

/// Every target's body: the test crate's, and the core's JSON budget and line scan bodies
/// (compiled for this test by the core's `fuzz-bodies` feature).
fn targets() -> Vec<(&'static str, Body)> {
    let core: [(&str, Body); 2] = [
        ("json_budget", agentrun_core::harness::fuzzing::json_budget),
        ("line_scan", agentrun_core::harness::fuzzing::line_scan),
    ];
    TARGETS.iter().copied().chain(core).collect()
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The `name` of every `[[bin]]` table of `fuzz/Cargo.toml`, in order. The manifest is written
/// by hand in one style (`name = "…"` inside each `[[bin]]`), which is all this reads.
fn declared_targets() -> Vec<String> {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(value) = line.strip_prefix("name") {
            let value = value.trim_start().strip_prefix('=').unwrap().trim();
            names.push(value.trim_matches('"').to_owned());
        }
    }
    names
}

/// Every input of `fuzz/corpus/<target>/` through `body`; returns the inputs that panicked.
fn replay(target: &str, body: fn(&[u8])) -> Vec<String> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {} of target {target}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "corpus {} is empty", dir.display());
    inputs
        .into_iter()
        .filter(|path| {
            let data = std::fs::read(path).unwrap();
            // The body's own panic message (printed above) says which property broke.
            std::panic::catch_unwind(|| body(&data)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect()
}

#[test]
fn every_fuzz_target_has_a_body() {
    let declared = declared_targets();
    assert!(!declared.is_empty(), "no [[bin]] in fuzz/Cargo.toml");
    let targets = targets();
    for name in &declared {
        assert!(
            targets.iter().any(|(t, _)| t == name),
            "fuzz target {name} of fuzz/Cargo.toml has no row in fuzz_bodies::TARGETS"
        );
    }
    for (name, _) in &targets {
        assert!(
            declared.iter().any(|d| d == name),
            "fuzz_bodies::TARGETS row {name} is not a [[bin]] of fuzz/Cargo.toml"
        );
    }
}

#[test]
fn every_corpus_input_replays() {
    let failures: Vec<String> = targets()
        .into_iter()
        .flat_map(|(target, body)| replay(target, body))
        .collect();
    assert!(
        failures.is_empty(),
        "corpus inputs violating a property: {failures:#?}"
    );
}

/// Each typed seed decodes back to itself and is committed with exactly its encoding.
fn check_seeds<T>(target: &str, seeds: &[Seed<T>])
where
    T: Encode + PartialEq + std::fmt::Debug + for<'a> arbitrary::Arbitrary<'a>,
{
    let dir = fuzz_dir().join("corpus").join(target);
    for (name, input) in seeds {
        let bytes = encode(input);
        assert_eq!(
            decode::<T>(&bytes).as_ref(),
            Some(input),
            "seed {target}/{name} does not decode to itself: the encoder and `arbitrary` disagree"
        );
        let committed = std::fs::read(dir.join(name)).unwrap_or_default();
        assert!(
            committed == bytes,
            "fuzz/corpus/{target}/{name} is not the seed's encoding; \
             run `cargo run -p agentrun-tests --bin make-fuzz-seeds`"
        );
    }
}

#[test]
fn typed_seeds_are_committed_and_decode_to_themselves() {
    check_seeds("capture", &fuzz_seeds::capture());
    check_seeds("compaction", &fuzz_seeds::compaction());
    check_seeds("lifecycle", &fuzz_seeds::lifecycle());
    check_seeds("auto_mode", &fuzz_seeds::auto_mode());
}
