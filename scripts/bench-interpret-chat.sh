#!/usr/bin/env bash
# Benchmark of the Qwen Code and pi decoders: `agentrun interpret --harness qwen|pi` against jq
# doing the equivalent selection on the same 1 GiB stream of the dialect, built by repeating
# the recorded real-CLI events of tests/fixtures/harness/{qwen,pi}/ (text, tool, resumed and
# failed turns). Reports wall and CPU time and peak RSS (/usr/bin/time -f %M) of each run,
# alternating, then the medians and the ratio to jq. The jq filters select what the decoder's evidence and progress read:
#
#   qwen: select(.type=="assistant") | .message.content[]? | select(.type=="tool_use") | .name
#   pi:   select(.type=="message_end") | .message.responseModel // empty
#
# Usage: scripts/bench-interpret-chat.sh [WORKDIR] [qwen|pi ...]
#   (default /tmp/agentrun-bench-chat, both dialects). Needs a release build of agentrun
#   (`cargo build --release -p agentrun`, built here when missing). SIZE_MIB sets the
#   stream's size (default 1024), RUNS the rounds (default 3), BASELINE_BIN adds another agentrun build to every round.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
root=$PWD
work=${1:-/tmp/agentrun-bench-chat}
shift || true
dialects=("$@")
[ ${#dialects[@]} -gt 0 ] || dialects=(qwen pi)
mkdir -p "$work"
bin=${CARGO_TARGET_DIR:-$root/target}/release/agentrun
[ -x "$bin" ] || cargo build --release -p agentrun >/dev/null
export AGENTRUN_HOME=$work/store
# timed TIMES NAME COMMAND...: one run; its wall and CPU seconds and peak RSS appended to
# TIMES. `interpret` exits 1 when the stream's last turn failed, as the repeated recordings'
# does: that is a finished decode, not an error.
timed() {
    local times=$1 name=$2 rc=0
    shift 2
    /usr/bin/time -o "$work/one.txt" -f "%e %U %S %M" "$@" || rc=$?
    [ "$rc" -le 1 ] || { echo "$name exited $rc" >&2; exit 1; }
    read -r wall user sys rss < <(tail -1 "$work/one.txt")
    echo "$name $wall $(echo "$user + $sys" | bc) $rss" | tee -a "$times" >&2
}
for d in "${dialects[@]}"; do
    case "$d" in
        qwen) filter='select(.type=="assistant") | .message.content[]? | select(.type=="tool_use") | .name' ;;
        pi) filter='select(.type=="message_end") | .message.responseModel // empty' ;;
        *) echo "bench-interpret-chat.sh: unknown dialect '$d' (expected qwen or pi)" >&2; exit 2 ;;
    esac
    size_mib=${SIZE_MIB:-1024}
    file=$work/$d-${size_mib}m.jsonl
    if [ ! -s "$file" ]; then
        # The streams only (not the retained logs), blank lines dropped.
        ls "$root/tests/fixtures/harness/$d/"*.jsonl | grep -v -- '-log.jsonl$' | xargs cat | grep -v '^$' > "$work/$d-unit.jsonl"
        python3 - "$work/$d-unit.jsonl" "$file" "$size_mib" <<'PY'
import sys
unit = open(sys.argv[1], "rb").read()
target, n = int(sys.argv[3]) << 20, 0
with open(sys.argv[2], "wb") as f:
    while n + len(unit) <= target:
        f.write(unit); n += len(unit)
    for line in unit.split(b"\n"):
        if n + len(line) + 1 > target: break
        f.write(line + b"\n"); n += len(line) + 1
PY
    fi
    echo "$d: $(stat -c %s "$file") bytes, $(wc -l < "$file") lines, longest line $(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$file") bytes"
    cat "$file" > /dev/null # warm the page cache for both tools
    times=$work/$d-times.txt
    : > "$times"
    for i in $(seq "${RUNS:-3}"); do
        timed "$times" agentrun "$bin" interpret --harness "$d" "$file" > "$work/$d-agentrun.out"
        if [ -n "${BASELINE_BIN:-}" ]; then
            timed "$times" baseline "$BASELINE_BIN" interpret --harness "$d" "$file" > "$work/$d-baseline.out"
            cmp -s "$work/$d-agentrun.out" "$work/$d-baseline.out" || { echo "$d: baseline output differs" >&2; exit 1; }
        fi
        timed "$times" jq /usr/bin/jq -c "$filter" "$file" > "$work/$d-jq.out"
    done
    bench_medians "$times"
    echo "$d agentrun: $(grep -c . "$work/$d-agentrun.out") output lines; $(grep '^observed models:' "$work/$d-agentrun.out" || true)"
    echo "$d jq: $(wc -l < "$work/$d-jq.out") lines ($(sort -u "$work/$d-jq.out" | head -5 | tr '\n' ' '))"
done
