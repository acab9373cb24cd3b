//! Garbage collection: mark from the roots, sweep what is unreachable and old.
//!
//! Roots are
//!
//! * the digests in `protect` of every capture directory whose lock is held (a live run);
//! * every artifact of every record in `records/`: its output and what it keeps (records
//!   older than [`GcOptions::expire_records`], when set, are removed first and root nothing).
//!   A record GC cannot read (larger than any record is, or unparseable), or whose format it
//!   does not know (a newer agentrun's, which may keep artifacts in fields this version
//!   ignores), stops GC before it removes anything;
//! * every object younger than the grace period (a publisher between rename and record, or a
//!   result a caller has not recorded yet, keeps its objects for that long).
//!
//! Manifests are followed transitively: an object that parses as a manifest roots its streams.
//! GC holds `gc.lock` exclusive throughout, so no capture is being published and no capture
//! directory is being created while it decides; it removes capture directories whose lock it
//! can take (their process is gone) and stray temporary files, and the result-sink directories
//! `runtime/<run_id>/` of runs whose capture is not live (a run removes its own; these are
//! left by a crash).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use agentrun_core::record::RecordParseError;
use agentrun_core::{Digest, Manifest, ResultRecord};
use serde::Serialize;

use crate::error::{IoContext, IoError};
use crate::layout::{self, INDEX_SUFFIX, Layout, TEMP_SUFFIX};
use crate::lock::GcLock;
use crate::read::read_small;
use crate::record_file;
use crate::special::{Links, open_regular};
use crate::store::{Store, StoreError, record_id};

/// How a GC runs.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Unreferenced objects younger than this are kept (default 1 hour).
    pub grace: Duration,
    /// Count what would be removed without removing anything.
    pub dry_run: bool,
    /// The current time, against which object ages are measured.
    pub now: SystemTime,
    /// Forget records older than this first (by modification time), so the output of old
    /// runs becomes collectable. `None` (the default) keeps every record: records are the
    /// roots, and nothing a record references is ever removed.
    pub expire_records: Option<Duration>,
}

impl Default for GcOptions {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(3600),
            dry_run: false,
            now: SystemTime::now(),
            expire_records: None,
        }
    }
}

/// What a GC did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Objects kept.
    pub objects_kept: u64,
    /// Of the objects kept, those no record references, kept because they are younger than
    /// the grace period.
    pub objects_in_grace: u64,
    /// Objects removed (with their index).
    pub objects_removed: u64,
    /// Bytes of removed objects and their indexes.
    pub bytes_removed: u64,
    /// Capture directories of dead runs removed.
    pub captures_removed: u64,
    /// Result-sink directories (`runtime/<run_id>/`) of dead runs removed.
    pub runtime_dirs_removed: u64,
    /// Records kept (the roots).
    pub records: u64,
    /// Records removed because they were older than `expire_records`.
    pub records_expired: u64,
}

/// One object found in `objects/`.
#[derive(Debug, Clone)]
pub(crate) struct ObjectEntry {
    pub(crate) path: PathBuf,
    pub(crate) len: u64,
    pub(crate) mtime: SystemTime,
}

/// Everything in `objects/`.
#[derive(Debug, Default)]
pub(crate) struct ObjectScan {
    pub(crate) objects: HashMap<Digest, ObjectEntry>,
    /// Index sidecars, by the digest they are named after.
    pub(crate) indexes: HashMap<Digest, (PathBuf, u64)>,
    /// What does not belong: entries that are neither objects nor indexes, object or index
    /// names held by something other than a regular file, files group or others may access.
    /// GC leaves them alone (it removes only what it understands); verify reports them.
    pub(crate) strays: Vec<String>,
}

/// Lists every object and index under `objects/`.
pub(crate) fn scan_objects(layout: &Layout) -> Result<ObjectScan, IoError> {
    let mut scan = ObjectScan::default();
    let objects = layout.objects();
    for fan in fs::read_dir(&objects).at("list", &objects)? {
        let fan = fan.at("list", &objects)?;
        let fan_path = fan.path();
        let fan_name = fan.file_name().to_str().map(str::to_owned);
        let is_dir = fan.file_type().at("inspect", &fan_path)?.is_dir();
        let Some(fan_name) = fan_name.filter(|n| is_dir && is_fan_name(n)) else {
            scan.strays.push(format!(
                "{} is not part of the store (objects/ holds only directories named by two hex \
                 digits); move it away",
                fan_path.display()
            ));
            continue;
        };
        for entry in fs::read_dir(&fan_path).at("list", &fan_path)? {
            let entry = entry.at("list", &fan_path)?;
            let path = entry.path();
            let name = entry.file_name().to_str().map(str::to_owned);
            let named = name
                .as_deref()
                .and_then(|name| match name.strip_suffix(INDEX_SUFFIX) {
                    Some(stem) => layout::parse_object_name(&fan_name, stem).map(|d| (d, true)),
                    None => layout::parse_object_name(&fan_name, name).map(|d| (d, false)),
                });
            let Some((digest, is_index)) = named else {
                scan.strays.push(format!(
                    "{} is not part of the store (not an object or index name); move it away",
                    path.display()
                ));
                continue;
            };
            // Not following a symlink: the store's files are its own, never links.
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(IoError::at("inspect", &path, e)),
            };
            if !meta.is_file() {
                scan.strays.push(format!(
                    "{} is {}, not a regular file; a run of the same output replaces it, or \
                     move it away",
                    path.display(),
                    describe_type(&meta)
                ));
                continue;
            }
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                scan.strays.push(format!(
                    "{} has mode {mode:04o}; store files must be owner-only: run chmod 600 {}",
                    path.display(),
                    path.display()
                ));
            }
            if is_index {
                scan.indexes.insert(digest, (path, meta.len()));
            } else {
                let mtime = meta.modified().at("inspect", &path)?;
                scan.objects.insert(
                    digest,
                    ObjectEntry {
                        path,
                        len: meta.len(),
                        mtime,
                    },
                );
            }
        }
    }
    Ok(scan)
}

/// Whether `name` names a fan-out directory: two lowercase hex digits.
fn is_fan_name(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// "a directory", "a symbolic link", "a FIFO (named pipe)", … for messages.
pub(crate) fn describe_type(meta: &fs::Metadata) -> &'static str {
    crate::special::describe(meta.file_type())
}

/// Whether a capture directory belongs to a running capture.
enum CaptureState {
    /// Its lock is held: the digests it protects.
    Live(Vec<Digest>),
    /// Its lock is free (held now by GC while it removes the directory) or absent.
    Dead(Option<File>),
}

fn probe_capture(dir: &Path) -> Result<CaptureState, IoError> {
    let lock_path = dir.join("lock");
    // Never waiting on a FIFO put in place of the lock.
    let lock = match open_regular(&lock_path, Links::Refuse).map_err(crate::special::into_io) {
        Ok((f, _)) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(CaptureState::Dead(None)),
        Err(e) => return Err(IoError::at("open", &lock_path, e)),
    };
    match lock.try_lock() {
        Ok(()) => Ok(CaptureState::Dead(Some(lock))),
        Err(TryLockError::WouldBlock) => {
            let protect = dir.join("protect");
            let read = open_regular(&protect, Links::Refuse)
                .map_err(crate::special::into_io)
                .and_then(|(f, _)| io::read_to_string(f));
            let text = match read {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(IoError::at("read", &protect, e)),
            };
            Ok(CaptureState::Live(
                text.lines()
                    .filter_map(|l| Digest::from_hex(l).ok())
                    .collect(),
            ))
        }
        Err(TryLockError::Error(e)) => Err(IoError::at("probe the lock", &lock_path, e)),
    }
}

/// The digests the live captures other than `own` protect (see [`probe_capture`]). The
/// caller holds the GC lock exclusive, so no capture is being created meanwhile.
pub(crate) fn live_protected(layout: &Layout, own: &Path) -> Result<HashSet<Digest>, IoError> {
    let captures = layout.captures();
    let mut protected = HashSet::new();
    for entry in fs::read_dir(&captures).at("list", &captures)? {
        let dir = entry.at("list", &captures)?.path();
        if dir == own || !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        // Probing takes a dead capture's lock for a moment; GC removes that directory later.
        if let CaptureState::Live(digests) = probe_capture(&dir)? {
            protected.extend(digests);
        }
    }
    Ok(protected)
}

/// Removes a file, treating "already gone" as success.
fn remove_file(path: &Path) -> Result<(), IoError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(IoError::at("remove", path, e)),
        _ => Ok(()),
    }
}

impl Store {
    /// Collects garbage; see the [module documentation](crate::gc) for what is kept.
    ///
    /// Waits for running publications to finish, and blocks new ones while it runs; live
    /// captures keep streaming meanwhile.
    pub fn gc(&self, options: &GcOptions) -> Result<GcReport, StoreError> {
        if let Some(remote) = &self.remote {
            // The bucket (leases, records, grace: see the remote module), then the spool.
            let mut report = remote.gc(options)?;
            let spool = self.local_only().gc(options)?;
            report.captures_removed += spool.captures_removed;
            report.runtime_dirs_removed += spool.runtime_dirs_removed;
            return Ok(report);
        }
        let layout = &self.layout;
        let _lock = GcLock::exclusive(layout)?;
        let scan = scan_objects(layout)?;
        let mut report = GcReport::default();
        let mut roots: Vec<Digest> = Vec::new();

        // Records first, and before anything is removed: a record that cannot be read would
        // lose the artifacts it references, so GC removes nothing while one is in doubt.
        let mut record_leftovers = Vec::new();
        let records = layout.records();
        for entry in fs::read_dir(&records).at("list", &records)? {
            let entry = entry.at("list", &records)?;
            let path = entry.path();
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n.ends_with(TEMP_SUFFIX)) {
                // A record write interrupted before its rename (writers hold gc.lock shared,
                // so none is in progress now).
                record_leftovers.push(path);
                continue;
            }
            if record_id(&name).is_none() {
                // Not a record name: not a root, and not GC's to remove (verify lists it).
                continue;
            }
            let refused = |detail: String| StoreError::GcRefused {
                path: path.clone(),
                detail,
            };
            let meta = fs::symlink_metadata(&path).map_err(|e| refused(e.to_string()))?;
            if !meta.is_file() {
                let what = format!("is {}, not a record file", describe_type(&meta));
                return Err(refused(what));
            }
            if let Some(max_age) = options.expire_records {
                let modified = meta.modified().at("inspect", &path)?;
                if options
                    .now
                    .checked_sub(max_age)
                    .is_some_and(|c| modified < c)
                {
                    report.records_expired += 1;
                    record_leftovers.push(path);
                    continue;
                }
            }
            let bytes = match record_file::read(&path) {
                Ok(file) => file.bytes,
                Err(StoreError::RecordTooLarge { size, limit, .. }) => {
                    return Err(refused(format!(
                        "is {size} bytes, more than the {limit} bytes a record can be (it is \
                         damaged or not agentrun's)"
                    )));
                }
                Err(StoreError::Io(e)) => {
                    return Err(refused(format!("cannot be read: {}", e.source)));
                }
                Err(e) => return Err(refused(format!("cannot be read: {e}"))),
            };
            // A format this version does not know may keep artifacts in fields it would
            // ignore: GC removes nothing rather than guess.
            let record = ResultRecord::from_json(&bytes).map_err(|e| match e {
                RecordParseError::UnknownFormat { format } => StoreError::GcRecordFormatUnknown {
                    path: path.clone(),
                    format,
                },
                e => refused(format!("does not parse as a record ({e})")),
            })?;
            roots.extend(record.artifacts());
            report.records += 1;
        }

        let captures = layout.captures();
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
                CaptureState::Live(protected) => {
                    roots.extend(protected);
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

        if !options.dry_run {
            for path in &record_leftovers {
                remove_file(path)?;
            }
        }

        // What the records reference, to tell the objects kept for a record from those kept
        // only for being young (the report says why each was kept).
        let referenced = mark(&scan, roots.clone());
        // Young objects are roots too. If the grace reaches before the epoch, all are young.
        let cutoff = options.now.checked_sub(options.grace);
        roots.extend(
            scan.objects
                .iter()
                .filter(|(_, o)| cutoff.is_none_or(|c| o.mtime > c))
                .map(|(d, _)| *d),
        );

        let reachable = mark(&scan, roots);
        for (digest, object) in &scan.objects {
            if reachable.contains(digest) {
                report.objects_kept += 1;
                if !referenced.contains(digest) {
                    report.objects_in_grace += 1;
                }
                continue;
            }
            let index = scan.indexes.get(digest);
            report.objects_removed += 1;
            report.bytes_removed += object.len + index.map_or(0, |(_, len)| *len);
            if !options.dry_run {
                // Object first: an index without its object is harmless (removed below or by
                // the next GC); an object without its index would be unreadable.
                remove_file(&object.path)?;
                if let Some((path, _)) = index {
                    remove_file(path)?;
                }
            }
        }
        if !options.dry_run {
            for (digest, (path, _)) in &scan.indexes {
                if !scan.objects.contains_key(digest) {
                    remove_file(path)?;
                }
            }
        }
        Ok(report)
    }
}

/// Everything reachable from `roots`, following manifests to their streams.
fn mark(scan: &ObjectScan, roots: Vec<Digest>) -> HashSet<Digest> {
    let mut reachable = HashSet::new();
    let mut stack = roots;
    while let Some(digest) = stack.pop() {
        if !reachable.insert(digest) {
            continue;
        }
        let Some(object) = scan.objects.get(&digest) else {
            continue;
        };
        if object.len > crate::read::MAX_MANIFEST_BYTES {
            continue;
        }
        // An unreadable object cannot root anything; it is kept itself (it is reachable).
        if let Ok(Some(bytes)) = read_small(&object.path)
            && let Ok(manifest) = Manifest::parse(&bytes)
        {
            stack.extend(manifest.streams.iter().map(|e| e.sha256));
        }
    }
    reachable
}
