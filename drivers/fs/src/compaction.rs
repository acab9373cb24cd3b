//! Retaining tool output before a compaction retry.
//!
//! The retry input of [`agentrun_core::compaction`] refers to each ordinary tool output as
//! `read(filePath="artifact://<sha256>")`. [`Store::retain_outputs`] makes those references
//! real: every output of an [`Action::Retain`](agentrun_core::compaction::Action::Retain) is
//! captured as a single-output artifact with its own terminal record (so GC keeps it like any
//! run's output), and its digest is checked against the one the reference names.
//!
//! A transcript may already name artifacts for its outputs; [`Store::confirms`] checks each
//! such claim of an [`Action::Verify`](agentrun_core::compaction::Action::Verify) before the
//! retry refers to it, so a wrong or stale `artifacts` entry leads to the output being
//! retained, never to a reference that reads back something else.

use agentrun_core::compaction::{Claim, Holds, Retention};
use agentrun_core::digest::Digest;
use agentrun_core::{
    CaptureCompletion, CaptureStatus, OutputChannel, OutputDeclaration, PreviewLimits,
};

use crate::capture::CaptureWriteError;
use crate::store::{Store, StoreError};

/// The display of a record that holds a retained tool output.
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

/// What [`Store::retain_outputs`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    /// The artifact, as its references name it.
    pub digest: Digest,
    /// The run id of the record that keeps it.
    pub run_id: String,
}

impl Store {
    /// Whether the artifact a transcript names holds what the claim says: the URI resolves
    /// (for a stream, the manifest is present and declares it), the object it reads is present
    /// with a sound index, and for [`Holds::Output`] the object is exactly those bytes (its name
    /// is the digest of its bytes, and reads check every block against the index). Any
    /// failure to read means no: the output is then retained instead.
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

    /// Stores each output as a single-output artifact named by the SHA-256 of its bytes, each
    /// under its own record. Outputs with the same digest are stored once. Stops at the first
    /// failure; what was stored before it stays (it is ordinary, referenced output).
    pub fn retain_outputs(&self, outputs: &[Retention]) -> Result<Vec<Retained>, RetainError> {
        let mut seen = std::collections::HashSet::new();
        let mut retained = Vec::with_capacity(outputs.len());
        for output in outputs {
            if !seen.insert(output.digest) {
                continue;
            }
            let mut capture =
                self.begin_capture(OutputDeclaration::Single, PreviewLimits::default())?;
            let stream = capture.resolve(&OutputChannel::Single)?;
            capture.write(stream, output.text.as_bytes())?;
            let record = capture.finish(CaptureCompletion::Streamed {
                display: Some(RETAINED_DISPLAY.to_owned()),
                status: CaptureStatus::Succeeded,
            })?;
            let stored = record.output_uri().digest;
            if stored != output.digest {
                return Err(RetainError::DigestMismatch {
                    expected: output.digest,
                    stored,
                });
            }
            retained.push(Retained {
                digest: stored,
                run_id: record.run_id,
            });
        }
        Ok(retained)
    }
}
