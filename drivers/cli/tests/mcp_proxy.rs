//! `agentrun mcp proxy` in front of servers nobody here wrote: the official MCP filesystem
//! server (installed on first use by `scripts/install-mcp-servers.sh`, pinned) and a server
//! made with the official MCP Python SDK, driven by that SDK's client
//! (`tests/mcp/proxy_client.py`, one scenario per test).

#[path = "mcp/python.rs"]
#[allow(dead_code)] // Only its Python is used here, with a client of this file's own.
mod python_client;

#[path = "mcp/filesystem.rs"]
mod filesystem;

use std::process::Command;

use filesystem::filesystem_server;

/// Runs one scenario of `proxy_client.py` with a fresh store and directory; fails with its
/// output.
fn scenario(name: &str) {
    let (node, index) = filesystem_server();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    let output = Command::new(python_client::python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp/proxy_client.py"
        ))
        .arg(name)
        .arg(env!("CARGO_BIN_EXE_agentrun"))
        .arg(dir.path().join("store"))
        .arg(node)
        .arg(index)
        .arg(&root)
        .env("HOME", dir.path())
        .output()
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scenario {name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(stdout.trim(), format!("{name}: ok"));
}

/// A 3 MB file read through the proxy is a bounded preview whose first hint names the first
/// text item's stream; following the hints with `read` gives back the file exactly, and the
/// structured content is retained as JSON. The proxied tool declares no outputSchema and
/// says why.
#[test]
fn a_huge_result_is_bounded_and_pages_back_exactly() {
    scenario("big");
}

/// Small results (text, a directory listing, an error result) are the server's answers
/// byte for byte.
#[test]
fn a_small_result_passes_byte_for_byte() {
    scenario("small");
}

/// Cancelling a proxied call cancels the tool in the child, which goes on serving.
#[test]
fn cancelling_a_proxied_call_cancels_it_in_the_child() {
    scenario("cancel");
}

/// The proxy ends with the child's status when the child exits, and stops the child when
/// the client hangs up.
#[test]
fn the_proxy_lives_as_long_as_both_sides() {
    scenario("lifetime");
}
