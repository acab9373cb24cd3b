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
