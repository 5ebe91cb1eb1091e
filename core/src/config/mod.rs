//! The training run configuration: one TOML file says everything a run does.
//!
//! A run starts from a preset (`configs/*.toml`, embedded in the binary) or a file, takes
//! `section.key=value` overrides from the command line, and is validated once all of
//! them are applied, because an override can repair what a file alone leaves invalid
//! (e.g. `optim.iterations=0` next to `optim.epochs=240`). Parsing never validates;
//! call [`RunConfig::validate`] before training.
//!
//! ```toml
//! name = "example"
//! [optim]
//! batch_size = 2
//! world_size = 4
//! ```
//!
//! Overrides go through the TOML tree rather than a hand-written setter per field, so
//! they get the same type checks and unknown-key errors as the file itself.

mod sections;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use sections::{
    AttentionImpl, AugmentConfig, CheckpointConfig, DataConfig, EvalConfig, EvalMode, LogConfig,
    LrScaling, ModelConfig, OptimConfig, Precision, RunConfig,
};

use crate::spec::BackboneSpec;

/// Presets shipped with segtool, by name (the file stem in `configs/`).
///
/// They are compiled in so `--config cityscapes-danet-r101` works from any directory and
/// an installed binary needs no data files.
const PRESETS: &[(&str, &str)] = &[
    (
        "shapes-tiny",
        include_str!("../../../configs/shapes-tiny.toml"),
    ),
    (
        "cityscapes-danet-r101",
        include_str!("../../../configs/cityscapes-danet-r101.toml"),
    ),
    (
        "ade20k-danet-r101",
        include_str!("../../../configs/ade20k-danet-r101.toml"),
    ),
    (
        "voc-danet-r101",
        include_str!("../../../configs/voc-danet-r101.toml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TOML syntax, a wrong type, or an unknown key. The message shows the offending
    /// line and names the key.
    #[error("invalid run config: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("cannot read run config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("run config {}: {source}", path.display())]
    File {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("unknown preset {name:?} (presets: {})", preset_list())]
    UnknownPreset { name: String },
    #[error("preset {name}: {source}")]
    Preset {
        name: String,
        source: toml::de::Error,
    },
    #[error("override {0:?}: expected KEY=VALUE, e.g. optim.lr=0.01")]
    OverrideSyntax(String),
    #[error("override {key}: {message}")]
    Override { key: String, message: String },
    /// Every problem [`RunConfig::validate`] found, each naming its key.
    #[error("invalid run config: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

fn preset_list() -> String {
    RunConfig::preset_names().join(", ")
}

impl RunConfig {
    /// Parses a TOML document; absent keys take their defaults. Does not validate.
    pub fn from_toml_str(s: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(s)?)
    }

    /// Reads and parses a TOML file; errors name the file. Does not validate.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::File {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A built-in preset by name (see [`RunConfig::preset_names`]). Does not validate.
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let name = name.strip_suffix(".toml").unwrap_or(name);
        let (_, text) = PRESETS
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| ConfigError::UnknownPreset { name: name.into() })?;
        toml::from_str(text).map_err(|source| ConfigError::Preset {
            name: name.into(),
            source,
        })
    }

    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|(n, _)| *n).collect()
    }

    /// A preset when `name_or_path` names one, else the file at that path: what a
    /// `--config` flag takes.
    pub fn preset_or_file(name_or_path: &str) -> Result<Self, ConfigError> {
        let stem = name_or_path.strip_suffix(".toml").unwrap_or(name_or_path);
        if PRESETS.iter().any(|(n, _)| *n == stem) && !Path::new(name_or_path).exists() {
            Self::preset(stem)
        } else {
            Self::load(name_or_path)
        }
    }

    /// Applies one `section.key=value` override, e.g. `optim.lr=0.01`,
    /// `model.multi_grid=[4,8,16]`, `data.dataset=cityscapes:/data/cs`.
    ///
    /// The value is read as a TOML value (number, bool, array, quoted string, inline
    /// table), and as a plain string when it is not one, so paths and names need no
    /// quotes. An empty value removes the key, which then takes its default (`None` for
    /// optional keys). The config is rebuilt from the modified tree, so a wrong type or
    /// an unknown key is an error naming the key, and `self` is unchanged on error.
    pub fn apply_override(&mut self, spec: &str) -> Result<(), ConfigError> {
        let (key, raw) = spec
            .split_once('=')
            .ok_or_else(|| ConfigError::OverrideSyntax(spec.into()))?;
        let (key, raw) = (key.trim(), raw.trim());
        let path: Vec<&str> = key.split('.').map(str::trim).collect();
        if path.iter().any(|p| p.is_empty()) {
            return Err(ConfigError::OverrideSyntax(spec.into()));
        }
        let fail = |message: String| ConfigError::Override {
            key: key.into(),
            message,
        };
        let mut tree = toml::Table::try_from(&*self)
            .map_err(|e| fail(format!("cannot serialise the current config: {e}")))?;
        let (last, parents) = path.split_last().expect("split yields at least one part");
        let mut table = &mut tree;
        for (depth, part) in parents.iter().enumerate() {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().ok_or_else(|| {
                fail(format!(
                    "{} is a value, not a section",
                    path[..=depth].join(".")
                ))
            })?;
        }
        if raw.is_empty() {
            table.remove(*last);
        } else {
            table.insert(last.to_string(), parse_value(raw));
        }
        *self = tree
            .try_into()
            .map_err(|e: toml::de::Error| fail(e.message().into()))?;
        Ok(())
    }

    /// Applies overrides in order; the first failure stops and is returned.
    pub fn apply_overrides<S: AsRef<str>>(
        &mut self,
        specs: impl IntoIterator<Item = S>,
    ) -> Result<(), ConfigError> {
        specs
            .into_iter()
            .try_for_each(|s| self.apply_override(s.as_ref()))
    }

    /// The config as a TOML document that [`RunConfig::from_toml_str`] reads back
    /// unchanged: what a run directory keeps as `config.toml`.
    ///
    /// # Panics
    ///
    /// If `out_dir` is not UTF-8 (TOML strings are): no parsed config holds one, and
    /// [`RunConfig::validate`] rejects one set in code.
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).expect("a run config with a UTF-8 out_dir serialises")
    }

    /// The run directory: `out_dir`, or `runs/<name>`.
    pub fn run_dir(&self) -> PathBuf {
        self.out_dir
            .clone()
            .unwrap_or_else(|| Path::new("runs").join(&self.name))
    }

    /// Images per optimiser step over all processes and accumulation steps.
    pub fn global_batch(&self) -> usize {
        let o = &self.optim;
        o.batch_size * o.world_size * o.accumulation
    }

    /// The backbone learning rate actually used: `lr`, or under linear scaling
    /// `lr * global_batch / lr_reference_batch`.
    pub fn effective_lr(&self) -> f64 {
        let o = &self.optim;
        match o.lr_scaling {
            LrScaling::None => o.lr,
            LrScaling::Linear => o.lr * self.global_batch() as f64 / o.lr_reference_batch as f64,
        }
    }

    /// Optimiser steps per epoch over `train_len` images: the last partial global batch
    /// is dropped, as DANet's loader does (2975 Cityscapes images / 8 = 371).
    pub fn iterations_per_epoch(&self, train_len: usize) -> u64 {
        (train_len / self.global_batch().max(1)) as u64
    }

    /// Total optimiser steps: `iterations`, or `epochs * iterations_per_epoch`. Zero
    /// when training by epochs on fewer images than one global batch.
    pub fn total_iterations(&self, train_len: usize) -> u64 {
        match (self.optim.iterations, self.optim.epochs) {
            (0, Some(epochs)) => epochs.saturating_mul(self.iterations_per_epoch(train_len)),
            (iterations, _) => iterations,
        }
    }

    /// The backbone this config asks for, with stride, stem and multi-grid applied.
    pub fn backbone_spec(&self) -> Result<BackboneSpec, ConfigError> {
        self.model.backbone_spec()
    }

    /// Lines to print when a run starts: the batch geometry and schedule a reader
    /// needs to compare this run with a published one. `train_len`: the training split's
    /// size, `None` when the dataset was not opened (`--print-config`): an epoch-based
    /// schedule then states its length per epoch as unknown.
    pub fn summary(&self, train_len: Option<usize>) -> String {
        let (o, m, a) = (&self.optim, &self.model, &self.augment);
        let mut s = String::new();
        let _ = writeln!(s, "run {} -> {}", self.name, self.run_dir().display());
        let _ = write!(
            s,
            "  model: {} OS{}{}",
            m.backbone,
            m.output_stride,
            if m.deep_stem { ", deep stem" } else { "" }
        );
        if let Some(grid) = &m.multi_grid {
            let _ = write!(s, ", multi-grid {grid:?}");
        }
        let attention = match m.attention {
            AttentionImpl::Explicit => "explicit",
            AttentionImpl::Sdpa => "sdpa",
        };
        let _ = writeln!(s, ", attention {attention}");
        let _ = write!(s, "  data: {}", self.data.dataset);
        if a.flip {
            let _ = write!(s, ", flip");
        }
        if let Some([lo, hi]) = a.scale_range {
            let _ = write!(s, ", scale [{lo}, {hi}] x {}", a.base_size);
        }
        if let Some(crop) = a.crop_size {
            let _ = write!(s, ", crop {crop}");
        }
        match train_len {
            Some(n) => {
                let _ = writeln!(s, ", {n} training images");
            }
            None => {
                let _ = writeln!(s, ", training images unknown (dataset not opened)");
            }
        }
        let _ = writeln!(
            s,
            "  batch: {} per process x {} processes x {} accumulation = {} global{}",
            o.batch_size,
            o.world_size,
            o.accumulation,
            self.global_batch(),
            if o.sync_bn { ", SyncBN" } else { "" }
        );
        let scaling = match o.lr_scaling {
            LrScaling::None => String::new(),
            LrScaling::Linear => format!(
                " (lr {} x {} / {})",
                o.lr,
                self.global_batch(),
                o.lr_reference_batch
            ),
        };
        let _ = writeln!(
            s,
            "  lr: {} effective{scaling}, head x{}, momentum {}, wd {}, poly {}, warm-up {}",
            self.effective_lr(),
            o.head_lr_mult,
            o.momentum,
            o.weight_decay,
            o.poly_power,
            o.warmup_iters
        );
        match (o.iterations, o.epochs, train_len) {
            (0, Some(epochs), Some(n)) => {
                let _ = write!(
                    s,
                    "  schedule: {epochs} epochs x {} it/epoch = {} iterations",
                    self.iterations_per_epoch(n),
                    self.total_iterations(n)
                );
            }
            (0, Some(epochs), None) => {
                let _ = write!(
                    s,
                    "  schedule: {epochs} epochs x (training images / {}) it/epoch; \
                     iterations unknown (dataset not opened)",
                    self.global_batch()
                );
            }
            (iterations, _, _) => {
                let _ = write!(s, "  schedule: {iterations} iterations");
            }
        }
        s
    }
}

impl ModelConfig {
    /// Resolves `backbone` ("tiny", "resnetN") into a spec and checks it.
    pub fn backbone_spec(&self) -> Result<BackboneSpec, ConfigError> {
        let invalid = |msg: String| ConfigError::Invalid(vec![msg]);
        let mut spec = match self.backbone.as_str() {
            "tiny" => BackboneSpec::tiny(),
            name => name
                .strip_prefix("resnet")
                .and_then(|d| d.parse().ok())
                .and_then(|depth| BackboneSpec::resnet(depth, self.output_stride))
                .ok_or_else(|| {
                    invalid(format!(
                        "model.backbone {name:?}: expected tiny, resnet18, resnet34, \
                         resnet50, resnet101 or resnet152"
                    ))
                })?,
        };
        spec.output_stride = self.output_stride;
        spec.deep_stem = self.deep_stem;
        spec.multi_grid = self.multi_grid.clone();
        spec.validate()
            .map_err(|e| invalid(format!("model: {e}")))?;
        Ok(spec)
    }
}

/// An override's right-hand side as a TOML value, or as a string when it is not one
/// (`cityscapes:/data/cs`, `sdpa`, `runs/x`).
fn parse_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.into()))
}
