//! Leases: what a publisher or a GC writes in the bucket while it works, so that a GC on
//! another machine spares what it names (the protocol is in the [module documentation](super)).

use super::*;

/// A lease: written before a publisher's objects (or when a GC starts), renewed while it
/// works. It is never deleted by its writer: it lapses [`LEASE`] after its last renewal, and a
/// GC removes it once no running GC can still rely on it (see the module documentation).
pub(crate) struct Lease {
    remote: Arc<Remote>,
    key: ObjPath,
    written: Instant,
    /// Milliseconds after `written` of the last successful write of the lease.
    renewed_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

/// A lease's content.
#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct LeaseBody {
    /// Its writer's clock at the last renewal, plus [`LEASE`].
    pub(crate) expires_unix_ms: u64,
    /// What it protects (a publisher's: every digest its record will name).
    pub(crate) digests: Vec<String>,
    /// A GC's lease: when that GC started, by its clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gc_started_unix_ms: Option<u64>,
}

fn lease_body(digests: &[Digest], gc_started: Option<SystemTime>) -> Vec<u8> {
    let body = LeaseBody {
        expires_unix_ms: unix_ms(SystemTime::now() + LEASE),
        digests: digests.iter().map(Digest::to_hex).collect(),
        gc_started_unix_ms: gc_started.map(unix_ms),
    };
    serde_json::to_vec(&body).expect("a lease serializes")
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(super) fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Lease {
    /// Writes a lease naming `digests` (a GC's: naming none, with its start) and starts
    /// renewing it every third of [`LEASE`].
    pub(crate) fn acquire(
        remote: &Arc<Remote>,
        digests: &[Digest],
        gc_started: Option<SystemTime>,
    ) -> Result<Self, StoreError> {
        let kind = if gc_started.is_some() { "gc-" } else { "" };
        let id = format!("{kind}{}-{}", layout::new_run_id(), std::process::id());
        let key = remote.lease_key(&id);
        remote.put(&key, lease_body(digests, gc_started), PutMode::Overwrite)?;
        let written = Instant::now();
        let renewed_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (remote, key, stop, renewed_ms, digests) = (
                Arc::clone(remote),
                key.clone(),
                Arc::clone(&stop),
                Arc::clone(&renewed_ms),
                digests.to_vec(),
            );
            std::thread::Builder::new()
                .name("agentrun-lease".to_owned())
                .spawn(move || {
                    let step = Duration::from_millis(200);
                    let mut since = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(step);
                        if since.elapsed() >= LEASE / 3 && !stop.load(Ordering::Relaxed) {
                            // A failed renewal is retried at the next step; the lease
                            // still has two thirds of its length.
                            let body = lease_body(&digests, gc_started);
                            if remote.put(&key, body, PutMode::Overwrite).is_ok() {
                                since = Instant::now();
                                let at = written.elapsed().as_millis() as u64;
                                renewed_ms.store(at, Ordering::Relaxed);
                            }
                        }
                    }
                })
                .ok()
        };
        Ok(Self {
            remote: Arc::clone(remote),
            key,
            written,
            renewed_ms,
            stop,
            renewer,
        })
    }

    /// Waits until [`HIT_WAIT`] after the lease was first written: any GC delete landing
    /// after that was decided on leases read after this one existed, so it spares what this
    /// lease names.
    pub(crate) fn settle(&self) {
        let wait = (self.written + HIT_WAIT).saturating_duration_since(Instant::now());
        std::thread::sleep(wait);
    }

    /// Whether the lease may be about to lapse: renewals have failed for a third of
    /// [`LEASE`] (it is renewed every third), so its last write is two thirds of a lease old.
    pub(crate) fn lapsed(&self) -> bool {
        let renewed = self.written + Duration::from_millis(self.renewed_ms.load(Ordering::Relaxed));
        renewed.elapsed() >= LEASE * 2 / 3
    }

    /// Ends a GC's lease: a finished GC relies on nothing (a publisher's lease is never
    /// deleted by its writer, see [`Lease`]).
    pub(super) fn end_gc(mut self) {
        self.stop_renewing();
        // One left behind (the delete failed) lapses, and the next GC removes it.
        let _ = self.remote.delete(&self.key);
    }

    fn stop_renewing(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}
