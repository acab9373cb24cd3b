//! The failure kind of an HTTP status or of an error text, for the dialects that pass the API's
//! error on as a status or as words (Claude Code's `api_error_status`, Qwen Code's
//! `[API Error: 429 …]`) and for a harness's stderr where its stream carries nothing.

use super::FailureKind;

/// The kind of an API's HTTP error status: 429 rate limited, 529 and 503 overloaded, other 5xx
/// a server error, 401 and 403 auth; `None` for any other status (a 400 says nothing by its
/// status alone).
pub(crate) fn kind_of_status(status: u64) -> Option<FailureKind> {
    match status {
        429 => Some(FailureKind::RateLimited),
        503 | 529 => Some(FailureKind::Overloaded),
        500..=599 => Some(FailureKind::ServerError),
        401 | 403 => Some(FailureKind::Auth),
        _ => None,
    }
}

/// The HTTP status an error text names: the first three-digit number from 400 to 599 that
/// stands alone (`API Error: 529 Overloaded`, `[API Error: 500 …]`, `Request rejected (429)`,
/// `last status: 429 Too Many Requests`).
pub(crate) fn status_in_text(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        // A number inside a word, an identifier or a longer number is not a status.
        let before = start.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i).copied();
        let alone = |b: Option<u8>| b.is_none_or(|b| !b.is_ascii_alphanumeric() && b != b'.');
        if i - start == 3 && alone(before) && alone(after) {
            let n: u64 = text[start..i].parse().unwrap_or(0);
            if (400..600).contains(&n) {
                return Some(n);
            }
        }
    }
    None
}

/// The kind an error text names, by the words the APIs and the harnesses use (lowercased
/// comparison), else by the HTTP status it names. `None` when it names none.
pub(crate) fn kind_of_text(text: &str) -> Option<FailureKind> {
    let lower = text.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if has(&[
        "prompt is too long",
        "context length",
        "context_length",
        "context window",
        "maximum context",
    ]) {
        return Some(FailureKind::ContextLength);
    }
    if has(&[
        "rate limit",
        "rate_limit",
        "too many requests",
        "hit your limit",
        "usage limit",
        "quota exceeded",
        "resource_exhausted",
    ]) {
        return Some(FailureKind::RateLimited);
    }
    if has(&[
        "overloaded",
        "high demand",
        "service unavailable",
        "temporarily unavailable",
    ]) {
        return Some(FailureKind::Overloaded);
    }
    if has(&[
        "invalid api key",
        "invalid x-api-key",
        "authentication",
        "unauthorized",
        "incorrect api key",
        "api key not valid",
        "missing api key",
        "no api key",
    ]) {
        return Some(FailureKind::Auth);
    }
    if let Some(kind) = status_in_text(text).and_then(kind_of_status) {
        return Some(kind);
    }
    if has(&[
        "econnrefused",
        "connection refused",
        "econnreset",
        "connection reset",
        "enotfound",
        "getaddrinfo",
        "etimedout",
        "request timed out",
        "fetch failed",
        "socket hang up",
        "other side closed",
        "und_err_socket",
        "network error",
        "unable to connect",
        "connection error",
        "certificate",
    ]) {
        return Some(FailureKind::Network);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_their_kinds_and_other_statuses_to_none() {
        assert_eq!(kind_of_status(429), Some(FailureKind::RateLimited));
        assert_eq!(kind_of_status(529), Some(FailureKind::Overloaded));
        assert_eq!(kind_of_status(503), Some(FailureKind::Overloaded));
        assert_eq!(kind_of_status(500), Some(FailureKind::ServerError));
        assert_eq!(kind_of_status(502), Some(FailureKind::ServerError));
        assert_eq!(kind_of_status(401), Some(FailureKind::Auth));
        assert_eq!(kind_of_status(403), Some(FailureKind::Auth));
        assert_eq!(kind_of_status(400), None);
        assert_eq!(kind_of_status(200), None);
    }

    #[test]
    fn a_status_is_read_only_where_it_stands_alone() {
        assert_eq!(status_in_text("[API Error: 500 the outage]"), Some(500));
        assert_eq!(status_in_text("Request rejected (429) · slow"), Some(429));
        assert_eq!(status_in_text("port 4290 and id a503b and 1.503"), None);
        assert_eq!(status_in_text("took 200 ms, 999 tries"), None);
    }

    #[test]
    fn texts_name_their_kinds() {
        let cases = [
            ("API Error: 529 Overloaded.", Some(FailureKind::Overloaded)),
            (
                "API Error: Request rejected (429) · This request would exceed your rate limit",
                Some(FailureKind::RateLimited),
            ),
            (
                "Invalid API key · Fix external API key",
                Some(FailureKind::Auth),
            ),
            (
                "[API Error: 500 the scripted outage]",
                Some(FailureKind::ServerError),
            ),
            (
                "API Error: Connection refused (ECONNREFUSED)",
                Some(FailureKind::Network),
            ),
            ("Request timed out.", Some(FailureKind::Network)),
            (
                "[API Error: terminated (cause: UND_ERR_SOCKET: other side closed)]",
                Some(FailureKind::Network),
            ),
            ("[API Error: 400 Invalid value for 'messages']", None),
            ("the tests failed", None),
        ];
        for (text, kind) in cases {
            assert_eq!(kind_of_text(text), kind, "{text}");
        }
    }
}
