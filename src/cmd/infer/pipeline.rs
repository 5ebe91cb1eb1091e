//! The pieces shared by the three pipeline stages of `segtool infer` (source thread,
//! engine on the calling thread, writer thread): the batch types passed between them,
//! busy-time accounting, grouping a batch by image size into engine inputs, and the
//! engine stage itself ([`Stage`]: one session, optionally in accuracy mode, or a batch
//! server). The stages' threads and channels are wired up in `run` (mod.rs).

use std::path::PathBuf;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use anyhow::Result;
use image::RgbImage;
use rayon::prelude::*;
use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::Handle;
use segtool_runtime::expert::EngineTensor;
use segtool_runtime::{
    batching::BatchServer, expert::EngineOutput, InputLayout, Segmentation, Segmenter,
};

/// Images of one batch plus their engine inputs, one per distinct size (none when the
/// batch goes through a `BatchServer`, which prepares its own).
pub(super) struct Batch {
    pub(super) names: Vec<String>,
    pub(super) images: Vec<RgbImage>,
    /// (indices into `images`, the same-size images in the model's input layout).
    pub(super) groups: Vec<(Vec<usize>, EngineTensor)>,
    /// Inputs of this batch that could not be read (`--keep-going`), in input order.
    pub(super) failures: Vec<Failure>,
}

/// An input file left out under `--keep-going`, and why.
pub(super) struct Failure {
    pub(super) path: PathBuf,
    pub(super) reason: String,
}

/// What the engine stage made of a batch.
pub(super) enum Results {
    /// Per same-size group: the engine's output (logits or class maps).
    Groups(Vec<(Vec<usize>, EngineOutput)>),
    /// One handle per image, answered by the batch server.
    Pending(Vec<Handle>),
    /// Per image, segmented already (a model driven by its card).
    Segmented(Vec<Segmentation>),
}

/// A batch after the engine.
pub(super) struct Scored {
    pub(super) names: Vec<String>,
    pub(super) images: Vec<RgbImage>,
    pub(super) results: Results,
}

#[derive(Default, Clone, Copy)]
pub(super) struct Busy {
    pub(super) decode: Duration,
    pub(super) normalise: Duration,
    pub(super) engine: Duration,
    pub(super) post: Duration,
}

/// How the source thread prepares engine inputs: `None` when a batch server does it.
pub(super) type Prepare = Option<(ModelSpec, InputLayout)>;

/// Same-size groups in order of first appearance, each in the model's input layout
/// (`segtool_runtime::expert::normalise_batch` for f32 models; this runs on the source thread,
/// overlapping the engine).
pub(super) fn group_and_prepare(
    images: &[RgbImage],
    prepare: &Prepare,
) -> Result<Vec<(Vec<usize>, EngineTensor)>> {
    let Some((spec, layout)) = prepare else {
        return Ok(Vec::new());
    };
    let mut groups: Vec<((u32, u32), Vec<usize>)> = Vec::new();
    for (i, img) in images.iter().enumerate() {
        match groups.iter_mut().find(|(d, _)| *d == img.dimensions()) {
            Some((_, members)) => members.push(i),
            None => groups.push((img.dimensions(), vec![i])),
        }
    }
    groups
        .into_par_iter()
        .map(|(_, members)| {
            let input = if members.len() == images.len() {
                EngineTensor::from_images(images, spec, *layout)
            } else {
                // Mixed sizes in one batch (rare): copy this size's images together.
                let same: Vec<RgbImage> = members.iter().map(|&i| images[i].clone()).collect();
                EngineTensor::from_images(&same, spec, *layout)
            };
            Ok((members, input?))
        })
        .collect()
}

/// The sources' last step: groups and prepares `images` (timed as normalise; `decode` is
/// the source's own time) and sends the batch, with the inputs of it that `failures`
/// lists. `false` when the source should stop: the preparation failed (its error was
/// sent) or the engine stage has gone.
pub(super) fn send_batch(
    tx: &SyncSender<Result<(Batch, Busy)>>,
    names: Vec<String>,
    images: Vec<RgbImage>,
    failures: Vec<Failure>,
    prepare: &Prepare,
    decode: Duration,
) -> bool {
    let t0 = Instant::now();
    let groups = match group_and_prepare(&images, prepare) {
        Ok(g) => g,
        Err(e) => {
            let _ = tx.send(Err(e));
            return false;
        }
    };
    let busy = Busy {
        decode,
        normalise: t0.elapsed(),
        ..Default::default()
    };
    let batch = Batch {
        names,
        images,
        groups,
        failures,
    };
    tx.send(Ok((batch, busy))).is_ok()
}

/// The engine stage: one session (optionally in accuracy mode), or a batch server.
pub(super) enum Stage {
    Single(Box<Segmenter>),
    Server(BatchServer),
}

impl Stage {
    pub(super) fn run(&mut self, batch: &mut Batch) -> Result<Results> {
        match self {
            // A card-driven model prepares and decodes by its card.
            Stage::Single(seg) if seg.is_foreign() => {
                Ok(Results::Segmented(seg.segment_batch(&batch.images)?))
            }
            Stage::Single(seg) => {
                let groups = std::mem::take(&mut batch.groups);
                let mut out = Vec::with_capacity(groups.len());
                for (members, input) in groups {
                    // Accuracy mode's mmseg protocol resizes from the pixels (as cv2's).
                    let pixels: Vec<RgbImage> = match seg.accuracy() {
                        Some(_) => members.iter().map(|&i| batch.images[i].clone()).collect(),
                        None => Vec::new(),
                    };
                    let result = seg.run_prepared(input.view(), &pixels)?;
                    drop(input);
                    out.push((members, result));
                }
                Ok(Results::Groups(out))
            }
            Stage::Server(server) => Ok(Results::Pending(
                batch
                    .images
                    .iter()
                    .map(|img| server.submit(img.clone()))
                    .collect(),
            )),
        }
    }
}
