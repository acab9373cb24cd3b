//! The official MCP Python SDK for the MCP tests: installed on first use into a virtual
//! environment under the target directory by `scripts/install-mcp-python-client.sh` (a pinned
//! version, from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The virtual environment's Python, installing the SDK when missing.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-python-client");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/install-mcp-python-client.sh"
        );
        let status = Command::new("bash")
            .arg(script)
            .arg(&venv)
            .status()
            .expect("run scripts/install-mcp-python-client.sh");
        assert!(
            status.success(),
            "installing the MCP Python SDK failed ({status}); it needs python3 with venv and \
             access to PyPI"
        );
        venv.join("bin/python")
    })
}

/// `python client.py SCENARIO AGENTRUN STORE`: one scenario of `tests/mcp/client.py`, the
/// client, against `agentrun mcp` on `store`. Prints `SCENARIO: ok` when it passed.
pub(crate) fn client(scenario: &str, store: &Path) -> Command {
    let mut c = Command::new(python());
    c.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py"))
        .arg(scenario)
        .arg(env!("CARGO_BIN_EXE_agentrun"))
        .arg(store);
    c
}
