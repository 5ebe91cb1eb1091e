//! The ROS 2 messages segtool reads and writes, in one place: their Rust types (CDR by
//! serde, field order as in the `.msg` files: CDR has no field names), their `.msg` texts
//! (MCAP's `ros2msg` schemas, with dependencies appended as `rosbag2` writes them), and
//! the CDR encapsulation that bags carry.
//!
//! `uint8[]` fields are [`Bytes`]: a length and the raw bytes, written and read in one
//! piece (serde's default would go element by element through a 2.7 MB 720p frame).

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `builtin_interfaces/msg/Time`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Time {
    pub sec: i32,
    pub nanosec: u32,
}

impl Time {
    /// Nanoseconds since the epoch (MCAP's log and publish times).
    pub fn nanos(self) -> u64 {
        (i64::from(self.sec) * 1_000_000_000 + i64::from(self.nanosec)).max(0) as u64
    }

    /// The time of `nanos` since the epoch.
    pub fn from_nanos(nanos: u64) -> Self {
        Self {
            sec: (nanos / 1_000_000_000) as i32,
            nanosec: (nanos % 1_000_000_000) as u32,
        }
    }
}

/// `std_msgs/msg/Header`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub stamp: Time,
    pub frame_id: String,
}

/// `uint8[]`: serialised as one length and the raw bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.0.len())
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BytesVisitor;
        impl<'de> Visitor<'de> for BytesVisitor {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a uint8[] sequence")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(Bytes(out))
            }
        }
        d.deserialize_byte_buf(BytesVisitor)
    }
}

/// `sensor_msgs/msg/Image`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub header: Header,
    pub height: u32,
    pub width: u32,
    pub encoding: String,
    pub is_bigendian: u8,
    pub step: u32,
    pub data: Bytes,
}

/// `sensor_msgs/msg/CompressedImage`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressedImage {
    pub header: Header,
    pub format: String,
    pub data: Bytes,
}

/// `diagnostic_msgs/msg/KeyValue`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

/// `diagnostic_msgs/msg/DiagnosticStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticStatus {
    /// [`DiagnosticStatus::OK`], `WARN`, `ERROR` or `STALE`.
    pub level: u8,
    pub name: String,
    pub message: String,
    pub hardware_id: String,
    pub values: Vec<KeyValue>,
}

impl DiagnosticStatus {
    pub const OK: u8 = 0;
    pub const WARN: u8 = 1;
    pub const ERROR: u8 = 2;
    pub const STALE: u8 = 3;
}

/// `diagnostic_msgs/msg/DiagnosticArray`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticArray {
    pub header: Header,
    pub status: Vec<DiagnosticStatus>,
}

impl ros2_client::Message for Image {}
impl ros2_client::Message for CompressedImage {}
impl ros2_client::Message for DiagnosticArray {}

/// A message type: its ROS 2 name and its `.msg` text with dependencies.
pub trait RosMessage: Serialize + for<'de> Deserialize<'de> {
    /// `package/msg/Type`.
    const NAME: &'static str;
    /// The `ros2msg` schema text (MCAP, rosbag2).
    fn schema() -> String;
}

const TIME_MSG: &str = "int32 sec\nuint32 nanosec\n";
const HEADER_MSG: &str = "builtin_interfaces/Time stamp\nstring frame_id\n";
const IMAGE_MSG: &str = "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\n\
                         uint8 is_bigendian\nuint32 step\nuint8[] data\n";
const COMPRESSED_IMAGE_MSG: &str = "std_msgs/Header header\nstring format\nuint8[] data\n";
const KEY_VALUE_MSG: &str = "string key\nstring value\n";
const DIAGNOSTIC_STATUS_MSG: &str = "byte OK=0\nbyte WARN=1\nbyte ERROR=2\nbyte STALE=3\n\
                                     byte level\nstring name\nstring message\n\
                                     string hardware_id\ndiagnostic_msgs/KeyValue[] values\n";
const DIAGNOSTIC_ARRAY_MSG: &str =
    "std_msgs/Header header\ndiagnostic_msgs/DiagnosticStatus[] status\n";

/// `main` followed by each dependency, as rosbag2's MCAP writer lays them out.
fn with_dependencies(main: &str, deps: &[(&str, &str)]) -> String {
    let mut out = main.to_string();
    for (name, text) in deps {
        out.push_str(&"=".repeat(80));
        out.push_str(&format!("\nMSG: {name}\n{text}"));
    }
    out
}

const HEADER_DEPS: [(&str, &str); 2] = [
    ("std_msgs/Header", HEADER_MSG),
    ("builtin_interfaces/Time", TIME_MSG),
];

impl RosMessage for Image {
    const NAME: &'static str = "sensor_msgs/msg/Image";
    fn schema() -> String {
        with_dependencies(IMAGE_MSG, &HEADER_DEPS)
    }
}

impl RosMessage for CompressedImage {
    const NAME: &'static str = "sensor_msgs/msg/CompressedImage";
    fn schema() -> String {
        with_dependencies(COMPRESSED_IMAGE_MSG, &HEADER_DEPS)
    }
}

impl RosMessage for DiagnosticArray {
    const NAME: &'static str = "diagnostic_msgs/msg/DiagnosticArray";
    fn schema() -> String {
        let mut deps = HEADER_DEPS.to_vec();
        deps.push(("diagnostic_msgs/DiagnosticStatus", DIAGNOSTIC_STATUS_MSG));
        deps.push(("diagnostic_msgs/KeyValue", KEY_VALUE_MSG));
        with_dependencies(DIAGNOSTIC_ARRAY_MSG, &deps)
    }
}

/// `package/msg/Type` -> (`package`, `Type`), as DDS type names are built from them.
pub fn split_name(name: &str) -> (&str, &str) {
    let (package, rest) = name.split_once('/').unwrap_or(("", name));
    (package, rest.rsplit('/').next().unwrap_or(rest))
}

/// Why bytes are not a message.
#[derive(Debug, thiserror::Error)]
pub enum CdrError {
    #[error("{0} bytes: too short for a CDR encapsulation header")]
    Short(usize),
    #[error("CDR encapsulation {0:#06x} (only plain CDR, little or big endian, is read)")]
    Encapsulation(u16),
    #[error("not a {name}: {reason}")]
    Decode { name: &'static str, reason: String },
}

/// `msg` as a serialised ROS 2 message: the little-endian CDR encapsulation header, then
/// the body (what DDS puts on the wire and bags store).
pub fn encode<M: RosMessage>(msg: &M) -> Vec<u8> {
    let mut out = vec![0x00, 0x01, 0x00, 0x00];
    let body = cdr_encoding::to_vec::<M, byteorder::LittleEndian>(msg)
        .expect("ROS messages of plain fields serialise");
    out.extend_from_slice(&body);
    out
}

/// A serialised ROS 2 message back to `M`.
pub fn decode<M: RosMessage>(bytes: &[u8]) -> Result<M, CdrError> {
    if bytes.len() < 4 {
        return Err(CdrError::Short(bytes.len()));
    }
    let kind = u16::from_be_bytes([bytes[0], bytes[1]]);
    let body = &bytes[4..];
    let decoded = match kind {
        0x0001 => cdr_encoding::from_bytes::<M, byteorder::LittleEndian>(body),
        0x0000 => cdr_encoding::from_bytes::<M, byteorder::BigEndian>(body),
        other => return Err(CdrError::Encapsulation(other)),
    };
    decoded.map(|(m, _)| m).map_err(|e| CdrError::Decode {
        name: M::NAME,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_round_trips_and_its_bytes_are_ros2s_layout() {
        let img = Image {
            header: Header {
                stamp: Time { sec: 7, nanosec: 9 },
                frame_id: "cam".into(),
            },
            height: 1,
            width: 2,
            encoding: "mono8".into(),
            is_bigendian: 0,
            step: 2,
            data: Bytes(vec![5, 6]),
        };
        let bytes = encode(&img);
        // encapsulation, sec, nanosec, "cam\0" with its length, height, width, ...
        assert_eq!(&bytes[..4], &[0, 1, 0, 0]);
        assert_eq!(&bytes[4..12], &[7, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(&bytes[12..20], &[4, 0, 0, 0, b'c', b'a', b'm', 0]);
        assert_eq!(&bytes[bytes.len() - 6..], &[2, 0, 0, 0, 5, 6]);
        assert_eq!(decode::<Image>(&bytes).unwrap(), img);
        assert!(matches!(
            decode::<Image>(&bytes[..3]),
            Err(CdrError::Short(3))
        ));
        assert!(decode::<Image>(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn schemas_name_their_dependencies() {
        let s = DiagnosticArray::schema();
        assert!(s.starts_with("std_msgs/Header header\n"));
        for dep in [
            "MSG: std_msgs/Header",
            "MSG: builtin_interfaces/Time",
            "MSG: diagnostic_msgs/KeyValue",
        ] {
            assert!(s.contains(dep), "{dep}");
        }
        assert_eq!(split_name(Image::NAME), ("sensor_msgs", "Image"));
    }
}
