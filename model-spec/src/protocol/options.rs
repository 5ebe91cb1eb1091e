//! The protocol's options: one builder for training's evaluation and the runtime's
//! accuracy mode, with the paper's presets.

use super::{Protocol, MULTI_SCALES};
use crate::{MmsegTestCfg, ModelSpec};

/// How each scaled image goes through the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiling {
    /// The whole (scaled) image in one pass.
    Whole,
    /// `crop` x `crop` windows `stride` pixels apart, placed as the protocol says.
    Sliding {
        /// Side of the square window, in pixels of the scaled image.
        crop: usize,
        /// Distance between window origins, in pixels (less than `crop` overlaps).
        stride: usize,
    },
}

/// Everything [`predict`](super::predict) needs to know about the protocol, built with
/// chained setters from [`ProtocolOptions::new`] or the paper's presets. Training's
/// evaluation and the runtime's accuracy mode both take it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProtocolOptions {
    /// DANet's `MultiEvalModule` or mmsegmentation's inference.
    pub protocol: Protocol,
    /// Whole image or sliding windows.
    pub tiling: Tiling,
    /// Also run the mirrored image (combined as the protocol says).
    pub flip: bool,
    /// Scales whose (resized back) scores are summed.
    pub scales: Vec<f64>,
    /// DANet: the long side at scale 1.0. `None`: each image's own long side, so scale 1.0
    /// is the native resolution. Unused by mmseg.
    pub base_size: Option<usize>,
    /// mmseg: the test pipeline's `Resize(scale=(long, short), keep_ratio=True)` before a
    /// single pass (not applied under TTA, whose ratios scale the original image, as in
    /// mmseg). `None`: the native resolution. Unused by DANet.
    pub resize: Option<[usize; 2]>,
    /// Sliding: windows of one image per network run. Whole: images of one size per run
    /// where the caller batches images (training's evaluation over a dataset; the
    /// runtime's accuracy mode runs the batch it is handed). Flip doubles either.
    pub batch_size: usize,
}

impl Default for ProtocolOptions {
    /// mmsegmentation's protocol, whole image, scale 1.0, no flip, batch 1.
    fn default() -> Self {
        Self {
            protocol: Protocol::Mmseg,
            tiling: Tiling::Whole,
            flip: false,
            scales: vec![1.0],
            base_size: None,
            resize: None,
            batch_size: 1,
        }
    }
}

impl ProtocolOptions {
    /// The [`Default`]: mmsegmentation's protocol, whole image, scale 1.0, no flip, batch 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// The published single-scale protocol (Cityscapes: DANet's test.py with
    /// `--base-size 2048 --crop-size 768`): DANet's `MultiEvalModule`, crop 768, stride
    /// 512, flip.
    pub fn paper_single_scale() -> Self {
        Self::new()
            .protocol(Protocol::Danet)
            .base_size(Some(2048))
            .sliding(768, 512)
            .flip(true)
    }

    /// The published multi-scale protocol: [`Self::paper_single_scale`] at the paper's
    /// [`MULTI_SCALES`].
    pub fn paper_multi_scale() -> Self {
        Self::paper_single_scale().scales(MULTI_SCALES.to_vec())
    }

    /// Which evaluation protocol.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// DANet protocol: the long side at scale 1.0 (`None`: each image's own).
    pub fn base_size(mut self, base_size: Option<usize>) -> Self {
        self.base_size = base_size;
        self
    }

    /// mmseg: keep-ratio resize to `(long, short)` before a single pass (`None`: none).
    pub fn resize(mut self, scale: Option<[usize; 2]>) -> Self {
        self.resize = scale;
        self
    }

    /// An mmseg config's test pipeline: mmseg's protocol, its keep-ratio scale, `whole`
    /// or `slide` with its crop and stride.
    pub fn mmseg_test(self, cfg: &MmsegTestCfg) -> Self {
        let opts = self.protocol(Protocol::Mmseg).resize(Some(cfg.scale));
        match (cfg.crop, cfg.stride) {
            (Some(crop), Some(stride)) => opts.sliding(crop, stride),
            _ => opts.whole(),
        }
    }

    /// How `spec`'s model is evaluated unless told otherwise: an imported mmseg
    /// checkpoint's own test pipeline ([`Self::mmseg_test`]), else [`Self::new`].
    pub fn for_model(spec: &ModelSpec) -> Self {
        match &spec.mmseg_test {
            Some(cfg) => Self::new().mmseg_test(cfg),
            None => Self::new(),
        }
    }

    /// mmseg's TTA: its ratios ([`super::mmseg::TTA_SCALES`]) and flip.
    pub fn mmseg_tta(self) -> Self {
        self.protocol(Protocol::Mmseg)
            .scales(super::mmseg::TTA_SCALES.to_vec())
            .flip(true)
    }

    /// Whole images or sliding windows.
    pub fn tiling(mut self, tiling: Tiling) -> Self {
        self.tiling = tiling;
        self
    }

    /// Each scaled image in one run.
    pub fn whole(self) -> Self {
        self.tiling(Tiling::Whole)
    }

    /// `crop` x `crop` windows, `stride` pixels apart.
    pub fn sliding(self, crop: usize, stride: usize) -> Self {
        self.tiling(Tiling::Sliding { crop, stride })
    }

    /// Also run the mirrored image.
    pub fn flip(mut self, flip: bool) -> Self {
        self.flip = flip;
        self
    }

    /// Scales whose scores are summed (e.g. [`MULTI_SCALES`]).
    pub fn scales(mut self, scales: Vec<f64>) -> Self {
        self.scales = scales;
        self
    }

    /// Windows (sliding) or images (whole) per run.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Rejects options that would leave pixels unpredicted or divide by zero: a stride
    /// above the crop leaves gaps between windows. The message names the bad values.
    pub fn validate(&self) -> Result<(), String> {
        if let Tiling::Sliding { crop, stride } = self.tiling {
            if crop < 1 || stride < 1 || stride > crop {
                return Err(format!(
                    "sliding window needs 1 <= stride <= crop, got crop {crop} stride {stride}"
                ));
            }
        }
        if self.scales.is_empty() || self.scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!(
                "scales must be positive numbers, got {:?}",
                self.scales
            ));
        }
        if self.batch_size == 0 {
            return Err("batch size must be at least 1".into());
        }
        if let Some(scale) = self.resize {
            if self.protocol != Protocol::Mmseg || scale.contains(&0) {
                return Err(format!(
                    "a keep-ratio resize ({scale:?}) applies to the mmseg protocol only, \
                     with both sides > 0"
                ));
            }
        }
        match (self.protocol, self.base_size) {
            (Protocol::Mmseg, Some(b)) => Err(format!(
                "a base size ({b}) applies to the danet protocol only"
            )),
            (Protocol::Danet, Some(0)) => Err("base size must be at least 1".into()),
            _ => Ok(()),
        }
    }
}
