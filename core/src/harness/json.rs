//! Tolerant JSON access shared by the decoders: a field that is absent or of another type is
//! simply `None`, so a rule keyed on it does not fire.

use serde_json::Value;

/// Deepest nesting of arrays and objects a line may have to be decoded (the line itself is
/// depth 1): the deepest serde_json parses (its recursion limit is 128), so a line the parser
/// would refuse for its depth is reported as over the budget rather than as malformed. No
/// event comes near it.
pub const MAX_JSON_DEPTH: usize = 127;

/// Most values a line may hold to be decoded, counted as its arrays and objects plus the
/// commas between elements and members (an upper bound of its values, a scan of the bytes can
/// count it). A parsed value costs tens of bytes however short its text (`[]` is 2 bytes and
/// a 32-byte value; `{}` read into a typed view is a few hundred), so without a bound a 64 MiB
/// line of `[],` or `{},` costs gigabytes. Events carry their bulk in strings; a line past the
/// bound is not an event of any dialect.
pub const MAX_JSON_VALUES: usize = 1 << 18;

/// Whether `line` is within [`MAX_JSON_DEPTH`] and [`MAX_JSON_VALUES`], by a scan of its bytes
/// that builds nothing (string contents are skipped with `memchr`). It does not check the
/// syntax: the parser does, on lines within the budget.
///
/// A line of at most [`MAX_JSON_VALUES`] bytes cannot hold more values than that (each takes
/// a byte at least) and is not scanned: most lines are, and their decoding stays one pass.
/// Its depth is still bounded, by the parser's own recursion limit (such a line is
/// malformed).
pub(crate) fn within_budget(line: &[u8]) -> bool {
    within_values(line, MAX_JSON_VALUES)
}

/// Most values a retained JSON document (the OpenCode session export, one document of up to
/// the driver's retained-record cap) may hold to be parsed, counted as for
/// [`MAX_JSON_VALUES`]: a long session's export holds many events, each a handful of values
/// around its strings.
pub const MAX_JSON_DOCUMENT_VALUES: usize = 1 << 21;

/// [`within_budget`] with another bound on the values.
pub(crate) fn within_values(line: &[u8], max_values: usize) -> bool {
    scan(line, max_values) == Budget::Within
}

/// What the budget scan of a line found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Budget {
    Within,
    /// Nested past [`MAX_JSON_DEPTH`]: no parse of it is attempted (serde_json refuses it).
    TooDeep,
    /// Within the depth, but holding more values than the bound.
    TooMany,
}

/// Scans `line` for its depth and its values (see [`within_budget`]). Past the value bound the
/// scan goes on for the depth only, so [`Budget::TooMany`] means the depth is within.
fn scan(line: &[u8], max_values: usize) -> Budget {
    if line.len() <= max_values {
        return Budget::Within;
    }
    let mut depth = 0usize;
    let mut values = 0usize;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'"' => match string_end(line, i + 1) {
                Some(end) => i = end,
                None => break,
            },
            b'[' | b'{' => {
                depth += 1;
                values += 1;
                if depth > MAX_JSON_DEPTH {
                    return Budget::TooDeep;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => values += 1,
            _ => {}
        }
        i += 1;
    }
    if values > max_values {
        Budget::TooMany
    } else {
        Budget::Within
    }
}

/// The index of the quote that closes the string whose contents start at `start`, or `None`
/// when it is not closed. Only quotes are searched for (escapes are frequent in tool output,
/// quotes much rarer); a quote preceded by an odd number of backslashes is escaped.
fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut from = start;
    loop {
        let q = from + memchr::memchr(b'"', &line[from..])?;
        // The run of backslashes before the quote lies inside the string: the byte before
        // `from` is a quote (the opening one, or an escaped one).
        let backslashes = line[from..q]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(q);
        }
        from = q + 1;
    }
}

/// How one raw line parsed.
pub(crate) enum Line {
    /// Empty or whitespace only: not an event, not counted.
    Blank,
    /// Not a JSON object (malformed, truncated, non-UTF-8, an array, too deep, …).
    Malformed,
    /// An object-looking line past [`MAX_JSON_DEPTH`] or [`MAX_JSON_VALUES`]: not parsed.
    OverBudget,
    /// A JSON object.
    Object(Value),
}

/// Parses one line. Never panics, and never builds a value for a line past the budget
/// ([`within_budget`]): that is [`Line::OverBudget`].
pub(crate) fn parse(line: &[u8]) -> Line {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Line::Blank;
    }
    // Cheap pre-check: every event of every dialect is an object.
    if trimmed.first() != Some(&b'{') {
        return Line::Malformed;
    }
    if !within_budget(trimmed) {
        return Line::OverBudget;
    }
    match serde_json::from_slice::<Value>(trimmed) {
        Ok(v @ Value::Object(_)) => Line::Object(v),
        _ => Line::Malformed,
    }
}

/// What a decoder still reads of a line past the value budget: the event types whose end of an
/// item or a turn must not be lost, and the few small fields it needs of them.
#[derive(Debug)]
pub(crate) struct Partial {
    /// The `type` values read; a line of another type stays skipped.
    pub(crate) types: &'static [&'static str],
    /// The fields kept (`type` among them).
    pub(crate) fields: &'static [(&'static str, Keep)],
}

/// How one field of a [`Partial`] read is kept.
#[derive(Debug)]
pub(crate) enum Keep {
    /// A string, number, boolean or null; an array or object is left out.
    Scalar,
    /// Present and not null: kept as `true` (its value skipped).
    Present,
    /// An object, of which only these fields are kept; a string, number or boolean is kept
    /// as is (a decoder reading the object's fields finds none, as in a full parse).
    Fields(&'static [(&'static str, Keep)]),
    /// An object's first [`MAX_PARTIAL_ITEMS`] keys, each with a `null` value.
    Keys,
    /// An array's first [`MAX_PARTIAL_ITEMS`] string elements.
    Strings,
}

/// Most keys ([`Keep::Keys`]) or strings ([`Keep::Strings`]) a partial read keeps of one field.
const MAX_PARTIAL_ITEMS: usize = 64;

/// For a line past the value budget (not past the depth, which serde_json refuses), the
/// object of only the fields `partial` names, when its `type` is one of `partial.types`.
/// Everything else is skipped by serde's `IgnoredAny`, which builds nothing: the cost is a
/// linear scan plus the few fields kept (each bounded by the line). `None` when the line is
/// not such an object (or not valid JSON).
pub(crate) fn parse_partial(line: &[u8], partial: &Partial) -> Option<Value> {
    let trimmed = line.trim_ascii();
    if trimmed.first() != Some(&b'{') || scan(trimmed, MAX_JSON_VALUES) != Budget::TooMany {
        return None;
    }
    let mut de = serde_json::Deserializer::from_slice(trimmed);
    let v = serde::de::DeserializeSeed::deserialize(
        reduce::Seed(&Keep::Fields(partial.fields)),
        &mut de,
    )
    .ok()?;
    de.end().ok()?;
    let kind = v.get("type")?.as_str()?;
    partial.types.contains(&kind).then_some(v)
}

/// The deserializer of [`parse_partial`]: a seed per [`Keep`], yielding `Null` for a value of
/// another shape (the caller leaves such fields out).
mod reduce {
    use std::fmt;

    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use super::{Keep, MAX_PARTIAL_ITEMS};

    pub(super) struct Seed<'k>(pub(super) &'k Keep);

    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = Value;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
            Ok(self.scalar(Value::Bool(b)))
        }
        fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
            Ok(self.scalar(Value::from(n)))
        }
        fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
            Ok(self.scalar(Value::from(n)))
        }
        fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
            Ok(self.scalar(Value::from(n)))
        }
        fn visit_str<E>(self, s: &str) -> Result<Value, E> {
            Ok(match self.0 {
                Keep::Scalar | Keep::Fields(_) => Value::String(s.to_owned()),
                Keep::Present => Value::Bool(true),
                _ => Value::Null,
            })
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_none<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            if matches!(self.0, Keep::Strings) {
                let mut kept = Vec::new();
                while let Some(v) = a.next_element_seed(Seed(&Keep::Scalar))? {
                    if let Value::String(s) = v
                        && kept.len() < MAX_PARTIAL_ITEMS
                    {
                        kept.push(Value::String(s));
                    }
                }
                return Ok(Value::Array(kept));
            }
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(self.present_or_null())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut out = Map::new();
            match self.0 {
                Keep::Fields(fields) => {
                    while let Some(key) = a.next_key::<String>()? {
                        match fields.iter().find(|(name, _)| *name == key) {
                            Some((_, keep)) => {
                                let v = a.next_value_seed(Seed(keep))?;
                                // A repeated key: the last one wins, as in a full parse.
                                out.remove(&key);
                                if !v.is_null() {
                                    out.insert(key, v);
                                }
                            }
                            None => {
                                a.next_value::<IgnoredAny>()?;
                            }
                        }
                    }
                    Ok(Value::Object(out))
                }
                Keep::Keys => {
                    while let Some(key) = a.next_key::<String>()? {
                        a.next_value::<IgnoredAny>()?;
                        if out.len() < MAX_PARTIAL_ITEMS {
                            out.insert(key, Value::Null);
                        }
                    }
                    Ok(Value::Object(out))
                }
                _ => {
                    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(self.present_or_null())
                }
            }
        }
    }

    impl Seed<'_> {
        fn scalar(&self, v: Value) -> Value {
            match self.0 {
                Keep::Scalar | Keep::Fields(_) => v,
                Keep::Present => Value::Bool(true),
                _ => Value::Null,
            }
        }
        fn present_or_null(&self) -> Value {
            match self.0 {
                Keep::Present => Value::Bool(true),
                _ => Value::Null,
            }
        }
    }
}

/// The string at `key`.
pub(crate) fn str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.as_str()
}

/// The non-empty string at `key`.
pub(crate) fn nonempty<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    str(v, key).filter(|s| !s.is_empty())
}

/// The unsigned integer at `key` (floats are truncated, negatives ignored).
pub(crate) fn u64(v: &Value, key: &str) -> Option<u64> {
    let n = v.get(key)?;
    n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// The finite, non-negative number at `key` (a cost: a hostile negative or non-finite one
/// would corrupt every sum it enters).
pub(crate) fn f64(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|f| f.is_finite() && *f >= 0.0)
}

/// The boolean at `key`.
pub(crate) fn bool(v: &Value, key: &str) -> Option<bool> {
    v.get(key)?.as_bool()
}

/// Whether `key` is present and not `null`.
pub(crate) fn non_null(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|x| !x.is_null())
}

/// The array at `key`, or an empty slice.
pub(crate) fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The first non-empty string among `keys`.
pub(crate) fn first_str<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| nonempty(v, k))
}

/// What a cheap scan of a line's top-level `key` found.
pub(crate) enum Peek<'a> {
    /// The line is an object whose `key` is this string (each key once).
    Str(std::borrow::Cow<'a, str>),
    /// Anything else (absent, not a string, a duplicate key, not an object, malformed): parse
    /// the line in full to decide.
    Unknown,
}

/// Scans `line` for its top-level string `key` without building a value: other values are
/// skipped, strings are borrowed when unescaped. Lets a decoder drop quiet event types
/// (Claude's `user` tool results are most of a stream's bytes) at scanning cost. The whole
/// line is still checked for JSON syntax, so a malformed line is never mistaken for a
/// quiet one.
pub(crate) fn peek_str<'a>(line: &'a [u8], key: &'static str) -> Peek<'a> {
    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
    use std::borrow::Cow;

    /// A string borrowed from the input when possible; `None` for any other value.
    struct LenientStr<'a>(Option<Cow<'a, str>>);
    impl<'de> de::Deserialize<'de> for LenientStr<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = LenientStr<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("any value")
                }
                fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                    Ok(LenientStr(Some(Cow::Borrowed(s))))
                }
                fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                    Ok(LenientStr(Some(Cow::Owned(s.to_owned()))))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                    Ok(LenientStr(None))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                    Ok(LenientStr(None))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                    Ok(LenientStr(None))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                    Ok(LenientStr(None))
                }
                fn visit_unit<E>(self) -> Result<Self::Value, E> {
                    Ok(LenientStr(None))
                }
                fn visit_seq<A: de::SeqAccess<'de>>(
                    self,
                    mut a: A,
                ) -> Result<Self::Value, A::Error> {
                    while a.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(LenientStr(None))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(LenientStr(None))
                }
            }
            d.deserialize_any(V)
        }
    }

    struct Head<'a> {
        found: Option<Cow<'a, str>>,
        seen: u32,
    }
    struct HeadVisitor(&'static str);
    impl<'de> Visitor<'de> for HeadVisitor {
        type Value = Head<'de>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            let mut head = Head {
                found: None,
                seen: 0,
            };
            while let Some(k) = a.next_key::<LenientStr<'de>>()? {
                if k.0.as_deref() == Some(self.0) {
                    head.seen += 1;
                    head.found = a.next_value::<LenientStr<'de>>()?.0;
                } else {
                    a.next_value::<IgnoredAny>()?;
                }
            }
            Ok(head)
        }
    }

    let trimmed = line.trim_ascii();
    let mut de = serde_json::Deserializer::from_slice(trimmed);
    let head = match de.deserialize_map(HeadVisitor(key)) {
        Ok(h) if de.end().is_ok() => h,
        _ => return Peek::Unknown,
    };
    match head {
        Head {
            found: Some(s),
            seen: 1,
        } => Peek::Str(s),
        _ => Peek::Unknown,
    }
}

/// Whether `line` is an object whose top-level `type` is one of `names` (the key once, its
/// value a string): the decoders' test for their quiet event types, for a line that mentions
/// one of them early ([`mentions_early`]). `checked` is the fast scan of the line
/// ([`super::scan::check`]); where it is unsure (`None`, or no plain `type`), [`peek_str`]
/// decides, as it always did, so the answer is the same either way.
pub(crate) fn is_quiet(
    line: &[u8],
    names: &[&str],
    checked: Option<&super::scan::Checked<'_, '_>>,
) -> bool {
    match checked.and_then(|c| c.object_type()) {
        Some(kind) => names.contains(&kind),
        None => matches!(peek_str(line, "type"), Peek::Str(k) if names.contains(&k.as_ref())),
    }
}

/// The type of a line that starts `{"type":"…"` (how every dialect's events are written), when
/// that string is plain and ends within the first [`EARLY_BYTES`] bytes; `None` otherwise. A
/// hint, like [`mentions_early`], never a decision.
pub(crate) fn leading_type(line: &[u8]) -> Option<&[u8]> {
    let head = &line[..line.len().min(EARLY_BYTES)];
    let rest = head.strip_prefix(br#"{"type":""#)?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then_some(&rest[..end])
}

/// Whether the line's type may be one of `names`: its leading type ([`leading_type`], looked
/// up once per line) is one, or, for a line that does not start with a plain type, one of
/// `names` is mentioned early ([`mentions_early`]). A cheap hint, never a decision: where it
/// says yes, [`mentions_early`] does too, and where only [`mentions_early`] does, the line's
/// type is its leading type, not one of `names`.
pub(crate) fn may_be(line: &[u8], leading: Option<&[u8]>, names: &[&str]) -> bool {
    match leading {
        Some(kind) => names.iter().any(|n| n.as_bytes() == kind),
        None => mentions_early(line, names),
    }
}

/// How far into a line [`mentions_early`] looks.
const EARLY_BYTES: usize = 128;

/// Whether one of `names`, in double quotes, occurs in the first [`EARLY_BYTES`] bytes of
/// `line`: a cheap hint that the line's type may be one of them (never a decision).
pub(crate) fn mentions_early(line: &[u8], names: &[&str]) -> bool {
    let head = &line[..line.len().min(EARLY_BYTES)];
    memchr::memchr_iter(b'"', head).any(|i| {
        let rest = &head[i + 1..];
        names.iter().any(|name| {
            rest.strip_prefix(name.as_bytes())
                .is_some_and(|after| after.first() == Some(&b'"'))
        })
    })
}

pub(crate) mod lenient;

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The leading-type hint says yes only where the early mention does.
        #[test]
        fn the_leading_type_hint_implies_the_early_mention(
            kind in "user|assistant|system|[a-z\\\\\"]{0,130}",
            rest in "[a-z\",:{}]{0,200}",
        ) {
            let line = format!(r#"{{"type":"{kind}"{rest}"#);
            let names: [&[&str]; 4] = [&["user", "keep_alive"], &["assistant"], &["system"], &[kind.as_str()]];
            for names in names {
                let hint = may_be(line.as_bytes(), leading_type(line.as_bytes()), names);
                proptest::prop_assert!(!hint || mentions_early(line.as_bytes(), names), "{}", line);
            }
        }
    }

    #[test]
    fn a_partial_read_keeps_only_the_named_fields_of_the_named_types() {
        const P: Partial = Partial {
            types: &["t"],
            fields: &[
                ("type", Keep::Scalar),
                ("s", Keep::Scalar),
                ("p", Keep::Present),
                ("k", Keep::Keys),
                ("e", Keep::Strings),
                ("o", Keep::Fields(&[("a", Keep::Scalar)])),
            ],
        };
        let bulk = vec!["[]"; MAX_JSON_VALUES].join(",");
        let line = |fields: &str| format!(r#"{{{fields},"bulk":[{bulk}]}}"#);
        let v = parse_partial(
            line(
                r#""type":"t","s":"x","s":"last","p":{"q":[1]},"k":{"m1":{},"m2":[]},"e":["a",1,{},"b"],"o":{"a":2,"b":[3]},"other":"dropped""#,
            )
            .as_bytes(),
            &P,
        )
        .expect("partial");
        assert_eq!(
            v,
            serde_json::json!({"type":"t","s":"last","p":true,"k":{"m1":null,"m2":null},"e":["a","b"],"o":{"a":2}})
        );
        // A field of another shape is left out; caps hold.
        let keys: Vec<String> = (0..100).map(|i| format!(r#""m{i}":0"#)).collect();
        let v = parse_partial(
            line(&format!(
                r#""type":"t","s":[1],"p":null,"o":"str","k":{{{}}}"#,
                keys.join(",")
            ))
            .as_bytes(),
            &P,
        )
        .expect("partial");
        assert_eq!(v.get("s"), None);
        assert_eq!(v.get("p"), None);
        assert_eq!(v["o"], "str");
        assert_eq!(v["k"].as_object().map(|m| m.len()), Some(MAX_PARTIAL_ITEMS));
        // Another type, a missing type, malformed JSON, a line within the budget or past the
        // depth: nothing.
        assert!(parse_partial(line(r#""type":"u""#).as_bytes(), &P).is_none());
        assert!(parse_partial(line(r#""s":"x""#).as_bytes(), &P).is_none());
        assert!(parse_partial(format!("{}x", line(r#""type":"t""#)).as_bytes(), &P).is_none());
        assert!(parse_partial(br#"{"type":"t"}"#, &P).is_none());
        let deep = format!(
            r#"{{"type":"t","x":{}{}}}"#,
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        let deep = line(&deep[1..deep.len() - 1]);
        assert!(!within_budget(deep.as_bytes()));
        assert!(parse_partial(deep.as_bytes(), &P).is_none());
    }

    #[test]
    fn the_budget_scan_counts_structure_outside_strings_only() {
        // Padding makes a line long enough to be scanned.
        let pad = " ".repeat(MAX_JSON_VALUES);
        let long = |s: &str| format!("{s}{pad}");
        assert!(within_budget(long(r#"{"a":"[[[[,,,,\"]]]{{"}"#).as_bytes()));
        // An escaped backslash before a quote does not escape it.
        let closed = format!(r#"["\\"{}]"#, ",0".repeat(MAX_JSON_VALUES));
        assert!(!within_budget(closed.as_bytes()));
        let escaped = format!(r#"["\"{}"]"#, ",0".repeat(MAX_JSON_VALUES));
        assert!(within_budget(escaped.as_bytes()));
        // Unterminated strings and trailing escapes end the scan without panicking.
        for end in ["{\"a", "{\"a\\", "{\"\\", "\"", "\\", ""] {
            assert!(within_budget(format!("{pad}{end}").as_bytes()));
        }
        let deep = |d: usize| long(&format!("{}{}", "[".repeat(d), "]".repeat(d)));
        assert!(within_budget(deep(MAX_JSON_DEPTH).as_bytes()));
        assert!(!within_budget(deep(MAX_JSON_DEPTH + 1).as_bytes()));
        // Closing brackets bring the depth back down: siblings do not add up.
        let sibling = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH - 1),
            "]".repeat(MAX_JSON_DEPTH - 1)
        );
        let siblings = long(&format!("[{}]", vec![sibling; 10].join(",")));
        assert!(within_budget(siblings.as_bytes()));
        // A short line is never scanned: it cannot hold more values than bytes.
        assert!(within_budget("[".repeat(MAX_JSON_VALUES).as_bytes()));
        let wide = |n: usize| format!("[{}]", vec!["0"; n].join(","));
        // One array and n - 1 commas.
        assert!(within_budget(wide(MAX_JSON_VALUES).as_bytes()));
        assert!(!within_budget(wide(MAX_JSON_VALUES + 1).as_bytes()));
        assert!(matches!(
            parse(
                wide(MAX_JSON_VALUES + 1)
                    .replace('[', "{\"a\":[")
                    .as_bytes()
            ),
            Line::OverBudget
        ));
    }
}
