//! What a [`super::Run`] tells its caller while it runs ([`Event`]) and what it returns
//! ([`RunSummary`]); the text is the `segtool train` CLI's, so the binary only prints it.

use std::fmt;
use std::path::PathBuf;

use segtool_core::config::Precision;

use crate::distributed::DistEnv;
use crate::run::{RunState, ThreadChoice, ThreadSource};

/// Something a run reports as it happens, in order. `Display` gives the CLI's line.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// This process's place in the distributed job (every rank).
    Joined(DistEnv),
    /// A decision worth knowing (rank 0): the thread count of a resumed run, a
    /// `optim.world_size` that is not the job's.
    Note(String),
    /// The batch geometry and schedule of the run (rank 0), as `RunConfig::summary`.
    Plan(String),
    /// A line about the `model.init` weights: what was read, what was loaded (as
    /// `segtool import` says it; the CLI writes these to stdout).
    Import(String),
    /// Training continues from `path` at `iteration` (every rank).
    Resuming { path: PathBuf, iteration: usize },
    /// A validation finished (rank 0).
    Validation { miou: f64, pixel_accuracy: f64 },
}

impl Event {
    /// The events the CLI writes to stdout (the import's report); the rest go to stderr.
    pub fn is_output(&self) -> bool {
        matches!(self, Event::Import(_))
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Joined(env) => write!(
                f,
                "rank {} of {} (from {}), local rank {} of {}, rendezvous {}:{}",
                env.rank,
                env.world_size,
                env.source,
                env.local_rank,
                env.local_world_size,
                env.master_addr,
                env.master_port
            ),
            Event::Note(text) | Event::Plan(text) | Event::Import(text) => f.write_str(text),
            Event::Resuming { path, iteration } => {
                write!(f, "resuming {} at iteration {iteration}", path.display())
            }
            Event::Validation {
                miou,
                pixel_accuracy,
            } => write!(
                f,
                "  val mIoU {:.2}  pixel acc {:.2}",
                miou * 100.0,
                pixel_accuracy * 100.0
            ),
        }
    }
}

/// Mixed precision as the run ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AmpSummary {
    pub precision: Precision,
    /// Optimiser steps skipped for inf/NaN gradients (fp16 loss scaling).
    pub skipped_steps: usize,
    /// The final loss scale; `None`: no loss scaling (bf16).
    pub loss_scale: Option<f64>,
}

impl AmpSummary {
    /// Where `amp` stands at the end of a run.
    pub fn of(amp: &crate::amp::Amp) -> Self {
        Self {
            precision: amp.precision(),
            skipped_steps: amp.skipped_steps,
            loss_scale: amp.scaler().map(|s| s.scale()),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub rank: usize,
    pub world_size: usize,
    /// Iterations the schedule spans (`stop_at` may end the run before).
    pub total_iterations: usize,
    /// Where the run stands: iterations done, best validation mIoU and its iteration.
    pub state: RunState,
    /// The `last` checkpoint (written by rank 0).
    pub last_checkpoint: PathBuf,
    /// The `best` checkpoint, when a validation wrote one.
    pub best_checkpoint: Option<PathBuf>,
    /// The last validation's (mIoU, pixel accuracy), when the run validated.
    pub last_validation: Option<(f64, f64)>,
    /// Mean loss of the last step.
    pub final_loss: Option<f64>,
    pub amp: Option<AmpSummary>,
    /// The libtorch thread count the run trained with, and why.
    pub threads: ThreadChoice,
    /// The [`Event::Note`]s of the run, in order.
    pub notes: Vec<String>,
}

impl RunSummary {
    /// Rank 0: the process that writes checkpoints and logs.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    /// What `segtool train` prints when the run ends (rank 0): AMP's outcome, the `last`
    /// checkpoint, the best validation and its checkpoint.
    pub fn closing_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(amp) = &self.amp {
            lines.push(match amp.loss_scale {
                Some(scale) => format!(
                    "{}: {} step(s) skipped for inf/NaN gradients, loss scale {scale}",
                    amp.precision.name(),
                    amp.skipped_steps
                ),
                None => format!("trained with {} autocast", amp.precision.name()),
            });
        }
        lines.push(format!("wrote {}", self.last_checkpoint.display()));
        if let (Some(miou), Some(it), Some(best)) = (
            self.state.best_miou,
            self.state.best_iteration,
            &self.best_checkpoint,
        ) {
            lines.push(format!(
                "best val mIoU {:.2} at iteration {it}: {}",
                miou * 100.0,
                best.display()
            ));
        }
        lines
    }
}

/// What to say about the thread count of a run resuming `path` (nothing for a fresh run,
/// or a resume at the recorded count given explicitly).
pub fn thread_note(choice: &ThreadChoice, path: &std::path::Path) -> Option<String> {
    let path = path.display();
    match (choice.source, choice.recorded) {
        (ThreadSource::Checkpoint, _) => Some(format!(
            "{} libtorch thread(s), as {path} was trained with (--threads to change)",
            choice.threads
        )),
        (_, Some(recorded)) if choice.differs_from_checkpoint => Some(format!(
            "note: {path} was trained with {recorded} libtorch thread(s) and this run uses \
             {}: fp32 reductions split differently, so the resumed run will no longer \
             repeat the uninterrupted run bit for bit",
            choice.threads
        )),
        (_, Some(_)) => None,
        (_, None) => Some(format!(
            "note: {path} does not record the libtorch thread count it was trained with; \
             using {}: the resumed run repeats the uninterrupted one bit for bit only if \
             that is the same count (--threads N to choose)",
            choice.threads
        )),
    }
}
