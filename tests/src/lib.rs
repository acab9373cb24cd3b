//! Shared helpers for the cross-crate tests and the fuzz targets.
