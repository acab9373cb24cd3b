//! How `agentrun compact` reads its transcript: streaming, with the size checked before
//! reading (a regular file from its size, anything else by a bounded read), so an endless or
//! huge input costs neither memory nor a long read.

use std::io::Write;
use std::process::Stdio;

#[path = "support/sandbox.rs"]
mod sandbox;

/// `/dev/zero` is refused by its type before a byte is read, and an endless pipe at its first
/// byte (not JSON): neither costs a read of the 1 GiB limit.
#[test]
fn an_endless_device_or_pipe_is_refused_at_once() {
    let sb = sandbox::Sandbox::new();
    let o = sb.run(&["compact", "/dev/zero", "--summarizer", "cat"]);
    sandbox::assert_exit_says(&o, 125, "/dev/zero: it is a character device");
    let mut child = sb
        .cmd(&["compact", "-", "--summarizer", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    // Written until the reader hangs up: an endless pipe of zero bytes.
    let writer = std::thread::spawn(move || while stdin.write_all(&[0u8; 65536]).is_ok() {});
    let o = child.wait_with_output().expect("wait");
    writer.join().expect("writer");
    let stderr = sandbox::assert_exit_says(&o, 125, "the transcript is not valid JSON");
    assert!(stderr.contains("line 1 column 1"), "{stderr}");
}

/// A regular file over the limit is refused from its size: a sparse file, so nothing of it is
/// on disk, and its size (not "more than") is named.
#[test]
fn a_regular_file_over_the_limit_is_refused_from_its_size() {
    let sb = sandbox::Sandbox::new();
    let path = sb.path("huge.json");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len((1 << 30) + 1).expect("sparse");
    drop(f);
    let o = sb.run(&["compact", path.to_str().unwrap(), "--summarizer", "cat"]);
    sandbox::assert_exit_says(
        &o,
        125,
        "the transcript is 1073741825 bytes; at most 1073741824 bytes are accepted",
    );
}

/// A valid transcript on stdin (a pipe) is read as a stream and compacted as from a file.
#[test]
fn a_transcript_on_a_pipe_is_read_as_a_stream() {
    let sb = sandbox::Sandbox::new();
    let mut child = sb
        .cmd(&[
            "compact",
            "-",
            "--summarizer",
            "cat >/dev/null; echo piped summary",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let doc =
        br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(doc)
        .expect("write");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{}", sandbox::stderr(&o));
    assert!(sandbox::stdout(&o).contains("piped summary"));
}

/// Trailing bytes after the document are refused, from a file as from a pipe.
#[test]
fn trailing_bytes_after_the_document_are_refused() {
    let sb = sandbox::Sandbox::new();
    let path = sb.path("t.json");
    std::fs::write(&path, br#"[{"role":"user","content":"a"}] x"#).expect("write");
    let o = sb.run(&["compact", path.to_str().unwrap(), "--summarizer", "cat"]);
    sandbox::assert_exit_says(
        &o,
        125,
        "the transcript is not valid JSON: trailing characters",
    );
}
