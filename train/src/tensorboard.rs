//! TensorBoard event files, written without TensorFlow: TFRecord framing (length, masked
//! CRC-32C of the length, payload, masked CRC-32C of the payload) around `Event`
//! protobuf messages (tensorflow/core/util/event.proto, summary.proto, tensor.proto,
//! with only the fields used here), encoded with prost.
//!
//! One [`EventWriter`] writes one `events.out.tfevents.<secs>.<host>.<pid>.<n>` file. A
//! resumed run opens a new file in the same directory whose first event after the version
//! record is a `SessionLog START` at the first iteration it will run: TensorBoard's
//! reader then drops whatever the interrupted run had logged from that step on, and the
//! two files read as one continuous run (as PyTorch's `SummaryWriter(purge_step=...)`).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

/// Event-file name prefix; TensorBoard reads files whose name contains `tfevents`.
pub const FILE_PREFIX: &str = "events.out.tfevents.";

/// The protobuf messages (field numbers as in TensorFlow's .proto files).
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(double, tag = "1")]
        pub wall_time: f64,
        #[prost(int64, tag = "2")]
        pub step: i64,
        #[prost(oneof = "What", tags = "3, 5, 7")]
        pub what: Option<What>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum What {
        #[prost(string, tag = "3")]
        FileVersion(String),
        #[prost(message, tag = "5")]
        Summary(Summary),
        /// Field 7 (6 is the deprecated `log_message`).
        #[prost(message, tag = "7")]
        SessionLog(SessionLog),
    }

    /// `SessionLog.SessionStatus.START`.
    pub const SESSION_START: i32 = 1;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SessionLog {
        #[prost(int32, tag = "1")]
        pub status: i32,
        #[prost(string, tag = "2")]
        pub checkpoint_path: String,
        #[prost(string, tag = "3")]
        pub msg: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Summary {
        #[prost(message, repeated, tag = "1")]
        pub value: Vec<Value>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Value {
        #[prost(string, tag = "1")]
        pub tag: String,
        #[prost(message, optional, tag = "9")]
        pub metadata: Option<SummaryMetadata>,
        #[prost(oneof = "Kind", tags = "2, 4, 8")]
        pub value: Option<Kind>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(float, tag = "2")]
        SimpleValue(f32),
        #[prost(message, tag = "4")]
        Image(Image),
        #[prost(message, tag = "8")]
        Tensor(TensorProto),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Image {
        #[prost(int32, tag = "1")]
        pub height: i32,
        #[prost(int32, tag = "2")]
        pub width: i32,
        /// 3: RGB.
        #[prost(int32, tag = "3")]
        pub colorspace: i32,
        /// PNG bytes.
        #[prost(bytes = "vec", tag = "4")]
        pub encoded_image_string: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SummaryMetadata {
        #[prost(message, optional, tag = "1")]
        pub plugin_data: Option<PluginData>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PluginData {
        #[prost(string, tag = "1")]
        pub plugin_name: String,
        #[prost(bytes = "vec", tag = "2")]
        pub content: Vec<u8>,
    }

    /// `DataType.DT_STRING`.
    pub const DT_STRING: i32 = 7;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorProto {
        #[prost(int32, tag = "1")]
        pub dtype: i32,
        #[prost(message, optional, tag = "2")]
        pub tensor_shape: Option<TensorShapeProto>,
        #[prost(bytes = "vec", repeated, tag = "8")]
        pub string_val: Vec<Vec<u8>>,
    }

    /// No dimensions: a scalar.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorShapeProto {}
}

use proto::{Event, Kind, Summary, Value, What};

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
pub fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, entry) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0x82F6_3B78 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *entry = c;
        }
        t
    });
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// TFRecord's masked CRC: rotated right by 15 bits plus a constant.
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord: length, its masked CRC, the payload, its masked CRC.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(payload.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&masked_crc(payload).to_le_bytes());
    out
}

/// Reads back the events of one file, checking both CRCs of every record.
pub fn read_events(path: &Path) -> Result<Vec<Event>> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .with_context(|| format!("reading {}", path.display()))?;
    let mut events = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes.len() - at < 12 {
            bail!("{}: truncated record header at byte {at}", path.display());
        }
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        if crc != masked_crc(len_bytes) {
            bail!("{}: bad length CRC at byte {at}", path.display());
        }
        let start = at + 12;
        if bytes.len() < start + len + 4 {
            bail!("{}: truncated record at byte {at}", path.display());
        }
        let payload = &bytes[start..start + len];
        let crc = u32::from_le_bytes(bytes[start + len..start + len + 4].try_into().unwrap());
        if crc != masked_crc(payload) {
            bail!("{}: bad payload CRC at byte {at}", path.display());
        }
        events.push(
            <Event as prost::Message>::decode(payload)
                .with_context(|| format!("{}: record at byte {at}", path.display()))?,
        );
        at = start + len + 4;
    }
    Ok(events)
}

/// The event files of `dir`, in the order TensorBoard reads them (by name).
pub fn event_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(FILE_PREFIX))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or_else(|| "localhost".into())
}

/// Appends events to one event file; buffered until [`EventWriter::flush`].
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// A new event file in `dir`. `resume_at`: the first step this writer will log
    /// after a resume; TensorBoard drops the older files' events from that step on.
    /// The name's time field is past every existing file's, so TensorBoard reads the
    /// files in the order they were written.
    pub fn create(dir: &Path, resume_at: Option<u64>) -> Result<Self> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let mut secs = now() as u64;
        for f in event_files(dir)? {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let field = name[FILE_PREFIX.len()..].split('.').next().unwrap_or("");
            if let Ok(t) = field.parse::<u64>() {
                secs = secs.max(t + 1);
            }
        }
        let name = format!(
            "{FILE_PREFIX}{secs:010}.{}.{}.{}",
            host_name(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut writer = Self {
            path,
            out: BufWriter::new(file),
        };
        writer.write(Event {
            wall_time: now(),
            step: resume_at.unwrap_or(0) as i64,
            what: Some(What::FileVersion("brain.Event:2".into())),
        })?;
        if let Some(step) = resume_at {
            writer.write(Event {
                wall_time: now(),
                step: step as i64,
                what: Some(What::SessionLog(proto::SessionLog {
                    status: proto::SESSION_START,
                    ..Default::default()
                })),
            })?;
        }
        writer.flush()?;
        Ok(writer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, event: Event) -> Result<()> {
        let payload = prost::Message::encode_to_vec(&event);
        self.out
            .write_all(&frame(&payload))
            .with_context(|| format!("writing {}", self.path.display()))
    }

    fn summary(&mut self, step: u64, value: Vec<Value>) -> Result<()> {
        self.write(Event {
            wall_time: now(),
            step: step as i64,
            what: Some(What::Summary(Summary { value })),
        })
    }

    /// Scalars at one step, in one event.
    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let value = values
            .iter()
            .map(|(tag, v)| Value {
                tag: tag.clone(),
                metadata: None,
                value: Some(Kind::SimpleValue(*v as f32)),
            })
            .collect();
        self.summary(step, value)
    }

    /// An RGB image (PNG bytes of a `width` x `height` picture).
    pub fn image(
        &mut self,
        tag: &str,
        step: u64,
        png: Vec<u8>,
        width: u32,
        height: u32,
    ) -> Result<()> {
        self.summary(
            step,
            vec![Value {
                tag: tag.into(),
                metadata: None,
                value: Some(Kind::Image(proto::Image {
                    height: height as i32,
                    width: width as i32,
                    colorspace: 3,
                    encoded_image_string: png,
                })),
            }],
        )
    }

    /// Text (TensorBoard's text plugin renders it as Markdown).
    pub fn text(&mut self, tag: &str, step: u64, text: &str) -> Result<()> {
        self.summary(
            step,
            vec![Value {
                tag: tag.into(),
                metadata: Some(proto::SummaryMetadata {
                    plugin_data: Some(proto::PluginData {
                        plugin_name: "text".into(),
                        content: Vec::new(),
                    }),
                }),
                value: Some(Kind::Tensor(proto::TensorProto {
                    dtype: proto::DT_STRING,
                    tensor_shape: Some(proto::TensorShapeProto {}),
                    string_val: vec![text.as_bytes().to_vec()],
                })),
            }],
        )
    }

    /// Pushes what is buffered to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .with_context(|| format!("flushing {}", self.path.display()))
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_values() {
        // RFC 3720 B.4 test vectors.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
    }

    #[test]
    fn writes_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path(), None).unwrap();
        w.scalars(10, &[("train/loss".into(), 0.5)]).unwrap();
        w.text("config", 0, "a = 1").unwrap();
        w.flush().unwrap();
        let mut r = EventWriter::create(dir.path(), Some(11)).unwrap();
        r.scalars(11, &[("train/loss".into(), 0.25)]).unwrap();
        drop(r);
        let files = event_files(dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        let first = read_events(&files[0]).unwrap();
        assert_eq!(
            first[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        let Some(What::Summary(s)) = &first[1].what else {
            panic!("no summary")
        };
        assert_eq!((first[1].step, s.value[0].tag.as_str()), (10, "train/loss"));
        assert_eq!(s.value[0].value, Some(Kind::SimpleValue(0.5)));
        let second = read_events(&files[1]).unwrap();
        assert!(matches!(
            &second[1].what,
            Some(What::SessionLog(l)) if l.status == proto::SESSION_START
        ));
        assert_eq!(second[1].step, 11);
    }
}
