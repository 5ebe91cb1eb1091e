//! [`Segmenter`]: one model with its spec and I/O contract; images in, masks out. Built
//! by [`Segmenter::builder`] ([`SegmenterBuilder`]), which reads the file once.

mod auto;
mod ext;
pub use auto::cpu_has_vnni;
pub use ext::SegmenterExt;
mod builder;
mod kinds;
mod options;
#[cfg(test)]
mod tests;

use std::path::Path;

use image::RgbImage;
use segtool_model_spec::ModelSpec;
use segtool_onnx::ModelFile;

pub use builder::SegmenterBuilder;
pub use kinds::{EngineKind, Fallback};
pub use options::SegmenterOptions;

use crate::pipeline::accuracy::AccuracyOptions;
use crate::card::{self, ResolvedCard};
use crate::engines::contract_adapter::ContractAdapter;
use crate::engines::Engine;
use crate::error::Result;
use crate::engines::io_contract::IoContract;
use crate::segmentation::Segmentation;
use crate::pipeline::{graph_batch, graph_size};
use crate::pipeline::{Plan, Prepared, Preparer, Scored};

/// A model plus its spec: images in, masks out.
///
/// ```no_run
/// use segtool_runtime::{Frame, PixelFormat, Segmenter};
/// let mut seg = Segmenter::builder("danet.onnx").threads(2).open()?;
/// // A camera's BGR frame, segmented where it lies.
/// let (width, height) = (640, 480);
/// let bgr = vec![0u8; width * height * 3];
/// let frame = Frame::new(&bgr, width as u32, height as u32, 0, PixelFormat::Bgr8)?;
/// let out = seg.segment_frame(&frame)?;
/// assert_eq!(out.mask.dim(), (height, width));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Drives the graph through its contract: `--preprocess` exports get the image's uint8
/// pixels, `--argmax` exports answer a class map; callers see the same [`Segmentation`].
pub struct Segmenter {
    engine: Box<dyn Engine>,
    spec: ModelSpec,
    /// The model's card with the source of each field; for a segtool export, what its
    /// spec amounts to.
    card: ResolvedCard,
    contract: IoContract,
    keep_logits: bool,
    fallbacks: Vec<Fallback>,
    /// Why [`EngineKind::Auto`] picked the engine it did (None for a named engine).
    engine_choice: Option<String>,
    /// What it was opened with (the builder's settings, defaults filled in).
    options: SegmenterOptions,
    model: Option<ModelFile>,
    /// The graph's fixed spatial input `(height, width)`, if it has one.
    graph_size: Option<(usize, usize)>,
    /// The graph's fixed batch size, if it has one: larger batches run in pieces.
    pub(crate) graph_batch: Option<usize>,
    /// Accuracy mode: every batch runs under this evaluation protocol.
    accuracy: Option<AccuracyOptions>,
}

impl Segmenter {
    /// Starts configuring a segmenter for the model at `path`:
    /// `Segmenter::builder("m.onnx").engine(EngineKind::Tract).threads(2).open()?`.
    pub fn builder(path: impl AsRef<Path>) -> SegmenterBuilder {
        SegmenterBuilder::new(path.as_ref().to_path_buf())
    }

    pub(crate) fn assemble(
        engine: Box<dyn Engine>,
        model: ModelFile,
        fallbacks: Vec<Fallback>,
    ) -> Self {
        let graph = engine.io_contract().or_else(|| model.io.contract());
        let contract = IoContract::resolve(model.metadata.contract, graph);
        Self {
            graph_size: graph_size(&model.io, contract.input),
            graph_batch: graph_batch(&model.io),
            accuracy: None,
            contract,
            spec: model.metadata.spec.clone(),
            card: card::export_card(&model.metadata.spec, contract, &model.io),
            engine,
            keep_logits: false,
            fallbacks,
            engine_choice: None,
            options: SegmenterOptions::default(),
            model: Some(model),
        }
    }

    /// A file from elsewhere, driven by its card (see [`crate::card::pipeline`]).
    pub(crate) fn assemble_foreign(
        engine: Box<dyn Engine>,
        card: ResolvedCard,
        fallbacks: Vec<Fallback>,
    ) -> Self {
        let contract = engine.io_contract().unwrap_or_default();
        Self {
            spec: card::spec_of(&card.card),
            card,
            engine,
            contract,
            keep_logits: false,
            fallbacks,
            engine_choice: None,
            options: SegmenterOptions::default(),
            model: None,
            graph_size: None,
            graph_batch: None,
            accuracy: None,
        }
    }

    /// The options this segmenter was opened with, as [`SegmenterOptions`] names them
    /// (the defaults filled in; `from_engine`: the defaults): what every front end
    /// reports back, so that a flag, keyword or property is seen to arrive.
    pub fn options(&self) -> &SegmenterOptions {
        &self.options
    }

    /// Which engine [`EngineKind::Auto`] chose and why (`auto chose openvino: the fastest
    /// when timed on this machine at 512x512, 2 threads: openvino 40.1 ms, ...`); `None`
    /// when an engine was named.
    pub fn engine_choice(&self) -> Option<&str> {
        self.engine_choice.as_deref()
    }

    /// The fallbacks taken while opening, in order (empty: running as asked).
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// The model's spec: classes, palette, normalisation. For a file from elsewhere, what
    /// its card says of them (architecture fields are placeholders: `arch` is
    /// `"external"`).
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    /// The model's card and where each field came from (a segtool export's is its spec's).
    pub fn card(&self) -> &ResolvedCard {
        &self.card
    }

    /// The engine, for its name and provider.
    pub fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    /// The first stage of the path from pixels to masks, for any thread: see
    /// [`crate::pipeline`]. It captures how this segmenter prepares and decodes now
    /// (accuracy mode, logits); set those first.
    pub fn preparer(&self) -> Preparer {
        Preparer::new(Plan {
            card: self.card.card.clone(),
            spec: self.spec.clone(),
            graph_batch: self.graph_batch,
            accuracy: self.accuracy.clone(),
            keep_logits: self.keep_logits,
        })
    }

    /// The engine stage: runs a batch its [`preparer`](Self::preparer) made, each size
    /// group once (or under the evaluation protocol in accuracy mode); decode the answer
    /// with [`Scored::decode`], here or on another thread.
    pub fn run(&mut self, batch: Prepared) -> Result<Scored> {
        batch.run(self.engine.as_mut())
    }

    /// Segments one frame (any [`crate::PixelFormat`], padded rows) at its own size.
    pub fn segment_frame(&mut self, frame: &crate::frame::Frame<'_>) -> Result<Segmentation> {
        self.segment(&frame.to_rgb())
    }

    /// Segments one image at its own size.
    pub fn segment(&mut self, img: &RgbImage) -> Result<Segmentation> {
        let mut out = self.segment_batch(std::slice::from_ref(img))?;
        Ok(out.pop().expect("one result per image"))
    }

    /// Segments many images; same-size images share one engine run, so a batch of mixed
    /// sizes costs one run per distinct size. Results come back in input order, each at
    /// its image's size: each image goes through the model's card (a fixed-size graph's
    /// card resizes it to the graph's size, and the scores come back to the image's), and
    /// in accuracy mode each group runs under the evaluation protocol. The three stages
    /// of [`crate::pipeline`] in a row.
    pub fn segment_batch(&mut self, imgs: &[RgbImage]) -> Result<Vec<Segmentation>> {
        if imgs.is_empty() {
            return Ok(Vec::new());
        }
        let prepared = self.preparer().prepare(imgs)?;
        self.run(prepared)?.decode()
    }
}

impl SegmenterExt for Segmenter {
    fn from_engine(engine: Box<dyn Engine>, spec: ModelSpec) -> Self {
        let contract = engine.io_contract().unwrap_or_default();
        Self {
            card: card::from_spec(&spec, contract, "image", "logits"),
            engine,
            spec,
            contract,
            keep_logits: false,
            fallbacks: Vec::new(),
            engine_choice: None,
            options: SegmenterOptions::default(),
            model: None,
            graph_size: None,
            graph_batch: None,
            accuracy: None,
        }
    }

    fn with_accuracy(mut self, opts: AccuracyOptions) -> Result<Self> {
        let path = self
            .model
            .as_ref()
            .map(|m| m.path.clone())
            .unwrap_or_default();
        if let Some(why) = crate::pipeline::accuracy::refusal(&self.card) {
            return Err(crate::error::RuntimeError::AccuracyMode { path, why });
        }
        self.accuracy = Some(opts);
        Ok(self)
    }

    fn accuracy(&self) -> Option<&AccuracyOptions> {
        self.accuracy.as_ref()
    }

    fn graph_size(&self) -> Option<(usize, usize)> {
        self.graph_size
    }

    fn with_contract(mut self, contract: IoContract) -> Self {
        self.contract = contract;
        // A segtool model's card is what its spec and contract amount to.
        if self.card.segtool_export {
            self.card = match &self.model {
                Some(model) => card::export_card(&self.spec, contract, &model.io),
                None => card::from_spec(&self.spec, contract, "image", "logits"),
            };
        }
        self
    }

    fn with_logits(mut self, keep: bool) -> Self {
        self.keep_logits = keep;
        self
    }

    fn contract(&self) -> IoContract {
        self.contract
    }

    fn fallback_summary(&self) -> Option<String> {
        let all: Vec<String> = self.fallbacks.iter().map(ToString::to_string).collect();
        (!all.is_empty()).then(|| all.join("; "))
    }

    fn model(&self) -> Option<&ModelFile> {
        self.model.as_ref()
    }

    fn engine_mut(&mut self) -> &mut dyn Engine {
        self.engine.as_mut()
    }

    fn into_engine(self) -> Box<dyn Engine> {
        self.engine
    }

    fn into_plain_engine(self) -> Box<dyn Engine> {
        ContractAdapter::wrap(self.engine, self.contract, &self.spec)
    }
}
