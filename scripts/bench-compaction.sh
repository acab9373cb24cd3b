#!/usr/bin/env bash
# Benchmark of compaction pruning: parse a 100 MB transcript with 10 000 tool results, build the
# pruned retry snapshot and render the retry input (tests/examples/prune_bench.rs), against
# reading the same file with `jq .`. Reports wall/user/sys time and peak RSS
# (/usr/bin/time -f %M) for three alternating runs of each. Then three runs that also store the
# 9 000 outputs the retry refers to in a fresh store (one retention, one record), as
# `agentrun compact` does before the retry. With BASELINE_BIN=PATH (a prune_bench binary built
# from another commit), each of those store runs is preceded by the same run of the baseline, so
# the two are measured side by side under the same load.
# Usage: [BASELINE_BIN=PATH] scripts/bench-compaction.sh [WORKDIR]
# (WORKDIR defaults to /tmp/agentrun-bench-compaction)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/agentrun-bench-compaction}
mkdir -p "$work"
cargo build --release -p agentrun-tests --example prune_bench >/dev/null
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/prune_bench
file=$work/transcript-100m.json
if [ ! -s "$file" ]; then
    python3 - "$file" <<'PY'
import json, sys
digest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
line = "test compaction::prune_keeps_pairing ... ok (0.01s) some build output\n"
messages = [{"role": "user", "content": "Make the test suite pass."}]
for i in range(10_000):
    if i % 10 == 9:  # every tenth call pages an artifact back
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "read",
                "input": {"filePath": f"artifact://{digest}/stdout", "offset": i}}
    else:
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "bash",
                "input": {"command": f"cargo test -- case_{i}"}}
    output = f"run {i}\n" + line * 140  # about 10 KB of output each
    messages.append({"role": "assistant", "content": [{"type": "text", "text": f"Step {i}."}, call]})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output}]})
with open(sys.argv[1], "w") as f:
    json.dump({"model": "claude-sonnet-4-5", "messages": messages}, f)
PY
fi
echo "file: $(stat -c %s "$file") bytes, $(grep -o '"tool_result"' "$file" | wc -l) tool results"
cat "$file" > /dev/null # warm the page cache for both tools
for i in 1 2 3; do
    /usr/bin/time -f "prune run $i: wall %e s, user %U s, sys %S s, peak RSS %M KiB" \
        "$bin" "$file"
    /usr/bin/time -f "jq .  run $i: wall %e s, user %U s, sys %S s, peak RSS %M KiB" \
        jq . "$file" > /dev/null
done
# Each store run gets a store directory of its own, all removed at the end: removing one
# between runs would slow the next run's file creation on ext4 without a journal, whose inode
# allocator skips inodes freed in the last minutes (a run creates and deletes ~18 000).
rm -rf "$work"/store-*
for i in 1 2 3; do
    if [ -n "${BASELINE_BIN:-}" ]; then
        /usr/bin/time -f "baseline prune+retain run $i: wall %e s, user %U s, sys %S s, peak RSS %M KiB" \
            "$BASELINE_BIN" "$file" "$work/store-baseline-$i"
    fi
    /usr/bin/time -f "prune+retain run $i: wall %e s, user %U s, sys %S s, peak RSS %M KiB" \
        "$bin" "$file" "$work/store-$i"
done
rm -rf "$work"/store-*
