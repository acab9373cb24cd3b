# Helpers shared by the benchmark scripts (sourced, not run).

# The directory of release builds: `$CARGO_TARGET_DIR/release`, else `target/release`.
release_dir() {
    echo "${CARGO_TARGET_DIR:-$PWD/target}/release"
}

# Makes FILE, when missing: 1 GiB exactly of log-like text lines of varying length, then reads
# it once so the benchmarks start with it in the page cache.
make_log_text() {
    local file=$1
    if [ ! -f "$file" ]; then
        # awk is cut off by head (SIGPIPE): that is the point, so no pipefail here.
        (set +o pipefail
         awk 'BEGIN { for (i = 0; i < 30000000; i++) printf "%09d INFO worker-%d processed item %d in %d ms status=ok\n", i, i % 16, i * 7, i % 997 }' \
            | head -c $((1 << 30)) > "$file")
    fi
    cat "$file" > /dev/null
}

# One line naming the machine: cores, CPU model, kernel.
machine_line() {
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
}

# bench_medians TIMES: TIMES holds one line per run, "NAME WALL CPU RSS_KIB"; prints each
# name's median wall and CPU time and peak RSS, then how each other tool compares with
# `agentrun` (`wc`, the line-scan limit, as agentrun's multiple of it).
bench_medians() {
    python3 - "$1" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for name in dict.fromkeys(r[0] for r in rows):
    wall = statistics.median(float(r[1]) for r in rows if r[0] == name)
    cpu = statistics.median(float(r[2]) for r in rows if r[0] == name)
    rss = max(int(r[3]) for r in rows if r[0] == name)
    med[name] = (wall, cpu)
    print(f"{name:9} median wall {wall:.3f} s, median CPU {cpu:.3f} s, peak RSS {rss} KiB")
a = med["agentrun"]
for name, (wall, cpu) in med.items():
    if name == "agentrun":
        continue
    if name == "wc":
        # /usr/bin/time counts in 10 ms steps: a faster wc counts as 10 ms.
        print(f"agentrun / wc -l: {a[0] / max(wall, 0.01):.1f}x by wall, {a[1] / max(cpu, 0.01):.1f}x by CPU")
    else:
        print(f"{name} / agentrun: {wall / a[0]:.2f}x by wall, {cpu / a[1]:.2f}x by CPU")
PY
}
