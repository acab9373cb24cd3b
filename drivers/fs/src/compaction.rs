//! Keeping what a compaction retry refers to.
//!
//! The retry input of [`agentrun_core::compaction`] refers to tool output as
//! `read(filePath="artifact://…")`. A [`RetentionSession`] makes each such reference real, and
//! keeps it, for one compaction:
//!
//! * [`RetentionSession::confirm`] checks the artifacts the transcript names (the claims of
//!   [`Action::Verify`](agentrun_core::compaction::Action::Verify)), so a wrong or stale
//!   `artifacts` entry leads to the output being retained, never to a reference that reads
//!   back something else;
//! * [`RetentionSession::retain`] stores each output of an
//!   [`Action::Retain`](agentrun_core::compaction::Action::Retain) as a single-output artifact
//!   named by the SHA-256 of its bytes (identical outputs once), and checks that digest against
//!   the one the reference names;
//! * [`RetentionSession::finish`] writes **one record for the whole compaction**: its output
//!   lists every artifact the retry refers to (one URI a line) and it keeps all of them (the
//!   record's `keeps`), so GC keeps them, and `agentrun gc --expire-records` expires them,
//!   together rather than one reference at a time.
//!
//! Until the record is written, the session's own live capture directory protects what it
//! stored and what it is confirming from a concurrent GC, so the record never names an object
//! that was removed in between. Protection is written and synced once per call, for all the
//! claims of a `confirm` or all the outputs of a `retain` together, not once per artifact:
//! storing thousands of outputs is bound by `fsync`s.

use std::collections::HashSet;

use agentrun_core::compaction::{Claim, Holds, Retention};
use agentrun_core::digest::Digest;
use agentrun_core::{
    ArtifactUri, CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits,
};

use crate::capture::{CaptureSession, CaptureWriteError};
use crate::store::{Store, StoreError};

/// The display of the record that keeps a compaction's references.
pub const RETAINED_DISPLAY: &str = "tool output retained for a compaction retry";

/// Why tool output could not be retained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetainError {
    /// The store refused the capture or its publication.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the capture failed.
    #[error(transparent)]
    Write(#[from] CaptureWriteError),
    /// The compaction refers to more artifacts than one record keeps
    /// ([`MAX_KEEPS`](agentrun_core::record::MAX_KEEPS)). Nothing was kept; the compaction
    /// cannot be retried with these references.
    #[error(
        "the compaction refers to {count} artifacts; one record keeps at most {}",
        agentrun_core::record::MAX_KEEPS
    )]
    TooManyKept {
        /// How many distinct artifacts it would keep.
        count: usize,
    },
    /// The stored artifact is not the one the reference names (the output was changed after
    /// pruning, or the capture is faulty).
    #[error("retained output has digest {stored}, but its reference names {expected}")]
    DigestMismatch {
        /// The digest the reference names.
        expected: Digest,
        /// The digest of what was stored.
        stored: Digest,
    },
}

/// What a [`RetentionSession`] kept, under one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    /// The run id of the record that keeps every reference of the retry.
    pub run_id: String,
    /// The outputs this compaction stored (new, or already in the store), by digest, in order.
    pub stored: Vec<Digest>,
    /// Every artifact the record keeps: the stored outputs, then the confirmed artifacts the
    /// transcript named. The record's output lists these URIs.
    pub kept: Vec<ArtifactUri>,
}

/// The retention of one compaction; see the [module documentation](self).
#[derive(Debug)]
#[must_use = "finish the session to write the record that keeps the references"]
pub struct RetentionSession {
    store: Store,
    /// The capture whose record will keep everything; its directory protects meanwhile.
    keeper: CaptureSession,
    stored: Vec<Digest>,
    stored_set: HashSet<Digest>,
    confirmed: Vec<ArtifactUri>,
    /// Of a shared store: leases naming the confirmed artifacts only the bucket holds, until
    /// the record that keeps them is published (dropped with the session).
    leases: Vec<crate::remote::Lease>,
}

impl Store {
    /// Starts the retention of one compaction.
    pub fn begin_retention(&self) -> Result<RetentionSession, StoreError> {
        let keeper = self.begin_capture(OutputDeclaration::Single, PreviewLimits::default())?;
        Ok(RetentionSession {
            store: self.clone(),
            keeper,
            stored: Vec::new(),
            stored_set: HashSet::new(),
            confirmed: Vec::new(),
            leases: Vec::new(),
        })
    }

    /// Whether the artifact a transcript names holds what the claim says: the URI resolves
    /// (for a stream, the manifest is present and declares it), the object it reads is present
    /// with a sound index, and for [`Holds::Output`] the object is exactly those bytes (its name
    /// is the digest of its bytes, and reads check every block against the index). Any
    /// failure to read means no: the output is then retained instead. A check only: use
    /// [`RetentionSession::confirm`] to also keep what it confirms.
    pub fn confirms(&self, claim: &Claim) -> bool {
        let Ok(object) = self.resolve(&claim.uri) else {
            return false;
        };
        let holds = match claim.holds {
            Holds::Output(digest) => object == digest,
            _ => true,
        };
        holds && self.readable(&object)
    }
}

impl RetentionSession {
    /// Checks claims ([`Store::confirms`]) and returns those confirmed, in order. The record
    /// keeps every claimed artifact that is readable, confirmed or not: a result whose content
    /// is a bounded preview of an artifact (what `agentrun run` shows a model) fails the
    /// exact-output check, so its shown text is retained for the reference, but the preview's
    /// own read hints point at the artifact, which must stay readable as long as the
    /// compaction's references do.
    /// Errs only when the protection cannot be written (the store is unusable).
    pub fn confirm(&mut self, claims: Vec<Claim>) -> Result<Vec<Claim>, RetainError> {
        // All protected before any is checked: a GC after a check cannot remove what was
        // confirmed (for a stream, the manifest roots its streams).
        let digests: Vec<Digest> = claims.iter().map(|c| c.uri.digest).collect();
        self.keeper.protect_more(&digests)?;
        // On a shared store the keeper protects only the spool: what only the bucket holds is
        // named by a lease, settled before it is checked and held until the record is
        // published (the record then keeps it). That includes the streams of a manifest the
        // spool holds, which the bucket alone may hold.
        if let Some(remote) = &self.store.remote {
            let mut outside = Vec::new();
            for d in &digests {
                if self.store.only_in_bucket(d) {
                    outside.push(*d);
                } else if let Ok(Some(manifest)) = self.store.local_manifest(d) {
                    outside.extend(
                        manifest
                            .streams
                            .iter()
                            .map(|s| s.sha256)
                            .filter(|s| self.store.only_in_bucket(s)),
                    );
                }
            }
            if !outside.is_empty() {
                self.leases.push(remote.protect(&outside)?);
            }
        }
        let mut confirmed = Vec::new();
        for claim in claims {
            let holds = self.store.confirms(&claim);
            let readable = holds
                || self.store.confirms(&Claim {
                    uri: claim.uri.clone(),
                    holds: Holds::Readable,
                });
            if readable && !self.confirmed.contains(&claim.uri) {
                self.confirmed.push(claim.uri.clone());
            }
            if holds {
                confirmed.push(claim);
            }
        }
        self.check_kept()?;
        Ok(confirmed)
    }

    /// Refuses a session that would keep more than one record can
    /// ([`RetainError::TooManyKept`]). Checked after each batch: a session refused once is
    /// dropped, and what it stored is collected by GC after the grace period.
    fn check_kept(&self) -> Result<(), RetainError> {
        let count = self.stored.len() + self.confirmed.len();
        if count > agentrun_core::record::MAX_KEEPS {
            return Err(RetainError::TooManyKept { count });
        }
        Ok(())
    }

    /// Stores each output as a single-output artifact named by the SHA-256 of its bytes.
    /// Outputs with the same digest are stored once. Stops at the first failure; what was
    /// stored before it is kept only if the session is finished (otherwise it is unreferenced
    /// and GC removes it after the grace period).
    pub fn retain(&mut self, outputs: &[Retention]) -> Result<(), RetainError> {
        // Every digest about to be stored, protected in one write before the first is
        // published; publishing each then finds its digest protected and writes nothing more
        // (an output whose bytes do not hash to its digest is protected on its own).
        let digests: Vec<Digest> = outputs
            .iter()
            .map(|o| o.digest)
            .filter(|d| !self.stored_set.contains(d))
            .collect();
        self.keeper.protect_more(&digests)?;
        for output in outputs {
            if !self.stored_set.insert(output.digest) {
                continue;
            }
            let mut capture = self
                .store
                .begin_capture(OutputDeclaration::Single, PreviewLimits::default())?;
            let stream = capture.resolve(&OutputChannel::Single)?;
            capture.write(stream, output.text.as_bytes())?;
            let stored = capture.finish_kept_by(&mut self.keeper)?;
            if stored != output.digest {
                return Err(RetainError::DigestMismatch {
                    expected: output.digest,
                    stored,
                });
            }
            self.stored.push(stored);
        }
        self.check_kept()
    }

    /// Writes the one record that keeps every stored and confirmed artifact. `None` when there
    /// is nothing to keep (no record is written).
    pub fn finish(mut self) -> Result<Option<Retained>, RetainError> {
        self.check_kept()?;
        let kept: Vec<ArtifactUri> = self
            .stored
            .iter()
            .map(|d| ArtifactUri::new(*d))
            .chain(self.confirmed)
            .collect();
        if kept.is_empty() {
            return Ok(None);
        }
        let listing: String = kept.iter().map(|u| format!("{u}\n")).collect();
        let stream = self.keeper.resolve(&OutputChannel::Single)?;
        self.keeper.write(stream, listing.as_bytes())?;
        self.keeper.keep(kept.iter().map(|u| u.digest));
        let record = self.keeper.finish(CaptureCompletion::Streamed {
            display: Some(RETAINED_DISPLAY.to_owned()),
            status: CaptureStatus::Succeeded,
        })?;
        Ok(Some(Retained {
            run_id: record.run_id,
            stored: self.stored,
            kept,
        }))
    }
}

#[cfg(test)]
mod tests {
    use agentrun_core::record::MAX_KEEPS;

    use super::*;

    #[test]
    fn a_session_that_would_keep_more_than_a_record_holds_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("s")).unwrap();
        let mut session = store.begin_retention().unwrap();
        // As if MAX_KEEPS outputs were stored: the bound itself is accepted…
        session.stored = (0..MAX_KEEPS)
            .map(|i| Digest::of(&i.to_le_bytes()))
            .collect();
        assert!(session.confirm(Vec::new()).unwrap().is_empty());
        // …one more is refused, by the next batch and by finish.
        session
            .confirmed
            .push(ArtifactUri::new(Digest::of(b"one more")));
        let err = session.confirm(Vec::new()).unwrap_err();
        assert!(
            matches!(err, RetainError::TooManyKept { count } if count == MAX_KEEPS + 1),
            "{err:?}"
        );
        assert!(err.to_string().contains("at most 65536"), "{err}");
        assert!(matches!(
            session.finish(),
            Err(RetainError::TooManyKept { .. })
        ));
        assert!(store.records().unwrap().is_empty(), "no record written");
    }
}
