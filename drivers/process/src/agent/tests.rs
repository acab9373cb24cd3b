use super::retained::read_capped;
use super::*;

#[test]
fn a_fifo_in_place_of_a_retained_file_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("rollout.jsonl");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RWXU).unwrap();
    // On a thread: an open that waits for a writer would never return; the test then
    // fails on the channel's (generous) timeout instead of hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(read_capped(&path, 0));
    });
    let result = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("reading a FIFO waited for a writer");
    let err = result.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("FIFO"), "{err}");
    // A regular file is still read, from the offset.
    let file = dir.path().join("regular.jsonl");
    std::fs::write(&file, "abcdef").unwrap();
    assert_eq!(read_capped(&file, 2).unwrap(), b"cdef");
}

#[test]
fn session_ids_from_the_stream_cannot_be_paths_or_options() {
    for ok in ["ses_abc123", "muse-sess-42", "0b7f.e:1"] {
        assert!(plausible_session_id(ok), "{ok}");
    }
    for bad in ["", "../etc", "a/b", "-rf", ".hidden", "a b", "x\n"] {
        assert!(!plausible_session_id(bad), "{bad:?}");
    }
}

#[test]
fn the_invocation_becomes_the_run_options() {
    let options = AgentOptions::new(Harness::OpenCode, "-x")
        .effort("high")
        .timeout(Duration::from_secs(5))
        .env("HOME", "/h");
    let run = options.run_options().unwrap();
    assert_eq!(run.get_program(), "opencode");
    assert!(run.get_args().iter().any(|a| a == "--variant"));
    assert_eq!(
        run.get_stop_signals(),
        Harness::OpenCode.stop_signals().sequence
    );
    assert_eq!(run.get_timeout(), Some(Duration::from_secs(5)));
    assert!(
        run.get_envs()
            .iter()
            .any(|(k, v)| k == "OPENCODE_DISABLE_AUTOUPDATE" && v.is_some())
    );
    assert_eq!(options.child_env("HOME"), Some(OsString::from("/h")));
}
