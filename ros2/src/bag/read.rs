//! The input bag: which MCAP files make it (a folder's: [`super::rosbag2`]), what topics
//! they hold, and their messages in order.
//!
//! A file is checked by its first bytes (MCAP magic; a sqlite3 or zstd file is named as
//! such). Topics come from each file's summary section; a file without one (written
//! without an index) is scanned once for them. Chunk CRCs are checked where written; a
//! record longer than [`MAX_RECORD_BYTES`] is refused as corrupt before anything is
//! allocated for it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use mcap::sans_io::summary_reader::{SummaryReadEvent, SummaryReader, SummaryReaderOptions};
use mcap::sans_io::LinearReaderOptions;

use super::rosbag2::{folder_files, sqlite};
use super::BagError;
use crate::msgs::{CompressedImage, Image, RosMessage};

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// The longest record (a message, a chunk's decompressed content) a bag may hold. The
/// reader allocates a record's declared length before reading it, so without a bound a
/// corrupt length prefix in a 1 kB file asks for terabytes. No camera frame comes near it
/// (8K RGB at 16 bits is 200 MB); a longer record is refused as corrupt.
pub const MAX_RECORD_BYTES: usize = 1 << 30;

fn linear_options() -> LinearReaderOptions {
    LinearReaderOptions::default().with_record_length_limit(MAX_RECORD_BYTES)
}

/// One topic of a bag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    /// Its message type (schema name), or the types when channels of the topic differ.
    pub types: Vec<String>,
    /// Its message encodings (`cdr` from rosbag2).
    pub encodings: Vec<String>,
    /// Messages over all the bag's files.
    pub messages: u64,
}

impl TopicInfo {
    /// Frames are `CompressedImage`s.
    pub fn is_compressed(&self) -> bool {
        self.types.iter().all(|t| t == CompressedImage::NAME)
    }
}

impl fmt::Display for TopicInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types = if self.types.is_empty() {
            "(no schema)".to_string()
        } else {
            self.types.join(" + ")
        };
        write!(f, "{}  {}  ({} messages)", self.name, types, self.messages)
    }
}

/// An MCAP file or rosbag2 folder, opened: its files and topics.
#[derive(Clone, Debug)]
pub struct InputBag {
    path: PathBuf,
    files: Vec<PathBuf>,
    topics: Vec<TopicInfo>,
}

impl InputBag {
    /// Finds the bag's MCAP files and reads their summaries.
    pub fn open(path: &Path) -> Result<Self, BagError> {
        let files = bag_files(path)?;
        let mut topics: BTreeMap<String, TopicInfo> = BTreeMap::new();
        for file in &files {
            for (name, ty, encoding, count) in file_topics(file)? {
                let t = topics.entry(name.clone()).or_insert_with(|| TopicInfo {
                    name,
                    types: Vec::new(),
                    encodings: Vec::new(),
                    messages: 0,
                });
                if !t.types.contains(&ty) && !ty.is_empty() {
                    t.types.push(ty);
                }
                if !t.encodings.contains(&encoding) {
                    t.encodings.push(encoding);
                }
                t.messages += count;
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            files,
            topics: topics.into_values().collect(),
        })
    }

    /// The file or folder as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The MCAP files, in reading order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The topics, by name.
    pub fn topics(&self) -> &[TopicInfo] {
        &self.topics
    }

    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.iter().find(|t| t.name == name)
    }

    /// `name`, checked to be a non-empty camera topic in CDR.
    pub fn image_topic(&self, name: &str) -> Result<&TopicInfo, BagError> {
        let topic = self.topic(name).ok_or_else(|| BagError::TopicNotFound {
            bag: self.path.clone(),
            topic: name.to_string(),
            present: self.topics.clone(),
        })?;
        let not_images = || BagError::NotImages {
            bag: self.path.clone(),
            topic: name.to_string(),
            found: if topic.types.is_empty() {
                "messages without a schema".into()
            } else {
                topic.types.join(" + ")
            },
        };
        let is_camera = |t: &String| t == Image::NAME || t == CompressedImage::NAME;
        if topic.types.len() != 1 || !topic.types.iter().all(is_camera) {
            return Err(not_images());
        }
        if let Some(other) = topic.encodings.iter().find(|e| *e != "cdr") {
            return Err(BagError::Unsupported {
                path: self.path.clone(),
                reason: format!("topic {name} is encoded {other:?}, not cdr"),
            });
        }
        if topic.messages == 0 {
            return Err(BagError::EmptyTopic {
                bag: self.path.clone(),
                topic: name.to_string(),
            });
        }
        Ok(topic)
    }

    /// Refuses an output path that is one of the bag's files.
    pub(crate) fn refuse_as_output(&self, output: &Path) -> Result<(), BagError> {
        let Ok(out) = output.canonicalize() else {
            return Ok(()); // not there yet
        };
        if out.is_dir() {
            return Err(BagError::Unsupported {
                path: output.to_path_buf(),
                reason: "a folder; the output is one .mcap file".into(),
            });
        }
        match self
            .files
            .iter()
            .any(|f| f.canonicalize().ok().as_ref() == Some(&out))
        {
            true => Err(BagError::OutputIsInput(output.to_path_buf())),
            false => Ok(()),
        }
    }

    /// Every message of every file, in order, each owning its bytes.
    pub(crate) fn messages(&self) -> Messages<'_> {
        Messages {
            files: &self.files,
            next_file: 0,
            current: None,
        }
    }
}

/// The messages of a bag's files, one file after the other.
pub(crate) struct Messages<'a> {
    files: &'a [PathBuf],
    next_file: usize,
    current: Option<(PathBuf, mcap::io::MessageReader<BufReader<File>>)>,
}

impl Iterator for Messages<'_> {
    type Item = Result<mcap::Message<'static>, BagError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((path, reader)) = &mut self.current {
                match reader.next() {
                    Some(Ok(m)) => return Some(Ok(m)),
                    Some(Err(source)) => {
                        let path = path.clone();
                        self.next_file = self.files.len();
                        self.current = None;
                        return Some(Err(corrupt(&path, source)));
                    }
                    None => self.current = None,
                }
            }
            let path = self.files.get(self.next_file)?.clone();
            self.next_file += 1;
            match File::open(&path) {
                Ok(f) => {
                    let reader = mcap::io::MessageReader::new_with_options(
                        BufReader::with_capacity(1 << 20, f),
                        linear_options().with_validate_chunk_crcs(true),
                    );
                    self.current = Some((path, reader));
                }
                Err(source) => {
                    self.next_file = self.files.len();
                    return Some(Err(BagError::Io { path, source }));
                }
            }
        }
    }
}

fn corrupt(path: &Path, source: mcap::McapError) -> BagError {
    match source {
        mcap::McapError::Io(source) => BagError::Io {
            path: path.to_path_buf(),
            source,
        },
        source => BagError::Corrupt {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// The MCAP files of the bag at `path`, checked to be MCAP.
fn bag_files(path: &Path) -> Result<Vec<PathBuf>, BagError> {
    if !path.exists() {
        return Err(BagError::Missing(path.to_path_buf()));
    }
    let files = if path.is_dir() {
        folder_files(path)?
    } else {
        vec![path.to_path_buf()]
    };
    for file in &files {
        check_magic(path, file)?;
    }
    Ok(files)
}

/// Checks `file` starts as an MCAP file; `bag` is the input as given (for the advice).
fn check_magic(bag: &Path, file: &Path) -> Result<(), BagError> {
    let mut head = [0u8; 16];
    let mut f = File::open(file).map_err(|source| BagError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    let n = read_up_to(&mut f, &mut head).map_err(|source| BagError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    let head = &head[..n];
    if head.starts_with(mcap::MAGIC) {
        return Ok(());
    }
    if head.starts_with(SQLITE_MAGIC) {
        return Err(sqlite(bag));
    }
    let reason = if head.starts_with(ZSTD_MAGIC) {
        "a zstd-compressed file: decompress it first (`zstd -d`)".to_string()
    } else if n < mcap::MAGIC.len() {
        format!("{n} bytes long")
    } else {
        "it does not start with the MCAP magic bytes".to_string()
    };
    Err(BagError::NotMcap {
        path: file.to_path_buf(),
        reason,
    })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// (topic, type, message encoding, messages) of each channel of `file`.
fn file_topics(file: &Path) -> Result<Vec<(String, String, String, u64)>, BagError> {
    let summary = read_summary(file)?;
    let channel_of = |c: &mcap::Channel| {
        let ty = c
            .schema
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_default();
        (c.topic.clone(), ty, c.message_encoding.clone())
    };
    if let Some(summary) = summary.filter(|s| s.stats.is_some()) {
        let counts = &summary
            .stats
            .as_ref()
            .expect("filtered on")
            .channel_message_counts;
        return Ok(summary
            .channels
            .values()
            .map(|c| {
                let (topic, ty, enc) = channel_of(c);
                (topic, ty, enc, counts.get(&c.id).copied().unwrap_or(0))
            })
            .collect());
    }
    // No index: one pass over the messages.
    let f = File::open(file).map_err(|source| BagError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    let mut seen: HashMap<u16, ((String, String, String), u64)> = HashMap::new();
    let reader = mcap::io::MessageReader::new_with_options(
        BufReader::with_capacity(1 << 20, f),
        linear_options(),
    );
    for message in reader {
        let m = message.map_err(|e| corrupt(file, e))?;
        seen.entry(m.channel.id)
            .or_insert_with(|| (channel_of(&m.channel), 0))
            .1 += 1;
    }
    Ok(seen
        .into_values()
        .map(|((topic, ty, enc), n)| (topic, ty, enc, n))
        .collect())
}

/// The summary section of `file`, if it has one.
fn read_summary(file: &Path) -> Result<Option<mcap::Summary>, BagError> {
    let io = |source| BagError::Io {
        path: file.to_path_buf(),
        source,
    };
    let mut f = File::open(file).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let mut reader = SummaryReader::new_with_options(
        SummaryReaderOptions::default()
            .with_file_size(size)
            .with_record_length_limit(MAX_RECORD_BYTES),
    );
    while let Some(event) = reader.next_event() {
        match event.map_err(|e| corrupt(file, e))? {
            SummaryReadEvent::ReadRequest(n) => {
                let read = f.read(reader.insert(n)).map_err(io)?;
                reader.notify_read(read);
            }
            SummaryReadEvent::SeekRequest(to) => {
                let pos = f.seek(to).map_err(io)?;
                reader.notify_seeked(pos);
            }
        }
    }
    Ok(reader.finish())
}
