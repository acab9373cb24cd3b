//! The stall watchdog of an agent turn: when no event line arrived for the stall timeout, the
//! harness is stopped and the turn ends [`FailureKind::Stalled`](crate::harness::FailureKind).
//!
//! [`StallWatch`] decides when a turn is stalled without reading a clock: the driver tells it
//! when event lines arrived and what time it is, and asks it when to look next, like the run
//! lifecycle ([`RunLifecycle`](crate::RunLifecycle)). Its tests walk it on a virtual clock.
//!
//! # Driving order
//!
//! 1. [`StallWatch::new`]`(timeout, now)` when the harness starts (`None`: never stalls).
//! 2. Loop until the turn ends:
//!    1. Wait until [`StallWatch::poll_timeout`] (`None`: nothing to wait for).
//!    2. Report the last event line seen so far with [`StallWatch::handle_line`] (the driver
//!       need not report every line: the instant of the latest, with the head of its bytes,
//!       is enough, so the per-line cost is a store, never a clock read or a wake-up).
//!    3. [`StallWatch::handle_timeout`]`(now)`: `Some(`[`Stall`]`)` once, when the turn is
//!       stalled: stop the harness with its stop signals and end the turn with the stall's
//!       [`Stall::diagnostic`]. After that the watch asks for nothing more.
//!
//! A line reported with an instant before the latest one is ignored, so a driver whose line
//! reports race with each other cannot move the deadline backwards.

use std::time::{Duration, Instant};

/// The default stall timeout of `agentrun agent`, `agentrun auto` and the MCP `agent` tool.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How many bytes of an event line the driver keeps for the diagnostic (the event's type is
/// near its start in every dialect: `{"type":"assistant",…`).
pub const EVENT_HEAD_BYTES: usize = 256;

/// A turn found stalled (from [`StallWatch::handle_timeout`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stall {
    /// The stall timeout.
    pub timeout: Duration,
    /// How long ago the last event line arrived (or the harness started, when none did).
    pub silent_for: Duration,
    /// The type of the last event line, when it had a readable one.
    pub last_event: Option<String>,
    /// Whether any event line arrived at all.
    pub any_event: bool,
}

impl Stall {
    /// What the turn's failure says: `no event line for 10m (the last, "assistant", arrived
    /// 10m 0s ago); agentrun stopped the harness`.
    pub fn diagnostic(&self) -> String {
        let ago = human(self.silent_for);
        let last = match (&self.last_event, self.any_event) {
            (Some(kind), _) => format!("the last event, {kind:?}, arrived {ago} ago"),
            (None, true) => format!("the last event line (of no readable type) arrived {ago} ago"),
            (None, false) => format!("none arrived since the harness started {ago} ago"),
        };
        format!(
            "stalled: no event line for the stall timeout of {} ({last}); agentrun stopped the \
             harness",
            human(self.timeout)
        )
    }
}

/// `1h 2m 3s`, `2m 0s`, `4.5s`, `250ms`: a duration for a person.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 3600 {
        format!("{}h {}m {}s", secs / 3600, secs % 3600 / 60, secs % 60)
    } else if secs >= 60 {
        format!("{}m {}s", secs / 60, secs % 60)
    } else if secs >= 1 {
        let tenths = d.subsec_millis() / 100;
        if tenths == 0 {
            format!("{secs}s")
        } else {
            format!("{secs}.{tenths}s")
        }
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The watchdog of one turn. See the module documentation for the driving order.
#[derive(Debug, Clone)]
pub struct StallWatch {
    timeout: Option<Duration>,
    last: Instant,
    any_event: bool,
    last_event: Option<String>,
    stalled: bool,
}

impl StallWatch {
    /// A watch from `now` on; `timeout` `None` (or zero) never stalls.
    pub fn new(timeout: Option<Duration>, now: Instant) -> Self {
        Self {
            timeout: timeout.filter(|t| !t.is_zero()),
            last: now,
            any_event: false,
            last_event: None,
            stalled: false,
        }
    }

    /// An event line arrived at `at`; `head` is its first bytes (at most
    /// [`EVENT_HEAD_BYTES`] are read), from which the event's type is named in the diagnostic.
    pub fn handle_line(&mut self, at: Instant, head: &[u8]) {
        if at < self.last || (at == self.last && self.any_event && head.is_empty()) {
            return;
        }
        self.last = at;
        self.any_event = true;
        self.last_event = event_type(&head[..head.len().min(EVENT_HEAD_BYTES)]);
    }

    /// When the watch must be looked at next with [`StallWatch::handle_timeout`] (`None`:
    /// never: no timeout, or the turn already stalled).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stalled {
            return None;
        }
        self.timeout.and_then(|t| self.last.checked_add(t))
    }

    /// The time is `now`: `Some` (once) when no event line arrived for the stall timeout.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Stall> {
        let deadline = self.poll_timeout()?;
        if now < deadline {
            return None;
        }
        self.stalled = true;
        Some(Stall {
            timeout: self.timeout.unwrap_or_default(),
            silent_for: now.saturating_duration_since(self.last),
            last_event: self.last_event.clone(),
            any_event: self.any_event,
        })
    }

    /// Whether the watch found the turn stalled.
    pub fn stalled(&self) -> bool {
        self.stalled
    }
}

/// The value of the first `"type"` key in `head` (a JSON event line's start), when it is a
/// short plain string: enough to name an event without parsing the line (which may be cut).
pub fn event_type(head: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"type\"";
    let at = head.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &head[at..];
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] != b'"' {
        return None; // an escaped type is not a plain name
    }
    let value = std::str::from_utf8(&rest[..end]).ok()?;
    (!value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:".contains(c)))
    .then(|| value.to_owned())
}
