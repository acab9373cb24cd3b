//! The one classifier of API failures every dialect uses: an HTTP status and the wording a
//! harness passes through become a [`FailureKind`], a `Retry-After` value becomes a
//! [`RetryAfter`], and a harness's own retry becomes a progress line. The same rules classify
//! what a harness prints on stderr and the failure a retained record reports.
//!
//! The harnesses word the same failure differently (Claude Code's `api_error_status` and
//! "API Error: Request rejected (429)", Qwen Code's `[API Error: 500 …]`, Codex's "exceeded
//! retry limit, last status: 429 Too Many Requests", pi's "429 slow down", Gemini CLI's `[API
//! Error: {"error":{"code":429,…}}]`, OpenCode's `statusCode`), so the rules live here once
//! and each decoder only says where its status and text are.
//!
//! Precedence: a context-window overflow is named by its wording whatever the status (the APIs
//! answer it with 400 or 413); then the status, when it is one that names a kind; then the
//! wording alone (a harness that keeps the status to itself). A failure nothing here
//! recognizes stays unclassified (`None`): a wrong kind would send a caller down the wrong
//! path (a retry of a bad request), an absent one does not.

use super::{FailureKind, RetryAfter};

/// The kind an HTTP status names: 429 a rate limit, 529 and 503 an overload, any other 5xx a
/// server error, 401 and 403 the credentials. Other statuses (400, 404, 413, …) name no kind
/// by themselves.
pub fn kind_of_status(status: u16) -> Option<FailureKind> {
    match status {
        429 => Some(FailureKind::RateLimited),
        503 | 529 => Some(FailureKind::Overloaded),
        500..=599 => Some(FailureKind::ServerError),
        401 | 403 => Some(FailureKind::Auth),
        _ => None,
    }
}

/// Wordings of a request that did not fit the model's context window (Codex's "ran out of
/// room in the model's context window", the OpenAI-compatible `context_length_exceeded`,
/// Anthropic's "prompt is too long", the Gemini API's "input token count (N) exceeds the
/// maximum number of tokens allowed").
const CONTEXT_WORDINGS: &[&str] = &[
    "context_length",
    "context length",
    "maximum context",
    "context window",
    "context_window",
    "prompt is too long",
    "contextoverflow",
];

const RATE_LIMIT_WORDINGS: &[&str] = &[
    "too many requests",
    "rate limit",
    "rate_limit",
    "ratelimit",
    "rate-limit",
    "resource_exhausted",
    "resource exhausted",
    "quota",
    "usage limit",
    "hit your limit",
];

const OVERLOAD_WORDINGS: &[&str] = &[
    "overloaded",
    "high demand",
    "service unavailable",
    "temporarily unavailable",
];

const AUTH_WORDINGS: &[&str] = &[
    "invalid api key",
    "incorrect api key",
    "api key not valid",
    "invalid x-api-key",
    "invalid_api_key",
    "authentication",
    "unauthenticated",
    "unauthorized",
    "missing api key",
    "no api key",
];

/// The API could not be reached, or the connection to it broke.
const NETWORK_WORDINGS: &[&str] = &[
    "connection refused",
    "econnrefused",
    "error sending request",
    "failed to lookup address",
    "dns error",
    "getaddrinfo",
    "enotfound",
    "name or service not known",
    "connection reset",
    "econnreset",
    "broken pipe",
    "network error",
    "fetch failed",
    "stream disconnected",
    "socket hang up",
    "unexpected eof",
    "connection closed",
    "connection was closed",
    "cannot connect to",
    "unable to connect",
    "connection error",
    "request timed out",
    "etimedout",
    "terminated",
    "other side closed",
    "und_err_socket",
    "tls handshake",
    "certificate",
];

const SERVER_WORDINGS: &[&str] = &["internal server error", "internal error", "server_error"];

fn mentions(lower: &str, wordings: &[&str]) -> bool {
    wordings.iter().any(|w| lower.contains(w))
}

/// Whether `text` names a context-window overflow.
pub fn is_context_overflow(text: &str) -> bool {
    mentions(&text.to_lowercase(), CONTEXT_WORDINGS)
}

/// The kind of a failure with the HTTP `status` (when the harness gave one) and the
/// diagnostic `text` (see the module documentation for the precedence). A status found in
/// the text ([`status_in_text`]) counts as given.
pub fn classify(status: Option<u16>, text: &str) -> Option<FailureKind> {
    let lower = text.to_lowercase();
    if mentions(&lower, CONTEXT_WORDINGS) {
        return Some(FailureKind::ContextLength);
    }
    if let Some(kind) = status
        .or_else(|| status_in_text(text))
        .and_then(kind_of_status)
    {
        return Some(kind);
    }
    [
        (AUTH_WORDINGS, FailureKind::Auth),
        (RATE_LIMIT_WORDINGS, FailureKind::RateLimited),
        (OVERLOAD_WORDINGS, FailureKind::Overloaded),
        (SERVER_WORDINGS, FailureKind::ServerError),
        (NETWORK_WORDINGS, FailureKind::Network),
    ]
    .into_iter()
    .find(|(wordings, _)| mentions(&lower, wordings))
    .map(|(_, kind)| kind)
}

/// Words that, right before a number, say it is an HTTP status (`last status: 429`,
/// `HTTP 503`, `API Error: 500`, `statusCode 401`).
const STATUS_MARKERS: &[&str] = &[
    "status",
    "statuscode",
    "status code",
    "http",
    "error",
    "code",
];

/// The HTTP error status (400–599) a diagnostic names: a three-digit number at its start
/// (pi's `429 slow down`, after leading brackets), right after a word that names a status
/// (see [`STATUS_MARKERS`]), or alone in parentheses (Claude Code's `Request rejected
/// (429)`). The last such number wins: a retry summary names the last status at its end.
pub fn status_in_text(text: &str) -> Option<u16> {
    let bytes = text.as_bytes();
    let mut found = None;
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
        if i - start != 3 || bytes.get(i).is_some_and(|b| *b == b'.' || *b == b'/') {
            continue;
        }
        let Ok(n) = text[start..i].parse::<u16>() else {
            continue;
        };
        if !(400..=599).contains(&n) {
            continue;
        }
        let parenthesized = text[..start].ends_with('(') && bytes.get(i) == Some(&b')');
        let before = text[..start]
            .trim_end_matches([' ', ':', '=', '[', '(', '"', '\'', '\t'])
            .to_lowercase();
        let marked = parenthesized
            || before.is_empty()
            || STATUS_MARKERS.iter().any(|m| {
                before.ends_with(m)
                    && before[..before.len() - m.len()]
                        .chars()
                        .next_back()
                        .is_none_or(|c| !c.is_ascii_alphanumeric())
            });
        if marked {
            found = Some(n);
        }
    }
    found
}

/// A `Retry-After` header value: delay seconds (`120`, also fractional, `2.5`) or an
/// HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`, the IMF-fixdate form). `None` for anything
/// else.
pub fn parse_retry_after(value: &str) -> Option<RetryAfter> {
    let value = value.trim();
    if let Some(ms) = seconds_to_ms(value) {
        return Some(RetryAfter::DelayMs(ms));
    }
    http_date_unix_secs(value).map(RetryAfter::ResetAtUnixSecs)
}

/// A `retry-after-ms` header value (milliseconds, as OpenAI and Anthropic send beside
/// `Retry-After`).
pub fn parse_retry_after_ms(value: &str) -> Option<RetryAfter> {
    let ms: f64 = value.trim().parse().ok()?;
    (ms.is_finite() && ms >= 0.0)
        .then(|| RetryAfter::DelayMs(ms.round().min(u64::MAX as f64) as u64))
}

/// The retry time of a set of response headers (names compared case-insensitively):
/// `retry-after-ms` when present and valid (the finer one), else `retry-after`.
pub fn retry_after_of_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<RetryAfter> {
    let (mut ms, mut plain) = (None, None);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("retry-after-ms") {
            ms = parse_retry_after_ms(value);
        } else if name.eq_ignore_ascii_case("retry-after") {
            plain = parse_retry_after(value);
        }
    }
    ms.or(plain)
}

fn seconds_to_ms(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let secs: f64 = value.parse().ok()?;
    let ms = secs * 1000.0;
    (ms.is_finite()).then(|| ms.round().min(u64::MAX as f64) as u64)
}

/// Unix seconds of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date_unix_secs(value: &str) -> Option<u64> {
    let rest = value.split_once(", ").map_or(value, |(_, r)| r);
    let mut parts = rest.split_ascii_whitespace();
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':');
    let (h, m, s): (u64, u64, u64) = (
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
        hms.next()?.parse().ok()?,
    );
    if parts.next()? != "GMT" || parts.next().is_some() || hms.next().is_some() {
        return None;
    }
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day as i64);
    u64::try_from(days)
        .ok()?
        .checked_mul(86_400)?
        .checked_add(h * 3600 + m * 60 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How a progress line names a failure kind (`rate limited`, `overloaded`, …).
fn phrase(kind: Option<FailureKind>) -> &'static str {
    match kind {
        Some(FailureKind::RateLimited) => "rate limited",
        Some(FailureKind::Overloaded) => "overloaded",
        Some(FailureKind::ServerError) => "server error",
        Some(FailureKind::Auth) => "auth error",
        Some(FailureKind::Network) => "network error",
        Some(FailureKind::ContextLength) => "context too long",
        _ => "API error",
    }
}

/// The progress line of a harness's own retry: `rate limited, retry 3/5 in 2.3 s` (the
/// attempt, its maximum and the delay when the harness gave them).
pub fn retry_progress(
    kind: Option<FailureKind>,
    attempt: Option<u64>,
    max_attempts: Option<u64>,
    delay_ms: Option<u64>,
) -> String {
    let mut line = format!("{}, retry", phrase(kind));
    match (attempt, max_attempts) {
        (Some(n), Some(max)) => line.push_str(&format!(" {n}/{max}")),
        (Some(n), None) => line.push_str(&format!(" {n}")),
        _ => {}
    }
    if let Some(ms) = delay_ms {
        line.push_str(&format!(" in {:.1} s", ms as f64 / 1000.0));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureKind::*;

    #[test]
    fn statuses_name_their_kinds() {
        for (status, kind) in [
            (429, Some(RateLimited)),
            (529, Some(Overloaded)),
            (503, Some(Overloaded)),
            (500, Some(ServerError)),
            (502, Some(ServerError)),
            (504, Some(ServerError)),
            (401, Some(Auth)),
            (403, Some(Auth)),
            (400, None),
            (404, None),
            (413, None),
            (200, None),
        ] {
            assert_eq!(kind_of_status(status), kind, "{status}");
            assert_eq!(classify(Some(status), "no wording"), kind, "{status}");
        }
    }

    #[test]
    fn the_harnesses_wordings_are_classified() {
        for (text, kind) in [
            (
                "exceeded retry limit, last status: 429 Too Many Requests",
                Some(RateLimited),
            ),
            (
                "We’re currently experiencing high demand, which may cause temporary errors.",
                Some(Overloaded),
            ),
            ("429 slow down", Some(RateLimited)),
            ("500 the scripted outage", Some(ServerError)),
            ("[API Error: 401 invalid key]", Some(Auth)),
            ("HTTP 503", Some(Overloaded)),
            ("Overloaded", Some(Overloaded)),
            ("Incorrect API key provided: sk-x", Some(Auth)),
            (
                "You've hit your usage limit. Try again at 2:54 AM.",
                Some(RateLimited),
            ),
            (
                "Codex ran out of room in the model's context window.",
                Some(ContextLength),
            ),
            (
                "400 This model's maximum context length is 128000 tokens",
                Some(ContextLength),
            ),
            (
                "error sending request for url (http://127.0.0.1:9/v1/responses)",
                Some(Network),
            ),
            ("connect ECONNREFUSED 127.0.0.1:9", Some(Network)),
            (
                "Cannot connect to API: The socket connection was closed unexpectedly.",
                Some(Network),
            ),
            (
                "stream disconnected before completion: error decoding response body",
                Some(Network),
            ),
            ("Internal server error", Some(ServerError)),
            // Claude Code's and Qwen Code's wordings.
            ("API Error: 529 Overloaded.", Some(Overloaded)),
            (
                "API Error: Request rejected (429) · This request would exceed your rate limit",
                Some(RateLimited),
            ),
            ("Request rejected (429)", Some(RateLimited)),
            ("Invalid API key · Fix external API key", Some(Auth)),
            ("[API Error: 500 the scripted outage]", Some(ServerError)),
            (
                "API Error: Connection refused (ECONNREFUSED)",
                Some(Network),
            ),
            ("Request timed out.", Some(Network)),
            ("connect ETIMEDOUT 10.0.0.1:443", Some(Network)),
            (
                "[API Error: terminated (cause: UND_ERR_SOCKET: other side closed)]",
                Some(Network),
            ),
            ("You've hit your limit · resets 3pm", Some(RateLimited)),
            ("[API Error: 400 Invalid value for 'messages']", None),
            ("the tests failed", None),
            ("400 Invalid value for 'messages'", None),
            ("something else went wrong", None),
            // Numbers that are not statuses.
            ("processed 429 files", None),
            ("retry 1/5", None),
        ] {
            assert_eq!(classify(None, text), kind, "{text}");
        }
    }

    #[test]
    fn context_wording_wins_over_the_status_and_the_status_over_other_wordings() {
        assert_eq!(
            classify(
                Some(400),
                "prompt is too long: 250000 tokens > 200000 maximum"
            ),
            Some(ContextLength)
        );
        assert_eq!(classify(Some(500), "rate limit"), Some(ServerError));
        assert_eq!(classify(Some(400), "rate limit"), Some(RateLimited));
    }

    #[test]
    fn statuses_are_found_after_their_markers() {
        for (text, status) in [
            ("last status: 429 Too Many Requests", Some(429)),
            ("API Error: 500 Internal", Some(500)),
            ("[API Error: 400 bad]", Some(400)),
            ("(HTTP 503, UNAVAILABLE)", Some(503)),
            ("statusCode=401", Some(401)),
            ("429", Some(429)),
            ("code 42", None),
            ("error 4290", None),
            ("port 8080 status 200", None),
            ("took 500.5 ms", None),
            ("errorcode 500", None),
            ("[API Error: 500 the outage]", Some(500)),
            ("Request rejected (429) · slow", Some(429)),
            ("port 4290 and id a503b and 1.503", None),
            ("took 200 ms, 999 tries", None),
            // A parenthesized number is a status only when it stands alone.
            ("saw (500 files)", None),
            ("(x500)", None),
        ] {
            assert_eq!(status_in_text(text), status, "{text}");
        }
    }

    #[test]
    fn text_that_changes_length_when_lowercased_is_read_safely() {
        // `İ` lowercases to two characters (the second a combining dot, which ends a word):
        // the marker check must not slice inside one.
        assert_eq!(status_in_text("İstatus: 429"), Some(429));
        assert_eq!(status_in_text("xstatus: 429"), None);
        assert_eq!(status_in_text("İ status: 429"), Some(429));
        assert_eq!(status_in_text("ǅ429 ß"), None);
        assert_eq!(classify(None, "ÄÖÜ HTTP 503 ÄÖÜ"), Some(Overloaded));
    }

    #[test]
    fn retry_after_values_parse() {
        assert_eq!(parse_retry_after("120"), Some(RetryAfter::DelayMs(120_000)));
        assert_eq!(parse_retry_after(" 2.5 "), Some(RetryAfter::DelayMs(2_500)));
        assert_eq!(parse_retry_after("0"), Some(RetryAfter::DelayMs(0)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(RetryAfter::ResetAtUnixSecs(784_111_777))
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(RetryAfter::ResetAtUnixSecs(0))
        );
        assert_eq!(
            parse_retry_after("Wed, 29 Feb 2028 12:00:00 GMT"),
            Some(RetryAfter::ResetAtUnixSecs(1_835_438_400))
        );
        for bad in [
            "",
            "-1",
            "soon",
            "1e3",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
        ] {
            assert_eq!(parse_retry_after(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_retry_after_ms("1500"),
            Some(RetryAfter::DelayMs(1500))
        );
        assert_eq!(parse_retry_after_ms("-5"), None);
        assert_eq!(
            retry_after_of_headers([("Retry-After", "3"), ("retry-after-ms", "2500")]),
            Some(RetryAfter::DelayMs(2500))
        );
        assert_eq!(
            retry_after_of_headers([("retry-after", "3"), ("content-type", "x")]),
            Some(RetryAfter::DelayMs(3000))
        );
        assert_eq!(retry_after_of_headers([("content-type", "x")]), None);
    }

    #[test]
    fn retry_progress_lines_name_the_kind_attempt_and_delay() {
        assert_eq!(
            retry_progress(Some(RateLimited), Some(3), Some(5), Some(2_300)),
            "rate limited, retry 3/5 in 2.3 s"
        );
        assert_eq!(
            retry_progress(Some(Overloaded), Some(1), None, None),
            "overloaded, retry 1"
        );
        assert_eq!(
            retry_progress(None, None, None, Some(500)),
            "API error, retry in 0.5 s"
        );
    }
}
