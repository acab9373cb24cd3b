//! The one store interface: the operations a home of objects and records offers, whether it
//! is the local directory ([`LocalBackend`]) or a bucket
//! ([`RemoteBackend`](crate::remote::RemoteBackend)), and everything written once against
//! them: reads ([`Store::open_object`](crate::Store)), records and runs, GC
//! ([`crate::gc::collect`]) and verify ([`crate::verify::check`]).
//!
//! The interface is at the level of the store's own entries (objects and their index sidecars
//! by digest, records by run id), not of raw keys: what a local directory can hold besides
//! them (a directory or a FIFO at a record's name, a file others may read, a stray file in
//! `objects/`) is the local backend's to describe, and the shared logic reports or refuses it
//! the same way wherever it was found.
//!
//! How writers are kept safe from GC differs, and is the one thing the logic asks the backend
//! about ([`Writers`]): on the local store GC holds `gc.lock` exclusive, so no publication is
//! half done while it runs and what live captures protect is read once; on a bucket there is
//! no lock, publishers hold leases, and GC re-reads them before it deletes (see
//! [`crate::remote`]).

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use agentrun_core::Digest;

use crate::error::{IoContext, IoError};
use crate::gc::{CaptureState, GcOptions, GcReport, describe_type, probe_capture};
use crate::layout::{self, Layout, TEMP_SUFFIX};
use crate::lock::GcLock;
use crate::read::{Object, ReadError, read_small};
use crate::record_file;
use crate::special::{Links, open_regular};
use crate::store::{Store, StoreError, record_id};

/// An entry's size and modification time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub(crate) len: u64,
    pub(crate) modified: SystemTime,
}

/// Every object and index sidecar a backend holds, and what does not belong there.
#[derive(Debug, Default)]
pub(crate) struct ObjectScan {
    pub(crate) objects: std::collections::HashMap<Digest, Stat>,
    /// Index sidecars, by the digest they are named after.
    pub(crate) indexes: std::collections::HashMap<Digest, Stat>,
    /// Entries that are neither (or not regular files, or files others may read), as
    /// messages: GC leaves them alone (it removes only what it understands); verify reports
    /// them.
    pub(crate) strays: Vec<String>,
}

/// What a name in the records' place is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecordName {
    /// `<run id>.json`.
    Record(String),
    /// A record write interrupted before its rename (local store only).
    Temp,
    /// Anything else: not the store's.
    Other,
}

/// One entry listed in the records' place.
#[derive(Debug, Clone)]
pub(crate) struct RecordEntry {
    pub(crate) name: RecordName,
    /// Where it is, for messages (a path, or the store URL and key).
    pub(crate) location: PathBuf,
    /// What the listing said about it, when the listing says (a bucket's does).
    pub(crate) listed: Option<EntryStat>,
}

/// What an entry in the records' place is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryStat {
    /// `Some("a directory")`, … when it is not a regular file.
    pub(crate) not_a_file: Option<&'static str>,
    pub(crate) modified: SystemTime,
}

/// A record's bytes as stored (at most `MAX_RECORD_BYTES`: a larger one is refused with
/// [`StoreError::RecordTooLarge`] unread).
#[derive(Debug)]
pub(crate) struct StoredRecord {
    pub(crate) bytes: Vec<u8>,
    /// When it was written.
    pub(crate) modified: SystemTime,
    /// Its permission bits when group or others may access it (local store only).
    pub(crate) loose_mode: Option<u32>,
}

/// How writers are kept safe from a GC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writers {
    /// GC holds every writer off while it runs ([`Backend::gc_guard`]): what live writers
    /// protect is read once, and an index without its object is a crash's leftover.
    Excluded,
    /// Writers publish while GC runs, each under a lease; GC re-reads the leases whenever its
    /// last read is older than `window` before a delete, and an index without its object may
    /// be a publication half done (it goes only once past the grace and unleased).
    Leased {
        /// Most a lease read may be old when GC deletes.
        window: Duration,
    },
}

/// The operations the shared logic needs from a home of objects and records.
pub(crate) trait Backend {
    /// Taken at the start of a GC and held for its whole run (the local store: `gc.lock`
    /// exclusive; a bucket: the GC's own lease, unless `dry_run`).
    fn gc_guard(&self, dry_run: bool) -> Result<Option<GcLock>, StoreError>;
    /// Held for a whole verify (the local store: `gc.lock` shared: publishers continue, GC
    /// waits).
    fn verify_guard(&self) -> Result<Option<GcLock>, StoreError>;
    /// How writers are kept safe from GC.
    fn writers_model(&self) -> Writers;
    /// The smallest grace a GC may use here (a smaller one is raised to it).
    fn min_grace(&self) -> Duration;

    /// Lists every object and index.
    fn scan_objects(&self) -> Result<ObjectScan, StoreError>;
    /// Where an object is, for messages.
    fn object_location(&self, digest: &Digest) -> PathBuf;
    /// Opens an object for verified reads.
    fn open_object(&self, digest: &Digest) -> Result<Object, ReadError>;
    /// Opens an object for verify: its index fetched fresh (a cached copy must not hide
    /// damage), and its length checked against `listed_len` (what the scan saw).
    fn open_checked(&self, digest: &Digest, listed_len: u64) -> Result<Object, ReadError>;
    /// The object's bytes from the start, streamed (bounded memory), without its index;
    /// `None` when it is gone. `listed_len` is what the scan saw.
    fn open_raw(&self, digest: &Digest, listed_len: u64) -> io::Result<Option<Box<dyn Read + '_>>>;
    /// Whether the object is there now.
    fn object_exists(&self, digest: &Digest) -> Result<bool, StoreError>;
    /// A small object whole, without its index, for following manifests: `None` when it is
    /// larger than [`MAX_MANIFEST_BYTES`](crate::MAX_MANIFEST_BYTES) or cannot root anything.
    fn read_small(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError>;
    /// Removes an object (done before its index: no object is ever without its index).
    fn delete_object(&self, digest: &Digest) -> Result<(), StoreError>;
    /// Removes an index sidecar.
    fn delete_index(&self, digest: &Digest) -> Result<(), StoreError>;

    /// Lists the records' place, in any order.
    fn list_records(&self) -> Result<Vec<RecordEntry>, StoreError>;
    /// Where run `run_id`'s record is, for messages.
    fn record_location(&self, run_id: &str) -> PathBuf;
    /// What an entry listed in the records' place is now.
    fn stat_record(&self, entry: &RecordEntry) -> io::Result<EntryStat>;
    /// Run `run_id`'s record, bounded; `None` when there is none.
    fn read_record(&self, run_id: &str) -> Result<Option<StoredRecord>, StoreError>;
    /// Removes an entry of the records' place (an expired record, a temporary leftover).
    fn delete_record_entry(&self, entry: &RecordEntry) -> Result<(), StoreError>;
    /// Whether run `run_id`'s record is a spooled run still waiting for its bucket, which no
    /// retention expires (no bucket holds it yet). Only a local spool has such records.
    fn awaits_publication(&self, run_id: &str) -> bool;

    /// The digests live writers protect; dead writers' leftovers are cleared on the way (the
    /// local store: dead capture and result-sink directories; a bucket: expired leases),
    /// counted in `report`, unless `options.dry_run`.
    fn writers(
        &self,
        options: &GcOptions,
        report: &mut GcReport,
    ) -> Result<HashSet<Digest>, StoreError>;
}

impl Store {
    /// Runs `f` against where this store keeps its objects and records: the bucket of a
    /// shared store, else the local root.
    pub(crate) fn with_backend<T>(&self, f: impl FnOnce(&dyn Backend) -> T) -> T {
        match &self.remote {
            Some(remote) => f(&crate::remote::RemoteBackend::new(remote)),
            None => f(&LocalBackend(&self.layout)),
        }
    }
}

/// The local store: a directory (see the crate documentation for its layout and crash
/// safety).
pub(crate) struct LocalBackend<'a>(pub(crate) &'a Layout);

/// Removes a file, treating "already gone" as success.
fn remove_file(path: &std::path::Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(IoError::at("remove", path, e).into()),
        _ => Ok(()),
    }
}

impl Backend for LocalBackend<'_> {
    fn gc_guard(&self, _dry_run: bool) -> Result<Option<GcLock>, StoreError> {
        Ok(Some(GcLock::exclusive(self.0)?))
    }

    fn verify_guard(&self) -> Result<Option<GcLock>, StoreError> {
        Ok(Some(GcLock::shared(self.0)?))
    }

    fn writers_model(&self) -> Writers {
        Writers::Excluded
    }

    fn min_grace(&self) -> Duration {
        Duration::ZERO
    }

    fn scan_objects(&self) -> Result<ObjectScan, StoreError> {
        Ok(crate::gc::scan_objects(self.0)?)
    }

    fn object_location(&self, digest: &Digest) -> PathBuf {
        self.0.object(digest)
    }

    fn open_object(&self, digest: &Digest) -> Result<Object, ReadError> {
        Object::open(self.0, digest)
    }

    fn open_checked(&self, digest: &Digest, _listed_len: u64) -> Result<Object, ReadError> {
        // Opening checks the index against the file's own length.
        Object::open(self.0, digest)
    }

    fn open_raw(
        &self,
        digest: &Digest,
        _listed_len: u64,
    ) -> io::Result<Option<Box<dyn Read + '_>>> {
        // Listed as a regular file, but it may have been swapped since: never wait on a FIFO.
        match open_regular(&self.0.object(digest), Links::Refuse).map_err(crate::special::into_io) {
            Ok((f, _)) => Ok(Some(Box::new(f))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn object_exists(&self, digest: &Digest) -> Result<bool, StoreError> {
        Ok(layout::exists(&self.0.object(digest))?)
    }

    fn read_small(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        // An unreadable object cannot root anything; it is kept itself (GC reached it).
        Ok(read_small(&self.0.object(digest)).ok().flatten())
    }

    fn delete_object(&self, digest: &Digest) -> Result<(), StoreError> {
        remove_file(&self.0.object(digest))
    }

    fn delete_index(&self, digest: &Digest) -> Result<(), StoreError> {
        remove_file(&self.0.index(digest))
    }

    fn list_records(&self) -> Result<Vec<RecordEntry>, StoreError> {
        let dir = self.0.records();
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).at("list", &dir)? {
            let entry = entry.at("list", &dir)?;
            let file_name = entry.file_name();
            let name = match record_id(&file_name) {
                Some(id) => RecordName::Record(id),
                // A record write interrupted before its rename.
                None if file_name.to_str().is_some_and(|n| n.ends_with(TEMP_SUFFIX)) => {
                    RecordName::Temp
                }
                None => RecordName::Other,
            };
            out.push(RecordEntry {
                name,
                location: entry.path(),
                listed: None,
            });
        }
        Ok(out)
    }

    fn record_location(&self, run_id: &str) -> PathBuf {
        self.0.record(run_id)
    }

    fn stat_record(&self, entry: &RecordEntry) -> io::Result<EntryStat> {
        let meta = fs::symlink_metadata(&entry.location)?;
        Ok(EntryStat {
            not_a_file: (!meta.is_file()).then(|| describe_type(&meta)),
            modified: meta.modified()?,
        })
    }

    fn read_record(&self, run_id: &str) -> Result<Option<StoredRecord>, StoreError> {
        let path = self.0.record(run_id);
        let file = match record_file::read(&path) {
            Ok(file) => file,
            Err(e) if record_file::is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let modified = file
            .meta
            .modified()
            .at("read the modification time of", &path)?;
        let mode = file.meta.permissions().mode() & 0o7777;
        Ok(Some(StoredRecord {
            bytes: file.bytes,
            modified,
            loose_mode: (mode & 0o077 != 0).then_some(mode),
        }))
    }

    fn delete_record_entry(&self, entry: &RecordEntry) -> Result<(), StoreError> {
        remove_file(&entry.location)
    }

    fn awaits_publication(&self, run_id: &str) -> bool {
        // A damaged mark may still be one: the run is kept, not guessed away.
        !matches!(crate::outbox::destination(self.0, run_id), Ok(None))
    }

    fn writers(
        &self,
        options: &GcOptions,
        report: &mut GcReport,
    ) -> Result<HashSet<Digest>, StoreError> {
        let layout = self.0;
        let captures = layout.captures();
        let mut protected = HashSet::new();
        let mut live = HashSet::new();
        for entry in fs::read_dir(&captures).at("list", &captures)? {
            let entry = entry.at("list", &captures)?;
            let dir = entry.path();
            // A run that finishes removes its capture directory without the GC lock, so the
            // directory may vanish at any step here: that is a finished run, not an error.
            match fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(IoError::at("inspect", &dir, e).into()),
            }
            match probe_capture(&dir)? {
                CaptureState::Live(digests) => {
                    protected.extend(digests);
                    live.insert(entry.file_name());
                }
                CaptureState::Dead(lock) => {
                    let removed = if options.dry_run {
                        true
                    } else {
                        match fs::remove_dir_all(&dir) {
                            Ok(()) => true,
                            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                            Err(e) => {
                                return Err(IoError::at("remove the dead capture", &dir, e).into());
                            }
                        }
                    };
                    report.captures_removed += u64::from(removed);
                    drop(lock);
                }
            }
        }
        // A run creates its sink directory after its capture and removes it before finishing
        // the capture, so a sink directory without a live capture belongs to a dead run.
        let runtime = layout.runtime();
        for entry in fs::read_dir(&runtime).at("list", &runtime)? {
            let entry = entry.at("list", &runtime)?;
            if live.contains(&entry.file_name()) {
                continue;
            }
            let dir = entry.path();
            report.runtime_dirs_removed += 1;
            if !options.dry_run {
                match fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(
                            IoError::at("remove the dead result-sink directory", &dir, e).into(),
                        );
                    }
                    _ => {}
                }
            }
        }
        Ok(protected)
    }
}
