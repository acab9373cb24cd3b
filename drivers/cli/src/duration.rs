//! Human durations for command-line options: `500ms`, `30s`, `5m`, `1h`, `2d`, or plain seconds
//! (the same forms as the config file, parsed by `agentrun_fs::config::parse_duration`).

use std::time::Duration;

use agentrun_fs::config::DurationError;

/// Parses a duration; the error says which forms are accepted.
pub(crate) fn parse(s: &str) -> Result<Duration, DurationError> {
    agentrun_fs::config::parse_duration(s)
}

/// Why a timeout option cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TimeoutError {
    /// Not a duration.
    #[error(transparent)]
    Invalid(#[from] DurationError),
    /// A duration of zero.
    #[error(
        "a timeout of zero would stop it as soon as it starts; give a positive duration \
         (e.g. 30s, 5m), or leave the option out for no timeout"
    )]
    Zero,
}

/// Parses a timeout, which must be more than zero: a zero timeout would stop the program (or
/// every turn) the moment it starts, so it is refused with the option's name before anything
/// runs, rather than failing later. Leaving the option out means no timeout.
pub(crate) fn parse_timeout(s: &str) -> Result<Duration, TimeoutError> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err(TimeoutError::Zero);
    }
    Ok(d)
}

/// Why a retry backoff cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BackoffError {
    /// Not a duration.
    #[error(transparent)]
    Invalid(#[from] DurationError),
    /// A duration of zero.
    #[error(
        "a backoff of zero would retry a rate-limited turn at once, again and again; give a \
         positive duration (e.g. 30s), or `--max-retries 0` for no retries"
    )]
    Zero,
}

/// Parses a retry backoff, which must be more than zero: with none, a rate limit the harness
/// gave no time for would be retried at once, hammering the API it limits.
pub(crate) fn parse_backoff(s: &str) -> Result<Duration, BackoffError> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err(BackoffError::Zero);
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_must_be_more_than_zero() {
        for zero in ["0", "0s", "0ms", "0.0s", "0m", "0d"] {
            let e = parse_timeout(zero).unwrap_err();
            assert!(matches!(e, TimeoutError::Zero), "{zero}: {e:?}");
            assert!(e.to_string().contains("zero"), "{zero}: {e}");
        }
        assert_eq!(parse_timeout("1ms").ok(), Some(Duration::from_millis(1)));
        let e = parse_timeout("soon").unwrap_err();
        assert!(
            matches!(
                e,
                TimeoutError::Invalid(DurationError::InvalidNumber { .. })
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("expected"), "{e}");
        // A plain duration (a grace period) may be zero.
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_backoff_must_be_more_than_zero() {
        let e = parse_backoff("0s").unwrap_err();
        assert!(matches!(e, BackoffError::Zero), "{e:?}");
        assert!(e.to_string().contains("--max-retries 0"), "{e}");
        assert_eq!(
            parse_backoff("250ms").ok(),
            Some(Duration::from_millis(250))
        );
        assert!(matches!(
            parse_backoff("later"),
            Err(BackoffError::Invalid(_))
        ));
    }
}
