#!/usr/bin/env bash
# Peak memory and time of `agentrun interpret` and `agentrun compact` on inputs built to cost
# as much as possible per byte (docs/benchmarks.md, "Bounded work on hostile input"): one
# 63 MiB line of [] values, /dev/zero, two 232 MB transcripts, and streams naming 150 000 and
# 500 000 distinct models. Each command runs under /usr/bin/time -v (apt-get install time).
#
#   scripts/bench-bounds.sh [WORKDIR] [AGENTRUN]
#
# WORKDIR defaults to /tmp/agentrun-bench-bounds; AGENTRUN to the release build of this tree
# (built first). Pass another build's binary to measure it on the same inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/agentrun-bench-bounds}
bin=${2:-}
if [ -z "$bin" ]; then
    cargo build --release -p agentrun >/dev/null
    bin=${CARGO_TARGET_DIR:-$PWD/target}/release/agentrun
fi
# Absolute, since the commands run inside WORKDIR.
bin=$(realpath "$bin")
mkdir -p "$work"
cd "$work"
if [ ! -s d500k.jsonl ]; then
    python3 - <<'PY'
import json
body = '[' + '[],' * 22000000 + '[]]'
open('a_obj.jsonl', 'w').write('{"type":"result","subtype":"success","x":' + body + '}\n')
open('a_bare.jsonl', 'w').write(body + '\n')
for count, name in [(150000, 'd150k.jsonl'), (500000, 'd500k.jsonl')]:
    with open(name, 'w') as f:
        for i in range(count):
            f.write('{"type":"assistant","message":{"model":"claude-distinct-model-%07d","content":[]}}\n' % i)
def transcript(name, out, blocks):
    with open(name, 'w') as f:
        f.write('{"model":"m","messages":[')
        i = size = 0
        while size < 232 * 1000 * 1000:
            call = {"command": "make %d" % i}
            if blocks:
                call["args"] = [1, 2, 3]
            text = "line %d " % i + out
            content = [{"type": "text", "text": text}] if blocks else text
            a = json.dumps({"role": "assistant", "content": [
                {"type": "text", "text": "run %d" % i},
                {"type": "tool_use", "id": "toolu_%d" % i, "name": "bash", "input": call}]})
            u = json.dumps({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_%d" % i, "content": content}]})
            s = ('' if i == 0 else ',') + a + ',' + u
            f.write(s)
            size += len(s)
            i += 1
        f.write(']}')
transcript('c_transcript.json', 'x' * 11000, False)
transcript('c2_transcript.json', 'y' * 400, True)
PY
fi
ls -l a_obj.jsonl a_bare.jsonl c_transcript.json c2_transcript.json d150k.jsonl d500k.jsonl
run() {
    local name=$1
    shift
    rm -rf store
    local rc=0
    /usr/bin/time -v "$@" >"$name.out" 2>"$name.err" || rc=$?
    echo "$name: exit $rc, $(grep -E 'Elapsed|Maximum resident' "$name.err" | sed 's/^\s*//' | tr '\n' ' ')"
}
run a_obj "$bin" interpret --harness claude a_obj.jsonl
run a_bare "$bin" interpret --harness claude a_bare.jsonl
run b_zero timeout 300 "$bin" --store store compact /dev/zero --summarizer 'cat >/dev/null; echo ok'
run c_232 "$bin" --store store compact c_transcript.json --summarizer 'cat >/dev/null; echo ok'
run c2_232 "$bin" --store store compact c2_transcript.json --summarizer 'cat >/dev/null; echo ok'
run d150k "$bin" interpret --harness claude d150k.jsonl
# A quadratic decoder needs far more than 15 minutes here: the timeout ends it (exit 124).
run d500k timeout 900 "$bin" interpret --harness claude d500k.jsonl
