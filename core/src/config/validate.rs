//! Semantic checks on a parsed [`RunConfig`].
//!
//! Types and key names are checked by serde while parsing; this catches values that
//! parse but cannot train: an empty batch, a scale range upside down, a crop larger than
//! any GPU holds. All problems are reported at once, each naming its key, so fixing a
//! config is one edit, not one run per mistake.

use super::{ConfigError, EvalMode, RunConfig};

/// Largest crop or window side accepted. PAM's N x N energy matrix for a 4096 crop at
/// output stride 8 is already 1 TB in fp32; anything above is a typo.
const MAX_CROP: u32 = 4096;

/// Largest base (short side) size accepted: twice the largest image of any dataset
/// segtool reads (Cityscapes 2048 wide).
const MAX_BASE: u32 = 8192;

/// Dataset prefixes of the CLI syntax that must be followed by a path.
const DATASET_PREFIXES: &[&str] = &["cityscapes:", "ade20k:", "voc:", "voc-aug:"];

impl RunConfig {
    /// Checks every value; `Err(ConfigError::Invalid)` lists each problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        if let Err(ConfigError::Invalid(msgs)) = self.model.backbone_spec() {
            p.0.extend(msgs);
        }
        self.check_name_and_model(&mut p);
        self.check_data(&mut p);
        self.check_augment(&mut p);
        self.check_optim(&mut p);
        self.check_eval_and_log(&mut p);
        self.check_quant(&mut p);
        match p.0.is_empty() {
            true => Ok(()),
            false => Err(ConfigError::Invalid(p.0)),
        }
    }

    fn check_name_and_model(&self, p: &mut Problems) {
        let mut check = |ok, msg| p.check(ok, msg);
        check(
            !self.name.is_empty() && !self.name.contains(['/', '\\']) && self.name != "..",
            format!(
                "name {:?} must be non-empty, without path separators",
                self.name
            ),
        );

        if let Some(init) = &self.model.init {
            check(!init.is_empty(), "model.init must not be empty".into());
        }
        check(
            (0.0..1.0).contains(&self.model.dropout),
            format!("model.dropout {} must be in [0, 1)", self.model.dropout),
        );
        if let Some(aux) = &self.model.aux_head {
            check(
                (1..=4).contains(&aux.in_layer),
                format!("model.aux_head.in_layer {} must be in 1..=4", aux.in_layer),
            );
            check(
                aux.channels >= 1,
                format!("model.aux_head.channels {} must be positive", aux.channels),
            );
            check(
                finite_nonneg(aux.loss_weight),
                format!(
                    "model.aux_head.loss_weight {} must be >= 0",
                    aux.loss_weight
                ),
            );
        }
    }

    fn check_data(&self, p: &mut Problems) {
        let mut check = |ok, msg| p.check(ok, msg);
        let d = &self.data;
        check(
            !d.dataset.is_empty(),
            "data.dataset must not be empty".into(),
        );
        if let Some(prefix) = DATASET_PREFIXES.iter().find(|p| d.dataset.starts_with(*p)) {
            check(
                d.dataset.len() > prefix.len(),
                format!("data.dataset {:?} needs a path after {prefix:?}", d.dataset),
            );
        }
        check(
            !d.train_split.is_empty(),
            "data.train_split must not be empty".into(),
        );
        check(d.prefetch >= 1, "data.prefetch must be at least 1".into());
        if d.dataset == "shapes" {
            check(
                (16..=MAX_CROP).contains(&d.shapes_size),
                format!(
                    "data.shapes_size {} must be in 16..={MAX_CROP}",
                    d.shapes_size
                ),
            );
            check(
                d.shapes_train_count >= 1,
                "data.shapes_train_count must be at least 1".into(),
            );
            check(
                d.shapes_val_count >= 1,
                "data.shapes_val_count must be at least 1".into(),
            );
        }
    }

    fn check_augment(&self, p: &mut Problems) {
        let a = &self.augment;
        let mut check = |ok, msg| p.check(ok, msg);
        check(
            a.base_size <= MAX_BASE,
            format!("augment.base_size {} is above {MAX_BASE}", a.base_size),
        );
        if let Some([lo, hi]) = a.scale_range {
            check(
                lo.is_finite() && hi.is_finite() && 0.0 < lo && lo < hi,
                format!("augment.scale_range [{lo}, {hi}] must satisfy 0 < lo < hi"),
            );
            check(
                a.base_size > 0 || a.resize_scale.is_some(),
                "augment.scale_range needs augment.base_size > 0 (or augment.resize_scale)".into(),
            );
        }
        if let Some([long, short]) = a.resize_scale {
            check(
                (1..=MAX_BASE).contains(&long) && (1..=MAX_BASE).contains(&short),
                format!("augment.resize_scale [{long}, {short}] must be in 1..={MAX_BASE}"),
            );
            check(
                a.base_size == 0,
                "augment.resize_scale replaces augment.base_size: set augment.base_size = 0".into(),
            );
            check(
                a.scale_range.is_some(),
                "augment.resize_scale needs augment.scale_range (mmseg's ratio_range)".into(),
            );
        }
        let min_crop = self.model.output_stride.max(1) as u32;
        if let Some(crop) = a.crop_size {
            check(
                (min_crop..=MAX_CROP).contains(&crop),
                format!("augment.crop_size {crop} must be in {min_crop}..={MAX_CROP}"),
            );
        }
        if let Some([h, w]) = a.crop_hw {
            check(
                (min_crop..=MAX_CROP).contains(&h) && (min_crop..=MAX_CROP).contains(&w),
                format!("augment.crop_hw [{h}, {w}] must be in {min_crop}..={MAX_CROP}"),
            );
            check(
                a.crop_size.is_none(),
                "augment.crop_hw and augment.crop_size are both set: keep one".into(),
            );
        }
        check(
            !a.pad_after_normalize || a.crop_size.is_some() || a.crop_hw.is_some(),
            "augment.pad_after_normalize needs a crop (augment.crop_size or augment.crop_hw)"
                .into(),
        );
        check(
            a.cat_max_ratio > 0.0 && a.cat_max_ratio <= 1.0,
            format!(
                "augment.cat_max_ratio {} must be in (0, 1]",
                a.cat_max_ratio
            ),
        );
        check(
            a.cat_max_ratio == 1.0 || a.crop_size.is_some() || a.crop_hw.is_some(),
            "augment.cat_max_ratio needs a crop (augment.crop_size or augment.crop_hw)".into(),
        );
        // In the order the keys are documented: photometric before color_jitter.
        if let Some(photometric) = &a.photometric {
            check_photometric(photometric, a.color_jitter, p);
        }
        let mut check = |ok, msg| p.check(ok, msg);
        check(
            prob(a.color_jitter),
            format!("augment.color_jitter {} must be in [0, 1]", a.color_jitter),
        );
        check(
            prob(a.blur_prob),
            format!("augment.blur_prob {} must be in [0, 1]", a.blur_prob),
        );
        if a.blur_prob > 0.0 {
            let [lo, hi] = a.blur_sigma;
            check(
                finite_nonneg(lo) && hi.is_finite() && lo < hi,
                format!("augment.blur_sigma [{lo}, {hi}] must satisfy 0 <= lo < hi"),
            );
        }
    }

    fn check_optim(&self, p: &mut Problems) {
        self.check_schedule(p);
        self.check_rates(p);
        self.check_loss(p);
    }

    /// Iterations or epochs, and the batch.
    fn check_schedule(&self, p: &mut Problems) {
        let mut check = |ok, msg| p.check(ok, msg);
        let o = &self.optim;
        match (o.iterations, o.epochs) {
            (0, None) => check(
                false,
                "optim.iterations is 0 and optim.epochs is unset: give one of them".into(),
            ),
            (0, Some(e)) => check(e >= 1, "optim.epochs must be at least 1".into()),
            (_, Some(_)) => check(
                false,
                "optim.iterations and optim.epochs are both set: set optim.iterations = 0 \
                 to train by epochs, or remove optim.epochs"
                    .into(),
            ),
            (it, None) => check(
                o.warmup_iters < it,
                format!(
                    "optim.warmup_iters {} must be below optim.iterations {it}",
                    o.warmup_iters
                ),
            ),
        }
        check(
            o.batch_size >= 1,
            "optim.batch_size must be at least 1".into(),
        );
        check(
            o.world_size >= 1,
            "optim.world_size must be at least 1".into(),
        );
        check(
            o.accumulation >= 1,
            "optim.accumulation must be at least 1".into(),
        );
    }

    /// Learning rate, momentum, weight decay and warm-up.
    fn check_rates(&self, p: &mut Problems) {
        let mut check = |ok, msg| p.check(ok, msg);
        let o = &self.optim;
        check(
            o.lr.is_finite() && o.lr > 0.0,
            format!("optim.lr {} must be positive", o.lr),
        );
        check(
            o.head_lr_mult.is_finite() && o.head_lr_mult > 0.0,
            format!("optim.head_lr_mult {} must be positive", o.head_lr_mult),
        );
        check(
            (0.0..1.0).contains(&o.momentum),
            format!("optim.momentum {} must be in [0, 1)", o.momentum),
        );
        // PyTorch's SGD refuses the same combination.
        check(
            !o.nesterov || o.momentum > 0.0,
            "optim.nesterov needs optim.momentum > 0".into(),
        );
        check(
            finite_nonneg(o.weight_decay),
            format!("optim.weight_decay {} must be >= 0", o.weight_decay),
        );
        check(
            finite_nonneg(o.poly_power),
            format!("optim.poly_power {} must be >= 0", o.poly_power),
        );
        check(
            o.min_lr.is_finite() && 0.0 <= o.min_lr && o.min_lr < o.lr,
            format!(
                "optim.min_lr {} must be >= 0 and below optim.lr {}",
                o.min_lr, o.lr
            ),
        );
        check(
            prob(o.warmup_ratio),
            format!("optim.warmup_ratio {} must be in [0, 1]", o.warmup_ratio),
        );
    }

    /// Loss weights, OHEM, clipping and precision.
    fn check_loss(&self, p: &mut Problems) {
        let mut check = |ok, msg| p.check(ok, msg);
        let o = &self.optim;
        check(
            o.loss_weights.iter().all(|&w| finite_nonneg(w))
                && o.loss_weights.iter().any(|&w| w > 0.0),
            format!(
                "optim.loss_weights {:?} must be >= 0 and not all 0",
                o.loss_weights
            ),
        );
        if o.ohem {
            check(
                !o.ce_mean_over_all_pixels,
                "optim.ohem and optim.ce_mean_over_all_pixels are exclusive: OHEM averages \
                 over the pixels it keeps"
                    .into(),
            );
            check(
                o.ohem_thresh > 0.0 && o.ohem_thresh <= 1.0,
                format!("optim.ohem_thresh {} must be in (0, 1]", o.ohem_thresh),
            );
        }
        if let Some(norm) = o.grad_clip_norm {
            check(
                norm.is_finite() && norm > 0.0,
                format!("optim.grad_clip_norm {norm} must be positive"),
            );
        }
        check(
            !o.amp || o.precision != super::Precision::Bf16,
            "optim.amp = true means fp16 and conflicts with optim.precision = \"bf16\": \
             set optim.amp = false"
                .into(),
        );
        check(
            o.lr_reference_batch >= 1,
            "optim.lr_reference_batch must be at least 1".into(),
        );
    }

    fn check_eval_and_log(&self, p: &mut Problems) {
        let mut check = |ok, msg| p.check(ok, msg);
        let min_crop = self.model.output_stride.max(1) as u32;
        let e = &self.eval;
        if let Some(resize) = e.resize {
            check(
                e.protocol == segtool_model_spec::protocol::Protocol::Mmseg
                    && resize.iter().all(|&s| s > 0),
                format!("eval.resize {resize:?} needs protocol = \"mmseg\" and two sides > 0"),
            );
        }
        if e.mode == EvalMode::Sliding {
            match (e.crop_size, e.stride) {
                (Some(crop), Some(stride)) => {
                    check(
                        (min_crop..=MAX_CROP).contains(&crop),
                        format!("eval.crop_size {crop} must be in {min_crop}..={MAX_CROP}"),
                    );
                    check(
                        1 <= stride && stride <= crop,
                        format!("eval.stride {stride} must be in 1..=eval.crop_size ({crop})"),
                    );
                }
                _ => check(
                    false,
                    "eval.mode = \"sliding\" needs eval.crop_size and eval.stride".into(),
                ),
            }
        }
        check(
            !e.scales.is_empty() && e.scales.iter().all(|&s| s.is_finite() && s > 0.0),
            format!("eval.scales {:?} must be non-empty and positive", e.scales),
        );
        check(
            e.batch_size >= 1,
            "eval.batch_size must be at least 1".into(),
        );
        match (e.protocol, e.base_size) {
            (segtool_model_spec::protocol::Protocol::Mmseg, Some(b)) => check(
                false,
                format!("eval.base_size {b} applies to eval.protocol = \"danet\" only"),
            ),
            (segtool_model_spec::protocol::Protocol::Danet, Some(0)) => {
                check(false, "eval.base_size must be at least 1".into())
            }
            _ => {}
        }

        check(self.log.every >= 1, "log.every must be at least 1".into());
        if let Some(dir) = &self.out_dir {
            check(
                dir.to_str().is_some_and(|d| !d.is_empty()),
                format!("out_dir {} must be non-empty UTF-8", dir.display()),
            );
        }
    }
}

impl RunConfig {
    /// `[quant]`'s numbers (its names are checked by the training crate, which owns them).
    fn check_quant(&self, p: &mut Problems) {
        let Some(q) = &self.quant else { return };
        let mut check = |ok, msg| p.check(ok, msg);
        check(
            q.calib_images >= 1,
            "quant.calib_images must be at least 1".into(),
        );
        check(
            q.ema_momentum > 0.0 && q.ema_momentum <= 1.0,
            format!("quant.ema_momentum {} must be in (0, 1]", q.ema_momentum),
        );
        check(
            q.percentile > 0.0 && q.percentile <= 100.0,
            format!("quant.percentile {} must be in (0, 100]", q.percentile),
        );
        check(
            self.model.init.is_some(),
            "quant needs model.init: quantisation-aware training fine-tunes a trained model".into(),
        );
    }
}

/// Every problem found, each naming its key.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn check(&mut self, ok: bool, msg: String) {
        if !ok {
            self.0.push(msg);
        }
    }
}

fn finite_nonneg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn prob(x: f64) -> bool {
    (0.0..=1.0).contains(&x)
}

/// `augment.photometric` (mmseg's PhotoMetricDistortion), which replaces `color_jitter`.
fn check_photometric(
    photometric: &super::PhotometricConfig,
    color_jitter: f64,
    problems: &mut Problems,
) {
    let mut check = |ok, msg| problems.check(ok, msg);
    let p = photometric;
    let range_ok = |[lo, hi]: [f64; 2]| lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi;
    check(
        p.brightness_delta.is_finite() && (0.0..=255.0).contains(&p.brightness_delta),
        format!(
            "augment.photometric.brightness_delta {} must be in [0, 255]",
            p.brightness_delta
        ),
    );
    check(
        range_ok(p.contrast_range),
        format!(
            "augment.photometric.contrast_range {:?} must satisfy 0 <= lo <= hi",
            p.contrast_range
        ),
    );
    check(
        range_ok(p.saturation_range),
        format!(
            "augment.photometric.saturation_range {:?} must satisfy 0 <= lo <= hi",
            p.saturation_range
        ),
    );
    check(
        (0..=180).contains(&p.hue_delta),
        format!(
            "augment.photometric.hue_delta {} must be in 0..=180",
            p.hue_delta
        ),
    );
    check(
        color_jitter == 0.0,
        "augment.photometric replaces augment.color_jitter: set it to 0".into(),
    );
}
