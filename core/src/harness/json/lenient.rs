//! Lenient typed views: serde types that accept any JSON value and keep only the expected
//! shape, so a field of another type makes its rule not fire instead of failing the line.
//! They deserialize from bytes (borrowing unescaped strings) or from a `&Value`, so one
//! decoding logic serves both the fast path and the fallback.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Implements the non-matching visitor methods as "consume and yield the default".
macro_rules! other_values_default {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut a: A) -> Result<(), A::Error> {
    while a.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn skip_map<'de, A: MapAccess<'de>>(mut a: A) -> Result<(), A::Error> {
    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A string (borrowed when possible), else `None`.
#[derive(Debug, Default)]
pub(crate) struct Str<'a>(pub(crate) Option<Cow<'a, str>>);

impl Str<'_> {
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(s))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_seq(a).map(|()| Str(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_map(a).map(|()| Str(None))
            }
            other_values_default!();
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A boolean, else `None`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Bool(pub(crate) Option<bool>);

impl<'de> Deserialize<'de> for Bool {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bool;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Bool(Some(b)))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Bool(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Bool(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Bool(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Bool(None))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Bool(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Bool(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_seq(a).map(|()| Bool(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_map(a).map(|()| Bool(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// An unsigned integer as `json::u64` reads one (a float truncated; a negative, non-finite
/// or non-number value: `None`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct U64(pub(crate) Option<u64>);

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = U64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
                Ok(U64(Some(n)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
                Ok(U64(u64::try_from(n).ok()))
            }
            fn visit_f64<E>(self, f: f64) -> Result<Self::Value, E> {
                Ok(U64((f.is_finite() && f >= 0.0).then_some(f as u64)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(U64(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(U64(None))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(U64(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(U64(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_seq(a).map(|()| U64(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_map(a).map(|()| U64(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A field that is present with any value (`null` too): `Some` of its object view, or of
/// `T::default()` for a value of another shape; absent: `None` (by `Default`).
#[derive(Debug)]
pub(crate) struct Present<T>(pub(crate) Option<T>);

impl<T> Default for Present<T> {
    fn default() -> Self {
        Present(None)
    }
}

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Present<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = Present<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(a)).map(|t| Present(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_seq(a).map(|()| Present(Some(T::default())))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Present(Some(T::default())))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Whether a present field is non-null (absent: `false` by `Default`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NonNull(pub(crate) bool);

impl<'de> Deserialize<'de> for NonNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonNull;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(NonNull(false))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(NonNull(false))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(NonNull(true))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(NonNull(true))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(NonNull(true))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(NonNull(true))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(NonNull(true))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_seq(a).map(|()| NonNull(true))
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_map(a).map(|()| NonNull(true))
            }
        }
        d.deserialize_any(V)
    }
}

/// An object of shape `T`, else `None`.
#[derive(Debug)]
pub(crate) struct Obj<T>(pub(crate) Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(a)).map(|t| Obj(Some(t)))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Obj(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_seq(a).map(|()| Obj(None))
            }
            other_values_default!();
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An array's object elements of shape `T` (other elements skipped); not an array: empty.
#[derive(Debug)]
pub(crate) struct Seq<T>(pub(crate) Vec<T>);

impl<T> Default for Seq<T> {
    fn default() -> Self {
        Seq(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Seq<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Seq<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(Obj(item)) = a.next_element::<Obj<T>>()? {
                    out.extend(item);
                }
                Ok(Seq(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
                skip_map(a).map(|()| Seq(Vec::new()))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Seq(Vec::new()))
            }
            other_values_default!();
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Reads a typed view from a line's bytes; only a JSON object qualifies (a derived
/// struct would otherwise accept an array positionally), and only within the budget
/// ([`within_budget`](super::within_budget)): every element of a [`Seq`] costs its whole
/// view, however short its text.
pub(crate) fn from_slice<'a, T: Deserialize<'a>>(line: &'a [u8]) -> Option<T> {
    let trimmed = line.trim_ascii();
    if trimmed.first() != Some(&b'{') || !super::within_budget(trimmed) {
        return None;
    }
    serde_json::from_slice(trimmed).ok()
}

/// [`from_slice`] of `line` read through the scan's index when the scan has checked the
/// line (`checked`): the same view, without scanning the strings the view skips.
pub(crate) fn from_checked<'a, T: Deserialize<'a>>(
    line: &'a [u8],
    checked: Option<&super::super::scan::Checked<'a, '_>>,
) -> Option<T> {
    match checked {
        Some(c) => {
            let trimmed = line.trim_ascii();
            if !super::within_budget(trimmed) {
                return None;
            }
            c.read().ok()
        }
        None => from_slice(line),
    }
}

/// Reads a typed view from a parsed value.
pub(crate) fn from_value<'a, T: Deserialize<'a>>(v: &'a serde_json::Value) -> Option<T> {
    T::deserialize(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(default)]
    struct Probe<'a> {
        #[serde(borrow)]
        s: Str<'a>,
        b: Bool,
        n: NonNull,
        #[serde(borrow)]
        o: Obj<Inner<'a>>,
        #[serde(borrow)]
        v: Seq<Inner<'a>>,
    }

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(default)]
    struct Inner<'a> {
        #[serde(borrow)]
        k: Str<'a>,
    }

    #[test]
    fn wrong_types_do_not_fail() {
        for line in [
            r#"{"s":1,"b":"x","n":null,"o":[1],"v":{"k":"x"}}"#,
            r#"{"s":{"a":[1,{}]},"b":[],"o":"str","v":[1,"x",{"k":2},{"k":"y"}]}"#,
        ] {
            let p: Probe<'_> = from_slice(line.as_bytes()).expect(line);
            assert!(p.s.get().is_none());
            assert!(p.b.0.is_none());
            assert!(!p.n.0);
            assert!(p.o.0.is_none());
            assert!(p.v.0.iter().all(|i| i.k.get() != Some("x")));
        }
        let p: Probe<'_> =
            from_slice(br#"{"s":"a\nb","b":true,"n":false,"o":{"k":"z"},"v":[{"k":"y"}]}"#)
                .expect("ok");
        assert_eq!(p.s.get(), Some("a\nb"));
        assert_eq!(p.b.0, Some(true));
        assert!(p.n.0);
        assert_eq!(p.o.0.expect("obj").k.get(), Some("z"));
        assert_eq!(p.v.0.len(), 1);
        // Duplicate keys fail: the caller falls back to a Value parse (last key wins).
        assert!(from_slice::<Probe<'_>>(br#"{"s":"a","s":"b"}"#).is_none());
        let v: serde_json::Value = serde_json::from_slice(br#"{"s":"a","s":"b"}"#).expect("v");
        let p: Probe<'_> = from_value(&v).expect("from value");
        assert_eq!(p.s.get(), Some("b"));
    }
}
