#!/usr/bin/env bash
# Benchmark of harness stream interpretation: `agentrun interpret --harness claude`
# against `jq -c 'select(.type=="assistant") | .message.model'` on the same 1 GiB Claude
# stream-json file, built by repeating the recorded Claude events of
# tests/fixtures/harness/claude/ (ccagent + morpheus). Reports wall/user/sys time and peak RSS
# (/usr/bin/time -f %M), and a second run with one 256 MiB line to show that memory is bounded
# by the longest line. Usage: scripts/bench-interpret.sh [WORKDIR] (default /tmp/agentrun-bench-interpret)
#
# Environment: SIZE_MIB (the stream's size, default 1024), RUNS (rounds, default 3), and
# BASELINE_BIN (another agentrun build, run in every round beside the others). Each round runs
# agentrun, jq and `wc -l` (the line-scan limit) in turn; at the end the medians of wall time
# and of CPU time (user + sys) of each, and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
root=$PWD
work=${1:-/tmp/agentrun-bench-interpret}
mkdir -p "$work"
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p agentrun >/dev/null
bin=${CARGO_TARGET_DIR:-$root/target}/release/agentrun
export AGENTRUN_HOME=$work/store
fx=$root/tests/fixtures/harness/claude
size_mib=${SIZE_MIB:-1024}
runs=${RUNS:-3}
file=$work/claude-${size_mib}m.jsonl
if [ ! -s "$file" ]; then
    cat "$fx/ccagent-claude_response1.jsonl" "$fx/morpheus-claude_stream.jsonl" | grep -v '^$' > "$work/unit.jsonl"
    python3 - "$work" "$file" "$size_mib" <<'PY'
import sys
work = sys.argv[1]
unit = open(f"{work}/unit.jsonl", "rb").read()
target, n = int(sys.argv[3]) << 20, 0
with open(sys.argv[2], "wb") as f:
    while n + len(unit) <= target:
        f.write(unit); n += len(unit)
    for line in unit.split(b"\n"):
        if n + len(line) + 1 > target: break
        f.write(line + b"\n"); n += len(line) + 1
PY
fi
echo "file: $(stat -c %s "$file") bytes, $(wc -l < "$file") lines, longest line $(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$file") bytes"
cat "$file" > /dev/null # warm the page cache for every tool
times=$work/times.txt
: > "$times"
timed() { # NAME COMMAND...: one run, wall and CPU seconds appended to $times
    local name=$1
    shift
    /usr/bin/time -o "$work/one.txt" -f "%e %U %S %M" "$@"
    read -r wall user sys rss < "$work/one.txt"
    echo "$name $wall $(echo "$user + $sys" | bc) $rss" | tee -a "$times" >&2
}
for i in $(seq "$runs"); do
    timed agentrun "$bin" interpret --harness claude "$file" > "$work/agentrun.out"
    if [ -n "${BASELINE_BIN:-}" ]; then
        timed baseline "$BASELINE_BIN" interpret --harness claude "$file" > "$work/baseline.out"
    fi
    timed jq /usr/bin/jq -c 'select(.type=="assistant") | .message.model' "$file" > "$work/jq.out"
    timed wc wc -l "$file" > /dev/null
done
bench_medians "$times"
if [ -n "${BASELINE_BIN:-}" ] && ! cmp -s "$work/agentrun.out" "$work/baseline.out"; then
    echo "agentrun and the baseline printed different output" >&2
    exit 1
fi
echo "agentrun observed: $(grep '^observed models:' "$work/agentrun.out")"
echo "jq printed $(wc -l < "$work/jq.out") model lines ($(sort -u "$work/jq.out" | tr '\n' ' '))"
# Memory bound: the same events plus one 256 MiB tool-result line and one 64 MiB assistant line.
if [ ! -s "$work/claude-longline.jsonl" ]; then
    python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
unit = open(f"{work}/unit.jsonl", "rb").read()
with open(f"{work}/claude-longline.jsonl", "wb") as f:
    f.write(unit * 100)
    f.write(b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"' + b"x" * (256 << 20) + b'"}]}}\n')
    f.write(b'{"type":"assistant","message":{"model":"claude-long","content":[{"type":"text","text":"' + b"y" * (64 << 20) + b'"}]}}\n')
    f.write(unit * 100)
PY
fi
/usr/bin/time -f "agentrun, 256 MiB longest line: wall %e s, peak RSS %M KiB" \
    "$bin" interpret --harness claude "$work/claude-longline.jsonl" > /dev/null
