//! A fast, conservative syntax check of one JSON line that also finds its top-level `type`,
//! so the decoders can drop their quiet event types (Claude's `user` tool results are most of
//! a stream's bytes) at close to the speed of a line count.
//!
//! It works like the first stage of simdjson: 64 bytes at a time it finds the quotes, the
//! backslashes and the control bytes (SSE2 on x86-64, a plain loop elsewhere), works out which
//! characters are escaped and which bytes lie inside strings with bit arithmetic, and indexes
//! the remaining structure (quotes, and every byte outside strings but spaces). A small state
//! machine then checks the structure, in order, from the index.
//!
//! It is a fast path, never the judge: [`object_type`] answers only when the line is certainly
//! a JSON object that `serde_json` accepts, with exactly one top-level `type` key whose value
//! is a plain (unescaped) UTF-8 string. Anything unusual (a control byte anywhere, even as
//! whitespace; a backslash in a top-level key; nesting deeper than [`MAX_DEPTH`]; a `type`
//! that is not such a string) gives `None`, and the caller decides with the full parse as
//! before. So where it answers it agrees with [`super::json::peek_str`], which the tests check
//! on recorded and mutated lines.

/// Deepest nesting the scan follows; a deeper line is left to the full parse.
const MAX_DEPTH: u32 = 64;

/// Bits at even positions.
const EVEN: u64 = 0x5555_5555_5555_5555;

/// One 64-byte block's byte classes: a bit per byte for the quotes and the backslashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    /// Whether a byte is below 0x20.
    control: bool,
}

/// The block's 16-byte lanes (SSE2 registers).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn lanes(block: &[u8; 64]) -> [safe_arch::m128i; 4] {
    let lane = |k: usize| {
        let chunk: &[u8; 16] = block[16 * k..16 * k + 16]
            .try_into()
            .expect("16 bytes of 64");
        safe_arch::load_unaligned_m128i(chunk)
    };
    [lane(0), lane(1), lane(2), lane(3)]
}

/// The 64 bits of four lanes' byte masks.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn bits(eq: [safe_arch::m128i; 4]) -> u64 {
    let b = |k: usize| u64::from(safe_arch::move_mask_i8_m128i(eq[k]) as u16) << (16 * k);
    b(0) | b(1) | b(2) | b(3)
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn masks(v: &[safe_arch::m128i; 4]) -> Masks {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, min_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let quote = set_splat_i8_m128i(b'"' as i8);
    let backslash = set_splat_i8_m128i(b'\\' as i8);
    let control = set_splat_i8_m128i(0x1f);
    // Unsigned `b <= 0x1f` is `min(b, 0x1f) == b`; one mask for the whole block.
    let low = v.map(|v| cmp_eq_mask_i8_m128i(min_u8_m128i(v, control), v));
    let any_low = bitor_m128i(bitor_m128i(low[0], low[1]), bitor_m128i(low[2], low[3]));
    Masks {
        quote: bits(v.map(|v| cmp_eq_mask_i8_m128i(v, quote))),
        backslash: bits(v.map(|v| cmp_eq_mask_i8_m128i(v, backslash))),
        control: move_mask_i8_m128i(any_low) != 0,
    }
}

/// The block's spaces.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn spaces(v: &[safe_arch::m128i; 4]) -> u64 {
    let space = safe_arch::set_splat_i8_m128i(b' ' as i8);
    bits(v.map(|v| safe_arch::cmp_eq_mask_i8_m128i(v, space)))
}

/// The block's `n` and `t` bytes: with the quotes and backslashes, what follows most
/// backslashes in tool output (a newline, a tab, a quote).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn common_escapes(v: &[safe_arch::m128i; 4]) -> u64 {
    use safe_arch::{bitor_m128i, cmp_eq_mask_i8_m128i, set_splat_i8_m128i};
    let (n, t) = (
        set_splat_i8_m128i(b'n' as i8),
        set_splat_i8_m128i(b't' as i8),
    );
    bits(v.map(|v| bitor_m128i(cmp_eq_mask_i8_m128i(v, n), cmp_eq_mask_i8_m128i(v, t))))
}

/// The bytes of a block that may follow a backslash in a JSON string (`"\\/bfnrtu`), and
/// its `u` bytes; `m` is the block's [`masks`], for the quotes and backslashes.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn escape_classes(v: &[safe_arch::m128i; 4], m: &Masks) -> (u64, u64) {
    use safe_arch::{bitor_m128i, cmp_eq_mask_i8_m128i, set_splat_i8_m128i};
    let splat = |c: u8| set_splat_i8_m128i(c as i8);
    // `b | 4 == 'f'` is `b` or `f`; `b | 1 == 'u'` is `t` or `u`.
    let (four, one) = (splat(4), splat(1));
    let letters = v.map(|v| {
        let eq = |x, c| cmp_eq_mask_i8_m128i(x, splat(c));
        bitor_m128i(
            bitor_m128i(
                eq(bitor_m128i(v, four), b'f'),
                eq(bitor_m128i(v, one), b'u'),
            ),
            bitor_m128i(bitor_m128i(eq(v, b'n'), eq(v, b'r')), eq(v, b'/')),
        )
    });
    let u = bits(v.map(|v| cmp_eq_mask_i8_m128i(v, splat(b'u'))));
    (m.quote | m.backslash | bits(letters), u)
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn lanes(block: &[u8; 64]) -> &[u8; 64] {
    block
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn masks(block: &&[u8; 64]) -> Masks {
    masks_portable(block)
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn spaces(block: &&[u8; 64]) -> u64 {
    spaces_portable(block)
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn common_escapes(block: &&[u8; 64]) -> u64 {
    common_escapes_portable(block)
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn escape_classes(block: &&[u8; 64], _: &Masks) -> (u64, u64) {
    escape_classes_portable(block)
}

/// The bits of the bytes of `block` for which `f` holds.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn bits_portable(block: &[u8; 64], f: impl Fn(u8) -> bool) -> u64 {
    let mut m = 0u64;
    for (i, &b) in block.iter().enumerate() {
        m |= u64::from(f(b)) << i;
    }
    m
}

/// The byte classes one byte at a time (the reference, and the masks off x86-64).
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn masks_portable(block: &[u8; 64]) -> Masks {
    Masks {
        quote: bits_portable(block, |b| b == b'"'),
        backslash: bits_portable(block, |b| b == b'\\'),
        control: block.iter().any(|&b| b < 0x20),
    }
}

/// [`spaces`] one byte at a time.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn spaces_portable(block: &[u8; 64]) -> u64 {
    bits_portable(block, |b| b == b' ')
}

/// [`common_escapes`] one byte at a time.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn common_escapes_portable(block: &[u8; 64]) -> u64 {
    bits_portable(block, |b| b == b'n' || b == b't')
}

/// [`escape_classes`] one byte at a time (the reference, and the classes off x86-64).
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn escape_classes_portable(block: &[u8; 64]) -> (u64, u64) {
    (
        bits_portable(block, valid_escape),
        bits_portable(block, |b| b == b'u'),
    )
}

/// Each bit the XOR of itself and all lower bits: set from an opening quote up to (not
/// including) its closing one.
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// The characters escaped by a backslash (simdjson's `find_escaped`): the byte after each
/// odd-length run of backslashes. `prev_escaped` carries an escape over the block boundary.
#[inline(always)]
fn escaped(backslash: u64, prev_escaped: &mut u64) -> u64 {
    let backslash = backslash & !*prev_escaped;
    let follows_escape = (backslash << 1) | *prev_escaped;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *prev_escaped = u64::from(overflow);
    let invert = even_starts << 1;
    (EVEN ^ invert) & follows_escape
}

/// Whether `b` may follow a backslash in a JSON string.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn valid_escape(b: u8) -> bool {
    matches!(
        b,
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' | b'u'
    )
}

/// Indexes `line` into `out`: the positions of its unescaped quotes and of its bytes outside
/// strings other than spaces, in order, in the first entries of `out` (grown as needed; the
/// entries after them are left as they are); their number. `None` when the line holds a
/// control byte, an invalid escape, or ends inside a string.
fn index(line: &[u8], out: &mut Vec<u32>, u_escapes: &mut bool) -> Option<usize> {
    // Positions, and the block base after the last block, fit in the index's entries.
    u32::try_from(line.len() + 64).ok()?;
    let mut n = 0usize;
    let mut prev_escaped = 0u64;
    let mut inside = 0u64;
    let mut base = 0usize;
    let mut blocks = line.chunks_exact(64);
    let mut tail = [b' '; 64];
    let mut last = false;
    loop {
        let block: &[u8; 64] = match blocks.next() {
            Some(b) => b.try_into().expect("64 bytes"),
            None if !last => {
                last = true;
                let rest = blocks.remainder();
                if rest.is_empty() {
                    break;
                }
                tail[..rest.len()].copy_from_slice(rest);
                &tail
            }
            None => break,
        };
        let v = lanes(block);
        let m = masks(&v);
        if m.control {
            return None;
        }
        let esc = escaped(m.backslash, &mut prev_escaped);
        let quote = m.quote & !esc;
        let in_string = prefix_xor(quote) ^ inside;
        inside = ((in_string as i64) >> 63) as u64;
        // Every escaped character inside a string must make a valid escape (outside strings a
        // backslash is itself a syntax error, found by the walk). Tool output has a backslash
        // every few bytes, so the block's escapes are checked at once: an escaped byte is
        // always in the same block as its backslash's run end (the carry moves the escape of a
        // run ending the block to bit 0 of the next), and the tail block's padding is spaces,
        // no valid escape, as for a line ending on a backslash. Most escapes are a newline, a
        // tab or a quote: only a block with another one gets the full classes.
        let e = esc & in_string;
        if e != 0 && e & !(m.quote | m.backslash | common_escapes(&v)) != 0 {
            let (valid, u) = escape_classes(&v, &m);
            if e & !valid != 0 {
                return None;
            }
            let mut u = e & u;
            if u != 0 {
                *u_escapes = true;
            }
            while u != 0 {
                let at = base + u.trailing_zeros() as usize;
                u &= u - 1;
                if !line
                    .get(at + 1..at + 5)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
                {
                    return None;
                }
            }
        }
        // The tail block's padding is spaces outside strings, or inside an unterminated one:
        // never indexed.
        let outside = !in_string & !quote;
        let structure = if outside == 0 {
            quote
        } else {
            quote | (outside & !spaces(&v))
        };
        if structure != 0 {
            n = push_positions(out, n, base as u32, structure);
        }
        base += 64;
    }
    // Ending inside a string, or on a lone backslash, is a truncated line.
    (inside == 0 && prev_escaped == 0).then_some(n)
}

/// Writes the positions of the bits of `bits` (from `base`) at `out[n..]`, eight at a time (the
/// entries past the last are scratch); the new count.
#[inline(always)]
fn push_positions(out: &mut Vec<u32>, n: usize, base: u32, mut bits: u64) -> usize {
    if out.len() < n + 64 {
        out.resize((n + 64).max(2 * out.len()), 0);
    }
    let count = bits.count_ones() as usize;
    let dst: &mut [u32; 64] = (&mut out[n..n + 64]).try_into().expect("64 entries");
    for group in dst.chunks_exact_mut(8).take(count.div_ceil(8)) {
        for slot in group {
            *slot = base + bits.trailing_zeros();
            bits &= bits.wrapping_sub(1);
        }
    }
    n + count
}

/// `line` without the whitespace JSON allows around a value (space, tab, LF, CR). Not
/// `trim_ascii`: that also drops a form feed, which `serde_json` refuses.
fn trim_json_whitespace(line: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = line.iter().position(|b| !ws(b)).unwrap_or(line.len());
    let end = line.iter().rposition(|b| !ws(b)).map_or(start, |e| e + 1);
    &line[start..end]
}

/// The scan's buffers (the index of a line), kept between lines so that a decoder scanning
/// line after line allocates them once.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scratch {
    /// The index of the last line scanned is its first entries.
    idx: Vec<u32>,
}

/// A line the scan vouches for: certainly a JSON object that `serde_json` accepts (see the
/// module documentation), with its index, from which views are read ([`Checked::read`]).
#[derive(Debug)]
pub(crate) struct Checked<'a, 's> {
    /// The line without the whitespace around its object.
    line: &'a [u8],
    idx: &'s [u32],
    kind: Option<&'a str>,
    u_escapes: bool,
    exponent: bool,
}

/// Scans `line` (into `scratch`): `None` when the scan is unsure that it is a JSON object
/// `serde_json` accepts (decide with the full parse then).
pub(crate) fn check<'a, 's>(line: &'a [u8], scratch: &'s mut Scratch) -> Option<Checked<'a, 's>> {
    let line = trim_json_whitespace(line);
    if line.first() != Some(&b'{') {
        return None;
    }
    let mut u_escapes = false;
    let n = index(line, &mut scratch.idx, &mut u_escapes)?;
    let idx = &scratch.idx[..n];
    let mut exponent = false;
    let kind = walk(line, idx, &mut exponent)?;
    Some(Checked {
        line,
        idx,
        kind,
        u_escapes,
        exponent,
    })
}

impl<'a> Checked<'a, '_> {
    /// The line's top-level `type` when it has exactly one and that is a plain (unescaped)
    /// UTF-8 string; `None` otherwise (decide with the full parse then).
    pub(crate) fn object_type(&self) -> Option<&'a str> {
        self.kind
    }

    /// Whether `serde_json` certainly parses the line into a `Value` (not only skips it): on
    /// top of the scan's checks, the whole line is UTF-8, and it holds no `\u` escape (a lone
    /// surrogate fails the value parse) and no number with an exponent or over 300 bytes (one
    /// out of range fails it). A view read from such a line reads what the value parse would:
    /// a decoder may skip the value parse when the view suffices.
    pub(crate) fn parses_as_value(&self) -> bool {
        !self.u_escapes && !self.exponent && std::str::from_utf8(self.line).is_ok()
    }

    /// Reads `T` from the line through its index: what `serde_json::from_slice::<T>` of the
    /// line gives, for views whose map keys are read as strings (derived structs, the
    /// lenient views, `Value`), without scanning the strings and values the view skips (they
    /// are checked already).
    pub(crate) fn read<T: serde::Deserialize<'a>>(&self) -> Result<T, serde_json::Error> {
        read::read(self.line, self.idx)
    }
}

/// The top-level `type` of `line` when the line is certainly a JSON object that `serde_json`
/// accepts and that string is plain (see the module documentation); `None` when unsure.
#[cfg(any(test, fuzzing, feature = "fuzz-bodies"))]
pub(crate) fn object_type(line: &[u8]) -> Option<&str> {
    check(line, &mut Scratch::default())?.object_type()
}

/// Whether `line` is certainly a JSON object that `serde_json` parses into a `Value`
/// ([`Checked::parses_as_value`]); `false` when unsure.
#[cfg(any(test, fuzzing, feature = "fuzz-bodies"))]
pub(crate) fn parses_as_value(line: &[u8]) -> bool {
    check(line, &mut Scratch::default()).is_some_and(|c| c.parses_as_value())
}

/// The walk: checks the structure from the index; `None` when the line is not certainly
/// valid, else `Some` of the top-level `type` (itself `None` when there is not exactly one
/// plain string `type`). `exponent` is set when a number has one, or is too long to vouch for.
///
/// Laid out as the grammar (a value; then, until the top-level object closes, a comma and the
/// next member or element, or a close), so that the branches follow the line's shape: after a
/// key comes its colon, after a value mostly a comma.
fn walk<'a>(line: &'a [u8], idx: &[u32], exponent: &mut bool) -> Option<Option<&'a str>> {
    let byte = |k: usize| idx.get(k).map(|&at| line[at as usize]);
    // Bit d of `objects`: whether the container at depth d + 1 is an object.
    let mut objects = 0u64;
    let mut depth = 0u32;
    let mut types = 0u32;
    let mut kind: Option<&'a str> = None;
    let mut type_value_next = false;
    let mut k = 0usize;
    // Reads the key at `k` and its colon (in an object at `depth`); `false` when it is not one.
    let mut key = |k: &mut usize, depth: u32, type_value_next: &mut bool| -> bool {
        if byte(*k) != Some(b'"') {
            return false;
        }
        let (Some(&open), Some(&end)) = (idx.get(*k), idx.get(*k + 1)) else {
            return false;
        };
        if depth == 1 {
            // serde decodes the keys it reads (escapes, UTF-8): only plain ones here.
            let key = &line[open as usize + 1..end as usize];
            if has_backslash(key) || (!key.is_ascii() && std::str::from_utf8(key).is_err()) {
                return false;
            }
            if key == b"type" {
                types += 1;
                *type_value_next = true;
            }
        }
        *k += 3;
        byte(*k - 1) == Some(b':')
    };
    // Only an object may be the top level.
    if byte(0) != Some(b'{') {
        return None;
    }
    'value: loop {
        // A value starts at `k`.
        let at = *idx.get(k)? as usize;
        let b = line[at];
        let is_type_value = std::mem::take(&mut type_value_next);
        match b {
            b'{' | b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                depth += 1;
                k += 1;
                if b == b'{' {
                    objects |= 1 << (depth - 1);
                    if byte(k) == Some(b'}') {
                        k += 1;
                        depth -= 1;
                    } else {
                        if !key(&mut k, depth, &mut type_value_next) {
                            return None;
                        }
                        continue 'value;
                    }
                } else {
                    objects &= !(1 << (depth - 1));
                    if byte(k) == Some(b']') {
                        k += 1;
                        depth -= 1;
                    } else {
                        continue 'value;
                    }
                }
            }
            b'"' => {
                let end = *idx.get(k + 1)? as usize;
                k += 2;
                if is_type_value {
                    let s = &line[at + 1..end];
                    kind = if has_backslash(s) {
                        None
                    } else {
                        std::str::from_utf8(s).ok()
                    };
                }
            }
            b't' | b'f' | b'n' => {
                let word = literal(b);
                if !line[at..].starts_with(word) {
                    return None;
                }
                // Each letter is indexed (outside strings, not a space).
                k += word.len();
            }
            b'-' | b'0'..=b'9' => {
                let end = number_end(line, at)?;
                // An exponent, or more digits than an f64 spans (1.8e308), may be out of the
                // value parse's range.
                *exponent |= end - at > MAX_PLAIN_NUMBER_BYTES
                    || line[at..end].iter().any(|&c| c == b'e' || c == b'E');
                k += end - at;
            }
            _ => return None,
        }
        if is_type_value && b != b'"' {
            kind = None;
        }
        // After a value: a comma and the next member or element, or the container's close.
        loop {
            if depth == 0 {
                // The top-level object closed: nothing may follow.
                if k != idx.len() {
                    return None;
                }
                return Some(if types == 1 { kind } else { None });
            }
            let in_object = objects & (1 << (depth - 1)) != 0;
            let b = byte(k)?;
            k += 1;
            match b {
                b',' => {
                    if in_object && !key(&mut k, depth, &mut type_value_next) {
                        return None;
                    }
                    continue 'value;
                }
                b'}' if in_object => depth -= 1,
                b']' if !in_object => depth -= 1,
                _ => return None,
            }
        }
    }
}

/// Whether `bytes` holds a backslash (a short string is looked at byte by byte: cheaper than
/// a call).
#[inline]
fn has_backslash(bytes: &[u8]) -> bool {
    if bytes.len() <= 32 {
        bytes.contains(&b'\\')
    } else {
        memchr::memchr(b'\\', bytes).is_some()
    }
}

/// The literal starting with `b` (`t`, `f` or `n`).
fn literal(b: u8) -> &'static [u8] {
    match b {
        b't' => b"true",
        b'f' => b"false",
        _ => b"null",
    }
}

/// The longest number `parses_as_value` vouches for without an exponent: one more digit may
/// reach past the largest f64, which the value parse refuses as out of range.
const MAX_PLAIN_NUMBER_BYTES: usize = 300;

/// The end of the JSON number starting at `at` (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`),
/// or `None` when it breaks that grammar. What follows it is checked by the walk.
fn number_end(line: &[u8], mut at: usize) -> Option<usize> {
    let digits = |from: usize| {
        from + line[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    if line[at] == b'-' {
        at += 1;
    }
    match line.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => at = digits(at),
        _ => return None,
    }
    if line.get(at) == Some(&b'.') {
        let end = digits(at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(line.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(line.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits(at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

mod read;

#[cfg(test)]
mod tests;
