//! The one JSON byte cursor under gpufeed's two fast readers: the recording's line parser
//! (gpufeed's `record::fast`) and the Kineto trace's event parser and stream scanner
//! (`gpufeed-kineto`). It reads bytes in place (strings are borrowed, numbers parsed without
//! allocating) and says `None` whenever it is not sure, so that its callers can fall back to
//! serde_json: **a `Some` from a value reader is always what serde_json would read**. Numbers
//! follow serde_json's grammar and its `float_roundtrip` results bit for bit; strings with escapes
//! are refused (not decoded). Skipping is different: [`Cursor::skip`] and [`value_len`] find where
//! a value ends and do not validate what is inside an object, an array or a string, so on broken
//! JSON they may say yes where serde_json says no (their callers use them to step over values,
//! never to read them).
//!
//! A crate of its own beneath every layer: it depends on nothing of gpufeed (memchr only).
//! [`fields`] builds the recording's readers on it: a struct's fields declared once, for serde and
//! for the fast reader alike.

pub mod fields;

/// Exact powers of ten as f64 (10^0 ..= 10^22 are exactly representable).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A JSON number as serde_json classifies it (what a `deserialize_any` visitor is given).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A non-negative integer that fits a u64.
    U64(u64),
    /// A negative integer that fits an i64.
    I64(i64),
    /// Anything else: a fraction, an exponent, `-0`, or an integer too large for the above.
    F64(f64),
}

/// What [`Cursor::lex`] found: a number that follows JSON's grammar, not yet converted.
struct Lexed {
    end: usize,
    neg: bool,
    /// The digits (integer and fraction) as one integer, wrapped on overflow: only meaningful
    /// when `digits <= 19`.
    mant: u64,
    /// Count of digits, integer part and fraction together.
    digits: usize,
    /// Count of fraction digits (0: no `.`).
    frac: usize,
    exp: bool,
}

/// A position in a byte slice holding JSON.
pub struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub fn new(b: &'a [u8]) -> Self {
        Cursor { b, i: 0 }
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn pos(&self) -> usize {
        self.i
    }

    /// Skips JSON whitespace.
    #[inline]
    pub fn ws(&mut self) {
        while let Some(c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    /// The byte at the cursor (no whitespace skipped); None at the end.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skips whitespace, then the byte there; None at the end.
    #[inline]
    pub fn peek_ws(&mut self) -> Option<u8> {
        self.ws();
        self.peek()
    }

    /// Skips whitespace, then consumes `c` if it is there.
    #[inline]
    pub fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek_ws()? == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// Consumes `lit` (`null`, `true`, ...) if the bytes at the cursor are exactly it.
    #[inline]
    pub fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// Consumes exactly the bytes `lit` (no whitespace skipped) and says true if the cursor is at
    /// them. The length is a constant, so the comparison compiles to a few loads instead of a call
    /// to `memcmp`: the readers of known line layouts (gpufeed's `record`) use it to step over
    /// `,"key":` in one go.
    #[inline(always)]
    pub fn lit<const N: usize>(&mut self, lit: &[u8; N]) -> bool {
        let at = self
            .b
            .get(self.i..self.i + N)
            .and_then(|s| <&[u8; N]>::try_from(s).ok());
        if at == Some(lit) {
            self.i += N;
            true
        } else {
            false
        }
    }

    /// Skips whitespace, then consumes `null` and says true if it is there.
    #[inline]
    pub fn null(&mut self) -> bool {
        self.ws();
        self.literal(b"null").is_some()
    }

    /// Skips whitespace, then a string without escapes: its bytes, borrowed. None on an escape
    /// (the caller falls back to a real decoder) or when the string does not end.
    #[inline]
    pub fn plain_str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        // Keys and short values: a plain loop beats memchr's set-up cost; long ones (kernel
        // names) go on with memchr.
        let mut k = 0;
        let end = loop {
            if k == 16 {
                break k + memchr::memchr2(b'"', b'\\', &rest[k..])?;
            }
            match *rest.get(k)? {
                b'"' | b'\\' => break k,
                _ => k += 1,
            }
        };
        if rest[end] == b'\\' {
            return None;
        }
        self.i += end + 1;
        Some(&rest[..end])
    }

    /// Is the cursor (no whitespace skipped) at the key `"k"` followed by more input?
    #[inline]
    pub fn at_key(&self, k: &[u8]) -> bool {
        let b = &self.b[self.i..];
        b.len() > k.len() + 1 && b[0] == b'"' && &b[1..=k.len()] == k && b[k.len() + 1] == b'"'
    }

    /// Reads a number's text at the cursor (after whitespace) by JSON's grammar: `-`? then `0`
    /// or digits not starting with 0, then an optional fraction and exponent, each with at least
    /// one digit. Does not move the cursor past the number (the callers do).
    #[inline(always)]
    fn lex(&mut self) -> Option<Lexed> {
        self.ws();
        let b = self.b;
        let mut i = self.i;
        let neg = b.get(i) == Some(&b'-');
        if neg {
            i += 1;
        }
        let int_start = i;
        let mut mant: u64 = 0;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            mant = mant.wrapping_mul(10).wrapping_add((d - b'0') as u64);
            i += 1;
        }
        let int_digits = i - int_start;
        if int_digits == 0 || (int_digits > 1 && b[int_start] == b'0') {
            return None;
        }
        let mut frac = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let frac_start = i;
            while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
                mant = mant.wrapping_mul(10).wrapping_add((d - b'0') as u64);
                i += 1;
            }
            frac = i - frac_start;
            if frac == 0 {
                return None;
            }
        }
        let exp = matches!(b.get(i), Some(b'e' | b'E'));
        if exp {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let exp_start = i;
            while b.get(i).is_some_and(|d| d.is_ascii_digit()) {
                i += 1;
            }
            if i == exp_start {
                return None;
            }
        }
        Some(Lexed {
            end: i,
            neg,
            mant,
            digits: int_digits + frac,
            frac,
            exp,
        })
    }

    /// The exact general conversion (std's parse rounds correctly, as serde_json does with
    /// `float_roundtrip`); None for what serde_json refuses as out of range.
    #[inline(never)]
    fn parse_f64(&self, end: usize) -> Option<f64> {
        let s = std::str::from_utf8(&self.b[self.i..end]).ok()?;
        s.parse::<f64>().ok().filter(|v| v.is_finite())
    }

    /// A number as an f64, exactly as serde_json reads it into an `f64`.
    #[inline]
    pub fn f64(&mut self) -> Option<f64> {
        let l = self.lex()?;
        let v = if l.exp || l.digits > 15 {
            // Rare: hand it to the exact general parser.
            self.parse_f64(l.end)?
        } else {
            // mant < 10^15 < 2^53 and 10^frac exact: one correctly rounded division.
            let v = l.mant as f64 / POW10[l.frac];
            if l.neg {
                -v
            } else {
                v
            }
        };
        self.i = l.end;
        Some(v)
    }

    /// A non-negative integer that fits a u64 (counters, pids), as serde_json reads it into a
    /// `u64`; None for anything else (a sign, a fraction, an exponent, overflow).
    #[inline]
    pub fn u64(&mut self) -> Option<u64> {
        let l = self.lex()?;
        if l.neg || l.frac > 0 || l.exp {
            return None;
        }
        let v = if l.digits > 19 {
            // Up to 19 digits cannot overflow; longer ones are redone with checks.
            checked_digits(&self.b[self.i..l.end])?
        } else {
            l.mant
        };
        self.i = l.end;
        Some(v)
    }

    /// A number, classified as serde_json does.
    #[inline]
    pub fn number(&mut self) -> Option<Number> {
        let l = self.lex()?;
        let n = if l.frac == 0 && !l.exp {
            let digits = &self.b[self.i + l.neg as usize..l.end];
            let sig = if l.digits > 19 {
                checked_digits(digits)
            } else {
                Some(l.mant)
            };
            match sig {
                Some(v) if !l.neg => Number::U64(v),
                // serde_json: -0 and negatives beyond i64 are floats
                Some(0) => Number::F64(-0.0),
                Some(v) if v <= 1 << 63 => Number::I64((v as i64).wrapping_neg()),
                Some(v) => Number::F64(-(v as f64)),
                None => Number::F64(self.parse_f64(l.end)?),
            }
        } else if !l.exp && l.digits <= 15 {
            let v = l.mant as f64 / POW10[l.frac];
            Number::F64(if l.neg { -v } else { v })
        } else {
            Number::F64(self.parse_f64(l.end)?)
        };
        self.i = l.end;
        Some(n)
    }

    /// Skips whitespace, then any value: strings, objects and arrays by [`value_len`] (not
    /// validated inside), literals and numbers checked. None when it does not end in the input.
    #[inline]
    pub fn skip(&mut self) -> Option<()> {
        match self.peek_ws()? {
            b'"' | b'{' | b'[' => {
                self.i += value_len(&self.b[self.i..], false)?;
                Some(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => {
                let l = self.lex()?;
                self.i = l.end;
                Some(())
            }
        }
    }

    /// Walks an object's members with the keys known in advance: `f` gets the key's position
    /// in `keys` (`keys.len()` for an unknown key) and reads the value (returning true) or
    /// leaves it to be skipped (returning false). Writers emit keys in a fixed order, so the next
    /// expected key is tried first with one comparison.
    #[inline]
    pub fn keyed(
        &mut self,
        keys: &[&[u8]],
        mut f: impl FnMut(usize, &mut Cursor<'a>) -> Option<bool>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek_ws()? == b'}' {
            self.i += 1;
            return Some(());
        }
        let mut next = 0;
        loop {
            self.ws();
            let idx = match keys.get(next) {
                Some(k) if self.at_key(k) => {
                    self.i += k.len() + 2;
                    next
                }
                _ => {
                    let key = self.plain_str()?;
                    keys.iter().position(|k| *k == key).unwrap_or(keys.len())
                }
            };
            next = idx + 1;
            self.eat(b':')?;
            if !f(idx, self)? {
                self.skip()?;
            }
            if self.members_end(b'}')? {
                return Some(());
            }
        }
    }

    /// Walks an object's members: `f` gets each (escape-free) key and reads its value (returning
    /// true) or leaves it to be skipped (returning false).
    #[inline]
    pub fn object(
        &mut self,
        mut f: impl FnMut(&'a [u8], &mut Cursor<'a>) -> Option<bool>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek_ws()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.plain_str()?;
            self.eat(b':')?;
            if !f(key, self)? {
                self.skip()?;
            }
            if self.members_end(b'}')? {
                return Some(());
            }
        }
    }

    /// Walks an array's elements with `f`.
    #[inline]
    pub fn array(&mut self, mut f: impl FnMut(&mut Cursor<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek_ws()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            f(self)?;
            if self.members_end(b']')? {
                return Some(());
            }
        }
    }

    /// After a member: `,` (Some(false), more follow) or `close` (Some(true)), consumed.
    #[inline]
    fn members_end(&mut self, close: u8) -> Option<bool> {
        match self.peek_ws()? {
            b',' => {
                self.i += 1;
                Some(false)
            }
            c if c == close => {
                self.i += 1;
                Some(true)
            }
            _ => None,
        }
    }

    /// Skips trailing whitespace; Some when nothing else is left.
    #[inline]
    pub fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.b.len()).then_some(())
    }
}

/// Digits to a u64 with overflow checks.
#[inline(never)]
fn checked_digits(digits: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some(v)
}

/// Finds the end of the value that starts at `b[0]` (no leading whitespace). None: incomplete.
/// Not a validator: on valid JSON it ends exactly where the value ends.
///
/// Objects are matched on `{`/`}` only and arrays on `[`/`]` only (the other kind of bracket
/// always comes in balanced pairs inside), so each step is one memchr3 jump. A scalar ends at the
/// next delimiter or whitespace (at least one byte), or at the end of `b` when `eof` says no more
/// input follows.
pub fn value_len(b: &[u8], eof: bool) -> Option<usize> {
    let first = *b.first()?;
    match first {
        b'{' | b'[' => {
            let close = if first == b'{' { b'}' } else { b']' };
            let mut depth = 0usize;
            let mut i = 0;
            loop {
                i += memchr::memchr3(b'"', first, close, &b[i..])?;
                let c = b[i];
                if c == b'"' {
                    i = i + 1 + string_len(&b[i + 1..])?;
                    continue;
                }
                if c == first {
                    depth += 1;
                } else {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                i += 1;
            }
        }
        b'"' => Some(1 + string_len(&b[1..])?),
        _ => {
            let k = b
                .iter()
                .position(|&c| matches!(c, b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'));
            match k {
                Some(k) => Some(k.max(1)),
                None if eof => Some(b.len()),
                None => None,
            }
        }
    }
}

/// Length of a string's rest (after the opening quote) including the closing quote; None when
/// it does not end in `b`.
pub fn string_len(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'\\' {
            i += 2;
        } else {
            return Some(i + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The value as an f64 (integers rounded to nearest, as serde_json does).
    fn as_f64(n: Number) -> f64 {
        match n {
            Number::U64(v) => v as f64,
            Number::I64(v) => v as f64,
            Number::F64(v) => v,
        }
    }

    /// The cursor's three number readers on `s` (whole input), as serde_json's results.
    fn read_all(s: &str) -> (Option<f64>, Option<u64>, Option<Number>) {
        fn whole<T>(s: &str, f: impl Fn(&mut Cursor) -> Option<T>) -> Option<T> {
            let mut c = Cursor::new(s.as_bytes());
            let v = f(&mut c)?;
            (c.pos() == s.len()).then_some(v)
        }
        (
            whole(s, |c| c.f64()),
            whole(s, |c| c.u64()),
            whole(s, |c| c.number()),
        )
    }

    /// serde_json's reading of `s` as a `Number`, classified as it hands it to a visitor.
    fn serde_number(s: &str) -> Option<Number> {
        match serde_json::from_str::<serde_json::Value>(s).ok()? {
            serde_json::Value::Number(n) => Some(if let Some(v) = n.as_u64() {
                Number::U64(v)
            } else if let Some(v) = n.as_i64() {
                Number::I64(v)
            } else {
                Number::F64(n.as_f64()?)
            }),
            _ => None,
        }
    }

    /// Says yes exactly where serde_json does, with the same bits.
    fn agrees(s: &str) -> Result<(), TestCaseError> {
        let (f, u, n) = read_all(s);
        let bits = |x: Option<f64>| x.map(f64::to_bits);
        prop_assert_eq!(
            bits(f),
            bits(serde_json::from_str::<f64>(s).ok()),
            "f64 of {}",
            s
        );
        prop_assert_eq!(u, serde_json::from_str::<u64>(s).ok(), "u64 of {}", s);
        let as_bits = |n: Option<Number>| {
            n.map(|n| match n {
                Number::F64(v) => (2, v.to_bits()),
                Number::I64(v) => (1, v as u64),
                Number::U64(v) => (0, v),
            })
        };
        prop_assert_eq!(as_bits(n), as_bits(serde_number(s)), "number {}", s);
        Ok(())
    }

    #[test]
    fn numbers_are_exact() {
        for s in [
            "0.1",
            "85.0",
            "0.166238",
            "123456789012345",
            "1e-3",
            "-2.5",
            "1234567890123456789",
            "3.14159265358979",
            "-0",
            "-0.0",
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "-18446744073709551615",
            "123456789012345678901234567890",
            "1E+2",
            "2.5e-308",
            "1e400",
            "-1e400",
            "4.9e-324",
            "1e-400",
            "01",
            "-01",
            "1.",
            ".5",
            "-",
            "+1",
            "1e",
            "1e+",
            "--1",
            "0x10",
            "Infinity",
            "NaN",
            "",
        ] {
            agrees(s).unwrap();
        }
        let mut c = Cursor::new(b" 42 ,");
        assert_eq!((c.u64(), c.pos()), (Some(42), 3));
        assert_eq!(c.number(), None); // at ','
    }

    #[test]
    fn lit_consumes_exactly_its_bytes() {
        let mut c = Cursor::new(b",\"t_s\":1");
        assert!(!c.lit(b",\"t\""));
        assert!(!c.lit(b",\"t_s\":12"), "past the end");
        assert_eq!(c.pos(), 0);
        assert!(c.lit(b",\"t_s\":"));
        assert_eq!((c.pos(), c.u64()), (7, Some(1)));
        assert!(!c.lit(b"}") && c.lit(b""));
    }

    /// Number text by JSON's grammar (and near misses): sign, integer digits (leading zeros
    /// sometimes), fraction, exponent, from short to far beyond u64 and f64's precision.
    fn number_text() -> impl Strategy<Value = String> {
        let digits = |n: std::ops::Range<usize>| proptest::collection::vec(0u8..10, n);
        (
            prop_oneof![Just(""), Just("-"), Just("+")],
            digits(0..30),
            proptest::option::of(digits(0..25)),
            proptest::option::of((prop_oneof![Just(""), Just("+"), Just("-")], digits(0..4))),
            any::<bool>(),
        )
            .prop_map(|(sign, int, frac, exp, big_e)| {
                let d = |v: &[u8]| v.iter().map(|d| (b'0' + d) as char).collect::<String>();
                let mut s = format!("{sign}{}", d(&int));
                if let Some(f) = frac {
                    s += &format!(".{}", d(&f));
                }
                if let Some((es, e)) = exp {
                    s += &format!("{}{es}{}", if big_e { "E" } else { "e" }, d(&e));
                }
                s
            })
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::from),
            "[a-z \\\\\"{}\\[\\],:é→]{0,12}".prop_map(Value::from),
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                proptest::collection::btree_map("[a-z\"\\\\{}]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Compact or pretty, and (when `spaced`) with whitespace after every structural byte
    /// outside strings.
    fn serialise(v: &serde_json::Value, pretty: bool, spaced: bool) -> String {
        let s = if pretty {
            serde_json::to_string_pretty(v).unwrap()
        } else {
            v.to_string()
        };
        if !spaced {
            return s;
        }
        let (mut out, mut in_str, mut esc) = (String::new(), false, false);
        for ch in s.chars() {
            out.push(ch);
            if in_str {
                match (esc, ch) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
            } else if ch == '"' {
                in_str = true;
            } else if matches!(ch, '{' | '[' | ',' | ':') {
                out.push_str(" \n\t\r ");
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn grammar_numbers_agree_with_serde(s in number_text()) {
            agrees(&s)?;
        }

        #[test]
        fn integers_agree_with_serde(u in any::<u64>(), i in any::<i64>()) {
            agrees(&u.to_string())?;
            agrees(&i.to_string())?;
        }

        #[test]
        fn floats_read_back_bit_for_bit(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
            // serde_json's (ryu's) shortest form, std's, and the exponent form: each read back
            // to the same bits whenever the cursor says yes (and it says yes to all of them).
            for s in [serde_json::to_string(&x).unwrap(), format!("{x}"), format!("{x:e}"), format!("{x:.3}")] {
                agrees(&s)?;
                let (f, _, n) = read_all(&s);
                prop_assert!(f.is_some() && n.is_some(), "gave up on {}", s);
            }
            let s = serde_json::to_string(&x).unwrap();
            prop_assert_eq!(read_all(&s).0.map(f64::to_bits), Some(x.to_bits()));
        }

        #[test]
        fn plain_strings_are_borrowed_and_escaped_ones_refused(s in any::<String>(), ws in "[ \t\r\n]{0,3}") {
            let json = serde_json::to_string(&s).unwrap();
            let src = format!("{ws}{json},");
            let mut c = Cursor::new(src.as_bytes());
            match c.plain_str() {
                Some(got) => {
                    prop_assert_eq!(got, s.as_bytes());
                    prop_assert_eq!(c.pos(), ws.len() + json.len());
                }
                None => prop_assert!(json.contains('\\'), "refused {}", json),
            }
            prop_assert_eq!(string_len(&json.as_bytes()[1..]), Some(json.len() - 1));
            prop_assert_eq!(value_len(json.as_bytes(), false), Some(json.len()));
        }

        #[test]
        fn skips_exactly_one_value(
            v in json_value(),
            pretty in any::<bool>(),
            spaced in any::<bool>(),
            ws in "[ \t\r\n]{0,3}",
        ) {
            let json = serialise(&v, pretty, spaced);
            prop_assert_eq!(&serde_json::from_str::<serde_json::Value>(&json).unwrap(), &v);
            let src = format!("{ws}{json}{ws},");
            let mut c = Cursor::new(src.as_bytes());
            prop_assert_eq!(c.skip(), Some(()), "{}", src);
            prop_assert_eq!(c.pos(), ws.len() + json.len(), "{}", src);
            prop_assert_eq!(c.eat(b','), Some(()));
            prop_assert_eq!(value_len(&src.as_bytes()[ws.len()..], false), Some(json.len()));
            prop_assert_eq!(value_len(json.as_bytes(), true), Some(json.len()));
        }

        #[test]
        fn walks_objects_and_arrays_like_serde(
            m in proptest::collection::btree_map("[a-z_ ]{0,6}", json_value(), 0..6),
            known in proptest::collection::btree_set("[a-z_ ]{0,6}", 0..4),
            pretty in any::<bool>(),
            spaced in any::<bool>(),
        ) {
            let v = serde_json::Value::Object(m.clone().into_iter().collect());
            let json = serialise(&v, pretty, spaced);
            // object(): every key, in order; numbers read where they are numbers
            let mut c = Cursor::new(json.as_bytes());
            let mut keys = Vec::new();
            prop_assert_eq!(c.object(|k, c| {
                keys.push(String::from_utf8(k.to_vec()).unwrap());
                if let Some(serde_json::Value::Number(_)) = m.get(std::str::from_utf8(k).unwrap()) {
                    let n = c.number()?;
                    let want = m[std::str::from_utf8(k).unwrap()].as_f64().unwrap();
                    (as_f64(n).to_bits() == want.to_bits()).then_some(true)
                } else {
                    Some(false)
                }
            }), Some(()), "{}", json);
            prop_assert_eq!(c.end(), Some(()));
            prop_assert_eq!(keys, m.keys().cloned().collect::<Vec<_>>());
            // keyed(): each key's position in the table, unknown ones skipped
            let table: Vec<&[u8]> = known.iter().map(|k| k.as_bytes()).collect();
            let mut c = Cursor::new(json.as_bytes());
            let mut seen = Vec::new();
            prop_assert_eq!(c.keyed(&table, |i, _| { seen.push(i); Some(false) }), Some(()));
            prop_assert_eq!(c.end(), Some(()));
            let want: Vec<usize> = m
                .keys()
                .map(|k| table.iter().position(|t| *t == k.as_bytes()).unwrap_or(table.len()))
                .collect();
            prop_assert_eq!(seen, want);
            // array(): one call per element
            let arr = serialise(&serde_json::Value::Array(m.values().cloned().collect()), pretty, spaced);
            let mut c = Cursor::new(arr.as_bytes());
            let mut n = 0;
            prop_assert_eq!(c.array(|c| { n += 1; c.skip() }), Some(()));
            prop_assert_eq!((n, c.end()), (m.len(), Some(())));
        }

        #[test]
        fn never_panics_on_cut_or_garbled_input(v in json_value(), cut in 0usize..200, flip in 0usize..200, by in 1u8..=255) {
            let mut b = v.to_string().into_bytes();
            b.truncate(cut.min(b.len()));
            if !b.is_empty() {
                let i = flip % b.len();
                b[i] = b[i].wrapping_add(by);
            }
            for k in 0..7 {
                let mut c = Cursor::new(&b);
                let _ = match k {
                    0 => c.skip(),
                    1 => c.f64().map(drop),
                    2 => c.u64().map(drop),
                    3 => c.number().map(drop),
                    4 => c.plain_str().map(drop),
                    5 => c.object(|_, _| Some(false)),
                    _ => c.array(|c| c.skip()),
                };
                prop_assert!(c.pos() <= b.len());
            }
            let _ = value_len(&b, false);
            let _ = value_len(&b, true);
        }
    }
}
