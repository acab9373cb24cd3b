//! Properties of auto mode's text parsers: the appended-instruction sanitizer and the verdict
//! parser. Each check panics only when a property is violated.

use agentrun_core::auto_mode::sanitize::{
    MAX_SANITIZED_BYTES, TRUNCATION_MARKER, contains_injection_pattern, sanitize_instruction,
};
use agentrun_core::auto_mode::{Verdict, parse_verdict};

/// Invisible characters that must never survive sanitizing (a sample of the removed set; the
/// sanitizer removes more).
const INVISIBLE: [char; 6] = [
    '\u{200B}', '\u{200D}', '\u{202E}', '\u{2066}', '\u{FEFF}', '\u{00AD}',
];

/// The sanitizer's output is bounded, carries the marker exactly when it was cut, holds no
/// control or invisible characters and no injection pattern, and is stable when sanitized
/// again.
pub fn check_sanitizer(input: &str) {
    let out = sanitize_instruction(input);
    let cut = out.ends_with(TRUNCATION_MARKER);
    let body = if cut {
        &out[..out.len() - TRUNCATION_MARKER.len()]
    } else {
        &out[..]
    };
    assert!(
        body.len() <= MAX_SANITIZED_BYTES,
        "sanitized text is {} bytes",
        body.len()
    );
    for c in body.chars() {
        assert!(
            c == '\n' || c == '\t' || !c.is_control(),
            "control character {c:?} survived"
        );
        assert!(
            !INVISIBLE.contains(&c),
            "invisible character {c:?} survived"
        );
    }
    assert!(
        !contains_injection_pattern(&out),
        "an injection pattern survived in {out:?}"
    );
    if !cut {
        assert_eq!(sanitize_instruction(&out), out, "sanitizing is not stable");
    }
}

/// A verdict is only found where its words stand whole in the answer, and spelling it out
/// alone always parses back to it.
pub fn check_verdict(answer: &str) {
    for v in [
        Verdict::Complete,
        Verdict::InProgress,
        Verdict::NeedsAdjustment,
    ] {
        assert_eq!(parse_verdict(v.as_str()), Some(v));
    }
    let Some(verdict) = parse_verdict(answer) else {
        return;
    };
    let words: Vec<String> = answer
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_uppercase)
        .collect();
    let first = verdict.as_str().split(' ').next().unwrap_or_default();
    assert!(
        words.iter().any(|w| w == first),
        "{verdict:?} found in {answer:?} without the whole word {first}"
    );
}
