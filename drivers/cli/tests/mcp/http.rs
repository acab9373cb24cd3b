//! `agentrun mcp --http` as a child, and a bare HTTP/1.1 client for it (one request per
//! connection), for the tests that check the transport's answers header by header.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

/// How long any answer may take on a busy machine: a failure, not a measurement.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// A running `agentrun mcp --http 127.0.0.1:0` and the port it picked.
pub(crate) struct HttpServer {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl HttpServer {
    /// Starts the server on the store `dir/store` with `args` after `mcp --http
    /// 127.0.0.1:0` and waits for its start line.
    pub(crate) fn start(dir: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentrun"))
            .arg("--store")
            .arg(dir.join("store"))
            .args(["mcp", "--http", "127.0.0.1:0"])
            .args(args)
            .env_remove("AGENTRUN_CONFIG")
            .env("XDG_CONFIG_HOME", dir.join("no-config"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agentrun mcp --http");
        let (send, lines) = channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        let first = lines
            .recv_timeout(PATIENCE)
            .expect("agentrun mcp --http wrote no start line");
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("no URL in the start line: {first}"));
        let port = url
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches(';')
            .trim_end_matches("/mcp")
            .parse()
            .unwrap_or_else(|_| panic!("no port in {url}"));
        assert!(url.ends_with("/mcp;"), "{first}");
        // The rest of stderr is drained by the thread (and dropped) so the server never
        // blocks on it.
        HttpServer { child, port }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer: status, headers (names lowercased) and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request (`Connection: close`) to the server's port and reads the whole answer.
/// `headers` are sent as given, so a test can send any `Host`.
pub(crate) fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect::<Vec<_>>();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// The JSON-RPC messages of an answer: its body as JSON, or each `data:` line of an SSE
/// stream.
pub(crate) fn messages(answer: &Answer) -> Vec<serde_json::Value> {
    if answer
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        return vec![serde_json::from_str(&answer.body).expect("a JSON body")];
    }
    answer
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d.trim()).expect("an SSE data line of JSON"))
        .collect()
}

/// An `initialize` request body.
pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agentrun-test","version":"0"}}}"#;
