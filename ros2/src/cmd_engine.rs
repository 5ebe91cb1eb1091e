//! The model and engine flags both commands take: the runtime's `SegmenterOptions`, under
//! the same names, as the shared [`EngineArgs`] that `segtool infer` takes too.

use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_engine_args::EngineArgs;
use segtool_ros2::params::Given;
use segtool_runtime::{Segmenter, SegmenterOptions};

#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// The model: a segtool export, or a file from elsewhere with its model card (a
    /// sidecar MODEL.segtool.toml, --card, an mmdeploy or Hugging Face folder). After
    /// --ros-args, `-p model:=PATH` gives it too.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A model card (TOML) for a file segtool did not write.
    #[arg(long, value_name = "FILE")]
    pub card: Option<PathBuf>,
    /// `--engine`, `--threads`, ...: the same flags as `segtool infer`'s; a fallback is
    /// reported in the diagnostics.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl ModelArgs {
    /// The model and the runtime's options: the flags, overridden by the ROS parameters
    /// `given` (a parameter file, then `-p`).
    pub fn resolve(&self, given: &Given) -> Result<(PathBuf, SegmenterOptions)> {
        let model = match (given.string("model"), &self.model) {
            (Some(p), _) => PathBuf::from(p),
            (None, Some(m)) => m.clone(),
            (None, None) => anyhow::bail!(
                "no model: --model PATH, or the model parameter (-p model:=PATH after \
                 --ros-args, or a --params-file)"
            ),
        };
        let parsed = |name: &str, e: String| anyhow::anyhow!("parameter {name}: {e}");
        let count = |name: &str| match given.integer(name) {
            Some(n) if n >= 0 => Ok(Some(n as usize)),
            Some(n) => anyhow::bail!("parameter {name}: {n}, expected 0 (the engine's) or more"),
            None => Ok(None),
        };
        let flags = &self.engine;
        let options = SegmenterOptions {
            engine: match given.string("engine") {
                Some(e) => e.parse().map_err(|e| parsed("engine", e))?,
                None => flags.engine,
            },
            providers: given
                .strings("providers")
                .map_or_else(|| flags.providers.clone(), <[String]>::to_vec),
            device: match given.string("device") {
                Some(d) => d.parse().map_err(|e| parsed("device", e))?,
                None => flags.device,
            },
            precision: match given.string("precision") {
                Some(p) => p.parse().map_err(|e| parsed("precision", e))?,
                None => flags.precision,
            },
            hint: match given.string("hint") {
                Some(h) => h.parse().map_err(|e| parsed("hint", e))?,
                None => flags.hint,
            },
            // 0 is the engine's default, as everywhere.
            streams: count("streams")?.map_or(flags.streams, |n| (n > 0).then_some(n)),
            threads: count("threads")?.map_or(flags.threads, |n| (n > 0).then_some(n)),
            strict: given.bool("strict").unwrap_or(flags.strict),
            fixed_size: match given.string("fixed_size").filter(|s| !s.is_empty()) {
                Some(text) => Some(hxw(text).map_err(|e| parsed("fixed_size", e))?),
                None => None,
            },
            card: given
                .string("card")
                .filter(|c| !c.is_empty())
                .map(PathBuf::from)
                .or_else(|| self.card.clone()),
            ..flags.options()
        };
        Ok((model, options))
    }

    /// Opens the model the flags and the ROS parameters `given` name.
    pub fn open(&self, given: &Given) -> Result<(PathBuf, Segmenter)> {
        let (model, options) = self.resolve(given)?;
        let b = Segmenter::builder(&model).options(&options)?;
        let seg = b
            .open()
            .with_context(|| format!("opening {}", model.display()))?;
        Ok((model, seg))
    }
}

/// `HxW` as `[height, width]`, both positive.
fn hxw(text: &str) -> std::result::Result<[usize; 2], String> {
    let parsed = text
        .split_once('x')
        .and_then(|(h, w)| Some([h.trim().parse().ok()?, w.trim().parse().ok()?]));
    match parsed {
        Some([h, w]) if h > 0 && w > 0 => Ok([h, w]),
        _ => Err(format!("{text:?}: expected HxW, e.g. 480x640")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fixed_size_is_height_by_width() {
        assert_eq!(super::hxw("480x640"), Ok([480, 640]));
        for bad in ["480", "0x640", "ax640", "480x"] {
            assert!(super::hxw(bad).unwrap_err().contains("HxW"), "{bad}");
        }
    }
}
