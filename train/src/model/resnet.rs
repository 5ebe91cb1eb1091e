//! Dilated ResNet backbone (DANet v0.5.0's `encoding.models.backbone.resnet`): stride in
//! the bottleneck's 3x3 conv, output stride 8 or 16 through dilation, optional multi-grid.

use segtool_core::{BackboneSpec, BlockKind};
use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::{batch_norm, conv_no_bias};

#[derive(Debug)]
struct Block {
    kind: BlockKind,
    convs: Vec<(nn::Conv2D, nn::BatchNorm)>,
    downsample: Option<(nn::Conv2D, nn::BatchNorm)>,
}

impl Block {
    fn new(p: &nn::Path, spec: &BackboneSpec, k: usize, i: usize, in_ch: i64) -> Self {
        let geom = spec.block(k, i);
        let planes = spec.width << (k - 1);
        let out_ch = planes * spec.block.expansion();
        let conv = |n: usize, cin, cout, kernel, stride, dilation| {
            let pad = if kernel == 3 { dilation } else { 0 };
            (
                conv_no_bias(p / format!("conv{n}"), cin, cout, kernel, stride, pad, dilation),
                batch_norm(p / format!("bn{n}"), cout),
            )
        };
        let convs = match spec.block {
            BlockKind::Basic => vec![
                conv(1, in_ch, planes, 3, geom.stride, geom.dilation),
                conv(2, planes, planes, 3, 1, geom.second_dilation),
            ],
            BlockKind::Bottleneck => vec![
                conv(1, in_ch, planes, 1, 1, 1),
                conv(2, planes, planes, 3, geom.stride, geom.dilation),
                conv(3, planes, out_ch, 1, 1, 1),
            ],
        };
        let downsample = spec.has_downsample(k, i).then(|| {
            let d = p / "downsample";
            (conv_no_bias(&d / "0", in_ch, out_ch, 1, geom.stride, 0, 1), batch_norm(&d / "1", out_ch))
        });
        Self { kind: spec.block, convs, downsample }
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let last = self.convs.len() - 1;
        let mut out = xs.shallow_clone();
        for (n, (conv, bn)) in self.convs.iter().enumerate() {
            out = out.apply(conv).apply_t(bn, train);
            if n != last {
                out = out.relu();
            }
        }
        let identity = match &self.downsample {
            Some((conv, bn)) => xs.apply(conv).apply_t(bn, train),
            None => xs.shallow_clone(),
        };
        debug_assert!(matches!(self.kind, BlockKind::Basic | BlockKind::Bottleneck));
        (out + identity).relu()
    }
}

/// ResNet trunk up to layer4; only layer4's output feeds DANet's head.
#[derive(Debug)]
pub struct ResNet {
    conv1: nn::Conv2D,
    bn1: nn::BatchNorm,
    layers: Vec<Vec<Block>>,
}

impl ResNet {
    /// Builds under `p` (DANet calls it `pretrained`).
    pub fn new(p: &nn::Path, spec: &BackboneSpec) -> Self {
        let conv1 = conv_no_bias(p / "conv1", 3, spec.width, 7, 2, 3, 1);
        let bn1 = batch_norm(p / "bn1", spec.width);
        let mut in_ch = spec.width;
        let layers = (1..=4)
            .map(|k| {
                let lp = p / format!("layer{k}");
                (0..spec.layers[k - 1])
                    .map(|i| {
                        let block = Block::new(&(&lp / i), spec, k, i, in_ch);
                        in_ch = spec.layer_channels(k);
                        block
                    })
                    .collect()
            })
            .collect();
        Self { conv1, bn1, layers }
    }
}

impl ModuleT for ResNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let mut x = xs
            .apply(&self.conv1)
            .apply_t(&self.bn1, train)
            .relu()
            .max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
        for layer in &self.layers {
            for block in layer {
                x = block.forward_t(&x, train);
            }
        }
        x
    }
}
