//! The shared store on object storage: `s3://BUCKET/PREFIX`, `gs://`, `az://`, `file://`.
//!
//! A remote [`Store`](crate::Store) is a local store (the *spool*, under the local home) plus a
//! bucket. Captures run exactly as on a local store (bounded memory, streaming digest and line
//! index, crash-safe local publication, the run marked as waiting for this bucket before its
//! record is written: [`crate::outbox`]); once the local record is written the run is
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
//!    [`PARTS_IN_FLIGHT`] in flight, so memory stays bounded). An object the bucket does not
//!    hold yet is put with `PutMode::Create` when it takes one request, so two machines
//!    storing the same bytes store them once (a multipart upload cannot be conditional
//!    through `object_store`; it puts the same bytes over the same bytes); an existing copy
//!    counts as a hit when its sidecar equals ours byte for byte and its size is the indexed
//!    size, and is replaced (overwritten, content-addressed bytes) otherwise. A spool copy is
//!    checked as it is read (every block against its sidecar's CRC-32, the sidecar whole), so
//!    one damaged on disk is never put in the bucket. An object the record keeps that the
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
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
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

mod backend;
mod lease;
mod publish;

pub(crate) use backend::RemoteBackend;
use lease::from_unix_ms;
pub(crate) use lease::{Lease, LeaseBody};
#[cfg(test)]
pub(crate) use publish::Upload;
pub(crate) use publish::discard_local_record;

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
    /// The URL (with its endpoint) is longer than any store's needs to be.
    #[error("store URL {0:?} is longer than {MAX_IDENTITY_BYTES} bytes")]
    TooLong(String),
    /// The URL or its endpoint holds control characters (a newline, a tab).
    #[error("store {0:?} (its URL, endpoint or account) holds control characters")]
    ControlCharacters(String),
}

/// Longest store identity (URL, endpoint, account): far longer than any real one, and
/// bounded because the spool's outbox stores it ([`crate::outbox`]).
pub const MAX_IDENTITY_BYTES: usize = 2048;

/// What tells one store from another: the URL without what does not change the store
/// (repeated and trailing slashes), and where its bucket is (`located`: an S3 endpoint, an
/// Azure account), as ` at LOCATION`.
pub(crate) fn store_identity(scheme: &str, rest: &str, located: Option<&str>) -> String {
    let path: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let mut identity = match scheme {
        "file" => format!("file:///{}", path.join("/")),
        _ => format!("{scheme}://{}", path.join("/")),
    };
    if let Some(at) = located.filter(|l| !l.is_empty()) {
        identity.push_str(" at ");
        identity.push_str(at.trim_end_matches('/'));
    }
    identity
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
    /// What tells this store from another ([`store_identity`]): what the spool's outbox
    /// names ([`crate::outbox`]).
    identity: String,
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
        // Where the bucket is, beyond its name: an S3 endpoint (MinIO, R2 and AWS may hold
        // buckets of one name), an Azure account.
        let mut located = None;
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
                        let mut b = object_store::aws::AmazonS3Builder::new();
                        if let Some(profile) = crate::aws_profile::load(&env)? {
                            for (k, v) in profile.settings {
                                b = b.with_config(k.parse().map_err(|_| unknown(k))?, v);
                            }
                        }
                        // The checksum is set once, at the end, from the option or the
                        // variable.
                        let is_checksum =
                            |k: &str| k.eq_ignore_ascii_case("aws_checksum_algorithm");
                        for (k, v) in std::env::vars() {
                            if k.starts_with("AWS_")
                                && !is_checksum(&k)
                                && let Ok(key) = k.to_ascii_lowercase().parse()
                            {
                                b = b.with_config(key, v);
                            }
                        }
                        let mut b = b.with_url(base);
                        for (k, v) in options.iter().filter(|(k, _)| !is_checksum(k)) {
                            b = b.with_config(k.parse().map_err(|_| unknown(k))?, *v);
                        }
                        // Every upload carries the SHA-256 of its bytes (of each part, for
                        // a multipart upload), which the bucket checks as it stores them: a
                        // part damaged on the way is refused, not stored. (Without one, S3
                        // and S3-compatible servers fall back to a whole-object CRC64 of
                        // their own, which some compute slowly.) AWS_CHECKSUM_ALGORITHM
                        // overrides it; `none` sends none, for a server that refuses S3's
                        // checksum headers.
                        match env("AWS_CHECKSUM_ALGORITHM") {
                            Some(v) if v.trim().eq_ignore_ascii_case("none") => {}
                            Some(v) => {
                                let key = object_store::aws::AmazonS3ConfigKey::Checksum;
                                b = b.with_config(key, v);
                            }
                            None => {
                                b = b.with_checksum_algorithm(object_store::aws::Checksum::SHA256);
                            }
                        }
                        // The S3-only endpoint wins over the general one, as in `build`.
                        use object_store::aws::AmazonS3ConfigKey as Key;
                        located = b
                            .get_config_value(&Key::S3Endpoint)
                            .or_else(|| b.get_config_value(&Key::Endpoint));
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
                        located =
                            b.get_config_value(&object_store::azure::AzureConfigKey::AccountName);
                        Arc::new(b.build().map_err(client_err)?)
                    }
                };
                (client, prefix)
            }
            _ => return Err(UrlError::Scheme(url.to_owned())),
        };
        let identity = store_identity(scheme, rest, located.as_deref());
        if identity.len() > MAX_IDENTITY_BYTES {
            return Err(UrlError::TooLong(url.to_owned()));
        }
        if identity.chars().any(char::is_control) {
            return Err(UrlError::ControlCharacters(identity));
        }
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
            identity,
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

    /// The store as the spool's outbox names it ([`store_identity`]): `s3://b/p/` and
    /// `s3://b/p` are one, the same URL at two endpoints two.
    pub(crate) fn identity(&self) -> &str {
        &self.identity
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
        bytes: impl Into<PutPayload>,
        mode: PutMode,
    ) -> Result<bool, RemoteError> {
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match self.block_on(self.client.put_opts(key, bytes.into(), opts)) {
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

    // ---- leases ----

    pub(crate) fn lease_key(&self, id: &str) -> ObjPath {
        self.key(&format!("leases/{id}.json"))
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
