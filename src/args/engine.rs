//! The engine flags every inference subcommand (infer, bench, demo) takes: the runtime's
//! options as the shared [`EngineArgs`] (the ROS 2 node takes the same struct), plus the
//! model card flags, turned into one [`SegmenterBuilder`].

use std::path::Path;

use anyhow::Result;
use segtool_engine_args::EngineArgs;
use segtool_runtime::card::CardRequest;
use segtool_runtime::{Segmenter, SegmenterBuilder, SegmenterOptions};

use crate::args::card::CardArgs;

/// The engine flags, flattened into every subcommand that opens a model.
#[derive(Clone, Debug, clap::Args)]
pub struct EngineFlags {
    /// `--engine`, `--threads`, ...: the runtime's options under their own names.
    #[command(flatten)]
    pub options: EngineArgs,
    /// What an ONNX file from elsewhere needs beside its graph.
    #[command(flatten)]
    pub card: CardArgs,
}

impl EngineFlags {
    /// Whether ONNX Runtime may run the model (`ort`, or `auto`, which may pick it): its
    /// session can be planned for one input size.
    pub fn onnx_runtime(&self) -> bool {
        self.options.onnx_runtime()
    }

    /// The request these flags make, with `fixed_size` for ONNX Runtime's memory plan
    /// (and the size auto times at).
    pub fn request(&self, fixed_size: Option<(usize, usize)>) -> EngineRequest {
        EngineRequest {
            options: SegmenterOptions {
                fixed_size: fixed_size.map(|(h, w)| [h, w]),
                ..self.options.options()
            },
            card: self.card.request(),
        }
    }
}

/// What the inference flags ask for: the runtime's options, and the card flags.
#[derive(Clone, Debug)]
pub struct EngineRequest {
    /// The runtime's options (same names, same meaning).
    pub options: SegmenterOptions,
    /// The model card flags (files from elsewhere).
    pub card: CardRequest,
}

impl EngineRequest {
    /// The builder for `model`; provider names are checked here (an unknown one is an
    /// error naming it). The card flags (a file, or fields of their own) come on top.
    pub fn builder(&self, model: &Path) -> Result<SegmenterBuilder> {
        Ok(Segmenter::builder(model)
            .options(&self.options)?
            .card(self.card.clone()))
    }

    /// Opens `model` as asked.
    pub fn open(&self, model: &Path) -> Result<Segmenter> {
        Ok(self.builder(model)?.open()?)
    }
}

/// `engine X on P`, with each fallback taken, for the binary's stderr.
pub fn describe(seg: &Segmenter) -> String {
    let engine = seg.engine();
    let mut line = format!("engine {} on {}", engine.name(), engine.provider());
    for fallback in seg.fallbacks() {
        line.push_str(&format!(" ({fallback})"));
    }
    if let Some(choice) = seg.engine_choice() {
        line.push_str(&format!("; {choice}"));
    }
    line
}
