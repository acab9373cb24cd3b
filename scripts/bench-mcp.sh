#!/usr/bin/env bash
# Benchmarks of `agentrun mcp` (results go to docs/benchmarks.md, section "MCP server"),
# driven from the official MCP Python SDK (installed into a venv under the target directory by
# scripts/install-mcp-python-client.sh).
#
#   scripts/bench-mcp.sh [WORKDIR]
#
# Prints the round trip of a `read` tool call for a 2000-line page at offsets across a 1 GiB
# artifact (median of 25 calls each), side by side with `agentrun read` of the same page as a
# process, then the server's peak memory under 1 and under 32 concurrent `run` calls printing
# 64 MiB each. The stores live in WORKDIR (default: a fresh directory under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
work=${1:-$(mktemp -d /tmp/agentrun-bench-mcp.XXXXXX)}
mkdir -p "$work"
cargo build --release -q -p agentrun
bash scripts/install-mcp-python-client.sh "$target/tmp/mcp-python-client"
"$target/tmp/mcp-python-client/bin/python" scripts/bench_mcp.py "$target/release/agentrun" "$work"
