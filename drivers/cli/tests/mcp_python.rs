//! `agentrun mcp` driven by a client nobody here wrote: the official MCP Python SDK
//! (`tests/mcp/client.py`, one scenario per test), installed on first use
//! (`tests/mcp/python.rs`).

#[path = "mcp/python.rs"]
mod python_client;

// The HTTP server helpers; these tests use only its start-up.
#[allow(dead_code)]
#[path = "mcp/http.rs"]
mod http;

use python_client::{client, python};

/// Runs one scenario of `client.py` against a fresh store; fails with its output.
fn scenario(name: &str) {
    let store = tempfile::tempdir().unwrap();
    passes(name, client(name, &store.path().join("store")));
}

/// Runs the client; fails with its output unless it says the scenario passed.
fn passes(name: &str, mut client: std::process::Command) {
    let output = client.output().expect("run the Python client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "scenario {name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(stdout.trim(), format!("{name}: ok"));
}

/// initialize, tools/list with valid schemas, a 300 000-line run recovered byte for byte by
/// following the read hints, byte reads, resource templates and reads, and an error result
/// for every kind of bad argument.
#[test]
fn conformance_with_the_python_sdk() {
    scenario("conformance");
}

/// A cancelled call stops the program and the grandchild it started; the server goes on.
#[test]
fn a_cancelled_call_leaves_no_process_behind() {
    scenario("cancel");
}

/// 32 concurrent calls with distinct outputs and result sinks each get their own result.
#[test]
fn concurrent_calls_get_their_own_results() {
    scenario("concurrent");
}

/// A call made with a progress token gets increasing progress notifications.
#[test]
fn long_runs_report_progress_when_asked() {
    scenario("progress");
}

/// `compact` with a summarizer program: the pruned retry's summary, and read hints that read
/// back the retained tool output byte for byte; bad arguments get error results.
#[test]
fn compact_summarizes_and_hints_at_the_retained_output() {
    scenario("compact");
}

/// Malformed JSON-RPC, invalid requests, unknown methods and oversized requests get protocol
/// errors, and the server keeps serving.
#[test]
fn the_server_survives_bad_protocol_input() {
    scenario("robustness");
}

/// `resources/list` pages over every run of the store (those of an earlier server process
/// too), newest first, with a cursor; a bogus cursor is -32602; each run is followed by
/// `notifications/resources/list_changed`.
#[test]
fn resources_list_pages_over_the_whole_store() {
    scenario("store_resources");
}

/// With --structured-content every tool declares an output schema that every result (error
/// results included) validates against; run results link each artifact, and the links
/// resolve with resources/read; without the flag no tool declares a schema.
#[test]
fn output_schemas_validate_and_resource_links_resolve() {
    scenario("structured");
}

/// Tasks (protocol 2025-11-25): a `run` as a task is polled with `tasks/get` to its result
/// (`tasks/result`), with progress under the original token and a status notification;
/// `tasks/list` shows it; `tasks/cancel` on a long run stops its program and grandchild; a
/// bogus task id or cursor is -32602.
#[test]
fn a_run_as_a_task_is_polled_to_its_result() {
    scenario("tasks");
}

/// The same over Streamable HTTP: one implementation for both transports.
#[test]
fn tasks_work_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let allow = python().to_str().expect("a UTF-8 venv path");
    let server = http::HttpServer::start(dir.path(), &["--structured-content", "--allow", allow]);
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    let mut tasks = client("tasks", &dir.path().join("store"));
    tasks.arg(&url);
    passes("tasks", tasks);
}
