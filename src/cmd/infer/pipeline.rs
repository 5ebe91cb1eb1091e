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
use segtool_runtime::batching::Handle;
use segtool_runtime::pipeline::{Prepared, Preparer, Scored as ScoredBatch};
use segtool_runtime::{batching::BatchServer, Segmenter};

/// Images of one batch, prepared for the engine by the runtime's first stage on the source
/// thread (none when the batch goes through a `BatchServer`, which prepares its own).
pub(super) struct Batch {
    pub(super) names: Vec<String>,
    pub(super) images: Vec<RgbImage>,
    pub(super) prepared: Option<Prepared>,
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
    /// The engine's answers, decoded on the writer thread (the runtime's last stage).
    Scored(ScoredBatch),
    /// One handle per image, answered by the batch server.
    Pending(Vec<Handle>),
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

/// How the source thread prepares engine inputs: the runtime's first stage, `None` when
/// a batch server prepares its own.
pub(super) type Prepare = Option<Preparer>;

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
    // A batch whose every input failed to decode (--keep-going) has nothing to prepare.
    let prepare = prepare.as_ref().filter(|_| !images.is_empty());
    let prepared = match prepare.map(|p| p.prepare(&images)).transpose() {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Err(e.into()));
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
        prepared,
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
        if batch.images.is_empty() {
            // Every input of the batch failed to decode (--keep-going): nothing to run.
            return Ok(Results::Pending(Vec::new()));
        }
        match self {
            Stage::Single(seg) => {
                let prepared = match batch.prepared.take() {
                    Some(prepared) => prepared,
                    None => seg.preparer().prepare(&batch.images)?,
                };
                Ok(Results::Scored(seg.run(prepared)?))
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
