//! The shared store on object storage from the command line: two `agentrun` processes with
//! different local homes on one bucket of a real S3-API server (moto's server mode, installed
//! by `scripts/install-moto.sh` when missing, started here on 127.0.0.1), configured the
//! standard way (`AGENTRUN_STORE` or `--store s3://…`, `AWS_*` variables).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Moto {
    port: u16,
    child: Child,
}

impl Drop for Moto {
    fn drop(&mut self) {
        // Closing its stdin ends the wrapper, which stops the server it started.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn http(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn start_moto() -> Moto {
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
        .arg("\"$0\" -H 127.0.0.1 -p \"$1\" >/dev/null 2>&1 & pid=$!; cat >/dev/null; kill $pid")
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

/// `agentrun ARGS` as a machine with local home `home`, configured by the environment.
fn agentrun(moto: &Moto, home: &Path, url: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentrun"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AGENTRUN_HOME", home.join("spool"))
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env(
            "AWS_ENDPOINT_URL",
            format!("http://127.0.0.1:{}", moto.port),
        )
        .env("AWS_ALLOW_HTTP", "true")
        .args(args)
        .stdin(Stdio::null());
    if let Some(url) = url {
        c.env("AGENTRUN_STORE", url);
    }
    c.output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn one_machine_runs_and_another_pages_reads_lists_shows_verifies_and_collects() {
    let moto = start_moto();
    let reply = http(moto.port, "PUT", "/fleet").unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let url = "s3://fleet/agentrun";
    let run = agentrun(
        &moto,
        &a,
        Some(url),
        &["run", "--json", "--", "seq", "1", "200000"],
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&run)).unwrap();
    let run_id = json["run_id"].as_str().unwrap().to_owned();
    let uri = json["artifacts"]["stdout"].as_str().unwrap().to_owned();
    // The other machine, by --store instead of the variable.
    let runs = ok(&agentrun(&moto, &b, None, &["--store", url, "runs"]));
    assert!(runs.contains(&run_id), "{runs}");
    let page = ok(&agentrun(
        &moto,
        &b,
        Some(url),
        &["read", &uri, "--offset", "150000", "--limit", "3"],
    ));
    assert_eq!(page, "150001\n150002\n150003\n");
    let all = ok(&agentrun(&moto, &b, Some(url), &["read", &uri, "--all"]));
    let expected: String = (1..=200_000).map(|i| format!("{i}\n")).collect();
    assert!(all == expected, "read --all differs");
    let show = agentrun(&moto, &b, Some(url), &["show", &run_id]);
    assert!(ok(&show).starts_with("[stdout]\n1\n2\n"));
    ok(&agentrun(&moto, &b, Some(url), &["verify"]));
    ok(&agentrun(&moto, &b, Some(url), &["gc"]));
    // gc kept the run: it still reads on the first machine.
    let again = ok(&agentrun(
        &moto,
        &a,
        Some(url),
        &["read", &uri, "--offset", "199999"],
    ));
    assert_eq!(again, "200000\n");
}
