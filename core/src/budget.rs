//! Budgets: a cap on what a run or a session may spend, in US dollars and in tokens, and the
//! price table that turns the tokens of a harness that reports no cost into an estimated one.
//!
//! [`Budget`] holds the limits, [`Spend`] what was spent so far (the runs' own usage, summed;
//! a harness session's running totals are first turned into each run's own by
//! [`UsageLedger`](crate::harness::UsageLedger)), and [`Budget::exceeded`] says whether the
//! spend reached a limit. The check is the caller's to make after every turn, and while a
//! turn runs whenever the stream reports usage: the turn that reaches a limit is the last.
//!
//! Costs: a harness's own reported cost is used as it is. A harness that reports tokens but
//! no cost (Codex, Gemini CLI) is priced from [`PriceTable`]: the table built into this
//! version (`core/data/prices.json`, per model, per million input, cached-input and output
//! tokens, with the date the prices were read), with the user's overrides on top. Such a cost
//! is marked estimated ([`Spend::cost_estimated`]). Tokens of a model the table does not know
//! cost nothing known: [`Spend::unpriced_runs`] counts them, and a cost limit cannot see them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::harness::Usage;

/// The price table built into this version.
const BUILTIN_PRICES: &str = include_str!("../data/prices.json");

/// What one model costs, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input tokens not read from a prompt cache.
    pub input: f64,
    /// Input tokens read from a prompt cache.
    pub cached_input: f64,
    /// Output tokens, reasoning included.
    pub output: f64,
}

impl ModelPrice {
    /// Whether every price is a finite number of at least zero.
    pub fn is_valid(&self) -> bool {
        [self.input, self.cached_input, self.output]
            .iter()
            .all(|p| p.is_finite() && *p >= 0.0)
    }

    /// What `usage`'s tokens cost at these prices.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let fresh = usage.input_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + usage.output_tokens as f64 * self.output)
            / 1e6
    }
}

/// Model prices, with the date they were read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// When the prices were read (`YYYY-MM-DD`).
    pub date: String,
    /// The prices by model name.
    pub models: BTreeMap<String, ModelPrice>,
}

/// The built-in table's file: the table and what it says about itself.
#[derive(Deserialize)]
struct PriceFile {
    #[allow(dead_code)]
    version: u32,
    date: String,
    #[allow(dead_code)]
    source: String,
    #[allow(dead_code)]
    unit: String,
    models: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// The table built into this version (`core/data/prices.json`).
    pub fn builtin() -> PriceTable {
        // The file is part of the source; a test proves it parses and every price is valid.
        match serde_json::from_str::<PriceFile>(BUILTIN_PRICES) {
            Ok(file) => PriceTable {
                date: file.date,
                models: file.models,
            },
            Err(_) => PriceTable::default(),
        }
    }

    /// This table with `overrides` on top (a model named there gets that price).
    #[must_use]
    pub fn with_overrides(
        mut self,
        overrides: impl IntoIterator<Item = (String, ModelPrice)>,
    ) -> Self {
        self.models.extend(overrides);
        self
    }

    /// The price of `model`: its own entry, else (after dropping a `provider/` prefix) the
    /// entry of the longest name it extends with a dash (`gpt-5-codex-2025-09` is priced as
    /// `gpt-5-codex`, `gemini-2.5-pro-preview` as `gemini-2.5-pro`).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        let model = model.trim();
        if let Some(p) = self.models.get(model) {
            return Some(p);
        }
        let bare = model.rsplit('/').next().unwrap_or(model);
        if let Some(p) = self.models.get(bare) {
            return Some(p);
        }
        self.models
            .iter()
            .filter(|(name, _)| {
                bare.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| p)
    }

    /// The estimated cost of `usage`'s tokens on the first of `models` the table prices.
    pub fn estimate<'a>(
        &self,
        usage: &Usage,
        models: impl IntoIterator<Item = &'a str>,
    ) -> Option<f64> {
        models
            .into_iter()
            .find_map(|m| self.price(m))
            .map(|p| p.cost(usage))
    }
}

/// What was spent: a run's, or a session's runs' summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// US dollars: reported by the harness, or estimated from the price table.
    pub cost_usd: f64,
    /// Whether any part of `cost_usd` is an estimate from the price table.
    #[serde(default)]
    pub cost_estimated: bool,
    /// Tokens: input (cached included) plus output.
    pub tokens: u64,
    /// Runs whose tokens had no cost: the harness reported none and the table knows none of
    /// their models.
    #[serde(default)]
    pub unpriced_runs: u64,
}

impl Spend {
    /// What one run spent: `usage` is the run's own; `models` the models that answered (for
    /// the estimate when the harness reported no cost).
    pub fn of_run<'a>(
        usage: &Usage,
        models: impl IntoIterator<Item = &'a str>,
        prices: &PriceTable,
    ) -> Spend {
        let tokens = usage.input_tokens.saturating_add(usage.output_tokens);
        let (cost_usd, cost_estimated, unpriced_runs) = match usage.cost_usd {
            Some(cost) if cost.is_finite() && cost >= 0.0 => (cost, false, 0),
            _ => match prices.estimate(usage, models) {
                Some(cost) => (cost, true, 0),
                None => (0.0, false, u64::from(tokens > 0)),
            },
        };
        Spend {
            cost_usd,
            cost_estimated,
            tokens,
            unpriced_runs,
        }
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Spend) {
        self.cost_usd = (self.cost_usd + other.cost_usd).min(f64::MAX);
        self.cost_estimated |= other.cost_estimated;
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.unpriced_runs = self.unpriced_runs.saturating_add(other.unpriced_runs);
    }

    /// `$0.4200 (estimated), 12345 tokens`.
    pub fn line(&self) -> String {
        format!(
            "${:.4}{}, {} tokens",
            self.cost_usd,
            if self.cost_estimated {
                " (estimated)"
            } else {
                ""
            },
            self.tokens
        )
    }
}

/// The limits of a run or a session (each optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// At most this many US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// At most this many tokens (input plus output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Why a budget cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// The cost limit is not a positive finite number of dollars (the number given, as text).
    #[error("the cost limit must be a positive number of US dollars, not {0}")]
    Cost(String),
    /// The token limit is zero.
    #[error("the token limit must be at least 1")]
    Tokens,
}

impl Budget {
    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.max_cost_usd.is_none() && self.max_tokens.is_none()
    }

    /// Checks the limits.
    ///
    /// # Errors
    /// [`BudgetError`] for a cost limit that is not a positive finite number, or zero tokens.
    pub fn validate(&self) -> Result<(), BudgetError> {
        if let Some(c) = self.max_cost_usd
            && !(c.is_finite() && c > 0.0)
        {
            return Err(BudgetError::Cost(c.to_string()));
        }
        if self.max_tokens == Some(0) {
            return Err(BudgetError::Tokens);
        }
        Ok(())
    }

    /// The limit `spent` reached, if any (the cost limit first).
    pub fn exceeded(&self, spent: &Spend) -> Option<BudgetExceeded> {
        if let Some(limit) = self.max_cost_usd
            && spent.cost_usd >= limit
        {
            return Some(BudgetExceeded::Cost {
                limit,
                spent: spent.cost_usd,
                estimated: spent.cost_estimated,
            });
        }
        if let Some(limit) = self.max_tokens
            && spent.tokens >= limit
        {
            return Some(BudgetExceeded::Tokens {
                limit,
                spent: spent.tokens,
            });
        }
        None
    }
}

/// The limit a spend reached.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetExceeded {
    /// The cost limit.
    Cost {
        /// The limit, US dollars.
        limit: f64,
        /// What was spent.
        spent: f64,
        /// Whether the spend is (partly) estimated from the price table.
        estimated: bool,
    },
    /// The token limit.
    Tokens {
        /// The limit.
        limit: u64,
        /// What was spent.
        spent: u64,
    },
}

impl BudgetExceeded {
    /// `budget spent: $0.5100 of $0.5000 (--max-cost-usd)`.
    pub fn diagnostic(&self) -> String {
        match self {
            BudgetExceeded::Cost {
                limit,
                spent,
                estimated,
            } => format!(
                "budget spent: ${spent:.4}{} of ${limit:.4} (the cost limit)",
                if *estimated { " (estimated)" } else { "" }
            ),
            BudgetExceeded::Tokens { limit, spent } => {
                format!("budget spent: {spent} tokens of {limit} (the token limit)")
            }
        }
    }
}
