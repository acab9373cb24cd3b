//! Deterministic fault injection for the crash tests (compiled into test builds only).
//!
//! Every step of publication calls [`point`] with its name: before and after each `fsync` and
//! `rename`. In a test build, when `AGENTRUN_FS_FAULT_AT=N` is set, the N-th point reached by
//! the process kills the process with SIGKILL right there, exactly as a crash would: no
//! destructor runs, no lock is released by code, nothing is cleaned up. The crash test runs a
//! child for N = 1, 2, … until a child finishes without reaching N, and checks the store after
//! each. In other builds `point` is empty and compiles away.

/// The environment variable naming the fault point to die at (test builds only).
#[cfg(test)]
pub(crate) const FAULT_AT_VAR: &str = "AGENTRUN_FS_FAULT_AT";

/// A step of publication; in a test build, the place a simulated crash may happen.
#[cfg(test)]
pub(crate) fn point(name: &'static str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static REACHED: AtomicU64 = AtomicU64::new(0);
    let Some(at) = std::env::var(FAULT_AT_VAR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let n = REACHED.fetch_add(1, Ordering::SeqCst) + 1;
    if n == at {
        eprintln!("fault point {n}: {name}");
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
        // SIGKILL cannot be caught; never return into the step.
        std::process::abort();
    }
}

/// A step of publication (no fault injection outside test builds).
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn point(_name: &'static str) {}
