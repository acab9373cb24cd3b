//! FIFOs, sockets, devices and directories wherever the store or the settings open a file by
//! path: every open returns at once (a FIFO with no writer never makes a call wait) with an
//! error that names what is there.

mod common;

use std::fs;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use agentrun_core::{ByteRange, PageRequest};
use agentrun_fs::config::{Config, ConfigError};
use agentrun_fs::{GcOptions, ReadError, Store, StoreError};
use common::*;

/// Runs `f` on a thread and returns its result, failing the test when it has not returned
/// after a minute: a call blocked on a FIFO never would (the thread is left behind blocked).
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} is blocked"))
}

fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .unwrap();
}

/// The kinds of non-files a test can make without privileges, with the word an error about
/// each must contain. The listener keeps the socket bound.
fn replace_with(path: &Path, kind: &str) -> Option<UnixListener> {
    let _ = fs::remove_file(path);
    match kind {
        "FIFO" => mkfifo(path),
        "directory" => fs::create_dir(path).unwrap(),
        "socket" => return Some(UnixListener::bind(path).unwrap()),
        "symbolic link" => std::os::unix::fs::symlink("/dev/null", path).unwrap(),
        _ => unreachable!("{kind}"),
    }
    None
}

const KINDS: [&str; 4] = ["FIFO", "directory", "socket", "symbolic link"];

fn object_path(store: &Store, hex: &str) -> PathBuf {
    store.root().join("objects").join(&hex[..2]).join(&hex[2..])
}

#[test]
fn a_config_file_that_is_not_a_file_is_refused_by_its_type_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in ["FIFO", "directory", "socket"] {
        let path = tmp
            .path()
            .join(format!("config-{}.toml", kind.replace(' ', "-")));
        let _listener = replace_with(&path, kind);
        let err = returns("Config::load", {
            let path = path.clone();
            move || Config::load(&path)
        })
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::NotAFile { .. }),
            "{kind}: {err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(kind), "{kind}: {message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
    }
    // A device: refused too.
    let err = Config::load(Path::new("/dev/null")).unwrap_err();
    assert!(err.to_string().contains("character device"), "{err}");
    // A link to a settings file is followed (dotfiles repositories link them).
    let real = tmp.path().join("real.toml");
    fs::write(&real, "sink_var = \"X_SINK\"\n").unwrap();
    let link = tmp.path().join("link.toml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(
        Config::load(&link).unwrap().sink_var.as_deref(),
        Some("X_SINK")
    );
}

#[test]
fn an_object_or_index_that_is_not_a_file_fails_every_read_at_once_naming_its_type() {
    for kind in KINDS {
        for part in ["object", "index"] {
            let (_tmp, store) = store();
            let record = capture_single(&store, b"one\ntwo\n", 1024);
            let digest = record.streams()[0].sha256;
            let hex = digest.to_hex();
            let mut path = object_path(&store, &hex);
            if part == "index" {
                path.set_extension("idx");
            }
            assert!(path.exists() || path.with_extension("idx").exists());
            let _listener = replace_with(&path, kind);
            let reads = returns("the reads", {
                let store = store.clone();
                move || {
                    let uri = uri(digest);
                    let page = store.read_page(&uri, PageRequest::new(0, 10).unwrap());
                    let bytes = store.read_bytes(&uri, ByteRange::new(0, 3).unwrap());
                    let copy = store.copy_to(&uri, &mut Vec::new());
                    [page.map(|_| ()), bytes.map(|_| ()), copy.map(|_| ())]
                }
            });
            for result in reads {
                let err = result.unwrap_err();
                match (part, &err) {
                    ("object", ReadError::Corrupt { .. })
                    | ("index", ReadError::CorruptIndex { .. }) => {}
                    _ => panic!("{kind} at the {part}: {err:?}"),
                }
                assert!(
                    err.to_string().contains(kind),
                    "{kind} at the {part}: {err}"
                );
            }
            // Verify reports it and goes on; GC neither blocks nor removes it.
            let report = returns("verify", {
                let store = store.clone();
                move || store.verify().unwrap()
            });
            assert!(
                report.problems.iter().any(|p| p.contains(kind)),
                "{kind} at the {part}: {:?}",
                report.problems
            );
            returns("gc", {
                let store = store.clone();
                move || store.gc(&GcOptions::default()).unwrap()
            });
            assert!(fs::symlink_metadata(&path).is_ok(), "{kind} at the {part}");
        }
    }
}

#[test]
fn a_record_that_is_not_a_file_is_refused_at_once_naming_its_type() {
    for kind in KINDS {
        let (_tmp, store) = store();
        let record = capture_single(&store, b"x\n", 1024);
        let path = store
            .root()
            .join("records")
            .join(format!("{}.json", record.run_id));
        let _listener = replace_with(&path, kind);
        let run_id = record.run_id.clone();
        let (shown, listing, report) = returns("the record readers", {
            let store = store.clone();
            move || {
                (
                    store.record(&run_id),
                    store.recent_runs(10).unwrap(),
                    store.verify().unwrap(),
                )
            }
        });
        let err = shown.unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptRecord { detail, .. } if detail.contains(kind)),
            "{kind}: {err:?}"
        );
        assert_eq!(listing.unreadable.len(), 1, "{kind}");
        assert!(listing.unreadable[0].error.to_string().contains(kind));
        assert!(
            report.problems.iter().any(|p| p.contains(kind)),
            "{kind}: {:?}",
            report.problems
        );
    }
}

#[test]
fn a_fifo_in_place_of_the_gc_lock_or_a_capture_lock_never_blocks() {
    let (tmp, store) = store();
    capture_single(&store, b"x\n", 1024);
    // A dead capture directory whose lock and protect list are FIFOs.
    let capture = store
        .root()
        .join("captures")
        .join("0000000000000-0000000-000000");
    fs::create_dir(&capture).unwrap();
    mkfifo(&capture.join("lock"));
    let result = returns("gc", {
        let store = store.clone();
        move || store.gc(&GcOptions::default())
    });
    let err = result.unwrap_err();
    assert!(err.to_string().contains("FIFO"), "{err}");

    let root = tmp.path().join("store");
    let lock = root.join("gc.lock");
    fs::remove_file(&lock).unwrap();
    mkfifo(&lock);
    let err = returns("Store::open", move || Store::open(&root)).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("FIFO"), "{message}");
    assert!(message.contains(&lock.display().to_string()), "{message}");
}
