//! Fuzz bodies of the retry machine, the stall watch, budgets and prices, the fan-out machine,
//! the failure classifier and the configuration text (`fuzz/fuzz_targets/{retry,stall,budget,
//! fanout,failure,config}.rs`). Each structured input is decoded with `arbitrary` (the
//! targets are typed, so `cargo fuzz fmt` prints an input as its operations); the byte-level
//! `config` target reads its input as text. Every body checks the machine's invariants after
//! each step, against a small model where one is needed, and panics only when one breaks.
//! [`crate::fuzz_bodies::TARGETS`] holds their rows, so the stable corpus replay runs them too.

use std::time::{Duration, Instant, UNIX_EPOCH};

use agentrun_core::budget::{Budget, ModelPrice, PriceTable, Spend};
use agentrun_core::fanout::{Action, AgentEnd, AttemptStatus, FanOut, Selection, VerifyEnd};
use agentrun_core::harness::failure::{
    classify, is_context_overflow, kind_of_status, parse_retry_after, parse_retry_after_ms,
    retry_after_of_headers, status_in_text,
};
use agentrun_core::harness::{FailureKind, RetryAfter, Usage};
use agentrun_core::retry::{
    GiveUpReason, MAX_RETRY_WAIT, Retry, RetryError, RetryEvent, RetryPolicy, WaitSource,
};
use agentrun_core::stall::{EVENT_HEAD_BYTES, StallWatch, event_type};
use arbitrary::Arbitrary;

use crate::fuzz_inputs::decode;

// ---------------------------------------------------------------------------------------------
// Retry machine

/// A failure's kind as the fuzzer picks it: an index into [`FailureKind::ALL`], past its end
/// a failure without a kind.
fn kind_of(pick: u8) -> Option<FailureKind> {
    FailureKind::ALL
        .get(usize::from(pick) % (FailureKind::ALL.len() + 1))
        .copied()
}

/// What the harness said about when to come back.
#[derive(Debug, Clone, Arbitrary)]
pub enum RetryAfterInput {
    /// A delay in milliseconds.
    DelayMs(u64),
    /// A reset time, in seconds after the virtual clock's start (may lie in the past).
    ResetAtOffsetSecs(i32),
    /// Any reset time at all.
    ResetAtUnixSecs(u64),
}

/// One driver event of the retry machine.
#[derive(Debug, Clone, Arbitrary)]
pub enum RetryOp {
    /// The turn (or its retry) failed with [`kind_of`]`(kind)`.
    Failure {
        /// The kind, see [`kind_of`].
        kind: u8,
        /// The harness's retry time.
        retry_after: Option<RetryAfterInput>,
    },
    /// The driver woke (its timer fired, maybe early).
    Timeout,
    /// The clock moves on.
    Advance(u32),
    /// The clock is set back.
    Back(u32),
    /// A new turn.
    Reset,
    /// The machine is persisted and resumed from its retries and pending wait.
    Resume,
}

/// The retry target's input.
#[derive(Debug, Clone, Arbitrary)]
pub struct RetryInput {
    /// The most retries, `% 8`.
    pub max_retries: u8,
    /// The first backoff in milliseconds.
    pub backoff_ms: u32,
    /// The jitter seed.
    pub seed: u64,
    /// The clock's start, in seconds after 2020-01-01.
    pub start_secs: u32,
    /// The events.
    pub ops: Vec<RetryOp>,
}

/// Target `retry`.
pub fn retry(data: &[u8]) {
    if let Some(input) = decode::<RetryInput>(data) {
        check_retry(&input);
    }
}

/// Drives the retry machine through `input.ops` on a virtual clock: every call gives exactly
/// one event (or the documented error, and then none); a wait never ends later than the cap
/// from the moment it is set; a backoff wait is the doubled backoff less at most a fifth;
/// retries count up one at a time and never past the limit; a failure that is not retryable
/// (or has no kind) is given up at once, never waited for.
pub fn check_retry(input: &RetryInput) {
    let policy = RetryPolicy::new(
        u32::from(input.max_retries % 8),
        Duration::from_millis(u64::from(input.backoff_ms)),
    );
    let start_ms = (1_577_836_800 + u64::from(input.start_secs)) * 1000;
    let mut now_ms = start_ms;
    let mut machine = Retry::new(policy, input.seed);
    let cap_ms = u64::try_from(MAX_RETRY_WAIT.as_millis()).unwrap();
    for op in &input.ops {
        let at = UNIX_EPOCH + Duration::from_millis(now_ms);
        let waiting = machine.wait().copied();
        let retries = machine.retries();
        match op {
            RetryOp::Advance(ms) => {
                now_ms = now_ms.saturating_add(u64::from(*ms));
                continue;
            }
            RetryOp::Back(ms) => {
                now_ms = now_ms.saturating_sub(u64::from(*ms)).max(1000);
                continue;
            }
            RetryOp::Reset => {
                machine.reset();
                assert_eq!(machine.retries(), 0);
                assert!(machine.wait().is_none() && machine.poll_event().is_none());
                continue;
            }
            RetryOp::Resume => {
                assert!(
                    machine.poll_event().is_none(),
                    "events are drained each step"
                );
                machine = Retry::resume(policy, input.seed, retries, waiting);
                assert_eq!(machine.retries(), retries);
                assert_eq!(machine.wait().copied(), waiting);
                match (waiting, machine.poll_event()) {
                    (Some(w), Some(RetryEvent::Wait(e))) => assert_eq!(w, e),
                    (None, None) => {}
                    (w, e) => panic!("resumed with wait {w:?}, event {e:?}"),
                }
                assert!(machine.poll_event().is_none());
                continue;
            }
            RetryOp::Failure { kind, retry_after } => {
                let kind = kind_of(*kind);
                let after = retry_after.as_ref().map(|r| match *r {
                    RetryAfterInput::DelayMs(ms) => RetryAfter::DelayMs(ms),
                    RetryAfterInput::ResetAtOffsetSecs(s) => RetryAfter::ResetAtUnixSecs(
                        (now_ms / 1000).saturating_add_signed(i64::from(s)),
                    ),
                    RetryAfterInput::ResetAtUnixSecs(s) => RetryAfter::ResetAtUnixSecs(s),
                });
                let result = machine.handle_failure(at, kind, after);
                if waiting.is_some() {
                    assert_eq!(result, Err(RetryError::FailureWhileWaiting));
                    assert_eq!(
                        machine.wait().copied(),
                        waiting,
                        "a refused call changes nothing"
                    );
                    assert!(machine.poll_event().is_none());
                    continue;
                }
                assert_eq!(result, Ok(()));
                let event = machine.poll_event().expect("a failure gives an event");
                assert!(machine.poll_event().is_none(), "one event per failure");
                match event {
                    RetryEvent::GiveUp {
                        kind: k,
                        reason,
                        retries: r,
                    } => {
                        assert_eq!(k, kind);
                        assert_eq!(r, retries);
                        let retryable = kind.is_some_and(FailureKind::is_retryable);
                        let expected = if retryable {
                            GiveUpReason::RetriesSpent
                        } else {
                            GiveUpReason::NotRetryable
                        };
                        assert_eq!(reason, expected, "{kind:?} after {retries} retries");
                        if retryable {
                            assert!(retries >= policy.max_retries);
                        }
                        assert!(machine.wait().is_none());
                    }
                    RetryEvent::Wait(w) => {
                        let k = kind.expect("a failure without a kind is never retried");
                        assert!(
                            k.is_retryable(),
                            "{k:?} is not retryable but was waited for"
                        );
                        assert!(retries < policy.max_retries, "retry past the limit");
                        assert_eq!(w.kind, k);
                        assert_eq!(w.retry, retries + 1);
                        assert_eq!(w.max_retries, policy.max_retries);
                        assert!(w.until_unix_ms >= now_ms, "a wait ends in the past");
                        let len = w.until_unix_ms - now_ms;
                        assert!(len <= cap_ms, "wait of {len} ms over the cap");
                        assert_eq!(
                            w.source,
                            if after.is_some() {
                                WaitSource::Harness
                            } else {
                                WaitSource::Backoff
                            }
                        );
                        if after.is_none() {
                            let full = u64::try_from(
                                policy.backoff_for(w.retry).min(MAX_RETRY_WAIT).as_millis(),
                            )
                            .unwrap();
                            assert!(
                                len <= full && len >= full - full / 5,
                                "backoff {len} ms for a full {full} ms"
                            );
                        }
                        assert_eq!(machine.wait().copied(), Some(w));
                        assert_eq!(machine.poll_timeout(), Some(w.until()));
                        // The line a person reads names the retry and the limit.
                        assert!(
                            w.line()
                                .ends_with(&format!("(retry {}/{})", w.retry, w.max_retries))
                        );
                    }
                    RetryEvent::Retry { .. } => panic!("a failure started a retry"),
                    other => panic!("unexpected event {other:?}"),
                }
            }
            RetryOp::Timeout => {
                let result = machine.handle_timeout(at);
                let Some(w) = waiting else {
                    assert_eq!(result, Err(RetryError::NotWaiting));
                    assert!(machine.poll_event().is_none());
                    continue;
                };
                assert_eq!(result, Ok(()));
                let event = machine.poll_event().expect("a timeout gives an event");
                assert!(machine.poll_event().is_none(), "one event per timeout");
                match event {
                    RetryEvent::Retry { retry } => {
                        assert!(now_ms >= w.until_unix_ms, "retried before the wait ended");
                        assert_eq!(retry, w.retry);
                        assert_eq!(machine.retries(), retry);
                        assert!(machine.wait().is_none());
                    }
                    RetryEvent::Wait(again) => {
                        assert!(now_ms < w.until_unix_ms, "waits again after the wait ended");
                        assert_eq!((again.kind, again.retry), (w.kind, w.retry));
                        assert!(again.until_unix_ms <= w.until_unix_ms, "a wait grew");
                        assert!(
                            again.until_unix_ms - now_ms <= cap_ms,
                            "a clock set back stretched the wait past the cap"
                        );
                        assert_eq!(machine.retries(), retries);
                    }
                    other => panic!("unexpected event after a timeout: {other:?}"),
                }
            }
        }
        assert!(
            machine.retries() <= policy.max_retries,
            "retries past the limit"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Stall watch

/// One event of the stall watch's driver.
#[derive(Debug, Clone, Arbitrary)]
pub enum StallOp {
    /// Time passes (milliseconds).
    Advance(u32),
    /// A line arrives now, with these first bytes.
    Line(Vec<u8>),
    /// A line stamped this many milliseconds before now (a reader that lagged).
    LateLine(u16, Vec<u8>),
    /// The driver looks at the watch now.
    Check,
}

/// The stall target's input.
#[derive(Debug, Clone, Arbitrary)]
pub struct StallInput {
    /// The stall timeout in milliseconds (`None`, zero: never stalls).
    pub timeout_ms: Option<u32>,
    /// The events.
    pub ops: Vec<StallOp>,
}

/// Target `stall`.
pub fn stall(data: &[u8]) {
    if let Some(input) = decode::<StallInput>(data) {
        check_stall(&input);
    }
}

/// Drives a stall watch on a virtual clock against a model of its last line: it fires once,
/// exactly when a check comes at least the timeout after the last line (or the start), never
/// without a timeout; its deadline is always the last line plus the timeout; the diagnostic's
/// event type is the one of the last line that counted.
pub fn check_stall(input: &StallInput) {
    let base = Instant::now();
    let timeout = input
        .timeout_ms
        .map(|ms| Duration::from_millis(u64::from(ms)));
    let effective = timeout.filter(|t| !t.is_zero());
    let mut watch = StallWatch::new(timeout, base);
    let mut now = 0u64;
    let (mut last, mut any, mut last_event, mut fired) = (0u64, false, None::<String>, false);
    let at = |ms: u64| base + Duration::from_millis(ms);
    for op in &input.ops {
        match op {
            StallOp::Advance(ms) => now += u64::from(*ms),
            StallOp::Line(head) | StallOp::LateLine(_, head) => {
                let stamp = match op {
                    StallOp::LateLine(behind, _) => now.saturating_sub(u64::from(*behind)),
                    _ => now,
                };
                watch.handle_line(at(stamp), head);
                if stamp > last || (stamp == last && !(any && head.is_empty())) {
                    last = stamp;
                    any = true;
                    last_event = event_type(&head[..head.len().min(EVENT_HEAD_BYTES)]);
                }
            }
            StallOp::Check => {
                let got = watch.handle_timeout(at(now));
                let due = !fired && effective.is_some_and(|t| now - last >= duration_ms(t));
                assert_eq!(
                    got.is_some(),
                    due,
                    "now {now}, last line {last}, {effective:?}"
                );
                if let Some(stall) = got {
                    fired = true;
                    assert_eq!(Some(stall.timeout), effective);
                    assert_eq!(duration_ms(stall.silent_for), now - last);
                    assert!(stall.silent_for >= stall.timeout);
                    assert_eq!(stall.any_event, any);
                    assert_eq!(stall.last_event, last_event);
                    assert!(!stall.diagnostic().is_empty());
                }
            }
        }
        assert_eq!(watch.stalled(), fired);
        let deadline = if fired {
            None
        } else {
            effective.map(|t| at(last) + t)
        };
        assert_eq!(watch.poll_timeout(), deadline);
    }
    for op in &input.ops {
        if let StallOp::Line(head) | StallOp::LateLine(_, head) = op
            && let Some(name) = event_type(head)
        {
            assert!(!name.is_empty() && name.len() <= 64);
            let needle = format!("\"{name}\"");
            assert!(
                head.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "event type {name:?} not quoted in the head"
            );
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Budgets and prices

/// One run's usage as the harness reported it.
#[derive(Debug, Clone, Arbitrary)]
pub struct RunUsage {
    /// Input tokens (cached ones included).
    pub input_tokens: u64,
    /// Cached input tokens (may exceed the input: a harness's own numbers).
    pub cached_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The harness's own cost (any float: NaN, negative, infinite).
    pub cost_usd: Option<f64>,
    /// The models the run names (lossy text).
    pub models: Vec<Vec<u8>>,
}

/// A price override, in hundredths of a dollar per million tokens (a validated table).
#[derive(Debug, Clone, Arbitrary)]
pub struct PriceInput {
    /// The model name (lossy text).
    pub model: Vec<u8>,
    /// Input, cached input and output prices in cents.
    pub cents: (u16, u16, u16),
}

/// The budget target's input.
#[derive(Debug, Clone, Arbitrary)]
pub struct BudgetInput {
    /// The cost limit (any float: `validate` must refuse the bad ones).
    pub max_cost_usd: Option<f64>,
    /// The token limit.
    pub max_tokens: Option<u64>,
    /// Price overrides on top of the built-in table.
    pub prices: Vec<PriceInput>,
    /// The runs, in order.
    pub runs: Vec<RunUsage>,
}

/// Target `budget`.
pub fn budget(data: &[u8]) {
    if let Some(input) = decode::<BudgetInput>(data) {
        check_budget(&input);
    }
}

/// Accounts the runs' spend run by run: a run's spend is finite and not negative (a bad
/// reported cost falls back to the table), the total never decreases (cost, tokens, unpriced
/// runs; once estimated it stays estimated), a budget once exceeded stays exceeded, and
/// `exceeded` answers exactly when a limit is reached. `validate` refuses exactly the limits
/// that are not positive.
pub fn check_budget(input: &BudgetInput) {
    let budget = Budget {
        max_cost_usd: input.max_cost_usd,
        max_tokens: input.max_tokens,
    };
    let valid = budget.max_cost_usd.is_none_or(|c| c.is_finite() && c > 0.0)
        && budget.max_tokens != Some(0);
    assert_eq!(budget.validate().is_ok(), valid, "{budget:?}");
    assert_eq!(
        budget.is_unlimited(),
        budget.max_cost_usd.is_none() && budget.max_tokens.is_none()
    );
    let prices = PriceTable::builtin().with_overrides(input.prices.iter().map(|p| {
        let (i, c, o) = p.cents;
        let price = ModelPrice {
            input: f64::from(i) / 100.0,
            cached_input: f64::from(c) / 100.0,
            output: f64::from(o) / 100.0,
        };
        (String::from_utf8_lossy(&p.model).into_owned(), price)
    }));
    assert!(prices.models.values().all(ModelPrice::is_valid));
    let mut total = Spend::default();
    let mut was_exceeded = false;
    for run in &input.runs {
        let usage = Usage {
            input_tokens: run.input_tokens,
            cached_input_tokens: run.cached_input_tokens,
            output_tokens: run.output_tokens,
            cost_usd: run.cost_usd,
            ..Usage::default()
        };
        let models: Vec<String> = run
            .models
            .iter()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect();
        for m in &models {
            if let Some(p) = prices.price(m) {
                assert!(p.is_valid());
                let cost = p.cost(&usage);
                assert!(cost.is_finite() && cost >= 0.0, "{m:?} costs {cost}");
            }
        }
        let spend = Spend::of_run(&usage, models.iter().map(String::as_str), &prices);
        assert!(
            spend.cost_usd.is_finite() && spend.cost_usd >= 0.0,
            "{spend:?}"
        );
        assert_eq!(
            spend.tokens,
            usage.input_tokens.saturating_add(usage.output_tokens)
        );
        if let Some(cost) = usage.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            assert_eq!(spend.cost_usd, cost, "a reported cost is used as it is");
            assert!(!spend.cost_estimated);
        }
        assert!(spend.unpriced_runs <= 1);
        let before = total.clone();
        total.add(&spend);
        assert!(total.cost_usd >= before.cost_usd, "{before:?} -> {total:?}");
        assert!(!total.cost_usd.is_nan());
        assert!(total.tokens >= before.tokens && total.unpriced_runs >= before.unpriced_runs);
        assert!(total.cost_estimated >= before.cost_estimated);
        assert!(!total.line().is_empty());
        let exceeded = budget.exceeded(&total);
        let reached = budget.max_cost_usd.is_some_and(|l| total.cost_usd >= l)
            || budget.max_tokens.is_some_and(|l| total.tokens >= l);
        assert_eq!(exceeded.is_some(), reached, "{budget:?} with {total:?}");
        if valid {
            assert!(
                !was_exceeded || reached,
                "a valid budget stopped being exceeded"
            );
        }
        if let Some(e) = exceeded {
            assert!(!e.diagnostic().is_empty());
        }
        was_exceeded = reached;
    }
}

// ---------------------------------------------------------------------------------------------
// Fan-out machine

/// One event of the fan-out's driver.
#[derive(Debug, Clone, Arbitrary)]
pub enum FanOp {
    /// Attempt `pick` (any index, also one that is not running) ended as `end % 4` says
    /// (succeeded, failed, stopped, error; "stopped" only for an attempt it was asked to
    /// stop, else failed).
    Agent {
        /// The attempt.
        pick: u8,
        /// How it ended.
        end: u8,
    },
    /// Attempt `pick`'s verification ended as `end % 3` says (passed, failed, stopped; as
    /// above).
    Verify {
        /// The attempt.
        pick: u8,
        /// How it ended.
        end: u8,
    },
    /// Ctrl-C.
    Interrupt,
}

/// The fan-out target's input.
#[derive(Debug, Clone, Arbitrary)]
pub struct FanOutInput {
    /// Attempts, `1 + a % 12`.
    pub attempts: u8,
    /// Jobs, `1 + j % 6`.
    pub jobs: u8,
    /// `true`: every attempt runs to its end.
    pub all: bool,
    /// Whether a verification is given.
    pub verify: bool,
    /// The events.
    pub ops: Vec<FanOp>,
}

/// Target `fanout`.
pub fn fanout(data: &[u8]) {
    if let Some(input) = decode::<FanOutInput>(data) {
        check_fanout(&input);
    }
}

/// The driver's view of the fan-out, checked against the machine on every action.
struct FanDriver {
    machine: FanOut,
    jobs: usize,
    verify: bool,
    first_verified: bool,
    started: Vec<bool>,
    discarded: Vec<bool>,
    finished: bool,
    winner: Option<usize>,
}

impl FanDriver {
    fn active(&self) -> usize {
        (0..self.machine.len())
            .filter(|&n| {
                matches!(
                    self.machine.status(n),
                    Some(AttemptStatus::Running | AttemptStatus::Verifying)
                )
            })
            .count()
    }

    /// Takes every action the machine has, checking each.
    fn drain(&mut self) {
        while let Some(action) = self.machine.poll_action() {
            assert!(!self.finished, "{action:?} after Finish");
            match action {
                Action::Start(n) => {
                    assert!(!self.started[n], "attempt {n} started twice");
                    assert!(
                        self.started[..n].iter().all(|s| *s),
                        "attempt {n} started out of order"
                    );
                    assert!(
                        !(self.first_verified && self.winner.is_some()),
                        "attempt {n} started after a winner"
                    );
                    assert!(
                        !self.machine.interrupted(),
                        "attempt {n} started after an interrupt"
                    );
                    self.started[n] = true;
                    assert_eq!(self.machine.status(n), Some(AttemptStatus::Running));
                }
                Action::Verify(n) => {
                    assert!(self.verify, "verification of {n} without a command");
                    assert_eq!(self.machine.status(n), Some(AttemptStatus::Verifying));
                }
                Action::Stop(n) => {
                    assert!(self.machine.stop_sent(n));
                    assert!(self.started[n], "stop of {n}, never started");
                }
                Action::Discard(n) => {
                    assert!(self.started[n], "discard of {n}, never started");
                    assert!(!self.discarded[n], "attempt {n} discarded twice");
                    let s = self.machine.status(n).unwrap();
                    assert!(s.is_final(), "discard of {n} while {s:?}");
                    assert_ne!(self.machine.winner(), Some(n), "the winner discarded");
                    self.discarded[n] = true;
                }
                Action::Finish => {
                    self.finished = true;
                    for n in 0..self.machine.len() {
                        let s = self.machine.status(n).unwrap();
                        assert!(s.is_final(), "finished with attempt {n} {s:?}");
                        let loser = self.started[n] && self.machine.winner() != Some(n);
                        assert_eq!(self.discarded[n], loser, "attempt {n} at Finish");
                    }
                }
                other => panic!("unexpected action {other:?}"),
            }
            self.check();
        }
        self.check();
    }

    fn check(&mut self) {
        assert!(
            self.active() <= self.jobs,
            "{} running, jobs {}",
            self.active(),
            self.jobs
        );
        let winner = self.machine.winner();
        if self.winner.is_some() {
            assert_eq!(winner, self.winner, "the winner changed");
        }
        self.winner = winner;
        if let Some(w) = winner {
            assert!(!self.discarded[w], "the winner {w} was discarded");
            assert_eq!(self.machine.status(w), Some(AttemptStatus::Succeeded));
            if self.verify {
                assert_eq!(
                    self.machine.verified(w),
                    Some(true),
                    "unverified winner {w}"
                );
            }
        }
        for n in 0..self.machine.len() {
            let status = self.machine.status(n).unwrap();
            if matches!(status, AttemptStatus::Stopped | AttemptStatus::Interrupted) {
                assert!(self.machine.stop_sent(n), "{n} {status:?} without a stop");
            }
            if status == AttemptStatus::Queued || status == AttemptStatus::NotStarted {
                assert!(!self.started[n], "{n} started but {status:?}");
            } else {
                assert!(self.started[n], "{n} {status:?} but never started");
            }
            // A verification that raced the winner's stop may pass too; it does not win.
            if self.machine.verified(n) == Some(true) {
                assert!(winner.is_some(), "{n} passed but there is no winner");
            }
        }
    }

    fn agent_end(&mut self, n: usize, end: u8) {
        let stop = self.machine.stop_sent(n);
        let end = match end % 4 {
            0 => AgentEnd::Succeeded,
            1 => AgentEnd::Failed,
            2 if stop => AgentEnd::Stopped,
            2 => AgentEnd::Failed,
            _ => AgentEnd::Error,
        };
        let before = self.machine.status(n);
        self.machine.handle_agent_end(n, end);
        if before != Some(AttemptStatus::Running) {
            assert_eq!(
                self.machine.status(n),
                before,
                "an end for a non-running attempt counted"
            );
        } else {
            let after = self.machine.status(n).unwrap();
            assert!(after == AttemptStatus::Verifying || after.is_final());
        }
    }

    fn verify_end(&mut self, n: usize, end: u8) {
        let stop = self.machine.stop_sent(n);
        let end = match end % 3 {
            0 => VerifyEnd::Passed,
            2 if stop => VerifyEnd::Stopped,
            _ => VerifyEnd::Failed,
        };
        let before = self.machine.status(n);
        self.machine.handle_verification(n, end);
        if before != Some(AttemptStatus::Verifying) {
            assert_eq!(self.machine.status(n), before);
        } else {
            assert!(self.machine.status(n).unwrap().is_final());
        }
    }
}

/// Drives the fan-out through `input.ops` (ends of attempts in any order, for any index,
/// interrupts), then ends every attempt still going the way an obedient driver would: never
/// more than `jobs` running, starts in order and never after a winner (first-verified) or an
/// interrupt, one winner at most and it never changes, the winner succeeded (and passed its
/// verification when there is one), a stopped attempt was asked to stop, every started
/// attempt but the winner discarded once its end is final (never the winner, never twice),
/// and at the end one `Finish` with every attempt in a final state.
pub fn check_fanout(input: &FanOutInput) {
    let attempts = 1 + usize::from(input.attempts % 12);
    let jobs = 1 + usize::from(input.jobs % 6);
    let selection = if input.all {
        Selection::All
    } else {
        Selection::FirstVerified
    };
    let mut d = FanDriver {
        machine: FanOut::new(attempts, jobs, selection, input.verify).unwrap(),
        jobs,
        verify: input.verify,
        first_verified: !input.all,
        started: vec![false; attempts],
        discarded: vec![false; attempts],
        finished: false,
        winner: None,
    };
    d.drain();
    for op in &input.ops {
        match *op {
            // One past the last index: an end for an attempt that does not exist.
            FanOp::Agent { pick, end } => d.agent_end(usize::from(pick) % (attempts + 1), end),
            FanOp::Verify { pick, end } => d.verify_end(usize::from(pick) % (attempts + 1), end),
            FanOp::Interrupt => d.machine.handle_interrupt(),
        }
        d.drain();
    }
    // Every attempt still going ends: at most one round per attempt for its agent and one for
    // its verification, then one per start (each end frees a job).
    for _ in 0..3 * attempts + 1 {
        if d.finished {
            break;
        }
        for n in 0..attempts {
            match d.machine.status(n) {
                Some(AttemptStatus::Running) => d.agent_end(n, 2),
                Some(AttemptStatus::Verifying) => d.verify_end(n, 2),
                _ => {}
            }
        }
        d.drain();
    }
    assert!(d.finished, "no Finish once every attempt ended");
    assert!(d.machine.poll_action().is_none(), "an action after Finish");
}

// ---------------------------------------------------------------------------------------------
// Failure classifier

/// The failure target's input.
#[derive(Debug, Clone, Arbitrary)]
pub struct FailureInput {
    /// The HTTP status the harness gave.
    pub status: Option<u16>,
    /// The diagnostic text (lossy).
    pub text: Vec<u8>,
    /// Response headers (lossy names and values).
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Target `failure`.
pub fn failure(data: &[u8]) {
    if let Some(input) = decode::<FailureInput>(data) {
        check_failure(&input);
    }
}

/// The classifier and the retry-time parsers on arbitrary text: never a panic; the kind does
/// not change when the text's ASCII letters change case (the wordings and status markers
/// are matched case-insensitively); a context overflow wins over everything; a given status
/// with a kind decides when the text names no overflow; a status found in the text is an
/// error status (400–599) whose digits are in the text; header names are matched
/// case-insensitively, `retry-after-ms` over `retry-after`.
pub fn check_failure(input: &FailureInput) {
    let text = String::from_utf8_lossy(&input.text).into_owned();
    let kind = classify(input.status, &text);
    for variant in [text.to_ascii_uppercase(), text.to_ascii_lowercase()] {
        assert_eq!(
            classify(input.status, &variant),
            kind,
            "{text:?} and {variant:?} classify differently"
        );
        assert_eq!(is_context_overflow(&variant), is_context_overflow(&text));
        assert_eq!(status_in_text(&variant), status_in_text(&text));
    }
    if is_context_overflow(&text) {
        assert_eq!(kind, Some(FailureKind::ContextLength));
    } else if let Some(k) = input.status.and_then(kind_of_status) {
        assert_eq!(kind, Some(k), "status {:?}", input.status);
    } else if input.status.is_none()
        && let Some(k) = status_in_text(&text).and_then(kind_of_status)
    {
        assert_eq!(kind, Some(k), "status in {text:?}");
    }
    if let Some(n) = status_in_text(&text) {
        assert!((400..=599).contains(&n));
        assert!(text.contains(&n.to_string()));
    }
    for status in [input.status.unwrap_or(0), 200, 404, 429, 500, 503, 529] {
        let _ = kind_of_status(status);
    }

    let headers: Vec<(String, String)> = input
        .headers
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect();
    for (_, value) in &headers {
        // Surrounding blanks do not change a value.
        assert_eq!(
            parse_retry_after(&format!(" {value}\t")),
            parse_retry_after(value)
        );
        assert_eq!(
            parse_retry_after_ms(&format!(" {value} ")),
            parse_retry_after_ms(value)
        );
    }
    let pairs = || headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let got = retry_after_of_headers(pairs());
    // The reference: the last valid `retry-after-ms`, else the last `retry-after` parsed.
    let last = |name: &str, parse: fn(&str) -> Option<RetryAfter>| {
        headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| parse(v))
    };
    let expected = last("retry-after-ms", parse_retry_after_ms)
        .or_else(|| last("retry-after", parse_retry_after));
    assert_eq!(got, expected, "{headers:?}");
    let flipped: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (flip_ascii_case(n), v.clone()))
        .collect();
    assert_eq!(
        retry_after_of_headers(flipped.iter().map(|(n, v)| (n.as_str(), v.as_str()))),
        got,
        "header names are case-insensitive"
    );
}

fn flip_ascii_case(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Configuration text

/// Target `config` (byte-level): the input, lossily decoded, is a configuration file. Never
/// a panic; a file that parses holds only valid prices, so every estimate from its table is
/// finite and not negative; the same text parses the same way twice; a duration that parses
/// prints back to a text that parses to it; whether a `--store` value is a URL depends only on
/// its scheme.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = agentrun_fs::config::Config::parse(&text) {
        assert!(config.prices.values().all(ModelPrice::is_valid));
        let table = config.price_table();
        let usage = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 500_000,
            output_tokens: 1_000_000,
            ..Usage::default()
        };
        for model in config.prices.keys() {
            let cost = table.estimate(&usage, [model.as_str()]);
            assert!(
                cost.is_none_or(|c| c.is_finite() && c >= 0.0),
                "{model:?}: {cost:?}"
            );
            // Lookups trim the model name, so only a trimmed key is certainly found.
            if model.trim() == model {
                assert!(
                    cost.is_some(),
                    "the configured price of {model:?} is not used"
                );
            }
        }
        assert!(agentrun_fs::config::Config::parse(&text).is_ok());
    }
    for word in text.split_whitespace() {
        // Printed durations are whole milliseconds, read back exactly while the float the
        // parser goes through holds them exactly (well below 2^53 ms).
        if let Ok(d) = agentrun_fs::config::parse_duration(word)
            && d.as_millis() < 1 << 40
        {
            let printed = agentrun_fs::config::format_duration(d);
            let whole = Duration::from_millis(u64::try_from(d.as_millis()).unwrap());
            assert_eq!(
                agentrun_fs::config::parse_duration(&printed).ok(),
                Some(whole),
                "{word:?} parses to {d:?}, printed {printed:?}"
            );
        }
        let url = agentrun_fs::is_store_url(word);
        let expected = word.split_once("://").is_some_and(|(scheme, _)| {
            !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric())
        });
        assert_eq!(url, expected, "{word:?}");
    }
}
