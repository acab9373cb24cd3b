//! Budgets and pricing: the built-in price table, estimates for harnesses that report no
//! cost, and the check that says which limit a spend reached.

use agentrun_core::budget::{Budget, BudgetError, BudgetExceeded, ModelPrice, PriceTable, Spend};
use agentrun_core::harness::Usage;

fn tokens(input: u64, cached: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn the_builtin_table_parses_is_dated_and_prices_the_documented_models() {
    let table = PriceTable::builtin();
    assert_eq!(table.date.len(), 10, "{}", table.date);
    assert!(table.models.len() > 10);
    assert!(table.models.values().all(ModelPrice::is_valid));
    for model in ["gpt-5-codex", "gpt-5", "gemini-2.5-pro", "gemini-2.5-flash"] {
        assert!(table.price(model).is_some(), "{model}");
    }
}

#[test]
fn names_are_matched_exactly_then_without_provider_then_by_the_longest_dash_prefix() {
    let table = PriceTable::builtin();
    let codex = table.price("gpt-5-codex").copied();
    assert_eq!(table.price("openai/gpt-5-codex").copied(), codex);
    assert_eq!(table.price("gpt-5-codex-2025-09-15").copied(), codex);
    assert_eq!(
        table.price("gemini-2.5-flash-lite-preview").copied(),
        table.price("gemini-2.5-flash-lite").copied()
    );
    // `gpt-5x` is not `gpt-5`: only a dash continues a name.
    assert_eq!(table.price("gpt-5x"), None);
    assert_eq!(table.price("unknown-model"), None);
}

#[test]
fn cached_input_is_priced_apart_and_overrides_win() {
    let price = ModelPrice {
        input: 2.0,
        cached_input: 0.5,
        output: 10.0,
    };
    // 1M input of which 400k cached, 100k output: 0.6*2 + 0.4*0.5 + 0.1*10.
    let cost = price.cost(&tokens(1_000_000, 400_000, 100_000));
    assert!((cost - 2.4).abs() < 1e-9, "{cost}");
    let table = PriceTable::builtin().with_overrides([("gpt-5-codex".to_owned(), price)]);
    assert_eq!(table.price("gpt-5-codex"), Some(&price));
}

#[test]
fn a_reported_cost_is_used_as_is_and_tokens_alone_are_estimated() {
    let table = PriceTable::builtin();
    let mut reported = tokens(1000, 0, 100);
    reported.cost_usd = Some(0.5);
    let spend = Spend::of_run(&reported, ["gpt-5-codex"], &table);
    assert_eq!(
        (spend.cost_usd, spend.cost_estimated, spend.tokens),
        (0.5, false, 1100)
    );

    let spend = Spend::of_run(&tokens(1_000_000, 0, 0), ["gpt-5-codex"], &table);
    assert!(spend.cost_estimated);
    assert!((spend.cost_usd - 1.25).abs() < 1e-9, "{}", spend.cost_usd);
    assert!(spend.line().contains("(estimated)"));

    let spend = Spend::of_run(&tokens(10, 0, 10), ["mystery"], &table);
    assert_eq!((spend.cost_usd, spend.unpriced_runs), (0.0, 1));
}

#[test]
fn the_limit_reached_is_named_cost_first() {
    let budget = Budget {
        max_cost_usd: Some(1.0),
        max_tokens: Some(1000),
    };
    let mut spent = Spend::default();
    assert_eq!(budget.exceeded(&spent), None);
    spent.add(&Spend {
        cost_usd: 0.6,
        tokens: 999,
        ..Spend::default()
    });
    assert_eq!(budget.exceeded(&spent), None);
    spent.add(&Spend {
        tokens: 1,
        ..Spend::default()
    });
    assert_eq!(
        budget.exceeded(&spent),
        Some(BudgetExceeded::Tokens {
            limit: 1000,
            spent: 1000
        })
    );
    spent.add(&Spend {
        cost_usd: 0.4,
        cost_estimated: true,
        ..Spend::default()
    });
    let exceeded = budget.exceeded(&spent).unwrap();
    assert!(matches!(
        exceeded,
        BudgetExceeded::Cost {
            estimated: true,
            ..
        }
    ));
    assert!(
        exceeded
            .diagnostic()
            .contains("$1.0000 (estimated) of $1.0000"),
        "{}",
        exceeded.diagnostic()
    );
    assert!(Budget::default().exceeded(&spent).is_none());
}

#[test]
fn bad_limits_are_refused() {
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let b = Budget {
            max_cost_usd: Some(bad),
            ..Budget::default()
        };
        assert!(matches!(b.validate(), Err(BudgetError::Cost(_))), "{bad}");
    }
    let b = Budget {
        max_tokens: Some(0),
        ..Budget::default()
    };
    assert_eq!(b.validate(), Err(BudgetError::Tokens));
    assert_eq!(Budget::default().validate(), Ok(()));
}
