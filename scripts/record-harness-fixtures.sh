#!/usr/bin/env bash
# Re-records the real-CLI stream fixtures: runs the pinned Claude Code, Codex, OpenCode,
# Qwen Code, pi and Gemini CLI
# (installed by scripts/install-agent-clis.sh when missing) offline against the scripted
# model servers in the real-CLI scenarios, and writes what they print, with the retained
# records agentrun reads after them, to
#
#   tests/fixtures/harness/{claude,codex,opencode,qwen,pi,gemini}/<cli>-<version>-<scenario>.jsonl
#
# (see tests/tests/record_real_streams.rs for the scenarios and what is normalized), with
# the API failure scenarios: for Codex, OpenCode, pi and Gemini CLI HTTP 429 with and without
# Retry-After, 503, 500, 401, a cut stream and a request never answered (decoded by
# core/tests/harness_real_failures.rs); for Claude Code and Qwen Code also 529 and an
# unreachable API (decoded by core/tests/harness_real_failures_claude_family.rs).
# AGENTRUN_RECORD_SCENARIOS=a,b records only those of the Claude Code and Qwen Code ones.
# Then run `cargo test -p agentrun-core --test harness_real_cli --test harness_real_failures --test harness_real_failures_claude_family`: after a CLI version change,
# rename the fixtures it reads to the new version and review what changed.
#
# Usage: scripts/record-harness-fixtures.sh [claude|codex|opencode|qwen|pi|gemini ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

filters=()
for arg in "$@"; do
    case "$arg" in
        claude) filters+=(record_claude_code) ;;
        codex) filters+=(record_codex) ;;
        opencode) filters+=(record_opencode) ;;
        qwen) filters+=(record_qwen_code) ;;
        pi) filters+=(record_pi) ;;
        gemini) filters+=(record_gemini_cli) ;;
        -h | --help)
            sed -n '2,19p' "$0"
            exit 0
            ;;
        *)
            echo "record-harness-fixtures.sh: unknown CLI '$arg' (expected claude, codex, opencode, qwen, pi or gemini)" >&2
            exit 2
            ;;
    esac
done
[ ${#filters[@]} -gt 0 ] || filters=(record_)

bash scripts/install-agent-clis.sh
for filter in "${filters[@]}"; do
    cargo test -p agentrun-tests --test record_real_streams "$filter" -- --ignored --nocapture
done
