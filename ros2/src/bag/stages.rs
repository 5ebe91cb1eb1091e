//! The four stages of a conversion, joined by bounded channels: reading and decoding (a
//! thread), the model (the caller's thread, where the segmenter was built), drawing and
//! serialising the masks (a thread), writing and compressing (a thread). Everything moves
//! in input order; the masks of a frame follow it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use image::RgbImage;
use segtool_runtime::progress::Progress;
use segtool_runtime::Segmenter;

use super::read::InputBag;
use super::write::{MaskChannels, OutputBag};
use super::{BadFrames, BagError, ConvertOptions};
use crate::frames::{self, BadFrame};
use crate::msgs::{self, CompressedImage, Header, Image, RosMessage};

/// A message of the input, in file order, as the segmenting stage needs it.
pub(super) enum Input {
    /// A frame of the camera topic: its header and image, or (cause, detail).
    Frame {
        message: mcap::Message<'static>,
        frame: Result<(Header, RgbImage), (String, String)>,
    },
    /// A message of another topic, to be copied.
    Other(mcap::Message<'static>),
}

/// What the segmenting stage hands on, in order.
pub(super) enum Segmented {
    Copy(mcap::Message<'static>),
    Masks {
        message: mcap::Message<'static>,
        header: Header,
        image: RgbImage,
        mask: segtool_runtime::ClassMap,
    },
}

/// Reads the bag and decodes the camera's frames. Ends at the first error (sent on), on
/// `stop`, or when the segmenting stage hangs up.
pub(super) fn read_stage(
    bag: &InputBag,
    topic: &str,
    copy_input: bool,
    stop: &AtomicBool,
    tx: SyncSender<Result<Input, BagError>>,
) {
    for message in bag.messages() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let item = match message {
            Ok(m) if m.channel.topic == topic => {
                let schema = m.channel.schema.as_ref().map_or("", |s| s.name.as_str());
                let frame = decode_frame(schema, &m.data);
                Ok(Input::Frame { message: m, frame })
            }
            Ok(_) if !copy_input => continue,
            Ok(m) => Ok(Input::Other(m)),
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        if tx.send(item).is_err() || failed {
            return;
        }
    }
}

/// A camera message to its header and RGB image, or (cause, detail).
fn decode_frame(schema: &str, data: &[u8]) -> Result<(Header, RgbImage), (String, String)> {
    let bad = |e: BadFrame| (e.cause().to_string(), e.to_string());
    let cdr = |e: msgs::CdrError| bad(BadFrame::Undecodable(e.to_string()));
    if schema == CompressedImage::NAME {
        let msg: CompressedImage = msgs::decode(data).map_err(cdr)?;
        let rgb = frames::compressed_to_rgb(&msg).map_err(bad)?;
        Ok((msg.header, rgb))
    } else {
        let msg: Image = msgs::decode(data).map_err(cdr)?;
        let rgb = frames::image_to_rgb(&msg).map_err(bad)?;
        Ok((msg.header, rgb))
    }
}

/// Counts of the run.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) frames: u64,
    pub(super) segmented: u64,
    pub(super) copied: u64,
    pub(super) segmenting: Duration,
    /// cause -> (count, first example).
    pub(super) bad: BTreeMap<String, (u64, String)>,
}

impl Tally {
    pub(super) fn bad(&self) -> Vec<BadFrames> {
        let mut bad: Vec<BadFrames> = self
            .bad
            .iter()
            .map(|(cause, (count, first))| BadFrames {
                cause: cause.clone(),
                count: *count,
                first: first.clone(),
            })
            .collect();
        bad.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.cause.cmp(&b.cause)));
        bad
    }
}

/// The segmenting stage's state.
pub(super) struct Run<'a> {
    pub(super) options: &'a ConvertOptions,
    pub(super) total: u64,
    pub(super) progress: &'a dyn Progress,
    pub(super) stop: &'a AtomicBool,
    pub(super) tally: Tally,
}

impl Run<'_> {
    /// Runs the model on each frame, in order. Returns `Ok` early when the writing stage
    /// hangs up (its error is the one reported).
    pub(super) fn segment_stage(
        &mut self,
        segmenter: &mut Segmenter,
        rx: Receiver<Result<Input, BagError>>,
        tx: SyncSender<Segmented>,
    ) -> Result<(), BagError> {
        for item in rx {
            self.check_stop()?;
            let (message, frame) = match item? {
                Input::Other(m) => {
                    self.tally.copied += 1;
                    if tx.send(Segmented::Copy(m)).is_err() {
                        return Ok(());
                    }
                    continue;
                }
                Input::Frame { message, frame } => (message, frame),
            };
            let index = self.tally.frames;
            self.tally.frames += 1;
            if self.options.copy_input {
                self.tally.copied += 1;
            }
            let output = match frame {
                Ok((header, image)) => {
                    let started = Instant::now();
                    let seg = segmenter
                        .segment(&image)
                        .map_err(|source| BagError::Segment {
                            topic: self.options.topic.clone(),
                            index,
                            log_time: message.log_time,
                            source,
                        })?;
                    self.tally.segmenting += started.elapsed();
                    self.tally.segmented += 1;
                    Some(Segmented::Masks {
                        message,
                        header,
                        image,
                        mask: seg.mask,
                    })
                }
                Err((cause, detail)) => {
                    self.count_bad(index, message.log_time, cause, detail);
                    self.options.copy_input.then_some(Segmented::Copy(message))
                }
            };
            if let Some(output) = output {
                if tx.send(output).is_err() {
                    return Ok(());
                }
            }
            self.progress.advance(1);
        }
        // The reading stage also ends on a stop, before the bag's end.
        self.check_stop()
    }

    fn check_stop(&self) -> Result<(), BagError> {
        match self.stop.load(Ordering::Relaxed) {
            false => Ok(()),
            true => Err(BagError::Stopped {
                done: self.tally.frames,
                total: self.total,
                output: self.options.output.clone(),
            }),
        }
    }

    fn count_bad(&mut self, index: u64, log_time: u64, cause: String, detail: String) {
        let progress = self.progress;
        let entry = self.tally.bad.entry(cause).or_insert_with(|| {
            let first = format!("frame {index} (log time {log_time} ns): {detail}");
            progress.line(format!("bad frame: {first}"));
            (0, first)
        });
        entry.0 += 1;
        let bad: u64 = self.tally.bad.values().map(|(n, _)| n).sum();
        self.progress.message(format!("{bad} bad"));
    }
}

/// How masks are drawn.
pub(super) struct Render {
    pub(super) palette: Vec<[u8; 3]>,
    pub(super) alpha: f32,
}

/// What the writing stage writes, in order.
pub(super) enum Rendered {
    Copy(mcap::Message<'static>),
    /// A frame's message and its class, colour and overlay messages (CDR).
    Masks {
        message: mcap::Message<'static>,
        masks: [Vec<u8>; 3],
    },
}

/// Draws the colour mask and the overlay and serialises the three masks, in order.
/// Ends when either side hangs up.
pub(super) fn render_stage(render: &Render, rx: Receiver<Segmented>, tx: SyncSender<Rendered>) {
    for item in rx {
        let rendered = match item {
            Segmented::Copy(message) => Rendered::Copy(message),
            Segmented::Masks {
                message,
                header,
                image,
                mask,
            } => {
                let class_mask = frames::class_mask(&header, &mask);
                let color = segtool_runtime::colorize(&mask, &render.palette);
                let overlay =
                    segtool_runtime::overlay(&image, &mask, &render.palette, render.alpha);
                let masks = [
                    msgs::encode(&class_mask),
                    msgs::encode(&frames::rgb_message(&header, &color)),
                    msgs::encode(&frames::rgb_message(&header, &overlay)),
                ];
                Rendered::Masks { message, masks }
            }
        };
        if tx.send(rendered).is_err() {
            return;
        }
    }
}

/// Writes, in the order received: copies as they are, each frame (when `copy_frames`)
/// then its three masks.
pub(super) fn write_stage(
    out: &mut OutputBag,
    channels: &MaskChannels,
    copy_frames: bool,
    rx: Receiver<Rendered>,
) -> Result<(), BagError> {
    for item in rx {
        match item {
            Rendered::Copy(message) => out.copy(&message)?,
            Rendered::Masks { message, masks } => {
                if copy_frames {
                    out.copy(&message)?;
                }
                out.write_masks(channels, &message, &masks)?;
            }
        }
    }
    Ok(())
}
