#!/usr/bin/env bash
# Benchmarks of the process drivers (results go to docs/benchmarks.md, section
# "Process drivers").
#
#   scripts/bench-drivers.sh [WORKDIR]
#
# Prints: spawn overhead of `agentrun run -- true` against plain `true` (median of RUNS
# process launches, default 200), the library runners (smol, tokio) against
# std::process::Command::output() in one process, and capture throughput of a 1 GiB text
# file through each driver (median of CAPTURE_RUNS, default 5). The store lives in WORKDIR
# (default: a fresh directory under /tmp, i.e. on disk); set TMPDIR=/dev/shm to see the cost
# without the store's fsyncs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
RUNS=${RUNS:-200}
CAPTURE_RUNS=${CAPTURE_RUNS:-5}
work=${1:-$(mktemp -d /tmp/agentrun-bench.XXXXXX)}
mkdir -p "$work"
cargo build --release -q -p agentrun
cargo build --release -q -p agentrun-tests --example driver_bench
bin=$(release_dir)/agentrun
bench=$(release_dir)/examples/driver_bench
export AGENTRUN_HOME=$work/store

# Median wall time in milliseconds of running "$@" RUNS times (the loop's own cost included
# in every variant alike).
median_ms() {
    local times=()
    for _ in $(seq "$RUNS"); do
        local t0 t1
        t0=$(date +%s%N)
        "$@" >/dev/null 2>&1 || true
        t1=$(date +%s%N)
        times+=("$(( (t1 - t0) / 1000 ))")
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)] / 1000}'
}

text=$work/text-1g.txt
make_log_text "$text"
sync # no writeback of earlier runs competing with the fsyncs measured here

machine_line
echo "store: $work (TMPDIR=${TMPDIR:-unset})"
echo
echo "## Spawn overhead, command line (median of $RUNS)"
t_true=$(median_ms true)
t_run=$(median_ms "$bin" run -- true)
printf 'true                   %8.3f ms\n' "$t_true"
printf 'agentrun run -- true   %8.3f ms  (+%.3f ms)\n' "$t_run" "$(echo "$t_run - $t_true" | bc -l)"
echo
echo "## Spawn overhead, library"
"$bench" spawn "$RUNS"
echo
echo "## Capture throughput"
"$bench" capture "$text" "$CAPTURE_RUNS"
