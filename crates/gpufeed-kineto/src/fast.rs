//! Fast path for the common shape of a Kineto event: a flat object with plain (escape-free)
//! strings, integer or decimal numbers and an `args` object. Anything else (escapes, exponents,
//! huge integers, an event cut by the end of the buffer, invalid JSON) returns `None` and the
//! caller falls back to serde_json, which handles every case; so this only has to be right when it
//! says yes.

use std::borrow::Cow;

use crate::event::{ArgKey, Args, Event, EventKey};
use gpufeed_json::{Cursor, Number};

/// A number that does not touch the end of the buffer (the buffer may end inside it): as f64,
/// and as an id (what serde_json's visitor in [`super::serde_event`] makes of it).
#[inline]
fn number(c: &mut Cursor<'_>) -> Option<(f64, Option<u64>)> {
    let n = c.number()?;
    c.peek()?;
    Some(match n {
        Number::U64(v) => (v as f64, Some(v)),
        Number::I64(v) => (v as f64, Some(v as u64)),
        Number::F64(f) => (f, (0.0..1.8e19).contains(&f).then_some(f as u64)),
    })
}

/// pid/tid: a number or a string ("stream 7").
#[inline]
fn id(c: &mut Cursor<'_>) -> Option<Option<u64>> {
    match c.peek_ws()? {
        b'"' => {
            let s = c.plain_str()?;
            Some(super::event::num_from_bytes(s).1)
        }
        b'n' => {
            c.literal(b"null")?;
            Some(None)
        }
        _ => Some(number(c)?.1),
    }
}

fn num_or_skip(c: &mut Cursor<'_>) -> Option<Option<u64>> {
    if matches!(c.peek_ws()?, b'-' | b'0'..=b'9') {
        Some(number(c)?.1)
    } else {
        id(c)
    }
}

fn args(c: &mut Cursor<'_>) -> Option<Args> {
    let mut a = Args::default();
    if c.peek_ws()? == b'n' {
        c.literal(b"null")?;
        return Some(a);
    }
    c.object(|k, c| {
        match ArgKey::of(k) {
            ArgKey::ExternalId => a.external_id = num_or_skip(c)?,
            ArgKey::Correlation => a.correlation = num_or_skip(c)?,
            ArgKey::Stream => a.stream = num_or_skip(c)?,
            ArgKey::Device => a.device = num_or_skip(c)?,
            ArgKey::Bytes => {
                if !matches!(c.peek_ws()?, b'-' | b'0'..=b'9') {
                    return Some(false);
                }
                a.bytes = Some(number(c)?.0);
            }
            ArgKey::Collective => {
                a.collective = true;
                return Some(false);
            }
            ArgKey::Other => return Some(false),
        }
        Some(true)
    })?;
    Some(a)
}

/// Parses one event at the start of `b`; returns it and its length, or None to fall back.
pub(super) fn event(b: &[u8]) -> Option<(Event<'_>, usize)> {
    let mut c = Cursor::new(b);
    let mut ev = Event::default();
    c.object(|k, c| {
        match EventKey::of(k) {
            EventKey::Ph => ev.ph = c.plain_str()?.first().copied().unwrap_or(0),
            EventKey::Cat => ev.cat = Cow::Borrowed(c.plain_str()?),
            EventKey::Name => ev.name = Cow::Borrowed(c.plain_str()?),
            EventKey::Pid => ev.pid = id(c)?,
            EventKey::Tid => ev.tid = id(c)?,
            EventKey::Ts => ev.ts = Some(number(c)?.0),
            EventKey::Dur => ev.dur = Some(number(c)?.0),
            EventKey::Args => ev.args = args(c)?,
            EventKey::Other => return Some(false),
        }
        Some(true)
    })?;
    Some((ev, c.pos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(src: &str) {
        let fast = event(src.as_bytes());
        let slow = super::super::serde_event::parse_event_serde(src.as_bytes());
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
