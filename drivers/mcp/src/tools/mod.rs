//! The server's tools, one module each.

pub(crate) mod compact;
