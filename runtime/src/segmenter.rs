//! [`Segmenter`]: one model with its spec and I/O contract; images in, masks out. Built
//! by [`Segmenter::builder`] ([`SegmenterBuilder`]), which reads the file once.

mod auto;
pub use auto::cpu_has_vnni;
mod builder;
mod options;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::Path;

use image::RgbImage;
use ndarray::ArrayView4;
use segtool_model_spec::ModelSpec;
use segtool_onnx::ModelFile;

pub use builder::{EngineKind, Fallback, SegmenterBuilder};
pub use options::SegmenterOptions;

use crate::accuracy::{self, AccuracyOptions, Protocol};
use crate::batching::run::{decode, fit_to_graph, graph_size, run_normalised};
use crate::card::{self, pipeline, ResolvedCard};
use crate::contract_adapter::ContractAdapter;
use crate::engine::Engine;
use crate::error::Result;
use crate::io_contract::{EngineInput, EngineOutput, EngineTensor, IoContract, Segmentation};

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
            accuracy: None,
            contract,
            spec: model.metadata.spec.clone(),
            card: card::from_segtool_export(&model.metadata, &model.io),
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
            accuracy: None,
        }
    }

    /// Wraps an engine built by hand (custom options, a spec from elsewhere). The
    /// contract is the engine's [`Engine::io_contract`], else the plain one; see
    /// [`Segmenter::with_contract`].
    pub fn from_engine(engine: Box<dyn Engine>, spec: ModelSpec) -> Self {
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
            accuracy: None,
        }
    }

    /// Runs every batch under the evaluation protocol `opts` (scales, flips, sliding
    /// windows) instead of once: accuracy mode. Refused for a card-driven model and for a
    /// graph without float input and logits output (`--preprocess` / `--argmax`
    /// exports), naming the model.
    pub fn with_accuracy(mut self, opts: AccuracyOptions) -> Result<Self> {
        let path = self
            .model
            .as_ref()
            .map(|m| m.path.clone())
            .unwrap_or_default();
        let refuse = |why: String| crate::error::RuntimeError::AccuracyMode { path, why };
        if self.is_foreign() {
            return Err(refuse(
                "it serves segtool exports; this model is driven by its card".into(),
            ));
        }
        if !self.contract.is_plain() {
            return Err(refuse(format!(
                "it needs float32 normalised input and logits output; the model takes {} \
                 (export it without --preprocess / --argmax)",
                self.contract
            )));
        }
        self.accuracy = Some(opts);
        Ok(self)
    }

    /// The evaluation protocol every batch runs under, in accuracy mode.
    pub fn accuracy(&self) -> Option<&AccuracyOptions> {
        self.accuracy.as_ref()
    }

    /// The graph's fixed spatial input `(height, width)`, if it has one: images of
    /// another size are resized to it (bilinear) and their masks brought back (nearest)
    /// by [`segment_batch`](Self::segment_batch) and the batch server.
    pub fn graph_size(&self) -> Option<(usize, usize)> {
        self.graph_size
    }

    /// Overrides the input layout / output kind the model is driven with.
    pub fn with_contract(mut self, contract: IoContract) -> Self {
        self.contract = contract;
        self
    }

    /// Also return the raw logits of every image (costly for large class counts). Models
    /// exported with `--argmax` have none: their results carry `logits: None`.
    pub fn with_logits(mut self, keep: bool) -> Self {
        self.keep_logits = keep;
        self
    }

    /// The input layout and output kind the model is driven with.
    pub fn contract(&self) -> IoContract {
        self.contract
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

    /// [`Segmenter::fallbacks`] as one line (`"; "` between them), `None` when there were
    /// none: for reports and the C ABI's `segtool_fallback_reason`.
    pub fn fallback_summary(&self) -> Option<String> {
        let all: Vec<String> = self.fallbacks.iter().map(ToString::to_string).collect();
        (!all.is_empty()).then(|| all.join("; "))
    }

    /// The model file as read when opening (`None` for [`Segmenter::from_engine`]).
    pub fn model(&self) -> Option<&ModelFile> {
        self.model.as_ref()
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

    /// Driven by a card rather than a segtool spec (an ONNX file from elsewhere).
    pub fn is_foreign(&self) -> bool {
        !self.card.segtool_export
    }

    /// The engine, for its name and provider.
    pub fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    /// The engine, mutably (to run tensors by hand).
    pub fn engine_mut(&mut self) -> &mut dyn Engine {
        self.engine.as_mut()
    }

    /// Takes the engine out as it is (it answers in the model's own contract).
    pub fn into_engine(self) -> Box<dyn Engine> {
        self.engine
    }

    /// Takes the engine out, made to answer like a plain model whatever its contract
    /// (see [`ContractAdapter`]): for code that computes on normalised tensors, such as
    /// accuracy mode's tiles.
    pub fn into_plain_engine(self) -> Box<dyn Engine> {
        ContractAdapter::wrap(self.engine, self.contract, &self.spec)
    }

    /// The engine input for same-size `imgs` in the model's layout (normalised f32 NCHW,
    /// or raw uint8 NHWC for `--preprocess` exports; for a card-driven model, what its
    /// card says: [`crate::card::pipeline::prepare`]).
    pub fn prepare_input(&self, imgs: &[RgbImage]) -> Result<EngineTensor> {
        if self.is_foreign() {
            return Ok(pipeline::prepare(imgs, &self.card.card)?.0);
        }
        EngineTensor::from_images(imgs, &self.spec, self.contract.input)
    }

    /// Runs a batch prepared by [`prepare_input`](Self::prepare_input) (on another
    /// thread, say) the way this segmenter runs: one engine run, or the evaluation
    /// protocol in accuracy mode. `images` are the pixels the batch was prepared from:
    /// mmseg's protocol resizes from them (`cv2.resize`'s uint8 resize); with none it
    /// resizes the floats. The output is checked against the spec (batch size, class
    /// count; a card-driven model's as it is decoded, [`crate::card::pipeline::decode`]).
    pub fn run_prepared(
        &mut self,
        input: EngineInput<'_>,
        images: &[RgbImage],
    ) -> Result<EngineOutput> {
        let n = input.dims().0;
        let (engine, spec) = (self.engine.as_mut(), &self.spec);
        let out = match (&self.accuracy, input) {
            (None, input) => engine.run(input)?,
            (Some(opts), _) if opts.protocol == Protocol::Mmseg && images.len() == n => {
                EngineOutput::Logits(accuracy::predict_images(engine, images, spec, opts)?)
            }
            (Some(opts), EngineInput::NchwF32(x)) => {
                EngineOutput::Logits(accuracy::predict(engine, x, spec, opts)?)
            }
            (Some(_), input) => engine.run(input)?, // refused by with_accuracy
        };
        if !self.is_foreign() {
            out.check(n, &self.spec)?;
        }
        Ok(out)
    }

    /// Runs an already-normalised `[N, 3, H, W]` batch and decodes it: one
    /// [`Segmentation`] per image, its mask resized (nearest) to `sizes[i]` =
    /// `(height, width)`. A `--preprocess` graph gets the pixels the tensor was
    /// normalised from.
    pub fn run_normalised(
        &mut self,
        input: ArrayView4<f32>,
        sizes: &[(usize, usize)],
    ) -> Result<Vec<Segmentation>> {
        if self.is_foreign() {
            return Err(crate::error::RuntimeError::InputShape {
                expected: "images: a card-driven model prepares its own input (segment_batch)"
                    .into(),
                got: "a normalised tensor".into(),
            });
        }
        let contract = self.contract;
        run_normalised(
            self.engine.as_mut(),
            contract,
            &self.spec,
            input,
            sizes,
            self.keep_logits,
        )
    }

    /// Segments one frame (any [`crate::PixelFormat`], padded rows) at its own size.
    pub fn segment_frame(&mut self, frame: &crate::Frame<'_>) -> Result<Segmentation> {
        self.segment(&frame.to_rgb())
    }

    /// Segments one image at its own size.
    pub fn segment(&mut self, img: &RgbImage) -> Result<Segmentation> {
        let mut out = self.segment_batch(std::slice::from_ref(img))?;
        Ok(out.pop().expect("one result per image"))
    }

    /// Segments many images; same-size images share one engine run, so a batch of mixed
    /// sizes costs one run per distinct size. Results come back in input order, each at
    /// its image's size: a fixed-size graph gets its images resized to its size
    /// ([`graph_size`](Self::graph_size)), and in accuracy mode each group runs under the
    /// evaluation protocol.
    pub fn segment_batch(&mut self, imgs: &[RgbImage]) -> Result<Vec<Segmentation>> {
        let mut groups: Vec<((u32, u32), Vec<usize>)> = Vec::new();
        let mut by_size: HashMap<(u32, u32), usize> = HashMap::new();
        for (i, img) in imgs.iter().enumerate() {
            let g = *by_size.entry(img.dimensions()).or_insert_with(|| {
                groups.push((img.dimensions(), Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        let mut results: Vec<Option<Segmentation>> = vec![None; imgs.len()];
        for ((w, h), members) in groups {
            let batch: Vec<RgbImage> = members.iter().map(|&i| imgs[i].clone()).collect();
            if self.is_foreign() {
                let segs = pipeline::run(
                    self.engine.as_mut(),
                    &self.card.card,
                    &batch,
                    self.keep_logits,
                )?;
                for (i, seg) in members.into_iter().zip(segs) {
                    results[i] = Some(seg);
                }
                continue;
            }
            let sizes = vec![(h as usize, w as usize); batch.len()];
            let graph = self.accuracy.is_none().then_some(self.graph_size).flatten();
            let batch = fit_to_graph(&batch, graph);
            let input = self.prepare_input(&batch)?;
            let out = self.run_prepared(input.view(), &batch)?;
            for (i, seg) in
                members
                    .into_iter()
                    .zip(decode(out, &self.spec, &sizes, self.keep_logits)?)
            {
                results[i] = Some(seg);
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every image in a group"))
            .collect())
    }
}
