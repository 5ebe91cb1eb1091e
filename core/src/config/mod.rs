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

mod presets;
mod sections;
mod validate;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mmseg;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use sections::{
    AttentionImpl, AugmentConfig, AuxHeadConfig, CheckpointConfig, DataConfig, EvalConfig,
    EvalMode, LogConfig, LrScaling, ModelConfig, OptimConfig, PhotometricConfig, PolyForm,
    Precision, QuantConfig, RunConfig,
};

use presets::{DERIVED_PRESETS, PRESETS};
use segtool_model_spec::spec::BackboneSpec;

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
        if let Some((_, text)) = PRESETS.iter().find(|(n, _)| *n == name) {
            return toml::from_str(text).map_err(|source| ConfigError::Preset {
                name: name.into(),
                source,
            });
        }
        let (_, base, overrides) = DERIVED_PRESETS
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| ConfigError::UnknownPreset { name: name.into() })?;
        let mut cfg = Self::preset(base)?;
        cfg.apply_overrides(overrides.iter())?;
        cfg.name = name.into();
        Ok(cfg)
    }

    /// Every built-in preset: the files in `configs/`, then their derived siblings.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS
            .iter()
            .map(|(n, _)| *n)
            .chain(DERIVED_PRESETS.iter().map(|(n, _, _)| *n))
            .collect()
    }

    /// A preset when `name_or_path` names one, else the file at that path: what a
    /// `--config` flag takes.
    pub fn preset_or_file(name_or_path: &str) -> Result<Self, ConfigError> {
        let stem = name_or_path.strip_suffix(".toml").unwrap_or(name_or_path);
        if Self::preset_names().contains(&stem) && !Path::new(name_or_path).exists() {
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
        let mut s = String::new();
        let _ = writeln!(s, "run {} -> {}", self.name, self.run_dir().display());
        self.model_line(&mut s);
        self.data_line(&mut s, train_len);
        self.optim_lines(&mut s);
        self.schedule_line(&mut s, train_len);
        s
    }

    /// `  model: ...`: backbone, stride, attention, heads.
    fn model_line(&self, s: &mut String) {
        let m = &self.model;
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
        let _ = write!(
            s,
            ", attention {attention}, dropout {}, align_corners {}",
            m.dropout, m.align_corners
        );
        if let Some(aux) = &m.aux_head {
            let _ = write!(
                s,
                ", aux FCN head on layer{} ({} channels, loss x{})",
                aux.in_layer, aux.channels, aux.loss_weight
            );
        }
        let _ = writeln!(s);
    }

    /// `  data: ...`: the dataset, augmentation and training images.
    fn data_line(&self, s: &mut String, train_len: Option<usize>) {
        let a = &self.augment;
        let _ = write!(s, "  data: {}", self.data.dataset);
        if a.flip {
            let _ = write!(s, ", flip");
        }
        match (a.scale_range, a.resize_scale) {
            (Some([lo, hi]), Some([long, short])) => {
                let _ = write!(
                    s,
                    ", RandomResize ({long}, {short}) x ratio [{lo}, {hi}] keep_ratio"
                );
            }
            (Some([lo, hi]), None) => {
                let _ = write!(s, ", scale [{lo}, {hi}] x {}", a.base_size);
            }
            (None, _) => {}
        }
        if let Some(crop) = a.crop_size {
            let _ = write!(s, ", crop {crop}");
        }
        if let Some([h, w]) = a.crop_hw {
            let _ = write!(s, ", crop {h}x{w} (h x w)");
        }
        if a.cat_max_ratio < 1.0 {
            let _ = write!(s, ", cat_max_ratio {}", a.cat_max_ratio);
        }
        if let Some(p) = &a.photometric {
            let _ = write!(
                s,
                ", PhotoMetricDistortion (brightness {}, contrast {:?}, saturation {:?}, hue {})",
                p.brightness_delta, p.contrast_range, p.saturation_range, p.hue_delta
            );
        }
        if a.pad_after_normalize {
            let _ = write!(s, ", padded after normalisation");
        }
        match train_len {
            Some(n) => {
                let _ = writeln!(s, ", {n} training images");
            }
            None => {
                let _ = writeln!(s, ", training images unknown (dataset not opened)");
            }
        }
    }

    /// `  batch:`, `  lr:` and `  loss:` lines.
    fn optim_lines(&self, s: &mut String) {
        let (o, m) = (&self.optim, &self.model);
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
            "  lr: {} effective{scaling}, head x{}, momentum {}, wd {}, poly {} ({}), min_lr {}, warm-up {}",
            self.effective_lr(),
            o.head_lr_mult,
            o.momentum,
            o.weight_decay,
            o.poly_power,
            match o.poly_form {
                PolyForm::Danet => "danet",
                PolyForm::Mmengine => "mmengine",
            },
            o.min_lr,
            o.warmup_iters
        );
        let _ = writeln!(
            s,
            "  loss: CE x {:?} (fused, PAM, CAM){}, averaged over {} pixels{}",
            o.loss_weights,
            m.aux_head
                .as_ref()
                .map_or(String::new(), |a| format!(" + {} x aux CE", a.loss_weight)),
            if o.ce_mean_over_all_pixels {
                "all (ignored included)"
            } else {
                "labelled"
            },
            if o.ohem { ", OHEM" } else { "" }
        );
    }

    /// `  schedule: ...`: iterations, or epochs and what they amount to.
    fn schedule_line(&self, s: &mut String, train_len: Option<usize>) {
        let o = &self.optim;
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
    }
}

impl ModelConfig {
    /// Resolves `backbone` ("tiny", "resnetN", "resnetNv1c") into a spec and checks it.
    pub fn backbone_spec(&self) -> Result<BackboneSpec, ConfigError> {
        let invalid = |msg: String| ConfigError::Invalid(vec![msg]);
        let mut spec = named_backbone(&self.backbone, self.output_stride).ok_or_else(|| {
            invalid(format!(
                "model.backbone {:?}: expected {BACKBONE_NAMES}",
                self.backbone
            ))
        })?;
        if spec.stem_widths.is_some() && !self.deep_stem {
            return Err(invalid(format!(
                "model.backbone {:?} has a deep stem: set model.deep_stem = true",
                self.backbone
            )));
        }
        spec.output_stride = self.output_stride;
        spec.deep_stem = self.deep_stem;
        spec.multi_grid = self.multi_grid.clone();
        spec.validate()
            .map_err(|e| invalid(format!("model: {e}")))?;
        Ok(spec)
    }
}

/// The backbone names [`named_backbone`] knows, for messages.
pub const BACKBONE_NAMES: &str = "tiny, resnet18/34/50/101/152, or resnet50v1c/resnet101v1c";

/// The backbone called `name` at `output_stride`: `tiny`, `resnetN` (torchvision's
/// ResNet-N, dilated), or `resnetNv1c` (mmsegmentation's `ResNetV1c`: a deep stem of
/// 3x3 convs 32, 32, 64 wide, `contract_dilation`). `None` for an unknown name.
pub fn named_backbone(name: &str, output_stride: i64) -> Option<BackboneSpec> {
    if name == "tiny" {
        return Some(BackboneSpec {
            output_stride,
            ..BackboneSpec::tiny()
        });
    }
    let rest = name.strip_prefix("resnet")?;
    let (depth, v1c) = match rest.strip_suffix("v1c") {
        Some(depth) => (depth, true),
        None => (rest, false),
    };
    let mut spec = BackboneSpec::resnet(depth.parse().ok()?, output_stride)?;
    if v1c {
        spec.deep_stem = true;
        spec.stem_widths = Some([32, 32, 64]);
        spec.contract_dilation = true;
    }
    Some(spec)
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
