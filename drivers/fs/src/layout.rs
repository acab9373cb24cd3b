//! Where everything lives under the store root, and the owner-only rule for it.
//!
//! ```text
//! <root>/gc.lock                      shared by publishers, exclusive for GC
//! <root>/objects/<2 hex>/<62 hex>     artifact bytes, named by their SHA-256
//! <root>/objects/<2 hex>/<62 hex>.idx its line/block index (agentrun_core::index)
//! <root>/captures/<run_id>/           one live capture: lock, s<i>, s<i>.idx, protect
//! <root>/records/<run_id>.json        terminal result records: the GC roots
//! <root>/runtime/                     reserved for per-run runtime directories
//! <root>/outbox/<run_id>              of a shared store's spool: the bucket a record
//!                                     waits for (crate::outbox)
//! ```

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use agentrun_core::Digest;

use crate::error::{IoContext, IoError};
use crate::store::StoreError;

/// Mode of every directory the store creates.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file the store creates.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Suffix of an index sidecar.
pub(crate) const INDEX_SUFFIX: &str = ".idx";
/// Suffix of a temporary file awaiting its atomic rename.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";
/// Suffix of a record file.
pub(crate) const RECORD_SUFFIX: &str = ".json";

/// Longest accepted run id.
const MAX_RUN_ID_LEN: usize = 128;

/// Paths under one store root.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: PathBuf,
    /// Shared by the clones of this layout (one store's handles in this process).
    synced: std::sync::Arc<crate::atomic::SyncedObjects>,
}

impl Layout {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            synced: Default::default(),
        }
    }

    /// The objects whose directory entry this process knows to be durable.
    pub(crate) fn synced_objects(&self) -> &crate::atomic::SyncedObjects {
        &self.synced
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn gc_lock(&self) -> PathBuf {
        self.root.join("gc.lock")
    }

    pub(crate) fn objects(&self) -> PathBuf {
        self.root.join("objects")
    }

    pub(crate) fn captures(&self) -> PathBuf {
        self.root.join("captures")
    }

    pub(crate) fn records(&self) -> PathBuf {
        self.root.join("records")
    }

    pub(crate) fn runtime(&self) -> PathBuf {
        self.root.join("runtime")
    }

    /// Of a shared store's spool: the marks saying which bucket each record waits for
    /// (created with the first one).
    pub(crate) fn outbox(&self) -> PathBuf {
        self.root.join("outbox")
    }

    pub(crate) fn outbox_entry(&self, run_id: &str) -> PathBuf {
        self.outbox().join(run_id)
    }

    /// The directories [`crate::Store::open`] creates and checks, root first.
    pub(crate) fn directories(&self) -> [PathBuf; 5] {
        [
            self.root.clone(),
            self.objects(),
            self.captures(),
            self.records(),
            self.runtime(),
        ]
    }

    /// `objects/<2 hex>`: the fan-out directory of `digest`.
    pub(crate) fn object_dir(&self, digest: &Digest) -> PathBuf {
        self.objects().join(&digest.to_hex()[..2])
    }

    /// `objects/<2 hex>/<62 hex>`.
    pub(crate) fn object(&self, digest: &Digest) -> PathBuf {
        self.object_dir(digest).join(&digest.to_hex()[2..])
    }

    /// `objects/<2 hex>/<62 hex>.idx`.
    pub(crate) fn index(&self, digest: &Digest) -> PathBuf {
        self.object_dir(digest)
            .join(format!("{}{INDEX_SUFFIX}", &digest.to_hex()[2..]))
    }

    pub(crate) fn capture(&self, run_id: &str) -> PathBuf {
        self.captures().join(run_id)
    }

    pub(crate) fn record(&self, run_id: &str) -> PathBuf {
        self.records().join(format!("{run_id}{RECORD_SUFFIX}"))
    }
}

/// The digest named by `objects/<dir>/<file>`, if the pair is an object name.
pub(crate) fn parse_object_name(dir: &str, file: &str) -> Option<Digest> {
    if dir.len() != 2 || file.len() != 62 {
        return None;
    }
    Digest::from_hex(&format!("{dir}{file}")).ok()
}

/// Creates `path` as an owner-only directory; an existing directory is left as it is (and
/// checked separately by [`check_private_dir`]).
pub(crate) fn create_private_dir(path: &Path) -> Result<(), IoError> {
    match DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => {
            // The umask may have removed owner bits; set the mode explicitly.
            fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(DIR_MODE))
                .at("set the mode of", path)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(IoError::at("create directory", path, e)),
    }
}

/// Refuses a directory that another user owns or that group/others may access: artifacts
/// hold tool output, which routinely contains secrets.
pub(crate) fn check_private_dir(path: &Path) -> Result<(), StoreError> {
    let meta = fs::metadata(path).at("inspect", path)?;
    if !meta.is_dir() {
        return Err(StoreError::NotADirectory {
            path: path.to_owned(),
        });
    }
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(StoreError::ForeignOwner {
            path: path.to_owned(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(StoreError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Options creating a new owner-only file (fails if it exists).
pub(crate) fn new_private_file() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create_new(true).mode(FILE_MODE);
    o
}

/// Opens (creating if needed) an owner-only file for appending.
///
/// `O_NONBLOCK | O_NOFOLLOW`: a FIFO in its place (which a plain open for writing would wait
/// on for a reader) or a link is refused by type, like anything else but a regular file.
pub(crate) fn append_private_file(path: &Path) -> Result<File, IoError> {
    use rustix::fs::OFlags;
    let refused = |what: &str| {
        let e = io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file"),
        );
        IoError::at("open", path, e)
    };
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags((OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY).bits() as i32)
        .open(path)
        .map_err(|e| match fs::symlink_metadata(path) {
            // ENXIO: a FIFO without a reader, or a socket; ELOOP: a link.
            Ok(meta) if !meta.is_file() => refused(crate::special::describe(meta.file_type())),
            _ => IoError::at("open", path, e),
        })?;
    let meta = file.metadata().at("inspect", path)?;
    if !meta.is_file() {
        return Err(refused(crate::special::describe(meta.file_type())));
    }
    Ok(file)
}

/// `true` if `path` exists (without following a final symlink).
pub(crate) fn exists(path: &Path) -> Result<bool, IoError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(IoError::at("inspect", path, e)),
    }
}

static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh run id, `<unix-millis>-<pid>-<counter>`, zero-padded so ids sort by start time.
/// Unique within the process by the counter; across processes by the pid (the caller still
/// creates the capture directory exclusively and retries on a collision).
pub(crate) fn new_run_id() -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{millis:013}-{:07}-{n:06}", std::process::id())
}

/// Whether `id` may name a record: it becomes a file name, so no separators or traversal.
pub(crate) fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_RUN_ID_LEN
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_paths_fan_out_and_parse_back() {
        let layout = Layout::new(PathBuf::from("/s"));
        let d = Digest::of(b"abc");
        let hex = d.to_hex();
        assert_eq!(
            layout.object(&d),
            PathBuf::from(format!("/s/objects/{}/{}", &hex[..2], &hex[2..]))
        );
        assert!(layout.index(&d).to_string_lossy().ends_with(".idx"));
        assert_eq!(parse_object_name(&hex[..2], &hex[2..]), Some(d));
        assert_eq!(
            parse_object_name(&hex[..2], &format!("{}.idx", &hex[2..])),
            None
        );
        assert_eq!(parse_object_name("xx", &hex[2..]), None);
    }

    #[test]
    fn run_ids_are_unique_sortable_and_valid() {
        let a = new_run_id();
        let b = new_run_id();
        assert_ne!(a, b);
        assert!(a < b, "{a} < {b}");
        assert!(valid_run_id(&a));
        for bad in ["", "..", ".x", "a/b", "a b", &"x".repeat(129)] {
            assert!(!valid_run_id(bad), "{bad:?}");
        }
    }
}
