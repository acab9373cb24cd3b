//! Tool-argument parsing with messages a model can act on.
//!
//! Arguments are read from the JSON object by hand rather than through a derived
//! deserializer: every error names the argument, says what was expected and what arrived, and
//! unknown arguments list the accepted ones. Numbers are accepted as JSON integers, as floats
//! with no fraction (`2000.0`) and as decimal strings (`"2000"`), because models send all three.

use rmcp::model::JsonObject;
use serde_json::Value;

/// A bad argument, with the sentence that says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgError(pub String);

/// The arguments of one call, checked against the accepted names.
pub(crate) struct Args<'a> {
    tool: &'static str,
    map: &'a JsonObject,
}

impl<'a> Args<'a> {
    /// Wraps `map`, refusing names outside `accepted`.
    pub(crate) fn new(
        tool: &'static str,
        map: &'a JsonObject,
        accepted: &[&str],
    ) -> Result<Self, ArgError> {
        if let Some(unknown) = map.keys().find(|k| !accepted.contains(&k.as_str())) {
            return Err(ArgError(format!(
                "`{tool}` has no argument `{unknown}`; its arguments are: {}",
                accepted.join(", ")
            )));
        }
        Ok(Self { tool, map })
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn wrong(&self, name: &str, expected: &str, got: &Value) -> ArgError {
        let mut shown = got.to_string();
        if shown.len() > 80 {
            let mut cut = 77;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push_str("...");
        }
        ArgError(format!(
            "`{}` argument `{name}` must be {expected}, not {shown}",
            self.tool
        ))
    }

    /// A required string.
    pub(crate) fn string(&self, name: &str) -> Result<&'a str, ArgError> {
        self.opt_string(name)?.ok_or_else(|| {
            ArgError(format!(
                "`{}` needs the argument `{name}` (a string)",
                self.tool
            ))
        })
    }

    /// An optional string.
    pub(crate) fn opt_string(&self, name: &str) -> Result<Option<&'a str>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong(name, "a string", other)),
        }
    }

    /// An optional boolean (`true`/`false`, or the strings `"true"`/`"false"`).
    pub(crate) fn opt_bool(&self, name: &str) -> Result<Option<bool>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(other) => Err(self.wrong(name, "true or false", other)),
        }
    }

    /// An optional non-negative integer within `min..=max`.
    pub(crate) fn opt_u64(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ArgError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        let expected = if max == u64::MAX {
            format!("an integer of at least {min}")
        } else {
            format!("an integer from {min} to {max}")
        };
        let n = match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 2f64.powi(53))
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(self.wrong(name, &expected, value)),
        }
    }

    /// A required non-empty array of strings (a JSON-encoded array in a string is accepted
    /// too: some clients stringify nested arguments).
    pub(crate) fn string_array(&self, name: &str, example: &str) -> Result<Vec<String>, ArgError> {
        let expected = format!("a non-empty array of strings, like {example}");
        let Some(value) = self.get(name) else {
            return Err(ArgError(format!(
                "`{}` needs the argument `{name}`: {expected}",
                self.tool
            )));
        };
        let parsed;
        let items = match value {
            Value::Array(items) => items,
            Value::String(s) if s.trim_start().starts_with('[') => {
                parsed = serde_json::from_str::<Value>(s).ok();
                match &parsed {
                    Some(Value::Array(items)) => items,
                    _ => return Err(self.wrong(name, &expected, value)),
                }
            }
            _ => return Err(self.wrong(name, &expected, value)),
        };
        if items.is_empty() {
            return Err(self.wrong(name, &expected, value));
        }
        items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(self.wrong(&format!("{name}[]"), "a string", other)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn numbers_arrive_in_three_shapes() {
        let map = args(json!({"a": 5, "b": 7.0, "c": " 9 ", "d": 1.5, "e": -1, "f": "x"}));
        let a = Args::new("read", &map, &["a", "b", "c", "d", "e", "f"]).unwrap();
        assert_eq!(a.opt_u64("a", 0, 10), Ok(Some(5)));
        assert_eq!(a.opt_u64("b", 0, 10), Ok(Some(7)));
        assert_eq!(a.opt_u64("c", 0, 10), Ok(Some(9)));
        assert_eq!(a.opt_u64("missing", 0, 10), Ok(None));
        for bad in ["d", "e", "f"] {
            let err = a.opt_u64(bad, 0, 10).unwrap_err();
            assert!(err.0.contains("an integer from 0 to 10"), "{err}");
        }
        let err = a.opt_u64("a", 6, 10).unwrap_err();
        assert!(err.0.contains("`read` argument `a`"), "{err}");
    }

    #[test]
    fn unknown_arguments_list_the_accepted_ones() {
        let map = args(json!({"path": "x"}));
        let err = Args::new("read", &map, &["filePath", "offset"])
            .err()
            .unwrap();
        assert_eq!(
            err.0,
            "`read` has no argument `path`; its arguments are: filePath, offset"
        );
    }

    #[test]
    fn command_arrays_must_hold_strings() {
        let map = args(
            json!({"a": ["ls", "-l"], "b": [], "c": ["ls", 1], "d": "[\"ls\"]", "e": "ls -l"}),
        );
        let a = Args::new("run", &map, &["a", "b", "c", "d", "e"]).unwrap();
        assert_eq!(a.string_array("a", "[\"ls\"]").unwrap(), ["ls", "-l"]);
        assert_eq!(a.string_array("d", "[\"ls\"]").unwrap(), ["ls"]);
        assert!(a.string_array("b", "[\"ls\"]").is_err());
        let err = a.string_array("c", "[\"ls\"]").unwrap_err();
        assert!(err.0.contains("`c[]` must be a string, not 1"), "{err}");
        let err = a.string_array("e", "[\"ls\", \"-l\"]").unwrap_err();
        assert!(err.0.contains("like [\"ls\", \"-l\"]"), "{err}");
        let err = a.string_array("missing", "[\"ls\"]").unwrap_err();
        assert!(err.0.contains("needs the argument `missing`"), "{err}");
    }
}
