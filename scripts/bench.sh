#!/usr/bin/env bash
# Benchmarks of the retained output streams (results go to docs/benchmarks.md).
#
#   scripts/bench.sh [WORKDIR]
#
# Builds agentrun in release mode, makes a 1 GiB text file and a multi-GiB artifact in WORKDIR
# (default: a fresh directory under /tmp; needs ~8 GiB free), and prints, side by side in one
# run: capture throughput against `cat | cat` and `cat | tee | sha256sum`, peak RSS for 1 MiB
# and 4 GiB outputs, and deep paging against `sed -n`. Each timing is the median of RUNS runs
# (default 5). Preview rendering cost has its own criterion bench (see docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
RUNS=${RUNS:-5}
work=${1:-$(mktemp -d /tmp/agentrun-bench.XXXXXX)}
mkdir -p "$work"
cargo build --release -q -p agentrun
bin=$(release_dir)/agentrun
store=$work/store
export AGENTRUN_HOME=$store

# Median wall time in seconds of a shell command, over $RUNS runs.
median() {
    local cmd=$1 times=()
    for _ in $(seq "$RUNS"); do
        local t0 t1
        t0=$(date +%s.%N)
        bash -c "$cmd" >/dev/null 2>&1
        t1=$(date +%s.%N)
        times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}

peak_rss_mib() {
    /usr/bin/time -f '%M' bash -c "$1" 2>&1 >/dev/null | tail -1 | awk '{printf "%.1f", $1/1024}'
}

text=$work/text-1g.txt
make_log_text "$text"

machine_line
echo "runs per timing: $RUNS (median)"
echo
echo "## Capture throughput (1 GiB text)"
t_pipe=$(median "cat '$text' | cat > /dev/null")
t_tee=$(median "cat '$text' | tee '$work/out' | sha256sum")
t_run=$(median "'$bin' run -- cat '$text'")
gib=1.0737418
printf 'cat | cat > /dev/null          %6.3f s  %6.0f MiB/s\n' "$t_pipe" "$(echo "1024 / $t_pipe" | bc -l)"
printf 'cat | tee out | sha256sum      %6.3f s  %6.0f MiB/s\n' "$t_tee" "$(echo "1024 / $t_tee" | bc -l)"
printf 'agentrun run -- cat            %6.3f s  %6.0f MiB/s\n' "$t_run" "$(echo "1024 / $t_run" | bc -l)"
printf 'ratio vs pipe limit: %.2fx   vs shell pipeline: %.2fx\n' "$(echo "$t_pipe / $t_run" | bc -l)" "$(echo "$t_tee / $t_run" | bc -l)"
rm -f "$work/out"
echo
echo "## Peak RSS of agentrun run"
printf '1 MiB output:  %s MiB\n' "$(peak_rss_mib "'$bin' run -- head -c 1048576 /dev/zero")"
printf '4 GiB output:  %s MiB\n' "$(peak_rss_mib "'$bin' run -- head -c 4294967296 /dev/zero")"
echo
echo "## Deep paging (10 millionth line of a multi-GiB artifact)"
big_uri=$("$bin" run --json -- sh -c "cat '$text' '$text' '$text'" | jq -r '.record.output.manifest')
uri="artifact://$big_uri/stdout"
objects=$(find "$store/objects" -type f ! -name '*.idx' -size +1G | head -1)
t_read_0=$(median "'$bin' read '$uri' --offset 0 --limit 2000")
t_read_deep=$(median "'$bin' read '$uri' --offset 10000000 --limit 2000")
t_read_deeper=$(median "'$bin' read '$uri' --offset 40000000 --limit 2000")
t_sed=$(median "sed -n '10000001,10002000p;10002000q' '$objects'")
printf 'read --offset 0          %6.3f s\n' "$t_read_0"
printf 'read --offset 10000000   %6.3f s\n' "$t_read_deep"
printf 'read --offset 40000000   %6.3f s\n' "$t_read_deeper"
printf "sed -n at 10000000       %6.3f s\n" "$t_sed"
printf 'sed / read at depth: %.1fx\n' "$(echo "$t_sed / $t_read_deep" | bc -l)"
echo
echo "## Preview rendering cost"
echo "(criterion: cargo bench -p agentrun-core --bench render)"
