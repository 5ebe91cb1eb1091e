//! [`SegmenterExt`]: what a [`Segmenter`] offers besides segmenting, for programs that
//! wrap an engine of their own, drive tensors by hand or read the plumbing (the graph's
//! size and contract, the model file as read). Most programs never import it: opening is
//! the builder (`logits` and accuracy mode included), and `Segmenter`'s own methods
//! segment, say what runs and why, and report the options.

use segtool_model_spec::ModelSpec;
use segtool_onnx::ModelFile;

use crate::pipeline::accuracy::AccuracyOptions;
use crate::engines::Engine;
use crate::error::Result;
use crate::engines::io_contract::IoContract;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::segmenter::Segmenter {}
}

/// The expert side of a [`Segmenter`] (see the module docs). Sealed: only `Segmenter`
/// implements it.
///
/// ```no_run
/// use segtool_runtime::expert::SegmenterExt;
/// use segtool_runtime::Segmenter;
/// let mut seg = Segmenter::builder("danet.onnx").open()?;
/// println!("{:?} {}", seg.graph_size(), seg.contract());
/// let name = seg.engine_mut().name().to_string();
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
pub trait SegmenterExt: sealed::Sealed + Sized {
    /// Wraps an engine built by hand (custom options, a spec from elsewhere). The
    /// contract is the engine's [`Engine::io_contract`], else the plain one; see
    /// [`SegmenterExt::with_contract`].
    fn from_engine(engine: Box<dyn Engine>, spec: ModelSpec) -> Self;

    /// Runs every batch under the evaluation protocol `opts` (scales, flips, sliding
    /// windows) instead of once: accuracy mode. Refused, naming the model, where its card
    /// says what the protocol cannot do: input other than float32 normalised RGB or
    /// output other than logits (`--preprocess` / `--argmax` exports), or a resize, crop
    /// or padding of its own (besides a fixed-size graph's size).
    fn with_accuracy(self, opts: AccuracyOptions) -> Result<Self>;

    /// The evaluation protocol every batch runs under, in accuracy mode.
    fn accuracy(&self) -> Option<&AccuracyOptions>;

    /// The graph's fixed spatial input `(height, width)`, if it has one: the model's
    /// card resizes images of another size to it (bilinear) and brings the scores back
    /// to the image's size, in [`Segmenter::segment_batch`] and the batch server alike.
    fn graph_size(&self) -> Option<(usize, usize)>;

    /// Overrides the input layout / output kind the model is driven with.
    fn with_contract(self, contract: IoContract) -> Self;

    /// Also return the raw logits of every image (costly for large class counts). Models
    /// exported with `--argmax` have none: their results carry `logits: None`.
    fn with_logits(self, keep: bool) -> Self;

    /// The input layout and output kind the model is driven with.
    fn contract(&self) -> IoContract;

    /// [`Segmenter::fallbacks`] as one line (`"; "` between them), `None` when there were
    /// none: for reports and the C ABI's `segtool_fallback_reason`.
    fn fallback_summary(&self) -> Option<String>;

    /// The model file as read when opening (`None` for [`SegmenterExt::from_engine`]).
    fn model(&self) -> Option<&ModelFile>;

    /// The engine, mutably (to run tensors by hand).
    fn engine_mut(&mut self) -> &mut dyn Engine;

    /// Takes the engine out as it is (it answers in the model's own contract).
    fn into_engine(self) -> Box<dyn Engine>;

    /// Takes the engine out, made to answer like a plain model whatever its contract
    /// (see [`ContractAdapter`](crate::expert::ContractAdapter)): for code that computes on normalised tensors, such as
    /// accuracy mode's tiles.
    fn into_plain_engine(self) -> Box<dyn Engine>;
}
