#!/usr/bin/env bash
# Benchmark of the Gemini CLI decoder (the core's `interpret` example: a bounded line splitter
# feeding `Interpretation`, progress printed as decoded, then the completion) against jq doing
# the equivalent selection (each tool call's command, the assistant's text, the result's
# models) on the same 1 GiB stream-json file, built by repeating the recorded Gemini CLI
# events of tests/fixtures/harness/gemini/*.jsonl (the session logs left out). Reports wall,
# user and sys time and peak RSS (/usr/bin/time -f %M), three alternating runs each, then one
# run on a file with a 256 MiB line to show that memory is bounded by the longest line.
# Usage: scripts/bench-interpret-gemini.sh [WORKDIR] (default /tmp/agentrun-bench-gemini)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${1:-/tmp/agentrun-bench-gemini}
mkdir -p "$work"
cargo build --release -p agentrun-core --example interpret >/dev/null
bin=${CARGO_TARGET_DIR:-$root/target}/release/examples/interpret
fx=$root/tests/fixtures/harness/gemini
if [ ! -s "$work/gemini-1g.jsonl" ]; then
    ls "$fx"/*.jsonl | grep -v -- '-session.jsonl$' | xargs cat | grep -v '^$' > "$work/unit.jsonl"
    python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
unit = open(f"{work}/unit.jsonl", "rb").read()
target, n = 1 << 30, 0
with open(f"{work}/gemini-1g.jsonl", "wb") as f:
    while n + len(unit) <= target:
        f.write(unit); n += len(unit)
    for line in unit.split(b"\n"):
        if n + len(line) + 1 > target: break
        f.write(line + b"\n"); n += len(line) + 1
PY
fi
file=$work/gemini-1g.jsonl
filter='select(.type=="tool_use" or (.type=="message" and .role=="assistant") or .type=="result") | [.type, .parameters.command, .content, ((.stats.models // {}) | keys)]'
echo "file: $(stat -c %s "$file") bytes, $(wc -l < "$file") lines, longest line $(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$file") bytes"
cat "$file" > /dev/null # warm the page cache for both tools
for i in 1 2 3; do
    /usr/bin/time -f "agentrun run $i: wall %e s, user %U s, sys %S s, peak RSS %M KiB" \
        "$bin" gemini < "$file" > "$work/agentrun.out"
    /usr/bin/time -f "jq       run $i: wall %e s, user %U s, sys %S s, peak RSS %M KiB" \
        /usr/bin/jq -c "$filter" "$file" > "$work/jq.out"
done
echo "agentrun: $(grep -c '^  ' "$work/agentrun.out") progress lines, models $(tr -d '\n ' < "$work/agentrun.out" | grep -o '"models":\[[^]]*\]' | head -1)"
echo "jq printed $(wc -l < "$work/jq.out") lines"
if [ ! -s "$work/gemini-longline.jsonl" ]; then
    python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
unit = open(f"{work}/unit.jsonl", "rb").read()
with open(f"{work}/gemini-longline.jsonl", "wb") as f:
    f.write(unit * 100)
    f.write(b'{"type":"tool_result","tool_id":"t","status":"success","output":"' + b"x" * (256 << 20) + b'"}\n')
    f.write(unit * 100)
PY
fi
/usr/bin/time -f "agentrun, 256 MiB longest line: wall %e s, peak RSS %M KiB" \
    "$bin" gemini < "$work/gemini-longline.jsonl" > /dev/null
