#!/usr/bin/env bash
# Proxy overhead (results go to docs/benchmarks.md, section "MCP server"): a small tools/call
# round trip to the official filesystem server alone and through `agentrun mcp proxy`, median
# of 100 calls, three alternating rounds.
#
#   scripts/bench-mcp-proxy.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
target=${CARGO_TARGET_DIR:-$PWD/target}
work=${1:-$(mktemp -d /tmp/agentrun-bench-mcp-proxy.XXXXXX)}
mkdir -p "$work"
cargo build --release -q -p agentrun
paths="$(bash scripts/install-mcp-servers.sh)"
node="${paths%%$'\n'*}"
index="${paths#*$'\n'}"
machine_line
python3 scripts/bench_mcp_proxy.py "$target/release/agentrun" "$node" "$index" "$work"
