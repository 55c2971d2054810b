//! A struct's fields for the fast readers, declared once: [`json_fields!`](crate::json_fields) wraps the struct's own
//! declaration (its serde derive and attributes untouched) and, from the same list of fields,
//! gives the fast reader the keys in serde's order, which ones serde requires, and how each
//! value is read. A field added to such a struct is read by both paths with no other edit.
//!
//! The reader takes an object in two layouts. As gpufeed's writer lays it out ([`Layout::Written`]:
//! keys in declaration order, absent ones left out, no whitespace), each `,"key":` is stepped over
//! with one constant-length comparison; any other layout ([`Layout::Any`]: keys in any order,
//! whitespace, unknown keys) is walked key by key. Either way the answer is serde's, or `None`
//! where the reader cannot be sure (then the caller hands the text to serde).

use crate::Cursor;

/// How an object's members are laid out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Layout {
    /// As serde writes it: keys in declaration order, no whitespace.
    Written,
    /// Keys in any order, whitespace, unknown keys skipped.
    Any,
}

/// A value the fast readers read in place, reusing what `self` holds (a vector's buffer).
/// `None`: not read (the caller falls back to serde).
pub trait Field {
    /// Whether serde refuses an object without this key (true but for `Option`s).
    const REQUIRED: bool = true;
    fn read(&mut self, c: &mut Cursor<'_>, layout: Layout) -> Option<()>;
    /// The key was left out: what serde gives then (called only where not [`Field::REQUIRED`]).
    fn absent(&mut self) {}
}

impl Field for f64 {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, _: Layout) -> Option<()> {
        *self = c.f64()?;
        Some(())
    }
}

impl Field for u64 {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, _: Layout) -> Option<()> {
        *self = c.u64()?;
        Some(())
    }
}

impl Field for u32 {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, _: Layout) -> Option<()> {
        *self = u32::try_from(c.u64()?).ok()?;
        Some(())
    }
}

/// A one-character ASCII string (a process state); anything else is left to serde.
impl Field for char {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, _: Layout) -> Option<()> {
        match c.plain_str()? {
            [s] if s.is_ascii() => {
                *self = *s as char;
                Some(())
            }
            _ => None,
        }
    }
}

/// A string without escapes (escaped ones are left to serde).
impl Field for String {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, _: Layout) -> Option<()> {
        let s = std::str::from_utf8(c.plain_str()?).ok()?;
        self.clear();
        self.push_str(s);
        Some(())
    }
}

/// `[a, b]`: a utilization sample's time and value.
impl Field for [f64; 2] {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, _: Layout) -> Option<()> {
        c.eat(b'[')?;
        self[0] = c.f64()?;
        c.eat(b',')?;
        self[1] = c.f64()?;
        c.eat(b']')
    }
}

/// `null` or the value; a left-out key is `None` (serde's rule for `Option`).
impl<T: Field + Default> Field for Option<T> {
    const REQUIRED: bool = false;
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, layout: Layout) -> Option<()> {
        if c.null() {
            *self = None;
            Some(())
        } else {
            self.get_or_insert_with(T::default).read(c, layout)
        }
    }
    fn absent(&mut self) {
        *self = None;
    }
}

/// An array, read into the vector's own buffer.
impl<T: Field + Default> Field for Vec<T> {
    #[inline]
    fn read(&mut self, c: &mut Cursor<'_>, layout: Layout) -> Option<()> {
        self.clear();
        c.array(|c| {
            let mut v = T::default();
            v.read(c, layout)?;
            self.push(v);
            Some(())
        })
    }
}

/// What [`json_fields!`](crate::json_fields) generates for a struct: its keys and a reader for each.
pub trait Fields: Sized {
    /// `type` (an enum's tag, for a struct that is a line), then the fields in serde's order.
    const KEYS: &'static [&'static [u8]];
    /// Reads the members after `{` (or after a line's tag, then `first` is false) in the
    /// [`Layout::Written`] layout, stopping at the first key that is not next; which were read.
    fn members_written(&mut self, c: &mut Cursor<'_>, first: bool) -> Option<u64>;
    /// Reads field `n` (its place in the declaration).
    fn read_nth(&mut self, n: usize, c: &mut Cursor<'_>, layout: Layout) -> Option<()>;
    /// Fields not read (`seen` lacks their bit): `None` if serde requires one, else each absent.
    fn finish(&mut self, seen: u64) -> Option<()>;

    /// A whole object in any layout; with `tag`, its `type` must be that (a line of an
    /// internally tagged enum). Duplicate keys are left to serde (which refuses them).
    fn members_any(&mut self, c: &mut Cursor<'_>, tag: Option<&[u8]>) -> Option<u64> {
        let (mut seen, mut tagged) = (0u64, tag.is_none());
        c.keyed(Self::KEYS, |k, c| match (k, tag) {
            (0, Some(t)) if !tagged => {
                tagged = c.plain_str()? == t;
                tagged.then_some(true)
            }
            (0, Some(_)) => None,
            (0, None) => Some(false),
            (k, _) if k < Self::KEYS.len() => {
                let bit = 1u64 << (k - 1);
                if seen & bit != 0 {
                    return None;
                }
                seen |= bit;
                self.read_nth(k - 1, c, Layout::Any)?;
                Some(true)
            }
            _ => Some(false),
        })?;
        tagged.then_some(seen)
    }

    /// A nested object in `layout`.
    fn object(&mut self, c: &mut Cursor<'_>, layout: Layout) -> Option<()> {
        let seen = match layout {
            Layout::Written => {
                c.lit(b"{").then_some(())?;
                let seen = self.members_written(c, true)?;
                c.lit(b"}").then_some(seen)?
            }
            Layout::Any => self.members_any(c, None)?,
        };
        self.finish(seen)
    }
}

/// A line of an internally tagged enum (`{"type":"<tag>", ...fields}`) into `out`, reusing its
/// buffers: first as written, then in any layout. `None`: serde must read it.
pub fn read_line<T: Fields>(line: &[u8], tag: &[u8], out: &mut T) -> Option<()> {
    line_written(line, tag, out).or_else(|| line_any(line, tag, out))
}

/// [`read_line`] in the [`Layout::Written`] layout only.
pub fn line_written<T: Fields>(line: &[u8], tag: &[u8], out: &mut T) -> Option<()> {
    let mut c = Cursor::new(line);
    c.literal(b"{\"type\":\"")?;
    c.literal(tag)?;
    c.literal(b"\"")?;
    let seen = out.members_written(&mut c, false)?;
    c.lit(b"}").then_some(())?;
    c.end()?;
    out.finish(seen)
}

/// [`read_line`] in any layout.
pub fn line_any<T: Fields>(line: &[u8], tag: &[u8], out: &mut T) -> Option<()> {
    let mut c = Cursor::new(line);
    let seen = out.members_any(&mut c, Some(tag))?;
    c.end()?;
    out.finish(seen)
}

/// `text[skip..skip + N]` as an array, for [`Cursor::lit`]'s constant-length comparisons.
pub const fn key_bytes<const N: usize>(text: &str, skip: usize) -> [u8; N] {
    let b = text.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = b[skip + i];
        i += 1;
    }
    out
}

/// Declares a struct (attributes, serde derive and docs as written) and implements [`Fields`]
/// and [`Field`] for it from the same field list: the fast readers' keys are the field names
/// (so a field may not be renamed by serde; `every_field_of_every_sample_type_is_read` in
/// `record::fast` would fail), required where serde requires them.
#[macro_export]
macro_rules! json_fields {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $fvis:vis $f:ident : $t:ty
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $(
                $(#[$fmeta])*
                $fvis $f: $t,
            )*
        }

        impl $crate::fields::Fields for $name {
            const KEYS: &'static [&'static [u8]] = &[b"type", $(stringify!($f).as_bytes()),*];

            #[inline]
            #[allow(unused_assignments)]
            fn members_written(
                &mut self,
                c: &mut $crate::Cursor<'_>,
                mut first: bool,
            ) -> Option<u64> {
                let (mut seen, mut bit) = (0u64, 1u64);
                $(
                    {
                        const KEY: &str = concat!(",\"", stringify!($f), "\":");
                        const N: usize = KEY.len();
                        const WITH: [u8; N] = $crate::fields::key_bytes::<N>(KEY, 0);
                        const BARE: [u8; N - 1] = $crate::fields::key_bytes::<{ N - 1 }>(KEY, 1);
                        let at = if first { c.lit(&BARE) } else { c.lit(&WITH) };
                        if at {
                            $crate::fields::Field::read(
                                &mut self.$f,
                                c,
                                $crate::fields::Layout::Written,
                            )?;
                            seen |= bit;
                            first = false;
                        }
                        bit <<= 1;
                    }
                )*
                Some(seen)
            }

            #[inline]
            #[allow(unused_assignments)]
            fn read_nth(
                &mut self,
                n: usize,
                c: &mut $crate::Cursor<'_>,
                layout: $crate::fields::Layout,
            ) -> Option<()> {
                let mut i = 0usize;
                $(
                    if n == i {
                        return $crate::fields::Field::read(&mut self.$f, c, layout);
                    }
                    i += 1;
                )*
                None
            }

            #[inline]
            #[allow(unused_assignments)]
            fn finish(&mut self, seen: u64) -> Option<()> {
                const _: () = assert!($name::FIELD_COUNT <= 64, "at most 64 fields");
                let mut bit = 1u64;
                $(
                    if seen & bit == 0 {
                        if <$t as $crate::fields::Field>::REQUIRED {
                            return None;
                        }
                        $crate::fields::Field::absent(&mut self.$f);
                    }
                    bit <<= 1;
                )*
                Some(())
            }
        }

        impl $name {
            const FIELD_COUNT: usize = [$(stringify!($f)),*].len();
        }

        impl $crate::fields::Field for $name {
            #[inline]
            fn read(
                &mut self,
                c: &mut $crate::Cursor<'_>,
                layout: $crate::fields::Layout,
            ) -> Option<()> {
                $crate::fields::Fields::object(self, c, layout)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    json_fields! {
        /// A test struct with every kind of field.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        struct Inner {
            name: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            n: Option<u32>,
        }
    }

    json_fields! {
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        struct Outer {
            t_s: f64,
            pair: Option<Vec<[f64; 2]>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            state: Option<char>,
            inner: Vec<Inner>,
            big: Option<u64>,
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        Outer(Outer),
    }

    fn serde(line: &str) -> Option<Outer> {
        match serde_json::from_str::<Tagged>(line) {
            Ok(Tagged::Outer(o)) => Some(o),
            Err(_) => None,
        }
    }

    fn fast(line: &str) -> Option<Outer> {
        let mut o = Outer::default();
        read_line(line.as_bytes(), b"outer", &mut o).map(|()| o)
    }

    #[test]
    fn keys_come_from_the_declaration() {
        assert_eq!(
            Outer::KEYS,
            &[&b"type"[..], b"t_s", b"pair", b"state", b"inner", b"big"]
        );
        assert_eq!(Outer::FIELD_COUNT, 5);
    }

    #[test]
    fn reads_what_serde_reads_or_gives_up() {
        for line in [
            r#"{"type":"outer","t_s":1.5,"pair":[[1.0,2.0]],"state":"R","inner":[{"name":"a","n":3},{"name":"b"}],"big":18446744073709551615}"#,
            r#"{"type":"outer","t_s":1,"pair":null,"inner":[],"big":null}"#,
            r#"{"type":"outer","t_s":1,"inner":[]}"#,
            r#"{ "inner": [ {"n": 1, "name": "x"} ], "t_s": 2.5, "type": "outer", "extra": {"a": [1]} }"#,
            r#"{"type":"outer","t_s":1,"inner":[],"t_s":2}"#,
            r#"{"type":"outer","inner":[]}"#,
            r#"{"type":"other","t_s":1,"inner":[]}"#,
            r#"{"t_s":1,"inner":[]}"#,
            r#"{"type":"outer","type":"outer","t_s":1,"inner":[]}"#,
            r#"{"type":"outer","t_s":1,"inner":[{"n":1}]}"#,
            r#"{"type":"outer","t_s":1,"inner":[],"big":-1}"#,
            r#"{"type":"outer","t_s":1,"inner":[],"state":"RS"}"#,
        ] {
            let (f, s) = (fast(line), serde(line));
            if f.is_some() {
                assert_eq!(f, s, "{line}");
            }
        }
        // The common shapes are read, not left to serde.
        for line in [
            r#"{"type":"outer","t_s":1.5,"pair":[[1.0,2.0]],"state":"R","inner":[{"name":"a","n":3},{"name":"b"}],"big":7}"#,
            r#"{"type":"outer","t_s":1,"inner":[]}"#,
            r#"{ "inner": [ {"n": 1, "name": "x"} ], "t_s": 2.5, "type": "outer" }"#,
        ] {
            assert_eq!(fast(line), serde(line), "{line}");
            assert!(serde(line).is_some());
        }
    }

    #[test]
    fn buffers_are_reused_and_left_out_options_cleared() {
        let mut o = Outer::default();
        let full = r#"{"type":"outer","t_s":1,"pair":[[1.0,2.0],[3.0,4.0]],"state":"S","inner":[{"name":"a"}],"big":5}"#;
        read_line(full.as_bytes(), b"outer", &mut o).unwrap();
        let before = o.pair.as_ref().unwrap().as_ptr();
        let next = r#"{"type":"outer","t_s":2,"pair":[[5.0,6.0]],"inner":[]}"#;
        read_line(next.as_bytes(), b"outer", &mut o).unwrap();
        assert_eq!(o, serde(next).unwrap());
        assert_eq!(
            o.pair.as_ref().unwrap().as_ptr(),
            before,
            "the buffer is kept"
        );
    }

    #[test]
    fn the_written_layout_is_what_serde_writes() {
        let o = Outer {
            t_s: 0.25,
            pair: Some(vec![[1.0, 2.5]]),
            state: Some('D'),
            inner: vec![Inner {
                name: "n".into(),
                n: Some(4),
            }],
            big: None,
        };
        let line = serde_json::to_string(&Tagged::Outer(o.clone())).unwrap();
        let mut c = Cursor::new(line.as_bytes());
        c.literal(b"{\"type\":\"outer\"").unwrap();
        let mut got = Outer::default();
        let seen = got.members_written(&mut c, false).unwrap();
        assert!(c.lit(b"}"), "{line}: every key taken in order");
        got.finish(seen).unwrap();
        assert_eq!(got, o);
    }
}
