//! The answer: a [`Segmentation`] per frame, its [`ClassMap`](class_map::ClassMap) (u8
//! ids up to 256 classes, u16 above), and what turns scores into one (argmax, resizes,
//! colours, temporal smoothing). Nothing here knows engines or files: every room above
//! (engines, cards, the pipeline, the segmenter, the server and its streams) hands its
//! answers down to these types.

pub(crate) mod class_map;
pub(crate) mod postprocess;
pub(crate) mod temporal;

use ndarray::Array3;

use class_map::ClassMap;

/// A frame's answer, whichever driver produced it: [`Segmenter::segment`] and its batch
/// and frame forms, a [`BatchServer`]'s handles and its ordered and newest-frame streams.
///
/// The serving facts (request id, frame index, worker, batch size) are one optional field,
/// [`served`](Self::served), rather than a second result type: code that takes a
/// `Segmentation` (a writer, an overlay, a front end's conversion) takes every driver's.
///
/// ```no_run
/// # let mut seg = segtool_runtime::Segmenter::builder("danet.onnx").open()?;
/// # let img = image::RgbImage::new(64, 48);
/// let out = seg.segment(&img)?;
/// // u8 ids for models of at most 256 classes, u16 above: `iter` widens either.
/// let classes_seen: std::collections::BTreeSet<u16> = out.mask.iter().collect();
/// let colours = segtool_runtime::colorize(&out.mask, &seg.spec().palette);
/// assert!(out.served.is_none()); // a segmenter's answer; a batch server's says how it ran
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Segmenter::segment`]: crate::Segmenter::segment
/// [`BatchServer`]: crate::batching::BatchServer
#[derive(Clone, Debug, PartialEq)]
pub struct Segmentation {
    /// Class per pixel, `(H, W)` at the input image's size: `u8` ids for a model of at
    /// most 256 classes, `u16` above.
    pub mask: ClassMap,
    /// Raw logits `(classes, h, w)` when [`Segmenter::with_logits`](crate::Segmenter::with_logits) asked for them.
    pub logits: Option<Array3<f32>>,
    /// How a [`BatchServer`](crate::batching::BatchServer) ran the request; `None` for
    /// a [`Segmenter`](crate::Segmenter)'s own answer.
    pub served: Option<Served>,
}

impl Segmentation {
    /// A mask and its logits, not served by a batch server.
    pub fn new(mask: impl Into<ClassMap>, logits: Option<Array3<f32>>) -> Self {
        Self {
            mask: mask.into(),
            logits,
            served: None,
        }
    }
}

/// How a [`BatchServer`](crate::batching::BatchServer) ran a request: what
/// [`Segmentation::served`] holds for every
/// answer of a server, its handles and its streams.
///
/// A field of the one result type rather than a result type of its own, so that a
/// served answer and a [`Segmenter`](crate::Segmenter)'s are the same value to every
/// consumer (writers, overlays, front ends); the facts only a server knows ride along.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 2, BatchConfig::new())?;
/// let out = server.submit(image::RgbImage::new(640, 480)).wait()?;
/// assert_eq!(out.mask.dim(), (480, 640)); // (H, W) at the input's size
/// let served = out.served.expect("a server's answer says how it ran");
/// println!("request {} ran on worker {} in a batch of {}", served.id, served.worker, served.batch_size);
/// let colours = segtool_runtime::colorize(&out.mask, &server.spec().palette);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// The request's number, as returned by [`Handle::id`](crate::batching::Handle::id)
    /// (unique per server).
    pub id: u64,
    /// Frame index when the request came through an
    /// [`OrderedStream`](crate::batching::OrderedStream) or a
    /// [`LatestStream`](crate::batching::LatestStream).
    pub frame: Option<u64>,
    /// Index of the worker (engine) that ran the request.
    pub worker: usize,
    /// Size of the batch the request ran in.
    pub batch_size: usize,
}

