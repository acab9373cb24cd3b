#!/usr/bin/env bash
# Installs the official MCP Python SDK (the client the MCP conformance tests drive agentrun
# with) into a virtual environment, once. Usage: install-mcp-python-client.sh VENV_DIR
#
# The version is pinned so that a new SDK release cannot change what the tests check. Safe to
# run concurrently (a lock serializes installers); a finished venv is reused as is.
set -euo pipefail

MCP_VERSION=2.3.0
venv=${1:?usage: $0 VENV_DIR}
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$venv/.mcp-$MCP_VERSION" ]; then
    exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
touch "$venv/.mcp-$MCP_VERSION"
