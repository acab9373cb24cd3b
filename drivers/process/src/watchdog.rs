//! The process-wide watchdog that stops a run's process group when the runner dies without
//! ending the run.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrun_core::harness::StopSignal;
use rustix::process::Pid;

use crate::os::{exit_watch, poll_fds, wait_any};

/// How long a watchdog may leave its pipe full before it is taken for stuck and replaced.
const WATCHDOG_STUCK: Duration = Duration::from_secs(2);

/// The watchdog's script. It reads one line per request from the runner: `guard ENTRY` adds
/// a group to those it guards, `release ENTRY` removes it (the run ended normally), `stop
/// ENTRY` removes it and stops it now (a guard dropped without standing down). An entry is
/// `ID:GROUP:GRACE:SIGNALS`, the signals' names separated by commas; the runner makes every
/// entry, so nothing of the caller's reaches the script text. On end of file (the runner
/// died) it stops every group still guarded, all at once, each the way a timeout would: each
/// of its stop signals with its grace after it, then SIGKILL. A stop request runs in a
/// grandchild that init (or the nearest subreaper) reaps, so the script never waits for it
/// and keeps no zombie; the list holds only the groups of runs in flight. A grace is waited
/// in tenths of a second and cut short once the group is gone: its id may then be reused,
/// and a later signal must not reach another group.
const WATCHDOG_SCRIPT: &str = r#"stop() {
    IFS=:
    set -- $1
    group=$2 grace=$3
    ms=${grace#*.}
    ms=${ms#0}
    ms=${ms#0}
    IFS=,
    for sig in $4; do
        kill -s "$sig" -- "-$group" 2>/dev/null || exit 0
        tenths=$(( ${grace%.*} * 10 + ms / 100 ))
        while [ "$tenths" -gt 0 ]; do
            kill -s 0 -- "-$group" 2>/dev/null || exit 0
            sleep 0.1
            tenths=$(( tenths - 1 ))
        done
    done
    kill -s KILL -- "-$group" 2>/dev/null
    exit 0
}
guarded=' '
while read -r verb entry; do
    case $guarded in
    *" $entry "*) guarded="${guarded%% $entry *} ${guarded#* $entry }" ;;
    esac
    case $verb in
    guard) guarded="$guarded$entry " ;;
    stop) ( (stop "$entry") & ) ;;
    esac
done
for entry in $guarded; do
    (stop "$entry") &
done
wait
"#;

/// The process-wide watchdog: a tiny `/bin/sh` process in a group of its own, holding the
/// read end of a pipe whose write end only this process has.
#[derive(Debug)]
struct SharedWatchdog {
    /// The pipe's write end: close-on-exec, so no child inherits it (the watchdog would never
    /// see end of file), and non-blocking, so a watchdog that stopped reading cannot hang a
    /// run: a pipe it leaves full for [`WATCHDOG_STUCK`] counts as a stuck watchdog.
    alarm: File,
    process: std::process::Child,
    /// Readable once the watchdog exited (a pidfd; `None` before Linux 5.3), for the monitor.
    exit: Option<Arc<OwnedFd>>,
    /// Tells this watchdog from the one that replaced it.
    generation: u64,
}

/// What every [`Watchdog`] of this process shares: the watchdog process (started with the
/// first guard, replaced when found dead) and the entries of the guards alive, kept so that a
/// replacement is told every group still guarded.
#[derive(Debug)]
struct Guarded {
    watchdog: Option<SharedWatchdog>,
    entries: std::collections::BTreeMap<u64, String>,
    next_id: u64,
    generations: u64,
    /// Whether the monitor thread runs.
    monitored: bool,
}

static SHARED: Mutex<Guarded> = Mutex::new(Guarded {
    watchdog: None,
    entries: std::collections::BTreeMap::new(),
    next_id: 0,
    generations: 0,
    monitored: false,
});

/// Notified when a watchdog starts, for the monitor waiting for one.
static STARTED: std::sync::Condvar = std::sync::Condvar::new();

/// How often the monitor looks at the watchdog when the kernel gives no pidfd to wait on.
const MONITOR_POLL: Duration = Duration::from_millis(100);

impl SharedWatchdog {
    fn spawn(generation: u64) -> io::Result<Self> {
        // Close-on-exec on both ends: no other child (of a run or a concurrent spawn) may
        // inherit the write end; the read end becomes the watchdog's stdin, which the spawn
        // makes inheritable for it alone.
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
        fcntl_setfl(&write, fcntl_getfl(&write)? | OFlags::NONBLOCK)?;
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("agentrun-watchdog")
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Not in the terminal's foreground group: a Ctrl-C meant for the runner must not
            // end the watchdog.
            .process_group(0);
        let process = command.spawn()?;
        // The command holds this process's copy of the read end: closed now, or a watchdog
        // that died would leave writes succeeding into a pipe nobody reads.
        drop(command);
        Ok(Self {
            alarm: File::from(write),
            exit: exit_watch(Some(process.id())).map(Arc::new),
            process,
            generation,
        })
    }

    /// Writes one request. Lines are far below the pipe's atomic write size, so a line is
    /// written whole or not at all. A full pipe is waited on, up to [`WATCHDOG_STUCK`]: a
    /// watchdog just started, handed every entry in flight, or one slow to be scheduled is
    /// behind, not stuck, and replacing it would only replay the same lines into a new pipe.
    fn send(&mut self, verb: &str, entry: &str) -> io::Result<()> {
        use std::io::Write as _;
        if self.process.try_wait()?.is_some() {
            return Err(io::Error::other("the watchdog exited"));
        }
        let line = format!("{verb} {entry}\n");
        let deadline = Instant::now() + WATCHDOG_STUCK;
        loop {
            match self.alarm.write(line.as_bytes()) {
                Ok(n) if n == line.len() => return Ok(()),
                Ok(_) => return Err(io::Error::other("the watchdog's pipe took part of a line")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::other("the watchdog reads nothing: stuck"));
                    }
                    // Ready or not, the write is retried and the deadline checked again.
                    poll_fds(
                        &[self.alarm.as_fd()],
                        rustix::event::PollFlags::OUT,
                        Some(left),
                    )?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends a watchdog found dead or stuck: killed before its pipe is closed, since a live
    /// watchdog reading end of file would stop every group it guards, runs still in flight.
    fn end(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Guarded {
    /// Replaces the watchdog (if any) with a new one told every entry still guarded.
    fn restart(&mut self) -> io::Result<()> {
        if let Some(old) = self.watchdog.take() {
            old.end();
        }
        self.generations += 1;
        let mut watchdog = SharedWatchdog::spawn(self.generations)?;
        for entry in self.entries.values() {
            if let Err(e) = watchdog.send("guard", entry) {
                watchdog.end();
                return Err(e);
            }
        }
        self.watchdog = Some(watchdog);
        if !self.monitored {
            // Without the thread a dead watchdog is still noticed, at the next request.
            self.monitored = std::thread::Builder::new()
                .name("agentrun-watchdog".into())
                .spawn(monitor)
                .is_ok();
        }
        STARTED.notify_all();
        Ok(())
    }

    /// Replaces a watchdog found dead or stuck, or with nothing left to guard only ends it
    /// (the next guard starts one).
    fn replace_dead(&mut self) -> io::Result<()> {
        if self.entries.is_empty() {
            if let Some(old) = self.watchdog.take() {
                old.end();
            }
            Ok(())
        } else {
            self.restart()
        }
    }

    /// Sends a request, replacing the watchdog if it is not running or does not take it.
    /// `Err` when no watchdog runs.
    fn send(&mut self, verb: &str, entry: &str) -> io::Result<()> {
        if let Some(watchdog) = self.watchdog.as_mut()
            && watchdog.send(verb, entry).is_ok()
        {
            return Ok(());
        }
        if verb == "release" && self.entries.is_empty() {
            self.replace_dead()?;
            return Ok(());
        }
        // A guard's entry is among those the new watchdog is told.
        self.restart()?;
        match self.watchdog.as_mut() {
            Some(watchdog) if verb != "guard" => watchdog.send(verb, entry),
            _ => Ok(()),
        }
    }
}

/// Waits for each watchdog to exit, and replaces one that did (someone killed it) at once,
/// telling the new one every group still guarded: the runs in flight are unguarded only for
/// the moment this takes. A request written to a watchdog that was dying is lost with it,
/// but its entry is among those the replacement is told.
fn monitor() {
    loop {
        let (exit, generation) = {
            let mut shared = shared();
            loop {
                if let Some(watchdog) = &shared.watchdog {
                    break (watchdog.exit.clone(), watchdog.generation);
                }
                shared = STARTED.wait(shared).unwrap_or_else(|p| p.into_inner());
            }
        };
        let waited = match &exit {
            Some(exit) => wait_any(&[exit.as_fd()], None).is_ok(),
            None => false,
        };
        if !waited {
            std::thread::sleep(MONITOR_POLL);
        }
        let mut shared = shared();
        let Some(watchdog) = shared.watchdog.as_mut() else {
            continue;
        };
        if watchdog.generation != generation || matches!(watchdog.process.try_wait(), Ok(None)) {
            continue;
        }
        // On failure no watchdog runs; the next guard tries again.
        let _ = shared.replace_dead();
    }
}

/// The shared state; a poisoned lock is taken as is (every step leaves it consistent).
fn shared() -> std::sync::MutexGuard<'static, Guarded> {
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops the child's process group if the runner dies without ending the run (SIGKILL, a
/// crash). One watchdog per process guards every run in flight: a tiny `/bin/sh` process in
/// a group of its own, started with the first run, holding the read end of a pipe whose write
/// end only the runner has. Each run tells it its group, stop signals and grace when it
/// starts and tells it again when it ends. The kernel closes the write end when the runner
/// dies, for whatever reason; the watchdog then reads end of file and stops every group still
/// guarded, in parallel. A parent-death signal would reach only the child, not the processes
/// it started, and is tied to the thread that spawned it. A watchdog found dead (someone
/// killed it) at a run's start or end is replaced, and the new one is told every group still
/// guarded.
///
/// Public for embedders that spawn processes of their own (and for measuring its cost).
/// Dropping it without [`Watchdog::stand_down`] stops the group as the runner's death would.
#[derive(Debug)]
#[must_use = "dropping a watchdog without stand_down stops the group it guards"]
pub struct Watchdog {
    id: u64,
}

impl Watchdog {
    /// Guards `group`, which on the runner's death gets each of `signals` with `grace` after
    /// it, then SIGKILL. Best effort: without `/bin/sh` (or on any spawn error) the run goes
    /// on unguarded, as it would have before (`None`).
    pub fn start(group: Option<Pid>, signals: &[StopSignal], grace: Duration) -> Option<Self> {
        let group = group?;
        let names: Vec<&str> = signals
            .iter()
            .map(|s| match s {
                StopSignal::Interrupt => "INT",
                StopSignal::Terminate => "TERM",
            })
            .collect();
        let mut shared = shared();
        let id = shared.next_id;
        shared.next_id += 1;
        let entry = format!(
            "{id}:{}:{}.{:03}:{}",
            group.as_raw_pid(),
            grace.as_secs(),
            grace.subsec_millis(),
            names.join(",")
        );
        shared.entries.insert(id, entry.clone());
        if shared.send("guard", &entry).is_err() {
            shared.entries.remove(&id);
            return None;
        }
        Some(Self { id })
    }

    /// The run is over: the watchdog forgets the group without signalling it.
    pub fn stand_down(self) {
        let id = self.id;
        std::mem::forget(self);
        Self::end(id, "release");
    }

    fn end(id: u64, verb: &str) {
        let mut shared = shared();
        if let Some(entry) = shared.entries.remove(&id) {
            // A release that finds no watchdog leaves nothing to do for this group; a stop
            // request is carried out by a restarted one.
            let _ = shared.send(verb, &entry);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        Self::end(self.id, "stop");
    }
}

/// The shared watchdog's process id, started if none runs (for tests that kill it).
#[cfg(test)]
fn shared_watchdog_pid() -> Option<u32> {
    let mut shared = shared();
    if shared.watchdog.is_none() {
        shared.restart().ok()?;
    }
    shared.watchdog.as_ref().map(|w| w.process.id())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::os::group_of;
    use rustix::process::Signal;

    /// A process `sleep 300` in a group of its own, and that group.
    fn sleeper() -> (std::process::Child, Option<Pid>) {
        let child = Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = group_of(Some(child.id()));
        (child, group)
    }

    /// Whether `child` ended within half a minute (reaped if so), long before its sleep.
    fn ends(child: &mut std::process::Child) -> bool {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn guard(group: Option<Pid>) -> Watchdog {
        Watchdog::start(group, &[StopSignal::Terminate], Duration::from_secs(1)).unwrap()
    }

    /// What the runner's death does to the shared watchdog: its pipe's write end closed.
    /// Returns once the watchdog exited, that is once every stop it started ended.
    fn close_as_a_dying_runner_would() {
        let watchdog = shared().watchdog.take();
        if let Some(SharedWatchdog {
            alarm, mut process, ..
        }) = watchdog
        {
            drop(alarm);
            process.wait().unwrap();
        }
    }

    /// A group that ends on its first stop signal gets no other: the grace is cut short once
    /// the group is gone (its id may be reused), so the script ends long before the grace.
    #[test]
    fn a_stopped_group_ends_the_grace_and_gets_no_more_signals() {
        use std::io::Write as _;
        let (mut sleeper, group) = sleeper();
        let mut script = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let entry = format!("1:{}:300.000:TERM", group.unwrap().as_raw_pid());
        let mut stdin = script.stdin.take().unwrap();
        writeln!(stdin, "guard {entry}").unwrap();
        drop(stdin); // end of file: the script stops every group it guards
        assert!(ends(&mut sleeper), "the group got its stop signal");
        // Hang guard only: before, the script slept the whole 300 s grace.
        assert!(ends(&mut script), "the grace ended with the group");
    }

    /// More requests than the pipe holds, before the new shell read any (a replacement told
    /// every run in flight): the writer waits for the watchdog instead of taking it for stuck.
    #[test]
    fn a_watchdog_behind_on_a_full_pipe_is_waited_for_not_replaced() {
        let mut watchdog = SharedWatchdog::spawn(u64::MAX).unwrap();
        // The smallest pipe the kernel gives: one page, about a hundred lines.
        rustix::pipe::fcntl_setpipe_size(&watchdog.alarm, 4096).unwrap();
        // Group ids no process has: the watchdog is killed below, never told end of file.
        for i in 0..2000 {
            let entry = format!("{i}:2147480000:0.000:TERM");
            watchdog.send("guard", &entry).unwrap();
        }
        assert!(
            watchdog.process.try_wait().unwrap().is_none(),
            "still running"
        );
        watchdog.end();
    }

    /// One watchdog serves every guard of the process. Killed while runs are in flight, it
    /// is replaced at the next request and told every group still guarded: at end of file
    /// the new one stops both the group guarded before the kill and the one guarded after,
    /// each with its own signals (the second ignores SIGTERM and needs the SIGKILL after its
    /// grace), and leaves alone a group stood down. A guard dropped without standing down
    /// stops its group at once.
    #[test]
    fn a_killed_watchdog_is_replaced_and_guards_the_groups_in_flight() {
        let (mut before, before_group) = sleeper();
        let before_guard = guard(before_group);
        let first = shared_watchdog_pid().unwrap();
        let (mut released, released_group) = sleeper();
        let released_guard = guard(released_group);
        assert_eq!(shared_watchdog_pid(), Some(first), "one watchdog for both");
        rustix::process::kill_process(Pid::from_raw(first as i32).unwrap(), Signal::KILL).unwrap();
        let mut after = Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 300"])
            .process_group(0)
            .spawn()
            .unwrap();
        let after_guard = guard(group_of(Some(after.id())));
        // The guard may have written to the watchdog while it was dying, before anyone could
        // tell: the monitor replaces it once it is gone.
        let until = Instant::now() + Duration::from_secs(60);
        while shared_watchdog_pid() == Some(first) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_ne!(
            shared_watchdog_pid(),
            Some(first),
            "the killed watchdog was replaced"
        );
        released_guard.stand_down();
        close_as_a_dying_runner_would();
        assert!(
            ends(&mut before),
            "the group guarded before the kill was stopped"
        );
        assert!(
            ends(&mut after),
            "the group guarded after the kill was stopped"
        );
        assert!(
            released.try_wait().unwrap().is_none(),
            "a group stood down is left alone"
        );
        released.kill().unwrap();
        released.wait().unwrap();
        // Their groups are gone: standing down only tells a new watchdog to forget them.
        before_guard.stand_down();
        after_guard.stand_down();
        let (mut dropped, dropped_group) = sleeper();
        drop(guard(dropped_group));
        assert!(ends(&mut dropped), "a dropped guard stopped its group");
    }
}
