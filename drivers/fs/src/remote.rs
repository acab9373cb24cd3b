//! The shared store on object storage: `s3://BUCKET/PREFIX`, `gs://`, `az://`, `file://`.
//!
//! A remote [`Store`](crate::Store) is a local store (the *spool*, under the local home) plus a
//! bucket. Captures run exactly as on a local store (bounded memory, streaming digest and line
//! index, crash-safe local publication); once the local record is written the run is
//! published to the bucket and its local record removed (its spooled objects are then
//! unreferenced and the next `gc` removes them from the spool). Reads, records, runs, `show`,
//! `gc` and `verify` go to the bucket, through the logic the local store runs too: the bucket
//! is one implementation of the store interface ([`crate::backend`], [`RemoteBackend`]).
//!
//! # Bucket layout
//!
//! ```text
//! <prefix>/objects/<2 hex>/<62 hex>       artifact bytes, named by their SHA-256
//! <prefix>/objects/<2 hex>/<62 hex>.idx   the index sidecar (the local store's format)
//! <prefix>/records/<run_id>.json          result records: the GC roots
//! <prefix>/leases/<lease_id>.json         leases: {"expires_unix_ms", "digests"}, and a
//!                                         GC's {"expires_unix_ms", "digests": [],
//!                                         "gc_started_unix_ms"}
//! ```
//!
//! # Publication (crash-safe order)
//!
//! 1. A lease naming every digest the record will reference is written (and renewed every
//!    third of [`LEASE`] by a thread while the publication runs).
//! 2. Each object the spool holds: its index sidecar first, then the object (one `PUT` up to
//!    [`MULTIPART_THRESHOLD`], else a multipart upload of [`PART_SIZE`] parts, at most
//!    [`PARTS_IN_FLIGHT`] in flight, so memory stays bounded). A new object is put with
//!    `PutMode::Create`, so two machines storing the same bytes store them once; an existing
//!    copy counts as a hit when its sidecar equals ours byte for byte and its size is the
//!    indexed size, and is replaced (overwritten, content-addressed bytes) otherwise (never
//!    by a spool copy that does not hash to its name). An object the record keeps that the
//!    spool cannot give (a compaction's reference to another machine's output) is not
//!    uploaded: the bucket must hold it, and it is confirmed as an old hit is, below; its
//!    compaction has held a lease naming it since it checked it.
//! 3. The record, last: when it exists, everything it names is in the bucket. (Should the
//!    lease's renewals have failed for two thirds of its length first, a fresh lease is
//!    written and every object confirmed as an old hit is, below, before the record.)
//! 4. The lease stops being renewed. It is not deleted: a GC that listed the records before
//!    this one was written still counts it (below).
//!
//! A crash at any point leaves at most objects that no record names (collected by `gc` after
//! the grace period) and a lease that lapses; never a record naming a missing object.
//!
//! # GC protocol
//!
//! A GC writes its own lease (renewed while it runs, naming its start time), notes its start
//! `S`, then lists the objects, reads every record, and deletes the unreferenced objects
//! older than the grace. Roots are every record, every lease that *counts* for it, and every
//! object younger than the grace period. A lease counts for a GC when it was written or
//! renewed (the bucket's modification time) less than `LEASE + CLOCK_SKEW` before `S`, and
//! its own expiry is less than `2 * CLOCK_SKEW` before `S`; it keeps counting for that whole
//! GC, however long it runs. So a publisher whose record this GC did not list (written after
//! `S`) is protected by its lease until the GC ends, and one whose lease no longer counts
//! wrote its record before `S`, which the GC lists. A lease is removed only once it counts for
//! no running GC (measured against the oldest start among the GC leases that are being
//! renewed); a GC whose own lease could not be renewed stops.
//!
//! GC re-reads the leases whenever its last read is older than [`LEASE_READ_WINDOW`] before
//! each delete, so every delete is decided on leases at most that old. A publisher that finds
//! an object already there (a deduplication hit) and old enough for a GC to take it checks
//! that it is still there only [`HIT_WAIT`] after its lease was written: any GC delete landing
//! after that check was decided on leases read after the lease existed, so it keeps the
//! object. Assumptions (documented for operators): machine clocks within [`CLOCK_SKEW`] of the
//! object store's, a GC delete request lands within `HIT_WAIT - LEASE_READ_WINDOW` of being
//! sent, and the bucket is strongly consistent (S3, GCS, Azure, MinIO are).
//!
//! # Why a private runtime
//!
//! `object_store` is async (tokio); every agentrun-fs call blocks and is called from any
//! thread (the CLI on smol, the MCP server's blocking pool). Each remote store owns a small
//! tokio runtime (current-thread, IO and timers) and blocks on it, so callers need no runtime
//! and no async code leaks into the store's API.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentrun_core::index::{BLOCK_SIZE, ENTRY_LEN, HEADER_LEN, IndexHeader};
use agentrun_core::{Digest, Manifest, ResultRecord};
use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};

use crate::backend::{
    Backend, EntryStat, ObjectScan, RecordEntry, RecordName, Stat, StoredRecord, Writers,
};
use crate::error::{IoContext, IoError};
use crate::gc::{GcOptions, GcReport};
use crate::layout::{self, Layout, RECORD_SUFFIX};
use crate::lock::GcLock;
use crate::read::{MAX_MANIFEST_BYTES, Object, ReadError};
use crate::store::{StoreError, record_id};

/// How long a lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(60);
/// Most a GC's lease read may be old when it deletes an object.
pub const LEASE_READ_WINDOW: Duration = Duration::from_secs(1);
/// How long after writing its lease a publisher confirms a deduplication hit on an old object.
pub const HIT_WAIT: Duration = Duration::from_secs(5);
/// The clock skew assumed at most between any machine and the object store.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// The smallest grace a GC of a shared store uses (a smaller one is raised to it): a
/// publisher confirms a deduplication hit at once when the object is younger than this less
/// `2 * CLOCK_SKEW + HIT_WAIT`, so no GC may count such an object as old.
pub const MIN_GRACE: Duration = Duration::from_secs(600);
/// Objects up to this size are put in one request; larger ones by multipart upload.
pub const MULTIPART_THRESHOLD: u64 = 16 << 20;
/// The size of a multipart upload's parts (S3's minimum is 5 MiB).
pub const PART_SIZE: usize = 8 << 20;
/// Most multipart parts in flight at once (memory: about this many parts).
pub const PARTS_IN_FLIGHT: usize = 3;

/// A request to the object store failed.
#[derive(Debug, thiserror::Error)]
#[error("object store {url}: cannot {op} {key}: {source}")]
pub struct RemoteError {
    /// The store's URL.
    pub url: String,
    /// What was being done.
    pub op: &'static str,
    /// The key concerned.
    pub key: String,
    /// The client's error.
    #[source]
    pub source: Box<object_store::Error>,
}

/// Why a `--store` URL cannot be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not `s3://`, `gs://`, `az://` (or `azure://`, `abfs://`) or `file://`.
    #[error(
        "unsupported store URL {0:?}: use s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, \
         az://CONTAINER/PREFIX or file:///ABSOLUTE/PATH (or a local directory)"
    )]
    Scheme(String),
    /// A URL without a bucket, or a `file://` URL without an absolute path.
    #[error("store URL {0:?} names no bucket (or, for file://, no absolute path)")]
    NoBucket(String),
    /// The client refused the configuration (credentials, region, endpoint).
    #[error("cannot configure the object store for {url}: {source}")]
    Client {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: object_store::Error,
    },
    /// A configuration key the provider does not know.
    #[error("store {url}: unknown configuration key {key:?}")]
    Option {
        /// The URL.
        url: String,
        /// The key.
        key: String,
    },
    /// The local side of the store could not be set up.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The AWS profile (`AWS_PROFILE`, else `default`) cannot be used.
    #[error(transparent)]
    Profile(#[from] crate::aws_profile::ProfileError),
}

/// Whether `s` names an object store (a URL with a scheme) rather than a local directory.
pub fn is_store_url(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// The bucket side of a remote store.
#[derive(Debug)]
pub(crate) struct Remote {
    url: String,
    client: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    runtime: tokio::runtime::Runtime,
    /// `<spool>/remote-cache/<url hash>/`: index sidecars by digest.
    cache: PathBuf,
}

impl Remote {
    /// Connects to the store `url` (no request is made yet); `spool` is the local store's
    /// layout, under which the sidecar cache lives.
    /// `options` are the provider's configuration keys (`aws_endpoint`, `aws_region`, …, as
    /// the environment names them, lower case), applied over the environment.
    pub(crate) fn open(
        url: &str,
        spool: &Layout,
        options: &[(&str, &str)],
    ) -> Result<Self, UrlError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| UrlError::Scheme(url.to_owned()))?;
        let client_err = |source| UrlError::Client {
            url: url.to_owned(),
            source,
        };
        let (client, prefix): (Arc<dyn ObjectStore>, &str) = match scheme {
            "file" => {
                if !rest.starts_with('/') {
                    return Err(UrlError::NoBucket(url.to_owned()));
                }
                let root = PathBuf::from(rest);
                fs::create_dir_all(&root).at("create directory", &root)?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&root)
                    .map_err(client_err)?;
                (Arc::new(fs), "")
            }
            "s3" | "gs" | "az" | "azure" | "abfs" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(UrlError::NoBucket(url.to_owned()));
                }
                let base = format!("{scheme}://{bucket}");
                let unknown = |key: &str| UrlError::Option {
                    url: url.to_owned(),
                    key: key.to_owned(),
                };
                let client: Arc<dyn ObjectStore> = match scheme {
                    "s3" => {
                        // A named profile first (object_store reads no files), then the
                        // environment over it, as `from_env` reads it, then the options.
                        let env = |name: &str| {
                            let lower = name.to_ascii_lowercase();
                            options
                                .iter()
                                .find(|(k, _)| *k == lower)
                                .map(|(_, v)| (*v).to_owned())
                                .or_else(|| std::env::var(name).ok())
                        };
                        // Every upload carries the SHA-256 of its bytes (of each part, for
                        // a multipart upload), which the bucket checks as it stores them: a
                        // part damaged on the way is refused, not stored. (Without one, S3
                        // and S3-compatible servers fall back to a whole-object CRC64 of
                        // their own, which some compute slowly.) AWS_CHECKSUM_ALGORITHM
                        // overrides it; `none` sends none, for a server that refuses S3's
                        // checksum headers.
                        let no_checksum = env("AWS_CHECKSUM_ALGORITHM")
                            .is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
                        let mut b = object_store::aws::AmazonS3Builder::new();
                        if !no_checksum {
                            b = b.with_checksum_algorithm(object_store::aws::Checksum::SHA256);
                        }
                        let is_checksum =
                            |k: &str| k.eq_ignore_ascii_case("aws_checksum_algorithm");
                        if let Some(profile) = crate::aws_profile::load(&env)? {
                            for (k, v) in profile.settings {
                                b = b.with_config(k.parse().map_err(|_| unknown(k))?, v);
                            }
                        }
                        for (k, v) in std::env::vars() {
                            if k.starts_with("AWS_")
                                && !(no_checksum && is_checksum(&k))
                                && let Ok(key) = k.to_ascii_lowercase().parse()
                            {
                                b = b.with_config(key, v);
                            }
                        }
                        let mut b = b.with_url(base);
                        for (k, v) in options {
                            if no_checksum && is_checksum(k) {
                                continue;
                            }
                            b = b.with_config(k.parse().map_err(|_| unknown(k))?, *v);
                        }
                        Arc::new(b.build().map_err(client_err)?)
                    }
                    "gs" => {
                        let mut b =
                            object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(base);
                        for (k, v) in options {
                            b = b.with_config(k.parse().map_err(|_| unknown(k))?, *v);
                        }
                        Arc::new(b.build().map_err(client_err)?)
                    }
                    _ => {
                        let mut b =
                            object_store::azure::MicrosoftAzureBuilder::from_env().with_url(base);
                        for (k, v) in options {
                            b = b.with_config(k.parse().map_err(|_| unknown(k))?, *v);
                        }
                        Arc::new(b.build().map_err(client_err)?)
                    }
                };
                (client, prefix)
            }
            _ => return Err(UrlError::Scheme(url.to_owned())),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| IoError::bare("start the object store client's runtime", e))?;
        let cache = spool
            .root()
            .join("remote-cache")
            .join(&Digest::of(url.as_bytes()).to_hex()[..16]);
        layout::create_private_dir(&spool.root().join("remote-cache"))?;
        layout::create_private_dir(&cache)?;
        Ok(Self {
            url: url.to_owned(),
            client,
            prefix: ObjPath::from(prefix.trim_matches('/')),
            runtime,
            cache,
        })
    }

    /// The URL the store was opened with.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn key(&self, rel: &str) -> ObjPath {
        if self.prefix.as_ref().is_empty() {
            ObjPath::from(rel)
        } else {
            ObjPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    pub(crate) fn object_key(&self, digest: &Digest) -> ObjPath {
        let hex = digest.to_hex();
        self.key(&format!("objects/{}/{}", &hex[..2], &hex[2..]))
    }

    pub(crate) fn index_key(&self, digest: &Digest) -> ObjPath {
        let hex = digest.to_hex();
        self.key(&format!("objects/{}/{}.idx", &hex[..2], &hex[2..]))
    }

    pub(crate) fn record_key(&self, run_id: &str) -> ObjPath {
        self.key(&format!("records/{run_id}{RECORD_SUFFIX}"))
    }

    /// A path for messages: `URL/records/<run>.json`.
    fn display_path(&self, key: &ObjPath) -> PathBuf {
        let rel = key
            .as_ref()
            .strip_prefix(self.prefix.as_ref())
            .unwrap_or(key.as_ref())
            .trim_start_matches('/');
        PathBuf::from(format!("{}/{rel}", self.url.trim_end_matches('/')))
    }

    fn err(&self, op: &'static str, key: &ObjPath, source: object_store::Error) -> RemoteError {
        RemoteError {
            url: self.url.clone(),
            op,
            key: key.to_string(),
            source: Box::new(source),
        }
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    pub(crate) fn get_all(&self, key: &ObjPath) -> Result<Option<Bytes>, RemoteError> {
        self.block_on(async {
            match self.client.get(key).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .map_err(|e| self.err("read", key, e))
    }

    /// At most `limit + 1` bytes of `key` (a record: never loaded whole when it is huge), with
    /// when it was written.
    fn get_bounded(
        &self,
        key: &ObjPath,
        limit: u64,
    ) -> Result<Option<(Vec<u8>, SystemTime)>, RemoteError> {
        self.block_on(async {
            let r = match self.client.get(key).await {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let modified = r.meta.last_modified.into();
            let mut out = Vec::new();
            let mut stream = r.into_stream();
            while let Some(chunk) = stream.next().await {
                out.extend_from_slice(&chunk?);
                if out.len() as u64 > limit {
                    out.truncate(limit as usize + 1);
                    break;
                }
            }
            Ok(Some((out, modified)))
        })
        .map_err(|e| self.err("read", key, e))
    }

    pub(crate) fn head(
        &self,
        key: &ObjPath,
    ) -> Result<Option<object_store::ObjectMeta>, RemoteError> {
        match self.block_on(self.client.head(key)) {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("look up", key, e)),
        }
    }

    pub(crate) fn put(
        &self,
        key: &ObjPath,
        bytes: Vec<u8>,
        mode: PutMode,
    ) -> Result<bool, RemoteError> {
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match self.block_on(self.client.put_opts(key, PutPayload::from(bytes), opts)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.err("write", key, e)),
        }
    }

    pub(crate) fn delete(&self, key: &ObjPath) -> Result<(), RemoteError> {
        match self.block_on(self.client.delete(key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("delete", key, e)),
        }
    }

    pub(crate) fn list(&self, rel: &str) -> Result<Vec<object_store::ObjectMeta>, RemoteError> {
        let prefix = self.key(rel);
        self.block_on(async {
            let mut out = Vec::new();
            let mut stream = self.client.list(Some(&prefix));
            while let Some(meta) = stream.next().await {
                out.push(meta?);
            }
            Ok(out)
        })
        .map_err(|e| self.err("list", &prefix, e))
    }

    // ---- reads ----

    /// The cached sidecar of `digest`, fetched once (it is immutable: the digest names it).
    fn cached_index_path(&self, digest: &Digest) -> PathBuf {
        self.cache.join(format!("{}.idx", digest.to_hex()))
    }

    fn cached_index(&self, digest: &Digest) -> Result<(PathBuf, File, IndexHeader), ReadError> {
        let path = self.cached_index_path(digest);
        for attempt in 0..2 {
            if !path.exists() {
                let key = self.index_key(digest);
                let Some(bytes) = self.get_all(&key)? else {
                    // No sidecar: the object was never stored, or only its sidecar is gone.
                    if self.head(&self.object_key(digest))?.is_some() {
                        return Err(ReadError::CorruptIndex {
                            digest: *digest,
                            detail: "the index sidecar is missing".to_owned(),
                        });
                    }
                    return Err(ReadError::Missing(*digest));
                };
                let tmp =
                    self.cache
                        .join(format!(".{}.{}.tmp", digest.to_hex(), std::process::id()));
                crate::atomic::write_new_file(&tmp, &bytes).or_else(|e| {
                    let _ = fs::remove_file(&tmp);
                    crate::atomic::write_new_file(&tmp, &bytes).map_err(|_| e)
                })?;
                fs::rename(&tmp, &path).at("cache the index of an object at", &path)?;
            }
            match check_index(digest, &path) {
                Ok((file, header)) => return Ok((path, file, header)),
                // A damaged cache entry is fetched again once; damage in the bucket is reported.
                Err(e) if attempt == 0 => {
                    let _ = fs::remove_file(&path);
                    if !matches!(e, ReadError::CorruptIndex { .. }) {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    pub(crate) fn open_object(self: &Arc<Self>, digest: &Digest) -> Result<Object, ReadError> {
        let (path, file, header) = self.cached_index(digest)?;
        let blob = RemoteBlob {
            remote: Arc::clone(self),
            key: self.object_key(digest),
            digest: *digest,
            window: Mutex::new(None),
            requests: AtomicU64::new(0),
        };
        Ok(Object::remote(*digest, blob, path, file, header))
    }

    // ---- publication ----

    /// Publishes the run whose local record is `record` (its objects are in `spool`), then
    /// removes the local record. See the module documentation for the order.
    pub(crate) fn publish_run(
        self: &Arc<Self>,
        spool: &crate::Store,
        record: &ResultRecord,
    ) -> Result<(), StoreError> {
        let mut digests: Vec<Digest> = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = record.artifacts();
        while let Some(d) = stack.pop() {
            if !seen.insert(d) {
                continue;
            }
            digests.push(d);
            // Kept manifests (a compaction's) root their streams: those must be there too.
            if let Ok(Some(m)) = spool.local_manifest(&d) {
                stack.extend(m.streams.iter().map(|s| s.sha256));
            }
        }
        let lease = Lease::acquire(self, &digests, None)?;
        crate::fault::point("remote: after the lease, before the objects");
        let mut old_hits = Vec::new();
        // Artifacts the record keeps that the spool cannot give (a compaction's references to
        // other runs' output, which only the bucket holds): nothing to upload, and nothing to
        // upload again below. The same test as `Store::readable`'s: a spool copy that does
        // not open (its object gone or of another size) is never uploaded.
        let mut bucket_only = HashSet::new();
        for digest in &digests {
            if Object::open(&spool.layout, digest).is_err() {
                if !self.holds(digest) {
                    return Err(StoreError::KeptArtifactMissing {
                        url: self.url().to_owned(),
                        digest: *digest,
                    });
                }
                bucket_only.insert(*digest);
            } else if let Some(old) = self.publish_object(&spool.layout, digest)? {
                old_hits.push((*digest, old));
            }
        }
        // Old hits: confirmed only when every GC delete decided without our lease has landed.
        if !old_hits.is_empty() || !bucket_only.is_empty() {
            lease.settle();
            for (digest, _) in &old_hits {
                if self.head(&self.object_key(digest))?.is_none() {
                    // A GC took it meanwhile: we still have the bytes.
                    self.upload_object(&spool.layout, digest)?;
                }
            }
            self.confirm_bucket_only(&bucket_only)?;
        }
        crate::fault::point("remote: after the objects, before the record");
        let local = spool.layout.record(&record.run_id);
        let json = fs::read(&local).at("read", &local)?;
        let key = self.record_key(&record.run_id);
        let lease = if lease.lapsed() {
            // Renewals failed long enough that a GC may have stopped counting the lease: a
            // fresh one, then every object is confirmed as an old hit is.
            drop(lease);
            let fresh = Lease::acquire(self, &digests, None)?;
            fresh.settle();
            for digest in digests.iter().filter(|d| !bucket_only.contains(d)) {
                if self.head(&self.object_key(digest))?.is_none() {
                    self.upload_object(&spool.layout, digest)?;
                }
            }
            self.confirm_bucket_only(&bucket_only)?;
            fresh
        } else {
            lease
        };
        self.put(&key, json, PutMode::Overwrite)?;
        crate::fault::point("remote: after the record, before the lease is released");
        // Not deleted: a GC that listed the records before this one was written keeps
        // counting the lease until it ends.
        drop(lease);
        // The bucket has the run now; the spool's copy becomes garbage for the local gc.
        let _ = fs::remove_file(&local);
        Ok(())
    }

    /// Whether the bucket holds `digest` whole: its index sidecar is sound and the object is
    /// there with the size the sidecar gives (a publisher that died between the two leaves
    /// only the sidecar).
    pub(crate) fn holds(self: &Arc<Self>, digest: &Digest) -> bool {
        let Ok((_, _, header)) = self.cached_index(digest) else {
            return false;
        };
        matches!(self.head(&self.object_key(digest)), Ok(Some(meta)) if meta.size == header.total_bytes)
    }

    /// After a lease naming `digests` has settled: each is still in the bucket, else the
    /// record that would keep it is refused (its bytes are not on this machine to put back).
    fn confirm_bucket_only(&self, digests: &HashSet<Digest>) -> Result<(), StoreError> {
        for digest in digests {
            if self.head(&self.object_key(digest))?.is_none() {
                return Err(StoreError::KeptArtifactMissing {
                    url: self.url().to_owned(),
                    digest: *digest,
                });
            }
        }
        Ok(())
    }

    /// A lease naming objects that only the bucket holds, before they are checked: once it
    /// has settled ([`Lease::settle`]) no GC deletes them while it is renewed. A compaction
    /// holds one from the moment it confirms references to other runs' output until its
    /// record is in the bucket.
    pub(crate) fn protect(self: &Arc<Self>, digests: &[Digest]) -> Result<Lease, StoreError> {
        let lease = Lease::acquire(self, digests, None)?;
        lease.settle();
        Ok(lease)
    }

    /// Puts `digest`'s sidecar and object unless an intact copy is there. Returns the age
    /// of an existing copy that is old enough for a GC to collect (a hit that needs
    /// confirming), `None` otherwise.
    pub(crate) fn publish_object(
        &self,
        spool: &Layout,
        digest: &Digest,
    ) -> Result<Option<Duration>, StoreError> {
        let local_idx_path = spool.index(digest);
        let local_idx = fs::read(&local_idx_path).at("read", &local_idx_path)?;
        let header = IndexHeader::decode(&local_idx[..HEADER_LEN.min(local_idx.len())])
            .map_err(|e| IoError::at("read", &local_idx_path, io::Error::other(e.to_string())))?;
        let okey = self.object_key(digest);
        if let Some(meta) = self.head(&okey)? {
            let ikey = self.index_key(digest);
            let same_index = self.get_all(&ikey)?.is_some_and(|b| b[..] == local_idx[..]);
            // Up to the multipart threshold the stored bytes are compared with ours too (one
            // GET): a flipped byte in the bucket is replaced, and a damaged spool copy (an old
            // one a compaction keeps) never replaces a sound bucket copy. Larger copies are
            // checked by size and sidecar only; `verify` checks every block of every object.
            let same_bytes = || -> Result<bool, StoreError> {
                if header.total_bytes > MULTIPART_THRESHOLD {
                    return Ok(true);
                }
                let path = spool.object(digest);
                let ours = fs::read(&path).at("read", &path)?;
                Ok(match self.get_all(&okey)? {
                    Some(theirs) if theirs[..] == ours[..] => true,
                    Some(theirs) if Digest::of(&ours) != *digest => {
                        if Digest::of(&theirs) != *digest {
                            return Err(spool_damaged(&path));
                        }
                        true
                    }
                    _ => false,
                })
            };
            if same_index && meta.size == header.total_bytes && same_bytes()? {
                let modified: SystemTime = meta.last_modified.into();
                let age = SystemTime::now()
                    .duration_since(modified)
                    .unwrap_or_default();
                let safe = MIN_GRACE.saturating_sub(2 * CLOCK_SKEW + HIT_WAIT);
                return Ok((age >= safe).then_some(age));
            }
            // A damaged copy (different size or sidecar): replaced below.
            self.upload_object(spool, digest)?;
            return Ok(None);
        }
        self.upload_object(spool, digest)?;
        Ok(None)
    }

    /// Uploads the sidecar, then the object (replacing what is there).
    pub(crate) fn upload_object(&self, spool: &Layout, digest: &Digest) -> Result<(), StoreError> {
        let idx_path = spool.index(digest);
        let idx = fs::read(&idx_path).at("read", &idx_path)?;
        self.put(&self.index_key(digest), idx, PutMode::Overwrite)?;
        crate::fault::point("remote: after an index sidecar, before its object");
        let path = spool.object(digest);
        let mut file = File::open(&path).at("open", &path)?;
        let len = file.metadata().at("read", &path)?.len();
        let key = self.object_key(digest);
        if len <= MULTIPART_THRESHOLD {
            let mut bytes = Vec::with_capacity(len as usize);
            file.read_to_end(&mut bytes).at("read", &path)?;
            if Digest::of(&bytes) != *digest {
                return Err(spool_damaged(&path));
            }
            self.put(&key, bytes, PutMode::Overwrite)?;
            return Ok(());
        }
        let result: Result<(), StoreError> = self.block_on(async {
            let upload = self
                .client
                .put_multipart(&key)
                .await
                .map_err(|e| self.err("start a multipart upload of", &key, e))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut buf = vec![0u8; PART_SIZE];
            loop {
                let n = read_full(&mut file, &mut buf).at("read", &path)?;
                if n == 0 {
                    break;
                }
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.err("upload a part of", &key, e))?;
                writer.write(&buf[..n]);
            }
            writer
                .finish()
                .await
                .map_err(|e| self.err("complete the multipart upload of", &key, e))?;
            Ok(())
        });
        result
    }

    // ---- leases ----

    pub(crate) fn lease_key(&self, id: &str) -> ObjPath {
        self.key(&format!("leases/{id}.json"))
    }
}

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

    fn writers(
        &self,
        options: &GcOptions,
        _report: &mut GcReport,
    ) -> Result<HashSet<Digest>, StoreError> {
        self.live_leases(options.dry_run)
    }
}

/// Suffix of the spool's cache marker saying that an object is not a manifest.
const NOT_A_MANIFEST: &str = ".not-manifest";

/// Bytes fetched per range request when an object is read whole without its index (verify).
const RAW_WINDOW: u64 = 4 << 20;

/// An object's bytes read from blocking code in windows of [`RAW_WINDOW`], one range request
/// each: memory stays bounded, and no request outlives the client's timeout however large the
/// object.
struct RangeReader<'a> {
    remote: &'a Remote,
    key: ObjPath,
    pos: u64,
    len: u64,
    chunk: Bytes,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.chunk.is_empty() {
            if self.pos >= self.len {
                return Ok(0);
            }
            let end = self.len.min(self.pos + RAW_WINDOW);
            let got = self
                .remote
                .block_on(self.remote.client.get_range(&self.key, self.pos..end));
            self.chunk = match got {
                Ok(bytes) => bytes,
                // Shorter than listed: it ends here.
                Err(e) if is_range_error(&e) => Bytes::new(),
                Err(e) => return Err(io::Error::other(self.remote.err("read", &self.key, e))),
            };
            if self.chunk.is_empty() {
                self.len = self.pos;
                return Ok(0);
            }
            self.pos += self.chunk.len() as u64;
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// `(digest, is_index)` of an object key `.../objects/<2 hex>/<62 hex>[.idx]`.
fn parse_key(key: &str) -> Option<(Digest, bool)> {
    let mut parts = key.rsplit('/');
    let file = parts.next()?;
    let dir = parts.next()?;
    let (file, is_index) = match file.strip_suffix(layout::INDEX_SUFFIX) {
        Some(f) => (f, true),
        None => (file, false),
    };
    Some((layout::parse_object_name(dir, file)?, is_index))
}

/// Checks a sidecar file against `digest`: header checksum, name, block size, length.
fn check_index(digest: &Digest, path: &FsPath) -> Result<(File, IndexHeader), ReadError> {
    let bad = |detail: String| ReadError::CorruptIndex {
        digest: *digest,
        detail,
    };
    let mut file = File::open(path).at("open", path)?;
    let len = file.metadata().at("read", path)?.len();
    let mut raw = [0u8; HEADER_LEN];
    if file.read_exact(&mut raw).is_err() {
        return Err(bad("the index file is truncated".to_owned()));
    }
    let header = IndexHeader::decode(&raw).map_err(|e| bad(e.to_string()))?;
    if header.digest != *digest {
        return Err(bad(format!("it describes artifact {}", header.digest)));
    }
    if header.block_size != BLOCK_SIZE {
        return Err(bad(format!("unexpected block size {}", header.block_size)));
    }
    let expected = HEADER_LEN as u64 + header.block_count() * ENTRY_LEN as u64;
    if len != expected {
        return Err(bad(format!("it has {len} bytes, expected {expected}")));
    }
    Ok((file, header))
}

/// An object in the bucket, read through a window of prefetched blocks.
#[derive(Debug)]
pub(crate) struct RemoteBlob {
    remote: Arc<Remote>,
    key: ObjPath,
    digest: Digest,
    /// `(first byte, bytes)` fetched by the last range request.
    window: Mutex<Option<(u64, Bytes)>>,
    requests: AtomicU64,
}

impl RemoteBlob {
    /// Fetches blocks `first..=last` in one range request unless the window holds them.
    pub(crate) fn want(&self, header: &IndexHeader, first: u64, last: u64) {
        let start = header.block_range(first).0;
        let end = header.block_range(last).1;
        if self.holds(start, end) {
            return;
        }
        // A failed prefetch is not an error here: the block read that follows asks again
        // and reports it.
        let _ = self.fetch(start, end);
    }

    fn holds(&self, start: u64, end: u64) -> bool {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        window
            .as_ref()
            .is_some_and(|(s, b)| *s <= start && end <= *s + b.len() as u64)
    }

    fn fetch(&self, start: u64, end: u64) -> Result<(), ReadError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let bytes = self
            .remote
            .block_on(self.remote.client.get_range(&self.key, start..end));
        let bytes = match bytes {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ReadError::Missing(self.digest));
            }
            // A range past the end: the object is shorter than its index says.
            Err(e) if is_range_error(&e) => Bytes::new(),
            Err(e) => return Err(self.remote.err("read", &self.key, e).into()),
        };
        *self.window.lock().unwrap_or_else(|e| e.into_inner()) = Some((start, bytes));
        Ok(())
    }

    /// Fills `buf` from byte `start`; `false` when the object ends first.
    pub(crate) fn read_exact_at(
        &self,
        header: &IndexHeader,
        buf: &mut [u8],
        start: u64,
    ) -> Result<bool, ReadError> {
        let end = start + buf.len() as u64;
        if !self.holds(start, end) {
            let block = start / u64::from(header.block_size);
            let last = end.saturating_sub(1) / u64::from(header.block_size);
            let (s, e) = (header.block_range(block).0, header.block_range(last).1);
            self.fetch(s, e)?;
            if !self.holds(start, end) {
                return Ok(false);
            }
        }
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let (s, bytes) = window.as_ref().expect("held");
        let from = (start - s) as usize;
        buf.copy_from_slice(&bytes[from..from + buf.len()]);
        Ok(true)
    }

    #[cfg(test)]
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

fn is_range_error(e: &object_store::Error) -> bool {
    let text = e.to_string();
    text.contains("Range") || text.contains("range")
}

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

fn from_unix_ms(ms: u64) -> SystemTime {
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
    fn end_gc(mut self) {
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

/// A spool copy whose bytes do not hash to its name: never put in the bucket.
fn spool_damaged(path: &FsPath) -> StoreError {
    IoError::at(
        "publish",
        path,
        io::Error::other("the spool's copy does not hash to its name (damaged on disk)"),
    )
    .into()
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
