//! The path from pixels to masks, in the three stages every driver runs:
//!
//! ```text
//! images --[Preparer::prepare]--> Prepared --[Segmenter::run]--> Scored --[Scored::decode]--> Segmentations
//!          group by size, cut to              the engine (or the          checked against the
//!          the graph's batch; the             evaluation protocol         card, restored to each
//!          card's resize, crop,               in accuracy mode)           image's size, argmax,
//!          normalisation, padding                                         logits on request
//! ```
//!
//! [`Segmenter::segment_batch`](crate::Segmenter::segment_batch) runs the three in a row.
//! A program that overlaps decoding files with inference (`segtool infer`) prepares on its
//! reading thread and decodes on its writing thread: the same stages, on other threads, so
//! the masks are the same bit for bit. [`Preparer`] and [`Scored`] are `Send` for that.
//!
//! Every model runs through its card ([`crate::card::pipeline`]): a segtool export's comes
//! from its spec and I/O contract (a fixed-size graph's size is its resize), a file from
//! elsewhere's from its metadata, sidecar or folder. One path for all of them: a
//! fixed-size graph, accuracy mode, grouping by size, the graph's fixed batch, and the
//! batch server and temporal smoothing built on these stages work the same whatever made
//! the model.

pub mod accuracy;

use std::sync::Arc;

use image::RgbImage;
use segtool_model_spec::ModelSpec;
use segtool_onnx::ModelIo;

use accuracy::{AccuracyOptions, Protocol};
use crate::card::pipeline::{self as card_pipeline, Geometry};
use crate::card::ModelCard;
use crate::engines::Engine;
use crate::error::{Result, RuntimeError};
use crate::frame::Frame;
use crate::engines::io_contract::{EngineInput, EngineOutput, EngineTensor, InputLayout};
use crate::segmentation::Segmentation;

/// What the stages of one model need: how it is prepared and decoded.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// How images become the graph's input and its output becomes masks.
    pub card: ModelCard,
    /// The classes, palette and normalisation as the evaluation protocol takes them.
    pub spec: ModelSpec,
    /// The graph's fixed batch size: a larger group runs in pieces of it.
    pub graph_batch: Option<usize>,
    pub accuracy: Option<AccuracyOptions>,
    pub keep_logits: bool,
}

impl Plan {
    /// The plan for an engine opened without a segmenter: its card and spec, no fixed
    /// batch known, no accuracy mode.
    pub(crate) fn for_engine(card: ModelCard, spec: ModelSpec, keep_logits: bool) -> Self {
        Self {
            card,
            spec,
            graph_batch: None,
            accuracy: None,
            keep_logits,
        }
    }

    /// Where an image of `size` sits in the graph's input: as the card's resize, crop and
    /// padding place it, or in accuracy mode as it is (the protocol sizes its own
    /// windows from it).
    fn geometry(&self, size: (usize, usize)) -> Geometry {
        match self.accuracy {
            Some(_) => Geometry::identity(size),
            None => Geometry::of(&self.card, size),
        }
    }
}

/// The first stage, for any thread: same-size images into the graph's input.
///
/// ```no_run
/// use segtool_runtime::Segmenter;
/// let mut seg = Segmenter::builder("danet.onnx").open()?;
/// let preparer = seg.preparer(); // Send: a reading thread can own it
/// let images = vec![image::RgbImage::new(640, 480), image::RgbImage::new(320, 240)];
/// let prepared = preparer.prepare(&images)?; // two sizes: two engine runs
/// let masks = seg.run(prepared)?.decode()?; // decode may run on another thread too
/// assert_eq!(masks[1].mask.dim(), (240, 320));
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Preparer {
    plan: Arc<Plan>,
}

/// Images prepared for the engine: one input tensor per distinct image size, in the order
/// sizes first appear; [`Segmenter::run`](crate::Segmenter::run) takes it.
#[derive(Debug)]
pub struct Prepared {
    plan: Arc<Plan>,
    count: usize,
    groups: Vec<PreparedGroup>,
}

#[derive(Debug)]
struct PreparedGroup {
    /// Indices of the group's images in the batch.
    members: Vec<usize>,
    input: EngineTensor,
    /// Where the images sit in the tensor (the card's resize, crop and padding).
    geometry: Geometry,
    /// The pixels themselves, for accuracy mode's mmseg protocol (it resizes from them,
    /// as `cv2.resize` does); empty otherwise.
    pixels: Vec<RgbImage>,
}

/// The engine's answers for a [`Prepared`] batch, to decode on any thread.
#[derive(Debug)]
pub struct Scored {
    plan: Arc<Plan>,
    count: usize,
    groups: Vec<ScoredGroup>,
}

#[derive(Debug)]
struct ScoredGroup {
    members: Vec<usize>,
    output: EngineOutput,
    geometry: Geometry,
}

impl Preparer {
    pub(crate) fn new(plan: Plan) -> Self {
        Self {
            plan: Arc::new(plan),
        }
    }

    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Whether decoding keeps each image's logits (the segmenter's
    /// [`with_logits`](crate::Segmenter::with_logits) by default).
    pub fn logits(mut self, keep: bool) -> Self {
        Arc::make_mut(&mut self.plan).keep_logits = keep;
        self
    }

    /// Groups `images` by size and makes each group's input tensor through the card's
    /// resize (a fixed-size graph's size among them), crop, normalisation and padding.
    /// Refuses an empty batch.
    pub fn prepare(&self, images: &[RgbImage]) -> Result<Prepared> {
        let groups = self
            .batches(by_size(images.iter().map(RgbImage::dimensions))?)
            .into_iter()
            .map(|((w, h), members)| {
                // The common case, one size: the images as they are, no copy.
                let copied: Vec<RgbImage>;
                let same: &[RgbImage] = match members.len() == images.len() {
                    true => images,
                    false => {
                        copied = members.iter().map(|&i| images[i].clone()).collect();
                        &copied
                    }
                };
                self.prepare_group(same, members, (h as usize, w as usize))
            })
            .collect::<Result<_>>()?;
        Ok(self.prepared(images.len(), groups))
    }

    /// [`prepare`](Self::prepare) for frames in any [`PixelFormat`](crate::PixelFormat)
    /// with padded rows: frames the card takes as they are (no resize, crop or padding at
    /// their size) are read in place, bit for bit what their RGB copies give; anything
    /// that resizes (a fixed-size graph of another size, the card's steps, accuracy mode)
    /// or a grey input gets RGB copies.
    pub fn prepare_frames(&self, frames: &[Frame<'_>]) -> Result<Prepared> {
        let plan = &self.plan;
        let size = |f: &Frame<'_>| (f.height() as usize, f.width() as usize);
        let in_place = plan.accuracy.is_none()
            && card_pipeline::reads_frames_in_place(&plan.card)
            && frames.iter().all(|f| plan.geometry(size(f)).is_identity());
        if !in_place {
            let images: Vec<RgbImage> = frames.iter().map(Frame::to_rgb).collect();
            return self.prepare(&images);
        }
        let groups = self
            .batches(by_size(frames.iter().map(|f| (f.width(), f.height())))?)
            .into_iter()
            .map(|((w, h), members)| {
                let same: Vec<Frame<'_>> = members.iter().map(|&i| frames[i]).collect();
                Ok(PreparedGroup {
                    input: card_pipeline::prepare_frames(&same, &plan.card)?,
                    members,
                    geometry: Geometry::identity((h as usize, w as usize)),
                    pixels: Vec::new(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(self.prepared(frames.len(), groups))
    }

    /// Same-size groups cut to the graph's fixed batch size, if it has one (a graph
    /// exported for batch 1 takes one image per run).
    fn batches(&self, groups: SizeGroups) -> SizeGroups {
        let Some(most) = self.plan.graph_batch else {
            return groups;
        };
        groups
            .into_iter()
            .flat_map(|(size, members)| {
                let pieces: Vec<Vec<usize>> = members.chunks(most).map(<[usize]>::to_vec).collect();
                pieces.into_iter().map(move |piece| (size, piece))
            })
            .collect()
    }

    fn prepared(&self, count: usize, groups: Vec<PreparedGroup>) -> Prepared {
        Prepared {
            plan: self.plan.clone(),
            count,
            groups,
        }
    }

    fn prepare_group(
        &self,
        images: &[RgbImage],
        members: Vec<usize>,
        size: (usize, usize),
    ) -> Result<PreparedGroup> {
        let plan = &self.plan;
        let geometry = plan.geometry(size);
        let input = card_pipeline::prepare_at(images, &plan.card, geometry)?;
        let mmseg = plan
            .accuracy
            .as_ref()
            .is_some_and(|o| o.protocol == Protocol::Mmseg);
        Ok(PreparedGroup {
            members,
            input,
            geometry,
            pixels: if mmseg { images.to_vec() } else { Vec::new() },
        })
    }
}

/// Each distinct `(width, height)` with the indices of its images.
type SizeGroups = Vec<((u32, u32), Vec<usize>)>;

/// The indices of each distinct `(width, height)`, in order of first appearance; an
/// empty batch is refused.
fn by_size(dims: impl Iterator<Item = (u32, u32)>) -> Result<SizeGroups> {
    let mut groups: SizeGroups = Vec::new();
    for (i, d) in dims.enumerate() {
        match groups.iter_mut().find(|(size, _)| *size == d) {
            Some((_, members)) => members.push(i),
            None => groups.push((d, vec![i])),
        }
    }
    if groups.is_empty() {
        return Err(RuntimeError::InputShape {
            expected: "at least one image".into(),
            got: "none".into(),
        });
    }
    Ok(groups)
}

impl Prepared {
    /// How many images the batch holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch holds no image (never, for a batch [`Preparer::prepare`] made).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Runs each group through `engine`: one run, or the evaluation protocol in accuracy
    /// mode. Each output is checked against the card (batch size, classes).
    pub(crate) fn run(self, engine: &mut dyn Engine) -> Result<Scored> {
        let plan = self.plan;
        let groups = self
            .groups
            .into_iter()
            .map(|g| {
                let n = g.members.len();
                let output = match (&plan.accuracy, g.input.view()) {
                    (None, input) => engine.run(input)?,
                    (Some(opts), _) if opts.protocol == Protocol::Mmseg => EngineOutput::Logits(
                        accuracy::predict_images(engine, &g.pixels, &plan.spec, opts)?,
                    ),
                    (Some(opts), EngineInput::NchwF32(x)) => {
                        EngineOutput::Logits(accuracy::predict(engine, x, &plan.spec, opts)?)
                    }
                    // Refused when accuracy mode was set (Segmenter::with_accuracy).
                    (Some(_), input) => engine.run(input)?,
                };
                card_pipeline::check_output(&output, n, &plan.card)?;
                Ok(ScoredGroup {
                    members: g.members,
                    output,
                    geometry: g.geometry,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Scored {
            plan,
            count: self.count,
            groups,
        })
    }
}

impl Scored {
    /// One [`Segmentation`] per image, in the batch's order, at the image's size.
    pub fn decode(self) -> Result<Vec<Segmentation>> {
        let plan = &self.plan;
        let mut results: Vec<Option<Segmentation>> = (0..self.count).map(|_| None).collect();
        for g in self.groups {
            let segs =
                card_pipeline::decode_checked(g.output, &plan.card, g.geometry, plan.keep_logits)?;
            for (i, seg) in g.members.into_iter().zip(segs) {
                results[i] = Some(seg);
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every image is in a group"))
            .collect())
    }
}

/// The graph's fixed spatial input `(height, width)`, when both dims are fixed numbers.
pub(crate) fn graph_size(io: &ModelIo, layout: InputLayout) -> Option<(usize, usize)> {
    let dims = &io.inputs.first()?.dims;
    let (h, w) = match layout {
        InputLayout::NchwF32 => (*dims.get(2)?, *dims.get(3)?),
        InputLayout::NhwcU8 => (*dims.get(1)?, *dims.get(2)?),
    };
    match (h, w) {
        (Some(h), Some(w)) if h > 0 && w > 0 => Some((h as usize, w as usize)),
        _ => None,
    }
}

/// The graph's fixed batch size, when its first input's batch dimension is a number.
pub(crate) fn graph_batch(io: &ModelIo) -> Option<usize> {
    match io.inputs.first()?.dims.first()? {
        Some(n) if *n > 0 => Some(*n as usize),
        _ => None,
    }
}
