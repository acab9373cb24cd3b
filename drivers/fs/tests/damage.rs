//! The store-damage suite: for each kind of damage, `read`, `verify`, `gc` and a fresh capture
//! of the same content behave as documented. Reads never return wrong bytes, a capture never
//! publishes a reference to bytes that do not read back, verify reports the damage precisely
//! and keeps going, and nothing panics.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentrun_core::{Digest, ResultRecord};
use agentrun_fs::Store;
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
