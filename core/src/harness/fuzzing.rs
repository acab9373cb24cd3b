//! The fuzz bodies of the JSON budget scan and of the fast line scan, kept in the core because
//! they check private functions (`json::within_values`, with a bound small enough for short
//! inputs; `scan::object_type` and `scan::parses_as_value`). Not a stable
//! API: compiled only for cargo-fuzz (which sets `--cfg fuzzing`), for this crate's own unit
//! tests, and with the `fuzz-bodies` feature, which only the workspace's test crate enables so
//! that the stable test suite replays this target's corpus (see `fuzz/`).
//!
//! The harness decoder bodies need nothing private and live with the other fuzz bodies in the
//! test crate (`agentrun_tests::harness_checks`).

/// The JSON budget scan (`within_values`) against a reference count made by the parser: for
/// every input that parses as JSON, the scan with a small bound (so that short inputs are
/// scanned too) accepts it exactly when its arrays and objects plus the commas between their
/// elements fit the bound and its nesting fits [`MAX_JSON_DEPTH`](super::MAX_JSON_DEPTH).
/// Byte 0 chooses the bound (1 to 256). Any input, parsed or not, must not panic the scan.
pub fn json_budget(data: &[u8]) {
    let (&control, rest) = data.split_first().unwrap_or((&0, &[]));
    let bound = usize::from(control) + 1;
    let scanned = super::json::within_values(rest, bound);
    let mut de = serde_json::Deserializer::from_slice(rest);
    let Ok(shape) = <Shape as serde::Deserialize>::deserialize(&mut de) else {
        return;
    };
    if de.end().is_err() {
        return;
    }
    if rest.len() <= bound {
        assert!(
            scanned,
            "an input no longer than the bound is never over it"
        );
        return;
    }
    let within = shape.values <= bound && shape.depth <= super::MAX_JSON_DEPTH;
    assert_eq!(
        scanned, within,
        "{} values, depth {}, bound {bound}",
        shape.values, shape.depth
    );
}

/// The fast line scan against `serde_json`, a differential check: wherever
/// `scan::object_type` answers, the line is a JSON object that `serde_json` accepts and (when
/// its strings hold no lone surrogate, so that it parses into a `Value`) its top-level `type`
/// is that string; wherever `scan::parses_as_value` says yes, the line parses into a `Value`
/// object; wherever the scan checks a line, a `Value` read through its index
/// (`scan::Checked::read`) is what `serde_json` reads, or fails where it fails. All are
/// checked on the input and, with byte 0 choosing a position, on the input with that byte
/// removed (a cut line) and on it wrapped in an object.
pub fn line_scan(data: &[u8]) {
    check_line_scan(data);
    if let Some((&at, rest)) = data.split_first() {
        let mut cut = rest.to_vec();
        if !cut.is_empty() {
            cut.remove(usize::from(at) % cut.len());
        }
        check_line_scan(&cut);
        let mut wrapped = b"{\"type\":\"w\",\"x\":".to_vec();
        wrapped.extend_from_slice(rest);
        wrapped.push(b'}');
        check_line_scan(&wrapped);
    }
}

fn check_line_scan(line: &[u8]) {
    use serde_json::Value;
    let text = String::from_utf8_lossy(line);
    if let Some(t) = super::scan::object_type(line) {
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok(),
            "object_type answered {t:?} on a line serde_json refuses: {text:?}"
        );
        if let Ok(value) = serde_json::from_slice::<Value>(line) {
            assert_eq!(
                value.get("type").and_then(Value::as_str),
                Some(t),
                "object_type disagrees with serde_json on {text:?}"
            );
        }
    }
    if super::scan::parses_as_value(line) {
        let value = serde_json::from_slice::<Value>(line);
        assert!(
            value.as_ref().is_ok_and(Value::is_object),
            "parses_as_value said yes, serde_json: {value:?} on {text:?}"
        );
    }
    let mut scratch = super::scan::Scratch::default();
    if let Some(checked) = super::scan::check(line, &mut scratch) {
        let fast = checked.read::<Value>();
        let slow = serde_json::from_slice::<Value>(line);
        assert_eq!(
            fast.as_ref().ok(),
            slow.as_ref().ok(),
            "the read through the index disagrees with serde_json on {text:?}"
        );
    }
}

/// What the parser saw of a JSON value: containers plus commas, and the nesting depth.
/// Counted by a visitor, so a repeated key counts like in the text.
#[derive(Default)]
struct Shape {
    values: usize,
    depth: usize,
}

impl<'de> serde::Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct V;
        impl V {
            fn container(children: Vec<Shape>) -> Shape {
                Shape {
                    values: 1
                        + children.len().saturating_sub(1)
                        + children.iter().map(|c| c.values).sum::<usize>(),
                    depth: 1 + children.iter().map(|c| c.depth).max().unwrap_or(0),
                }
            }
        }
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
                Ok(Shape::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
                Ok(Shape::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
                Ok(Shape::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
                Ok(Shape::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
                Ok(Shape::default())
            }
            fn visit_unit<E>(self) -> Result<Shape, E> {
                Ok(Shape::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
                let mut children = Vec::new();
                while let Some(c) = a.next_element::<Shape>()? {
                    children.push(c);
                }
                Ok(V::container(children))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Shape, A::Error> {
                let mut children = Vec::new();
                while a.next_key::<IgnoredAny>()?.is_some() {
                    children.push(a.next_value::<Shape>()?);
                }
                Ok(V::container(children))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            // Strings full of what the scan must skip: quotes, backslashes, brackets, commas.
            "[\"\\\\\\[\\]{},a]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(8, 128, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(("[\"\\\\,a-c]{0,3}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The fuzz body of the budget scan on generated documents, compact and pretty-printed.
        #[test]
        fn the_budget_scan_agrees_with_the_parser(bound in 0u8..=255, v in json_value()) {
            for text in [serde_json::to_vec(&v).unwrap(), serde_json::to_vec_pretty(&v).unwrap()] {
                let mut data = vec![bound];
                data.extend(text);
                super::json_budget(&data);
            }
        }
    }
}
