//! A full disk never loses a run: on a real, small tmpfs (when the tests run as root) the disk
//! fills during the stream writes, and the output that fit is published with its record, also
//! while something else keeps taking every block that is freed; and at each step of
//! publication in turn (sealing the streams, the manifest, the protection, each index and
//! object, the record) a full disk injected with [`crate::fault::no_space_at`] still gives a
//! record (the minimal one when the record itself found the disk full) whose output reads
//! back, and a store that keeps working.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;

use agentrun_core::{
    CaptureCompletion, CaptureStatus, Digest, OutputChannel, OutputDeclaration, PreviewLimits,
    ResultRecord, StreamName,
};

use crate::{GcOptions, Store, StoreError};

fn done() -> CaptureCompletion {
    CaptureCompletion::Streamed {
        display: None,
        status: CaptureStatus::Succeeded,
    }
}

fn named(name: &str) -> OutputChannel {
    OutputChannel::Named(StreamName::new(name).unwrap())
}

/// A tmpfs of `size` mounted on a fresh temporary directory, unmounted when dropped; `None`
/// (with a message saying why the test is skipped) when not root or the mount is refused.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(out) if out.status.success() => Some(Self { dir }),
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                eprintln!("skipped: cannot mount a tmpfs: {why}");
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily, so a file still open somewhere never keeps the mount (and the test's
        // temporary directory) behind.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Lines that differ from block to block, `len` bytes long.
fn lines_of(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i % 100 == 99 {
                b'\n'
            } else {
                b'a' + (i / 100 % 26) as u8
            }
        })
        .collect()
}

fn read_all(store: &Store, record: &ResultRecord, name: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    let uri = record.stream_uri(record.stream(name).unwrap());
    store.copy_to(&uri, &mut bytes).unwrap();
    bytes
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

/// What a run that filled the disk must have left: a record, marked incomplete with the disk's
/// error on stdout, whose stdout is a prefix of what was sent and reads back byte for byte,
/// and a healthy store.
fn check_kept(store: &Store, record: &ResultRecord, sent: &[u8]) -> usize {
    assert!(record.incomplete, "{record:?}");
    let fault = record
        .faults
        .iter()
        .find(|f| f.stream.as_ref().is_some_and(|s| s.as_str() == "stdout"))
        .unwrap_or_else(|| panic!("no fault on stdout: {:?}", record.faults));
    assert!(
        fault.message.contains("No space left on device"),
        "{fault:?}"
    );
    assert_eq!(store.record(&record.run_id).unwrap(), *record);
    let kept = read_all(store, record, "stdout");
    assert!(
        !kept.is_empty() && kept.len() < sent.len(),
        "{}",
        kept.len()
    );
    assert_eq!(kept, sent[..kept.len()]);
    assert_eq!(record.stream("stdout").unwrap().sha256, Digest::of(&kept));
    assert!(
        record
            .stream("stdout")
            .unwrap()
            .preview
            .text
            .starts_with("aaaa"),
        "the preview shows what fit"
    );
    let stderr = read_all(store, record, "stderr");
    assert!(!stderr.is_empty() && stderr.chunks(9).all(|c| c == b"progress\n"));
    let report = store.verify().unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems);
    kept.len()
}

#[test]
fn a_disk_filled_by_chunks_keeps_what_fit_and_publishes_the_record() {
    let Some(tmpfs) = Tmpfs::mount("8m") else {
        return;
    };
    let store = Store::open(tmpfs.path().join("s")).unwrap();
    let sent = lines_of(24 << 20);
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stderr"), b"progress\n").unwrap();
    let mut failed = 0;
    // Large chunks (hashed on the stream's hasher thread) and, split off every other one,
    // small ones (accepted inline): the disk fills on either path.
    for (i, chunk) in sent.chunks(300_001).enumerate() {
        let parts = if i % 2 == 0 {
            vec![chunk]
        } else {
            vec![&chunk[..1000], &chunk[1000..]]
        };
        for part in parts {
            if let Err(e) = s.write_channel(&named("stdout"), part) {
                assert!(
                    matches!(e, crate::CaptureWriteError::Io { .. }),
                    "a write fault, never a rejection: {e}"
                );
                failed += 1;
            }
        }
    }
    assert!(failed > 0, "the disk never filled");
    // The other stream fills what the cut-back failed write left free, so the disk is full
    // to the last block when publication starts.
    let progress = b"progress\n".repeat(455);
    while s.write_channel(&named("stderr"), &progress).is_ok() {}
    let record = s.finish(done()).unwrap();
    check_kept(&store, &record, &sent);
    assert!(store.records().unwrap().contains(&record.run_id));
    let captures = std::fs::read_dir(store.root().join("captures")).unwrap();
    assert_eq!(captures.count(), 0, "the capture directory is gone");
}

#[test]
fn a_disk_filled_through_a_pipe_keeps_what_fit_and_the_writer_never_blocks() {
    let Some(tmpfs) = Tmpfs::mount("8m") else {
        return;
    };
    let store = Store::open(tmpfs.path().join("s")).unwrap();
    let sent = lines_of(24 << 20);
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stderr"), b"progress\n").unwrap();
    let stdout = s.resolve(&named("stdout")).unwrap();
    let (read, write) = rustix::pipe::pipe().unwrap();
    let content = sent.clone();
    // The child's side: it writes everything and is never left blocked on a full pipe.
    let writer = thread::spawn(move || {
        let mut rest = &content[..];
        while !rest.is_empty() {
            let n = rustix::io::write(&write, rest).unwrap();
            rest = &rest[n..];
        }
    });
    let mut taken = 0usize;
    loop {
        match s.write_from_pipe(stdout, read.as_fd(), 1 << 20) {
            Ok(0) => break,
            Ok(n) => taken += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("{e}"),
        }
    }
    writer.join().unwrap();
    assert_eq!(taken, sent.len(), "every byte is drained from the pipe");
    let record = s.finish(done()).unwrap();
    check_kept(&store, &record, &sent);

    // The disk is still full of that run's output, but a small run works: its reserve is
    // what the disk has left, with the preview budget cut to fit.
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stdout"), b"small\n").unwrap();
    let small = s.finish(done()).unwrap();
    assert!(!small.incomplete, "{:?}", small.faults);
    assert_eq!(read_all(&store, &small, "stdout"), b"small\n");
    assert_eq!(small.stream("stdout").unwrap().preview.text, "small\n");
    // With the last blocks taken too, the next capture is refused before anything runs,
    // naming the remedy, and leaves nothing behind.
    let filler = tmpfs.path().join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while io::Write::write_all(&mut f, &[0u8; 4096]).is_ok() {}
    drop(f);
    let err = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap_err();
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("no room for a run's record"), "{message}");
    assert!(message.contains("agentrun gc"), "{message}");
    let captures = std::fs::read_dir(store.root().join("captures")).unwrap();
    assert_eq!(captures.count(), 0);
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(store.layout.record(&small.run_id)).unwrap();
    // Once room is made, captures work again.
    std::fs::remove_file(store.layout.record(&record.run_id)).unwrap();
    let gc = GcOptions {
        grace: std::time::Duration::ZERO,
        ..GcOptions::default()
    };
    store.gc(&gc).unwrap();
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stdout"), b"again\n").unwrap();
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete, "{:?}", record.faults);
}

#[test]
fn the_room_for_the_record_is_set_aside_before_the_capture_starts() {
    let Some(tmpfs) = Tmpfs::mount("4m") else {
        return;
    };
    let store = Store::open(tmpfs.path().join("s")).unwrap();
    // Something else fills the disk first: the capture cannot even start.
    let filler = tmpfs.path().join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 1 << 16];
    while io::Write::write_all(&mut f, &chunk).is_ok() {}
    drop(f);
    let err = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap_err();
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err:?}");
    // Room for the previews but not for a long command as well.
    std::fs::remove_file(&filler).unwrap();
    let room = rustix::fs::statvfs(tmpfs.path()).unwrap();
    let free = room.f_bavail * room.f_frsize;
    let mut f = std::fs::File::create(&filler).unwrap();
    let keep_free = super::reserve::reserve_len(
        1,
        &PreviewLimits::default(),
        agentrun_core::capture::DEFAULT_DISPLAY_BYTES,
    ) + (256 << 10);
    let fill = vec![0u8; (free - keep_free) as usize];
    io::Write::write_all(&mut f, &fill).unwrap();
    drop(f);
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    let err = s.reserve_record_room(1 << 20).unwrap_err();
    assert!(matches!(err, StoreError::NoSpace { .. }), "{err:?}");
    drop(s);
}

/// The steps of publication where an injected full disk strikes, with how many times the
/// step is passed first. Sealing: stdout, then stderr. Publishing: stdout is new, stderr a
/// dedupe hit that publishes nothing, then the manifest, so a pass of 1 strikes at the
/// manifest after stdout was published.
const STEPS: [(&str, u32); 9] = [
    ("sealing a stream", 0),
    ("sealing a stream", 1),
    ("protecting the digests", 0),
    ("publishing an index", 0),
    ("publishing an index", 1),
    ("publishing an object", 0),
    ("publishing an object", 1),
    ("writing the manifest", 0),
    ("writing the record", 0),
];

#[test]
fn a_full_disk_at_each_step_of_publication_still_gives_a_record_and_a_working_store() {
    for (step, passes) in STEPS {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        // An earlier run whose stderr the failing run repeats: its objects are found as
        // dedupe hits, and must survive.
        let mut s = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        s.write_channel(&named("stdout"), b"earlier\n").unwrap();
        s.write_channel(&named("stderr"), b"shared\n").unwrap();
        let earlier = s.finish(done()).unwrap();

        let mut s = store
            .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
            .unwrap();
        s.write_channel(&named("stdout"), &lines_of(300_000))
            .unwrap();
        s.write_channel(&named("stderr"), b"shared\n").unwrap();
        crate::fault::no_space_at(step, passes);
        let record = s
            .finish(done())
            .unwrap_or_else(|e| panic!("{step}/{passes}: {e}"));
        // The record is there, and everything it points at reads back.
        assert_eq!(store.record(&record.run_id).unwrap(), record, "{step}");
        assert_eq!(read_all(&store, &record, "stdout"), lines_of(300_000));
        assert_eq!(read_all(&store, &record, "stderr"), b"shared\n");
        let preview = &record.stream("stdout").unwrap().preview;
        if step == "writing the record" {
            // The minimal record: no preview, and it says the stream goes on past it.
            assert!(preview.text.is_empty() && preview.truncated, "{preview:?}");
            assert_eq!(preview.raw_bytes, 0);
        } else {
            assert!(preview.text.starts_with("aaaa"), "{step}/{passes}");
        }
        assert_eq!(read_all(&store, &earlier, "stderr"), b"shared\n");
        let mut records = store.records().unwrap();
        records.sort();
        let mut expected = vec![earlier.run_id.clone(), record.run_id.clone()];
        expected.sort();
        assert_eq!(records, expected, "{step}");
        assert_eq!(
            files_under(&store.root().join("captures")).len(),
            0,
            "{step}"
        );
        let report = store.verify().unwrap();
        assert!(
            report.is_healthy(),
            "{step}/{passes}: {:?}",
            report.problems
        );
        // Nothing unreferenced is left, however young.
        let gc = GcOptions {
            grace: std::time::Duration::ZERO,
            ..GcOptions::default()
        };
        assert_eq!(store.gc(&gc).unwrap().objects_removed, 0, "{step}/{passes}");
    }
}

#[test]
fn a_record_is_published_while_something_else_takes_every_free_block() {
    let Some(tmpfs) = Tmpfs::mount("8m") else {
        return;
    };
    let store = Store::open(tmpfs.path().join("s")).unwrap();
    let sent = lines_of(3 << 20);
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stdout"), &sent).unwrap();
    s.write_channel(&named("stderr"), b"progress\n").unwrap();
    // Another writer on the same file system: it writes 4 KiB at a time for as long as the
    // test runs, taking every block that becomes free, while the capture is published.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let full = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let filler = {
        let (stop, full) = (stop.clone(), full.clone());
        let path = tmpfs.path().join("filler");
        thread::spawn(move || {
            use std::sync::atomic::Ordering;
            let mut f = std::fs::File::create(path).unwrap();
            while !stop.load(Ordering::SeqCst) {
                if io::Write::write_all(&mut f, &[b'f'; 4096]).is_err() {
                    full.store(true, Ordering::SeqCst);
                }
            }
        })
    };
    // Waits (generously) for the disk to be full before publication starts.
    for _ in 0..6000 {
        if full.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        full.load(std::sync::atomic::Ordering::SeqCst),
        "the disk never filled"
    );
    let finished = s.finish(done());
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    filler.join().unwrap();
    let record = finished.unwrap();
    assert_eq!(store.record(&record.run_id).unwrap(), record);
    assert_eq!(read_all(&store, &record, "stdout"), sent);
    assert_eq!(read_all(&store, &record, "stderr"), b"progress\n");
    let report = store.verify().unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems);
}

#[test]
fn two_empty_streams_leave_no_orphan_when_publication_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("s")).unwrap();
    let s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    // Not a full disk: a failure that takes the objects back.
    crate::fault::fail_with_at("publishing an object", 1, rustix::io::Errno::ACCESS);
    s.finish(done()).unwrap_err();
    let gc = GcOptions {
        grace: std::time::Duration::ZERO,
        ..GcOptions::default()
    };
    assert_eq!(
        store.gc(&gc).unwrap().objects_removed,
        0,
        "an orphan was left"
    );
}

#[test]
fn a_final_display_larger_than_the_room_left_gives_the_minimal_record() {
    let Some(tmpfs) = Tmpfs::mount("8m") else {
        return;
    };
    let store = Store::open(tmpfs.path().join("s")).unwrap();
    let sent = lines_of(24 << 20);
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stderr"), b"progress\n").unwrap();
    for chunk in sent.chunks(1 << 20) {
        if s.write_channel(&named("stdout"), chunk).is_err() {
            break;
        }
    }
    let progress = b"progress\n".repeat(455);
    while s.write_channel(&named("stderr"), &progress).is_ok() {}
    // The largest final display, of control bytes (six bytes of JSON each): 6 MiB that the
    // full disk has no room for.
    let display = "\u{1}".repeat(agentrun_core::capture::MAX_DISPLAY_BYTES);
    let record = s
        .finish(CaptureCompletion::Streamed {
            display: Some(display),
            status: CaptureStatus::Succeeded,
        })
        .unwrap();
    assert!(
        record.display.is_empty(),
        "the minimal record has no display"
    );
    check_kept_minimal(&store, &record, &sent);
}

/// [`check_kept`] for a minimal record: no previews, everything else.
fn check_kept_minimal(store: &Store, record: &ResultRecord, sent: &[u8]) {
    assert!(record.incomplete, "{record:?}");
    assert_eq!(store.record(&record.run_id).unwrap(), *record);
    let kept = read_all(store, record, "stdout");
    assert!(!kept.is_empty() && kept.len() < sent.len());
    assert_eq!(kept, sent[..kept.len()]);
    let preview = &record.stream("stdout").unwrap().preview;
    assert!(preview.text.is_empty() && preview.truncated && preview.raw_bytes == 0);
    let report = store.verify().unwrap();
    assert!(report.is_healthy(), "{:?}", report.problems);
}
