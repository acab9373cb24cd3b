//! The child's process group: stop signals sent to it, probes of whether it still has a
//! member that runs (signal 0 and `/proc`), and a descriptor that turns readable when the
//! child exits.

use std::os::fd::OwnedFd;

use agentrun_core::harness::StopSignal;
use rustix::process::{Pid, Signal};

/// The OS signal for a stop signal.
pub fn os_signal(signal: StopSignal) -> Signal {
    match signal {
        StopSignal::Interrupt => Signal::INT,
        StopSignal::Terminate => Signal::TERM,
    }
}

/// Whether a signal sent to a process group found a process in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// The group exists (the signal, if any, was sent).
    Sent,
    /// The group has no process left (or there was no group to signal).
    NoGroup,
    /// Signal 0 still finds the group, but a scan of `/proc` saw no member that runs (only
    /// zombies, or none at all): it gets SIGKILL before it counts as empty, since the scan
    /// may have missed one ([`probe_group`]).
    OnlyZombies,
}

/// Sends `signal` to process group `group`.
pub fn signal_group(group: Option<Pid>, signal: Signal) -> Delivery {
    match group {
        Some(group) => match rustix::process::kill_process_group(group, signal) {
            Err(rustix::io::Errno::SRCH) => Delivery::NoGroup,
            // EPERM and the like: the group is there, we cannot do more than try.
            _ => Delivery::Sent,
        },
        None => Delivery::NoGroup,
    }
}

/// Looks whether process group `group` still has a process (signal 0), without signalling it.
/// With `scan`, a group in which `/proc` shows no member that runs is
/// [`Delivery::OnlyZombies`] (see [`has_live_member`]); the scan reads `/proc`, so callers
/// do it now and then, not on every probe. Only [`Delivery::NoGroup`] proves the group
/// empty: the scan can miss a live member, so its verdict must be followed by SIGKILL.
pub fn probe_group(group: Option<Pid>, scan: bool) -> Delivery {
    let Some(group) = group else {
        return Delivery::NoGroup;
    };
    match rustix::process::test_kill_process_group(group) {
        Err(rustix::io::Errno::SRCH) => Delivery::NoGroup,
        _ if scan && has_live_member(group) == Some(false) => Delivery::OnlyZombies,
        // EPERM and the like: a process is there, only not ours to signal.
        _ => Delivery::Sent,
    }
}

/// Whether process group `group` has a member that runs, from `/proc` (`None`: `/proc`
/// cannot be read, or is not this process's view of the system). Signal 0 counts zombies,
/// and an orphan's zombie stays in its group for as long as the reaper of orphans does not
/// reap it (forever when that is a container's first process that never waits for
/// strangers, such as the runner itself): no grace would end early for a group holding one.
/// A zombie runs no code, so it cleans up nothing; and it keeps its group's id taken, so no
/// other group can get it meanwhile.
///
/// `Some(false)` is no proof: a process hidden from us (a `/proc` mounted with `hidepid`)
/// is not seen, which is why the caller kills the group on it rather than trusting it.
fn has_live_member(group: Pid) -> Option<bool> {
    // A `/proc` of another PID namespace (a `unshare --pid` without its own mount) lists
    // other ids than the ones our signals use: no group would ever be found in it.
    let own = std::fs::read_link("/proc/self").ok()?;
    if !proc_is_ours(own.as_os_str(), std::process::id()) {
        return None;
    }
    let group = group.as_raw_pid();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // Gone since the listing, or not readable: not a member we can see.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if is_live_member(&stat, group, || {
            std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
        }) {
            return Some(true);
        }
    }
    Some(false)
}

/// Whether `/proc/self` (whose target is `link`) names this process (`pid`), i.e. the ids in
/// `/proc` are the ones our signals use.
fn proc_is_ours(link: &std::ffi::OsStr, pid: u32) -> bool {
    link.to_str().and_then(|l| l.parse::<u32>().ok()) == Some(pid)
}

/// Whether the process with `/proc/<pid>/stat` contents `stat` is a member of group `group`
/// that runs. A zombie state is not enough to rule it out: the state is its main thread's,
/// and a main thread that called `pthread_exit` is a zombie while the other threads run; so
/// for a zombie member, `status` (its `/proc/<pid>/status`, read only then) decides: more
/// than one thread means one still runs.
fn is_live_member(stat: &str, group: i32, status: impl FnOnce() -> Option<String>) -> bool {
    // After the command in parentheses (which may hold anything): state, ppid, pgrp.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_ascii_whitespace();
    let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    if pgrp.parse() != Ok(group) {
        return false;
    }
    if !matches!(state, "Z" | "X" | "x") {
        return true;
    }
    // Unreadable: it is gone or hidden; the caller's SIGKILL covers what we cannot see.
    status().is_some_and(|status| threads_of(&status).is_some_and(|n| n > 1))
}

/// The `Threads:` count of a `/proc/<pid>/status`.
fn threads_of(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The process group of a child with id `pid` (its own, see [`command`](crate::os::command())).
pub fn group_of(pid: Option<u32>) -> Option<Pid> {
    pid.and_then(|p| i32::try_from(p).ok())
        .and_then(Pid::from_raw)
}

/// A descriptor that turns readable when the child with id `pid` exits (a pidfd), so a
/// blocking thread can wait for the exit without polling; `None` where the kernel has no
/// pidfds (before Linux 5.3) or the id is unknown. Open it right after the spawn, while the
/// child cannot have been reaped (its id cannot name another process yet).
pub(crate) fn exit_watch(pid: Option<u32>) -> Option<OwnedFd> {
    let pid = group_of(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/<pid>/stat` line of a process in group `pgrp` with state `state`, whose
    /// command holds parentheses and spaces (as any command may).
    fn stat(state: &str, pgrp: i32) -> String {
        format!("4242 (a) b (c) {state} 1 {pgrp} {pgrp} 0 -1 4194560 95 0 0 0 0 0 0 0 20 0 1 0\n")
    }

    /// A `/proc/<pid>/status` with this state and thread count.
    fn status(state: &str, threads: u32) -> Option<String> {
        Some(format!(
            "Name:\tz\nState:\t{state}\nTgid:\t4242\nPid:\t4242\nPPid:\t1\n\
             Threads:\t{threads}\nSigQ:\t0/63437\n"
        ))
    }

    #[test]
    fn a_zombie_leader_with_a_running_thread_is_a_live_member() {
        // Running, sleeping, stopped members run (or will); the status is not even read.
        for state in ["R", "S", "D", "T", "t", "I"] {
            assert!(
                is_live_member(&stat(state, 77), 77, || unreachable!()),
                "{state}"
            );
        }
        // The main thread called pthread_exit: a zombie leader, but another thread runs.
        assert!(is_live_member(&stat("Z", 77), 77, || status(
            "Z (zombie)",
            2
        )));
        // A true zombie: its last thread is gone.
        assert!(!is_live_member(&stat("Z", 77), 77, || status(
            "Z (zombie)",
            1
        )));
        assert!(!is_live_member(&stat("X", 77), 77, || status(
            "X (dead)", 1
        )));
        // A zombie whose status is gone or unreadable: not seen running (the caller kills
        // the group on this verdict, so a missed thread dies anyway).
        assert!(!is_live_member(&stat("Z", 77), 77, || None));
        assert!(!is_live_member(&stat("Z", 77), 77, || Some(
            "Name:\tz\n".into()
        )));
        // Another group's process, or an unreadable line: no member.
        assert!(!is_live_member(&stat("R", 78), 77, || unreachable!()));
        assert!(!is_live_member("4242 (no end", 77, || unreachable!()));
        assert!(!is_live_member("4242 (a) R", 77, || unreachable!()));
        assert!(!is_live_member("", 77, || unreachable!()));
    }

    #[test]
    fn proc_is_trusted_only_when_it_shows_this_process() {
        use std::ffi::OsStr;
        assert!(proc_is_ours(OsStr::new("1234"), 1234));
        // A /proc of the parent PID namespace: /proc/self is our id there, not ours.
        assert!(!proc_is_ours(OsStr::new("81234"), 1));
        assert!(!proc_is_ours(OsStr::new("self"), 1234));
        assert!(!proc_is_ours(OsStr::new(""), 1234));
        // The real /proc of this test process.
        let own = std::fs::read_link("/proc/self").unwrap();
        assert!(proc_is_ours(own.as_os_str(), std::process::id()));
    }
}
