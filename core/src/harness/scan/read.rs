//! Reading a view from a checked line through its index: a `serde` deserializer that walks
//! the index instead of the bytes, so a string, number or container the view skips costs its
//! few index entries, not a scan of its bytes (the scan has checked them already).
//!
//! It gives what `serde_json::from_slice` gives on the same line. The structure comes from
//! the index, which the walk has checked; every scalar the view is given is read by
//! `serde_json` itself from that value's bytes (a number, a literal, an escaped string), or,
//! for a plain string, checked for UTF-8 as `serde_json` checks it; a skipped value is
//! skipped without a check, as `serde_json` skips it (`IgnoredAny` looks only at the syntax).
//! A map key is read as a string, and a plain ASCII field name of a derived struct as its
//! bytes (which derived visitors match alike), so types whose keys are numbers or enums, or
//! hand-written field visitors, are not for this reader.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::has_backslash;

type Error = serde_json::Error;

/// Reads `T` from `line` (trimmed, one JSON object) through its checked index `idx`.
pub(super) fn read<'a, T: de::Deserialize<'a>>(line: &'a [u8], idx: &[u32]) -> Result<T, Error> {
    let mut tape = Tape { line, idx, k: 0 };
    let value = T::deserialize(&mut tape)?;
    // As `serde_json::from_slice` ends: nothing but whitespace may follow the value.
    if tape.k != idx.len() {
        return Err(de::Error::custom("trailing characters"));
    }
    Ok(value)
}

/// The index of a line and the entry of the next value.
struct Tape<'a, 's> {
    line: &'a [u8],
    idx: &'s [u32],
    k: usize,
}

impl<'a> Tape<'a, '_> {
    /// The first byte of the entry at the cursor.
    fn byte(&self) -> u8 {
        self.line[self.idx[self.k] as usize]
    }

    /// Moves the cursor past the value at it; the value's bytes.
    fn skip(&mut self) -> &'a [u8] {
        let at = self.idx[self.k] as usize;
        let end = match self.line[at] {
            b'"' => {
                self.k += 2;
                self.idx[self.k - 1] as usize + 1
            }
            b'{' | b'[' => {
                // Quotes come in pairs; every other entry is a byte outside strings.
                let mut depth = 0usize;
                loop {
                    let b = self.line[self.idx[self.k] as usize];
                    self.k += 1;
                    match b {
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                break self.idx[self.k - 1] as usize + 1;
                            }
                        }
                        b'"' => self.k += 1,
                        _ => {}
                    }
                }
            }
            // A literal or a number: each of its bytes is an entry, and a comma or a close
            // follows it (the walk checked that).
            _ => {
                self.k += 1;
                while !matches!(self.byte(), b',' | b'}' | b']') {
                    self.k += 1;
                }
                self.idx[self.k - 1] as usize + 1
            }
        };
        &self.line[at..end]
    }

    /// The value at the cursor read by `serde_json` from its bytes (the cursor moved past it).
    fn json(&mut self) -> serde_json::Deserializer<serde_json::de::SliceRead<'a>> {
        serde_json::Deserializer::from_slice(self.skip())
    }

    /// The string at the cursor, given to `visitor` as `serde_json` gives it.
    fn string<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Error> {
        let (open, close) = (self.idx[self.k] as usize, self.idx[self.k + 1] as usize);
        let text = &self.line[open + 1..close];
        if has_backslash(text) {
            return self.json().deserialize_str(visitor);
        }
        self.k += 2;
        visitor.visit_borrowed_str(utf8(text)?)
    }

    /// An object at the cursor, its members given to `visitor`.
    fn object<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Error> {
        self.k += 1;
        let mut members = Members {
            tape: self,
            first: true,
            value_next: false,
        };
        let value = visitor.visit_map(&mut members)?;
        // As `serde_json`: the visitor must have read up to the close.
        if members.value_next || self.byte() != b'}' {
            return Err(de::Error::custom("trailing characters"));
        }
        self.k += 1;
        Ok(value)
    }

    /// An array at the cursor, its elements given to `visitor`.
    fn array<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Error> {
        self.k += 1;
        let mut elements = Elements {
            tape: self,
            first: true,
        };
        let value = visitor.visit_seq(&mut elements)?;
        if self.byte() != b']' {
            return Err(de::Error::custom("trailing characters"));
        }
        self.k += 1;
        Ok(value)
    }

    fn invalid_type<V: Visitor<'a>>(&mut self, visitor: &V) -> Error {
        let unexpected = match self.byte() {
            b'"' => de::Unexpected::Other("string"),
            b'[' => de::Unexpected::Seq,
            b'{' => de::Unexpected::Map,
            b't' => de::Unexpected::Bool(true),
            b'f' => de::Unexpected::Bool(false),
            b'n' => de::Unexpected::Unit,
            _ => de::Unexpected::Other("number"),
        };
        de::Error::invalid_type(unexpected, visitor)
    }
}

/// Deserializer methods that hand the value's bytes to `serde_json`'s same method.
macro_rules! by_serde_json {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
                self.json().$method(visitor)
            }
        )*
    };
}

impl<'a> Deserializer<'a> for &mut Tape<'a, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.byte() {
            b'{' => self.object(visitor),
            b'[' => self.array(visitor),
            b'"' => self.string(visitor),
            b't' => {
                self.skip();
                visitor.visit_bool(true)
            }
            b'f' => {
                self.skip();
                visitor.visit_bool(false)
            }
            b'n' => {
                self.skip();
                visitor.visit_unit()
            }
            _ => self.json().deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        self.skip();
        visitor.visit_unit()
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.byte() == b'n' {
            self.skip();
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.byte() {
            b'{' => self.object(visitor),
            b'[' => self.array(visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.byte() {
            b'{' => self.object(visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.byte() {
            b'[' => self.array(visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.byte() {
            b'"' => self.string(visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.json().deserialize_unit_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'a>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        self.json().deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.json().deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.json().deserialize_enum(name, variants, visitor)
    }

    by_serde_json!(
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_identifier,
    );
}

/// The members of an object, the cursor at the next key (or its comma, or the close).
struct Members<'t, 'a, 's> {
    tape: &'t mut Tape<'a, 's>,
    first: bool,
    /// A key was read, its value not yet.
    value_next: bool,
}

impl<'a> MapAccess<'a> for &mut Members<'_, 'a, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.value_next {
            return Err(de::Error::custom("expected a value"));
        }
        let t = &mut *self.tape;
        match t.byte() {
            b'}' => return Ok(None),
            b',' if !self.first => t.k += 1,
            _ => {}
        }
        self.first = false;
        let (open, close) = (t.idx[t.k] as usize, t.idx[t.k + 1] as usize);
        // The key's quotes and the colon.
        t.k += 3;
        self.value_next = true;
        seed.deserialize(Key {
            quoted: &t.line[open..=close],
        })
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, Error> {
        if !std::mem::take(&mut self.value_next) {
            return Err(de::Error::custom("expected a key"));
        }
        seed.deserialize(&mut *self.tape)
    }
}

/// The elements of an array, the cursor at the next one (or its comma, or the close).
struct Elements<'t, 'a, 's> {
    tape: &'t mut Tape<'a, 's>,
    first: bool,
}

impl<'a> SeqAccess<'a> for &mut Elements<'_, 'a, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let t = &mut *self.tape;
        match t.byte() {
            b']' => return Ok(None),
            b',' if !self.first => t.k += 1,
            _ => {}
        }
        self.first = false;
        seed.deserialize(&mut *self.tape).map(Some)
    }
}

/// A map key (with its quotes), read as a string as `serde_json` reads keys.
struct Key<'a> {
    quoted: &'a [u8],
}

impl<'a> Key<'a> {
    /// The key's text when it is plain ASCII (no escape): certainly what `serde_json` decodes.
    fn ascii(&self) -> Option<&'a [u8]> {
        let text = &self.quoted[1..self.quoted.len() - 1];
        text.iter()
            .all(|&b| b.is_ascii() && b != b'\\')
            .then_some(text)
    }
}

impl<'a> Deserializer<'a> for Key<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        let text = &self.quoted[1..self.quoted.len() - 1];
        if has_backslash(text) {
            return serde_json::Deserializer::from_slice(self.quoted).deserialize_str(visitor);
        }
        visitor.visit_borrowed_str(utf8(text)?)
    }

    /// A derived struct's field names: a plain ASCII key is given as bytes, which such a
    /// visitor matches as it matches the same text (no UTF-8 check needed).
    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.ascii() {
            Some(text) => visitor.visit_borrowed_bytes(text),
            None => self.deserialize_any(visitor),
        }
    }

    /// A skipped key: `serde_json` decodes it (and fails on invalid UTF-8); a plain ASCII one
    /// certainly decodes.
    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.ascii() {
            Some(_) => visitor.visit_unit(),
            None => self.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        <W: Visitor<'a>>
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct enum
    }
}

/// `text` as a string, failing as `serde_json` fails on invalid UTF-8.
fn utf8(text: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(text).map_err(|_| de::Error::custom("invalid unicode code point"))
}
