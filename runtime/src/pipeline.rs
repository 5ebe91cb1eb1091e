//! The path from pixels to masks, in the three stages every driver runs:
//!
//! ```text
//! images --[Preparer::prepare]--> Prepared --[Segmenter::run]--> Scored --[Scored::decode]--> Segmentations
//!          group by size,                     the engine (or the          restore to each image's
//!          fit a fixed-size graph,            evaluation protocol         size, argmax, logits
//!          the card's resize, crop,           in accuracy mode)           on request
//!          normalise, pad
//! ```
//!
//! [`Segmenter::segment_batch`](crate::Segmenter::segment_batch) runs the three in a row.
//! A program that overlaps decoding files with inference (`segtool infer`) prepares on its
//! reading thread and decodes on its writing thread: the same stages, on other threads, so
//! the masks are the same bit for bit. [`Preparer`] and [`Scored`] are `Send` for that.
//!
//! A segtool export is prepared from its spec (normalisation, the graph's layout, a fixed
//! graph size) and decoded from its logits or class map; a file from elsewhere through its
//! card ([`crate::card::pipeline`]). The choice is made here, once, and nowhere else.

use std::borrow::Cow;
use std::sync::Arc;

use image::RgbImage;
use segtool_model_spec::ModelSpec;
use segtool_onnx::ModelIo;

use crate::accuracy::{self, AccuracyOptions, Protocol};
use crate::card::pipeline::{self as card_pipeline, Geometry};
use crate::card::ModelCard;
use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::frame::Frame;
use crate::io_contract::{
    EngineInput, EngineOutput, EngineTensor, InputLayout, IoContract, Segmentation,
};

/// What the stages of one model need: how it is prepared and decoded.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The card of a file from elsewhere; `None` for a segtool export.
    pub card: Option<ModelCard>,
    pub spec: ModelSpec,
    pub contract: IoContract,
    /// A segtool export's fixed graph size, which images are fitted to (not in accuracy
    /// mode, whose protocol sizes its own windows).
    pub graph: Option<(usize, usize)>,
    /// The graph's fixed batch size: a larger group runs in pieces of it.
    pub graph_batch: Option<usize>,
    pub accuracy: Option<AccuracyOptions>,
    pub keep_logits: bool,
}

impl Plan {
    /// The plan for an engine opened without a segmenter: a card or a spec and the
    /// engine's contract, no fixed graph size or batch known, no accuracy mode.
    pub(crate) fn for_engine(
        card: Option<ModelCard>,
        spec: ModelSpec,
        contract: IoContract,
        keep_logits: bool,
    ) -> Self {
        Self {
            card,
            spec,
            contract,
            graph: None,
            graph_batch: None,
            accuracy: None,
            keep_logits,
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
    /// The images' own `(height, width)`.
    size: (usize, usize),
    input: EngineTensor,
    /// Where the images sit in the tensor (a card's resize, crop and padding).
    geometry: Option<Geometry>,
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
    size: (usize, usize),
    output: EngineOutput,
    geometry: Option<Geometry>,
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

    /// Groups `images` by size and makes each group's input tensor: fitted to a
    /// fixed-size graph (resized, bilinear) or through the card's resize, crop,
    /// normalisation and padding. Refuses an empty batch.
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
    /// with padded rows: a segtool export at the frames' own size reads them in place;
    /// anything that resizes (a fixed-size graph, a card, accuracy mode) gets RGB copies.
    pub fn prepare_frames(&self, frames: &[Frame<'_>]) -> Result<Prepared> {
        let plan = &self.plan;
        let size = |f: &Frame<'_>| (f.height() as usize, f.width() as usize);
        let in_place = plan.card.is_none()
            && plan.accuracy.is_none()
            && frames
                .iter()
                .all(|f| plan.graph.is_none_or(|g| g == size(f)));
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
                    input: EngineTensor::from_frames(&same, &plan.spec, plan.contract.input)?,
                    members,
                    size: (h as usize, w as usize),
                    geometry: None,
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
        let (input, geometry) = match &plan.card {
            Some(card) => {
                let (input, geometry) = card_pipeline::prepare(images, card)?;
                (input, Some(geometry))
            }
            None => {
                let graph = plan.accuracy.is_none().then_some(plan.graph).flatten();
                let fitted = fit_to_graph(images, graph);
                let input = EngineTensor::from_images(&fitted, &plan.spec, plan.contract.input)?;
                (input, None)
            }
        };
        let mmseg = plan
            .accuracy
            .as_ref()
            .is_some_and(|o| o.protocol == Protocol::Mmseg);
        Ok(PreparedGroup {
            members,
            size,
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
    /// mode. Each output is checked against the spec (batch size, classes) for a segtool
    /// export, and as it is decoded for a card.
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
                if plan.card.is_none() {
                    output.check(n, &plan.spec)?;
                }
                Ok(ScoredGroup {
                    members: g.members,
                    size: g.size,
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
            let segs = match (&plan.card, g.geometry) {
                (Some(card), Some(geometry)) => {
                    card_pipeline::decode(g.output, card, geometry, plan.keep_logits)?
                }
                _ => {
                    let sizes = vec![g.size; g.members.len()];
                    decode(g.output, &plan.spec, &sizes, plan.keep_logits)?
                }
            };
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

/// Same-size images as a fixed-size graph takes them: resized (bilinear, as
/// `image`'s triangle filter) when the graph has another fixed size. [`decode`] brings
/// the masks back to the sizes the caller keeps.
pub(crate) fn fit_to_graph(
    imgs: &[RgbImage],
    graph: Option<(usize, usize)>,
) -> Cow<'_, [RgbImage]> {
    use image::imageops::{resize, FilterType};
    match (graph, imgs.first()) {
        (Some((h, w)), Some(first)) if first.dimensions() != (w as u32, h as u32) => imgs
            .iter()
            .map(|img| resize(img, w as u32, h as u32, FilterType::Triangle))
            .collect(),
        _ => Cow::Borrowed(imgs),
    }
}

/// Decodes an engine's output for a batch: checks it against the spec (batch size, class
/// count), then one [`Segmentation`] per image, its mask resized (nearest) to `sizes[i]`
/// = `(height, width)`; logits kept when asked for and the graph has them.
pub(crate) fn decode(
    out: EngineOutput,
    spec: &ModelSpec,
    sizes: &[(usize, usize)],
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    out.check(sizes.len(), spec)?;
    Ok(sizes
        .iter()
        .enumerate()
        .map(|(i, &(h, w))| {
            let mask = out.mask(i, spec.num_classes(), h, w);
            Segmentation::new(mask, if keep_logits { out.logits(i) } else { None })
        })
        .collect())
}
