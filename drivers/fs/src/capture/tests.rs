//! Tests of the capture session, its hasher pipeline and its publication.

use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom, Write};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::SystemTime;

use agentrun_core::stream::StreamIndex;
use agentrun_core::{
    CaptureCompletion, CaptureError, CaptureStatus, Digest, OutputChannel, OutputDeclaration,
    PageRequest, PreviewLimits, ResultRecord, StreamName,
};

use crate::store::Store;

use super::pipeline::*;
use super::publish::*;
use super::session::*;

fn named(name: &str) -> OutputChannel {
    OutputChannel::Named(StreamName::new(name).unwrap())
}

fn done() -> CaptureCompletion {
    CaptureCompletion::Streamed {
        display: None,
        status: CaptureStatus::Succeeded,
    }
}

/// A store in a fresh temporary directory (kept while the directory lives).
fn temp_store() -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("s")).unwrap();
    (tmp, store)
}

/// A fresh single-output capture and its stream.
fn single(store: &Store) -> (CaptureSession, StreamIndex) {
    let s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    let ix = s.resolve(&OutputChannel::Single).unwrap();
    (s, ix)
}

fn read_stream(store: &Store, record: &ResultRecord, name: &str) -> Vec<u8> {
    let uri = record.stream_uri(record.stream(name).unwrap());
    store.read_page(&uri, PageRequest::default()).unwrap().bytes
}

#[test]
fn a_stream_index_of_another_session_is_a_typed_error_not_a_panic() {
    let (_tmp, store) = temp_store();
    let other = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    let stderr = other.resolve(&named("stderr")).unwrap();
    let mut single = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    single
        .write_channel(&OutputChannel::Single, b"kept\n")
        .unwrap();
    let err = single.write(stderr, b"lost\n").unwrap_err();
    assert!(
        matches!(
            err,
            CaptureWriteError::Rejected(CaptureError::ForeignStream {
                index: 1,
                streams: 1
            })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("not a stream of this capture"),
        "{err}"
    );
    let err = single.record_fault(Some(stderr), "x").unwrap_err();
    assert!(matches!(err, CaptureWriteError::Rejected(_)), "{err:?}");
    // Nothing was written or recorded: the capture finishes complete.
    let record = single.finish(done()).unwrap();
    assert!(!record.incomplete, "{record:?}");
    // A session with as many streams refuses it too, instead of writing it to its own
    // stderr.
    let mut twin = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    let err = twin.write(stderr, b"lost\n").unwrap_err();
    assert!(
        matches!(
            err,
            CaptureWriteError::Rejected(CaptureError::ForeignStream {
                index: 1,
                streams: 2
            })
        ),
        "{err:?}"
    );
    let record = twin.finish(done()).unwrap();
    assert!(!record.incomplete, "{record:?}");
    assert!(read_stream(&store, &record, "stderr").is_empty());
    drop(other);
}

/// The file syncs and renames (in order) a two-stream capture's publication makes, as
/// `S` (a file `fsync`) and `R` (a rename).
/// A two-stream capture of `out` and `err`, and the fault points its publication passed.
fn points_of_a_capture(
    store: &Store,
    out: &[u8],
    err: &[u8],
) -> (agentrun_core::ResultRecord, Vec<&'static str>) {
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stdout"), out).unwrap();
    s.write_channel(&named("stderr"), err).unwrap();
    crate::fault::log_points();
    let record = s.finish(done()).unwrap();
    let points = crate::fault::take_points();
    assert_eq!(read_stream(store, &record, "stdout"), out);
    (record, points)
}

fn syncs_and_renames_of_a_capture(store: &Store, out: &[u8], err: &[u8]) -> String {
    let (_, points) = points_of_a_capture(store, out, err);
    points
        .iter()
        .filter_map(|p| match *p {
            "before a file sync" => Some('S'),
            "before a rename" => Some('R'),
            _ => None,
        })
        .collect()
}

#[test]
fn each_published_file_is_synced_just_before_its_rename_and_a_dedupe_hit_syncs_only_the_record() {
    let (_tmp, store) = temp_store();
    // New: stdout, stderr and the manifest, each its index then its bytes, then the record.
    let first = syncs_and_renames_of_a_capture(&store, b"out\n", b"err\n");
    assert_eq!(first, "SR".repeat(7), "first capture");
    // The same output again: every object is a dedupe hit, whose fresh files are dropped
    // unsynced; only the record is written.
    let again = syncs_and_renames_of_a_capture(&store, b"out\n", b"err\n");
    assert_eq!(again, "SR", "a capture of the same output");
    // One new stream beside two known objects.
    let one_new = syncs_and_renames_of_a_capture(&store, b"other\n", b"err\n");
    assert_eq!(one_new, "SR".repeat(5), "one new stream and a new manifest");
}

#[test]
fn a_new_object_directory_is_made_durable_in_objects_before_it_is_used() {
    let (_tmp, store) = temp_store();
    let (record, points) = points_of_a_capture(&store, b"out\n", b"err\n");
    // A fresh store has no `objects/<2 hex>` yet: one sync of `objects/` per new one.
    let prefixes: std::collections::HashSet<String> = record
        .artifacts()
        .iter()
        .chain(record.streams().iter().map(|st| &st.sha256))
        .map(|d| d.to_hex()[..2].to_owned())
        .collect();
    let synced = points
        .iter()
        .filter(|p| **p == "before syncing a new object directory's parent")
        .count();
    assert_eq!(synced, prefixes.len(), "{points:?}");
    // The same output again: every directory exists, nothing more is synced for it.
    let (_, points) = points_of_a_capture(&store, b"out\n", b"err\n");
    assert!(!points.contains(&"before syncing a new object directory's parent"));
}

#[test]
fn a_dedupe_hit_on_an_object_another_process_published_syncs_its_directory() {
    let (_tmp, store) = temp_store();
    let dir_syncs = |points: &[&str]| {
        points
            .iter()
            .filter(|p| **p == "before a directory sync")
            .count()
    };
    points_of_a_capture(&store, b"x\n", b"y\n");
    // Published by this process, its directories synced: a hit syncs none of them again.
    let (_, here) = points_of_a_capture(&store, b"x\n", b"y\n");
    // As if another process had published them (it may not have synced their directory
    // yet): the hit syncs each object's directory (stdout, stderr, manifest), once.
    store.layout.synced_objects().forget();
    let (_, elsewhere) = points_of_a_capture(&store, b"x\n", b"y\n");
    assert_eq!(dir_syncs(&elsewhere), dir_syncs(&here) + 3, "{elsewhere:?}");
    let (_, again) = points_of_a_capture(&store, b"x\n", b"y\n");
    assert_eq!(dir_syncs(&again), dir_syncs(&here));
}

#[test]
fn a_failed_publication_takes_back_only_what_nothing_else_refers_to() {
    let (_tmp, store) = temp_store();
    let layout = &store.layout;
    let since = SystemTime::now();
    let published = |content: &[u8]| {
        let (mut s, ix) = single(&store);
        s.write(ix, content).unwrap();
        let record = s.finish(done()).unwrap();
        let digest = record.output_uri().digest;
        let mtime = fs::metadata(layout.object(&digest))
            .unwrap()
            .modified()
            .ok();
        (record, digest, mtime)
    };
    let (_, referenced, referenced_mtime) = published(b"a record of now names it\n");
    let (old, alone, alone_mtime) = published(b"only its record, removed\n");
    fs::remove_file(layout.record(&old.run_id)).unwrap();
    let (old, guarded, guarded_mtime) = published(b"a live capture protects it\n");
    fs::remove_file(layout.record(&old.run_id)).unwrap();
    let mut live = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    live.protect_more(&[guarded]).unwrap();
    let own = store.layout.captures().join("a-failed-capture");
    // Each on its own, as a failed publication of that object alone would.
    for (digest, mtime) in [
        (referenced, referenced_mtime),
        (alone, alone_mtime),
        (guarded, guarded_mtime),
    ] {
        unpublish(layout, &own, &[(digest, mtime)], None, since);
    }
    assert!(layout.object(&referenced).exists(), "a record names it");
    assert!(
        layout.object(&guarded).exists(),
        "a live capture protects it"
    );
    assert!(!layout.object(&alone).exists(), "nothing refers to it");
    assert!(!layout.index(&alone).exists());
    // A changed mtime (a dedupe hit refreshed it) keeps it too.
    let (old, refreshed, _) = published(b"deduplicated since\n");
    fs::remove_file(layout.record(&old.run_id)).unwrap();
    let before = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1);
    unpublish(
        layout,
        &own,
        &[(refreshed, Some(before))],
        None,
        SystemTime::now(),
    );
    assert!(layout.object(&refreshed).exists());
    drop(live);
}

#[test]
fn a_fault_recorded_by_the_caller_marks_the_record_and_keeps_the_bytes() {
    let (_tmp, store) = temp_store();
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    let stdout = s.resolve(&named("stdout")).unwrap();
    // A large chunk may still be in the hasher thread: it must be kept.
    let big = vec![b'x'; PIPELINE_CHUNK + 10];
    s.write(stdout, &big).unwrap();
    s.record_fault(Some(stdout), "output may be missing")
        .unwrap();
    assert!(s.write(stdout, b"after").is_err(), "the stream is closed");
    s.record_fault(None, "exit unknown").unwrap();
    let record = s.finish(done()).unwrap();
    assert!(record.incomplete);
    let faults: Vec<_> = record
        .faults
        .iter()
        .map(|f| (f.stream.as_ref().map(|n| n.as_str()), f.message.as_str()))
        .collect();
    assert_eq!(
        faults,
        [
            (Some("stdout"), "output may be missing"),
            (None, "exit unknown")
        ]
    );
    assert_eq!(read_stream(&store, &record, "stdout"), big);
}

#[test]
fn a_write_fault_is_reported_recorded_and_the_accepted_bytes_are_kept() {
    let (_tmp, store) = temp_store();
    let mut s = store
        .begin_capture(OutputDeclaration::stdout_stderr(), PreviewLimits::default())
        .unwrap();
    s.write_channel(&named("stdout"), b"kept\n").unwrap();
    // Swap the capture file for a read-only handle: the next write fails as on a full disk.
    let path = s.streams[0].data_path.clone();
    s.streams[0].data = File::open(&path).unwrap();
    let err = s.write_channel(&named("stdout"), b"lost\n").unwrap_err();
    assert!(
        matches!(&err, CaptureWriteError::Io { stream, .. } if stream == "stdout"),
        "{err:?}"
    );
    // Later chunks for that stream are refused too, never silently dropped.
    let err = s.write_channel(&named("stdout"), b"more\n").unwrap_err();
    assert!(err.to_string().contains("earlier write error"), "{err}");
    let err = s.resolve(&named("stdout")).unwrap_err();
    assert!(matches!(err, CaptureWriteError::Io { .. }));
    // Other streams go on.
    s.write_channel(&named("stderr"), b"e\n").unwrap();
    let record = s.finish(done()).unwrap();
    assert!(record.incomplete);
    assert_eq!(record.faults[0].stream.as_ref().unwrap().as_str(), "stdout");
    assert!(
        record
            .render()
            .starts_with("[Incomplete output: capture failed")
    );
    assert_eq!(read_stream(&store, &record, "stdout"), b"kept\n");
    assert_eq!(read_stream(&store, &record, "stderr"), b"e\n");
    assert_eq!(store.record(&record.run_id).unwrap(), record);
}

/// A session whose capture file refuses writes (as on a full disk) after `kept` was
/// written and accepted.
fn session_with_a_broken_file(store: &Store, kept: &[u8]) -> (CaptureSession, StreamIndex) {
    let (mut s, ix) = single(store);
    s.write(ix, kept).unwrap();
    break_capture_file(&mut s);
    (s, ix)
}

/// Swaps stream 0's capture file for a read-only handle: the next write fails.
fn break_capture_file(s: &mut CaptureSession) {
    let read_only = File::open(&s.streams[0].data_path).unwrap();
    s.streams[0].data = read_only;
}

fn assert_only_kept(store: &Store, record: &ResultRecord, kept: &[u8]) {
    assert!(record.incomplete);
    let stream = &record.streams()[0];
    assert_eq!(stream.sha256, Digest::of(kept));
    // A last line without its newline counts too.
    let newlines = kept.iter().filter(|&&b| b == b'\n').count() as u64;
    let lines = newlines + u64::from(kept.last().is_some_and(|&b| b != b'\n'));
    assert_eq!((stream.bytes, stream.lines), (kept.len() as u64, lines));
    assert!(!stream.preview.text.contains('x'));
    let mut stored = Vec::new();
    store.copy_to(&record.output_uri(), &mut stored).unwrap();
    assert_eq!(stored, kept);
}

#[test]
fn a_failed_large_write_is_reported_and_never_hashed() {
    // A failed write must leave the digest, counts and preview describing only the bytes
    // on disk, however large the chunk.
    let (_tmp, store) = temp_store();
    let kept = vec![b'k'; PIPELINE_CHUNK + 1];
    let (mut s, ix) = session_with_a_broken_file(&store, &kept);
    let lost = vec![b'x'; 2 * PIPELINE_CHUNK];
    let first = s.write(ix, &lost);
    assert!(
        matches!(first, Err(CaptureWriteError::Io { .. })),
        "{first:?}"
    );
    let second = s.write(ix, b"more\n").unwrap_err();
    assert!(
        second.to_string().contains("earlier write error"),
        "{second}"
    );
    let record = s.finish(done()).unwrap();
    assert_only_kept(&store, &record, &kept);
    assert_eq!(record.faults.len(), 1, "{:?}", record.faults);
}

#[test]
fn pieces_waiting_for_the_hasher_are_kept_when_a_later_write_fails() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    let kept: Vec<u8> = (0..PIPELINE_PIECE * 3 + 5)
        .map(|i| {
            if i % 80 == 79 {
                b'\n'
            } else {
                b'0' + (i % 10) as u8
            }
        })
        .collect();
    s.write(ix, &kept).unwrap();
    break_capture_file(&mut s);
    assert!(s.write(ix, &vec![b'x'; PIPELINE_CHUNK]).is_err());
    let record = s.finish(done()).unwrap();
    assert_only_kept(&store, &record, &kept);
}

/// Writes `pieces` pieces of `len` bytes with the hasher held, then one more, which must
/// wait for the hasher; checks how many pieces were waiting before it.
fn writes_wait_for_the_hasher_after(pieces: usize, len: usize) {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    // The stream is checked against the machine once, before the machine is held: checked
    // under the guard, the first write would wait for it, and the pieces would then be
    // counted with the hasher already running.
    s.write(ix, b"").unwrap();
    // Hold the machine: the hasher blocks on its first piece, and the writes go on only
    // while the pipeline has room.
    let accepting = Arc::clone(&s.accepting);
    let guard = lock(&accepting);
    let writer = thread::spawn(move || {
        for _ in 0..pieces {
            s.write(ix, &vec![b'p'; len]).unwrap();
        }
        let waiting = s.streams[0].outstanding();
        // One more piece than the pipeline holds: this write waits for the hasher.
        s.write(ix, &vec![b'q'; len]).unwrap();
        (s, waiting)
    });
    // The writer is blocked (the hasher cannot take the lock) until the guard goes.
    thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !writer.is_finished(),
        "the write beyond the pipeline's depth must wait"
    );
    drop(guard);
    let (s, waiting) = writer.join().unwrap();
    assert_eq!(waiting, pieces);
    drop(accepting);
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete);
    assert_eq!(record.streams()[0].bytes, ((pieces + 1) * len) as u64);
}

#[test]
fn the_writes_run_ahead_of_the_hasher_by_a_bounded_number_of_pieces() {
    writes_wait_for_the_hasher_after(PIPELINE_DEPTH, PIPELINE_CHUNK);
}

#[test]
fn the_copies_waiting_for_the_hasher_are_bounded_in_bytes() {
    writes_wait_for_the_hasher_after(PIPELINE_COPIES / PIPELINE_PIECE, PIPELINE_PIECE);
}

#[test]
fn write_back_is_handed_to_its_thread_and_a_busy_thread_loses_no_range() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    // A stand-in for the write-back thread that takes one range and starts none until the
    // test takes them: the writes must go on, and keep the ranges it has no room for.
    let (ranges, started) = mpsc::sync_channel(1);
    s.streams[0].writeback = Some(Writeback {
        ranges: Some(ranges),
        thread: None,
    });
    let piece = lines_of(PIPELINE_PIECE);
    let steps = 3 * (WRITEBACK_STEP as usize / PIPELINE_PIECE);
    for _ in 0..steps {
        s.write(ix, &piece).unwrap();
    }
    let written = (steps * PIPELINE_PIECE) as u64;
    let (offset, first) = started.try_recv().expect("a range was handed over");
    assert_eq!(offset, 0);
    assert!(
        (WRITEBACK_STEP..=written).contains(&first),
        "{first} of {written}"
    );
    // The ranges that found the thread busy go with the next one: nothing is skipped.
    for _ in 0..steps {
        s.write(ix, &piece).unwrap();
    }
    let (next, _) = started
        .try_recv()
        .expect("the kept ranges were handed over");
    assert_eq!(next, first);
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete);
    assert_eq!(record.streams()[0].bytes, 2 * written);
}

/// A hasher thread that takes one piece and stops, as if it had died.
fn dying_hasher() -> Hasher {
    let (pieces, to_hash) = mpsc::sync_channel::<Piece>(PIPELINE_DEPTH);
    let (done, returned) = mpsc::sync_channel(PIPELINE_DEPTH);
    let thread = thread::spawn(move || {
        let _ = to_hash.recv();
        drop(done);
    });
    Hasher {
        pieces: Some(pieces),
        returned,
        outstanding: 0,
        copied: 0,
        pending: 0,
        thread: Some(thread),
    }
}

#[test]
fn a_hasher_that_stops_is_a_fault_and_its_pieces_are_cut_off() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    let kept = b"kept\n".to_vec();
    s.write(ix, &kept).unwrap();
    s.streams[0].hasher = Some(dying_hasher());
    // Its error comes from this call or from finish; either way it is recorded.
    let _ = s.write(ix, &vec![b'x'; 2 * PIPELINE_PIECE]);
    let record = s.finish(done()).unwrap();
    assert_only_kept(&store, &record, &kept);
    assert!(
        record.faults[0].message.contains("hasher thread stopped"),
        "{:?}",
        record.faults
    );
}

#[test]
fn a_hasher_that_panics_half_way_never_gets_a_wrong_digest_published() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    s.write(ix, b"on disk\n").unwrap();
    // The file gets bytes the machine never sees, and the machine takes as many other
    // bytes, then its thread panics with the lock held: the machine no longer describes
    // the file, though the lengths agree.
    s.streams[0].data.write_all(b"written\n").unwrap();
    let accepting = Arc::clone(&s.accepting);
    let panicked = thread::spawn(move || {
        let mut acc = lock(&accepting);
        acc.capture.handle_chunk(ix, b"hashed!\n");
        panic!("a hasher bug");
    })
    .join();
    assert!(panicked.is_err());
    let err = s.finish(done()).unwrap_err();
    assert!(
        err.to_string()
            .contains("no longer matches the bytes accepted"),
        "{err}"
    );
    assert!(store.verify().unwrap().is_healthy());
}

/// Drains `read` (a pipe's read end, or any file) into stream `ix` through
/// `write_from_pipe` until end of file, polling while it is empty.
fn drain(s: &mut CaptureSession, ix: StreamIndex, read: &impl std::os::fd::AsFd) -> u64 {
    let mut taken = 0u64;
    loop {
        match s.write_from_pipe(ix, read.as_fd(), 1 << 20) {
            Ok(0) => return taken,
            Ok(n) => taken += n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Sends `content` through a non-blocking pipe, written in odd sizes by another thread,
/// into stream `ix` with `write_from_pipe`; returns the bytes taken.
fn pipe_through(s: &mut CaptureSession, ix: StreamIndex, content: &[u8]) -> u64 {
    let (read, write) = rustix::pipe::pipe().unwrap();
    rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK).unwrap();
    let sent = content.to_vec();
    let writer = thread::spawn(move || {
        for piece in sent.chunks(300_001) {
            rustix::io::write(&write, piece).unwrap();
        }
    });
    let taken = drain(s, ix, &read);
    writer.join().unwrap();
    taken
}

/// Bytes of many lines, `len` long, that differ from block to block.
fn lines_of(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i % 97 == 96 {
                b'\n'
            } else {
                b'0' + (i / 97 % 10) as u8
            }
        })
        .collect()
}

#[test]
fn a_pipe_spliced_into_a_stream_keeps_every_byte_across_mapped_windows() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    // More than two mapped windows, written in odd sizes, so pieces straddle windows.
    let content = lines_of(2 * crate::mapped::WINDOW as usize + 777_777);
    s.write(ix, b"before\n").unwrap();
    assert_eq!(pipe_through(&mut s, ix, &content), content.len() as u64);
    s.write(ix, b"after\n").unwrap();
    assert!(
        s.streams[0].splice,
        "the kernel splices pipes into ext4/tmpfs files"
    );
    let all = [&b"before\n"[..], &content, b"after\n"].concat();
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete, "{:?}", record.faults);
    assert_eq!(record.streams()[0].sha256, Digest::of(&all));
    let mut stored = Vec::new();
    store.copy_to(&record.output_uri(), &mut stored).unwrap();
    assert_eq!(stored, all);
    assert!(store.verify().unwrap().is_healthy());
}

#[test]
fn a_source_the_kernel_cannot_splice_is_read_and_written_instead() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    // A regular file is not a pipe: splice refuses it, the copy path takes over.
    let content = lines_of(3 * PIPELINE_PIECE + 5);
    let mut source = tempfile::tempfile().unwrap();
    source.write_all(&content).unwrap();
    source.seek(SeekFrom::Start(0)).unwrap();
    assert_eq!(drain(&mut s, ix, &source), content.len() as u64);
    assert!(!s.streams[0].splice);
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete);
    assert_eq!(record.streams()[0].sha256, Digest::of(&content));
}

#[test]
fn a_failed_stream_still_drains_its_pipe() {
    let (_tmp, store) = temp_store();
    let kept = b"kept\n".to_vec();
    let (mut s, ix) = session_with_a_broken_file(&store, &kept);
    let (read, write) = rustix::pipe::pipe().unwrap();
    rustix::io::write(&write, &[b'x'; 60_000]).unwrap();
    drop(write);
    // Every byte is taken from the pipe (its writer never blocks), none is kept.
    assert_eq!(drain(&mut s, ix, &read), 60_000);
    let record = s.finish(done()).unwrap();
    assert_only_kept(&store, &record, &kept);
}

#[test]
fn an_empty_pipe_would_block_and_a_closed_one_is_at_end_of_file() {
    use std::os::fd::AsFd;
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    let (read, write) = rustix::pipe::pipe().unwrap();
    rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK).unwrap();
    let err = s.write_from_pipe(ix, read.as_fd(), 1024).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    drop(write);
    assert_eq!(s.write_from_pipe(ix, read.as_fd(), 1024).unwrap(), 0);
    let record = s.finish(done()).unwrap();
    assert_eq!(record.streams()[0].bytes, 0);
}

#[test]
fn spliced_pieces_are_copied_back_where_the_file_is_not_mapped() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    // The hasher of a file system that is not mapped (see `mapped::maps_safely`).
    let file = s.streams[0].data.try_clone().unwrap();
    let hasher = Hasher::spawn(Arc::clone(&s.accepting), ix, file, false).unwrap();
    s.streams[0].hasher = Some(hasher);
    let content = lines_of(3 * PIPELINE_PIECE + 11);
    assert_eq!(pipe_through(&mut s, ix, &content), content.len() as u64);
    assert!(s.streams[0].splice);
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete);
    assert_eq!(record.streams()[0].sha256, Digest::of(&content));
}

#[test]
fn a_blocking_pipe_is_waited_for_as_read_would() {
    use std::os::fd::AsFd;
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    let (read, write) = rustix::pipe::pipe().unwrap();
    let writer = thread::spawn(move || {
        thread::sleep(std::time::Duration::from_millis(20));
        rustix::io::write(&write, b"late\n").unwrap();
    });
    // Empty and blocking: the call waits for the bytes instead of `WouldBlock`.
    assert_eq!(s.write_from_pipe(ix, read.as_fd(), 1024).unwrap(), 5);
    writer.join().unwrap();
    let record = s.finish(done()).unwrap();
    assert_eq!(record.streams()[0].bytes, 5);
}

#[test]
fn pieces_large_and_small_arrive_in_order() {
    let (_tmp, store) = temp_store();
    let (mut s, ix) = single(&store);
    let mut all = Vec::new();
    for (i, len) in [
        PIPELINE_PIECE * 2 + 7,
        3,
        PIPELINE_CHUNK,
        1,
        PIPELINE_CHUNK - 1,
    ]
    .into_iter()
    .enumerate()
    {
        let chunk: Vec<u8> = (0..len).map(|k| b'a' + ((i + k) % 26) as u8).collect();
        s.write(ix, &chunk).unwrap();
        all.extend_from_slice(&chunk);
    }
    let record = s.finish(done()).unwrap();
    assert!(!record.incomplete);
    assert_eq!(record.streams()[0].sha256, Digest::of(&all));
    let mut stored = Vec::new();
    store.copy_to(&record.output_uri(), &mut stored).unwrap();
    assert_eq!(stored, all);
}

#[test]
fn a_lost_index_is_rebuilt_from_the_capture_file() {
    let (_tmp, store) = temp_store();
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    {
        let mut acc = lock(&s.accepting);
        let path = acc.indexes[0].path.clone();
        acc.indexes[0].file = File::open(&path).unwrap();
    }
    let content: Vec<u8> = (0..30_000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    // The index error comes from this call or, with the chunk's piece still in the
    // hasher, when finish settles it: either way it is recorded.
    let _ = s.write_channel(&OutputChannel::Single, &content[..100_000]);
    let record = s.finish(done()).unwrap();
    assert!(record.incomplete);
    assert!(
        record.faults[0].message.contains("line index"),
        "{:?}",
        record.faults
    );
    let uri = record.output_uri();
    let page = store
        .read_page(&uri, PageRequest::new(15_000, 5).unwrap())
        .unwrap();
    let want = agentrun_core::page::extract_page(
        &content[..100_000],
        PageRequest::new(15_000, 5).unwrap(),
    );
    assert_eq!(page, want.unwrap());
    assert!(store.verify().unwrap().is_healthy());
}
