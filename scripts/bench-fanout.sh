#!/usr/bin/env bash
# Benchmark of agentrun's own cost per fan-out attempt (worktree, sink, capture, record,
# cleanup) against a hand-written shell script doing the same work, and of agentrun's memory
# with 32 attempts running at once.
#
# The harness is a stand-in `claude` on PATH that answers at once with a two-line
# stream-json session (an init event and a success result), so what is timed is the work
# around the agent, not the agent. Both sides, per attempt:
#   agentrun: `agentrun fanout --select all --jobs 1 --copies N claude -- PROMPT`
#             (a worktree on a new branch, a private result sink, the harness run with every
#             stream retained and decoded, the record; losers' worktrees and branches removed)
#   script:   `git worktree add -b BRANCH DIR HEAD`, the same `claude` with stdout and stderr
#             to files, `git worktree remove`, `git branch -D`, in a temporary directory
#             under WORKDIR (agentrun's store is there too, so both work on one file system).
# Each round runs every contender once, each on a new repository, and which goes first turns
# from round to round; the medians of the per-attempt wall time (total / N) and the ratio are
# printed. Then one fan-out of 32 attempts at once (`--jobs 32`, each harness
# holding for HOLD seconds so that all 32 really overlap) reports agentrun's peak RSS.
#
# Usage: scripts/bench-fanout.sh [WORKDIR]   (default: a new temporary directory)
# Environment: ATTEMPTS (per round, default 16), ROUNDS (default 5), HOLD (seconds, default
# 2), SKIP_BUILD=1 to use an existing release build, BASELINE_BIN (another agentrun build,
# timed in every round beside the others, on a repository of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${1:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p agentrun >/dev/null
bin=${CARGO_TARGET_DIR:-$root/target}/release/agentrun
attempts=${ATTEMPTS:-16}
rounds=${ROUNDS:-5}
hold=${HOLD:-2}

export AGENTRUN_HOME
export HOME=$work/home
mkdir -p "$HOME" "$work/bin"
export GIT_CONFIG_GLOBAL=$work/gitconfig GIT_CONFIG_NOSYSTEM=1
git config --file "$GIT_CONFIG_GLOBAL" user.name bench
git config --file "$GIT_CONFIG_GLOBAL" user.email bench@example.invalid

# The stand-in harness: Claude Code's stream-json for a turn that succeeded at once.
# $FAKE_HOLD makes it wait first (the memory run).
cat > "$work/bin/claude" <<'SH'
#!/bin/sh
[ -n "${FAKE_HOLD:-}" ] && sleep "$FAKE_HOLD"
echo '{"type":"system","subtype":"init","model":"bench-model","session_id":"s"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,"session_id":"s"}'
SH
chmod +x "$work/bin/claude"
export PATH=$work/bin:$PATH

# A repository of 200 files and a store, new for every round (kept worktrees and branches of
# earlier rounds would otherwise slow the later ones), in new directories: nothing is deleted
# until the end, because ext4 without a journal skips recently freed inodes when it allocates
# (a minute or more), so a round creating files where the round before deleted thousands
# pays for those (measured: most of git's time in `find_inode_bit`).
new_repo() {
    repo=$(mktemp -d "$work/repo.XXXXXX")/repo
    AGENTRUN_HOME=$(mktemp -d "$work/store.XXXXXX")
    git init -q "$repo"
    for i in $(seq 200); do echo "line $i" > "$repo/file$i.txt"; done
    git -C "$repo" add -A
    git -C "$repo" commit -qm base
}

now() { date +%s.%N; }

# The hand-written equivalent, one attempt after another.
script_round() {
    local out
    # Beside agentrun's store: both sides' worktrees on the same file system.
    out=$(mktemp -d "$work/script.XXXXXX")
    for i in $(seq "$attempts"); do
        git -C "$repo" worktree add -q -b "bench/$1/$i" "$out/wt$i" HEAD
        (cd "$out/wt$i" && claude -p "say done" --output-format stream-json --verbose \
            > "$out/$i.stdout" 2> "$out/$i.stderr")
        git -C "$repo" worktree remove --force "$out/wt$i"
        git -C "$repo" branch -q -D "bench/$1/$i"
    done
    rm -rf "$out"
}

agentrun_round() { # [BIN]
    (cd "$repo" && "${1:-$bin}" fanout --select all --jobs 1 --copies "$attempts" claude \
        --json -- say done > "$work/fanout.json")
}

times=$work/times.txt
: > "$times"
timed() { # NAME: one round of NAME on a new repository, its time per attempt appended to $times
    local t0 t1
    new_repo
    t0=$(now)
    case $1 in
    agentrun) agentrun_round ;;
    baseline) agentrun_round "$BASELINE_BIN" ;;
    script) script_round "$r" ;;
    esac
    t1=$(now)
    echo "$1 $(echo "($t1 - $t0) / $attempts" | bc -l)" | tee -a "$times"
}
contenders="agentrun script${BASELINE_BIN:+ baseline}"
# Each round starts with the next contender in turn, so a drift in the machine's load weighs
# on all alike; each contender gets a repository of its own.
for r in $(seq "$rounds"); do
    set -- $contenders
    for _ in $(seq $(( (r - 1) % $# ))); do set -- "${@:2}" "$1"; done
    for name in "$@"; do timed "$name"; done
done
python3 - "$times" "$work/fanout.json" "$attempts" <<'PY'
import json, statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
names = [k for k in ("agentrun", "script", "baseline") if any(n == k for n, _ in rows)]
med = {k: statistics.median(float(v) for n, v in rows if n == k) for k in names}
rec = json.load(open(sys.argv[2]))
attempts = rec.get("attempts", [])
assert len(attempts) == int(sys.argv[3]), f"the record lists {len(attempts)} attempts"
print(f"per attempt, median of rounds: agentrun {med['agentrun'] * 1000:.1f} ms, "
      f"script {med['script'] * 1000:.1f} ms, ratio {med['agentrun'] / med['script']:.2f}x")
if "baseline" in med:
    print(f"baseline {med['baseline'] * 1000:.1f} ms, ratio {med['baseline'] / med['script']:.2f}x")
# Each round's contenders ran one after the other: their ratio within a round is the least
# moved by the machine's drift from round to round.
per = {k: [float(v) for n, v in rows if n == k] for k in names}
for k in [n for n in names if n != "script"]:
    ratios = [a / s for a, s in zip(per[k], per["script"])]
    print(f"{k} / script by round: " + " ".join(f"{x:.2f}" for x in ratios)
          + f", median {statistics.median(ratios):.2f}x")
PY

# Memory: 32 attempts at once.
new_repo
(cd "$repo" && FAKE_HOLD=$hold /usr/bin/time -o "$work/rss.txt" -f "%M %e" \
    "$bin" fanout --select all --jobs 32 --copies 32 claude --json -- say done \
    > "$work/fanout32.json")
read -r rss wall < "$work/rss.txt"
python3 - "$work/fanout32.json" <<'PY'
import json, sys
rec = json.load(open(sys.argv[1]))
print(f"32 attempts recorded: {len(rec.get('attempts', []))}")
PY
echo "32 attempts at once: peak RSS $((rss / 1024)) MiB ($rss KiB), wall $wall s (each harness held ${hold} s)"
rm -rf "$work"/repo.* "$work"/store.* "$work"/script.*
