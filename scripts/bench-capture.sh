#!/usr/bin/env bash
# Capture throughput and memory, side by side in one run (results go to docs/benchmarks.md).
#
#   scripts/bench-capture.sh [WORKDIR]
#
# Builds agentrun in release mode and makes a 1 GiB text file in WORKDIR (default: a fresh
# directory under /work if it exists, else /tmp; needs ~4 GiB free). Everything is written to
# that one filesystem. Each round runs, in turn:
#   agentrun run -- cat FILE          (fresh store each time, so no run is a dedupe hit)
#   cat FILE | cat > OUT              (the limit of retaining every byte on that disk)
#   cat FILE | tee OUT | sha256sum    (the shell pipeline that keeps and hashes the bytes)
# so machine load drifts over all three alike; a `sync`, untimed, follows the deletion of
# each command's files, so no command pays for another's write-back. Prints each one's
# median over RUNS rounds (default 7) and the ratios, then the peak RSS of agentrun for
# 1 MiB and 1 GiB.
# BASELINE_BIN=PATH adds a fourth command to every round, `PATH run -- cat FILE` (another
# build of agentrun, e.g. an older commit's), for an A/B comparison in the same run.
# PAIR_ONLY=1 runs only agentrun and `cat FILE | cat > OUT` (and the baseline), so no
# command's gigabyte of dirty pages is written back during the next one's turn.
# DROP_CACHES=1 (root) empties the page cache first: on a machine whose memory is full of
# cache, reclaim during the rounds makes every time move.
# AGENTRUN_BIN=PATH measures that build instead of building this tree.
# PAIRS=N runs N paired rounds of only agentrun and `cat FILE | cat > OUT`, alternating which
# goes first (so neither always runs right after the other's deletion and `sync`), and prints
# every pair with its ratio, the medians, the median of the pairs' ratios, and the peak RSS of
# agentrun for the 1 GiB file (`/usr/bin/time -f %M`, once after the pairs). For a shared,
# noisy machine: compare pairs, not best runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
RUNS=${RUNS:-7}
default_parent=/tmp
[ -d /work ] && default_parent=/work
work=${1:-$(mktemp -d "$default_parent/agentrun-bench-capture.XXXXXX")}
mkdir -p "$work"
if [ -n "${AGENTRUN_BIN:-}" ]; then
    bin=$AGENTRUN_BIN
else
    cargo build --release -q -p agentrun
    bin=$(release_dir)/agentrun
fi

text=$work/text-1g.txt
make_log_text "$text"

seconds() {
    local t0 t1
    t0=$(date +%s.%N)
    bash -c "$1" > /dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

# Untimed, between commands: writes the file system still owes for the last command (a
# deleted file's freed blocks, journal commits, another command's dirty pages) finish now,
# not during the next command's turn.
settle() {
    sync
}

median() {
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}

if [ -n "${DROP_CACHES:-}" ]; then
    sync
    echo 1 > /proc/sys/vm/drop_caches
    cat "$text" > /dev/null
fi
machine_line
echo "SHA extensions (sha_ni): $(grep -qw sha_ni /proc/cpuinfo && echo yes || echo no)"
echo "filesystem of $work: $(df -T "$work" | awk 'NR==2 {print $2}')"
if [ -n "${PAIRS:-}" ]; then
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "pairs: $PAIRS (agentrun run -- cat FILE, cat FILE | cat > OUT; order alternates)"
    runs=() pipes=() ratios=()
    for i in $(seq "$PAIRS"); do
        rm -rf "$work/store" "$work/out"
        settle
        if [ $((i % 2)) -eq 1 ]; then
            a=$(seconds "AGENTRUN_HOME='$work/store' '$bin' run -- cat '$text'")
            rm -rf "$work/store"
            settle
            p=$(seconds "cat '$text' | cat > '$work/out'")
        else
            p=$(seconds "cat '$text' | cat > '$work/out'")
            rm -f "$work/out"
            settle
            a=$(seconds "AGENTRUN_HOME='$work/store' '$bin' run -- cat '$text'")
        fi
        r=$(echo "$p / $a" | bc -l)
        runs+=("$a") pipes+=("$p") ratios+=("$r")
        printf 'pair %2d: agentrun %.3f s  cat > OUT %.3f s  ratio %.2fx\n' "$i" "$a" "$p" "$r"
    done
    rm -rf "$work/store" "$work/out"
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    t_run=$(median "${runs[@]}")
    t_pipe=$(median "${pipes[@]}")
    printf 'median agentrun %s s, cat > OUT %s s: %.2fx; median of the pair ratios %.2fx\n' \
        "$t_run" "$t_pipe" "$(echo "$t_pipe / $t_run" | bc -l)" "$(median "${ratios[@]}")"
    settle
    rss=$(AGENTRUN_HOME="$work/store" /usr/bin/time -f '%M' "$bin" run -- cat "$text" 2>&1 >/dev/null | tail -1)
    printf 'peak RSS of agentrun run -- cat FILE: %.1f MiB\n' "$(echo "$rss / 1024" | bc -l)"
    rm -rf "$work/store"
    exit 0
fi
echo "rounds: $RUNS (median of each)"
runs=() pipes=() tees=() bases=()
for _ in $(seq "$RUNS"); do
    rm -rf "$work/store" "$work/out"
    settle
    if [ -n "${BASELINE_BIN:-}" ]; then
        bases+=("$(seconds "AGENTRUN_HOME='$work/store' '$BASELINE_BIN' run -- cat '$text'")")
        rm -rf "$work/store"
        settle
    fi
    runs+=("$(seconds "AGENTRUN_HOME='$work/store' '$bin' run -- cat '$text'")")
    rm -rf "$work/store"
    settle
    pipes+=("$(seconds "cat '$text' | cat > '$work/out'")")
    rm -f "$work/out"
    settle
    if [ -z "${PAIR_ONLY:-}" ]; then
        tees+=("$(seconds "cat '$text' | tee '$work/out' | sha256sum")")
        rm -f "$work/out"
        settle
    fi
done
t_run=$(median "${runs[@]}")
t_pipe=$(median "${pipes[@]}")
line() { # LABEL SECONDS ROUNDS...
    local label=$1 t=$2
    shift 2
    printf '%-31s %s s  %.0f MiB/s   (%s)\n' "$label" "$t" "$(echo "1024 / $t" | bc -l)" "$*"
}
echo
line "agentrun run -- cat FILE" "$t_run" "${runs[@]}"
line "cat FILE | cat > OUT" "$t_pipe" "${pipes[@]}"
if [ -z "${PAIR_ONLY:-}" ]; then
    t_tee=$(median "${tees[@]}")
    line "cat FILE | tee OUT | sha256sum" "$t_tee" "${tees[@]}"
fi
if [ -n "${BASELINE_BIN:-}" ]; then
    t_base=$(median "${bases[@]}")
    line "baseline run -- cat FILE" "$t_base" "${bases[@]}"
    printf 'agentrun vs baseline: %.2fx\n' "$(echo "$t_base / $t_run" | bc -l)"
fi
printf 'agentrun vs cat > OUT: %.2fx\n' "$(echo "$t_pipe / $t_run" | bc -l)"
if [ -z "${PAIR_ONLY:-}" ]; then
    printf 'agentrun vs tee | sha256sum: %.2fx\n' "$(echo "$t_tee / $t_run" | bc -l)"
fi
echo
for case in "head -c 1048576 /dev/zero" "cat $text"; do
    rm -rf "$work/store"
    rss=$(AGENTRUN_HOME="$work/store" /usr/bin/time -f '%M' "$bin" run -- sh -c "$case" 2>&1 >/dev/null | tail -1)
    printf 'peak RSS of agentrun run -- %s: %.1f MiB\n' "$case" "$(echo "$rss / 1024" | bc -l)"
done
rm -rf "$work/store"
