//! The user's settings file and human durations.
//!
//! `$XDG_CONFIG_HOME/agentrun/config.toml` (else `~/.config/agentrun/config.toml`), all keys
//! optional:
//!
//! ```toml
//! store = "/srv/agentrun"            # the store root
//! sink_var = "AGENTRUN_RESULT_SINK"  # the variable naming the result sink
//!
//! [tool_output]                      # preview limits
//! max_lines = 2000
//! max_bytes = 51200
//! tail_lines = 0
//! max_payload_bytes = 1048576
//!
//! [retention]
//! records = "30d"                    # forget recorded runs after this ("never": keep them)
//! grace = "1h"                       # keep unreferenced objects this long
//!
//! [prices."gpt-5-codex"]             # USD per million tokens, over the built-in table
//! input = 1.25
//! cached_input = 0.125
//! output = 10.0
//! ```
//!
//! Unknown keys and wrong types are errors that name the key and the file, so a typo never
//! silently falls back to a default.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeMap;

use agentrun_core::PreviewLimits;
use agentrun_core::budget::{ModelPrice, PriceTable};
use agentrun_core::limits::LimitsError;
use serde::Deserialize;

use crate::special::{Links, OpenError, open_regular};

/// Records are forgotten after this long unless configured otherwise (30 days).
pub const DEFAULT_RECORD_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// Unreferenced objects younger than this are kept by GC (1 hour).
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(3600);

/// The largest settings file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why the settings file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read the config file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Something other than a regular file is at the path (a FIFO, a directory, a device, …):
    /// refused by its type, without waiting on it.
    #[error("the config file {} is {what}, not a regular file", .path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What is there ("a FIFO (named pipe)", "a directory", …).
        what: &'static str,
    },
    /// The file is larger than any settings file should be.
    #[error("the config file {} is larger than 1 MiB", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not valid TOML for these settings (unknown key, wrong type, bad value).
    #[error("the config file {} is invalid: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the key and position.
        message: String,
    },
}

/// The settings file's contents. Every key is optional; absent keys take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// The store root.
    pub store: Option<PathBuf>,
    /// The environment variable that names the result sink.
    pub sink_var: Option<String>,
    /// Preview limits (`[tool_output]`).
    #[serde(default)]
    pub tool_output: ToolOutput,
    /// Retention (`[retention]`).
    #[serde(default)]
    pub retention: Retention,
    /// Model prices on top of the built-in table (`[prices."gpt-5-codex"]` with `input`,
    /// `cached_input`, `output` in US dollars per million tokens): what turns of a harness
    /// that reports tokens but no cost are estimated to cost, for `--max-cost-usd`.
    #[serde(default)]
    pub prices: BTreeMap<String, ModelPrice>,
}

/// `[tool_output]`: the preview limits; absent keys keep [`PreviewLimits::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolOutput {
    /// Most lines shown per stream.
    pub max_lines: Option<u64>,
    /// Most preview bytes shown per stream.
    pub max_bytes: Option<usize>,
    /// Last lines shown after the head of a truncated stream.
    pub tail_lines: Option<u64>,
    /// Bound on the whole rendered result.
    pub max_payload_bytes: Option<usize>,
}

/// `[retention]`: how long records and unreferenced objects are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Retention {
    /// Records older than this are forgotten by GC (`None`: [`DEFAULT_RECORD_RETENTION`];
    /// `Some(None)`: "never", keep every record).
    #[serde(default, deserialize_with = "retention_duration")]
    pub records: Option<Option<Duration>>,
    /// Grace period for unreferenced objects (`None`: [`DEFAULT_GC_GRACE`]).
    #[serde(default, deserialize_with = "plain_duration")]
    pub grace: Option<Duration>,
}

impl Config {
    /// Where the settings file is looked for: `$XDG_CONFIG_HOME/agentrun/config.toml`, else
    /// `$HOME/.config/agentrun/config.toml`. `None` when neither variable is set.
    pub fn default_path() -> Option<PathBuf> {
        default_path_from(|name| std::env::var_os(name))
    }

    /// Reads and parses the file at `path` (at most 1 MiB).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let read = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        // A link is followed (settings often live in a dotfiles repository); a FIFO is opened
        // without waiting for a writer and refused with everything else that is not a file.
        let file = match open_regular(path, Links::Follow) {
            Ok((file, _)) => file,
            Err(OpenError::NotRegular(what)) => {
                return Err(ConfigError::NotAFile {
                    path: path.to_owned(),
                    what,
                });
            }
            Err(OpenError::Io(e)) => return Err(read(e)),
        };
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                path: path.to_owned(),
            });
        }
        Self::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses settings text; the error names the key and the position.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string().trim().to_owned())?;
        // The limits' own messages name the fields, which are the keys of `[tool_output]`.
        if let Err(e) = config.limits(PreviewLimits::default()) {
            return Err(format!("[tool_output] {e}"));
        }
        // The checks `run` makes of the same values, so that no command accepts (and
        // `agentrun config` never prints as valid) a setting a run would refuse.
        if let Some(var) = &config.sink_var
            && let Some(why) = agentrun_core::sink::sink_var_problem(var.as_bytes())
        {
            return Err(format!(
                "sink_var: invalid result-sink variable name {var:?}: {why}"
            ));
        }
        if let Some((model, _)) = config.prices.iter().find(|(_, p)| !p.is_valid()) {
            return Err(format!(
                "prices.{model:?}: every price must be a number of at least 0 (US dollars per \
                 million tokens)"
            ));
        }
        if let Some(store) = &config.store
            && store.as_os_str().as_encoded_bytes().contains(&0)
        {
            return Err(format!(
                "store: {:?} contains a NUL byte, which no path can hold",
                store.display().to_string()
            ));
        }
        Ok(config)
    }

    /// The built-in price table with the file's `[prices]` on top.
    pub fn price_table(&self) -> PriceTable {
        PriceTable::builtin().with_overrides(self.prices.clone())
    }

    /// `base` with the `[tool_output]` keys that are set, checked.
    pub fn limits(&self, base: PreviewLimits) -> Result<PreviewLimits, LimitsError> {
        let t = &self.tool_output;
        let limits = PreviewLimits {
            max_lines: t.max_lines.unwrap_or(base.max_lines),
            max_bytes: t.max_bytes.unwrap_or(base.max_bytes),
            tail_lines: t.tail_lines.unwrap_or(base.tail_lines),
            max_payload_bytes: t.max_payload_bytes.unwrap_or(base.max_payload_bytes),
        };
        limits.validate()?;
        Ok(limits)
    }
}

fn default_path_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    // The XDG spec says relative values are invalid and must be ignored.
    let dir = match var("XDG_CONFIG_HOME").filter(|p| p.is_absolute()) {
        Some(dir) => dir,
        None => var("HOME")?.join(".config"),
    };
    Some(dir.join("agentrun").join("config.toml"))
}

/// Why a duration ([`parse_duration`]) cannot be read. Each message says which forms are
/// accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// The number before the unit is not one.
    #[error("invalid duration {input:?}: expected e.g. 500ms, 30s, 5m, 1h, 30d")]
    InvalidNumber {
        /// The duration as given (trimmed).
        input: String,
        /// Why the number could not be read.
        #[source]
        source: std::num::ParseFloatError,
    },
    /// The unit is none of `ms`, `s`, `m`, `h`, `d`.
    #[error("invalid duration unit {unit:?} in {input:?}: use ms, s, m, h or d")]
    UnknownUnit {
        /// The duration as given (trimmed).
        input: String,
        /// The unit.
        unit: String,
    },
    /// The duration is longer than a `Duration` holds.
    #[error("duration {input:?} is out of range")]
    OutOfRange {
        /// The duration as given (trimmed).
        input: String,
        /// Why it cannot be a `Duration`.
        #[source]
        source: std::time::TryFromFloatSecsError,
    },
}

/// Parses a human duration: `500ms`, `30s`, `5m`, `1h`, `30d`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|source| DurationError::InvalidNumber {
            input: s.to_owned(),
            source,
        })?;
    // The unit as a fraction of a second: numerator, denominator.
    let (per, of) = match unit {
        "" | "s" => (1, 1),
        "ms" => (1, 1000),
        "m" => (60, 1),
        "h" => (3600, 1),
        "d" => (86_400, 1),
        _ => {
            return Err(DurationError::UnknownUnit {
                input: s.to_owned(),
                unit: unit.to_owned(),
            });
        }
    };
    let seconds = value * f64::from(per) / f64::from(of);
    let approximate =
        Duration::try_from_secs_f64(seconds).map_err(|source| DurationError::OutOfRange {
            input: s.to_owned(),
            source,
        })?;
    // The float only judges the form and the range: the value itself is read from the digits,
    // so that `933333333299ms` is exactly that many milliseconds, as printed.
    Ok(exact_duration(number, per, of).unwrap_or(approximate))
}

/// `number` (digits with at most one point, already read as a float) times `per / of`
/// seconds, to the nanosecond (finer digits are dropped); `None` past what a `Duration` holds.
fn exact_duration(number: &str, per: u32, of: u32) -> Option<Duration> {
    // The number in trillionths, so that a millisecond's digits reach the nanosecond.
    const PLACES: usize = 12;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(PLACES)
        .fold(0u128, |acc, digit| acc * 10 + u128::from(digit - b'0'));
    let trillionths = whole.checked_mul(10u128.pow(PLACES as u32))? + fraction;
    let nanos = trillionths.checked_mul(u128::from(per))? / u128::from(of) / 1000;
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(
        secs,
        u32::try_from(nanos % 1_000_000_000).ok()?,
    ))
}

/// Why a retention period ([`parse_retention`]) cannot be read: not a duration, nor `never`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source}, or \"never\"")]
#[non_exhaustive]
pub struct RetentionError {
    /// Why it is not a duration.
    #[source]
    pub source: DurationError,
}

/// Parses a retention period: a duration, or `never` (keep forever, `None`).
pub fn parse_retention(s: &str) -> Result<Option<Duration>, RetentionError> {
    if s.trim() == "never" {
        return Ok(None);
    }
    parse_duration(s)
        .map(Some)
        .map_err(|source| RetentionError { source })
}

/// Renders a duration the way [`parse_duration`] reads it back, in the largest whole unit.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned(); // the unit a user would write it in
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

fn plain_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn retention_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<Duration>>, D::Error> {
    let s = String::deserialize(d)?;
    parse_retention(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_override_the_builtin_table_and_bad_ones_are_refused() {
        let c = Config::parse(
            "[prices.\"gpt-5-codex\"]\ninput = 9.0\ncached_input = 1.0\noutput = 90.0\n\
             [prices.\"my-model\"]\ninput = 1\ncached_input = 0\noutput = 2\n",
        )
        .unwrap();
        let table = c.price_table();
        assert_eq!(table.price("gpt-5-codex").map(|p| p.output), Some(90.0));
        assert_eq!(table.price("my-model").map(|p| p.input), Some(1.0));
        assert!(
            table.price("gemini-2.5-pro").is_some(),
            "the built-in rest stays"
        );
        let e =
            Config::parse("[prices.m]\ninput = -1\ncached_input = 0\noutput = 0\n").unwrap_err();
        assert!(e.contains("prices.\"m\""), "{e}");
        let e = Config::parse("[prices.m]\ninput = 1\noutput = 0\n").unwrap_err();
        assert!(e.contains("cached_input"), "{e}");
    }

    #[test]
    fn parses_every_key() {
        let c = Config::parse(
            "store = \"/s\"\nsink_var = \"X_SINK\"\n[tool_output]\nmax_lines = 10\nmax_bytes = \
             100\ntail_lines = 3\nmax_payload_bytes = 65536\n[retention]\nrecords = \
             \"7d\"\ngrace = \"5m\"\n",
        )
        .unwrap();
        assert_eq!(c.store, Some(PathBuf::from("/s")));
        assert_eq!(c.sink_var.as_deref(), Some("X_SINK"));
        let l = c.limits(PreviewLimits::default()).unwrap();
        assert_eq!(
            (l.max_lines, l.max_bytes, l.tail_lines, l.max_payload_bytes),
            (10, 100, 3, 65536)
        );
        assert_eq!(
            c.retention.records,
            Some(Some(Duration::from_secs(7 * 86_400)))
        );
        assert_eq!(c.retention.grace, Some(Duration::from_secs(300)));
        let never = Config::parse("[retention]\nrecords = \"never\"\n").unwrap();
        assert_eq!(never.retention.records, Some(None));
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn mistakes_name_the_key() {
        let typo = Config::parse("[tool_output]\nmax_line = 3\n").unwrap_err();
        assert!(typo.contains("max_line"), "{typo}");
        let zero = Config::parse("[tool_output]\nmax_lines = 0\n").unwrap_err();
        assert!(zero.contains("max_lines"), "{zero}");
        let bad = Config::parse("[retention]\nrecords = \"soon\"\n").unwrap_err();
        assert!(bad.contains("never"), "{bad}");
        let negative = Config::parse("[tool_output]\nmax_bytes = -1\n").unwrap_err();
        assert!(negative.contains("max_bytes"), "{negative}");
        let sink = Config::parse("sink_var = \"PATH\"\n").unwrap_err();
        assert!(sink.contains("sink_var"), "{sink}");
        assert!(sink.contains("the program needs PATH for itself"), "{sink}");
        let nul = Config::parse("store = \"/a\\u0000b\"\n").unwrap_err();
        assert!(nul.contains("store") && nul.contains("NUL"), "{nul}");
    }

    #[test]
    fn default_path_follows_xdg() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            default_path_from(env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/agentrun/config.toml"))
        );
        assert_eq!(
            default_path_from(env(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.config/agentrun/config.toml"))
        );
        assert_eq!(default_path_from(env(&[])), None);
    }

    #[test]
    fn durations_round_trip() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .to_string()
                .contains("expected")
        );
        assert!(
            parse_duration("5y")
                .unwrap_err()
                .to_string()
                .contains("unit")
        );
        assert!(parse_duration("").is_err());
        for s in ["30d", "1h", "5m", "45s", "250ms"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn durations_are_read_from_their_digits_not_through_a_float() {
        // Through an f64 these come out a few hundred nanoseconds off.
        assert_eq!(
            parse_duration("933333333299ms"),
            Ok(Duration::from_millis(933_333_333_299))
        );
        assert_eq!(
            parse_duration("933333333.3"),
            Ok(Duration::from_millis(933_333_333_300))
        );
        assert_eq!(parse_duration("0.1m"), Ok(Duration::from_secs(6)));
        assert_eq!(parse_duration(".5h"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2."), Ok(Duration::from_secs(2)));
        assert_eq!(
            parse_duration("1.0000015ms"),
            Ok(Duration::from_nanos(1_000_001))
        );
        assert_eq!(
            parse_duration("0.0000000019"),
            Ok(Duration::from_nanos(1)),
            "past the nanosecond, digits are dropped"
        );
        // The largest float below 2^64 seconds is still a Duration, read exactly.
        assert_eq!(
            parse_duration("18446744073709549568"),
            Ok(Duration::from_secs(18_446_744_073_709_549_568))
        );
        assert!(matches!(
            parse_duration(&u64::MAX.to_string()),
            Err(DurationError::OutOfRange { .. })
        ));
    }

    #[test]
    fn a_bad_duration_is_a_typed_error_with_its_source() {
        use std::error::Error as _;
        let e = parse_duration(" soon ").unwrap_err();
        assert!(
            matches!(&e, DurationError::InvalidNumber { input, .. } if input == "soon"),
            "{e:?}"
        );
        assert!(e.source().is_some(), "the float error is kept");
        let e = parse_duration("5y").unwrap_err();
        assert_eq!(
            e,
            DurationError::UnknownUnit {
                input: "5y".into(),
                unit: "y".into()
            }
        );
        let e = parse_duration(&format!("{}d", "9".repeat(400))).unwrap_err();
        assert!(matches!(e, DurationError::OutOfRange { .. }), "{e:?}");
        assert!(e.source().is_some(), "the range error is kept");
        let e = parse_retention("soon").unwrap_err();
        assert!(e.to_string().ends_with(", or \"never\""), "{e}");
        assert!(matches!(
            e.source().and_then(|s| s.downcast_ref::<DurationError>()),
            Some(DurationError::InvalidNumber { .. })
        ));
    }
}
