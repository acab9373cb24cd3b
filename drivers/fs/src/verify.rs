//! Store verification: every object against its name and its index, every record against the
//! objects it references.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use agentrun_core::digest::StreamingDigest;
use agentrun_core::index::{self, BLOCK_SIZE};
use agentrun_core::{Digest, ResultRecord};
use serde::Serialize;

use crate::error::IoContext;
use crate::gc::{ObjectEntry, describe_type, scan_objects};
use crate::layout::{self, Layout, TEMP_SUFFIX};
use crate::lock::GcLock;
use crate::read::{Object, ReadError};
use crate::record_file;
use crate::special::{Links, open_regular};
use crate::store::{Store, StoreError, parse_record, record_id};

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
    /// references only existing objects. Problems are reported, not repaired.
    pub fn verify(&self) -> Result<VerifyReport, StoreError> {
        if let Some(remote) = &self.remote {
            return remote.verify();
        }
        let layout = &self.layout;
        // Shared: publishers may continue, GC may not remove objects under our feet.
        let _lock = GcLock::shared(layout)?;
        let scan = scan_objects(layout)?;
        let mut report = VerifyReport::default();
        let mut digests: Vec<&Digest> = scan.objects.keys().collect();
        digests.sort();
        for digest in digests {
            check_object(layout, digest, &scan.objects[digest], &mut report.problems)?;
            report.objects_checked += 1;
        }

        report.problems.extend(scan.strays.iter().cloned());

        let records = layout.records();
        let mut entries = Vec::new();
        for entry in fs::read_dir(&records).at("list", &records)? {
            let entry = entry.at("list", &records)?;
            let name = entry.file_name();
            if record_id(&name).is_some() {
                entries.push(entry.path());
            } else if !name.to_str().is_some_and(|n| n.ends_with(TEMP_SUFFIX)) {
                // Temporary files are a crashed writer's leftovers, removed by GC.
                report.problems.push(format!(
                    "{} is not part of the store (records/ holds only <run id>.json); move it \
                     away",
                    entry.path().display()
                ));
            }
        }
        entries.sort();
        for path in entries {
            report.records_checked += 1;
            // Every entry is checked on its own: one unreadable record must not hide the rest.
            let record = match read_record(&path) {
                Ok((r, problem)) => {
                    report.problems.extend(problem);
                    r
                }
                Err(problem) => {
                    report.problems.push(problem);
                    continue;
                }
            };
            for digest in record.artifacts() {
                // Records are listed after the object scan: a run that published meanwhile
                // has objects the scan did not see, so check the file itself.
                if !scan.objects.contains_key(&digest)
                    && !layout::exists(&layout.object(&digest)).unwrap_or(false)
                {
                    report.problems.push(format!(
                        "record {} references artifact {digest}, which is missing",
                        path.display()
                    ));
                }
            }
        }
        Ok(report)
    }
}

/// Reads and parses one record file, or says what is wrong with it (a readable record may
/// still come with a problem: a mode that lets others read it).
fn read_record(path: &Path) -> Result<(ResultRecord, Option<String>), String> {
    let meta = fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "record {} is {}, not a record file; move it away",
            path.display(),
            describe_type(&meta)
        ));
    }
    let mode = meta.permissions().mode() & 0o7777;
    let file = record_file::read(path).map_err(|e| e.to_string())?;
    let record = parse_record(path, &file.bytes).map_err(|e| e.to_string())?;
    let problem = (mode & 0o077 != 0).then(|| {
        format!(
            "{} has mode {mode:04o}; store files must be owner-only: run chmod 600 {}",
            path.display(),
            path.display()
        )
    });
    Ok((record, problem))
}

/// Hashes one object in a single pass, checking each block against the index when the index
/// is usable, and appends what is wrong to `problems`.
fn check_object(
    layout: &Layout,
    digest: &Digest,
    entry: &ObjectEntry,
    problems: &mut Vec<String>,
) -> Result<(), StoreError> {
    let mut index = match Object::open(layout, digest) {
        Ok(object) => Some(object),
        Err(ReadError::Missing(_)) => return Ok(()), // removed since the scan
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let path = &entry.path;
    // Listed as a regular file, but it may have been swapped since: never wait on a FIFO.
    let mut file = match open_regular(path, Links::Refuse).map_err(crate::special::into_io) {
        Ok((f, _)) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()), // removed since the scan
        Err(e) => {
            problems.push(format!(
                "artifact {digest}: cannot open {}: {e}",
                path.display()
            ));
            return Ok(());
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
                return Ok(());
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
    Ok(())
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
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
