//! Deterministic fault injection for the crash tests (compiled into test builds only).
//!
//! Every step of publication calls [`point`] with its name: before and after each `fsync` and
//! `rename`. In a test build, when `AGENTRUN_FS_FAULT_AT=N` is set, the N-th point reached by
//! the process kills the process with SIGKILL right there, exactly as a crash would: no
//! destructor runs, no lock is released by code, nothing is cleaned up. The crash test runs a
//! child for N = 1, 2, … until a child finishes without reaching N, and checks the store after
//! each. In other builds `point` is empty and compiles away.
//!
//! A full disk is injected the same way, but without dying: every step of publication that
//! writes calls [`fail_io`] with its name, and a test that called [`no_space_at`] with that
//! name on its own thread gets `ENOSPC` there, once, as if the disk had filled right then.

/// The environment variable naming the fault point to die at (test builds only).
#[cfg(test)]
pub(crate) const FAULT_AT_VAR: &str = "AGENTRUN_FS_FAULT_AT";

/// A step of publication; in a test build, the place a simulated crash may happen.
#[cfg(test)]
pub(crate) fn point(name: &'static str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static REACHED: AtomicU64 = AtomicU64::new(0);
    POINT_LOG.with(|log| {
        if let Some(log) = log.borrow_mut().as_mut() {
            log.push(name);
        }
    });
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

#[cfg(test)]
thread_local! {
    /// The points this thread reached since [`log_points`] (test builds only).
    static POINT_LOG: std::cell::RefCell<Option<Vec<&'static str>>> =
        const { std::cell::RefCell::new(None) };
}

/// Starts recording the name of every [`point`] this thread reaches (test builds only), so
/// a test can check the order of `fsync`s and renames an operation makes.
#[cfg(test)]
pub(crate) fn log_points() {
    POINT_LOG.set(Some(Vec::new()));
}

/// The points this thread reached since [`log_points`], and the recording stopped.
#[cfg(test)]
pub(crate) fn take_points() -> Vec<&'static str> {
    POINT_LOG.take().unwrap_or_default()
}

/// A step of publication (no fault injection outside test builds).
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn point(_name: &'static str) {}

#[cfg(test)]
thread_local! {
    /// The step at which the current thread's [`fail_io`] reports a full disk, and how many
    /// times the step is passed first.
    static NO_SPACE_AT: std::cell::Cell<Option<(&'static str, u32, rustix::io::Errno)>> =
        const { std::cell::Cell::new(None) };
}

/// Makes [`fail_io`] of `step` on this thread fail with `ENOSPC` once, after passing it
/// `passes` times (test builds only). Per thread, so tests running side by side never see
/// each other's faults.
#[cfg(test)]
pub(crate) fn no_space_at(step: &'static str, passes: u32) {
    fail_with_at(step, passes, rustix::io::Errno::NOSPC);
}

/// Like [`no_space_at`], with another error than a full disk.
#[cfg(test)]
pub(crate) fn fail_with_at(step: &'static str, passes: u32, error: rustix::io::Errno) {
    NO_SPACE_AT.set(Some((step, passes, error)));
}

/// A step of publication that writes to the disk; in a test build, where [`no_space_at`]
/// makes the disk be full, once.
#[cfg(test)]
pub(crate) fn fail_io(step: &'static str) -> std::io::Result<()> {
    match NO_SPACE_AT.get() {
        Some((at, 0, error)) if at == step => {
            NO_SPACE_AT.set(None);
            Err(std::io::Error::from_raw_os_error(error.raw_os_error()))
        }
        Some((at, passes, error)) if at == step => {
            NO_SPACE_AT.set(Some((at, passes - 1, error)));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A step of publication that writes to the disk (no fault injection outside test builds).
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn fail_io(_step: &'static str) -> std::io::Result<()> {
    Ok(())
}

/// A test's action at the steps of an operation.
#[cfg(test)]
type StepHook = Box<dyn FnMut(&'static str)>;

#[cfg(test)]
thread_local! {
    /// What [`step`] runs on this thread (test builds only).
    static STEP_HOOK: std::cell::RefCell<Option<StepHook>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes every [`step`] reached on this thread call `hook` with its name (test builds only),
/// so a test can act at an exact point of another operation (another machine publishing
/// while a GC is between two of its reads, say).
#[cfg(test)]
pub(crate) fn on_step(hook: impl FnMut(&'static str) + 'static) {
    STEP_HOOK.set(Some(Box::new(hook)));
}

/// Removes this thread's [`on_step`] hook.
#[cfg(test)]
pub(crate) fn clear_steps() {
    STEP_HOOK.set(None);
}

/// A point between two steps of an operation where a test may act ([`on_step`]).
#[cfg(test)]
pub(crate) fn step(name: &'static str) {
    // Taken out while it runs: what the hook does may reach steps itself.
    let hook = STEP_HOOK.with(|h| h.borrow_mut().take());
    if let Some(mut hook) = hook {
        hook(name);
        STEP_HOOK.with(|h| {
            let mut slot = h.borrow_mut();
            if slot.is_none() {
                *slot = Some(hook);
            }
        });
    }
}

/// A point between two steps (no hooks outside test builds).
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn step(_name: &'static str) {}
