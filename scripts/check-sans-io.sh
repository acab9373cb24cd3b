#!/usr/bin/env bash
# Fails when agentrun-core names an I/O module, reads a clock or the environment, or depends on
# an async runtime. Clippy's disallowed-methods (core/clippy.toml) catches calls; this catches
# any mention, including `use` lines and paths clippy has no rule for.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if grep -rnE 'std::(fs|process|net|thread)\b|Instant::now|SystemTime::now|std::env\b|\benv::var' core/src; then
    echo "error: agentrun-core must do no I/O and read no clock or environment (see docs/architecture.md)" >&2
    status=1
fi
if grep -nE '^(tokio|smol|async-process|async-std|blocking|libc|rustix|nix)\b' core/Cargo.toml; then
    echo "error: agentrun-core must not depend on an async runtime or OS bindings" >&2
    status=1
fi
if ! grep -q '^#!\[forbid(unsafe_code)\]' core/src/lib.rs; then
    echo "error: core/src/lib.rs must carry #![forbid(unsafe_code)]" >&2
    status=1
fi
exit $status
