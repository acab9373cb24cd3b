//! Fuzzes budgets and the price table with random usages (any reported cost, any model names) and
//! price overrides: every run's spend finite and not negative, the total never decreases, a
//! budget once exceeded stays exceeded. The input type and body live in `agentrun_tests::machine_fuzz` so stable CI
//! replays this corpus too.
#![no_main]

use agentrun_tests::machine_fuzz::{BudgetInput, check_budget};

libfuzzer_sys::fuzz_target!(|input: BudgetInput| check_budget(&input));
