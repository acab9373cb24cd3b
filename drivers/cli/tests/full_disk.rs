//! A disk that the output fills loses nothing that fit: on a small tmpfs (when the tests run
//! as root; skipped with a message otherwise) `agentrun run` keeps the output that fit, exits
//! with the program's status and prints the preview, and `agentrun mcp` answers with the same
//! incomplete record, leaves no object without a record, and keeps answering later calls.

#[path = "support/sandbox.rs"]
mod sandbox;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox::agentrun;

/// The reproducer: 100 MB of lines of `a`, then exit 3.
const FLOOD: &str = r#"head -c 100000000 /dev/zero | tr "\0" a | fold -w 100; exit 3"#;

/// A tmpfs of `size` on a fresh temporary directory, unmounted when dropped; `None`, with a
/// message, when not root or the mount is refused.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let uid = Command::new("id").arg("-u").output();
        if !uid.is_ok_and(|o| text(&o.stdout).trim() == "0") {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Self { dir }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("s")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn cmd(store: &Path, args: &[&str]) -> Command {
    let mut c = agentrun();
    c.arg("--store").arg(store).args(args);
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The files under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Fills what is left of the tmpfs with a file beside the store, and returns its path.
fn fill(tmpfs: &Tmpfs) -> PathBuf {
    let path = tmpfs.dir.path().join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    path
}

/// Makes room again: the filler goes, and so does the big run (its record, then its output
/// by `gc`).
fn make_room(store: &Path, filler: &Path) {
    std::fs::remove_file(filler).unwrap();
    for record in files_under(&store.join("records")) {
        std::fs::remove_file(record).unwrap();
    }
    let o = cmd(store, &["gc", "--grace", "0s"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// Every object in the store is one a record points at: `gc` with no grace removes nothing.
fn assert_no_orphans(store: &Path) {
    let o = cmd(store, &["gc", "--grace", "0s", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["objects_removed"], 0, "{report}");
}

#[test]
fn a_run_that_fills_the_disk_keeps_what_fit_and_exits_with_the_programs_status() {
    let Some(tmpfs) = Tmpfs::mount("20m") else {
        return;
    };
    let store = tmpfs.store();
    let o = cmd(&store, &["run", "sh", "-c", FLOOD]).output().unwrap();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        out.starts_with(
            "[Incomplete output: capture failed; capture fault on stdout: writing the capture \
             file failed: No space left on device"
        ),
        "{}",
        &out[..out.len().min(500)]
    );
    assert!(out.contains("[The program exited with code 3]"), "{err}");
    assert!(
        out.contains(&format!("{}\n", "a".repeat(100))),
        "the preview"
    );
    assert!(err.contains("failed (exit 3), output incomplete"), "{err}");

    let o = cmd(&store, &["runs", "--json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["incomplete"], true);
    assert_eq!(runs[0]["exit"]["code"], 3);
    let kept = runs[0]["streams"][0]["bytes"].as_u64().unwrap();
    assert!(kept > 10 << 20, "most of the disk holds the output: {kept}");
    // Every kept byte reads back.
    let uri = runs[0]["streams"][0]["uri"].as_str().unwrap();
    let o = cmd(&store, &["read", uri, "--offset", "1000", "--limit", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&"a".repeat(100)));
    let o = cmd(&store, &["verify"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    assert_no_orphans(&store);

    // The disk is still full of that run's output, but a small run works: its reserve is
    // what the disk has left.
    let o = cmd(&store, &["run", "echo", "hi"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("hi\n"), "{}", text(&o.stdout));
    // With the last blocks taken too, the next run is refused before it starts, saying why
    // and what to do, and leaves nothing behind; with room again, runs work.
    let filler = fill(&tmpfs);
    let o = cmd(&store, &["run", "echo", "hi"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(
        text(&o.stderr).contains("no room for a run's record")
            && text(&o.stderr).contains("agentrun gc"),
        "{}",
        text(&o.stderr)
    );
    assert!(files_under(&store.join("captures")).is_empty());
    make_room(&store, &filler);
    let o = cmd(&store, &["run", "echo", "hi"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("hi\n"), "{}", text(&o.stdout));
}

/// One JSON-RPC session with `agentrun mcp`.
struct Mcp {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(store: &Path) -> Self {
        let mut child = cmd(store, &["mcp", "--allow", "sh", "--allow", "echo"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Self {
            child,
            out,
            next: 1,
        };
        mcp.call(
            "initialize",
            serde_json::json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "full-disk-test", "version": "1"}
            }),
        );
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &serde_json::Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its answer (notifications in between are skipped).
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next;
        self.next += 1;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let mut line = String::new();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "the server hung up"
            );
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// A `tools/call` answer's text and whether it is an error.
    fn tool(&mut self, name: &str, arguments: serde_json::Value) -> (String, bool) {
        let v = self.call(
            "tools/call",
            serde_json::json!({"name": name, "arguments": arguments}),
        );
        let result = &v["result"];
        assert!(result.is_object(), "{v}");
        let text = result["content"][0]["text"].as_str().unwrap().to_owned();
        (text, result["isError"] == true)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn through_mcp_a_full_disk_gives_the_incomplete_record_and_later_calls_work() {
    let Some(tmpfs) = Tmpfs::mount("20m") else {
        return;
    };
    let store = tmpfs.store();
    let mut mcp = Mcp::start(&store);
    let (answer, _) = mcp.tool("run", serde_json::json!({"command": ["sh", "-c", FLOOD]}));
    assert!(
        answer.starts_with("[Incomplete output: capture failed; capture fault on stdout"),
        "{}",
        &answer[..answer.len().min(500)]
    );
    assert!(
        answer.contains("[The program exited with code 3]"),
        "{answer:.500}"
    );
    assert!(answer.contains(&"a".repeat(100)), "the preview");
    // The record is there, and nothing is left that it does not point at.
    let records = files_under(&store.join("records"));
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(files_under(&store.join("captures")).is_empty());
    assert_no_orphans(&store);

    // Later calls are answered: the kept output reads back, and a run on a disk full to the
    // last block is refused with the reason instead of running a program whose output
    // would be lost.
    let uri_start = answer.find("artifact://").unwrap();
    let uri: String = answer[uri_start..]
        .chars()
        .take_while(|c| !matches!(c, '"' | ' ' | ')' | '\n'))
        .collect();
    let (page, is_error) = mcp.tool(
        "read",
        serde_json::json!({"filePath": uri, "offset": 5, "limit": 2}),
    );
    assert!(!is_error && page.contains(&"a".repeat(100)), "{page:.500}");
    let (small, is_error) = mcp.tool("run", serde_json::json!({"command": ["echo", "hi"]}));
    assert!(
        !is_error && small.contains("hi"),
        "a small run works: {small}"
    );
    let filler = fill(&tmpfs);
    let (refused, is_error) = mcp.tool("run", serde_json::json!({"command": ["echo", "hi"]}));
    assert!(is_error, "{refused}");
    assert!(refused.contains("no room for a run's record"), "{refused}");
    assert!(files_under(&store.join("captures")).is_empty());
    // Once room is made, runs work again.
    make_room(&store, &filler);
    let (again, is_error) = mcp.tool("run", serde_json::json!({"command": ["echo", "hi"]}));
    assert!(!is_error && again.contains("hi"), "{again}");
}
