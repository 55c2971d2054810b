//! TensorBoard's event-file format, as bytes: the record framing and the few protobuf messages
//! gpufeed writes (an `Event` holding a `Summary` of scalar values or of one text tensor).
//!
//! Written by hand, not with a crate: the one Rust crate for the format (`tensorboard-rs`) is no
//! longer maintained, pulls protobuf 2 and `image`, and opens the file itself with the current
//! clock as every event's time, where gpufeed needs the recording's own times and returns bytes
//! (presenters never open files). What is needed is small and fixed: the framing (length, masked
//! CRC32C of the length, data, masked CRC32C of the data, from TensorFlow's `record_writer.cc`)
//! and five messages of `event.proto` / `summary.proto` / `tensor.proto`, each field encoded as
//! protobuf's wire format says. Tests read the files back with TensorBoard's own reader
//! (tests/it/tensorboard.rs) and check the CRC against the published CRC32C test vectors.

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `DataType.DT_STRING` of tensorflow/core/framework/types.proto.
const DT_STRING: u64 = 7;

/// The CRC-32C (Castagnoli) table, reflected polynomial 0x82F63B78.
const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC_TABLE: [u32; 256] = crc_table();

/// CRC-32C of `data`.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |c, b| {
        CRC_TABLE[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// The masked CRC of TFRecord files: rotated right by 15 bits plus a constant.
pub(crate) fn masked_crc32c(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Appends one record: u64 length, masked CRC of those 8 bytes, the data, masked CRC of the data
/// (all little-endian).
pub(crate) fn push_record(out: &mut Vec<u8>, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// One `Summary.Value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// `simple_value`: what TensorBoard's scalars page plots.
    Scalar { tag: String, value: f32 },
    /// A string tensor tagged for the text plugin (rendered as Markdown).
    Text { tag: String, text: String },
}

impl Value {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            Value::Scalar { tag, value } => {
                bytes_field(&mut v, 1, tag.as_bytes());
                key(&mut v, 2, FIXED32);
                v.extend_from_slice(&value.to_le_bytes());
            }
            Value::Text { tag, text } => {
                bytes_field(&mut v, 1, tag.as_bytes());
                // TensorProto { dtype: DT_STRING, tensor_shape: {} (a scalar), string_val }
                let mut tensor = Vec::new();
                key(&mut tensor, 1, VARINT);
                varint(&mut tensor, DT_STRING);
                bytes_field(&mut tensor, 2, &[]);
                bytes_field(&mut tensor, 8, text.as_bytes());
                bytes_field(&mut v, 8, &tensor);
                // SummaryMetadata { plugin_data: { plugin_name: "text" } }
                let mut plugin = Vec::new();
                bytes_field(&mut plugin, 1, b"text");
                let mut meta = Vec::new();
                bytes_field(&mut meta, 1, &plugin);
                bytes_field(&mut v, 9, &meta);
            }
        }
        v
    }
}

/// One `Event`: a time and a step with the values of a summary, or the file's version line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// Seconds since the Unix epoch.
    pub wall_time_s: f64,
    pub step: i64,
    pub what: EventKind,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EventKind {
    /// `file_version`: the first event of every file (`brain.Event:2`).
    Version,
    Summary(Vec<Value>),
}

impl Event {
    /// The event as protobuf bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Vec::new();
        key(&mut e, 1, FIXED64);
        e.extend_from_slice(&self.wall_time_s.to_le_bytes());
        if self.step != 0 {
            key(&mut e, 2, VARINT);
            // int64: negative numbers as their two's complement, as protobuf does.
            varint(&mut e, self.step as u64);
        }
        match &self.what {
            EventKind::Version => bytes_field(&mut e, 3, b"brain.Event:2"),
            EventKind::Summary(values) => {
                let mut s = Vec::new();
                for v in values {
                    bytes_field(&mut s, 1, &v.encode());
                }
                bytes_field(&mut e, 5, &s);
            }
        }
        e
    }
}

/// A whole event file: every event framed as a record, the file-version event first.
pub(crate) fn file(start_wall_time_s: f64, events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    let head = Event {
        wall_time_s: start_wall_time_s,
        step: 0,
        what: EventKind::Version,
    };
    push_record(&mut out, &head.encode());
    for e in events {
        push_record(&mut out, &e.encode());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_test_vectors() {
        // RFC 3720 B.4 and the usual check value.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn record_framing() {
        let mut out = Vec::new();
        push_record(&mut out, b"abc");
        assert_eq!(out.len(), 8 + 4 + 3 + 4);
        assert_eq!(&out[..8], &3u64.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(out[8..12].try_into().unwrap()),
            masked_crc32c(&3u64.to_le_bytes())
        );
        assert_eq!(&out[12..15], b"abc");
        // The values TensorBoard's own `masked_crc32c` (tensorflow_stub) gives for these bytes.
        assert_eq!(
            u32::from_le_bytes(out[15..].try_into().unwrap()),
            0x21f1_576e
        );
        assert_eq!(masked_crc32c(&3u64.to_le_bytes()), 0x0e49_99b0);
    }

    #[test]
    fn scalar_event_bytes() {
        let e = Event {
            wall_time_s: 1.5,
            step: 300,
            what: EventKind::Summary(vec![Value::Scalar {
                tag: "a".into(),
                value: 2.0,
            }]),
        };
        let mut want = vec![0x09];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        want.extend_from_slice(&[0x10, 0xAC, 0x02]); // step 300 as a varint
                                                     // summary (field 5) { value (field 1) { tag "a", simple_value 2.0 } }
        want.extend_from_slice(&[0x2A, 10, 0x0A, 8, 0x0A, 1, b'a', 0x15]);
        want.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(e.encode(), want);
    }

    #[test]
    fn file_starts_with_the_version() {
        let f = file(10.0, &[]);
        let len = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
        let data = &f[12..12 + len];
        assert!(data.ends_with(b"brain.Event:2"));
        assert_eq!(f.len(), 12 + len + 4);
    }

    #[test]
    fn long_varints() {
        let mut v = Vec::new();
        varint(&mut v, u64::MAX);
        assert_eq!(v.len(), 10);
        let mut v = Vec::new();
        varint(&mut v, 127);
        assert_eq!(v, [127]);
    }
}
