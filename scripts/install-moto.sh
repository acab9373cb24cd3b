#!/usr/bin/env bash
# Installs moto's S3-API server (PyPI `moto[server]`, pinned) into a virtual environment in a
# cache, for the tests of the shared store on object storage, which start it on 127.0.0.1:
#
#   ${AGENTRUN_MOTO:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/moto}/<version>/bin/moto_server
#
# Usage: scripts/install-moto.sh [--print-path] [--with-awscli]
#   Idempotent (an installed version is only checked). --print-path prints the absolute path
#   of moto_server. --with-awscli also installs awscli (PyPI, pinned) into the same
#   environment, for the benchmarks (`aws s3 cp` against the same server). Concurrent runs
#   (parallel tests) wait on one lock.
#
# Needs python3 (3.9 or newer) with the venv module.
set -euo pipefail

MOTO_VERSION=5.2.5
AWSCLI_VERSION=1.46.2

root="${AGENTRUN_MOTO:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/moto}"
print_path=false
awscli=false
for arg in "$@"; do
    case "$arg" in
        --print-path) print_path=true ;;
        --with-awscli) awscli=true ;;
        -h | --help)
            sed -n '2,13p' "$0"
            exit 0
            ;;
        *)
            echo "install-moto.sh: unknown argument '$arg'" >&2
            exit 2
            ;;
    esac
done

env_dir="$root/$MOTO_VERSION"
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9

# A venv's scripts name its own path, so it is built where it lives; `.complete` marks a
# finished install (an interrupted one is started again).
if [[ ! -e "$env_dir/.complete" ]]; then
    rm -rf "$env_dir"
    python3 -m venv "$env_dir" >&2
    "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        "moto[server]==$MOTO_VERSION" >&2
    touch "$env_dir/.complete"
fi
if $awscli && [[ ! -x "$env_dir/bin/aws" ]]; then
    "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        "awscli==$AWSCLI_VERSION" >&2
fi
if $print_path; then
    echo "$env_dir/bin/moto_server"
fi
