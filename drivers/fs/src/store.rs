//! The store handle: opening (and checking) a root, locating records.
//!
//! The other operations are implemented next to their concept: captures in
//! [`crate::capture`], reads in [`crate::read`], GC in [`crate::gc`], verification in
//! [`crate::verify`].

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentrun_core::capture::CaptureError;
use agentrun_core::limits::LimitsError;
use agentrun_core::record::{RECORD_FORMATS, RecordParseError};
use agentrun_core::{Digest, ResultRecord};

use crate::backend::{Backend, RecordName};
use crate::error::{IoContext, IoError};
use crate::layout::{self, Layout, RECORD_SUFFIX};

/// Why a store operation (other than a read) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O operation failed; the error names the path.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A store directory is accessible to group or others.
    #[error(
        "store directory {} has mode {mode:04o}; it must be 0700 (owner-only): run chmod 700 {}",
        .path.display(), .path.display()
    )]
    Permissions {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A store directory belongs to another user.
    #[error(
        "store directory {} is owned by uid {owner}, but agentrun runs as uid {uid}; use a store \
         directory you own (--store DIR or AGENTRUN_HOME), or give it to uid {uid} with \
         chown {uid} {}",
        .path.display(), .path.display()
    )]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        uid: u32,
    },
    /// Something other than a directory sits where the store needs one.
    #[error(
        "{} is not a directory; move it away or choose another store",
        .path.display()
    )]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// No environment variable locates a default store.
    #[error(
        "cannot locate the default store: set AGENTRUN_HOME (or HOME), or open a store by path"
    )]
    NoHome,
    /// The preview limits of a capture are invalid.
    #[error("invalid preview limits: {0}")]
    Limits(#[from] LimitsError),
    /// The capture could not start or take a chunk.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// The completion does not fit the capture (mixed completion modes, a second full output).
    /// The output streamed before it was kept, as a failed run marked incomplete.
    #[error(
        "completion rejected: {error}; the output streamed before it was kept, marked incomplete, \
         as run {run_id}"
    )]
    CompletionRejected {
        /// Why the completion was refused.
        error: CaptureError,
        /// The run that holds the streamed output.
        run_id: String,
    },
    /// A run id that cannot name a record.
    #[error(
        "invalid run id {0:?}: run ids are 1-128 characters of A-Z, a-z, 0-9, '-', '_' and '.', \
         not starting with '.'"
    )]
    InvalidRunId(String),
    /// No record of that run exists.
    #[error("no record of run {0} in this store")]
    UnknownRun(String),
    /// A record file cannot be parsed.
    #[error(
        "record {} is corrupt ({detail}); run `agentrun verify`, and remove the file if it \
         cannot be repaired",
        .path.display()
    )]
    CorruptRecord {
        /// The record file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// A record's `run_id` is not the run its file is named after: agentrun did not write it
    /// there (a copied, renamed or forged file), and its id must not be trusted to name
    /// anything.
    #[error(
        "record {} says it is run {run_id:?}, but its file is named after run {expected}: it was \
         not written there by agentrun; move it out of {}",
        .path.display(), .path.parent().map_or_else(String::new, |p| p.display().to_string())
    )]
    RecordRunIdMismatch {
        /// The record file.
        path: PathBuf,
        /// The run id the record holds.
        run_id: String,
        /// The run id its file name gives.
        expected: String,
    },
    /// A record names a format this version does not read: a newer agentrun wrote it.
    #[error(
        "record {} has format {format:?}, which this agentrun does not read (it reads {}); a \
         newer agentrun wrote it: use that one",
        .path.display(), RECORD_FORMATS.join(" and ")
    )]
    RecordFormatUnknown {
        /// The record file.
        path: PathBuf,
        /// The format it names.
        format: String,
    },
    /// A record file is larger than any record agentrun writes
    /// ([`MAX_RECORD_BYTES`](agentrun_core::record::MAX_RECORD_BYTES)): it is damaged or not
    /// agentrun's. It is refused by its size (or, if it grew while being read, after
    /// `limit + 1` bytes), never read whole.
    #[error(
        "record {} is {size} bytes, more than the {limit} bytes a record can be: it is damaged \
         or was not written by agentrun: move it out of {} (keep it if it may hold a record \
         you need)",
        .path.display(), .path.parent().map_or_else(String::new, |p| p.display().to_string())
    )]
    RecordTooLarge {
        /// The record file.
        path: PathBuf,
        /// Its size (for a file that grew while being read: the bytes read before stopping).
        size: u64,
        /// The largest record size.
        limit: u64,
    },
    /// A run's command is longer than
    /// [`MAX_COMMAND_BYTES`](agentrun_core::process::MAX_COMMAND_BYTES) (as
    /// [`command_bytes`](agentrun_core::process::command_bytes) counts it).
    #[error(
        "the command is {bytes} bytes long (as UTF-8, one byte more per argument); a record \
         holds at most {} (1 MiB): pass large inputs on stdin or in a file",
        agentrun_core::process::MAX_COMMAND_BYTES
    )]
    CommandTooLong {
        /// Its length.
        bytes: usize,
    },
    /// A run's label or working directory is longer than a record holds
    /// ([`MAX_LABEL_BYTES`](agentrun_core::process::MAX_LABEL_BYTES),
    /// [`MAX_CWD_BYTES`](agentrun_core::process::MAX_CWD_BYTES)).
    #[error("the run's {what} is {bytes} bytes long; a record holds at most {limit}")]
    RunFieldTooLong {
        /// `label` or `working directory`.
        what: &'static str,
        /// Its length.
        bytes: usize,
        /// The most a record holds.
        limit: usize,
    },
    /// Something already exists at a caller-supplied result-sink path.
    #[error(
        "the result-sink path {} already exists; remove it or choose a new path (it is never \
         overwritten, and an earlier answer there must not pass for this run's)",
        .path.display()
    )]
    SinkPathExists {
        /// The path.
        path: PathBuf,
    },
    /// GC found an entry in `records/` it cannot read as a record, and removed nothing: the
    /// artifacts that record references would otherwise be lost.
    #[error(
        "gc removed nothing: {} {detail}, and the output of that run would be lost if its \
         artifacts were collected; run `agentrun verify` to see all damage, then move the entry \
         out of {} (keep it if it may hold a record you need) and run gc again",
        .path.display(), .path.parent().map_or_else(String::new, |p| p.display().to_string())
    )]
    GcRefused {
        /// The entry in `records/`.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// GC found a record of a format it does not know, and removed nothing: that record may
    /// keep artifacts in ways this version cannot see.
    #[error(
        "gc removed nothing: record {} has format {format:?}, which this agentrun does not know \
         (a newer agentrun wrote it), so it cannot tell which artifacts that record keeps; run \
         gc with the agentrun that wrote it",
        .path.display()
    )]
    GcRecordFormatUnknown {
        /// The record file.
        path: PathBuf,
        /// The format it names.
        format: String,
    },
    /// The store's file system has no room for what a run's publication needs (the record,
    /// the index and manifest), which is set aside before the run starts so that a disk the
    /// output fills still gets the run's record. Nothing was run.
    #[error(
        "no room for a run's record in {}: at least {needed} bytes are set aside before a run \
         starts, so that its record can be written even if the output fills the disk, and the \
         file system has less ({source}); free space there (delete the records of runs you no \
         longer need, then `agentrun gc` removes their output) and run again",
        .path.display()
    )]
    NoSpace {
        /// The store's root.
        path: PathBuf,
        /// The bytes it needed.
        needed: u64,
        /// The allocation error.
        #[source]
        source: std::io::Error,
    },
    /// A request to the object store failed (boxed: it is large, and rare).
    #[error(transparent)]
    Remote(Box<crate::remote::RemoteError>),
    /// A GC of a shared store could not renew its lease, so other GCs may have removed leases
    /// it still counts; it stopped before deciding on more deletes.
    #[error(
        "gc of {url} stopped: its lease in the bucket could not be renewed for 40 seconds, so \
         it can no longer rely on what other machines' leases protect; check the connection to \
         the object store and run gc again"
    )]
    GcLeaseLapsed {
        /// The store's URL.
        url: String,
    },
    /// A store URL cannot be opened.
    #[error(transparent)]
    Url(Box<crate::remote::UrlError>),
    /// A record to be published keeps an artifact that neither the local spool nor the
    /// bucket holds (a compaction referred to another run's output, and it was removed
    /// before this record could keep it). Nothing names it: the record was not published.
    #[error(
        "the record would keep artifact {digest}, which is in neither the local spool nor \
         {url} (removed since it was confirmed); the record was not published"
    )]
    KeptArtifactMissing {
        /// The store's URL.
        url: String,
        /// The artifact.
        digest: Digest,
    },
    /// On a shared store: the run was captured and recorded in the local spool, but could not
    /// be published to the bucket (unreachable, credentials refused). It stays complete in
    /// the spool; [`Store::unpublished`] lists it and [`Store::publish`] sends it later.
    #[error(
        "run {run_id} is complete in the local spool but could not be published to {url}: \
         {source}; `agentrun publish` sends it once the bucket can be reached"
    )]
    NotPublished {
        /// The run.
        run_id: String,
        /// The store's URL.
        url: String,
        /// Why the publication failed.
        source: Box<StoreError>,
    },
    /// On a shared store: the spool holds a record of the run, but not one waiting for this
    /// bucket: a run of the local store in the same home, or one captured for another bucket.
    /// It is neither published to this bucket nor given up for it.
    #[error(
        "run {run_id} in the local spool does not wait for {url}: {}",
        describe_destination(.waits_for)
    )]
    NotWaitingForThisStore {
        /// The run.
        run_id: String,
        /// This store: its URL, and its endpoint or account when one is configured.
        url: String,
        /// The store the run was captured for (likewise); `None` for a run of the local
        /// store.
        waits_for: Option<String>,
    },
    /// A file in the spool's outbox (which says the bucket a spooled run waits for) is not
    /// one agentrun wrote.
    #[error(
        "{} is damaged ({detail}); remove it, and its run counts as a local one (which \
         `agentrun publish --adopt RUN_ID` gives to a shared store)",
        .path.display()
    )]
    CorruptOutboxMark {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// A captured stream's file does not hold the bytes that were accepted for it.
    #[error("capture file {} is shorter than the {expected} bytes accepted for it", .path.display())]
    CaptureFileTruncated {
        /// The capture file.
        path: PathBuf,
        /// Bytes accepted.
        expected: u64,
    },
}

impl From<crate::remote::RemoteError> for StoreError {
    fn from(e: crate::remote::RemoteError) -> Self {
        StoreError::Remote(Box::new(e))
    }
}

impl From<crate::remote::UrlError> for StoreError {
    fn from(e: crate::remote::UrlError) -> Self {
        StoreError::Url(Box::new(e))
    }
}

/// A content-addressed artifact store rooted at one owner-only directory.
///
/// Cheap to clone; every clone refers to the same root. All methods block on file I/O: async
/// drivers call them on their blocking pools.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) layout: Arc<Layout>,
    /// The bucket of a shared store (`s3://…`); `None` for a local store. The layout is
    /// then the local spool.
    pub(crate) remote: Option<Arc<crate::remote::Remote>>,
}

impl Store {
    /// Opens the store at `root`, creating missing directories (mode 0700).
    ///
    /// `root` may also be an object-store URL (`s3://BUCKET/PREFIX`, `gs://…`, `az://…`,
    /// `file:///PATH`): the shared store in that bucket, spooling captures in the default
    /// local root ([`Store::default_root`]); see [`Store::open_url`].
    ///
    /// Refuses a root or store subdirectory that is not owner-only or that another user owns,
    /// with a message saying how to fix it.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store, StoreError> {
        let root = root.into();
        if let Some(url) = root.to_str().filter(|s| crate::remote::is_store_url(s)) {
            return Store::open_url(url, Store::default_root()?);
        }
        Store::open_local(root)
    }

    /// Opens the shared store at the object-store URL `url`, with `spool` as the local
    /// store where captures are spooled before they are published to the bucket (and where
    /// index sidecars read from the bucket are cached). Credentials, region and endpoint
    /// come from the provider's standard environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …;
    /// `GOOGLE_*`; `AZURE_*`). No request is made until the store is used.
    pub fn open_url(url: &str, spool: impl Into<PathBuf>) -> Result<Store, StoreError> {
        Store::open_url_with(url, spool, &[])
    }

    /// [`Store::open_url`] with explicit provider settings (`("aws_endpoint",
    /// "http://127.0.0.1:9000")`, `("aws_region", "eu-west-1")`, …: the environment
    /// variables' names in lower case), applied over the environment.
    pub fn open_url_with(
        url: &str,
        spool: impl Into<PathBuf>,
        options: &[(&str, &str)],
    ) -> Result<Store, StoreError> {
        let mut store = Store::open_local(spool.into())?;
        let remote = crate::remote::Remote::open(url, &store.layout, options)?;
        store.remote = Some(Arc::new(remote));
        Ok(store)
    }

    /// The store's URL when it is a shared store on object storage.
    pub fn url(&self) -> Option<&str> {
        self.remote.as_deref().map(crate::remote::Remote::url)
    }

    /// This store's local side alone (of a shared store: the spool).
    pub(crate) fn local_only(&self) -> Store {
        Store {
            layout: Arc::clone(&self.layout),
            remote: None,
        }
    }

    /// The manifest under `digest` in the local side (the spool), if that object is one.
    pub(crate) fn local_manifest(
        &self,
        digest: &agentrun_core::Digest,
    ) -> Result<Option<agentrun_core::Manifest>, crate::ReadError> {
        self.local_only().manifest(digest)
    }

    fn open_local(root: PathBuf) -> Result<Store, StoreError> {
        // Absolute, so errors name an unambiguous path and a later chdir changes nothing.
        let root = std::path::absolute(&root).at("resolve", &root)?;
        if !layout::exists(&root)?
            && let Some(parent) = root.parent()
        {
            // Parents are ordinary directories (e.g. ~/.local/share); only the store itself
            // is made owner-only.
            fs::create_dir_all(parent).at("create directory", parent)?;
        }
        let layout = Layout::new(root);
        for dir in layout.directories() {
            layout::create_private_dir(&dir)?;
            layout::check_private_dir(&dir)?;
        }
        let lock = layout.gc_lock();
        layout::append_private_file(&lock)?;
        Ok(Store {
            layout: Arc::new(layout),
            remote: None,
        })
    }

    /// The default root: `$AGENTRUN_HOME`, else `$XDG_DATA_HOME/agentrun`, else
    /// `$HOME/.local/share/agentrun`. Empty variables count as unset.
    pub fn default_root() -> Result<PathBuf, StoreError> {
        default_root_from(|name| std::env::var_os(name))
    }

    /// The root directory (of a shared store: its local spool).
    pub fn root(&self) -> &Path {
        self.layout.root()
    }

    /// The reserved directory for per-run runtime directories (result sinks).
    pub fn runtime_dir(&self) -> PathBuf {
        self.layout.runtime()
    }

    /// The persisted record of run `run_id`.
    pub fn record(&self, run_id: &str) -> Result<ResultRecord, StoreError> {
        if !layout::valid_run_id(run_id) {
            return Err(StoreError::InvalidRunId(run_id.to_owned()));
        }
        self.with_backend(|backend| match backend.read_record(run_id)? {
            Some(stored) => parse_record(&backend.record_location(run_id), &stored.bytes),
            None => Err(StoreError::UnknownRun(run_id.to_owned())),
        })
    }

    /// The run ids of all persisted records, oldest first (run ids sort by start time).
    pub fn records(&self) -> Result<Vec<String>, StoreError> {
        self.with_backend(record_ids)
    }

    /// On a shared store: the runs the spool holds whose publication to the bucket has not
    /// finished, oldest first. A capture publishes its run as it ends; when that fails (the
    /// bucket unreachable, credentials refused) the run stays complete in the spool, and is
    /// listed here until [`Store::publish`] succeeds. Runs being published right now are
    /// listed too ([`Store::publish`] leaves those to their publisher). Only runs captured
    /// for this store are listed: the spool's home may also hold a local store's runs, or
    /// runs waiting for other buckets, and those stay where they are. Empty on a local
    /// store.
    pub fn unpublished(&self) -> Result<Vec<String>, StoreError> {
        let Some(remote) = &self.remote else {
            return Ok(Vec::new());
        };
        let mut waiting = Vec::new();
        for run_id in self.local_only().records()? {
            match crate::outbox::destination(&self.layout, &run_id) {
                Ok(Some(identity)) if identity == remote.identity() => waiting.push(run_id),
                Ok(_) => {}
                // It may be this store's: listed, so that publishing it says what is wrong.
                Err(StoreError::CorruptOutboxMark { .. }) => waiting.push(run_id),
                Err(e) => return Err(e),
            }
        }
        Ok(waiting)
    }

    /// Makes the spool's local run `run_id` one that waits for this store, so that
    /// [`Store::publish`] sends it: for a run recorded while the directory was a local store,
    /// or spooled by an agentrun that did not yet mark the bucket a run was captured for.
    /// `Ok(true)` once marked, `Ok(false)` when it already waits for this store (or on a local
    /// store); [`StoreError::NotWaitingForThisStore`] when it waits for another one.
    pub fn adopt_unpublished(&self, run_id: &str) -> Result<bool, StoreError> {
        let Some(remote) = &self.remote else {
            return Ok(false);
        };
        if !layout::valid_run_id(run_id) {
            return Err(StoreError::InvalidRunId(run_id.to_owned()));
        }
        // Shared, as a capture marks: the spool's gc is not between the mark and its check.
        let _gc = crate::lock::GcLock::shared(&self.layout)?;
        match self.check_waiting(remote, run_id) {
            Ok(()) => Ok(false),
            Err(StoreError::NotWaitingForThisStore {
                waits_for: None, ..
            }) => {
                crate::outbox::mark(&self.layout, run_id, remote.identity())?;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// `Ok(())` when the spool's `run_id` waits for this store's bucket, else
    /// [`StoreError::NotWaitingForThisStore`] (after [`StoreError::UnknownRun`] when the
    /// spool holds no record of it).
    fn check_waiting(
        &self,
        remote: &crate::remote::Remote,
        run_id: &str,
    ) -> Result<(), StoreError> {
        if !layout::exists(&self.layout.record(run_id))? {
            return Err(StoreError::UnknownRun(run_id.to_owned()));
        }
        match crate::outbox::destination(&self.layout, run_id)? {
            Some(identity) if identity == remote.identity() => Ok(()),
            waits_for => Err(StoreError::NotWaitingForThisStore {
                run_id: run_id.to_owned(),
                // With its endpoint: a run captured for the same URL at another endpoint
                // must not read as waiting for "the same" store.
                url: remote.identity().to_owned(),
                waits_for,
            }),
        }
    }

    /// Publishes an [unpublished](Store::unpublished) run to the bucket, in the order a
    /// capture does (objects, then the record), then removes it from the spool's records.
    /// `Ok(false)` when another process is publishing it right now (its own capture, say):
    /// one publisher per run at a time, so nothing is uploaded twice. On a local store there
    /// is nothing to publish: `Ok(false)`. [`StoreError::UnknownRun`] when the spool does not
    /// hold `run_id` (published meanwhile, or never captured here);
    /// [`StoreError::NotWaitingForThisStore`] when it holds a run that was not captured for
    /// this store.
    pub fn publish(&self, run_id: &str) -> Result<bool, StoreError> {
        let Some(remote) = &self.remote else {
            return Ok(false);
        };
        let record = self.local_only().record(run_id)?;
        self.check_waiting(remote, run_id)?;
        remote.publish_run(self, &record, false)
    }

    /// Gives up an [unpublished](Store::unpublished) run that can never be published (a
    /// compaction's kept artifact gone from the bucket, its spool copy damaged with no copy
    /// in the bucket): its record leaves the spool, and the spool's next `gc` collects its
    /// output. The run is lost. [`StoreError::UnknownRun`] when the spool does not hold it;
    /// `Ok(false)` when another process is publishing it right now, or on a local store
    /// (whose records are never dropped this way). [`StoreError::NotWaitingForThisStore`]
    /// when the spool's run was not captured for this store (a local run is never dropped).
    pub fn discard_unpublished(&self, run_id: &str) -> Result<bool, StoreError> {
        let Some(remote) = &self.remote else {
            return Ok(false);
        };
        if !layout::valid_run_id(run_id) {
            return Err(StoreError::InvalidRunId(run_id.to_owned()));
        }
        self.check_waiting(remote, run_id)?;
        crate::remote::discard_local_record(&self.layout, run_id)
    }
}

/// What [`StoreError::NotWaitingForThisStore`] says of the run.
fn describe_destination(waits_for: &Option<String>) -> String {
    match waits_for {
        Some(other) => format!("it was captured for {other}"),
        None => "it is a run of the local store there".to_owned(),
    }
}

/// The run ids of every record `backend` holds, oldest first.
pub(crate) fn record_ids(backend: &dyn Backend) -> Result<Vec<String>, StoreError> {
    let mut ids: Vec<String> = backend
        .list_records()?
        .into_iter()
        .filter_map(|entry| match entry.name {
            RecordName::Record(id) => Some(id),
            _ => None,
        })
        .collect();
    ids.sort();
    Ok(ids)
}

/// [`Store::default_root`] over an environment lookup (a parameter, so tests need not
/// mutate the process environment).
fn default_root_from(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, StoreError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(home) = var("AGENTRUN_HOME") {
        return Ok(home);
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(data) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Ok(data.join("agentrun"));
    }
    var("HOME")
        .map(|h| h.join(".local/share/agentrun"))
        .ok_or(StoreError::NoHome)
}

/// The run id of a record file name (`<run_id>.json`), if it is one.
pub(crate) fn record_id(name: &std::ffi::OsStr) -> Option<String> {
    let id = name.to_str()?.strip_suffix(RECORD_SUFFIX)?;
    layout::valid_run_id(id).then(|| id.to_owned())
}

/// Parses a record file's bytes; a record whose `run_id` is not the one its file name
/// (`<run id>.json`) gives is refused.
pub(crate) fn parse_record(path: &Path, bytes: &[u8]) -> Result<ResultRecord, StoreError> {
    let record = ResultRecord::from_json(bytes).map_err(|e| match e {
        RecordParseError::UnknownFormat { format } => StoreError::RecordFormatUnknown {
            path: path.to_owned(),
            format,
        },
        e => StoreError::CorruptRecord {
            path: path.to_owned(),
            detail: e.to_string(),
        },
    })?;
    if let Some(expected) = path.file_name().and_then(record_id)
        && record.run_id != expected
    {
        return Err(StoreError::RecordRunIdMismatch {
            path: path.to_owned(),
            run_id: record.run_id,
            expected,
        });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn open_creates_an_owner_only_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("a/b/store");
        let store = Store::open(&root).unwrap();
        assert_eq!(store.root(), root);
        for sub in ["", "objects", "captures", "records", "runtime"] {
            assert_eq!(mode(&root.join(sub)), 0o700, "{sub}");
        }
        assert_eq!(mode(&root.join("gc.lock")), 0o600);
        // Reopening an existing store works.
        Store::open(&root).unwrap();
    }

    #[test]
    fn open_refuses_a_root_readable_by_others_and_says_how_to_fix_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let err = Store::open(&root).unwrap_err();
        assert!(
            matches!(err, StoreError::Permissions { mode: 0o755, .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert_eq!(
            msg,
            format!(
                "store directory {0} has mode 0755; it must be 0700 (owner-only): run chmod 700 {0}",
                root.display()
            )
        );
    }

    #[test]
    fn open_refuses_an_open_subdirectory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        Store::open(&root).unwrap();
        fs::set_permissions(root.join("objects"), fs::Permissions::from_mode(0o750)).unwrap();
        let err = Store::open(&root).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("{}", root.join("objects").display()))
        );
        assert!(err.to_string().contains("chmod 700"));
    }

    #[test]
    fn open_refuses_a_root_owned_by_another_user() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        if std::os::unix::fs::chown(&root, Some(12345), None).is_err() {
            eprintln!("skipped: not allowed to chown (tests need root for this case)");
            return;
        }
        let err = Store::open(&root).unwrap_err();
        assert!(
            matches!(err, StoreError::ForeignOwner { owner: 12345, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("owned by uid 12345"), "{err}");
    }

    #[test]
    fn open_refuses_a_file_as_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        fs::write(&root, b"x").unwrap();
        assert!(matches!(
            Store::open(&root),
            Err(StoreError::NotADirectory { .. })
        ));
    }

    #[test]
    fn default_root_follows_the_environment_in_order() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let all = env(&[
            ("AGENTRUN_HOME", "/a"),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(default_root_from(all).unwrap(), PathBuf::from("/a"));
        let xdg = env(&[
            ("AGENTRUN_HOME", ""),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(
            default_root_from(xdg).unwrap(),
            PathBuf::from("/x/agentrun")
        );
        let home = env(&[("XDG_DATA_HOME", "relative"), ("HOME", "/h")]);
        assert_eq!(
            default_root_from(home).unwrap(),
            PathBuf::from("/h/.local/share/agentrun")
        );
        assert!(matches!(
            default_root_from(env(&[])),
            Err(StoreError::NoHome)
        ));
    }

    #[test]
    fn handles_cross_threads() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<Store>();
        sync::<Store>();
        send::<crate::CaptureSession>();
    }

    #[test]
    fn unknown_and_invalid_runs_are_distinct_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        assert!(matches!(
            store.record("0-0-0"),
            Err(StoreError::UnknownRun(_))
        ));
        assert!(matches!(
            store.record("../x"),
            Err(StoreError::InvalidRunId(_))
        ));
        fs::write(store.layout.record("bad"), b"{").unwrap();
        assert!(matches!(
            store.record("bad"),
            Err(StoreError::CorruptRecord { .. })
        ));
        assert_eq!(store.records().unwrap(), ["bad"]);
    }
}
