//! Human durations for command-line options: `500ms`, `30s`, `5m`, `1h`, `2d`, or plain seconds.

use std::time::Duration;

/// Parses a duration; the error says which forms are accepted.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 30s, 5m, 1h"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => {
            return Err(format!(
                "invalid duration unit {unit:?} in {s:?}: use ms, s, m, h or d"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("duration {s:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse("soon").unwrap_err().contains("expected"));
        assert!(parse("5y").unwrap_err().contains("unit"));
        assert!(parse("").is_err());
    }
}
