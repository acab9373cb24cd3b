//! The shared store on object storage, against a real S3-API server (moto's server mode,
//! installed by `scripts/install-moto.sh` when missing, started here on 127.0.0.1) and against
//! object_store's local-file backend (`file://`). Every scenario runs on both. Each "machine"
//! is a [`Store`] with its own local home (spool and sidecar cache) on the same bucket.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use agentrun_core::{
    ArtifactUri, CaptureCompletion, CaptureStatus, Digest, OutputChannel, OutputDeclaration,
    PageRequest, PreviewLimits,
};
use object_store::PutMode;

use crate::remote::{LeaseBody, Upload};
use crate::{GcOptions, ReadError, Store};

// moto's start (install when missing, a free port on 127.0.0.1, a wrapper that stops it),
// shared with the CLI's tests.
#[path = "../../cli/tests/support/moto.rs"]
mod moto_server;
use moto_server::{Moto, http};

mod crash;
mod spool;

/// One moto server for the whole test binary: its wrapper shell waits on a pipe only this
/// process writes, so the server stops when the test binary exits.
fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(Moto::start)
}

/// A bucket: on moto (`s3://`) or in a directory (`file://`).
enum Bucket {
    S3 {
        name: String,
    },
    File {
        _dir: tempfile::TempDir,
        url: String,
    },
}

impl Bucket {
    fn s3() -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "t{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        moto().create_bucket(&name);
        Bucket::S3 { name }
    }

    fn file() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("bucket").display());
        Bucket::File { _dir: dir, url }
    }

    /// Its URL, and the environment a child process opens it with.
    fn url_and_env(&self) -> (String, Vec<(&'static str, String)>) {
        match self {
            Bucket::S3 { name } => (
                format!("s3://{name}/team/agentrun"),
                vec![
                    ("AWS_ACCESS_KEY_ID", "test".to_owned()),
                    ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
                    ("AWS_REGION", "us-east-1".to_owned()),
                    (
                        "AWS_ENDPOINT_URL",
                        format!("http://127.0.0.1:{}", moto().port),
                    ),
                    ("AWS_ALLOW_HTTP", "true".to_owned()),
                ],
            ),
            Bucket::File { url, .. } => (url.clone(), Vec::new()),
        }
    }

    fn both() -> [Bucket; 2] {
        [Bucket::file(), Bucket::s3()]
    }

    /// A machine: a store on this bucket with its own local home.
    fn machine(&self, home: &Path) -> Store {
        self.machine_with(home, &[])
    }

    /// A machine whose store is opened with `extra` options too (S3 only).
    fn machine_with(&self, home: &Path, extra: &[(&str, &str)]) -> Store {
        match self {
            Bucket::S3 { name } => open_s3(&format!("s3://{name}/team/agentrun"), home, extra),
            Bucket::File { url, .. } => Store::open_url(url, home).unwrap(),
        }
    }
}

/// The store `url` on moto, spooling in `home`, opened with `extra` options too.
fn open_s3(url: &str, home: &Path, extra: &[(&str, &str)]) -> Store {
    let endpoint = format!("http://127.0.0.1:{}", moto().port);
    let mut options = vec![
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
        ("aws_region", "us-east-1"),
        ("aws_endpoint", &endpoint),
        ("aws_allow_http", "true"),
    ];
    options.extend_from_slice(extra);
    Store::open_url_with(url, home, &options).unwrap()
}

fn done() -> CaptureCompletion {
    CaptureCompletion::Streamed {
        display: None,
        status: CaptureStatus::Succeeded,
    }
}

fn lines(n: u64, tag: &str) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("{tag} line {i} {}\n", "y".repeat((i % 50) as usize)).into_bytes())
        .collect()
}

fn capture(store: &Store, bytes: &[u8]) -> agentrun_core::ResultRecord {
    try_capture(store, bytes).unwrap()
}

/// A capture whose end (its publication, on a bucket) may fail.
fn try_capture(
    store: &Store,
    bytes: &[u8],
) -> Result<agentrun_core::ResultRecord, crate::StoreError> {
    let mut s = store
        .begin_capture(OutputDeclaration::Single, PreviewLimits::default())
        .unwrap();
    for piece in bytes.chunks(1 << 20) {
        s.write_channel(&OutputChannel::Single, piece).unwrap();
    }
    s.finish(done())
}

fn single_uri(record: &agentrun_core::ResultRecord) -> ArtifactUri {
    record.stream_uri(&record.streams()[0])
}

fn bucket_objects(store: &Store) -> Vec<String> {
    let remote = store.remote.as_ref().unwrap();
    remote
        .list("objects/")
        .unwrap()
        .into_iter()
        .map(|m| m.location.to_string())
        .filter(|k| !k.ends_with(".idx"))
        .collect()
}

fn homes() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    (tmp, a, b)
}

#[test]
fn what_one_machine_runs_the_other_pages_reads_lists_and_shows() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let content = lines(200_000, "run");
        let record = capture(&a, &content);
        // The spool keeps no record once the bucket has it.
        assert!(a.local_only().records().unwrap().is_empty());
        assert_eq!(b.records().unwrap(), std::slice::from_ref(&record.run_id));
        let listing = b.recent_runs(10).unwrap();
        assert!(listing.is_complete());
        assert_eq!(listing.runs[0].record, record);
        assert_eq!(b.record(&record.run_id).unwrap().render(), record.render());
        let uri = single_uri(&record);
        let all: Vec<&[u8]> = content.split_inclusive(|&c| c == b'\n').collect();
        for offset in [0u64, 1, 100_000, 197_999, 199_990] {
            let digest = b.resolve(&uri).unwrap();
            let page = b
                .read_page(&uri, PageRequest::new(offset, 2000).unwrap())
                .unwrap();
            let want: Vec<u8> =
                all[offset as usize..(offset as usize + 2000).min(all.len())].concat();
            assert_eq!(page.bytes, want, "offset {offset}");
            // The same page on a fresh object handle, counting its range requests.
            let fresh = b.open_object(&digest).unwrap();
            let again = fresh_page(&fresh, offset);
            assert_eq!(again, want);
            assert!(
                fresh.requests() <= 2,
                "offset {offset}: {} range requests",
                fresh.requests()
            );
        }
        let mut whole = Vec::new();
        assert_eq!(b.copy_to(&uri, &mut whole).unwrap(), content.len() as u64);
        assert_eq!(whole, content);
        let bytes = b
            .read_bytes(
                &uri,
                agentrun_core::ByteRange::new(5_000_000, 1000).unwrap(),
            )
            .unwrap();
        assert_eq!(bytes.bytes, content[5_000_000..5_001_000]);
        assert!(b.verify().unwrap().is_healthy());
    }
}

#[test]
fn a_compaction_on_one_machine_keeps_its_references_to_what_another_published() {
    use agentrun_core::compaction::{Claim, Holds};
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let content = lines(2_000, "tool output");
        let record = capture(&a, &content);
        let uri = single_uri(&record);
        let digest = b.resolve(&uri).unwrap();
        assert_eq!(digest, Digest::of(&content));
        // Machine b's spool has none of it; a claim of something nowhere is refused.
        let nowhere = ArtifactUri::new(Digest::of(b"never stored"));
        let mut session = b.begin_retention().unwrap();
        let confirmed = session
            .confirm(vec![
                Claim {
                    uri: uri.clone(),
                    holds: Holds::Output(digest),
                },
                Claim {
                    uri: nowhere,
                    holds: Holds::Readable,
                },
            ])
            .unwrap();
        assert_eq!(confirmed.len(), 1, "{confirmed:?}");
        assert_eq!(confirmed[0].uri, uri);
        let retained = session.finish().unwrap().unwrap();
        assert_eq!(retained.kept, vec![uri.clone()]);
        // The compaction's record is in the bucket and keeps the reference: with the record
        // of the run that produced it gone, a GC on machine a still keeps the output.
        let kept_by = b.record(&retained.run_id).unwrap();
        assert!(kept_by.artifacts().contains(&digest));
        let remote = a.remote.as_ref().unwrap();
        remote.delete(&remote.record_key(&record.run_id)).unwrap();
        a.gc(&gc_later()).unwrap();
        let mut out = Vec::new();
        b.copy_to(&uri, &mut out).unwrap();
        assert_eq!(out, content);
        assert!(a.verify().unwrap().is_healthy());
    }
}

#[test]
fn a_compaction_whose_bucket_only_reference_vanished_publishes_no_record() {
    use agentrun_core::compaction::{Claim, Holds};
    let bucket = Bucket::file();
    let (_tmp, ha, hb) = homes();
    let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
    let content = lines(500, "gone");
    let record = capture(&a, &content);
    let uri = single_uri(&record);
    let digest = Digest::of(&content);
    let mut session = b.begin_retention().unwrap();
    let confirmed = session
        .confirm(vec![Claim {
            uri: uri.clone(),
            holds: Holds::Output(digest),
        }])
        .unwrap();
    assert_eq!(confirmed.len(), 1);
    // Removed behind the lease's back (as a GC that ignores leases would).
    let remote = a.remote.as_ref().unwrap();
    remote.delete(&remote.object_key(&digest)).unwrap();
    let err = session.finish().unwrap_err();
    assert!(
        matches!(
            &err,
            crate::RetainError::Store(crate::StoreError::KeptArtifactMissing { digest: d, .. })
                if *d == digest
        ),
        "{err:?}"
    );
    assert_eq!(b.records().unwrap(), vec![record.run_id]);
}

#[test]
fn a_compaction_leases_the_bucket_only_streams_of_a_manifest_its_spool_holds() {
    use agentrun_core::StreamName;
    use agentrun_core::compaction::{Claim, Holds};
    let bucket = Bucket::file();
    let (_tmp, ha, _) = homes();
    let a = bucket.machine(&ha);
    let out = StreamName::new("stdout").unwrap();
    let mut s = a
        .begin_capture(
            OutputDeclaration::named(["stdout"]).unwrap(),
            PreviewLimits::default(),
        )
        .unwrap();
    s.write_channel(&OutputChannel::Named(out), &lines(300, "named"))
        .unwrap();
    let record = s.finish(done()).unwrap();
    let uri = record.stream_uri(&record.streams()[0]);
    let stream = record.streams()[0].sha256;
    assert_ne!(uri.digest, stream, "a stream of a manifest");
    // The spool keeps the manifest; its stream is in the bucket only.
    std::fs::remove_file(a.layout.object(&stream)).unwrap();
    assert!(a.only_in_bucket(&stream) && !a.only_in_bucket(&uri.digest));
    let remote = a.remote.as_ref().unwrap();
    let leases = || -> Vec<_> { remote.list("leases/").unwrap() };
    // The publication's own lease (left to lapse) names the stream too: not counted.
    let before: Vec<_> = leases().into_iter().map(|m| m.location).collect();
    let mut session = a.begin_retention().unwrap();
    let confirmed = session
        .confirm(vec![Claim {
            uri,
            holds: Holds::Readable,
        }])
        .unwrap();
    assert_eq!(confirmed.len(), 1);
    // A lease names the stream from the moment it was confirmed.
    let leased: Vec<String> = leases()
        .into_iter()
        .filter(|meta| !before.contains(&meta.location))
        .flat_map(|meta| {
            let body = remote.get_all(&meta.location).unwrap().unwrap();
            serde_json::from_slice::<LeaseBody>(&body).unwrap().digests
        })
        .collect();
    assert!(leased.contains(&stream.to_string()), "{leased:?}");
    drop(session);
}

fn fresh_page(object: &crate::read::Object, offset: u64) -> Vec<u8> {
    object
        .page_for_tests(PageRequest::new(offset, 2000).unwrap())
        .unwrap()
        .bytes
}

#[test]
fn an_output_larger_than_one_put_goes_up_in_parts_and_reads_back_whole() {
    // Over the multipart threshold: uploaded in several parts, each with its SHA-256 in S3's
    // checksum headers, which the server accepts.
    let bucket = Bucket::s3();
    let (_tmp, ha, hb) = homes();
    let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
    let content = lines(800_000, "big");
    assert!(content.len() as u64 > crate::remote::MULTIPART_THRESHOLD + (2 << 20));
    let record = capture(&a, &content);
    let uri = single_uri(&record);
    let mut whole = Vec::new();
    assert_eq!(b.copy_to(&uri, &mut whole).unwrap(), content.len() as u64);
    assert!(whole == content, "the object read back differs");
    assert!(b.verify().unwrap().is_healthy());
    // `none` turns the checksum headers off (for a server that refuses them).
    let plain = bucket.machine_with(&ha.join("plain"), &[("aws_checksum_algorithm", "none")]);
    let other = lines(800_000, "plain");
    let record = capture(&plain, &other);
    let mut whole = Vec::new();
    b.copy_to(&single_uri(&record), &mut whole).unwrap();
    assert!(whole == other, "the object read back differs");
}

#[test]
fn a_damaged_spool_copy_never_replaces_a_sound_copy_in_the_bucket() {
    let bucket = Bucket::file();
    let (_tmp, ha, _) = homes();
    let a = bucket.machine(&ha);
    let content = lines(2_000, "sound");
    let digest = Digest::of(&content);
    capture(&a, &content);
    // Another spool holding the same output, one byte flipped on its disk.
    let spool = Store::open(ha.join("other")).unwrap();
    capture(&spool, &content);
    flip_on_disk(&spool.layout.object(&digest), 100);
    let remote = a.remote.as_ref().unwrap();
    // The bucket's copy is sound: it counts as the hit, and ours is not put over it.
    remote.publish_object(&spool.layout, &digest).unwrap();
    assert!(
        remote
            .upload_object(&spool.layout, &digest, Upload::Replace)
            .is_err()
    );
    let mut out = Vec::new();
    a.copy_to(&ArtifactUri::new(digest), &mut out).unwrap();
    assert!(out == content, "the bucket's copy was replaced");
    assert!(a.verify().unwrap().is_healthy());
}

/// Flips one byte of a spooled file (spool files are read-only for the owner).
fn flip_on_disk(path: &Path, at: usize) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 1;
    std::fs::write(path, &bytes).unwrap();
}

#[test]
fn a_large_spool_copy_damaged_on_disk_is_never_uploaded() {
    let bucket = Bucket::s3();
    let (_tmp, ha, _) = homes();
    let a = bucket.machine(&ha);
    let spool = Store::open(ha.join("spool")).unwrap();
    let content = lines(1_600_000, "rot");
    assert!(content.len() > 6 * crate::remote::PART_SIZE);
    let digest = Digest::of(&content);
    capture(&spool, &content);
    // In the last part: the parts before it are on their way when the damaged block is read.
    flip_on_disk(&spool.layout.object(&digest), content.len() - 1000);
    let remote = a.remote.as_ref().unwrap();
    let err = remote
        .upload_object(&spool.layout, &digest, Upload::New)
        .unwrap_err();
    assert!(err.to_string().contains("damaged on disk"), "{err}");
    assert!(remote.head(&remote.object_key(&digest)).unwrap().is_none());
    // The multipart upload was aborted, not left behind.
    let Bucket::S3 { name } = &bucket else {
        unreachable!()
    };
    let uploads = http(moto().port, "GET", &format!("/{name}?uploads")).unwrap();
    assert!(uploads.starts_with("HTTP/1.1 200"), "{uploads}");
    assert!(!uploads.contains("<UploadId>"), "{uploads}");
}

#[test]
fn a_damaged_spool_sidecar_never_replaces_a_sound_one() {
    for bucket in Bucket::both() {
        let (_tmp, ha, _) = homes();
        let a = bucket.machine(&ha);
        let content = lines(20_000, "sidecar");
        let digest = Digest::of(&content);
        capture(&a, &content);
        let spool = Store::open(ha.join("other")).unwrap();
        capture(&spool, &content);
        // A byte of an entry (the header is checked by every reader already).
        let idx = spool.layout.index(&digest);
        flip_on_disk(&idx, agentrun_core::index::HEADER_LEN + 20);
        let remote = a.remote.as_ref().unwrap();
        // The bucket's sound copy counts as the hit: the run publishes, nothing is put over it.
        let before = remote.get_all(&remote.index_key(&digest)).unwrap().unwrap();
        remote.publish_object(&spool.layout, &digest).unwrap();
        let after = remote.get_all(&remote.index_key(&digest)).unwrap().unwrap();
        assert!(before == after && after[..] != std::fs::read(&idx).unwrap()[..]);
        // Asked to upload it anyway: refused.
        let err = remote
            .upload_object(&spool.layout, &digest, Upload::Replace)
            .unwrap_err();
        assert!(err.to_string().contains("damaged on disk"), "{err}");
        assert!(a.verify().unwrap().is_healthy());
    }
}

#[test]
fn a_new_object_is_created_only_if_still_absent() {
    for bucket in Bucket::both() {
        let (_tmp, ha, _) = homes();
        let a = bucket.machine(&ha);
        let spool = Store::open(ha.join("spool")).unwrap();
        let content = lines(20_000, "race");
        let digest = Digest::of(&content);
        capture(&spool, &content);
        // Another publisher's copy lands between our look and our put (damaged here, so
        // that a put over it would show).
        let remote = a.remote.as_ref().unwrap();
        let mut theirs = content.clone();
        theirs[5] ^= 1;
        let key = remote.object_key(&digest);
        remote
            .put(&key, theirs.clone(), PutMode::Overwrite)
            .unwrap();
        let created = remote
            .upload_object(&spool.layout, &digest, Upload::New)
            .unwrap();
        assert!(
            !created,
            "a conditional put over an existing copy succeeded"
        );
        assert!(remote.get_all(&key).unwrap().unwrap()[..] == theirs[..]);
        // Publishing judges the copy that is there: damaged, so it is replaced.
        assert_eq!(remote.publish_object(&spool.layout, &digest).unwrap(), None);
        assert!(remote.get_all(&key).unwrap().unwrap()[..] == content[..]);
        assert!(a.verify().unwrap().is_healthy());
    }
}

#[test]
fn identical_output_on_two_machines_is_stored_once() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let content = lines(30_000, "same");
        let ra = capture(&a, &content);
        let rb = capture(&b, &content);
        assert_ne!(ra.run_id, rb.run_id);
        assert_eq!(ra.streams()[0].sha256, rb.streams()[0].sha256);
        assert_eq!(bucket_objects(&a).len(), 1, "{:?}", bucket_objects(&a));
        assert_eq!(a.records().unwrap().len(), 2);
        assert!(b.verify().unwrap().is_healthy());
    }
}

#[test]
fn a_flipped_byte_in_the_bucket_is_refused_and_a_damaged_copy_is_replaced() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let content = lines(20_000, "flip");
        let record = capture(&a, &content);
        let uri = single_uri(&record);
        let digest = uri.digest;
        let remote = a.remote.as_ref().unwrap();
        let mut damaged = content.clone();
        damaged[700_000] ^= 0x20;
        remote
            .put(&remote.object_key(&digest), damaged, PutMode::Overwrite)
            .unwrap();
        let deep = PageRequest::new(19_000, 100).unwrap();
        assert!(
            b.read_page(&uri, deep).is_ok(),
            "a page away from the damage reads"
        );
        let err = b
            .read_page(&uri, PageRequest::new(0, 2000).unwrap())
            .and_then(|_| {
                let mut out = Vec::new();
                b.copy_to(&uri, &mut out).map(|_| ())
            })
            .unwrap_err();
        assert!(matches!(err, ReadError::Corrupt { .. }), "{err:?}");
        // Reported as on the local store: the damaged block, and the hash.
        let report = b.verify().unwrap();
        let problems = report.problems.join("\n");
        assert_eq!(report.problems.len(), 2, "{problems}");
        let block = 700_000 / agentrun_core::index::BLOCK_SIZE;
        assert!(
            problems.contains(&format!(
                "artifact {digest}: block {block} does not match its checksum"
            )),
            "{problems}"
        );
        assert!(
            problems.contains(&format!("artifact {digest}: content hashes to")),
            "{problems}"
        );
        // The same output captured again replaces the damaged copy.
        capture(&b, &content);
        let mut whole = Vec::new();
        a.copy_to(&uri, &mut whole).unwrap();
        assert_eq!(whole, content);
        assert!(a.verify().unwrap().is_healthy());
    }
}

/// An hour ahead: every object counts as old, whatever the grace.
fn gc_later() -> GcOptions {
    GcOptions {
        grace: Duration::ZERO,
        now: SystemTime::now() + Duration::from_secs(3600),
        ..GcOptions::default()
    }
}

#[test]
fn gc_keeps_what_records_and_live_leases_name_and_collects_the_rest() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let kept = capture(&a, &lines(5_000, "kept"));
        // Two objects no record names: one a live lease names, one nothing names.
        let spool = Store::open(ha.join("other")).unwrap();
        let leased = capture(&spool, &lines(3_000, "leased")).streams()[0].sha256;
        let orphan = capture(&spool, &lines(3_000, "orphan")).streams()[0].sha256;
        let remote = a.remote.as_ref().unwrap();
        remote
            .upload_object(&spool.layout, &leased, Upload::Replace)
            .unwrap();
        remote
            .upload_object(&spool.layout, &orphan, Upload::Replace)
            .unwrap();
        let body = LeaseBody {
            expires_unix_ms: unix_ms(SystemTime::now() + Duration::from_secs(600)),
            digests: vec![leased.to_hex()],
            gc_started_unix_ms: None,
        };
        let lease = remote.lease_key("live");
        remote
            .put(
                &lease,
                serde_json::to_vec(&body).unwrap(),
                PutMode::Overwrite,
            )
            .unwrap();
        let expired = remote.lease_key("expired");
        let body = LeaseBody {
            expires_unix_ms: unix_ms(SystemTime::now() - Duration::from_secs(3600)),
            digests: vec![orphan.to_hex()],
            gc_started_unix_ms: None,
        };
        remote
            .put(
                &expired,
                serde_json::to_vec(&body).unwrap(),
                PutMode::Overwrite,
            )
            .unwrap();
        // Within the grace period nothing goes.
        let report = b.gc(&GcOptions::default()).unwrap();
        assert_eq!(report.objects_removed, 0);
        let report = b.gc(&gc_later()).unwrap();
        assert_eq!(report.objects_removed, 1, "{report:?}");
        let left: Vec<String> = bucket_objects(&a);
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left.iter().any(|k| k.ends_with(&leased.to_hex()[2..])));
        assert!(
            remote.head(&expired).unwrap().is_none(),
            "an expired lease is removed"
        );
        assert!(remote.head(&remote.index_key(&orphan)).unwrap().is_none());
        // The lease released: the leased object goes too; the record's stays.
        remote.delete(&lease).unwrap();
        assert_eq!(b.gc(&gc_later()).unwrap().objects_removed, 1);
        let mut out = Vec::new();
        b.copy_to(&single_uri(&kept), &mut out).unwrap();
        assert!(b.verify().unwrap().is_healthy());
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// GC on one machine, in a loop and counting every object as old, beside captures on
/// another: nothing a record names is ever lost. (Distinct outputs: a GC whose clock runs an
/// hour ahead is outside the protocol's clock assumption for deduplication hits.)
#[test]
fn gc_on_one_machine_beside_captures_on_another_loses_nothing() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let stop = Arc::new(AtomicBool::new(false));
        let collector = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut removed = 0;
                while !stop.load(Ordering::Relaxed) {
                    removed += b.gc(&gc_later()).unwrap().objects_removed;
                }
                removed
            })
        };
        let mut records = Vec::new();
        for i in 0..8 {
            records.push(capture(&a, &lines(2_000 + i * 500, &format!("run{i}"))));
        }
        stop.store(true, Ordering::Relaxed);
        let removed = collector.join().unwrap();
        assert_eq!(removed, 0, "gc removed objects a record names");
        for record in &records {
            let mut out = Vec::new();
            a.copy_to(&single_uri(record), &mut out).unwrap();
            assert_eq!(Digest::of(&out), record.streams()[0].sha256);
        }
        assert!(a.verify().unwrap().is_healthy());
    }
}

/// The recovery property on the object store: following every continuation from line 0
/// reproduces the stream byte for byte.
#[test]
fn following_continuations_reproduces_every_stream_on_the_object_store() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        let mut content = lines(7_000, "mixed");
        // A line longer than a page, then more lines, and no final newline.
        content.extend(vec![b'L'; 3 << 20]);
        content.push(b'\n');
        content.extend(lines(500, "after"));
        content.extend_from_slice(b"tail without newline");
        let record = capture(&a, &content);
        let uri = single_uri(&record);
        let mut got = Vec::new();
        let mut next = agentrun_core::Continuation::Line(0);
        // The record's own continuation starts where the preview ended; from line 0 the
        // whole stream is read.
        loop {
            next = match next {
                agentrun_core::Continuation::Line(line) => {
                    let page = b
                        .read_page(&uri, PageRequest::up_to(line, 2000).unwrap())
                        .unwrap();
                    got.extend_from_slice(&page.bytes);
                    page.continuation
                }
                agentrun_core::Continuation::Byte(offset) => {
                    let range = agentrun_core::ByteRange::new(offset, 1 << 20).unwrap();
                    let page = b.read_bytes(&uri, range).unwrap();
                    got.extend_from_slice(&page.bytes);
                    page.continuation()
                }
                _ => break,
            };
        }
        assert_eq!(got.len(), content.len());
        assert!(got == content, "the pages differ from the stream");
    }
}

/// In a child process: the store its parent named in `var` (`URL\nHOME`).
fn child_store(var: &str) -> Option<Store> {
    let spec = std::env::var_os(var)?.into_string().unwrap();
    let (url, home) = spec.split_once('\n').unwrap();
    Some(Store::open_url(url, home).unwrap())
}

/// A GC that listed the records before a publication wrote its record still counts that
/// publication's lease after the publisher stopped renewing it, so it never deletes an old
/// object the publication found as a deduplication hit.
#[test]
fn a_record_written_after_a_gc_listed_the_records_keeps_its_objects_from_that_gc() {
    for bucket in Bucket::both() {
        let (_tmp, ha, hb) = homes();
        let (a, b) = (bucket.machine(&ha), bucket.machine(&hb));
        // An object no record names (a crashed publisher's), old to the GC.
        let content = lines(3_000, "reused");
        let spool = Store::open(ha.join("other")).unwrap();
        let digest = capture(&spool, &content).streams()[0].sha256;
        a.remote
            .as_ref()
            .unwrap()
            .upload_object(&spool.layout, &digest, Upload::Replace)
            .unwrap();
        // While B's GC is between its record listing and its lease read, A publishes the
        // same output: a hit on that object, its record written, its lease left to lapse.
        let published = std::rc::Rc::new(std::cell::RefCell::new(None));
        {
            let (published, a, content) =
                (std::rc::Rc::clone(&published), a.clone(), content.clone());
            crate::fault::on_step(move |name| {
                let mut slot = published.borrow_mut();
                if name == "gc: after the records, before the writers" && slot.is_none() {
                    *slot = Some(capture(&a, &content));
                }
            });
        }
        let report = b.gc(&gc_later());
        crate::fault::clear_steps();
        let report = report.unwrap();
        let record = published
            .borrow_mut()
            .take()
            .expect("A published during the GC");
        assert_eq!(record.streams()[0].sha256, digest);
        assert_eq!(report.objects_removed, 0, "{report:?}");
        let mut out = Vec::new();
        b.copy_to(&single_uri(&record), &mut out).unwrap();
        assert_eq!(out, content);
        // A GC that starts now lists the record.
        assert_eq!(b.gc(&gc_later()).unwrap().objects_removed, 0);
        assert!(b.verify().unwrap().is_healthy());
    }
}

/// Verify and GC on a bucket are the local store's: strays are reported, a damaged record
/// stops GC, a missing sidecar or object is named.
#[test]
fn verify_and_gc_judge_a_bucket_as_they_judge_the_local_store() {
    for bucket in Bucket::both() {
        let (_tmp, ha, _) = homes();
        let a = bucket.machine(&ha);
        let remote = a.remote.as_ref().unwrap();
        let good = capture(&a, b"good\n");
        let gone = capture(&a, b"gone\n");
        let no_index = capture(&a, &lines(10, "no index"));
        remote
            .delete(&remote.object_key(&gone.streams()[0].sha256))
            .unwrap();
        remote
            .delete(&remote.index_key(&no_index.streams()[0].sha256))
            .unwrap();
        let put = |rel: &str, bytes: &[u8]| {
            remote
                .put(&remote.key(rel), bytes.to_vec(), PutMode::Overwrite)
                .unwrap();
        };
        put("objects/README", b"x");
        put("records/notes.txt", b"hello");
        put("records/0001-broken.json", b"{\"format\":");
        let report = a.verify().unwrap();
        let problems = report.problems.join("\n");
        for want in [
            "objects/README is not part of the store".to_owned(),
            "records/notes.txt is not part of the store".to_owned(),
            "records/0001-broken.json is corrupt".to_owned(),
            format!("artifact {}, which is missing", gone.streams()[0].sha256),
            format!(
                "the line index of artifact {} is missing or corrupt: the index sidecar is \
                 missing",
                no_index.streams()[0].sha256
            ),
        ] {
            assert!(problems.contains(&want), "{want:?} not in:\n{problems}");
        }
        assert_eq!(report.problems.len(), 5, "{problems}");
        assert_eq!(report.records_checked, 4);
        // A record in doubt: GC removes nothing, and says which.
        let err = a.gc(&gc_later()).unwrap_err().to_string();
        assert!(err.starts_with("gc removed nothing: "), "{err}");
        assert!(err.contains("records/0001-broken.json"), "{err}");
        put(
            "records/0001-broken.json",
            br#"{"format": "agentrun.record.v9"}"#,
        );
        let err = a.gc(&gc_later()).unwrap_err();
        assert!(
            matches!(&err, crate::StoreError::GcRecordFormatUnknown { format, .. }
                if format == "agentrun.record.v9"),
            "{err:?}"
        );
        remote.delete(&remote.record_key("0001-broken")).unwrap();
        a.gc(&gc_later()).unwrap();
        let mut out = Vec::new();
        a.copy_to(&single_uri(&good), &mut out).unwrap();
        assert_eq!(out, b"good\n");
    }
}

/// The child of the profile test: opens the bucket with nothing but a profile (and
/// `AWS_ALLOW_HTTP`) in its environment, and captures.
const PROFILE_CHILD_VAR: &str = "AGENTRUN_FS_PROFILE_CHILD";

#[test]
fn profile_child() {
    let Some(store) = child_store(PROFILE_CHILD_VAR) else {
        return;
    };
    capture(&store, b"published with a profile\n");
}

/// A named profile in `~/.aws/credentials` and `~/.aws/config` gives the keys, region and
/// endpoint of an `s3://` store (object_store itself reads only the environment).
#[test]
fn an_aws_profile_gives_the_keys_region_and_endpoint() {
    let bucket = Bucket::s3();
    let (url, _) = bucket.url_and_env();
    let (tmp, ha, hb) = homes();
    let home = tmp.path().join("user");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n\
         [moto]\naws_access_key_id = test\naws_secret_access_key = test\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".aws/config"),
        format!(
            "[profile moto]\nregion = us-east-1\ns3 =\n  endpoint_url = http://127.0.0.1:{}\n",
            moto().port
        ),
    )
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(&exe);
    child
        .args([
            "--exact",
            "remote_tests::profile_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROFILE_CHILD_VAR, format!("{url}\n{}", ha.display()))
        .env("HOME", &home)
        .env("AWS_PROFILE", "moto")
        .env("AWS_ALLOW_HTTP", "true");
    for (name, _) in std::env::vars() {
        if name.starts_with("AWS_") && !["AWS_PROFILE", "AWS_ALLOW_HTTP"].contains(&name.as_str()) {
            child.env_remove(name);
        }
    }
    let out = child.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = bucket.machine(&hb);
    let ids = b.records().unwrap();
    assert_eq!(ids.len(), 1);
    let mut bytes = Vec::new();
    b.copy_to(&single_uri(&b.record(&ids[0]).unwrap()), &mut bytes)
        .unwrap();
    assert_eq!(bytes, b"published with a profile\n");
}
