//! The serde_json path for one event: what the scanner ([`super::reader`]) falls back to when
//! the fast path ([`super::fast`]) does not take an event, and the reference the fast path is
//! tested against.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use crate::event::{num_from_str, ArgKey, Args, Event, EventKey, Num};

/// The serde_json path for one event (the reference the fast path is tested against).
#[cfg(test)]
pub(super) fn parse_event_serde(b: &[u8]) -> Option<Event<'_>> {
    let mut de = serde_json::Deserializer::from_slice(b);
    de::Deserializer::deserialize_map(&mut de, EventVisitor).ok()
}

pub(super) struct EventDe<'a>(pub(super) Event<'a>);
impl<'de> de::Deserialize<'de> for EventDe<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(EventVisitor).map(EventDe)
    }
}

// ---------- per-event deserialization ----------

/// A key, named by [`EventKey`] or [`ArgKey`] (the names both readers share).
trait KeyOf: Sized {
    fn of(k: &[u8]) -> Self;
}
impl KeyOf for EventKey {
    fn of(k: &[u8]) -> Self {
        EventKey::of(k)
    }
}
impl KeyOf for ArgKey {
    fn of(k: &[u8]) -> Self {
        ArgKey::of(k)
    }
}

struct KeySeed<K>(PhantomData<K>);
impl<'de, K: KeyOf> DeserializeSeed<'de> for KeySeed<K> {
    type Value = K;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        d.deserialize_bytes(KeyVisitor(PhantomData))
    }
}
struct KeyVisitor<K>(PhantomData<K>);
impl<'de, K: KeyOf> Visitor<'de> for KeyVisitor<K> {
    type Value = K;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<K, E> {
        Ok(K::of(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<K, E> {
        self.visit_bytes(v.as_bytes())
    }
}

/// A string as raw bytes, borrowed when it has no escapes.
struct RawStr<'a>(Cow<'a, [u8]>);
impl<'de> de::Deserialize<'de> for RawStr<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
                Ok(RawStr(Cow::Borrowed(v)))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                Ok(RawStr(Cow::Owned(v.to_vec())))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(RawStr(Cow::Borrowed(v.as_bytes())))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawStr(Cow::Owned(v.as_bytes().to_vec())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(RawStr(Cow::Borrowed(b"")))
            }
        }
        d.deserialize_bytes(V)
    }
}

impl<'de> de::Deserialize<'de> for Num {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num {
                    f: Some(v as f64),
                    id: Some(v),
                })
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num {
                    f: Some(v as f64),
                    id: Some(v as u64),
                })
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                let id = if (0.0..1.8e19).contains(&v) {
                    Some(v as u64)
                } else {
                    None
                };
                Ok(Num {
                    f: Some(v).filter(|x| x.is_finite()),
                    id,
                })
            }
            fn visit_bool<E>(self, v: bool) -> Result<Num, E> {
                Ok(Num {
                    f: None,
                    id: Some(v as u64),
                })
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num { f: None, id: None })
            }
            fn visit_none<E>(self) -> Result<Num, E> {
                Ok(Num { f: None, id: None })
            }
            fn visit_str<E>(self, v: &str) -> Result<Num, E> {
                Ok(num_from_str(v.as_bytes()))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Num, E> {
                Ok(num_from_str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Num, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num { f: None, id: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Num, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num { f: None, id: None })
            }
        }
        d.deserialize_any(V)
    }
}

struct EventVisitor;
impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Event<'de>, A::Error> {
        let mut ev = Event::default();
        while let Some(k) = m.next_key_seed(KeySeed::<EventKey>(PhantomData))? {
            match k {
                EventKey::Ph => {
                    let s: RawStr = m.next_value()?;
                    ev.ph = s.0.first().copied().unwrap_or(0);
                }
                EventKey::Cat => ev.cat = m.next_value::<RawStr>()?.0,
                EventKey::Name => ev.name = m.next_value::<RawStr>()?.0,
                EventKey::Pid => ev.pid = m.next_value::<Num>()?.id,
                EventKey::Tid => ev.tid = m.next_value::<Num>()?.id,
                EventKey::Ts => ev.ts = m.next_value::<Num>()?.f,
                EventKey::Dur => ev.dur = m.next_value::<Num>()?.f,
                EventKey::Args => ev.args = m.next_value::<ArgsDe>()?.0,
                EventKey::Other => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ev)
    }
}

struct ArgsDe(Args);
impl<'de> de::Deserialize<'de> for ArgsDe {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ArgsDe;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("args")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ArgsDe, A::Error> {
                let mut a = Args::default();
                while let Some(k) = m.next_key_seed(KeySeed::<ArgKey>(PhantomData))? {
                    match k {
                        ArgKey::ExternalId => a.external_id = m.next_value::<Num>()?.id,
                        ArgKey::Correlation => a.correlation = m.next_value::<Num>()?.id,
                        ArgKey::Bytes => a.bytes = m.next_value::<Num>()?.f,
                        ArgKey::Stream => a.stream = m.next_value::<Num>()?.id,
                        ArgKey::Device => a.device = m.next_value::<Num>()?.id,
                        ArgKey::Collective => {
                            m.next_value::<IgnoredAny>()?;
                            a.collective = true;
                        }
                        ArgKey::Other => {
                            m.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(ArgsDe(a))
            }
            fn visit_unit<E>(self) -> Result<ArgsDe, E> {
                Ok(ArgsDe(Args::default()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<ArgsDe, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ArgsDe(Args::default()))
            }
        }
        d.deserialize_any(V)
    }
}
