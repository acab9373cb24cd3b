//! Store verification: every object against its name and its index, every record against the
//! objects it references. Written once ([`check`]) against the store interface
//! ([`crate::backend`]): the local store and a bucket are checked alike.

use std::io::{self, Read};

use agentrun_core::digest::StreamingDigest;
use agentrun_core::index::{self, BLOCK_SIZE};
use agentrun_core::{Digest, ResultRecord};
use serde::Serialize;

use crate::backend::{Backend, RecordEntry, RecordName, Stat};
use crate::read::ReadError;
use crate::store::{Store, StoreError, parse_record};

/// Most block-checksum mismatches reported per object (the rest are counted).
const MAX_BLOCK_PROBLEMS: usize = 3;

/// What [`Store::verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Objects hashed and checked against their index.
    pub objects_checked: u64,
    /// Records parsed and checked.
    pub records_checked: u64,
    /// Human-readable problems; empty means the store is healthy.
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Whether no problem was found.
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Store {
    /// Checks the whole store: every object's SHA-256 against its name (streamed, in bounded
    /// memory), its index header and every block checksum, and that every record parses and
    /// references only existing objects. Problems are reported, not repaired. Of a shared
    /// store: the bucket (the spool holds only runs not published yet).
    pub fn verify(&self) -> Result<VerifyReport, StoreError> {
        self.with_backend(check)
    }
}

/// Verify of one backend: the logic both the local store and a bucket run.
pub(crate) fn check(backend: &dyn Backend) -> Result<VerifyReport, StoreError> {
    // Local: shared, so publishers may continue, GC may not remove objects under our feet.
    let _guard = backend.verify_guard()?;
    let scan = backend.scan_objects()?;
    let mut report = VerifyReport::default();
    let mut digests: Vec<&Digest> = scan.objects.keys().collect();
    digests.sort();
    for digest in digests {
        check_object(backend, digest, &scan.objects[digest], &mut report.problems);
        report.objects_checked += 1;
    }

    report.problems.extend(scan.strays.iter().cloned());

    let mut entries = Vec::new();
    for entry in backend.list_records()? {
        match &entry.name {
            RecordName::Record(_) => entries.push(entry),
            // Temporary files are a crashed writer's leftovers, removed by GC.
            RecordName::Temp => {}
            RecordName::Other => report.problems.push(format!(
                "{} is not part of the store (records/ holds only <run id>.json); move it away",
                entry.location.display()
            )),
        }
    }
    entries.sort_by(|a, b| a.location.cmp(&b.location));
    for entry in entries {
        let RecordName::Record(run_id) = &entry.name else {
            continue;
        };
        report.records_checked += 1;
        // Every entry is checked on its own: one unreadable record must not hide the rest.
        let record = match read_record(backend, &entry, run_id) {
            Ok(Some((r, problem))) => {
                report.problems.extend(problem);
                r
            }
            // Removed since the listing.
            Ok(None) => continue,
            Err(problem) => {
                report.problems.push(problem);
                continue;
            }
        };
        for digest in record.artifacts() {
            // Records are listed after the object scan: a run that published meanwhile
            // has objects the scan did not see, so check the object itself.
            if !scan.objects.contains_key(&digest)
                && !backend.object_exists(&digest).unwrap_or(false)
            {
                report.problems.push(format!(
                    "record {} references artifact {digest}, which is missing",
                    entry.location.display()
                ));
            }
        }
    }
    Ok(report)
}

/// Reads and parses one record, or says what is wrong with it (a readable record may still
/// come with a problem: a mode that lets others read it). `None` when it is gone.
fn read_record(
    backend: &dyn Backend,
    entry: &RecordEntry,
    run_id: &str,
) -> Result<Option<(ResultRecord, Option<String>)>, String> {
    let path = &entry.location;
    let stat = match backend.stat_record(entry) {
        Ok(stat) => stat,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if let Some(what) = stat.not_a_file {
        return Err(format!(
            "record {} is {what}, not a record file; move it away",
            path.display(),
        ));
    }
    let Some(stored) = backend.read_record(run_id).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let record = parse_record(path, &stored.bytes).map_err(|e| e.to_string())?;
    let problem = stored.loose_mode.map(|mode| {
        format!(
            "{} has mode {mode:04o}; store files must be owner-only: run chmod 600 {}",
            path.display(),
            path.display()
        )
    });
    Ok(Some((record, problem)))
}

/// Hashes one object in a single pass, checking each block against the index when the index
/// is usable, and appends what is wrong to `problems`.
fn check_object(backend: &dyn Backend, digest: &Digest, listed: &Stat, problems: &mut Vec<String>) {
    let mut index = match backend.open_checked(digest, listed.len) {
        Ok(object) => Some(object),
        Err(ReadError::Missing(_)) => return, // removed since the scan
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let path = backend.object_location(digest);
    let mut file = match backend.open_raw(digest, listed.len) {
        Ok(Some(f)) => f,
        Ok(None) => return, // removed since the scan
        Err(e) => {
            problems.push(format!(
                "artifact {digest}: cannot open {}: {e}",
                path.display()
            ));
            return;
        }
    };
    let mut hasher = StreamingDigest::default();
    let mut buf = vec![0u8; BLOCK_SIZE as usize];
    let mut block = 0u64;
    let mut bad_blocks = 0usize;
    loop {
        let n = match read_full(&mut file, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                problems.push(format!(
                    "artifact {digest}: cannot read {}: {e}",
                    path.display()
                ));
                return;
            }
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if let Some(object) = &index {
            match object.entry(block) {
                Ok(e) if e.crc == index::block_crc(&buf[..n]) => {}
                Ok(_) => {
                    bad_blocks += 1;
                    if bad_blocks <= MAX_BLOCK_PROBLEMS {
                        problems.push(format!(
                            "artifact {digest}: block {block} does not match its checksum"
                        ));
                    }
                }
                Err(e) => {
                    // One report for a damaged index, not one per block.
                    problems.push(e.to_string());
                    index = None;
                }
            }
        }
        block += 1;
    }
    if bad_blocks > MAX_BLOCK_PROBLEMS {
        problems.push(format!(
            "artifact {digest}: {} more blocks do not match their checksums",
            bad_blocks - MAX_BLOCK_PROBLEMS
        ));
    }
    let actual = hasher.finish();
    if actual != *digest {
        problems.push(format!(
            "artifact {digest}: content hashes to {actual}, not to its name"
        ));
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
