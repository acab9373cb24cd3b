#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (each [[bin]] of fuzz/Cargo.toml) with real libFuzzer
# for a while each. CI (.ci/run) calls it with a short smoke time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 60 seconds, every target
#
# FUZZ_JOBS targets run at a time (default: the number of CPUs), each for SECONDS.
#
# cargo-fuzz needs nightly compiler flags (sanitizer coverage). The active toolchain is told
# to accept them with RUSTC_BOOTSTRAP=1, so no nightly download is needed (to fuzz with a
# nightly compiler instead: `rustup run nightly scripts/fuzz.sh`). cargo-fuzz itself is
# installed from crates.io when missing.
#
# Sanitizer: none by default. The fuzzed crates forbid unsafe code, so what fuzzing finds is
# panics (violated properties, overflows: debug assertions and overflow checks are on) and
# hangs; AddressSanitizer made every target about ten times slower and its quarantine of
# freed memory held ~500 MB per process. FUZZ_SANITIZER=address brings it back (with a small
# quarantine), for instance after touching an unsafe dependency.
#
# The committed seeds in fuzz/corpus/<target>/ are read but never written: what libFuzzer
# discovers goes to fuzz/target/corpus/<target>/ (ignored by git). A failing input (crash,
# panic, hang over FUZZ_TIMEOUT seconds, default 30) is saved under fuzz/artifacts/<target>/;
# the script still runs the remaining targets, then prints how to reproduce each failure and
# exits non-zero. Once the bug is fixed, copy the input into fuzz/corpus/<target>/ under a
# descriptive name so that tests/tests/fuzz_corpus_replay.rs replays it on every test run.
# The sequence targets (capture, compaction, lifecycle, auto_mode) decode a structured input
# with `arbitrary`; `cargo fuzz fmt TARGET INPUT` prints a saved input as its operations.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
sanitizer=${FUZZ_SANITIZER:-none}
timeout=${FUZZ_TIMEOUT:-30}

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
export RUSTC_BOOTSTRAP=1
if [ "$sanitizer" = address ]; then
    # The default quarantine (256 MB of freed blocks kept poisoned) is what grew the RSS.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16}
fi

cd fuzz
if [ ${#targets[@]} -eq 0 ]; then
    # The [[bin]] entries of fuzz/Cargo.toml, so a new target needs no change here.
    mapfile -t targets < <(cargo fuzz list)
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz targets found in fuzz/Cargo.toml" >&2; exit 1; }

# One build for all targets; each `run` below then only checks it is fresh.
cargo fuzz build --sanitizer "$sanitizer"

# Fuzzes one target, printing its report; a failure also leaves target/<target>.status.
fuzz_one() {
    local target=$1
    local work="target/corpus/$target" seeds="corpus/$target" marker start runs rss found input
    mkdir -p "$work" "artifacts/$target"
    marker=$(mktemp)
    echo "== fuzzing $target for ${seconds}s (sanitizer: $sanitizer)"
    start=$SECONDS
    if cargo fuzz run --sanitizer "$sanitizer" "$target" "$work" "$seeds" -- \
        -max_total_time="$seconds" -timeout="$timeout" -print_final_stats=1 \
        >"target/$target.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "target/$target.log")
        rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "target/$target.log")
        echo "   ok: ${runs:-?} executions in $((SECONDS - start))s, peak RSS ${rss:-?} MB"
    else
        echo failed >"target/$target.status"
        tail -40 "target/$target.log"
        found=$(find "artifacts/$target" -type f -newer "$marker")
        if [ -z "$found" ]; then
            echo "!! $target failed without saving an input (log: fuzz/target/$target.log)"
        fi
        for input in $found; do
            cat <<EOF
!! $target failed on the input saved as fuzz/$input
   base64: $(base64 -w0 "$input")
   reproduce with libFuzzer:  cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer $sanitizer $target $input
   as operations (typed targets):  cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz fmt --sanitizer $sanitizer $target $input
   or on stable:  cp fuzz/$input fuzz/corpus/$target/crash-DESCRIPTION && cargo test -p agentrun-tests --test fuzz_corpus_replay
EOF
        done
    fi
    rm -f "$marker"
}

for target in "${targets[@]}"; do
    [ -d "corpus/$target" ] || { echo "fuzz.sh: $target has no seed corpus fuzz/corpus/$target" >&2; exit 1; }
    rm -f "target/$target.status"
done
# FUZZ_JOBS targets at a time (default: one per CPU, as each libFuzzer process uses one),
# each for the full time; the reports are printed in target order once all are done.
parallel=${FUZZ_JOBS:-$(nproc)}
for target in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do
        wait -n || true
    done
    fuzz_one "$target" >"target/$target.report" 2>&1 &
done
wait
failed=()
for target in "${targets[@]}"; do
    cat "target/$target.report"
    if [ -e "target/$target.status" ]; then
        failed+=("$target")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]} (inputs and commands above)" >&2
    exit 1
fi
