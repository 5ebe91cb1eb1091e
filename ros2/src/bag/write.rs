//! The output bag: an MCAP writer on a temporary file that becomes the output only once
//! complete.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcap::records::MessageHeader;

use super::{BagError, Compression, OutputTopics};
use crate::msgs::{Image, RosMessage};

/// The temporary file: removed when dropped, unless `kept` (renamed to the output).
struct TempFile {
    path: PathBuf,
    kept: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.kept {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The channel ids of the three mask topics.
pub(super) struct MaskChannels {
    class_mask: u16,
    color_mask: u16,
    overlay: u16,
}

/// An MCAP being written to `.NAME.tmp-PID` beside `output`.
pub(super) struct OutputBag {
    // Dropped before `temp`: the writer closes its file, then the file goes.
    writer: Option<mcap::Writer<BufWriter<File>>>,
    temp: TempFile,
    output: PathBuf,
    /// Input channel, by address (the reader keeps one `Arc` per channel of each input
    /// file; held here so that no other channel takes its address) -> output channel id.
    copied: HashMap<usize, (Arc<mcap::Channel<'static>>, u16)>,
}

impl OutputBag {
    /// Starts `output`'s temporary file (creating its folder), after removing the
    /// temporary files of the same output that dead processes left.
    pub fn create(output: &Path, compression: Compression) -> Result<Self, BagError> {
        let io = |source| BagError::Io {
            path: output.to_path_buf(),
            source,
        };
        if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io)?;
        }
        remove_stale_temps(output);
        let path = super::temp_path(output);
        let file = File::create(&path).map_err(|source| BagError::Io {
            path: path.clone(),
            source,
        })?;
        let temp = TempFile { path, kept: false };
        let options = mcap::WriteOptions::new()
            .profile("ros2")
            .library(format!("segtool-ros2/{}", env!("CARGO_PKG_VERSION")))
            .compression(match compression {
                Compression::None => None,
                Compression::Zstd => Some(mcap::Compression::Zstd),
                Compression::Lz4 => Some(mcap::Compression::Lz4),
            });
        let writer = options
            .create(BufWriter::with_capacity(1 << 20, file))
            .map_err(|e| write_error(output, e))?;
        Ok(Self {
            writer: Some(writer),
            temp,
            output: output.to_path_buf(),
            copied: HashMap::new(),
        })
    }

    fn writer(&mut self) -> &mut mcap::Writer<BufWriter<File>> {
        self.writer.as_mut().expect("written until finished")
    }

    /// Adds the `sensor_msgs/msg/Image` schema and the three mask channels.
    pub fn mask_channels(&mut self, topics: &OutputTopics) -> Result<MaskChannels, BagError> {
        let output = self.output.clone();
        let w = self.writer();
        let e = |e| write_error(&output, e);
        let schema = w
            .add_schema(Image::NAME, "ros2msg", Image::schema().as_bytes())
            .map_err(e)?;
        let mut channel = |topic: &str| {
            w.add_channel(schema, topic, "cdr", &BTreeMap::new())
                .map_err(e)
        };
        Ok(MaskChannels {
            class_mask: channel(&topics.class_mask)?,
            color_mask: channel(&topics.color_mask)?,
            overlay: channel(&topics.overlay)?,
        })
    }

    /// Writes `message` as it was: same schema, channel, bytes, sequence and times.
    pub fn copy(&mut self, message: &mcap::Message<'static>) -> Result<(), BagError> {
        let key = Arc::as_ptr(&message.channel) as usize;
        let id = match self.copied.get(&key) {
            Some((_, id)) => *id,
            None => {
                let id = self.add_copied_channel(&message.channel)?;
                self.copied.insert(key, (message.channel.clone(), id));
                id
            }
        };
        let header = MessageHeader {
            channel_id: id,
            sequence: message.sequence,
            log_time: message.log_time,
            publish_time: message.publish_time,
        };
        let output = self.output.clone();
        self.writer()
            .write_to_known_channel(&header, &message.data)
            .map_err(|e| write_error(&output, e))
    }

    fn add_copied_channel(&mut self, channel: &mcap::Channel<'static>) -> Result<u16, BagError> {
        let output = self.output.clone();
        let w = self.writer();
        let schema = match &channel.schema {
            Some(s) => w.add_schema(&s.name, &s.encoding, &s.data),
            None => Ok(0),
        };
        schema
            .and_then(|schema| {
                w.add_channel(
                    schema,
                    &channel.topic,
                    &channel.message_encoding,
                    &channel.metadata,
                )
            })
            .map_err(|e| write_error(&output, e))
    }

    /// The three masks of the frame `input`: class, colour, overlay, at its times.
    pub fn write_masks(
        &mut self,
        channels: &MaskChannels,
        input: &mcap::Message<'static>,
        masks: &[Vec<u8>; 3],
    ) -> Result<(), BagError> {
        let output = self.output.clone();
        let w = self.writer();
        for (channel_id, data) in [channels.class_mask, channels.color_mask, channels.overlay]
            .into_iter()
            .zip(masks)
        {
            let header = MessageHeader {
                channel_id,
                sequence: input.sequence,
                log_time: input.log_time,
                publish_time: input.publish_time,
            };
            w.write_to_known_channel(&header, data)
                .map_err(|e| write_error(&output, e))?;
        }
        Ok(())
    }

    /// Writes the summary, syncs, and renames the temporary file over the output.
    pub fn finish(mut self) -> Result<(), BagError> {
        let mut writer = self.writer.take().expect("finished once");
        writer.finish().map_err(|e| write_error(&self.output, e))?;
        let io = |source| BagError::Io {
            path: self.output.clone(),
            source,
        };
        let file = writer
            .into_inner()
            .into_inner()
            .map_err(|e| e.into_error())
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        fs::rename(&self.temp.path, &self.output).map_err(io)?;
        self.temp.kept = true;
        // The rename reaches the disk with its folder.
        let dir = match self.output.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => dir.to_path_buf(),
            None => PathBuf::from("."),
        };
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)
    }
}

fn write_error(output: &Path, source: mcap::McapError) -> BagError {
    match source {
        mcap::McapError::Io(source) => BagError::Io {
            path: output.to_path_buf(),
            source,
        },
        source => BagError::Write {
            path: output.to_path_buf(),
            source,
        },
    }
}

/// Removes `.NAME.tmp-PID` files of `output` whose process is gone (a run killed before
/// it could clean up). Best effort: what cannot be read or removed stays.
fn remove_stale_temps(output: &Path) {
    let ours = super::temp_path(output);
    let Some(ours_name) = ours.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let Some(prefix) = ours_name.rsplit_once('-').map(|(p, _)| format!("{p}-")) else {
        return;
    };
    let dir = match ours.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => PathBuf::from("."),
    };
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true // cannot tell: leave the file
}
