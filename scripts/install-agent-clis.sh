#!/usr/bin/env bash
# Installs the agent CLIs that the end-to-end tests run offline against scripted model servers
# (Claude Code, Codex, OpenCode, Gemini CLI), at pinned versions, from the npm registry, into a cache:
#
#   ${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}/<package>@<version>/
#
# Usage: scripts/install-agent-clis.sh [--print-path] [claude|codex|opencode|gemini ...]
#   (no names: all of them). Idempotent: an installed version is only checked, so a second run
#   takes milliseconds. With --print-path, prints the absolute path of each CLI's executable,
#   one per line, in the order asked. Concurrent runs (parallel tests) wait on one lock.
#
# Needs node and npm. Changing a pinned version below installs the new one beside the old.
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
GEMINI_CLI_VERSION=0.61.0

root="${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}"

print_path=false
names=()
for arg in "$@"; do
    case "$arg" in
        --print-path) print_path=true ;;
        claude | codex | opencode | gemini) names+=("$arg") ;;
        -h | --help)
            sed -n '2,12p' "$0"
            exit 0
            ;;
        *)
            echo "install-agent-clis.sh: unknown CLI '$arg' (expected claude, codex, opencode or gemini)" >&2
            exit 2
            ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=(claude codex opencode gemini)

# name -> "package version executable"
spec() {
    case "$1" in
        claude) echo "@anthropic-ai/claude-code $CLAUDE_CODE_VERSION claude" ;;
        codex) echo "@openai/codex $CODEX_VERSION codex" ;;
        opencode) echo "opencode-ai $OPENCODE_VERSION opencode" ;;
        gemini) echo "@google/gemini-cli $GEMINI_CLI_VERSION gemini" ;;
    esac
}

installed() { # dir bin
    [ -f "$1/.installed" ] && [ -x "$1/node_modules/.bin/$2" ]
}

install_one() { # name
    local package version bin dir tmp
    read -r package version bin < <(spec "$1")
    dir="$root/${package//\//+}@$version"
    if ! installed "$dir" "$bin"; then
        mkdir -p "$root"
        # One installer at a time; the others find the result when they get the lock.
        exec 9>"$root/.lock"
        flock 9
        if ! installed "$dir" "$bin"; then
            command -v npm >/dev/null || {
                echo "install-agent-clis.sh: npm is needed to install $package" >&2
                exit 1
            }
            echo "install-agent-clis.sh: installing $package@$version into $dir" >&2
            tmp="$dir.partial.$$"
            rm -rf "$tmp"
            mkdir -p "$tmp"
            # The package's own install script picks the platform binary; keep it.
            npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error \
                "$package@$version" >&2
            [ -x "$tmp/node_modules/.bin/$bin" ] || {
                echo "install-agent-clis.sh: $package@$version installed no '$bin' executable" >&2
                exit 1
            }
            touch "$tmp/.installed"
            rm -rf "$dir"
            mv "$tmp" "$dir"
        fi
        flock -u 9
    fi
    if $print_path; then
        echo "$dir/node_modules/.bin/$bin"
    fi
}

for name in "${names[@]}"; do
    install_one "$name"
done
