//! Fast path for the common shape of a Kineto event: a flat object with plain (escape-free)
//! strings, integer or decimal numbers and an `args` object. Anything else (escapes, exponents,
//! huge integers, an event cut by the end of the buffer, invalid JSON) returns `None` and the
//! caller falls back to serde_json, which handles every case; so this only has to be right when it
//! says yes.

use std::borrow::Cow;

use super::reader::{Args, Event};

struct P<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> P<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// A string without escapes, borrowed. None on escapes (fallback).
    #[inline]
    fn plain_str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        let k = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[k] == b'\\' {
            return None;
        }
        self.i += k + 1;
        Some(&rest[..k])
    }

    /// A number: (as f64, as u64 when it is a non-negative integer).
    #[inline]
    fn number(&mut self) -> Option<(f64, Option<u64>)> {
        self.ws();
        let start = self.i;
        let b = self.b;
        let mut j = start;
        let neg = b.get(j) == Some(&b'-');
        if neg {
            j += 1;
        }
        let mut v: u64 = 0;
        let digits0 = j;
        while let Some(&c) = b.get(j) {
            if c.is_ascii_digit() {
                if j - digits0 >= 18 {
                    return None; // possibly beyond u64/exact f64: let serde_json decide
                }
                v = v * 10 + (c - b'0') as u64;
                j += 1;
            } else {
                break;
            }
        }
        if j == digits0 {
            return None;
        }
        match b.get(j) {
            Some(b'.') | Some(b'e') | Some(b'E') => {
                j += 1;
                while let Some(&c) = b.get(j) {
                    if c.is_ascii_digit() || matches!(c, b'e' | b'E' | b'+' | b'-' | b'.') {
                        j += 1;
                    } else {
                        break;
                    }
                }
                b.get(j)?; // the number must not touch the end of the buffer
                let s = std::str::from_utf8(&b[start..j]).ok()?;
                let f: f64 = s.parse().ok()?;
                self.i = j;
                let id = (f.is_finite() && (0.0..1.8e19).contains(&f)).then_some(f as u64);
                Some((f, id))
            }
            Some(_) => {
                self.i = j;
                if neg {
                    Some((-(v as f64), Some((v as i64).wrapping_neg() as u64)))
                } else {
                    Some((v as f64, Some(v)))
                }
            }
            None => None,
        }
    }

    /// pid/tid: a number or a string ("stream 7").
    #[inline]
    fn id(&mut self) -> Option<Option<u64>> {
        match self.peek()? {
            b'"' => {
                let s = self.plain_str()?;
                Some(super::reader::num_from_bytes(s).1)
            }
            b'n' => {
                self.literal(b"null")?;
                Some(None)
            }
            _ => Some(self.number()?.1),
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + lit.len())? == lit {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// Skips any value.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.i += 1;
                let rest = &self.b[self.i..];
                let mut k = 0;
                loop {
                    k += memchr::memchr2(b'"', b'\\', rest.get(k..)?)?;
                    if rest[k] == b'\\' {
                        k += 2;
                    } else {
                        break;
                    }
                }
                self.i += k + 1;
                Some(())
            }
            b'{' | b'[' => {
                let n = super::reader::scan_value_pub(&self.b[self.i..])?;
                self.i += n;
                Some(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => {
                let rest = &self.b[self.i..];
                let k = rest
                    .iter()
                    .position(|c| !matches!(c, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'))?;
                self.i += k;
                Some(())
            }
            _ => None,
        }
    }

    fn args(&mut self) -> Option<Args> {
        let mut a = Args::default();
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(a);
        }
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(a);
        }
        loop {
            let k = self.plain_str()?;
            self.eat(b':')?;
            match k {
                b"External id" | b"external id" => a.external_id = self.num_or_skip()?,
                b"correlation" => a.correlation = self.num_or_skip()?,
                b"stream" => a.stream = self.num_or_skip()?,
                b"device" => a.device = self.num_or_skip()?,
                b"bytes" => {
                    if matches!(self.peek()?, b'-' | b'0'..=b'9') {
                        a.bytes = Some(self.number()?.0);
                    } else {
                        self.skip()?;
                    }
                }
                b"Collective name" => {
                    self.skip()?;
                    a.collective = true;
                }
                _ => self.skip()?,
            }
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(a);
                }
                _ => return None,
            }
        }
    }

    fn num_or_skip(&mut self) -> Option<Option<u64>> {
        if matches!(self.peek()?, b'-' | b'0'..=b'9') {
            Some(self.number()?.1)
        } else {
            self.id()
        }
    }
}

/// Parses one event at the start of `b`; returns it and its length, or None to fall back.
pub fn event(b: &[u8]) -> Option<(Event<'_>, usize)> {
    let mut p = P { b, i: 0 };
    p.eat(b'{')?;
    let mut ev = Event::default();
    if p.peek()? == b'}' {
        return Some((ev, p.i + 1));
    }
    loop {
        let k = p.plain_str()?;
        p.eat(b':')?;
        match k {
            b"ph" => ev.ph = p.plain_str()?.first().copied().unwrap_or(0),
            b"cat" => ev.cat = Cow::Borrowed(p.plain_str()?),
            b"name" => ev.name = Cow::Borrowed(p.plain_str()?),
            b"pid" => ev.pid = p.id()?,
            b"tid" => ev.tid = p.id()?,
            b"ts" => ev.ts = Some(p.number()?.0),
            b"dur" => ev.dur = Some(p.number()?.0),
            b"args" => ev.args = p.args()?,
            _ => p.skip()?,
        }
        match p.peek()? {
            b',' => p.i += 1,
            b'}' => return Some((ev, p.i + 1)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(src: &str) {
        let fast = event(src.as_bytes());
        let slow = super::super::reader::parse_event_serde(src.as_bytes());
        match (fast, slow) {
            (Some((f, n)), Some(s)) => {
                assert_eq!(n, src.trim_end().len(), "{src}");
                // serde_json's `float_roundtrip` feature (on in the workspace) rounds correctly, as
                // std's parse does: both paths must give the same bits.
                assert_eq!(format!("{f:?}"), format!("{s:?}"), "{src}");
            }
            (None, _) => {} // fallback: always allowed
            (Some(_), None) => panic!("fast path accepted what serde_json rejects: {src}"),
        }
    }

    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            (-1e17f64..1e17).prop_map(serde_json::Value::from),
            "[a-z \\\\\"é→#]{0,12}".prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("ph".to_string()),
            Just("cat".to_string()),
            Just("name".to_string()),
            Just("pid".to_string()),
            Just("tid".to_string()),
            Just("ts".to_string()),
            Just("dur".to_string()),
            Just("other".to_string()),
        ]
    }

    fn arg_key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("External id".to_string()),
            Just("correlation".to_string()),
            Just("bytes".to_string()),
            Just("stream".to_string()),
            Just("device".to_string()),
            Just("Collective name".to_string()),
            "[a-z ]{1,6}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn fast_path_agrees_with_serde_on_random_events(
            fields in proptest::collection::vec((key(), json_value()), 0..8),
            args in proptest::collection::vec((arg_key(), json_value()), 0..6),
            with_args in any::<bool>(),
            pretty in any::<bool>(),
        ) {
            let mut m = serde_json::Map::new();
            for (k, v) in fields {
                m.insert(k, v);
            }
            if with_args {
                m.insert("args".into(), serde_json::Value::Object(args.into_iter().collect()));
            }
            let v = serde_json::Value::Object(m);
            let src = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { v.to_string() };
            same(&src);
        }
    }

    #[test]
    fn agrees_with_serde() {
        for src in [
            r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1661203463029566.123, "dur": 7, "args": {"External id": 1869557, "queued": 0, "device": 3, "stream": 7, "correlation": 1869557, "grid": [1, 2, 3], "est. achieved occupancy %": 12.5}}"#,
            r#"{"ph":"X","cat":"Memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":"stream 7","ts":1623142623529248,"dur":1940,"args":{"device":0,"stream":7,"correlation":34417,"external id":537,"bytes":19267584,"memory bandwidth (GB/s)":9.927016204653041}}"#,
            r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":"123","tid":-5,"ts":-1.5e3,"dur":0,"args":{"Input Dims":[[1,2],[]],"Input type":["float",""],"Collective name":"allreduce","x":null,"y":true}}"#,
            r#"{"name":"a\"b","ts":1}"#,
            r#"{"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}}"#,
            r#"{}"#,
            r#"{"ts": 123456789012345678901234567890}"#,
            r#"{"args": null, "pid": null}"#,
            r#"{"ts": 1, "dur": 2"#,
            r#"{"ts": 1, "dur": 2}"#,
        ] {
            same(src);
        }
        // the common shapes must take the fast path
        let common = r#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":"stream 7","ts":16.5,"dur":7,"args":{"grid":[1,2],"correlation":5,"bytes":1e3}}"#;
        let (ev, n) = event(common.as_bytes()).expect("fast path");
        assert_eq!(
            (n, ev.tid, ev.args.correlation, ev.args.bytes),
            (common.len(), Some(7), Some(5), Some(1000.0))
        );
    }
}
