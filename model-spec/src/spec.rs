//! The model spec: everything needed to rebuild a DANet from its weights.
//!
//! It travels as JSON under [`SPEC_METADATA_KEY`] in the safetensors header of a
//! checkpoint and in the ONNX model's `metadata_props`, so every file a user keeps is
//! self-describing.

use serde::{Deserialize, Serialize};

/// Metadata key (safetensors header, ONNX `metadata_props`) holding the spec as JSON.
pub const SPEC_METADATA_KEY: &str = "segtool.spec";

/// Largest backbone `width` a spec may give (torchvision's ResNets have 64). The bounds
/// keep every channel count and parameter count of the model far inside `i64`/`u64`, so a
/// few bytes of JSON cannot overflow the arithmetic; whether the checkpoint holds the
/// tensors of such a model is checked where it is loaded.
pub const MAX_WIDTH: i64 = 1 << 12;
/// Most blocks in one ResNet layer (ResNet-152 has 36 in layer3).
pub const MAX_BLOCKS: usize = 1 << 10;
/// Largest channel count of any other conv a spec names: the deep stem's, the head's
/// (`head_channels`), the auxiliary head's.
pub const MAX_CHANNELS: i64 = 1 << 16;
/// Largest dilation `multi_grid` may give.
pub const MAX_DILATION: i64 = 1 << 10;
/// Most classes: class maps hold `u8` ids up to 256 classes and `u16` ids above (the
/// runtime's masks, the C ABI's, mask PNGs of 8 or 16 bits).
pub const MAX_CLASSES: usize = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("invalid model spec JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid model spec: {0}")]
    Invalid(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockKind {
    /// Two 3x3 convs (ResNet-18/34). Expansion 1.
    Basic,
    /// 1x1, 3x3 (carries stride and dilation), 1x1 (ResNet-50/101/152). Expansion 4.
    Bottleneck,
}

impl BlockKind {
    pub fn expansion(self) -> i64 {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

/// How PAM and CAM compute attention. Both give the same function (and gradients); they
/// differ in memory: `Explicit` materialises PAM's N x N matrix (N = H*W / os^2), `Sdpa`
/// runs libtorch's fused scaled-dot-product attention, whose CPU flash kernel works on
/// tiles and never holds the N x N matrix. A training/runtime choice, not part of the
/// checkpoint: weights are identical either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionImpl {
    /// matmul, softmax, matmul, as DANet v0.5.0 writes it.
    #[default]
    Explicit,
    /// `scaled_dot_product_attention` (scale 1, no mask).
    Sdpa,
}

impl std::str::FromStr for AttentionImpl {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "explicit" => Ok(Self::Explicit),
            "sdpa" => Ok(Self::Sdpa),
            other => Err(SpecError::Invalid(format!(
                "attention {other:?}: explicit or sdpa"
            ))),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackboneSpec {
    pub block: BlockKind,
    /// Blocks in layer1..layer4.
    pub layers: [usize; 4],
    /// Channels of the stem and of layer1's 3x3 convs (64 in torchvision ResNets);
    /// layerK uses `width * 2^(K-1)`, times the block expansion at its output.
    pub width: i64,
    /// 8 or 16.
    pub output_stride: i64,
    /// Dilations of layer4's blocks in turn (e.g. [4, 8, 16]), first block included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_grid: Option<Vec<i64>>,
    /// PyTorch-Encoding's `deep_base` stem, used by other models of that library (DRANet):
    /// `conv1` = Sequential(3x3 s2 3->w, BN, ReLU, 3x3 w->w, BN, ReLU, 3x3 w->2w), then
    /// `bn1` on 2w channels, so layer1 sees 2w channels. Off: torchvision's 7x7 stem, which
    /// the released DANet101 has (evaluated with `--no-deepstem`).
    #[serde(default)]
    pub deep_stem: bool,
    /// Widths of the deep stem's three 3x3 convs when they are not PyTorch-Encoding's
    /// `(w, w, 2w)`: mmsegmentation's `ResNetV1c` has `(32, 32, 64)` before a 64-wide
    /// layer1 (`stem_channels=64`, `base_channels=64`). Only with `deep_stem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stem_widths: Option<[i64; 3]>,
    /// The first block of a dilated stage uses half the stage dilation (mmsegmentation's
    /// `contract_dilation`; DANet's `_make_layer` gives the same 1, 2, 2 / 2, 4, 4).
    /// Off: every block of the stage uses the stage dilation.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub contract_dilation: bool,
}

fn default_true() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Stride and dilation of one residual block's spatial conv, with the dilation its
/// second 3x3 conv (basic blocks) uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockGeometry {
    pub stride: i64,
    /// Dilation of the conv that carries the stride (bottleneck conv2, basic conv1).
    pub dilation: i64,
    /// Dilation of a basic block's conv2: the stage dilation.
    pub second_dilation: i64,
}

impl BackboneSpec {
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.output_stride != 8 && self.output_stride != 16 {
            return Err(SpecError::Invalid(format!(
                "output_stride must be 8 or 16, got {}",
                self.output_stride
            )));
        }
        if self.layers.contains(&0) || self.width <= 0 {
            return Err(SpecError::Invalid(
                "every layer needs a block and width > 0".into(),
            ));
        }
        if self.width > MAX_WIDTH || self.layers.iter().any(|&n| n > MAX_BLOCKS) {
            return Err(SpecError::Invalid(format!(
                "width {} and layers {:?}: at most width {MAX_WIDTH} and {MAX_BLOCKS} blocks \
                 a layer",
                self.width, self.layers
            )));
        }
        if let Some(widths) = self.stem_widths {
            if !self.deep_stem || widths.iter().any(|&w| w <= 0 || w > MAX_CHANNELS) {
                return Err(SpecError::Invalid(format!(
                    "stem_widths {widths:?} need deep_stem and positive widths"
                )));
            }
        }
        if let Some(grid) = &self.multi_grid {
            if grid.len() != self.layers[3] || grid.iter().any(|&d| d <= 0 || d > MAX_DILATION) {
                return Err(SpecError::Invalid(format!(
                    "multi_grid {grid:?} must give one dilation in 1..={MAX_DILATION} per \
                     layer4 block ({})",
                    self.layers[3]
                )));
            }
        }
        Ok(())
    }

    /// Channels out of the stem (`bn1`), i.e. into layer1: deep_base doubles the width.
    pub fn stem_channels(&self) -> i64 {
        self.stem_conv_widths()[2]
    }

    /// Output widths of the deep stem's three convs (the last one is `bn1`'s). The plain
    /// 7x7 stem has one conv: all three entries are its width.
    pub fn stem_conv_widths(&self) -> [i64; 3] {
        match (self.deep_stem, self.stem_widths) {
            (true, Some(widths)) => widths,
            (true, None) => [self.width, self.width, 2 * self.width],
            (false, _) => [self.width; 3],
        }
    }

    /// Output channels of layer `k` (1-based).
    pub fn layer_channels(&self, k: usize) -> i64 {
        self.width * (1 << (k - 1)) * self.block.expansion()
    }

    /// Channels entering the head (layer4's output).
    pub fn out_channels(&self) -> i64 {
        self.layer_channels(4)
    }

    /// (stride, stage dilation) of layer `k` (1-based), DANet's dilated ResNet.
    pub fn stage(&self, k: usize) -> (i64, i64) {
        match (k, self.output_stride) {
            (1, _) => (1, 1),
            (2, _) => (2, 1),
            (3, 8) => (1, 2),
            (3, _) => (2, 1),
            (4, 8) => (1, 4),
            (4, _) => (1, 2),
            _ => panic!("layer index {k} out of 1..=4"),
        }
    }

    /// Geometry of block `i` of layer `k`, following DANet v0.5.0's `_make_layer`: the first
    /// block of a dilated stage uses dilation 1 (stage dilation 1 or 2) or 2 (stage
    /// dilation 4); with multi-grid, layer4's blocks take the grid's dilations.
    pub fn block(&self, k: usize, i: usize) -> BlockGeometry {
        let (stride, stage_dilation) = self.stage(k);
        let stride = if i == 0 { stride } else { 1 };
        if k == 4 {
            if let Some(grid) = &self.multi_grid {
                return BlockGeometry {
                    stride,
                    dilation: grid[i],
                    second_dilation: stage_dilation,
                };
            }
        }
        let dilation = if i == 0 && self.contract_dilation {
            // DANet: 1 for stage dilation 1 or 2, 2 for 4; mmseg: dilation // 2 (when > 1).
            if stage_dilation == 4 {
                2
            } else {
                1
            }
        } else {
            stage_dilation
        };
        BlockGeometry {
            stride,
            dilation,
            second_dilation: stage_dilation,
        }
    }

    /// Whether block `i` of layer `k` has a downsample branch (stride or channel change).
    pub fn has_downsample(&self, k: usize, i: usize) -> bool {
        if i != 0 {
            return false;
        }
        let in_ch = if k == 1 {
            self.stem_channels()
        } else {
            self.layer_channels(k - 1)
        };
        self.stage(k).0 != 1 || in_ch != self.layer_channels(k)
    }

    pub fn resnet(depth: usize, output_stride: i64) -> Option<Self> {
        let (block, layers) = match depth {
            18 => (BlockKind::Basic, [2, 2, 2, 2]),
            34 => (BlockKind::Basic, [3, 4, 6, 3]),
            50 => (BlockKind::Bottleneck, [3, 4, 6, 3]),
            101 => (BlockKind::Bottleneck, [3, 4, 23, 3]),
            152 => (BlockKind::Bottleneck, [3, 8, 36, 3]),
            _ => return None,
        };
        Some(Self {
            block,
            layers,
            width: 64,
            output_stride,
            multi_grid: None,
            deep_stem: false,
            stem_widths: None,
            contract_dilation: true,
        })
    }

    /// The width- and depth-reduced ResNet the demo and tests train on 2 CPU cores.
    pub fn tiny() -> Self {
        Self {
            block: BlockKind::Basic,
            layers: [1, 1, 1, 1],
            width: 16,
            output_stride: 8,
            multi_grid: None,
            deep_stem: false,
            stem_widths: None,
            contract_dilation: true,
        }
    }
}

/// mmsegmentation's auxiliary `FCNHead` on layer3 (`auxiliary_head.*`): a 3x3 conv to
/// `channels`, BN, ReLU, Dropout2d, a 1x1 classifier. Training only: its loss is weighted
/// by `loss_weight`, and it is exported only when asked (`--aux`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuxHeadSpec {
    /// The backbone stage it reads (3: layer3, 1024 channels in ResNet-50/101).
    pub in_layer: usize,
    /// Channels of its 3x3 conv (256 in mmsegmentation's DANet configs).
    pub channels: i64,
    /// Weight of its cross-entropy in the training loss (0.4 in mmsegmentation).
    pub loss_weight: f64,
}

/// mmsegmentation's test pipeline of the config a checkpoint came from: keep-ratio resize
/// to `scale`, then `whole` or `slide` inference (`--protocol mmseg` defaults to it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmsegTestCfg {
    /// `Resize(scale=(long, short), keep_ratio=True)`: (2048, 1024) for Cityscapes.
    pub scale: [usize; 2],
    /// `slide` with this square crop (769 for the 769x769 configs); `None`: `whole`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crop: Option<usize>,
    /// The slide stride (513 for the 769x769 configs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Always "danet" for now; kept so files say what they hold.
    pub arch: String,
    /// Human name of the backbone ("resnet50", "tiny", ...), informational.
    pub backbone_name: String,
    pub backbone: BackboneSpec,
    pub classes: Vec<String>,
    /// One RGB colour per class.
    pub palette: Vec<[u8; 3]>,
    /// Per-channel normalisation of RGB in [0, 1]: (x - mean) / std.
    pub mean: [f32; 3],
    pub std: [f32; 3],
    /// `align_corners` of every bilinear resize of logits (to the input size, and back to
    /// the image in evaluation): DANet's code uses true, mmsegmentation's configs false
    /// (true in the 769x769 Cityscapes ones). A property of how the model was trained.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub align_corners: bool,
    /// Widths of the attention head when they are not DANet's `in/4` and `in/4/8`
    /// (mmsegmentation's DAHead `channels` and `pam_channels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_channels: Option<[i64; 2]>,
    /// mmsegmentation's auxiliary FCN head, when the checkpoint has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux_head: Option<AuxHeadSpec>,
    /// The source config's test pipeline (imported mmsegmentation checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmseg_test: Option<MmsegTestCfg>,
}

impl ModelSpec {
    pub fn new(backbone_name: &str, backbone: BackboneSpec, classes: Vec<String>) -> Self {
        let palette = crate::palette::default_palette(classes.len());
        Self {
            arch: "danet".into(),
            backbone_name: backbone_name.into(),
            backbone,
            classes,
            palette,
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
            align_corners: true,
            head_channels: None,
            aux_head: None,
            mmseg_test: None,
        }
    }

    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }

    /// Channels of conv5a/conv5c's output: in / 4 (or `head_channels[0]`).
    pub fn inter_channels(&self) -> i64 {
        match self.head_channels {
            Some([inter, _]) => inter,
            None => self.backbone.out_channels() / 4,
        }
    }

    /// Channels of PAM's query and key: inter / 8 (or `head_channels[1]`).
    pub fn qk_channels(&self) -> i64 {
        match self.head_channels {
            Some([_, qk]) => qk,
            None => self.inter_channels() / 8,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.arch != "danet" {
            return Err(SpecError::Invalid(format!("unknown arch {:?}", self.arch)));
        }
        self.backbone.validate()?;
        if self.classes.is_empty() || self.palette.len() != self.classes.len() {
            return Err(SpecError::Invalid(format!(
                "{} classes but {} palette colours",
                self.classes.len(),
                self.palette.len()
            )));
        }
        if self.classes.len() > MAX_CLASSES {
            return Err(SpecError::Invalid(format!(
                "{} classes: a class map holds at most {MAX_CLASSES}",
                self.classes.len()
            )));
        }
        if let Some(hc) = self.head_channels {
            if hc.iter().any(|&c| c <= 0 || c > MAX_CHANNELS) {
                return Err(SpecError::Invalid(format!(
                    "head_channels {hc:?}: each in 1..={MAX_CHANNELS}"
                )));
            }
        }
        if self.qk_channels() == 0 {
            return Err(SpecError::Invalid(
                "backbone too narrow: inter/8 is 0".into(),
            ));
        }
        if self.std.iter().any(|&s| s <= 0.0) {
            return Err(SpecError::Invalid("std must be positive".into()));
        }
        if let Some(aux) = &self.aux_head {
            if !(1..=4).contains(&aux.in_layer) || aux.channels <= 0 || aux.channels > MAX_CHANNELS {
                return Err(SpecError::Invalid(format!(
                    "aux head on layer{} with {} channels: layer 1..=4, channels > 0",
                    aux.in_layer, aux.channels
                )));
            }
        }
        if let Some(t) = &self.mmseg_test {
            if t.crop.is_some() != t.stride.is_some() || t.crop == Some(0) || t.stride == Some(0) {
                return Err(SpecError::Invalid(format!(
                    "mmseg test config {t:?}: slide needs both a crop and a stride > 0"
                )));
            }
        }
        Ok(())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("spec serialises")
    }

    pub fn from_json(s: &str) -> Result<Self, SpecError> {
        let spec: Self = serde_json::from_str(s)?;
        spec.validate()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet101_os8_geometry_matches_danet() {
        let b = BackboneSpec::resnet(101, 8).unwrap();
        assert_eq!(b.out_channels(), 2048);
        assert_eq!(
            b.block(3, 0),
            BlockGeometry {
                stride: 1,
                dilation: 1,
                second_dilation: 2
            }
        );
        assert_eq!(b.block(3, 5).dilation, 2);
        assert_eq!(b.block(4, 0).dilation, 2);
        assert_eq!(b.block(4, 1).dilation, 4);
        assert!(b.has_downsample(1, 0) && b.has_downsample(3, 0) && !b.has_downsample(3, 1));
    }

    #[test]
    fn os16_and_multigrid() {
        let mut b = BackboneSpec::resnet(50, 16).unwrap();
        assert_eq!(b.block(3, 0).stride, 2);
        assert_eq!(
            b.block(4, 0),
            BlockGeometry {
                stride: 1,
                dilation: 1,
                second_dilation: 2
            }
        );
        b.output_stride = 8;
        b.multi_grid = Some(vec![4, 8, 16]);
        assert_eq!(b.block(4, 0).dilation, 4);
        assert_eq!(b.block(4, 2).dilation, 16);
        b.validate().unwrap();
    }

    #[test]
    fn basic_resnet_layer1_has_no_downsample() {
        let b = BackboneSpec::resnet(18, 8).unwrap();
        assert!(!b.has_downsample(1, 0));
        assert_eq!(b.out_channels(), 512);
    }

    #[test]
    fn deep_stem_widens_layer1_input() {
        let mut b = BackboneSpec::resnet(18, 8).unwrap();
        b.deep_stem = true;
        assert_eq!(b.stem_channels(), 128);
        // 128 -> 64 channels: layer1's first basic block now needs a projection.
        assert!(b.has_downsample(1, 0) && !b.has_downsample(1, 1));
        let mut b = BackboneSpec::resnet(50, 8).unwrap();
        b.deep_stem = true;
        assert!(b.has_downsample(1, 0));
        // Older spec JSON (no field) reads as the 7x7 stem.
        let mut v = serde_json::to_value(&b).unwrap();
        v.as_object_mut().unwrap().remove("deep_stem");
        assert!(!serde_json::from_value::<BackboneSpec>(v).unwrap().deep_stem);
    }

    #[test]
    fn mmseg_resnet_v1c_geometry() {
        // ResNetV1c: deep stem 32/32/64 before a 64-wide layer1, contract_dilation.
        let mut b = BackboneSpec::resnet(50, 8).unwrap();
        b.deep_stem = true;
        b.stem_widths = Some([32, 32, 64]);
        b.validate().unwrap();
        assert_eq!(b.stem_channels(), 64);
        // layer1's input is 64 wide, its output 256: still a projection.
        assert!(b.has_downsample(1, 0));
        // contract_dilation: layer3 runs 1, 2, 2, ..., layer4 2, 4, 4 (DANet's rule too).
        let dilations = |b: &BackboneSpec, k| {
            (0..b.layers[k - 1])
                .map(|i| b.block(k, i).dilation)
                .collect::<Vec<_>>()
        };
        assert_eq!(dilations(&b, 3), [1, 2, 2, 2, 2, 2]);
        assert_eq!(dilations(&b, 4), [2, 4, 4]);
        b.contract_dilation = false;
        assert_eq!(dilations(&b, 3), [2; 6]);
        assert_eq!(dilations(&b, 4), [4; 3]);
        // Stem widths without the deep stem are refused; old JSON reads as contract.
        b.deep_stem = false;
        assert!(b.validate().is_err());
        let mut v = serde_json::to_value(BackboneSpec::resnet(50, 8).unwrap()).unwrap();
        assert!(
            v.get("contract_dilation").is_none(),
            "default not written: {v}"
        );
        v.as_object_mut().unwrap().remove("stem_widths");
        assert!(
            serde_json::from_value::<BackboneSpec>(v)
                .unwrap()
                .contract_dilation
        );
    }

    #[test]
    fn model_spec_mmseg_fields_default_to_danet() {
        let s = ModelSpec::new("x", BackboneSpec::tiny(), vec!["a".into()]);
        let json = s.to_json();
        // Files written before these fields read as the authors' DANet.
        assert!(
            !json.contains("align_corners") && !json.contains("aux_head"),
            "{json}"
        );
        let back = ModelSpec::from_json(&json).unwrap();
        assert!(back.align_corners && back.aux_head.is_none() && back.mmseg_test.is_none());
        let mut m = s.clone();
        m.align_corners = false;
        m.head_channels = Some([40, 5]);
        m.aux_head = Some(AuxHeadSpec {
            in_layer: 3,
            channels: 8,
            loss_weight: 0.4,
        });
        m.mmseg_test = Some(MmsegTestCfg {
            scale: [2048, 1024],
            crop: Some(769),
            stride: Some(513),
        });
        let back = ModelSpec::from_json(&m.to_json()).unwrap();
        assert_eq!(back, m);
        assert_eq!((back.inter_channels(), back.qk_channels()), (40, 5));
        m.mmseg_test.as_mut().unwrap().stride = None;
        assert!(m.validate().is_err());
    }

    #[test]
    fn attention_impl_names() {
        assert_eq!(
            serde_json::to_string(&AttentionImpl::Sdpa).unwrap(),
            "\"sdpa\""
        );
        assert_eq!(
            "explicit".parse::<AttentionImpl>().unwrap(),
            AttentionImpl::Explicit
        );
        assert!("flash".parse::<AttentionImpl>().is_err());
    }

    #[test]
    fn spec_json_roundtrip_and_validation() {
        let s = ModelSpec::new("tiny", BackboneSpec::tiny(), vec!["a".into(), "b".into()]);
        assert_eq!(ModelSpec::from_json(&s.to_json()).unwrap(), s);
        let mut bad = s.clone();
        bad.palette.pop();
        assert!(ModelSpec::from_json(&bad.to_json()).is_err());
    }
}
