//! Shared helpers for the cross-crate tests and the fuzz targets.
//!
//! * [`checks`]: the properties of SPEC §2–4 as functions that panic only on a violation;
//! * [`fuzz_bodies`]: the fuzz targets' bodies, turning arbitrary bytes into those checks.

pub mod checks;
pub mod fuzz_bodies;
