#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (uri, preview, page, one per harness dialect, auto
# mode's sanitizer and verdict parser, and compaction) for a while each.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 60 seconds, every target
#
# cargo-fuzz needs a nightly compiler for its sanitizer and coverage flags. A rustup nightly is
# used when installed; otherwise the stable compiler is told to accept the nightly flags with
# RUSTC_BOOTSTRAP=1 (no toolchain download needed). cargo-fuzz itself is installed from
# crates.io when missing.
#
# The committed seeds in fuzz/corpus/<target>/ are read but never written: what libFuzzer
# discovers goes to fuzz/target/corpus/<target>/ (ignored by git). A crash is saved under
# fuzz/artifacts/<target>/ and ends the script with a non-zero status; once the bug is fixed,
# copy the crash input into fuzz/corpus/<target>/ under a descriptive name so that
# tests/tests/fuzz_corpus_replay.rs replays it on every stable test run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(uri preview page harness_claude harness_grok harness_agy harness_codex harness_muse harness_opencode auto_mode_text compaction)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

cd fuzz
for target in "${targets[@]}"; do
    work="target/corpus/$target"
    mkdir -p "$work"
    echo "== fuzzing $target for ${seconds}s (${fuzz[*]})"
    "${fuzz[@]}" run "$target" "$work" "corpus/$target" -- -max_total_time="$seconds"
done
