//! Token and cost usage: what a harness reported, what one run spent, and what a series of
//! runs on one harness session spent.
//!
//! Harnesses differ in what a figure counts once a session is resumed. Claude Code's
//! `total_cost_usd` is the session's running total while its `usage` tokens are the run's
//! own; Codex's token counts are the thread's running total; OpenCode's are per message.
//! [`Usage`] therefore says, for its tokens and for its cost, which they are
//! ([`UsageScope`]); [`Usage::since`] turns running totals into a run's own given the total
//! before the run, and [`UsageLedger`] does that across the turns of one session so their sum
//! is what was really spent.

use serde::{Deserialize, Serialize};

use super::{Harness, json};

/// What a usage figure counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UsageScope {
    /// This run's own usage.
    #[default]
    Run,
    /// The harness session's running total: this run's own plus that of the earlier runs of
    /// the session it resumed. Subtract the total the previous run reported
    /// ([`Usage::since`], [`UsageLedger`]) to get the run's own.
    Session,
    /// The run resumed a session and the harness does not document whether this figure counts
    /// the earlier runs too.
    Unknown,
}

impl UsageScope {
    /// The scope of a sum: unknown when either part is, else a running total when either is.
    fn combine(self, other: UsageScope) -> UsageScope {
        match (self, other) {
            (UsageScope::Unknown, _) | (_, UsageScope::Unknown) => UsageScope::Unknown,
            (UsageScope::Session, _) | (_, UsageScope::Session) => UsageScope::Session,
            _ => UsageScope::Run,
        }
    }
}

/// Token and cost usage, in one convention for every harness: `input_tokens` includes the
/// cached ones (`cached_input_tokens` is the part read from a prompt cache), and
/// `output_tokens` includes the reasoning ones (`reasoning_tokens` is that part). Each decoder
/// converts its harness's own counting to this. `tokens_scope` and `cost_scope` say whether
/// the figures are the run's own or, after a resume, the session's running total.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens, cached ones included.
    pub input_tokens: u64,
    /// The part of the input read from a prompt cache.
    pub cached_input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// The part of the output spent on reasoning/thinking.
    pub reasoning_tokens: u64,
    /// What the four token counts count.
    #[serde(default)]
    pub tokens_scope: UsageScope,
    /// Cost in US dollars, when reported.
    pub cost_usd: Option<f64>,
    /// What `cost_usd` counts.
    #[serde(default)]
    pub cost_scope: UsageScope,
    /// Turns (model round trips) of this run, when reported.
    pub turns: Option<u64>,
}

impl Usage {
    /// Adds the token counts of `v` at `keys` — input, cached input, output, reasoning; `a.b`
    /// reads key `b` of object `a`. An absent or non-numeric count adds nothing, and sums
    /// saturate, so a hostile count cannot overflow.
    pub(crate) fn add_tokens(&mut self, v: &serde_json::Value, keys: [&str; 4]) {
        let count = |path: &str| {
            let (parent, key) = match path.split_once('.') {
                Some((object, key)) => (v.get(object), key),
                None => (Some(v), path),
            };
            parent.and_then(|p| json::u64(p, key)).unwrap_or(0)
        };
        let [input, cached, output, reasoning] = keys;
        self.input_tokens = self.input_tokens.saturating_add(count(input));
        self.cached_input_tokens = self.cached_input_tokens.saturating_add(count(cached));
        self.output_tokens = self.output_tokens.saturating_add(count(output));
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(count(reasoning));
    }

    /// Adds a reported cost.
    pub(crate) fn add_cost(&mut self, cost: f64) {
        self.cost_usd = Some(add_costs(self.cost_usd.unwrap_or(0.0), cost));
    }

    fn tokens(&self) -> [u64; 4] {
        [
            self.input_tokens,
            self.cached_input_tokens,
            self.output_tokens,
            self.reasoning_tokens,
        ]
    }

    fn set_tokens(&mut self, [input, cached, output, reasoning]: [u64; 4]) {
        self.input_tokens = input;
        self.cached_input_tokens = cached;
        self.output_tokens = output;
        self.reasoning_tokens = reasoning;
    }

    /// This run's own usage, when `before` is the session's running total as the previous run
    /// left it. Only figures whose scope is [`UsageScope::Session`] are reduced, and they
    /// become [`UsageScope::Run`]: the tokens less `before`'s, the cost less `before`'s (a
    /// missing cost in `before` counts as none spent). A figure below `before`'s was not a
    /// running total after all (the harness restarted its count) and is kept as the run's
    /// own. Figures that are already the run's own, or of unknown scope, are kept as they are.
    #[must_use]
    pub fn since(&self, before: &Usage) -> Usage {
        let mut own = self.clone();
        if self.tokens_scope == UsageScope::Session {
            let (now, then) = (self.tokens(), before.tokens());
            if now.iter().zip(then).all(|(n, t)| *n >= t) {
                own.set_tokens([0, 1, 2, 3].map(|i| now[i] - then[i]));
            }
            own.tokens_scope = UsageScope::Run;
        }
        if self.cost_scope == UsageScope::Session {
            if let (Some(now), Some(then)) = (self.cost_usd, before.cost_usd)
                && now >= then
            {
                own.cost_usd = Some(now - then);
            }
            own.cost_scope = UsageScope::Run;
        }
        own
    }

    /// Adds `other` to `self`: token counts (saturating), costs (a missing one adds nothing)
    /// and turns. The sum's scope is unknown when either part's is.
    pub fn accumulate(&mut self, other: &Usage) {
        let (mine, theirs) = (self.tokens(), other.tokens());
        self.set_tokens([0, 1, 2, 3].map(|i| mine[i].saturating_add(theirs[i])));
        self.tokens_scope = self.tokens_scope.combine(other.tokens_scope);
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(add_costs(a, b)),
            (a, b) => a.or(b),
        };
        self.cost_scope = self.cost_scope.combine(other.cost_scope);
        self.turns = match (self.turns, other.turns) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
    }

    /// `N input tokens, M output tokens, $X` (the cost, when known, to the millionth of a
    /// dollar), each figure followed by what it counts when that is not the run's own.
    #[must_use]
    pub fn line(&self) -> String {
        let scope = |s: UsageScope| match s {
            UsageScope::Run => "",
            UsageScope::Session => " (session running total)",
            UsageScope::Unknown => " (may include earlier runs)",
        };
        let mut s = format!(
            "{} input tokens, {} output tokens{}",
            self.input_tokens,
            self.output_tokens,
            scope(self.tokens_scope)
        );
        if let Some(cost) = self.cost_usd {
            let cost = format!("{cost:.6}");
            let cost = cost.trim_end_matches('0').trim_end_matches('.');
            s.push_str(&format!(", ${cost}{}", scope(self.cost_scope)));
        }
        s
    }

    /// `N turns, $X.XX` when turns or cost are known, else token counts.
    pub fn summary(&self) -> String {
        match (self.turns, self.cost_usd) {
            (Some(t), Some(c)) if c > 0.0 => format!("{}, ${c:.2}", turns_text(t)),
            _ => {
                let mut s = format!(
                    "{} input tokens, {} output tokens",
                    self.input_tokens, self.output_tokens
                );
                if self.cached_input_tokens > 0 {
                    s.push_str(&format!(", {} cached", self.cached_input_tokens));
                }
                if self.reasoning_tokens > 0 {
                    s.push_str(&format!(", {} reasoning", self.reasoning_tokens));
                }
                s
            }
        }
    }
}

impl Harness {
    /// What the harness's reported tokens and cost count when the run resumed a session.
    ///
    /// Claude Code: the result's `usage` tokens are the run's own, its `total_cost_usd` the
    /// session's running total. Codex: `turn.completed.usage` (and the session file's
    /// `total_token_usage`) is the thread's running total; no cost. OpenCode: tokens and cost
    /// per message, the run's messages only; Gemini CLI: the result's `stats` count the run's
    /// requests only (no cost). Muse: the retained session log holds every run of
    /// the session and its usage is summed over all of them. Grok and Antigravity: not
    /// documented.
    #[must_use]
    pub fn usage_scopes_after_resume(self) -> (UsageScope, UsageScope) {
        match self {
            Harness::Claude => (UsageScope::Run, UsageScope::Session),
            Harness::Codex | Harness::Muse => (UsageScope::Session, UsageScope::Run),
            // Qwen Code's result total is the session's, but its assistant messages (which
            // the decoder sums) and its session log's records are the run's own; pi's stream
            // and log records of a run are the run's own; Gemini CLI's result `stats` count
            // the run's requests only.
            Harness::OpenCode | Harness::Qwen | Harness::Pi | Harness::Gemini => {
                (UsageScope::Run, UsageScope::Run)
            }
            Harness::Grok | Harness::Antigravity => (UsageScope::Unknown, UsageScope::Unknown),
        }
    }
}

/// The usage of a series of runs, each resuming the harness session the previous one left
/// (auto mode's turns): it turns each run's report into the run's own usage and sums them, so
/// the total is what the series really spent, not a sum of running totals.
///
/// Feed the reports in run order with [`UsageLedger::record`]. A run that names another
/// harness session than the previous one started afresh: its running totals are its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageLedger {
    /// The harness session the running totals belong to.
    #[serde(default)]
    harness_session_id: Option<String>,
    /// The session's running totals as the last report left them: what is already counted.
    #[serde(default)]
    running: Option<Usage>,
    /// The runs' own usage, summed.
    #[serde(default)]
    total: Option<Usage>,
}

impl UsageLedger {
    /// Records the usage a run reported on harness session `harness_session_id` (`None`: the
    /// stream named none, so the session is the previous run's) and returns the run's own.
    pub fn record(&mut self, harness_session_id: Option<&str>, reported: &Usage) -> Usage {
        let same_session = match (harness_session_id, &self.harness_session_id) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(id), Some(previous)) => id == previous,
        };
        if !same_session {
            self.running = None;
            self.harness_session_id = harness_session_id.map(str::to_owned);
        }
        let before = self.running.take().unwrap_or_default();
        let own = reported.since(&before);
        let mut running = before;
        if reported.tokens_scope == UsageScope::Session {
            running.set_tokens(reported.tokens());
        } else {
            let (then, added) = (running.tokens(), own.tokens());
            running.set_tokens([0, 1, 2, 3].map(|i| then[i].saturating_add(added[i])));
        }
        match (reported.cost_scope, reported.cost_usd, own.cost_usd) {
            (UsageScope::Session, Some(total), _) => running.cost_usd = Some(total),
            (UsageScope::Session, None, _) | (_, _, None) => {}
            (_, _, Some(spent)) => running.cost_usd = Some(running.cost_usd.unwrap_or(0.0) + spent),
        }
        self.running = Some(running);
        self.total
            .get_or_insert_with(Usage::default)
            .accumulate(&own);
        own
    }

    /// The runs' own usage, summed; `None` before any run reported usage.
    #[must_use]
    pub fn total(&self) -> Option<&Usage> {
        self.total.as_ref()
    }
}

/// `a + b`, saturating at the largest finite cost: an infinite one would print as `$inf` and
/// serialize as `null` (a lost cost, counted again from scratch after a reload).
fn add_costs(a: f64, b: f64) -> f64 {
    (a + b).min(f64::MAX)
}

/// `1 turn`, `N turns`: the start of a harness summary.
pub(crate) fn turns_text(turns: u64) -> String {
    format!("{turns} turn{}", if turns == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_saturate_instead_of_becoming_infinite() {
        let mut u = Usage::default();
        u.add_cost(f64::MAX);
        u.add_cost(f64::MAX);
        assert_eq!(u.cost_usd, Some(f64::MAX));
        let mut total = u.clone();
        total.accumulate(&u);
        assert_eq!(total.cost_usd, Some(f64::MAX));
        assert!(serde_json::to_value(&total).unwrap()["cost_usd"].is_number());
        // A negative or non-finite reported cost is no cost.
        let v = serde_json::json!({"neg": -1.5, "zero": 0.0, "big": 1e308});
        assert_eq!(json::f64(&v, "neg"), None);
        assert_eq!(json::f64(&v, "zero"), Some(0.0));
        assert_eq!(json::f64(&v, "big"), Some(1e308));
    }

    fn claude(input: u64, cost: Option<f64>) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: 10,
            cost_usd: cost,
            cost_scope: UsageScope::Session,
            turns: Some(1),
            ..Usage::default()
        }
    }

    fn codex(input: u64) -> Usage {
        Usage {
            input_tokens: input,
            cached_input_tokens: input / 2,
            output_tokens: input / 10,
            tokens_scope: UsageScope::Session,
            ..Usage::default()
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn since_reduces_only_running_totals() {
        // Claude Code: per-run tokens, running-total cost.
        let own = claude(100, Some(0.3)).since(&claude(100, Some(0.1)));
        assert_eq!(own.input_tokens, 100);
        assert!(close(own.cost_usd, 0.2), "{:?}", own.cost_usd);
        assert_eq!(
            (own.tokens_scope, own.cost_scope),
            (UsageScope::Run, UsageScope::Run)
        );
        // Codex: running-total tokens, no cost.
        let own = codex(280).since(&codex(140));
        assert_eq!(
            (own.input_tokens, own.cached_input_tokens, own.output_tokens),
            (140, 70, 14)
        );
        assert_eq!(own.cost_usd, None);
        // Figures already the run's own, or of unknown scope, are untouched.
        let run = Usage {
            input_tokens: 5,
            cost_usd: Some(1.0),
            ..Usage::default()
        };
        assert_eq!(run.since(&claude(1, Some(0.5))), run);
        let unknown = Usage {
            cost_scope: UsageScope::Unknown,
            tokens_scope: UsageScope::Unknown,
            ..run.clone()
        };
        assert_eq!(unknown.since(&claude(1, Some(0.5))), unknown);
    }

    #[test]
    fn since_keeps_a_total_that_went_down_as_the_runs_own() {
        let own = claude(100, Some(0.05)).since(&claude(100, Some(0.1)));
        assert!(close(own.cost_usd, 0.05));
        assert_eq!(own.cost_scope, UsageScope::Run);
        let own = codex(100).since(&codex(140));
        assert_eq!(own.input_tokens, 100);
        assert_eq!(own.tokens_scope, UsageScope::Run);
    }

    #[test]
    fn since_with_a_missing_cost() {
        // Nothing counted before: the whole running total is this run's.
        let own = claude(100, Some(0.3)).since(&claude(100, None));
        assert!(close(own.cost_usd, 0.3));
        // Nothing reported now: nothing to subtract from.
        let own = claude(100, None).since(&claude(100, Some(0.1)));
        assert_eq!(own.cost_usd, None);
        assert_eq!(own.cost_scope, UsageScope::Run);
    }

    #[test]
    fn a_ledger_totals_running_costs_as_the_last_running_total() {
        let mut ledger = UsageLedger::default();
        // The first run started the session: its figures are its own.
        let first = Usage {
            cost_scope: UsageScope::Run,
            ..claude(100, Some(0.1))
        };
        let own: Vec<Usage> = [first, claude(100, Some(0.25)), claude(100, Some(0.45))]
            .iter()
            .map(|u| ledger.record(Some("s1"), u))
            .collect();
        let costs: Vec<f64> = own.iter().map(|u| u.cost_usd.unwrap()).collect();
        assert!(close(Some(costs[0]), 0.1) && close(Some(costs[1]), 0.15));
        assert!(close(Some(costs[2]), 0.2), "{costs:?}");
        let total = ledger.total().unwrap();
        // The last running total, not 0.1 + 0.25 + 0.45.
        assert!(close(total.cost_usd, 0.45), "{:?}", total.cost_usd);
        assert_eq!(total.input_tokens, 300, "per-run tokens add up");
        assert_eq!(total.turns, Some(3));
        assert_eq!(total.cost_scope, UsageScope::Run);
    }

    #[test]
    fn a_ledger_totals_running_tokens() {
        let mut ledger = UsageLedger::default();
        for total in [140, 280, 420] {
            ledger.record(Some("thread"), &codex(total));
        }
        assert_eq!(ledger.total().unwrap().input_tokens, 420);
        assert_eq!(ledger.total().unwrap().cached_input_tokens, 210);
    }

    #[test]
    fn a_ledger_keeps_a_total_that_went_down_as_that_runs_own() {
        let mut ledger = UsageLedger::default();
        ledger.record(Some("s"), &claude(1, Some(0.4)));
        let own = ledger.record(Some("s"), &claude(1, Some(0.1)));
        assert!(close(own.cost_usd, 0.1));
        // The restarted count is the base for the next run.
        let own = ledger.record(Some("s"), &claude(1, Some(0.3)));
        assert!(close(own.cost_usd, 0.2), "{:?}", own.cost_usd);
        assert!(close(ledger.total().unwrap().cost_usd, 0.7));
    }

    #[test]
    fn a_ledger_with_a_missing_cost_counts_it_in_the_next_running_total() {
        let mut ledger = UsageLedger::default();
        ledger.record(Some("s"), &claude(1, Some(0.1)));
        // A run that reported no cost (killed before its result) …
        let own = ledger.record(None, &claude(1, None));
        assert_eq!(own.cost_usd, None);
        // … is counted in the next running total, so nothing is lost or counted twice.
        let own = ledger.record(Some("s"), &claude(1, Some(0.35)));
        assert!(close(own.cost_usd, 0.25));
        assert!(close(ledger.total().unwrap().cost_usd, 0.35));
    }

    #[test]
    fn a_ledger_starts_over_on_a_new_harness_session() {
        let mut ledger = UsageLedger::default();
        ledger.record(Some("a"), &claude(1, Some(0.5)));
        let own = ledger.record(Some("b"), &claude(1, Some(0.2)));
        assert!(close(own.cost_usd, 0.2));
        assert!(close(ledger.total().unwrap().cost_usd, 0.7));
    }

    #[test]
    fn a_ledger_total_of_unknown_scope_says_so() {
        let mut ledger = UsageLedger::default();
        ledger.record(Some("g"), &Usage::default());
        let unknown = Usage {
            cost_usd: Some(0.1),
            cost_scope: UsageScope::Unknown,
            tokens_scope: UsageScope::Unknown,
            ..Usage::default()
        };
        ledger.record(Some("g"), &unknown);
        let total = ledger.total().unwrap();
        assert_eq!(
            (total.tokens_scope, total.cost_scope),
            (UsageScope::Unknown, UsageScope::Unknown)
        );
    }

    #[test]
    fn a_line_names_tokens_cost_and_what_is_not_the_runs_own() {
        assert_eq!(
            claude(140, Some(0.000808)).line(),
            "140 input tokens, 10 output tokens, $0.000808 (session running total)"
        );
        let own = Usage {
            cost_usd: Some(1.5),
            ..Usage::default()
        };
        assert_eq!(own.line(), "0 input tokens, 0 output tokens, $1.5");
        assert_eq!(
            codex(10).line(),
            "10 input tokens, 1 output tokens (session running total)"
        );
    }

    #[test]
    fn scopes_serialize_in_snake_case_and_default_to_run() {
        let u: Usage = serde_json::from_str(
            r#"{"input_tokens":1,"cached_input_tokens":0,"output_tokens":2,"reasoning_tokens":0,"cost_usd":null,"turns":null}"#,
        )
        .unwrap();
        assert_eq!(
            (u.tokens_scope, u.cost_scope),
            (UsageScope::Run, UsageScope::Run)
        );
        let v = serde_json::to_value(claude(1, Some(0.1))).unwrap();
        assert_eq!(v["cost_scope"], "session");
        assert_eq!(v["tokens_scope"], "run");
    }
}
