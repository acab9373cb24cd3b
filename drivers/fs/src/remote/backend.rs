//! The bucket as one implementation of the store interface ([`crate::backend`]).

use super::*;

/// The bucket as the store interface sees it: the shared logic of reads, records, GC and
/// verify runs on it as on the local store.
pub(crate) struct RemoteBackend<'a>(pub(crate) &'a Arc<Remote>, RefCell<GcState>);

/// What one GC knows about the leases.
#[derive(Default)]
struct GcState {
    /// When it started, by its clock: a lease written (or renewed) less than `LEASE +
    /// CLOCK_SKEW` before counts for the whole GC.
    started: Option<SystemTime>,
    /// Its own lease (not in a dry run), which tells other GCs not to remove leases it may
    /// still count.
    lease: Option<Lease>,
    /// The bodies of the leases found to count, by key. A lease's digests and a GC's start
    /// never change, and a lease that counts once counts for the whole GC, so each is read
    /// once.
    bodies: HashMap<String, LeaseBody>,
}

impl Drop for GcState {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.end_gc();
        }
    }
}

impl<'a> RemoteBackend<'a> {
    pub(crate) fn new(remote: &'a Arc<Remote>) -> Self {
        Self(remote, RefCell::default())
    }

    /// The digests of every lease that counts for this GC; leases no running GC counts any
    /// more are removed, unless `dry_run`.
    fn live_leases(&self, dry_run: bool) -> Result<HashSet<Digest>, StoreError> {
        let remote = self.0;
        let mut state = self.1.borrow_mut();
        if state.lease.as_ref().is_some_and(Lease::lapsed) {
            return Err(StoreError::GcLeaseLapsed {
                url: remote.url.clone(),
            });
        }
        let started = *state.started.get_or_insert_with(SystemTime::now);
        let now = SystemTime::now();
        // A lease written at `t` (the store's clock) counts for a GC that started (its
        // clock) before `t + LEASE + CLOCK_SKEW`.
        let counts = |written: SystemTime, since: SystemTime| written + LEASE + CLOCK_SKEW > since;
        let mut live = HashSet::new();
        // Leases removable once every running GC started after them: `(key, written, the
        // expiry its body gives)`.
        let mut lapsed: Vec<(ObjPath, SystemTime, Option<SystemTime>)> = Vec::new();
        // The start of the oldest GC still running (this one included).
        let mut horizon = started;
        for meta in remote.list("leases/")? {
            let written: SystemTime = meta.last_modified.into();
            if !counts(written, started) {
                lapsed.push((meta.location, written, None));
                continue;
            }
            let key = meta.location.to_string();
            let body = match state.bodies.get(&key) {
                Some(body) => Some(body.clone()),
                None => remote
                    .get_bounded(&meta.location, 16 << 20)?
                    .and_then(|(bytes, _)| serde_json::from_slice::<LeaseBody>(&bytes).ok()),
            };
            let Some(body) = body else {
                // Not a lease, under leases/: names nothing; removed once old.
                lapsed.push((meta.location, written, None));
                continue;
            };
            // Its writer's own expiry too (two clocks apart: twice the skew).
            let expires = from_unix_ms(body.expires_unix_ms);
            if expires + 2 * CLOCK_SKEW <= started {
                lapsed.push((meta.location, written, Some(expires)));
                continue;
            }
            live.extend(body.digests.iter().filter_map(|h| Digest::from_hex(h).ok()));
            if let Some(gc) = body.gc_started_unix_ms
                && counts(written, now)
            {
                horizon = horizon.min(from_unix_ms(gc));
            }
            // Counted now, it counts for the rest of this GC: not read again.
            state.bodies.entry(key).or_insert(body);
        }
        if !dry_run {
            for (key, written, expires) in lapsed {
                let gone = !counts(written, horizon)
                    || expires.is_some_and(|e| e + 2 * CLOCK_SKEW <= horizon);
                if gone {
                    remote.delete(&key)?;
                }
            }
        }
        Ok(live)
    }

    /// The entry of a listed key in the records' place.
    fn record_entry(&self, meta: &object_store::ObjectMeta) -> RecordEntry {
        let remote = self.0;
        let id = meta
            .location
            .filename()
            .and_then(|name| record_id(std::ffi::OsStr::new(name)));
        // Exactly `records/<run id>.json`: a key deeper down is not a record.
        let name = match id {
            Some(id) if remote.record_key(&id) == meta.location => RecordName::Record(id),
            _ => RecordName::Other,
        };
        RecordEntry {
            name,
            location: remote.display_path(&meta.location),
            listed: Some(EntryStat {
                not_a_file: None,
                modified: meta.last_modified.into(),
            }),
        }
    }
}

impl Backend for RemoteBackend<'_> {
    fn gc_guard(&self, dry_run: bool) -> Result<Option<GcLock>, StoreError> {
        // The lease first, then the start: any GC that sees the lease started before it.
        let mut state = self.1.borrow_mut();
        if !dry_run {
            state.lease = Some(Lease::acquire(self.0, &[], Some(SystemTime::now()))?);
        }
        state.started = Some(SystemTime::now());
        Ok(None)
    }

    fn verify_guard(&self) -> Result<Option<GcLock>, StoreError> {
        Ok(None)
    }

    fn writers_model(&self) -> Writers {
        Writers::Leased {
            window: LEASE_READ_WINDOW,
        }
    }

    fn min_grace(&self) -> Duration {
        MIN_GRACE
    }

    fn scan_objects(&self) -> Result<ObjectScan, StoreError> {
        let remote = self.0;
        let mut scan = ObjectScan::default();
        for meta in remote.list("objects/")? {
            let key = &meta.location;
            let parsed = parse_key(key.as_ref()).filter(|(d, is_index)| {
                *key == if *is_index {
                    remote.index_key(d)
                } else {
                    remote.object_key(d)
                }
            });
            let Some((digest, is_index)) = parsed else {
                scan.strays.push(format!(
                    "{} is not part of the store (not an object or index name); move it away",
                    remote.display_path(key).display()
                ));
                continue;
            };
            let stat = Stat {
                len: meta.size,
                modified: meta.last_modified.into(),
            };
            if is_index {
                scan.indexes.insert(digest, stat);
            } else {
                scan.objects.insert(digest, stat);
            }
        }
        Ok(scan)
    }

    fn object_location(&self, digest: &Digest) -> PathBuf {
        self.0.display_path(&self.0.object_key(digest))
    }

    fn open_object(&self, digest: &Digest) -> Result<Object, ReadError> {
        self.0.open_object(digest)
    }

    fn open_checked(&self, digest: &Digest, listed_len: u64) -> Result<Object, ReadError> {
        // Fresh from the bucket: a cached sidecar must not hide damage there.
        let _ = fs::remove_file(self.0.cached_index_path(digest));
        let object = self.0.open_object(digest)?;
        let indexed = object.header.total_bytes;
        if indexed != listed_len {
            return Err(ReadError::Corrupt {
                digest: *digest,
                detail: format!(
                    "the object has {listed_len} bytes but its index records {indexed}; the \
                     object was {}",
                    if listed_len < indexed {
                        "truncated"
                    } else {
                        "appended to"
                    }
                ),
            });
        }
        Ok(object)
    }

    fn open_raw(&self, digest: &Digest, listed_len: u64) -> io::Result<Option<Box<dyn Read + '_>>> {
        Ok(Some(Box::new(RangeReader {
            remote: self.0,
            key: self.0.object_key(digest),
            pos: 0,
            len: listed_len,
            chunk: Bytes::new(),
        })))
    }

    fn object_exists(&self, digest: &Digest) -> Result<bool, StoreError> {
        Ok(self.0.head(&self.0.object_key(digest))?.is_some())
    }

    fn read_small(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        let remote = self.0;
        // Content is immutable: an object once found not to be a manifest never is one, so
        // each machine fetches it once (a GC over many small outputs costs no GET each).
        let marker = remote
            .cache
            .join(format!("{}{NOT_A_MANIFEST}", digest.to_hex()));
        if marker.exists() {
            return Ok(None);
        }
        let Some((bytes, _)) =
            remote.get_bounded(&remote.object_key(digest), MAX_MANIFEST_BYTES)?
        else {
            return Ok(None);
        };
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Ok(None);
        }
        // Only an intact copy decides for good (a damaged one may be replaced).
        if Digest::of(&bytes) == *digest && Manifest::parse(&bytes).is_err() {
            let _ = crate::atomic::write_new_file(&marker, b"");
        }
        Ok(Some(bytes))
    }

    fn delete_object(&self, digest: &Digest) -> Result<(), StoreError> {
        Ok(self.0.delete(&self.0.object_key(digest))?)
    }

    fn delete_index(&self, digest: &Digest) -> Result<(), StoreError> {
        Ok(self.0.delete(&self.0.index_key(digest))?)
    }

    fn list_records(&self) -> Result<Vec<RecordEntry>, StoreError> {
        Ok(self
            .0
            .list("records/")?
            .iter()
            .map(|meta| self.record_entry(meta))
            .collect())
    }

    fn record_location(&self, run_id: &str) -> PathBuf {
        self.0.display_path(&self.0.record_key(run_id))
    }

    fn stat_record(&self, entry: &RecordEntry) -> io::Result<EntryStat> {
        entry
            .listed
            .ok_or_else(|| io::Error::other("a listed record without its listing"))
    }

    fn read_record(&self, run_id: &str) -> Result<Option<StoredRecord>, StoreError> {
        let remote = self.0;
        let key = remote.record_key(run_id);
        let limit = agentrun_core::record::MAX_RECORD_BYTES;
        match remote.get_bounded(&key, limit)? {
            None => Ok(None),
            Some((bytes, _)) if bytes.len() as u64 > limit => Err(StoreError::RecordTooLarge {
                path: remote.display_path(&key),
                size: bytes.len() as u64,
                limit,
            }),
            Some((bytes, modified)) => Ok(Some(StoredRecord {
                bytes,
                modified,
                loose_mode: None,
            })),
        }
    }

    fn delete_record_entry(&self, entry: &RecordEntry) -> Result<(), StoreError> {
        // Only records are ever removed here (a bucket has no temporary record files).
        if let RecordName::Record(id) = &entry.name {
            self.0.delete(&self.0.record_key(id))?;
        }
        Ok(())
    }

    fn awaits_publication(&self, _run_id: &str) -> bool {
        false
    }

    fn writers(
        &self,
        options: &GcOptions,
        _report: &mut GcReport,
    ) -> Result<HashSet<Digest>, StoreError> {
        self.live_leases(options.dry_run)
    }
}
