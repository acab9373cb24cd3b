#!/usr/bin/env bash
# The stall watchdog's cost per event line: `agentrun agent claude` on a fake `claude` that
# prints a 256 MiB Claude stream-json file (the recorded events of
# tests/fixtures/harness/claude/, repeated) as fast as the pipe takes it, with the watchdog
# off (`--stall-timeout 0`) and on (the default 10m), runs interleaved. Reports wall/user/sys
# time of each run. Usage: scripts/bench-stall-watchdog.sh [WORKDIR] (default
# /tmp/agentrun-bench-stall); BENCH_MIB sets the file size, AGENTRUN_BIN a prebuilt binary.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${1:-/tmp/agentrun-bench-stall}
mkdir -p "$work/bin"
if [ -z "${AGENTRUN_BIN:-}" ]; then
    cargo build --release -p agentrun >/dev/null
fi
bin=${AGENTRUN_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/agentrun}
fx=$root/tests/fixtures/harness/claude
mib=${BENCH_MIB:-256}
if [ ! -s "$work/claude-${mib}m.jsonl" ]; then
    cat "$fx/ccagent-claude_response1.jsonl" "$fx/morpheus-claude_stream.jsonl" | grep -v '^$' > "$work/unit.jsonl"
    python3 - "$work" "$mib" <<'PY'
import sys
work = sys.argv[1]
unit = open(f"{work}/unit.jsonl", "rb").read()
target, n = int(sys.argv[2]) << 20, 0
with open(f"{work}/claude-{sys.argv[2]}m.jsonl", "wb") as f:
    while n + len(unit) <= target:
        f.write(unit); n += len(unit)
PY
fi
file=$work/claude-${mib}m.jsonl
printf '#!/bin/sh\nexec cat %s\n' "$file" > "$work/bin/claude"
chmod +x "$work/bin/claude"
echo "file: $(stat -c %s "$file") bytes, $(wc -l < "$file") lines"
cat "$file" > /dev/null # warm the page cache
for i in 1 2 3; do
    for stall in 0 10m; do
        rm -rf "$work/store"
        AGENTRUN_HOME=$work/store PATH=$work/bin:$PATH HOME=$work \
            /usr/bin/time -f "stall-timeout $stall run $i: wall %e s, user %U s, sys %S s" \
            "$bin" agent claude --stall-timeout "$stall" -- bench > /dev/null 2> "$work/err" || true
        tail -1 "$work/err"
    done
done
