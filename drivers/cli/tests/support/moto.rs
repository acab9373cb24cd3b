//! moto's S3-API server for the tests of the shared store on object storage: installed by
//! `scripts/install-moto.sh` when missing, started on 127.0.0.1 on a free port, stopped when
//! dropped; and the standard `AWS_*` environment that points a client at it. The store's own
//! tests (agentrun-fs, `remote_tests.rs`) include this file too.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct Moto {
    pub(crate) port: u16,
    child: Child,
}

impl Drop for Moto {
    fn drop(&mut self) {
        // Closing its stdin ends the wrapper, which stops the server it started.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Installs (when missing) and starts the server, waiting until it answers.
    pub(crate) fn start() -> Moto {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-moto.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("--print-path")
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/install-moto.sh");
        assert!(out.status.success(), "scripts/install-moto.sh failed");
        let server = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("sh")
            .arg("-c")
            .arg(
                "\"$0\" -H 127.0.0.1 -p \"$1\" >/dev/null 2>&1 & pid=$!; cat >/dev/null; kill $pid",
            )
            .arg(&server)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .spawn()
            .expect("start moto_server");
        let moto = Moto { port, child };
        let deadline = Instant::now() + Duration::from_secs(120);
        while http(port, "GET", "/").is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        moto
    }

    /// Creates bucket `name`.
    pub(crate) fn create_bucket(&self, name: &str) {
        let reply = http(self.port, "PUT", &format!("/{name}")).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    /// Points `command` at this server the standard way (`AWS_*` variables).
    pub(crate) fn configure(&self, command: &mut Command) {
        command
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env(
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            )
            .env("AWS_ALLOW_HTTP", "true");
    }
}

/// One plain HTTP/1.1 request to the server; the whole reply.
pub(crate) fn http(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
