//! The one JSON style of every command (docs/guide.md, "JSON output"):
//!
//! * a command that prints one result prints one document, pretty-printed with two-space
//!   indentation and a final newline ([`document`]);
//! * a command that reports as it goes (`agent`, `interpret`) prints JSON Lines: one compact
//!   object per line, the final report included ([`to_text`] with [`JsonStyle::Lines`]);
//! * keys come in the order the guide documents (the order of the fields of the value
//!   printed, never sorted), so every output is built from a struct or an [`Ordered`] map;
//! * an error is `{"error": {"kind", "message", "exit_code"}}`, in the command's own style.

use serde::Serialize;
use serde::ser::SerializeMap;

use crate::failure::Failure;

/// How a command prints its JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonStyle {
    /// One pretty-printed document.
    Document,
    /// One compact object per line.
    Lines,
}

/// The commands whose `--json` prints JSON Lines; every other prints one document.
const LINE_COMMANDS: [&str; 2] = ["agent", "interpret"];

/// The style of the command named `name`.
pub(crate) fn style_of(name: &str) -> JsonStyle {
    if LINE_COMMANDS.contains(&name) {
        JsonStyle::Lines
    } else {
        JsonStyle::Document
    }
}

/// `value` as text in `style`, with its final newline.
pub(crate) fn to_text<T: Serialize + ?Sized>(
    value: &T,
    style: JsonStyle,
) -> Result<String, Failure> {
    let mut text = match style {
        JsonStyle::Document => serde_json::to_string_pretty(value),
        JsonStyle::Lines => serde_json::to_string(value),
    }
    .map_err(Failure::runtime)?;
    text.push('\n');
    Ok(text)
}

/// `value` as one pretty-printed document, with its final newline.
pub(crate) fn document<T: Serialize + ?Sized>(value: &T) -> Result<String, Failure> {
    to_text(value, JsonStyle::Document)
}

/// A JSON object whose keys are printed in the order given (a `serde_json::Value` object
/// sorts them).
#[derive(Debug, Clone, Default)]
pub(crate) struct Ordered<V>(pub(crate) Vec<(String, V)>);

impl<V: Serialize> Serialize for Ordered<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_pretty_lines_are_compact_and_keys_keep_their_order() {
        let value = Ordered(vec![("b".to_owned(), 1), ("a".to_owned(), 2)]);
        assert_eq!(document(&value).unwrap(), "{\n  \"b\": 1,\n  \"a\": 2\n}\n");
        let line = to_text(&value, JsonStyle::Lines).unwrap();
        assert_eq!(line, "{\"b\":1,\"a\":2}\n");
        assert_eq!(style_of("agent"), JsonStyle::Lines);
        assert_eq!(style_of("runs"), JsonStyle::Document);
    }
}
