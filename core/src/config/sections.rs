//! The sections of a run configuration and their defaults.
//!
//! Defaults reproduce what `segtool train` does without flags (tiny backbone on the
//! built-in `shapes` stream) with the published DANet optimiser (SGD 0.9, wd 1e-4,
//! lr 0.003 with the head at 10x, poly 0.9, no warm-up), so an empty file is a valid,
//! small run and a preset only has to state what it changes.
//!
//! Every struct is `deny_unknown_fields`: a misspelt key (`optim.lrr`) is an error that
//! names it, never a silently ignored setting that costs a week of GPU time.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use segtool_model_spec::protocol::Protocol;

pub use segtool_model_spec::spec::AttentionImpl;

/// `[model]`: which DANet to build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// "tiny" or "resnet18/34/50/101/152".
    pub backbone: String,
    /// 8 or 16.
    pub output_stride: i64,
    /// PyTorch-Encoding's deep_base stem (three 3x3 convs), as DANet's released ResNets use.
    pub deep_stem: bool,
    /// Dilations of layer4's blocks in turn (DANet: [4, 8, 16]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_grid: Option<Vec<i64>>,
    /// PAM/CAM implementation; same function and gradients, different memory.
    pub attention: AttentionImpl,
    /// Initial weights (.pth, .pth.tar, .safetensors); `None` trains from scratch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init: Option<String>,
    /// Dropout2d probability before every classifier (DANet's conv6/7/8, mmseg's
    /// `dropout_ratio`, the aux head's too); 0 disables it.
    pub dropout: f64,
    /// `align_corners` of the bilinear upsampling of logits to the input: DANet's code
    /// uses true; mmsegmentation's configs false (true in its 769x769 Cityscapes ones).
    pub align_corners: bool,
    /// mmsegmentation's auxiliary FCN head (training only); `None`: none, as DANet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aux_head: Option<AuxHeadConfig>,
}

/// `model.aux_head`: an FCN head (3x3 conv, BN, ReLU, Dropout2d, 1x1 classifier) on a
/// backbone stage, whose cross-entropy joins the loss with `loss_weight`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuxHeadConfig {
    /// Backbone stage it reads: 3 is layer3 (1024 channels in ResNet-50/101).
    pub in_layer: usize,
    /// Width of its 3x3 conv.
    pub channels: i64,
    pub loss_weight: f64,
}

impl Default for AuxHeadConfig {
    /// mmsegmentation's DANet configs: layer3, 256 channels, weight 0.4.
    fn default() -> Self {
        Self {
            in_layer: 3,
            channels: 256,
            loss_weight: 0.4,
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            backbone: "tiny".into(),
            output_stride: 8,
            deep_stem: false,
            multi_grid: None,
            attention: AttentionImpl::Explicit,
            init: None,
            dropout: 0.1,
            align_corners: true,
            aux_head: None,
        }
    }
}

/// `[data]`: where samples come from and how they are loaded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// CLI syntax: "shapes", "cityscapes:PATH", "ade20k:PATH", "voc:PATH",
    /// "voc-aug:PATH", or a dataset folder.
    pub dataset: String,
    pub train_split: String,
    /// Split validated on during and after training; empty: no validation.
    pub val_split: String,
    /// Loader threads decoding and augmenting; 0 loads on the training thread.
    pub workers: usize,
    /// Batches queued ahead of the training step.
    pub prefetch: usize,
    /// Side of the generated `shapes` images, in pixels.
    pub shapes_size: u32,
    pub shapes_train_count: usize,
    pub shapes_val_count: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            dataset: "shapes".into(),
            train_split: "train".into(),
            val_split: "val".into(),
            workers: 2,
            prefetch: 4,
            shapes_size: 96,
            shapes_train_count: 2000,
            shapes_val_count: 200,
        }
    }
}

/// `augment.photometric`: mmsegmentation's `PhotoMetricDistortion` on the cropped image:
/// brightness, then contrast either second or last (a coin flip), saturation and hue in
/// HSV between, each applied with probability 0.5.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PhotometricConfig {
    /// Added to every channel: U(-delta, delta).
    pub brightness_delta: f64,
    /// Every channel multiplied by U(lo, hi).
    pub contrast_range: [f64; 2],
    /// HSV saturation multiplied by U(lo, hi).
    pub saturation_range: [f64; 2],
    /// Added to the HSV hue (0..180, OpenCV's 8-bit scale): an integer in [-delta, delta).
    pub hue_delta: i32,
}

impl Default for PhotometricConfig {
    /// mmsegmentation's defaults, as its configs use them.
    fn default() -> Self {
        Self {
            brightness_delta: 32.0,
            contrast_range: [0.5, 1.5],
            saturation_range: [0.5, 1.5],
            hue_delta: 18,
        }
    }
}

/// `[augment]`: training-time augmentation, applied in this order: flip, rescale, crop,
/// colour jitter or photometric distortion, blur.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AugmentConfig {
    /// Horizontal flip with probability 0.5.
    pub flip: bool,
    /// Short side is rescaled to `base_size * U(lo, hi)` when `scale_range` is set.
    pub base_size: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_range: Option<[f64; 2]>,
    /// mmsegmentation's `RandomResize(scale=(long, short), ratio_range=scale_range,
    /// keep_ratio=True)` instead of `base_size`: r ~ U(scale_range), and the image is
    /// rescaled as large as fits in (int(long r), int(short r)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize_scale: Option<[u32; 2]>,
    /// Random crop, padding first (image with 0, mask with ignore) when smaller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crop_size: Option<u32>,
    /// A rectangular random crop, [height, width] (mmseg's `crop_size=(512, 1024)`);
    /// instead of `crop_size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crop_hw: Option<[u32; 2]>,
    /// mmsegmentation's `RandomCrop(cat_max_ratio)`: the crop window is drawn again (up to
    /// 10 times) while one class covers `cat_max_ratio` or more of its labelled pixels
    /// (or it holds fewer than two classes). 1 turns it off.
    pub cat_max_ratio: f64,
    /// mmsegmentation's `PhotoMetricDistortion` (instead of `color_jitter`); `None`: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub photometric: Option<PhotometricConfig>,
    /// Pad the crop after normalisation with 0 (the mean colour), as mmsegmentation's
    /// `SegDataPreProcessor(size=crop_size)`; false: with black pixels before it (DANet's,
    /// and mmseg's `Pad` in its VOC pipeline). The mask is padded with ignore either way.
    pub pad_after_normalize: bool,
    /// Brightness/contrast/saturation jitter strength; 0 is off.
    pub color_jitter: f64,
    /// Probability of a Gaussian blur; 0 is off.
    pub blur_prob: f64,
    /// Blur sigma drawn from U(lo, hi).
    pub blur_sigma: [f64; 2],
}

impl Default for AugmentConfig {
    fn default() -> Self {
        Self {
            flip: true,
            base_size: 0,
            scale_range: None,
            resize_scale: None,
            crop_size: None,
            crop_hw: None,
            cat_max_ratio: 1.0,
            photometric: None,
            pad_after_normalize: false,
            color_jitter: 0.0,
            blur_prob: 0.0,
            blur_sigma: [0.1, 2.0],
        }
    }
}

/// How the learning rate follows the global batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrScaling {
    /// `lr` is used as written, whatever the batch.
    #[default]
    None,
    /// `lr * global_batch / lr_reference_batch` (Goyal et al.'s linear scaling rule), so
    /// a recipe published for one batch can run on fewer or more devices.
    Linear,
}

/// Which iteration the poly decay reaches `min_lr` at (`optim.poly_form`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolyForm {
    /// DANet's `(1 - it / total)^power`: `min_lr` one step past the last iteration.
    #[default]
    Danet,
    /// mmengine's `PolyLR`, whose `total_iters` is `end - begin - 1`: `(1 - it / (total -
    /// 1))^power`, `min_lr` at the last iteration.
    Mmengine,
}

/// Numeric precision of training (`optim.precision`): parameters, gradients and the
/// optimiser stay fp32; `fp16` and `bf16` run the forward pass under autocast (attention
/// energies and softmax in fp32), `fp16` with dynamic loss scaling and on CUDA only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    Fp32,
    Fp16,
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

/// `[optim]`: schedule, batch geometry, optimiser, loss and numerics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Total optimiser steps; 0 derives them from `epochs`.
    pub iterations: u64,
    /// Passes over the training set (with drop_last); only when `iterations` is 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
    /// Images per process per forward pass.
    pub batch_size: usize,
    /// Nominal number of data-parallel processes the recipe assumes.
    pub world_size: usize,
    /// Forward/backward passes summed into one optimiser step.
    pub accumulation: usize,
    /// Backbone learning rate (before `lr_scaling`); the head uses `lr * head_lr_mult`.
    pub lr: f64,
    pub head_lr_mult: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// Poly decay: (lr - min_lr) * (1 - it / total)^power + min_lr, per iteration.
    pub poly_power: f64,
    /// The learning rate poly decay ends at (mmengine's PolyLR `eta_min`); 0: DANet's.
    pub min_lr: f64,
    /// `danet`: (1 - it / total)^power; `mmengine`: PolyLR's (1 - it / (total - 1))^power.
    pub poly_form: PolyForm,
    /// Linear warm-up length in iterations; 0 is none.
    pub warmup_iters: u64,
    /// Learning rate at iteration 0 as a fraction of the scheduled one.
    pub warmup_ratio: f64,
    /// Weights of the (fused, position, channel) cross-entropy losses.
    pub loss_weights: [f64; 3],
    /// Each cross-entropy is the sum over labelled pixels divided by ALL pixels, ignored
    /// ones included (mmsegmentation's `CrossEntropyLoss` with `avg_non_ignore=False`, its
    /// default); false: the mean over labelled pixels (PyTorch's, DANet's).
    pub ce_mean_over_all_pixels: bool,
    /// Online hard example mining: keep pixels whose true-class probability is below
    /// `ohem_thresh`, and at least `ohem_min_kept` of them.
    pub ohem: bool,
    pub ohem_thresh: f64,
    pub ohem_min_kept: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_clip_norm: Option<f64>,
    /// Mixed precision as PyTorch AMP's default: the same as `precision = "fp16"` (kept for
    /// configs written before `precision`).
    pub amp: bool,
    /// fp32, fp16 (CUDA autocast + dynamic loss scaling) or bf16 (autocast, CPU or CUDA).
    pub precision: Precision,
    /// BatchNorm statistics over the global batch rather than per process.
    pub sync_bn: bool,
    pub lr_scaling: LrScaling,
    /// The global batch `lr` was published for (used by `lr_scaling = "linear"`).
    pub lr_reference_batch: usize,
}

impl OptimConfig {
    /// The precision training runs in: `precision`, or fp16 for `amp = true` with
    /// `precision` left at fp32.
    pub fn effective_precision(&self) -> Precision {
        match (self.amp, self.precision) {
            (true, Precision::Fp32) => Precision::Fp16,
            (_, p) => p,
        }
    }
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            iterations: 1000,
            epochs: None,
            batch_size: 8,
            world_size: 1,
            accumulation: 1,
            lr: 0.003,
            head_lr_mult: 10.0,
            momentum: 0.9,
            weight_decay: 1e-4,
            nesterov: false,
            poly_power: 0.9,
            min_lr: 0.0,
            poly_form: PolyForm::Danet,
            warmup_iters: 0,
            warmup_ratio: 1e-6,
            loss_weights: [1.0, 1.0, 1.0],
            ce_mean_over_all_pixels: false,
            ohem: false,
            ohem_thresh: 0.7,
            ohem_min_kept: 100_000,
            grad_clip_norm: None,
            amp: false,
            precision: Precision::Fp32,
            sync_bn: false,
            lr_scaling: LrScaling::None,
            lr_reference_batch: 8,
        }
    }
}

/// `[checkpoint]`: what is kept on disk during a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Iterations between saves of `last`; 0 saves only at the end.
    pub every: u64,
    /// Periodic snapshots kept besides `last` and `best`; 0 keeps none.
    pub keep: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            every: 500,
            keep: 0,
        }
    }
}

/// How validation images are fed to the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalMode {
    /// The whole image in one forward pass.
    #[default]
    Whole,
    /// Overlapping `crop_size` windows every `stride` pixels, zero-padded, logits averaged.
    Sliding,
}

/// `[eval]`: validation during and after training.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Iterations between validations; 0 validates only at the end.
    pub every: u64,
    /// `danet` (DANet's MultiEvalModule, behind the published numbers) or `mmseg`
    /// (mmsegmentation's edge-aligned windows, logits averaged).
    pub protocol: Protocol,
    /// danet protocol: the long side at scale 1.0 (unset: each image's own long side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_size: Option<u32>,
    pub mode: EvalMode,
    /// Sliding window side (sliding mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crop_size: Option<u32>,
    /// Sliding window step (sliding mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stride: Option<u32>,
    /// Average with the horizontally flipped prediction.
    pub flip: bool,
    /// Image scales whose predictions are averaged; [1.0] is single-scale.
    pub scales: Vec<f64>,
    pub batch_size: usize,
    /// mmseg protocol: the test pipeline's keep-ratio resize `[long, short]` of each image
    /// before a single pass (mmsegmentation's `Resize(scale=..., keep_ratio=True)`; the
    /// trained model's spec records it, so `segtool eval` defaults to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<[usize; 2]>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            every: 0,
            protocol: Protocol::Mmseg,
            base_size: None,
            mode: EvalMode::Whole,
            crop_size: None,
            stride: None,
            flip: false,
            scales: vec![1.0],
            batch_size: 1,
            resize: None,
        }
    }
}

/// `[log]`: progress output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Iterations between log lines and JSONL records.
    pub every: u64,
    /// Iterations between redraws of the loss plot; 0 draws it only at the end.
    pub plot_every: u64,
    /// TensorBoard event files in the run directory (`events.out.tfevents.*`), flushed at
    /// every log interval.
    pub tensorboard: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            every: 20,
            plot_every: 500,
            tensorboard: true,
        }
    }
}

/// `[quant]`: quantisation-aware training. The run fine-tunes the trained model of
/// `model.init` with fake quantisation placed as the INT8 export places its
/// QuantizeLinear/DequantizeLinear pairs; its checkpoints export straight to INT8. The
/// names are the calibration crate's (`segtool calibrate`'s flags), checked when the run
/// starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuantConfig {
    /// Where the Q/DQ pairs go and how activations are encoded: `portable` (int8,
    /// symmetric; every engine), `ort-cpu` (uint8 activations, zero point 128 after
    /// signed tensors; ONNX Runtime's CPU kernels), `openvino`.
    pub layout: String,
    /// Integer range of the weights: `full` ([-127, 127]), `reduced` ([-63, 63], for CPUs
    /// without VNNI) or `auto` (this CPU's).
    pub weight_range: String,
    /// How activation ranges move: `ema` (moving average of each batch's range, gradients
    /// through rounding by the straight-through estimator) or `lsq` (learned by gradient).
    pub ranges: String,
    /// Calibrator of the initial ranges: `entropy`, `minmax`, `percentile`, `mse`.
    pub method: String,
    /// Percentile of |x| kept by `method = "percentile"`.
    pub percentile: f64,
    /// Training images the initial calibration sees.
    pub calib_images: usize,
    /// Iteration from which BatchNorm statistics are frozen (the exported folding in the
    /// forward); unset: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freeze_bn_at: Option<u64>,
    /// `ranges = "ema"`: weight of each batch's range in the moving average.
    pub ema_momentum: f64,
    /// The engine the INT8 file is for (`ort`, `openvino`, `tensorrt`, `tract`): a layout
    /// it cannot run is refused before training starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_target: Option<String>,
}

impl Default for QuantConfig {
    fn default() -> Self {
        Self {
            layout: "portable".into(),
            weight_range: "auto".into(),
            ranges: "ema".into(),
            method: "entropy".into(),
            percentile: 99.99,
            calib_images: 32,
            freeze_bn_at: None,
            ema_momentum: 0.01,
            export_target: None,
        }
    }
}

/// Everything one training run needs, as read from a TOML file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Run name; names the default run directory.
    pub name: String,
    pub seed: u64,
    /// Run directory; `None` means `runs/<name>` (see [`RunConfig::run_dir`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_dir: Option<PathBuf>,
    pub model: ModelConfig,
    pub data: DataConfig,
    pub augment: AugmentConfig,
    pub optim: OptimConfig,
    pub checkpoint: CheckpointConfig,
    pub eval: EvalConfig,
    pub log: LogConfig,
    /// Quantisation-aware training; `None`: float training.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quant: Option<QuantConfig>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            name: "run".into(),
            seed: 0,
            out_dir: None,
            model: ModelConfig::default(),
            data: DataConfig::default(),
            augment: AugmentConfig::default(),
            optim: OptimConfig::default(),
            checkpoint: CheckpointConfig::default(),
            eval: EvalConfig::default(),
            log: LogConfig::default(),
            quant: None,
        }
    }
}
