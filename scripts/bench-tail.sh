#!/usr/bin/env bash
# Peak memory and time of `agentrun run` at the default and at the largest accepted preview
# limits, with and without the tail view, on 100 MB and 280 MB of log-like lines.
# usage: RUNS=3 scripts/bench-tail.sh DIR [AGENTRUN_BINARY]   (DIR on tmpfs keeps the disk out)
# Prints one line per case: median wall seconds and median peak RSS (KiB) of RUNS runs.
set -euo pipefail
dir=$1
bin=${2:-target/release/agentrun}
runs=${RUNS:-3}
mkdir -p "$dir"
if [ ! -f "$dir/f100" ]; then
  # 28 bytes a line: 10 M lines are 280 MB.
  seq 1 10000000 | awk '{printf "line %08d some log text\n", $1}' > "$dir/f280"
  head -c 100000000 "$dir/f280" > "$dir/f100"
fi
max="--max-bytes 16777216 --max-lines 16777216 --max-payload-bytes 16777216"
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for f in f100 f280; do
  for args in "" "--tail-lines 10" "$max" "$max --tail-lines 10" "$max --tail-lines 16777216"; do
    times=(); rss=()
    for _ in $(seq "$runs"); do
      rm -rf "$dir/store"
      # shellcheck disable=SC2086
      out=$(/usr/bin/time -f "%e %M" "$bin" --store "$dir/store" run $args -- cat "$dir/$f" 2>&1 >/dev/null | tail -1) || true
      times+=("${out% *}"); rss+=("${out#* }")
    done
    echo "$f [${args:-defaults}]: $(printf '%s\n' "${times[@]}" | median) s, $(printf '%s\n' "${rss[@]}" | median) KiB"
  done
done
rm -rf "$dir/store"
