//! The official MCP filesystem server (npm `@modelcontextprotocol/server-filesystem`, pinned)
//! for the proxy tests: installed on first use by `scripts/install-mcp-servers.sh`.

use std::process::Command;
use std::sync::OnceLock;

/// Node 22 and the filesystem server's entry point (`NODE INDEX DIR...` runs it on stdio),
/// installing them when missing.
pub(crate) fn filesystem_server() -> &'static (String, String) {
    static SERVER: OnceLock<(String, String)> = OnceLock::new();
    SERVER.get_or_init(|| {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/install-mcp-servers.sh"
        );
        let output = Command::new("bash")
            .arg(script)
            .output()
            .expect("run scripts/install-mcp-servers.sh");
        assert!(
            output.status.success(),
            "installing the MCP filesystem server failed ({}); it needs npm and access to the \
             npm registry:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).expect("paths are UTF-8");
        let mut lines = stdout.lines();
        match (lines.next(), lines.next()) {
            (Some(node), Some(index)) => (node.to_owned(), index.to_owned()),
            _ => panic!("install-mcp-servers.sh printed no paths: {stdout:?}"),
        }
    })
}
