//! The store-damage suite: for each kind of damage, `read`, `verify`, `gc` and a fresh capture
//! of the same content behave as documented. Reads never return wrong bytes, a capture never
//! publishes a reference to bytes that do not read back, verify reports the damage precisely
//! and keeps going, and nothing panics.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentrun_core::{Digest, ResultRecord};
use agentrun_fs::{GcOptions, Store};
use common::*;

/// One way a stored object can be damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    TruncatedObject,
    FlippedObjectByte,
    FlippedIndexByte,
    TruncatedIndex,
    MissingIndex,
    DirectoryAtObject,
    DirectoryAtIndex,
    SymlinkAtObject,
    ObjectReadableByOthers,
    IndexReadableByOthers,
}

const ALL: [Damage; 10] = [
    Damage::TruncatedObject,
    Damage::FlippedObjectByte,
    Damage::FlippedIndexByte,
    Damage::TruncatedIndex,
    Damage::MissingIndex,
    Damage::DirectoryAtObject,
    Damage::DirectoryAtIndex,
    Damage::SymlinkAtObject,
    Damage::ObjectReadableByOthers,
    Damage::IndexReadableByOthers,
];

impl Damage {
    fn apply(self, store: &Store, digest: &Digest) {
        let object = object_path(store, digest);
        let index = index_path(store, digest);
        let truncate = |path: &Path, len: u64| {
            fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(len)
                .unwrap()
        };
        let replace_with_dir = |path: &Path| {
            fs::remove_file(path).unwrap();
            fs::create_dir(path).unwrap();
            fs::write(path.join("junk"), b"junk").unwrap();
        };
        match self {
            Damage::TruncatedObject => truncate(&object, 1000),
            Damage::FlippedObjectByte => flip(&object, 70_001, 0x01),
            Damage::FlippedIndexByte => flip(&index, 90, 0x01),
            Damage::TruncatedIndex => truncate(&index, 50),
            Damage::MissingIndex => fs::remove_file(&index).unwrap(),
            Damage::DirectoryAtObject => replace_with_dir(&object),
            Damage::DirectoryAtIndex => replace_with_dir(&index),
            Damage::SymlinkAtObject => {
                // A link to a file with the very same bytes: still not the store's own file.
                let elsewhere = store.root().join("elsewhere");
                fs::copy(&object, &elsewhere).unwrap();
                fs::remove_file(&object).unwrap();
                std::os::unix::fs::symlink(&elsewhere, &object).unwrap();
            }
            Damage::ObjectReadableByOthers => {
                fs::set_permissions(&object, fs::Permissions::from_mode(0o644)).unwrap()
            }
            Damage::IndexReadableByOthers => {
                fs::set_permissions(&index, fs::Permissions::from_mode(0o644)).unwrap()
            }
        }
    }
}

/// Content spanning several index blocks.
fn content() -> Vec<u8> {
    lines(20_000)
}

fn read_whole(store: &Store, record: &ResultRecord) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    store
        .copy_to(&record.output_uri(), &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

#[test]
fn a_fresh_capture_of_damaged_content_replaces_the_stored_copy() {
    for damage in ALL {
        let (_tmp, store) = store();
        let content = content();
        let digest = Digest::of(&content);
        capture_single(&store, &content, 10_000);
        damage.apply(&store, &digest);

        let again = capture_single(&store, &content, 10_000);
        // The new run's reference reads back, in pages and whole, byte for byte.
        assert_eq!(
            read_whole(&store, &again).as_deref(),
            Ok(&content[..]),
            "{damage:?}"
        );
        assert_eq!(
            read_all_pages(&store, &again.output_uri(), 2000).unwrap(),
            content,
            "{damage:?}"
        );
        let report = store.verify().unwrap();
        assert!(report.is_healthy(), "{damage:?}: {:?}", report.problems);
    }
}

#[test]
fn reads_never_return_wrong_bytes_and_verify_names_each_damage() {
    for damage in ALL {
        let (_tmp, store) = store();
        let content = content();
        let digest = Digest::of(&content);
        let record = capture_single(&store, &content, 10_000);
        damage.apply(&store, &digest);

        // Whole reads and pages either fail or return the stored bytes exactly.
        match read_whole(&store, &record) {
            Ok(bytes) => assert_eq!(bytes, content, "{damage:?}"),
            Err(e) => assert!(e.contains(&digest.to_string()), "{damage:?}: {e}"),
        }
        let page = store.read_page(
            &record.output_uri(),
            agentrun_core::PageRequest::new(15_000, 100).unwrap(),
        );
        if let Ok(page) = page {
            let want = agentrun_core::page::extract_page(
                &content,
                agentrun_core::PageRequest::new(15_000, 100).unwrap(),
            );
            assert_eq!(Ok(page), want, "{damage:?}");
        }

        let report = store.verify().unwrap();
        let hex = digest.to_hex();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains(&hex) || p.contains(&hex[2..])),
            "{damage:?}: {:?}",
            report.problems
        );

        // GC keeps what the record references, damaged or not, and does not fail.
        let gc = store
            .gc(&GcOptions {
                grace: std::time::Duration::ZERO,
                ..GcOptions::default()
            })
            .unwrap();
        assert_eq!(gc.objects_removed, 0, "{damage:?}");
        assert_eq!(gc.records, 1, "{damage:?}");
    }
}

#[test]
fn a_truncated_object_is_reported_as_such_not_as_a_corrupt_index() {
    let (_tmp, store) = store();
    let content = content();
    let record = capture_single(&store, &content, 10_000);
    Damage::TruncatedObject.apply(&store, &Digest::of(&content));
    let err = read_whole(&store, &record).unwrap_err();
    assert!(err.contains("is corrupt"), "{err}");
    assert!(
        err.contains(&format!(
            "the object has 1000 bytes but its index records {}; the object was truncated",
            content.len()
        )),
        "{err}"
    );
    assert!(!err.contains("line index"), "{err}");
}

/// Entries in `records/` and `objects/` that are not the store's.
fn add_strays(store: &Store) {
    let root = store.root();
    fs::create_dir(root.join("records/0000-dir.json")).unwrap();
    fs::write(root.join("records/notes.txt"), b"hello").unwrap();
    fs::write(root.join("records/0001-broken.json"), b"{\"format\":").unwrap();
    fs::create_dir_all(root.join("objects/zz")).unwrap();
    fs::write(root.join("objects/README"), b"x").unwrap();
    let fan = root.join("objects/ab");
    fs::create_dir_all(&fan).unwrap();
    fs::write(fan.join("garbage"), b"x").unwrap();
}

#[test]
fn verify_reports_every_stray_entry_and_keeps_going() {
    let (_tmp, store) = store();
    let good = capture_single(&store, b"good\n", 1);
    let gone = capture_single(&store, b"gone\n", 1);
    fs::remove_file(object_path(&store, &Digest::of(b"gone\n"))).unwrap();
    let loose = store
        .root()
        .join("records")
        .join(format!("{}.json", good.run_id));
    fs::set_permissions(&loose, fs::Permissions::from_mode(0o644)).unwrap();
    add_strays(&store);

    let report = store.verify().unwrap();
    let problems = report.problems.join("\n");
    for want in [
        "0000-dir.json is a directory, not a record file".to_owned(),
        "notes.txt is not part of the store".to_owned(),
        "0001-broken.json is corrupt".to_owned(),
        "objects/zz is not part of the store".to_owned(),
        "objects/README is not part of the store".to_owned(),
        "objects/ab/garbage is not part of the store".to_owned(),
        format!("{}.json has mode 0644", good.run_id),
        // Found after the unreadable entries, which no longer stop the check.
        format!("artifact {}, which is missing", Digest::of(b"gone\n")),
    ] {
        assert!(problems.contains(&want), "{want:?} not in:\n{problems}");
    }
    assert_eq!(report.problems.len(), 8, "{problems}");
    assert_eq!(report.records_checked, 4);
    drop(gone);
}

#[test]
fn gc_removes_nothing_while_a_record_is_in_doubt_and_says_what_to_do() {
    let (_tmp, store) = store();
    capture_single(&store, b"kept\n", 1);
    add_strays(&store);
    let dead_capture = store.root().join("captures/dead");
    fs::create_dir(&dead_capture).unwrap();
    let options = GcOptions {
        grace: std::time::Duration::ZERO,
        ..GcOptions::default()
    };

    let err = store.gc(&options).unwrap_err().to_string();
    assert!(err.starts_with("gc removed nothing: "), "{err}");
    assert!(
        err.contains("0000-dir.json is a directory, not a record file"),
        "{err}"
    );
    assert!(err.contains("run `agentrun verify`"), "{err}");
    assert!(dead_capture.exists(), "nothing may be removed: {err}");

    fs::remove_dir(store.root().join("records/0000-dir.json")).unwrap();
    let err = store.gc(&options).unwrap_err().to_string();
    assert!(
        err.contains("0001-broken.json does not parse as a record"),
        "{err}"
    );
    fs::remove_file(store.root().join("records/0001-broken.json")).unwrap();

    // Stray names are not GC's to remove; with the records readable, GC runs.
    let report = store.gc(&options).unwrap();
    assert_eq!((report.records, report.captures_removed), (1, 1));
    assert!(store.root().join("records/notes.txt").exists());
    assert!(store.root().join("objects/ab/garbage").exists());
    assert_eq!(
        read_all_pages(&store, &uri(Digest::of(b"kept\n")), 10).unwrap(),
        b"kept\n"
    );
}
