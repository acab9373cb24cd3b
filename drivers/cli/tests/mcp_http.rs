//! `agentrun mcp --http`: the Streamable HTTP transport spoken to header by header (sessions,
//! DNS-rebinding protection, the bearer token, the one endpoint, the stop on SIGTERM), and
//! the official MCP conformance suite run against it.

#[path = "mcp/http.rs"]
mod http;

use std::process::Command;

use http::{HttpServer, INITIALIZE, PATIENCE, messages, request};

fn json_post<'a>(host: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Host", host),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    headers
}

/// A session starts with `initialize` (its id in `Mcp-Session-Id`), serves requests that
/// carry the id, and refuses those that carry none.
#[test]
fn a_session_is_initialized_and_used() {
    let store = tempfile::tempdir().unwrap();
    let server = HttpServer::start(store.path(), &[]);
    let host = format!("127.0.0.1:{}", server.port);
    let answer = request(
        server.port,
        "POST",
        "/mcp",
        &json_post(&host, &[]),
        INITIALIZE,
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let session = answer
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let init = messages(&answer);
    assert_eq!(
        init[0]["result"]["serverInfo"]["name"], "agentrun",
        "{init:?}"
    );
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let sessioned = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let answer = request(
        server.port,
        "POST",
        "/mcp",
        &json_post(&host, &sessioned),
        initialized,
    );
    assert_eq!(answer.status, 202, "{answer:?}");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let answer = request(
        server.port,
        "POST",
        "/mcp",
        &json_post(&host, &sessioned),
        list,
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let tools = messages(&answer);
    let names: Vec<_> = tools[0]["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"run".to_owned()) && names.contains(&"read".to_owned()));
    // Without the session id: refused, not served.
    let answer = request(server.port, "POST", "/mcp", &json_post(&host, &[]), list);
    assert!(
        (400..500).contains(&answer.status),
        "a request without a session id: {answer:?}"
    );
}

/// On a loopback bind only loopback names with the bound port pass as Host and Origin;
/// everything else, the names a rebinding page sends included, is a 4xx before any handler.
#[test]
fn host_and_origin_are_checked_on_loopback() {
    let store = tempfile::tempdir().unwrap();
    let server = HttpServer::start(store.path(), &[]);
    let port = server.port;
    let other = port.wrapping_add(1).max(1);
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let origin = format!("http://{host}");
        let answer = request(
            port,
            "POST",
            "/mcp",
            &json_post(&host, &[("Origin", &origin)]),
            INITIALIZE,
        );
        assert_eq!(answer.status, 200, "Host {host}: {answer:?}");
    }
    let good = format!("127.0.0.1:{port}");
    let refused_hosts = [
        "evil.example.com".to_owned(),
        format!("evil.example.com:{port}"),
        format!("127.0.0.1:{other}"),
        "127.0.0.1".to_owned(),
        "localhost".to_owned(),
        format!("10.0.0.1:{port}"),
    ];
    for host in &refused_hosts {
        let answer = request(port, "POST", "/mcp", &json_post(host, &[]), INITIALIZE);
        assert!(
            (400..500).contains(&answer.status),
            "Host {host} was let through: {answer:?}"
        );
        assert!(answer.header("mcp-session-id").is_none());
    }
    for origin in [
        "http://evil.example.com".to_owned(),
        format!("http://evil.example.com:{port}"),
        format!("http://127.0.0.1:{other}"),
        "null".to_owned(),
    ] {
        let answer = request(
            port,
            "POST",
            "/mcp",
            &json_post(&good, &[("Origin", &origin)]),
            INITIALIZE,
        );
        assert_eq!(
            answer.status, 403,
            "Origin {origin} was let through: {answer:?}"
        );
    }
    let answer = request(port, "POST", "/other", &json_post(&good, &[]), INITIALIZE);
    assert_eq!(answer.status, 404, "{answer:?}");
}

/// With --token-file every request needs the bearer token; a wrong one, a missing one or
/// another scheme is a 401.
#[test]
fn the_bearer_token_is_required_when_given() {
    let store = tempfile::tempdir().unwrap();
    let token_file = store.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let server = HttpServer::start(
        store.path(),
        &["--token-file", token_file.to_str().unwrap()],
    );
    let host = format!("127.0.0.1:{}", server.port);
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret-toke"),
        Some("Bearer s3cret-token2"),
        Some("Basic s3cret-token"),
    ] {
        let extra: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        let answer = request(
            server.port,
            "POST",
            "/mcp",
            &json_post(&host, &extra),
            INITIALIZE,
        );
        assert_eq!(answer.status, 401, "{auth:?}: {answer:?}");
        assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
    }
    let answer = request(
        server.port,
        "POST",
        "/mcp",
        &json_post(&host, &[("Authorization", "Bearer s3cret-token")]),
        INITIALIZE,
    );
    assert_eq!(answer.status, 200, "{answer:?}");
}

/// A non-loopback address without a token is refused at start-up, before anything listens;
/// so are a malformed address and an empty token file.
#[test]
fn off_loopback_a_token_is_required() {
    let store = tempfile::tempdir().unwrap();
    let empty = store.path().join("empty");
    std::fs::write(&empty, " \n").unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--http", "0.0.0.0:0"], "--token-file"),
        (&["--http", "[::]:0"], "--token-file"),
        (&["--http", "nowhere:80"], "ADDR:PORT"),
        (
            &[
                "--http",
                "127.0.0.1:0",
                "--token-file",
                empty.to_str().unwrap(),
            ],
            "empty",
        ),
    ];
    for (args, needle) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_agentrun"))
            .arg("--store")
            .arg(store.path().join("store"))
            .arg("mcp")
            .args(args)
            .env_remove("AGENTRUN_CONFIG")
            .env("XDG_CONFIG_HOME", store.path().join("no-config"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("serving MCP on"), "{args:?}: {stderr}");
    }
}

/// SIGTERM stops the server: it exits and the port is closed.
#[test]
fn sigterm_stops_the_http_server() {
    let store = tempfile::tempdir().unwrap();
    let mut server = HttpServer::start(store.path(), &[]);
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + PATIENCE;
    let exited = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "still running");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(exited.code().is_some(), "{exited}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", server.port)).is_err());
}

/// The official conformance suite, installed by `scripts/install-mcp-conformance.sh`: node
/// 22 and the suite's entry point.
fn conformance() -> (String, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/install-mcp-conformance.sh"
    );
    let output = Command::new("bash")
        .arg(script)
        .output()
        .expect("run the script");
    assert!(
        output.status.success(),
        "installing the MCP conformance suite failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mut lines = stdout.lines();
    (
        lines.next().unwrap().to_owned(),
        lines.next().unwrap().to_owned(),
    )
}

/// The scenarios of the official conformance suite that concern what this server offers
/// (its other scenarios call the suite's own test tools, resources and prompts).
#[test]
fn the_official_conformance_suite_passes() {
    let (node, suite) = conformance();
    let store = tempfile::tempdir().unwrap();
    let server = HttpServer::start(store.path(), &[]);
    let results = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    for scenario in [
        "server-initialize",
        "ping",
        "tools-list",
        "resources-list",
        "logging-set-level",
        "completion-complete",
        "dns-rebinding-protection",
    ] {
        let output = Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &server.url(), "--scenario", scenario])
            .arg("--output-dir")
            .arg(results.path())
            .env("HOME", results.path())
            .output()
            .expect("run the conformance suite");
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.contains(" 0 failed") {
            failed.push(format!(
                "{scenario} ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
