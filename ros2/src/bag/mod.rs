//! Bags in, bags out: every camera frame of one topic of a ROS 2 bag segmented into an
//! MCAP bag of masks, offline, frame by frame, none dropped, in the order the bag holds
//! them (rosbag2 writes messages as they arrive; a split bag's files one after the other).
//!
//! Accepts an MCAP file (`.mcap`) or a rosbag2 folder whose `metadata.yaml` names MCAP
//! files (several, for a split bag: read in the order listed); a folder without
//! `metadata.yaml` is read as its `.mcap` files in name order. The topic must carry
//! `sensor_msgs/msg/Image` or `sensor_msgs/msg/CompressedImage` in CDR (what rosbag2
//! records). Refuses, naming the file and what to do: a sqlite3 bag (`.db3`; the
//! conversion command is in the error), a rosbag2 bag compressed per file or per message
//! (`compression_mode` FILE or MESSAGE), a file that is not MCAP, a truncated or corrupt
//! MCAP (`mcap recover` rescues it), a topic the bag does not have (the error lists the
//! topics it has, with their types) or of another type, and an output topic that would
//! collide with a copied input topic.
//!
//! Out: one MCAP file, profile `ros2`, schemas `ros2msg` (the `.msg` texts of [`msgs`]),
//! messages `cdr`, with three `sensor_msgs/msg/Image` topics under the input topic's
//! namespace ([`OutputTopics`]): `class_mask` (mono8 class ids), `color_mask` (rgb8 in the
//! model's palette) and `overlay` (rgb8, the frame blended with the palette). Each mask
//! carries its frame's header (so its stamp) and is logged at the frame's log and publish
//! times, with its sequence number. With [`ConvertOptions::copy_input`], every message of
//! the input bag (all topics: what `ros2 bag play` and Foxglove want next to the masks) is
//! carried through byte for byte: same schema, same bytes, same times, in input order,
//! each frame right before its masks.
//!
//! Bad frames (an unknown encoding, a cut-off data array, a corrupt JPEG, undecodable
//! CDR: [`BadFrame`]) get no masks and do not stop the run: the [`Report`] counts them per
//! cause with the first example, so a long recording with a few damaged frames still
//! gives its bag. Only a topic with no good frame at all fails ([`BagError::NoGoodFrame`]).
//! A model failure, a read or write error, or a stop request fails the run.
//!
//! Nothing half-written is left under the output's name: the bag is written to
//! `.NAME.tmp-PID` beside it (the project's temporary name, see [`segtool_runtime::io`]),
//! synced, and renamed over the output only when complete; an error or a stop removes it,
//! and temporary files of the same output left by a killed run are removed at the next
//! start. A stop request ([`convert`]'s `stop` flag, which the binary sets on Ctrl-C) is
//! honoured between frames.
//!
//! [`BadFrame`]: crate::frames::BadFrame
//! [`msgs`]: crate::msgs

mod read;
mod rosbag2;
mod stages;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use segtool_runtime::progress::Progress;
use segtool_runtime::{RuntimeError, Segmenter};

use stages::{read_stage, render_stage, write_stage, Render, Run, Tally};

pub use read::{InputBag, TopicInfo};

/// What to convert, and how.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// An MCAP file or a rosbag2 folder.
    pub input: PathBuf,
    /// The camera topic (`sensor_msgs/msg/Image` or `CompressedImage`).
    pub topic: String,
    /// The MCAP file to write (replaced if it exists, once the new one is complete).
    pub output: PathBuf,
    /// The namespace of the three mask topics; `None`: the input topic's (see
    /// [`OutputTopics::for_input`]).
    pub prefix: Option<String>,
    /// Carry every message of the input through, byte for byte.
    pub copy_input: bool,
    /// Chunk compression of the output.
    pub compression: Compression,
    /// The overlay's blend: 0 is the frame, 1 the palette.
    pub alpha: f32,
}

impl ConvertOptions {
    /// `topic` of `input` into `output`: masks only, zstd chunks, the runtime's alpha.
    pub fn new(input: impl Into<PathBuf>, topic: &str, output: impl Into<PathBuf>) -> Self {
        Self {
            input: input.into(),
            topic: topic.to_string(),
            output: output.into(),
            prefix: None,
            copy_input: false,
            compression: Compression::Zstd,
            alpha: segtool_runtime::DEFAULT_ALPHA,
        }
    }
}

/// Chunk compression of the output bag (rosbag2 and Foxglove read all three).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    None,
    #[default]
    Zstd,
    Lz4,
}

/// The three output topics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputTopics {
    pub class_mask: String,
    pub color_mask: String,
    pub overlay: String,
}

impl OutputTopics {
    /// Under `namespace` (`/seg` -> `/seg/class_mask`; `/` -> `/class_mask`). A namespace
    /// without the leading slash gets one (bag topics are absolute). Refuses empty levels
    /// (`//`) and characters ROS names do not allow.
    pub fn under(namespace: &str) -> Result<Self, BagError> {
        let ns = namespace.trim_end_matches('/');
        let ns = if ns.starts_with('/') || ns.is_empty() {
            ns.to_string()
        } else {
            format!("/{ns}")
        };
        let valid = ns.split('/').skip(1).all(|level| {
            !level.is_empty() && level.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        match valid {
            true => Ok(Self::in_namespace(&ns)),
            false => Err(BagError::Prefix(namespace.to_string())),
        }
    }

    /// Beside the camera's topic: under its parent namespace (`/cam/image_raw` ->
    /// `/cam/class_mask`). A compressed topic is image_transport's `BASE/compressed`, so
    /// its masks go beside `BASE` (`/cam/image_raw/compressed` -> `/cam/class_mask`).
    pub fn for_input(topic: &str, compressed: bool) -> Self {
        let mut base = topic.trim_end_matches('/');
        if compressed {
            base = base.strip_suffix("/compressed").unwrap_or(base);
        }
        let parent = base.rsplit_once('/').map_or("", |(parent, _)| parent);
        Self::in_namespace(parent)
    }

    fn in_namespace(ns: &str) -> Self {
        Self {
            class_mask: format!("{ns}/class_mask"),
            color_mask: format!("{ns}/color_mask"),
            overlay: format!("{ns}/overlay"),
        }
    }

    /// The three names, in writing order.
    pub fn all(&self) -> [&str; 3] {
        [&self.class_mask, &self.color_mask, &self.overlay]
    }
}

/// Frames with one cause of failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadFrames {
    /// [`BadFrame::cause`](crate::frames::BadFrame::cause).
    pub cause: String,
    pub count: u64,
    /// The first one: its index among the topic's messages, its log time and the detail.
    pub first: String,
}

/// What a conversion did.
#[derive(Clone, Debug)]
pub struct Report {
    pub output: PathBuf,
    pub topics: OutputTopics,
    /// Messages on the camera topic.
    pub frames: u64,
    /// Frames that got their three masks.
    pub segmented: u64,
    /// The others, per cause (most frequent first).
    pub bad: Vec<BadFrames>,
    /// Input messages carried through (`copy_input`).
    pub copied: u64,
    /// The whole run.
    pub elapsed: Duration,
    /// Of which in [`Segmenter::segment`] (the model's share).
    pub segmenting: Duration,
}

/// Why a conversion failed. Each names the file (or topic) and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum BagError {
    #[error("{0}: no such file or folder")]
    Missing(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an MCAP file ({reason})")]
    NotMcap { path: PathBuf, reason: String },
    #[error(
        "{path}: a sqlite3 (.db3) bag; this tool reads MCAP bags. Convert it first, with ROS 2:\n\
         \x20 printf 'output_bags:\\n- uri: %s\\n  storage_id: mcap\\n  all: true\\n' {mcap} > to_mcap.yaml\n\
         \x20 ros2 bag convert -i {bag} -o to_mcap.yaml\n\
         or without ROS 2 (pip install rosbags):\n\
         \x20 rosbags-convert --src {bag} --dst {mcap} --dst-storage mcap\n\
         then pass {mcap} as the input"
    )]
    Sqlite {
        path: PathBuf,
        bag: String,
        mcap: String,
    },
    #[error("{path}: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error(
        "{path}: truncated or corrupt MCAP ({source}); `mcap recover {path} -o recovered.mcap` \
         (the mcap CLI) rescues the messages before the damage"
    )]
    Corrupt {
        path: PathBuf,
        source: mcap::McapError,
    },
    #[error("topic {topic} is not in {bag}; its topics:\n{}", list_topics(.present))]
    TopicNotFound {
        bag: PathBuf,
        topic: String,
        present: Vec<TopicInfo>,
    },
    #[error(
        "topic {topic} of {bag} carries {found}, not sensor_msgs/msg/Image or \
         sensor_msgs/msg/CompressedImage"
    )]
    NotImages {
        bag: PathBuf,
        topic: String,
        found: String,
    },
    #[error("topic {topic} of {bag} has no messages")]
    EmptyTopic { bag: PathBuf, topic: String },
    #[error("--prefix {0:?}: not a ROS namespace (levels of letters, digits and _)")]
    Prefix(String),
    #[error(
        "output topic {0} is also a topic of the input, which copy_input carries through: \
         choose another namespace (--prefix)"
    )]
    TopicClash(String),
    #[error("{0}: the output would overwrite the input")]
    OutputIsInput(PathBuf),
    #[error("{path}: writing the bag: {source}")]
    Write {
        path: PathBuf,
        source: mcap::McapError,
    },
    #[error("frame {index} of {topic} (log time {log_time} ns): the model failed: {source}")]
    Segment {
        topic: String,
        index: u64,
        log_time: u64,
        source: RuntimeError,
    },
    #[error("no frame of {topic} could be segmented:\n{}", list_bad(.bad))]
    NoGoodFrame { topic: String, bad: Vec<BadFrames> },
    #[error("stopped after {done} of {total} frames; {output} not written")]
    Stopped {
        done: u64,
        total: u64,
        output: PathBuf,
    },
}

fn list_topics(topics: &[TopicInfo]) -> String {
    if topics.is_empty() {
        return "  (none: the bag has no channels)".into();
    }
    let lines: Vec<String> = topics.iter().map(|t| format!("  {t}")).collect();
    lines.join("\n")
}

fn list_bad(bad: &[BadFrames]) -> String {
    let lines: Vec<String> = bad
        .iter()
        .map(|b| format!("  {} x {}; first: {}", b.count, b.cause, b.first))
        .collect();
    lines.join("\n")
}

/// Segments every frame of `options.topic` with `segmenter` into `options.output`:
/// [`Conversion::prepare`], then [`Conversion::run`].
pub fn convert(
    options: &ConvertOptions,
    segmenter: &mut Segmenter,
    progress: &dyn Progress,
    stop: &AtomicBool,
) -> Result<Report, BagError> {
    Conversion::prepare(options.clone())?.run(segmenter, progress, stop)
}

/// A conversion checked before any model is loaded: the bag opened, the topic found to
/// be a camera's, the output topics named and the output path allowed.
#[derive(Debug)]
pub struct Conversion {
    options: ConvertOptions,
    bag: InputBag,
    topics: OutputTopics,
    frames: u64,
}

impl Conversion {
    /// Opens the bag and checks everything that does not need the model.
    pub fn prepare(options: ConvertOptions) -> Result<Self, BagError> {
        let bag = InputBag::open(&options.input)?;
        let topic = bag.image_topic(&options.topic)?;
        let topics = match &options.prefix {
            Some(prefix) => OutputTopics::under(prefix)?,
            None => OutputTopics::for_input(&topic.name, topic.is_compressed()),
        };
        if options.copy_input {
            if let Some(clash) = topics.all().into_iter().find(|t| bag.topic(t).is_some()) {
                return Err(BagError::TopicClash(clash.to_string()));
            }
        }
        bag.refuse_as_output(&options.output)?;
        let frames = topic.messages;
        Ok(Self {
            options,
            bag,
            topics,
            frames,
        })
    }

    pub fn bag(&self) -> &InputBag {
        &self.bag
    }

    pub fn topics(&self) -> &OutputTopics {
        &self.topics
    }

    /// Messages on the camera topic, as the bag's index counts them.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Segments every frame. Four stages overlap: a thread reads the bag and decodes the
    /// frames, the caller's thread runs the model (the segmenter stays where it was
    /// built), a thread draws and serialises the masks, a thread writes them. Progress:
    /// one loop `bag` over the topic's frames, a status message counting bad frames, a
    /// line at the first bad frame of each cause. `stop` is polled between frames.
    pub fn run(
        self,
        segmenter: &mut Segmenter,
        progress: &dyn Progress,
        stop: &AtomicBool,
    ) -> Result<Report, BagError> {
        let started = Instant::now();
        let Self {
            options,
            bag,
            topics,
            frames: total,
        } = self;
        let options = &options;
        let mut out = write::OutputBag::create(&options.output, options.compression)?;
        let channels = out.mask_channels(&topics)?;
        let render = Render {
            palette: segmenter.spec().palette.clone(),
            alpha: options.alpha,
        };
        progress.start("bag", total, 0);
        let mut run = Run {
            options,
            total,
            progress,
            stop,
            tally: Tally::default(),
        };
        let copy = options.copy_input;
        std::thread::scope(|scope| -> Result<(), BagError> {
            let (input_tx, input_rx) = sync_channel(4);
            let (segmented_tx, segmented_rx) = sync_channel(4);
            let (rendered_tx, rendered_rx) = sync_channel(4);
            scope.spawn(|| read_stage(&bag, &options.topic, copy, stop, input_tx));
            scope.spawn(|| render_stage(&render, segmented_rx, rendered_tx));
            let writer = scope.spawn(|| write_stage(&mut out, &channels, copy, rendered_rx));
            let segmented = run.segment_stage(segmenter, input_rx, segmented_tx);
            // A failed write ends the segmenting stage too: the writer's error is the cause.
            let written = writer.join().expect("the writing stage does not panic");
            written.and(segmented)
        })?;
        let tally = run.tally;
        let bad = tally.bad();
        if tally.segmented == 0 {
            return Err(BagError::NoGoodFrame {
                topic: options.topic.clone(),
                bad,
            });
        }
        out.finish()?;
        progress.finish(Some(format!("{} frames segmented", tally.segmented)));
        Ok(Report {
            output: options.output.clone(),
            topics,
            frames: tally.frames,
            segmented: tally.segmented,
            bad,
            copied: tally.copied,
            elapsed: started.elapsed(),
            segmenting: tally.segmenting,
        })
    }
}

/// `dir/.NAME.tmp-PID`: the output's temporary sibling for this process.
pub(crate) fn temp_path(output: &Path) -> PathBuf {
    segtool_runtime::io::temp_path(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_go_beside_the_camera_or_under_the_prefix() {
        let names = |t: OutputTopics| t.all().map(String::from);
        assert_eq!(
            names(OutputTopics::for_input("/cam/image_raw", false)),
            ["/cam/class_mask", "/cam/color_mask", "/cam/overlay"]
        );
        let compressed = OutputTopics::for_input("/cam/image_raw/compressed", true);
        assert_eq!(compressed.class_mask, "/cam/class_mask");
        // Only image_transport's suffix is taken off, and only from a compressed topic.
        assert_eq!(
            OutputTopics::for_input("/a/compressed", false).overlay,
            "/a/overlay"
        );
        assert_eq!(
            OutputTopics::for_input("/image", false).class_mask,
            "/class_mask"
        );
        assert_eq!(
            OutputTopics::under("seg/").unwrap().color_mask,
            "/seg/color_mask"
        );
        assert_eq!(OutputTopics::under("/").unwrap().class_mask, "/class_mask");
        for bad in ["/a//b", "/a b", "/cam-1"] {
            assert!(
                matches!(OutputTopics::under(bad), Err(BagError::Prefix(_))),
                "{bad}"
            );
        }
    }
}
