//! The Evaluate turn's verdict: `COMPLETE`, `IN PROGRESS` or `NEEDS ADJUSTMENT`.
//!
//! Parsed as whole words, case-insensitively: `INCOMPLETE` is not `COMPLETE`, and
//! `in-progress`, `**Complete.**` or `Verdict: needs adjustment` are recognized. An answer
//! that names two different verdicts, or negates completion (`not complete`), claims nothing:
//! auto mode must never finish on an ambiguous answer.

use serde::{Deserialize, Serialize};

/// One verdict of an Evaluate turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The agent claims the objective is done.
    Complete,
    /// Work remains; the plan still holds.
    InProgress,
    /// Work remains and the plan must change first.
    NeedsAdjustment,
}

impl Verdict {
    /// The protocol spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Complete => "COMPLETE",
            Verdict::InProgress => "IN PROGRESS",
            Verdict::NeedsAdjustment => "NEEDS ADJUSTMENT",
        }
    }
}

/// The most text a verdict is looked for in; a verdict answer is a word or two, and a final
/// message used as fallback keeps its verdict near the end, so the tail is what is scanned.
pub const MAX_VERDICT_SCAN_BYTES: usize = 64 * 1024;

/// Words that, shortly before `COMPLETE`, turn it into a denial.
const NEGATIONS: [&str; 11] = [
    "NOT", "NO", "NOR", "NEVER", "ISN'T", "ISNT", "NOTHING", "AREN'T", "ARENT", "WASN'T", "WASNT",
];

/// How many words before `COMPLETE` a negation is looked for: "not complete", "not yet
/// complete", "isn't quite fully complete" are all denials, not claims.
const NEGATION_WINDOW: usize = 3;

/// Parses the verdict of `answer`, or `None` when it names no verdict, several different
/// ones, or a negated completion.
#[must_use]
pub fn parse_verdict(answer: &str) -> Option<Verdict> {
    let tail = tail_on_char_boundary(answer, MAX_VERDICT_SCAN_BYTES);
    let words: Vec<String> = tail
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(|w| w.trim_matches('\'').to_uppercase())
        .filter(|w| !w.is_empty())
        .collect();
    let mut found: Option<Verdict> = None;
    for (i, word) in words.iter().enumerate() {
        let next = words.get(i + 1).map(String::as_str);
        let verdict = match (word.as_str(), next) {
            ("COMPLETE", _) => {
                let window = &words[i.saturating_sub(NEGATION_WINDOW)..i];
                if window.iter().any(|w| NEGATIONS.contains(&w.as_str())) {
                    return None;
                }
                Verdict::Complete
            }
            ("IN", Some("PROGRESS")) => Verdict::InProgress,
            ("NEEDS", Some("ADJUSTMENT")) => Verdict::NeedsAdjustment,
            _ => continue,
        };
        match found {
            Some(v) if v != verdict => return None,
            _ => found = Some(verdict),
        }
    }
    found
}

/// The last `max` bytes of `s`, starting on a character boundary.
fn tail_on_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negation_a_few_words_before_complete_is_a_denial() {
        for answer in [
            "not complete",
            "Not yet complete.",
            "The work is not fully complete",
            "It isn't quite complete",
            "we aren't really done, nor complete",
        ] {
            assert_eq!(parse_verdict(answer), None, "{answer:?}");
        }
        // A negation further back belongs to another clause.
        assert_eq!(
            parse_verdict("No tests fail any more; the objective is COMPLETE"),
            Some(Verdict::Complete)
        );
    }

    #[test]
    fn exact_answers() {
        assert_eq!(parse_verdict("COMPLETE"), Some(Verdict::Complete));
        assert_eq!(parse_verdict("IN PROGRESS\n"), Some(Verdict::InProgress));
        assert_eq!(
            parse_verdict("NEEDS ADJUSTMENT"),
            Some(Verdict::NeedsAdjustment)
        );
    }

    #[test]
    fn case_whitespace_and_punctuation() {
        assert_eq!(parse_verdict("  **complete.**  "), Some(Verdict::Complete));
        assert_eq!(
            parse_verdict("Verdict: `In-Progress`"),
            Some(Verdict::InProgress)
        );
        assert_eq!(
            parse_verdict("needs\tadjustment!"),
            Some(Verdict::NeedsAdjustment)
        );
        assert_eq!(parse_verdict("\"COMPLETE\""), Some(Verdict::Complete));
    }

    #[test]
    fn whole_words_only() {
        assert_eq!(parse_verdict("INCOMPLETE"), None);
        assert_eq!(parse_verdict("The work is incomplete."), None);
        assert_eq!(parse_verdict("COMPLETED"), None);
        assert_eq!(parse_verdict("completeness"), None);
        assert_eq!(parse_verdict("in progression"), None);
    }

    #[test]
    fn two_verdicts_are_not_a_claim() {
        assert_eq!(parse_verdict("COMPLETE or IN PROGRESS"), None);
        assert_eq!(
            parse_verdict("answer COMPLETE, IN PROGRESS or NEEDS ADJUSTMENT"),
            None
        );
        // The same verdict twice is still one verdict.
        assert_eq!(
            parse_verdict("COMPLETE. All tests pass, so: COMPLETE"),
            Some(Verdict::Complete)
        );
    }

    #[test]
    fn negated_completion_is_not_a_claim() {
        assert_eq!(parse_verdict("not complete"), None);
        assert_eq!(parse_verdict("It isn't complete yet"), None);
    }

    #[test]
    fn nothing_is_nothing() {
        assert_eq!(parse_verdict(""), None);
        assert_eq!(parse_verdict("   \n"), None);
        assert_eq!(parse_verdict("done!"), None);
    }

    #[test]
    fn long_answers_are_scanned_from_the_tail() {
        let mut s = "é".repeat(MAX_VERDICT_SCAN_BYTES);
        s.push_str(" COMPLETE");
        assert_eq!(parse_verdict(&s), Some(Verdict::Complete));
    }
}
