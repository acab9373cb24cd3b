#!/usr/bin/env bash
# The shared store on object storage, side by side in one run against one S3-API server (moto's
# server mode on 127.0.0.1, installed with awscli by scripts/install-moto.sh --with-awscli).
# Results go to docs/benchmarks.md, section "Shared store on object storage".
#
#   scripts/bench-store.sh [WORKDIR]
#
# Makes a 1 GiB text file in WORKDIR (default: a fresh directory under /work if it exists, else
# /tmp; needs ~4 GiB free: the file, the local spool, moto's spilled objects). Then:
#  1. Publishing, RUNS rounds (default 5), the order alternating in each round:
#       agentrun --store s3://bench/aN run -- cat FILE   (fresh home and prefix: no dedupe hit)
#       aws s3 cp FILE s3://bench/cN/file                 (awscli's default multipart settings)
#     each under /usr/bin/time (wall time and peak RSS); what a round uploaded is deleted,
#     untimed, before the next command. Prints every round, the medians and their ratio.
#  2. Paging the published artifact from another home (nothing cached): the HTTP requests
#     (and, among them, range GETs: status 206) that moto logs for one
#     `agentrun read URI --offset DEEP --limit 2000`, for the first read (the index sidecar
#     not yet cached) and the next ones; then the median of PAGES (default 15) reads of the
#     first page and of the deep page from the bucket and from a local store holding the same
#     file, beside one range GET of the same bytes by curl (the server's own cost).
# BREAKDOWN=1 adds, after the publishing rounds, RUNS rounds of the two parts of agentrun's
#     time: `agentrun run -- cat FILE` into a local store (the capture alone), and
#     `aws s3 cp` limited to 3 requests in flight (as many parts as agentrun keeps in flight).
# BREAKDOWN_ONLY=1 runs only those. PAGING_ONLY=1 skips the publishing rounds.
# SHOW_REQUESTS=1 prints the requests counted.
# AGENTRUN_BIN=PATH measures that build instead of building this tree in release mode.
# SERVER=s3s-fs runs the publishing rounds (and BREAKDOWN) against s3s-fs instead (an S3-API
#     server in Rust, keeping objects in WORKDIR; installed by scripts/install-s3s-fs.sh), where
#     the server's own cost is small and the clients' costs show; the paging part counts
#     moto's request log, so it is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
RUNS=${RUNS:-5}
PAGES=${PAGES:-15}
default_parent=/tmp
[ -d /work ] && default_parent=/work
work=${1:-$(mktemp -d "$default_parent/agentrun-bench-store.XXXXXX")}
mkdir -p "$work"
if [ -n "${AGENTRUN_BIN:-}" ]; then
    bin=$AGENTRUN_BIN
else
    cargo build --release -q -p agentrun
    bin=$(release_dir)/agentrun
fi
SERVER=${SERVER:-moto}
case $SERVER in
    moto | s3s-fs) ;;
    *) echo "bench-store.sh: SERVER is moto or s3s-fs, not '$SERVER'" >&2; exit 2 ;;
esac
moto_server=$(bash scripts/install-moto.sh --with-awscli --print-path)
aws=$(dirname "$moto_server")/aws

text=$work/text-1g.txt
make_log_text "$text"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$work/$SERVER.log
if [ "$SERVER" = moto ]; then
    # moto keeps objects over 16 MiB in spooled temporary files: keep them on WORKDIR's disk.
    mkdir -p "$work/tmp"
    TMPDIR=$work/tmp "$moto_server" -H 127.0.0.1 -p "$port" > "$log" 2>&1 &
else
    rm -rf "$work/s3s-fs-root"; mkdir -p "$work/s3s-fs-root"
    "$(bash scripts/install-s3s-fs.sh --print-path)" --host 127.0.0.1 --port "$port" \
        --access-key test --secret-key test "$work/s3s-fs-root" > "$log" 2>&1 &
fi
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
until curl -s -o /dev/null "http://127.0.0.1:$port/"; do sleep 0.2; done

export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true
export AWS_CONFIG_FILE=$work/no-aws-config AWS_SHARED_CREDENTIALS_FILE=$work/no-aws-credentials
"$aws" s3 mb s3://bench > /dev/null

median() {
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}

# Runs a command under /usr/bin/time; prints "WALL_SECONDS PEAK_RSS_KIB".
timed() {
    local out=$work/time.out
    /usr/bin/time -f '%e %M' -o "$out" "$@" > /dev/null 2> "$work/cmd.err" || {
        cat "$work/cmd.err" >&2
        return 1
    }
    cat "$out"
}

# Deletes everything under a bucket prefix (untimed), then lets the disk settle.
clear_prefix() {
    "$aws" s3 rm --quiet --recursive "s3://bench/$1" > /dev/null
    rm -rf "$work/homes"
    sync
}

publish_agentrun() {
    mkdir -p "$work/homes/a$1"
    timed env AGENTRUN_HOME="$work/homes/a$1/spool" "$bin" --store "s3://bench/a$1" \
        run -- cat "$text"
}

machine_line
echo "SHA extensions (sha_ni): $(grep -qw sha_ni /proc/cpuinfo && echo yes || echo no)"
echo "memory: $(free -g | awk '/^Mem:/ {print $2}') GiB; filesystem of $work: $(df -T "$work" | awk 'NR==2 {print $2}')"
if [ "$SERVER" = moto ]; then
    echo "server: moto $("$(dirname "$moto_server")/python" -c 'import moto; print(moto.__version__)'); $("$aws" --version 2>&1)"
else
    echo "server: s3s-fs $("$(bash scripts/install-s3s-fs.sh --print-path)" --version | awk '{print $2}'); $("$aws" --version 2>&1)"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "== publishing 1 GiB: agentrun run (capture included) vs aws s3 cp =="
runs=() rss=() cps=()
pairs=$RUNS
[ -z "${PAGING_ONLY:-}${BREAKDOWN_ONLY:-}" ] || pairs=0
for i in $(seq "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then
        read -r t m < <(publish_agentrun "$i"); clear_prefix "a$i"
        read -r c _ < <(timed "$aws" s3 cp --quiet "$text" "s3://bench/c$i/file"); clear_prefix "c$i"
    else
        read -r c _ < <(timed "$aws" s3 cp --quiet "$text" "s3://bench/c$i/file"); clear_prefix "c$i"
        read -r t m < <(publish_agentrun "$i"); clear_prefix "a$i"
    fi
    runs+=("$t") rss+=("$m") cps+=("$c")
    echo "round $i: agentrun ${t}s (peak RSS $((m / 1024)) MiB), aws s3 cp ${c}s, ratio $(echo "$t / $c" | bc -l | cut -c1-5)"
done
if [ "$pairs" -gt 0 ]; then
mt=$(median "${runs[@]}") mc=$(median "${cps[@]}")
echo "median: agentrun ${mt}s, aws s3 cp ${mc}s, ratio $(echo "$mt / $mc" | bc -l | cut -c1-5)"
echo "agentrun peak RSS: median $(( $(median "${rss[@]}" | cut -d. -f1) / 1024 )) MiB, max $(( $(printf '%s\n' "${rss[@]}" | sort -n | tail -1) / 1024 )) MiB"
fi
if [ -n "${BREAKDOWN:-}${BREAKDOWN_ONLY:-}" ]; then
    printf '[default]\ns3 =\n    max_concurrent_requests = 3\n' > "$work/aws-3-in-flight"
    locals=() cp3s=()
    for i in $(seq "$RUNS"); do
        mkdir -p "$work/homes/l$i"
        read -r l _ < <(timed env AGENTRUN_HOME="$work/homes/l$i/spool" "$bin" run -- cat "$text")
        rm -rf "$work/homes"; sync
        read -r c _ < <(timed env AWS_CONFIG_FILE="$work/aws-3-in-flight" "$aws" s3 cp --quiet "$text" "s3://bench/c$i/file")
        clear_prefix "c$i"
        locals+=("$l") cp3s+=("$c")
        echo "round $i: agentrun run into a local store ${l}s, aws s3 cp with 3 requests in flight ${c}s"
    done
    echo "median: capture alone $(median "${locals[@]}")s, aws s3 cp with 3 in flight $(median "${cp3s[@]}")s"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
[ -z "${BREAKDOWN_ONLY:-}" ] && [ "$SERVER" = moto ] || exit 0

echo "== paging a 2000-line page of the 1 GiB artifact =="
lines=$(wc -l < "$text")
deep=$(( (lines - 4000) / 1000 * 1000 ))
mkdir -p "$work/homes/w" "$work/homes/r" "$work/homes/local"
json=$(AGENTRUN_HOME="$work/homes/w/spool" "$bin" --store s3://bench/p run --json -- cat "$text")
uri=$(printf '%s' "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["artifacts"]["stdout"])')

manifest=${uri%/stdout}
stream=artifact://$(AGENTRUN_HOME="$work/homes/w/spool" "$bin" --store s3://bench/p read "$manifest" --all \
    | python3 -c 'import json, sys; print(next(s["sha256"] for s in json.load(sys.stdin)["streams"] if s["name"] == "stdout"))')
echo "artifact: $lines lines; deep page at line $deep; the run's stdout is $uri (a stream of the run's manifest), its own URI $stream"

# HTTP requests moto logs during one read of a 2000-line page from the reading home.
count_requests() {
    local before after new
    before=$(wc -l < "$log")
    AGENTRUN_HOME="$work/homes/r/spool" "$bin" --store s3://bench/p read "$1" --offset "$2" --limit 2000 > /dev/null 2>&1
    # The server logs a request after answering it.
    sleep 0.5
    after=$(wc -l < "$log")
    new=$(tail -n +"$((before + 1))" "$log" | head -n "$((after - before))" | grep -E '"(GET|HEAD|PUT|POST|DELETE) ' || true)
    echo "$(printf '%s\n' "$new" | grep -c . || true) requests, $(printf '%s\n' "$new" | grep -c '" 206 ' || true) range GETs (206)"
    if [ -n "${SHOW_REQUESTS:-}" ]; then printf '%s\n' "$new" | sed 's/^/    /' >&2; fi
}
for u in "$stream" "$uri"; do
    rm -rf "$work/homes/r"
    echo "$u:"
    echo "  deep page, first read on a fresh home (index sidecars fetched): $(count_requests "$u" "$deep")"
    echo "  deep page, next read (sidecars cached):                         $(count_requests "$u" "$deep")"
    echo "  first page (sidecars cached):                                   $(count_requests "$u" 0)"
done

AGENTRUN_HOME="$work/homes/local/spool" "$bin" run -- cat "$text" > /dev/null 2>&1

page_seconds() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > /dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
# The server's own cost: one range GET by curl of the deep page's bytes (the line index of the
# local store's copy gives the byte range).
range=$(AGENTRUN_HOME="$work/homes/local/spool" "$bin" read "$stream" --offset "$deep" --limit 2000 2>/dev/null | wc -c)
start=$(head -n "$deep" "$text" | wc -c)
key=$(printf '%s' "${stream#artifact://}" | sed 's#^\(..\)#\1/#')
for where in bucket local curl; do
    for offset in 0 "$deep"; do
        ts=()
        for _ in $(seq "$PAGES"); do
            case $where in
                bucket) ts+=("$(page_seconds env AGENTRUN_HOME="$work/homes/r/spool" "$bin" --store s3://bench/p read "$stream" --offset "$offset" --limit 2000)") ;;
                local) ts+=("$(page_seconds env AGENTRUN_HOME="$work/homes/local/spool" "$bin" read "$stream" --offset "$offset" --limit 2000)") ;;
                curl)
                    b=0
                    [ "$offset" = 0 ] || b=$start
                    ts+=("$(page_seconds curl -sf -r "$b-$((b + range - 1))" "http://127.0.0.1:$port/bench/p/objects/$key")") ;;
            esac
        done
        ms=$(echo "$(median "${ts[@]}") * 1000" | bc -l | cut -c1-7)
        case $where in
            bucket) what="agentrun read, bucket" ;;
            local) what="agentrun read, local store" ;;
            curl) what="curl, one range GET of the page's $range bytes" ;;
        esac
        echo "$what, page at line $offset: median ${ms} ms over $PAGES"
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
