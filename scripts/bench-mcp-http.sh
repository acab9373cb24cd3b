#!/usr/bin/env bash
# A deep `read` over Streamable HTTP (`agentrun mcp --http`) beside stdio, in one run
# (results go to docs/benchmarks.md, section "MCP server"); the clients are the official MCP
# Python SDK (installed into a venv under the target directory by
# scripts/install-mcp-python-client.sh) and bare JSON-RPC. See scripts/bench_mcp_http.py.
#
#   scripts/bench-mcp-http.sh [WORKDIR]
#
# The store (with a 1 GiB artifact; BENCH_MCP_BYTES changes the size) lives in WORKDIR
# (default: a fresh directory under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
venv="$(release_dir)/../tmp/mcp-python-client"
store_dir=${1:-$(mktemp -d /tmp/agentrun-bench-mcp-http.XXXXXX)}
cargo build --release -q -p agentrun
bash scripts/install-mcp-python-client.sh "$venv"
machine_line
mkdir -p "$store_dir"
"$venv/bin/python" scripts/bench_mcp_http.py "$(release_dir)/agentrun" "$store_dir"
