#!/usr/bin/env bash
# Installs s3s-fs (crates.io, pinned), an S3-API server written in Rust that keeps objects in a
# directory, for the benchmarks of the shared store: against a server whose own cost is small,
# the clients' costs show. Built with the machine's cargo into a cache:
#
#   ${AGENTRUN_S3S_FS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/s3s-fs}/<version>/bin/s3s-fs
#
# Usage: scripts/install-s3s-fs.sh [--print-path]
#   Idempotent (an installed version is only checked). --print-path prints the absolute path
#   of s3s-fs. Takes a few minutes the first time (a release build).
set -euo pipefail

S3S_FS_VERSION=0.14.1

root="${AGENTRUN_S3S_FS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/s3s-fs}"
print_path=false
for arg in "$@"; do
    case "$arg" in
        --print-path) print_path=true ;;
        -h | --help)
            sed -n '2,10p' "$0"
            exit 0
            ;;
        *)
            echo "install-s3s-fs.sh: unknown argument '$arg'" >&2
            exit 2
            ;;
    esac
done

dir="$root/$S3S_FS_VERSION"
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if [[ ! -x "$dir/bin/s3s-fs" ]]; then
    # --locked: the versions its own lock file names, as its maintainers tested them.
    cargo install --quiet --locked --features binary --root "$dir" "s3s-fs@$S3S_FS_VERSION" >&2
fi
if $print_path; then
    echo "$dir/bin/s3s-fs"
fi
