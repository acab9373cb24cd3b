use proptest::prelude::*;

use super::*;
use crate::harness::json::{Peek, peek_str};

/// Recorded real-CLI streams of the Claude-shaped dialects (and the others, for variety).
const RECORDED: &[&str] = &[
    include_str!("../../../../tests/fixtures/harness/claude/ccagent-claude_response1.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/morpheus-claude_stream.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-tool-turn.jsonl"),
    include_str!("../../../../tests/fixtures/harness/claude/claude-code-2.1.332-failure.jsonl"),
    include_str!("../../../../tests/fixtures/harness/qwen/qwen-code-0.24.4-tool-turn.jsonl"),
    include_str!("../../../../tests/fixtures/harness/qwen/qwen-code-0.24.4-rate-limited.jsonl"),
];

fn recorded_lines() -> Vec<&'static str> {
    RECORDED
        .iter()
        .flat_map(|s| s.lines())
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// The scan's promise: where it answers, the full check agrees.
fn agrees(line: &[u8]) {
    if parses_as_value(line) {
        assert!(
            serde_json::from_slice::<serde_json::Value>(line.trim_ascii()).is_ok(),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
    if let Some(kind) = object_type(line) {
        match peek_str(line, "type") {
            Peek::Str(k) => assert_eq!(k, kind, "line {:?}", String::from_utf8_lossy(line)),
            Peek::Unknown => panic!(
                "scan accepted a line serde refuses: {:?}",
                String::from_utf8_lossy(line)
            ),
        }
        // A line the scan accepts is valid JSON for a full parse too.
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(line.trim_ascii()).is_ok(),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
    reads_agree(line);
}

/// Reading through the index gives what `serde_json` reads from the line: a value (every
/// string, key and number visited), a skipped one, and a view with optional and nested
/// fields.
fn reads_agree(line: &[u8]) {
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Probe {
        #[serde(rename = "type")]
        kind: Option<String>,
        a: Option<serde_json::Value>,
        message: Option<Inner>,
    }
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Inner {
        #[serde(default)]
        content: Vec<serde_json::Value>,
        model: Option<String>,
    }
    let mut scratch = Scratch::default();
    let Some(checked) = check(line, &mut scratch) else {
        return;
    };
    let text = String::from_utf8_lossy(line);
    let slow = serde_json::from_slice::<serde_json::Value>(line.trim_ascii());
    let fast = checked.read::<serde_json::Value>();
    assert_eq!(fast.as_ref().ok(), slow.as_ref().ok(), "{text:?}");
    assert!(checked.read::<serde::de::IgnoredAny>().is_ok(), "{text:?}");
    let slow = serde_json::from_slice::<Probe>(line.trim_ascii());
    let fast = checked.read::<Probe>();
    assert_eq!(fast.as_ref().ok(), slow.as_ref().ok(), "{text:?}");
}

#[test]
fn reads_through_the_index_agree_on_every_kind_of_value() {
    for line in [
        r#"{"type":"user","a":[1,-0.5e+3,true,false,null,{"b":"\\\"\u00e9\/"}],"c":{}}"#,
        r#"{"type":"x","a":{"k\u00e9y":"v","k2":[[],{}],"n":18446744073709551616}}"#,
        r#"{"type":"x","a":"\ud800"}"#,
        r#"{"type":"x","a":"\ud83d\ude00 ok"}"#,
        r#"{"type":"x","message":{"content":[1,"two",{"three":3}],"model":"m"}}"#,
        r#"{"type":"x","message":{"content":"not an array"}}"#,
        r#"{"type":"x","message":{"model":null,"model":"twice"}}"#,
        r#"{"type":"x","message":[1,2]}"#,
        r#"{"type":"x","message":["c",null]}"#,
        r#"{"type":"x","a":1e400}"#,
        r#"{"type":"x","a":-0,"b":1.5,"c":-12345678901234567890}"#,
        r#"{"type":null,"a":"x"}"#,
        r#"{"type":["x"],"a":"x"}"#,
        r#"{"a":{"type":"nested"}}"#,
    ] {
        assert!(
            check(line.as_bytes(), &mut Scratch::default()).is_some(),
            "{line}"
        );
        reads_agree(line.as_bytes());
    }
    // Invalid UTF-8 in a string the view reads fails as in serde_json; in one it skips, not.
    for line in [
        &b"{\"type\":\"x\",\"a\":\"\xff\"}"[..],
        b"{\"type\":\"x\",\"message\":{\"other\":\"\xff\"}}",
        b"{\"type\":\"x\",\"message\":{\"\xff\":1}}",
    ] {
        assert!(check(line, &mut Scratch::default()).is_some());
        reads_agree(line);
    }
}

#[test]
fn recorded_lines_are_answered_and_agree() {
    let lines = recorded_lines();
    assert!(lines.len() > 100);
    for line in &lines {
        agrees(line.as_bytes());
        // Every recorded line is a plain event: the fast path answers for all of them.
        let expected = match peek_str(line.as_bytes(), "type") {
            Peek::Str(k) => k.into_owned(),
            Peek::Unknown => panic!("{line}"),
        };
        assert_eq!(
            object_type(line.as_bytes()),
            Some(expected.as_str()),
            "{line}"
        );
    }
}

#[test]
fn unusual_lines_are_left_to_the_full_parse() {
    for line in [
        r#"{"type":"user","type":"user"}"#,
        r#"{"typ\u0065":"user"}"#,
        r#"{"type":"us\u0065r"}"#,
        r#"{"type":1}"#,
        r#"{"type":"user"}x"#,
        r#"{"type":"user"} {}"#,
        r#"{"type":"user","a":01}"#,
        r#"{"type":"user","a":1.}"#,
        r#"{"type":"user","a":1e}"#,
        r#"{"type":"user","a":-}"#,
        r#"{"type":"user","a":tru}"#,
        r#"{"type":"user","a":"\x"}"#,
        r#"{"type":"user","a":"\u12g4"}"#,
        "{\"type\":\"user\",\"a\":\"\t\"}",
        "{\"type\":\"user\",\t\"a\":1}",
        r#"{"type":"user","a":"}"#,
        r#"{"type":"user","a":"\"}"#,
        r#"{"type":"user","a":[1,]}"#,
        r#"{"type":"user","a":{"b"}}"#,
        r#"{"type":"user","a":{"b":1,}}"#,
        r#"{"type":"user",}"#,
        r#"{"type":"user""#,
        r#"{"type":"user"]"#,
        r#"{"type":"user","a":[}"#,
        r#"{"type":"user",\"a":1}"#,
        r#"["type","user"]"#,
        r#"{}"#,
        "",
    ] {
        assert_eq!(object_type(line.as_bytes()), None, "{line}");
        agrees(line.as_bytes());
    }
    let deep = format!(
        r#"{{"type":"user","a":{}{}}}"#,
        "[".repeat(MAX_DEPTH as usize),
        "]".repeat(MAX_DEPTH as usize)
    );
    assert_eq!(object_type(deep.as_bytes()), None);
    // Non-UTF-8 in a top-level key or the type is refused; inside other strings serde's
    // skipping does not check it, and neither does the scan.
    assert_eq!(object_type(b"{\"type\":\"us\xffer\"}"), None);
    assert_eq!(object_type(b"{\"t\xffpe\":\"user\"}"), None);
    assert_eq!(
        object_type(b"{\"type\":\"user\",\"a\":\"\xff\"}"),
        Some("user")
    );
    agrees(b"{\"type\":\"user\",\"a\":\"\xff\"}");
    for line in [
        r#"{"type":"user","a":[1,-0.5e+3,true,false,null,{"b":"\\\"\u00e9\/"}],"c":{}}"#,
        r#"  { "type" : "user" , "a" : [ ] }  "#,
        r#"{"a":{"type":"x"},"type":"user"}"#,
    ] {
        assert_eq!(object_type(line.as_bytes()), Some("user"), "{line}");
        agrees(line.as_bytes());
    }
}

#[test]
fn block_boundaries_do_not_matter() {
    // Escapes, strings and numbers straddling the 64-byte blocks at every offset.
    for pad in 0..140 {
        let p = "x".repeat(pad);
        for body in [
            format!(r#"{{"a":"{p}\\","type":"user"}}"#),
            format!(r#"{{"a":"{p}\\\"","type":"user"}}"#),
            format!(r#"{{"a":"{p}\u00e9\\\\\\\\","type":"user"}}"#),
            format!(r#"{{"a":"{p}","b":123456789,"type":"user"}}"#),
            format!(r#"{{"a":"{p}\"","type":"user"}}"#),
            format!(r#"{{"a":"{p}\\\\\"","type":"user"}}"#),
        ] {
            assert_eq!(object_type(body.as_bytes()), Some("user"), "{body}");
            agrees(body.as_bytes());
        }
        let open = format!(r#"{{"type":"user","a":"{p}\"}}"#);
        assert_eq!(object_type(open.as_bytes()), None, "{open}");
    }
}

/// The escaped characters one byte at a time.
fn escaped_naive(bytes: &[u8]) -> Vec<bool> {
    let mut out = vec![false; bytes.len()];
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            if i + 1 < bytes.len() {
                out[i + 1] = true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

/// The index with each escape checked one at a time (the scan before the block-wide check):
/// the reference for [`index`].
fn index_one_escape_at_a_time(line: &[u8], out: &mut Vec<u32>, u_escapes: &mut bool) -> bool {
    let mut prev_escaped = 0u64;
    let mut inside = 0u64;
    let mut base = 0usize;
    for chunk in line.chunks(64) {
        let mut block = [b' '; 64];
        block[..chunk.len()].copy_from_slice(chunk);
        let m = masks_portable(&block);
        if m.control {
            return false;
        }
        let esc = escaped(m.backslash, &mut prev_escaped);
        let quote = m.quote & !esc;
        let in_string = prefix_xor(quote) ^ inside;
        inside = ((in_string as i64) >> 63) as u64;
        let mut e = esc & in_string;
        while e != 0 {
            let at = base + e.trailing_zeros() as usize;
            e &= e - 1;
            let Some(&c) = line.get(at) else {
                return false;
            };
            if !valid_escape(c) {
                return false;
            }
            if c == b'u' {
                *u_escapes = true;
                if !line
                    .get(at + 1..at + 5)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
                {
                    return false;
                }
            }
        }
        let mut structure = quote | (!in_string & !quote & !spaces_portable(&block));
        while structure != 0 {
            let at = base + structure.trailing_zeros() as usize;
            structure &= structure - 1;
            if at < line.len() {
                out.push(at as u32);
            }
        }
        base += 64;
    }
    inside == 0 && prev_escaped == 0
}

/// Both indexes of `line`: (accepted, index, `\u` seen), the latter two only when accepted.
fn both_indexes(line: &[u8]) -> [(bool, Vec<u32>, bool); 2] {
    // A used buffer: entries past the index are left as they were.
    let (mut a, mut ua) = (vec![7; 300], false);
    let n = index(line, &mut a, &mut ua);
    let (mut b, mut ub) = (Vec::new(), false);
    let ok_b = index_one_escape_at_a_time(line, &mut b, &mut ub);
    let fast = match n {
        Some(n) => (true, a[..n].to_vec(), ua),
        None => (false, Vec::new(), false),
    };
    let slow = if ok_b {
        (true, b, ub)
    } else {
        (false, Vec::new(), false)
    };
    [fast, slow]
}

#[test]
fn recorded_lines_index_as_one_escape_at_a_time() {
    for line in recorded_lines() {
        let [fast, slow] = both_indexes(line.as_bytes());
        assert!(fast.0, "{line}");
        assert_eq!(fast, slow, "{line}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The vector masks and classes are the byte-at-a-time ones.
    #[test]
    fn vector_classes_match_the_portable_loops(
        block in proptest::array::uniform32(prop_oneof![
            3 => any::<u8>(),
            1 => prop::sample::select(&b"\"\\/bfnrtuvae \x1f\x20\x7f\x80"[..]),
        ]),
        block2 in proptest::array::uniform32(any::<u8>()),
    ) {
        let mut b = [0u8; 64];
        b[..32].copy_from_slice(&block);
        b[32..].copy_from_slice(&block2);
        let v = lanes(&b);
        prop_assert_eq!(masks(&v), masks_portable(&b));
        prop_assert_eq!(spaces(&v), spaces_portable(&b));
        prop_assert_eq!(common_escapes(&v), common_escapes_portable(&b));
        prop_assert_eq!(escape_classes(&v, &masks(&v)), escape_classes_portable(&b));
    }

    /// The escape arithmetic, carried over blocks, is the byte-at-a-time rule.
    #[test]
    fn escapes_match_the_naive_rule(bytes in proptest::collection::vec(prop_oneof![Just(b'\\'), Just(b'a'), Just(b'"')], 0..300)) {
        let expected = escaped_naive(&bytes);
        let mut prev = 0u64;
        for (n, chunk) in bytes.chunks(64).enumerate() {
            let mut block = [b'a'; 64];
            block[..chunk.len()].copy_from_slice(chunk);
            let esc = escaped(masks_portable(&block).backslash, &mut prev);
            for i in 0..chunk.len() {
                prop_assert_eq!(esc >> i & 1 == 1, expected[n * 64 + i], "at {}", n * 64 + i);
            }
        }
    }

    /// Recorded lines, cut and with bytes changed, inserted or removed: wherever the scan
    /// answers, serde agrees.
    #[test]
    fn mutated_recorded_lines_agree(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..4, prop_oneof![
            Just(b'"'), Just(b'\\'), Just(b'{'), Just(b'}'), Just(b'['), Just(b']'), Just(b','),
            Just(b':'), Just(b' '), Just(b'0'), Just(b'-'), Just(b'e'), Just(b'.'), Just(b'u'),
            Just(b't'), Just(b'n'), Just(0x01u8), Just(0xffu8), Just(b'\t'), any::<u8>(),
        ]), 0..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let lines = recorded_lines();
        let mut line = lines[which.index(lines.len())].as_bytes().to_vec();
        for (at, op, byte) in edits {
            if line.is_empty() { break; }
            let i = at.index(line.len());
            match op {
                0 => line[i] = byte,
                1 => line.insert(i, byte),
                2 => { line.remove(i); }
                _ => line.insert(i, b'\\'),
            }
        }
        if let Some(c) = cut {
            let n = c.index(line.len() + 1);
            line.truncate(n);
        }
        agrees(&line);
    }
}

proptest! {
    // Each case indexes five lines twice; fewer cases keep the debug test run short.
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Strings dense with escapes, valid and not, across block boundaries: the block-wide
    /// escape check decides as the one-at-a-time one did.
    #[test]
    fn escape_dense_strings_index_as_one_escape_at_a_time(
        body in proptest::collection::vec(prop_oneof![
            4 => Just(b'\\'), 1 => Just(b'"'), 1 => Just(b'u'), 1 => Just(b'n'), 1 => Just(b't'),
            1 => Just(b'/'), 1 => Just(b'x'), 1 => Just(b'0'), 1 => Just(b'a'), 1 => Just(b'F'),
            1 => Just(b'g'), 1 => Just(b' '), 1 => any::<u8>(),
        ], 0..300),
        pad in 0usize..64,
    ) {
        let mut line = format!(r#"{{"type":"user","{}":""#, "p".repeat(pad)).into_bytes();
        line.extend_from_slice(&body);
        line.extend_from_slice(b"\"}");
        let [fast, slow] = both_indexes(&line);
        prop_assert_eq!(fast, slow, "{:?}", String::from_utf8_lossy(&line));
        // Cut anywhere too (ending inside a string or on a backslash).
        for n in [line.len() / 2, line.len() - 2, line.len() - 1] {
            let [fast, slow] = both_indexes(&line[..n]);
            prop_assert_eq!(fast, slow, "{:?}", String::from_utf8_lossy(&line[..n]));
        }
    }
}

#[test]
fn a_number_too_long_for_an_f64_is_left_to_the_full_parse() {
    let long = format!(r#"{{"type":"w","x":{}}}"#, "4".repeat(400));
    assert!(serde_json::from_str::<serde_json::Value>(&long).is_err());
    assert!(!parses_as_value(long.as_bytes()));
    // A number that fits is still vouched for.
    let short = format!(r#"{{"type":"w","x":{}}}"#, "4".repeat(300));
    assert!(serde_json::from_str::<serde_json::Value>(&short).is_ok());
    assert!(parses_as_value(short.as_bytes()));
}

/// JSON values of every kind, with strings full of what the scan must skip and escape.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[\"\\\\\\[\\]{},:a é\u{1}\u{1f600}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            proptest::collection::vec(
                ("[\"\\\\a-c é]{0,3}|type|message|model|content", inner),
                0..6
            )
            .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Generated objects, compact and pretty-printed, with a repeated key spliced in: the
    /// read through the index is `serde_json`'s.
    #[test]
    fn generated_objects_read_as_serde_json_reads_them(
        members in proptest::collection::vec(("[a-c]{0,2}|type|message|a", json_value()), 0..5),
        dup in proptest::option::of("type|message|a|b"),
    ) {
        let v = serde_json::Value::Object(members.into_iter().collect());
        for text in [serde_json::to_string(&v).unwrap(), serde_json::to_string_pretty(&v).unwrap()] {
            let mut text = text.replace('\n', " ");
            if let Some(k) = &dup {
                text.insert_str(1, &format!(r#""{k}":{{"model":"x"}},"#));
            }
            reads_agree(text.as_bytes());
        }
    }
}

/// The walk's expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (also the start).
    Value,
    /// A value or `]` (after `[`).
    ValueOrClose,
    /// A key or `}` (after `{`).
    KeyOrClose,
    /// A key (after `,` in an object).
    Key,
    Colon,
    /// `,` or the container's close.
    CommaOrClose,
    /// Nothing more (the top-level object closed).
    End,
}

/// Leaves the current container.
fn close(depth: &mut u32, expect: &mut Expect) {
    *depth -= 1;
    *expect = if *depth == 0 {
        Expect::End
    } else {
        Expect::CommaOrClose
    };
}

/// The walk as a state machine (the walk before it followed the grammar): the reference for
/// [`walk`]. It checks the structure from the index; `None` when the line is not certainly
/// valid, else `Some` of the top-level `type` (itself `None` when there is not exactly one
/// plain string `type`). `exponent` is set when a number has one, or is too long to vouch for.
fn walk_state_machine<'a>(
    line: &'a [u8],
    idx: &[u32],
    exponent: &mut bool,
) -> Option<Option<&'a str>> {
    // Bit d of `objects`: whether the container at depth d + 1 is an object.
    let mut objects = 0u64;
    let mut depth = 0u32;
    let mut expect = Expect::Value;
    let mut types = 0u32;
    let mut kind: Option<&'a str> = None;
    let mut type_value_next = false;
    let mut k = 0usize;
    while k < idx.len() {
        let at = idx[k] as usize;
        let b = line[at];
        k += 1;
        match expect {
            Expect::Value | Expect::ValueOrClose => {
                let is_type_value = std::mem::take(&mut type_value_next);
                match b {
                    b']' if expect == Expect::ValueOrClose => {
                        close(&mut depth, &mut expect);
                        continue;
                    }
                    b'{' | b'[' => {
                        if depth >= MAX_DEPTH || (depth == 0 && b != b'{') {
                            return None;
                        }
                        if b == b'{' {
                            objects |= 1 << depth;
                            expect = Expect::KeyOrClose;
                        } else {
                            objects &= !(1 << depth);
                            expect = Expect::ValueOrClose;
                        }
                        depth += 1;
                        continue;
                    }
                    // Only an object may be the top level.
                    _ if depth == 0 => return None,
                    b'"' => {
                        let end = *idx.get(k)? as usize;
                        k += 1;
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
                        k += word.len() - 1;
                    }
                    b'-' | b'0'..=b'9' => {
                        let end = number_end(line, at)?;
                        // An exponent, or more digits than an f64 spans (1.8e308), may be out
                        // of the value parse's range.
                        *exponent |= end - at > MAX_PLAIN_NUMBER_BYTES
                            || line[at..end].iter().any(|&c| c == b'e' || c == b'E');
                        k += end - at - 1;
                    }
                    _ => return None,
                }
                if is_type_value && b != b'"' {
                    kind = None;
                }
                expect = Expect::CommaOrClose;
            }
            Expect::KeyOrClose | Expect::Key => match b {
                b'}' if expect == Expect::KeyOrClose => close(&mut depth, &mut expect),
                b'"' => {
                    let end = *idx.get(k)? as usize;
                    k += 1;
                    if depth == 1 {
                        // serde decodes the keys it reads (escapes, UTF-8): only plain ones
                        // here.
                        let key = &line[at + 1..end];
                        if has_backslash(key)
                            || (!key.is_ascii() && std::str::from_utf8(key).is_err())
                        {
                            return None;
                        }
                        if key == b"type" {
                            types += 1;
                            type_value_next = true;
                        }
                    }
                    expect = Expect::Colon;
                }
                _ => return None,
            },
            Expect::Colon => {
                if b != b':' {
                    return None;
                }
                expect = Expect::Value;
            }
            Expect::CommaOrClose => {
                let in_object = objects & (1 << (depth - 1)) != 0;
                match b {
                    b',' => {
                        expect = if in_object {
                            Expect::Key
                        } else {
                            Expect::Value
                        };
                    }
                    b'}' if in_object => close(&mut depth, &mut expect),
                    b']' if !in_object => close(&mut depth, &mut expect),
                    _ => return None,
                }
            }
            Expect::End => return None,
        }
    }
    if expect != Expect::End {
        return None;
    }
    Some(if types == 1 { kind } else { None })
}

/// A walk of a line's index: the top-level `type` it finds, if it vouches for the line.
type Walk = for<'a> fn(&'a [u8], &[u32], &mut bool) -> Option<Option<&'a str>>;

/// Both walks of `line` (when the index accepts it).
fn both_walks(line: &[u8]) -> Option<[(Option<Option<String>>, bool); 2]> {
    let line = trim_json_whitespace(line);
    let mut idx = Vec::new();
    let n = index(line, &mut idx, &mut false)?;
    let idx = &idx[..n];
    let run = |f: Walk| {
        let mut exponent = false;
        let r = f(line, idx, &mut exponent).map(|k| k.map(str::to_owned));
        let exponent = r.is_some() && exponent;
        (r, exponent)
    };
    Some([run(walk), run(walk_state_machine)])
}

#[test]
fn recorded_lines_walk_as_the_state_machine_did() {
    for line in recorded_lines() {
        let [new, old] = both_walks(line.as_bytes()).expect(line);
        assert!(new.0.is_some(), "{line}");
        assert_eq!(new, old, "{line}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Recorded lines and structure-dense ones, with structure bytes changed, inserted or
    /// removed: the walk decides as the state machine did.
    #[test]
    fn mutated_lines_walk_as_the_state_machine_did(
        which in any::<prop::sample::Index>(),
        dense in "[\\[\\]{}:,\"a1tn -]{0,40}",
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop_oneof![
            Just(b'"'), Just(b'{'), Just(b'}'), Just(b'['), Just(b']'), Just(b','), Just(b':'),
            Just(b'0'), Just(b'-'), Just(b'e'), Just(b'.'), Just(b't'), Just(b'n'), Just(b'f'),
            Just(b' '), Just(b'x'),
        ]), 0..4),
    ) {
        let lines = recorded_lines();
        let mut line = lines[which.index(lines.len())].as_bytes().to_vec();
        if which.index(3) == 0 {
            line = format!(r#"{{"type":"x","a":{dense}}}"#).into_bytes();
        }
        for (at, op, byte) in edits {
            if line.is_empty() { break; }
            let i = at.index(line.len());
            match op {
                0 => line[i] = byte,
                1 => line.insert(i, byte),
                _ => { line.remove(i); }
            }
        }
        if let Some([new, old]) = both_walks(&line) {
            prop_assert_eq!(new, old, "{}", String::from_utf8_lossy(&line));
        }
    }
}
