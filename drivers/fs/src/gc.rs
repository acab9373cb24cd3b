//! Garbage collection: mark from the roots, sweep what is unreachable and old.
//!
//! The logic is written once ([`collect`]) against the store interface
//! ([`crate::backend`]), and runs on the local store and on a bucket alike. Roots are
//!
//! * what live writers protect: on the local store the digests in `protect` of every capture
//!   directory whose lock is held (a live run); on a bucket the digests of every lease that
//!   has not expired (see [`crate::remote`]);
//! * every artifact of every record: its output and what it keeps (records older than
//!   [`GcOptions::expire_records`], when set, are removed first and root nothing, except a
//!   shared store's spooled runs that have not reached their bucket yet). A record
//!   GC cannot read (larger than any record is, or unparseable), or whose format it does not
//!   know (a newer agentrun's, which may keep artifacts in fields this version ignores),
//!   stops GC before it removes anything;
//! * every object younger than the grace period (a publisher between rename and record, or a
//!   result a caller has not recorded yet, keeps its objects for that long).
//!
//! Manifests are followed transitively: an object that parses as a manifest roots its streams.
//! On the local store GC holds `gc.lock` exclusive throughout, so no capture is being
//! published and no capture directory is being created while it decides; it removes capture
//! directories whose lock it can take (their process is gone) and stray temporary files, and
//! the result-sink directories `runtime/<run_id>/` of runs whose capture is not live (a run
//! removes its own; these are left by a crash), and outbox marks that name no record
//! ([`crate::outbox`]). On a bucket, where no lock spans machines, leases are re-read before
//! deletes instead.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use agentrun_core::record::RecordParseError;
use agentrun_core::{Digest, Manifest, ResultRecord};
use serde::Serialize;

use crate::backend::{Backend, LocalBackend, ObjectScan, RecordName, Stat, Writers};
use crate::error::{IoContext, IoError};
use crate::layout::{self, INDEX_SUFFIX, Layout};
use crate::special::{Links, open_regular};
use crate::store::{Store, StoreError};

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
    /// roots, and nothing a record references is ever removed. A shared store's spooled run
    /// that has not reached its bucket yet ([`Store::unpublished`]) is never forgotten.
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
            let stat = Stat {
                len: meta.len(),
                modified: meta.modified().at("inspect", &path)?,
            };
            if is_index {
                scan.indexes.insert(digest, stat);
            } else {
                scan.objects.insert(digest, stat);
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
pub(crate) enum CaptureState {
    /// Its lock is held: the digests it protects.
    Live(Vec<Digest>),
    /// Its lock is free (held now by GC while it removes the directory) or absent.
    Dead(Option<File>),
}

pub(crate) fn probe_capture(dir: &Path) -> Result<CaptureState, IoError> {
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

impl Store {
    /// Collects garbage; see the [module documentation](crate::gc) for what is kept.
    ///
    /// Waits for running publications to finish, and blocks new ones while it runs; live
    /// captures keep streaming meanwhile. Of a shared store: the bucket (its records, leases
    /// and grace, see [`crate::remote`]), then the local spool.
    pub fn gc(&self, options: &GcOptions) -> Result<GcReport, StoreError> {
        let mut report = self.with_backend(|backend| collect(backend, options))?;
        if self.remote.is_some() {
            // No retention in the spool: each of its records waits for a bucket (and is never
            // forgotten) or is the local store's, whose own gc applies its own retention.
            let spool_options = GcOptions {
                expire_records: None,
                ..options.clone()
            };
            let spool = collect(&LocalBackend(&self.layout), &spool_options)?;
            report.captures_removed += spool.captures_removed;
            report.runtime_dirs_removed += spool.runtime_dirs_removed;
        }
        if !options.dry_run {
            // Marks of spooled runs that crashed publishers left without a record (or
            // without their removal); the exclusive lock keeps captures between the two.
            let _excluded = crate::lock::GcLock::exclusive(&self.layout)?;
            crate::outbox::sweep(&self.layout)?;
        }
        Ok(report)
    }
}

/// GC of one backend: the logic both the local store and a bucket run.
pub(crate) fn collect(backend: &dyn Backend, options: &GcOptions) -> Result<GcReport, StoreError> {
    let model = backend.writers_model();
    let _guard = backend.gc_guard(options.dry_run)?;
    let scan = backend.scan_objects()?;
    let mut report = GcReport::default();
    let mut roots: Vec<Digest> = Vec::new();
    let mut manifests = ManifestCache::default();

    // Records first, and before anything is removed: a record that cannot be read would
    // lose the artifacts it references, so GC removes nothing while one is in doubt.
    let mut leftovers = Vec::new();
    for entry in backend.list_records()? {
        let run_id = match &entry.name {
            RecordName::Record(id) => id.clone(),
            // A record write interrupted before its rename: no writer is running now.
            RecordName::Temp if model == Writers::Excluded => {
                leftovers.push(entry);
                continue;
            }
            // Not a record name: not a root, and not GC's to remove (verify lists it).
            RecordName::Temp | RecordName::Other => continue,
        };
        let refused = |detail: String| StoreError::GcRefused {
            path: entry.location.clone(),
            detail,
        };
        let stat = match backend.stat_record(&entry) {
            Ok(stat) => stat,
            // Removed since the listing: it roots nothing any more.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(refused(e.to_string())),
        };
        if let Some(what) = stat.not_a_file {
            return Err(refused(format!("is {what}, not a record file")));
        }
        // Records older than the retention are forgotten first and root nothing; except a
        // spooled run still waiting for its bucket, which no other place holds.
        if let Some(max_age) = options.expire_records
            && options
                .now
                .checked_sub(max_age)
                .is_some_and(|c| stat.modified < c)
            && !backend.awaits_publication(&run_id)
        {
            report.records_expired += 1;
            leftovers.push(entry);
            continue;
        }
        let bytes = match backend.read_record(&run_id) {
            Ok(Some(stored)) => stored.bytes,
            Ok(None) => continue,
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
                path: entry.location.clone(),
                format,
            },
            e => refused(format!("does not parse as a record ({e})")),
        })?;
        roots.extend(record.artifacts());
        report.records += 1;
    }

    crate::fault::step("gc: after the records, before the writers");
    // What live writers protect (and dead writers' leftovers cleared).
    let writers = backend.writers(options, &mut report)?;
    if !options.dry_run {
        for entry in &leftovers {
            backend.delete_record_entry(entry)?;
        }
    }
    roots.extend(writers.iter().copied());

    // What the records and writers reference, to tell the objects kept for them from those
    // kept only for being young (the report says why each was kept).
    let referenced = mark(backend, &scan, &mut manifests, roots.clone())?;
    // Young objects are roots too. If the grace reaches before the epoch, all are young.
    let grace = options.grace.max(backend.min_grace());
    let cutoff = options.now.checked_sub(grace);
    let young = |stat: &Stat| cutoff.is_none_or(|c| stat.modified > c);
    roots.extend(
        scan.objects
            .iter()
            .filter(|(_, stat)| young(stat))
            .map(|(d, _)| *d),
    );
    let reachable = mark(backend, &scan, &mut manifests, roots)?;

    // Leases, re-read before a delete when the last read is too old (bucket only).
    let mut leased = Leased {
        digests: mark(backend, &scan, &mut manifests, writers)?,
        read: Instant::now(),
    };
    let mut still_leased =
        |digest: &Digest, manifests: &mut ManifestCache| -> Result<bool, StoreError> {
            let Writers::Leased { window } = model else {
                return Ok(false);
            };
            if leased.read.elapsed() >= window {
                let mut scratch = GcReport::default();
                let now = backend.writers(options, &mut scratch)?;
                leased.digests = mark(backend, &scan, manifests, now)?;
                leased.read = Instant::now();
            }
            Ok(leased.digests.contains(digest))
        };

    let mut digests: Vec<&Digest> = scan.objects.keys().collect();
    digests.sort();
    for digest in digests {
        let object = &scan.objects[digest];
        if reachable.contains(digest) {
            report.objects_kept += 1;
            if !referenced.contains(digest) {
                report.objects_in_grace += 1;
            }
            continue;
        }
        if still_leased(digest, &mut manifests)? {
            report.objects_kept += 1;
            continue;
        }
        let index = scan.indexes.get(digest);
        report.objects_removed += 1;
        report.bytes_removed += object.len + index.map_or(0, |i| i.len);
        if !options.dry_run {
            // Object first: an index without its object is harmless (removed below or by
            // the next GC); an object without its index would be unreadable.
            backend.delete_object(digest)?;
            backend.delete_index(digest)?;
        }
    }
    // Indexes whose object is gone: a crash between the two (with writers excluded, no
    // publication is half done; else only once past the grace and unleased).
    for (digest, index) in &scan.indexes {
        if scan.objects.contains_key(digest) {
            continue;
        }
        if model != Writers::Excluded
            && (young(index) || reachable.contains(digest) || still_leased(digest, &mut manifests)?)
        {
            continue;
        }
        report.bytes_removed += index.len;
        if !options.dry_run {
            backend.delete_index(digest)?;
        }
    }
    Ok(report)
}

/// The digests live writers protect, with when they were read.
struct Leased {
    digests: HashSet<Digest>,
    read: Instant,
}

/// The streams of each object found to be a manifest (or not) during one GC: each small
/// object is read at most once.
#[derive(Default)]
struct ManifestCache(HashMap<Digest, Vec<Digest>>);

/// Everything reachable from `roots`, following manifests to their streams.
fn mark(
    backend: &dyn Backend,
    scan: &ObjectScan,
    manifests: &mut ManifestCache,
    roots: impl IntoIterator<Item = Digest>,
) -> Result<HashSet<Digest>, StoreError> {
    let mut reachable = HashSet::new();
    let mut stack: Vec<Digest> = roots.into_iter().collect();
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
        let streams = match manifests.0.entry(digest) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let streams = match backend.read_small(&digest)? {
                    Some(bytes) => Manifest::parse(&bytes)
                        .map(|m| m.streams.iter().map(|s| s.sha256).collect())
                        .unwrap_or_default(),
                    None => Vec::new(),
                };
                e.insert(streams)
            }
        };
        stack.extend(streams.iter().copied());
    }
    Ok(reachable)
}
