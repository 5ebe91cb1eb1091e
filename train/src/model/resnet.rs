//! Dilated ResNet backbone (DANet v0.5.0's `encoding.models.backbone.resnet`): stride in
//! the bottleneck's 3x3 conv, output stride 8 or 16 through dilation, optional multi-grid,
//! optional deep stem (PyTorch-Encoding's `deep_base`), optional frozen BatchNorm.

use std::sync::Arc;

use segtool_model_spec::{BackboneSpec, BlockKind};
use tch::nn::{self, ModuleT};
use tch::Tensor;

use crate::distributed::ProcessGroup;

use super::{batch_norm, bn_t, conv_no_bias, Bn, Conv};
use crate::qat::FakeQuant;

#[derive(Debug)]
struct Block {
    convs: Vec<(Conv, Bn)>,
    downsample: Option<(Conv, Bn)>,
}

impl Block {
    fn new(p: &nn::Path, spec: &BackboneSpec, k: usize, i: usize, in_ch: i64) -> Self {
        let geom = spec.block(k, i);
        let planes = spec.width << (k - 1);
        let out_ch = planes * spec.block.expansion();
        let conv = |n: usize, cin, cout, kernel, stride, dilation| {
            let pad = if kernel == 3 { dilation } else { 0 };
            (
                conv_no_bias(
                    p / format!("conv{n}"),
                    cin,
                    cout,
                    kernel,
                    stride,
                    pad,
                    dilation,
                ),
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
            (
                conv_no_bias(&d / "0", in_ch, out_ch, 1, geom.stride, 0, 1),
                batch_norm(&d / "1", out_ch),
            )
        });
        Self { convs, downsample }
    }

    /// `xs` is the ONNX tensor `input`; the block's output is the tensor `prefix`.
    fn forward_q(
        &self,
        xs: &Tensor,
        train: bool,
        q: Option<&FakeQuant>,
        prefix: &str,
        input: &str,
    ) -> Tensor {
        let Some(q) = q else {
            return self.forward_t(xs, train);
        };
        let last = self.convs.len() - 1;
        let mut out = xs.shallow_clone();
        let mut name = input.to_string();
        for (n, (conv, bn)) in self.convs.iter().enumerate() {
            let node = format!("{prefix}.conv{}", n + 1);
            out = q.conv(&node, &name, &out, conv, Some(bn), train);
            name = node;
            if n != last {
                let relu = format!("{prefix}.relu{}", n + 1);
                out = q.read(&relu, &name, &out).relu();
                name = relu;
            }
        }
        let (identity, id_name) = match &self.downsample {
            Some((conv, bn)) => {
                let node = format!("{prefix}.downsample.0");
                (q.conv(&node, input, xs, conv, Some(bn), train), node)
            }
            None => (xs.shallow_clone(), input.to_string()),
        };
        let add = format!("{prefix}.add");
        let sum = q.read(&add, &name, &out) + q.read(&add, &id_name, &identity);
        q.read(prefix, &add, &sum).relu()
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let last = self.convs.len() - 1;
        let mut out = xs.shallow_clone();
        for (n, (conv, bn)) in self.convs.iter().enumerate() {
            out = bn_t(&out.apply(conv), bn, train); // dist: SyncBN hook
            if n != last {
                out = out.relu();
            }
        }
        let identity = match &self.downsample {
            Some((conv, bn)) => bn_t(&xs.apply(conv), bn, train),
            None => xs.shallow_clone(),
        };
        (out + identity).relu()
    }

    fn batch_norms(&self) -> impl Iterator<Item = &Bn> {
        self.convs.iter().chain(&self.downsample).map(|(_, bn)| bn)
    }

    fn batch_norms_mut(&mut self) -> impl Iterator<Item = &mut Bn> {
        self.convs
            .iter_mut()
            .chain(&mut self.downsample)
            .map(|(_, bn)| bn)
    }
}

/// The stem's convolutions before `bn1`.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per model
enum Stem {
    /// torchvision's `conv1`: 7x7, stride 2, 3 -> width.
    Plain(Conv),
    /// PyTorch-Encoding's `deep_base` Sequential: `conv1.0` (3x3 s2, 3 -> w), `conv1.1` BN,
    /// ReLU, `conv1.3` (w -> w), `conv1.4` BN, ReLU, `conv1.6` (w -> 2w). Indices 2 and 5
    /// are the parameter-free ReLUs, hence the gaps in the names. The widths follow
    /// [`BackboneSpec::stem_conv_widths`] (mmsegmentation's ResNetV1c: 32, 32, 64).
    Deep { convs: [(Conv, Bn); 2], last: Conv },
}

impl Stem {
    fn new(p: &nn::Path, spec: &BackboneSpec) -> Self {
        if !spec.deep_stem {
            return Stem::Plain(conv_no_bias(p / "conv1", 3, spec.width, 7, 2, 3, 1));
        }
        let [w0, w1, w2] = spec.stem_conv_widths();
        let s = p / "conv1";
        Stem::Deep {
            convs: [
                (
                    conv_no_bias(&s / "0", 3, w0, 3, 2, 1, 1),
                    batch_norm(&s / "1", w0),
                ),
                (
                    conv_no_bias(&s / "3", w0, w1, 3, 1, 1, 1),
                    batch_norm(&s / "4", w1),
                ),
            ],
            last: conv_no_bias(&s / "6", w1, w2, 3, 1, 1, 1),
        }
    }

    /// The stem's last conv output (the ONNX tensor of the returned name), before `bn1`
    /// when `q` is `None`; with `q`, `bn1` is applied (folded into the last conv).
    fn forward_q(
        &self,
        xs: &Tensor,
        train: bool,
        q: &FakeQuant,
        bn1: &Bn,
    ) -> (Tensor, &'static str) {
        match self {
            Stem::Plain(conv) => (
                q.conv("pretrained.conv1", "image", xs, conv, Some(bn1), train),
                "pretrained.conv1",
            ),
            Stem::Deep { convs, last } => {
                let [(c0, b0), (c3, b3)] = convs;
                let x = q.conv("pretrained.conv1.0", "image", xs, c0, Some(b0), train);
                let x = q
                    .read("pretrained.conv1.2", "pretrained.conv1.0", &x)
                    .relu();
                let x = q.conv(
                    "pretrained.conv1.3",
                    "pretrained.conv1.2",
                    &x,
                    c3,
                    Some(b3),
                    train,
                );
                let x = q
                    .read("pretrained.conv1.5", "pretrained.conv1.3", &x)
                    .relu();
                let x = q.conv(
                    "pretrained.conv1.6",
                    "pretrained.conv1.5",
                    &x,
                    last,
                    Some(bn1),
                    train,
                );
                (x, "pretrained.conv1.6")
            }
        }
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        match self {
            Stem::Plain(conv) => xs.apply(conv),
            Stem::Deep { convs, last } => {
                let mut x = xs.shallow_clone();
                for (conv, bn) in convs {
                    x = bn_t(&x.apply(conv), bn, train).relu();
                }
                x.apply(last)
            }
        }
    }
}

/// ResNet trunk up to layer4; only layer4's output feeds DANet's head.
#[derive(Debug)]
pub struct ResNet {
    stem: Stem,
    bn1: Bn,
    layers: Vec<Vec<Block>>,
    frozen_bn: bool,
}

impl ResNet {
    /// Builds under `p` (DANet calls it `pretrained`).
    pub fn new(p: &nn::Path, spec: &BackboneSpec) -> Self {
        let stem = Stem::new(p, spec);
        let bn1 = batch_norm(p / "bn1", spec.stem_channels());
        let mut in_ch = spec.stem_channels();
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
        Self {
            stem,
            bn1,
            layers,
            frozen_bn: false,
        }
    }

    /// Every BatchNorm of the backbone, stem included.
    fn batch_norms(&self) -> Vec<&Bn> {
        let stem: Vec<&Bn> = match &self.stem {
            Stem::Plain(_) => vec![],
            Stem::Deep { convs, .. } => convs.iter().map(|(_, bn)| bn).collect(),
        };
        let blocks = self.layers.iter().flatten().flat_map(Block::batch_norms);
        stem.into_iter()
            .chain(std::iter::once(&self.bn1))
            .chain(blocks)
            .collect()
    }

    /// Frozen BN (mmsegmentation's `norm_eval=True` + `requires_grad=False`): with small
    /// per-GPU batches, batch statistics are noisy, so fine-tuning keeps the pretrained
    /// statistics. Frozen, every backbone BN normalises with its running statistics even
    /// in training (so they are never updated) and its affine weight and bias stop
    /// requiring grad: backward leaves their `.grad` undefined and libtorch's SGD skips
    /// parameters without a gradient, so neither the update nor weight decay moves them.
    pub fn set_frozen_bn(&mut self, frozen: bool) {
        self.frozen_bn = frozen;
        for bn in self.batch_norms() {
            for t in bn.bn.ws.iter().chain(&bn.bn.bs) {
                let _ = t.set_requires_grad(!frozen);
            }
        }
    }

    pub fn frozen_bn(&self) -> bool {
        self.frozen_bn
    }

    /// dist: every BatchNorm of the backbone synchronises over `group` in training
    /// (`None`: plain BatchNorm). See [`DaNet::set_sync_bn`](super::DaNet::set_sync_bn).
    pub fn set_sync_bn(&mut self, group: Option<Arc<ProcessGroup>>) {
        if let Stem::Deep { convs, .. } = &mut self.stem {
            for (_, bn) in convs.iter_mut() {
                bn.group = group.clone();
            }
        }
        self.bn1.group = group.clone();
        for bn in self
            .layers
            .iter_mut()
            .flatten()
            .flat_map(Block::batch_norms_mut)
        {
            bn.group = group.clone();
        }
    }
}

impl ResNet {
    /// layer4's output and, when `tap` names a stage (1-based), that stage's output too
    /// (the auxiliary head's input).
    pub fn forward_with_tap(
        &self,
        xs: &Tensor,
        train: bool,
        tap: Option<usize>,
    ) -> (Tensor, Option<Tensor>) {
        self.forward_quantised(xs, train, tap, None).0
    }

    /// [`Self::forward_with_tap`] with fake quantisation `q` (QAT); also returns the
    /// name of layer4's output in the exported graph.
    pub(crate) fn forward_quantised(
        &self,
        xs: &Tensor,
        train: bool,
        tap: Option<usize>,
        q: Option<&FakeQuant>,
    ) -> ((Tensor, Option<Tensor>), String) {
        // Only BatchNorm looks at `train` in the backbone.
        let train = train && !self.frozen_bn;
        if let Some(q) = q {
            let (x, name) = self.stem.forward_q(xs, train, q, &self.bn1);
            let x = q.read("pretrained.relu", name, &x).relu();
            let x = q.read("pretrained.maxpool", "pretrained.relu", &x);
            let mut x = x.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
            let mut name = "pretrained.maxpool".to_string();
            let mut tapped = None;
            for (k, layer) in self.layers.iter().enumerate() {
                for (i, block) in layer.iter().enumerate() {
                    let prefix = format!("pretrained.layer{}.{i}", k + 1);
                    x = block.forward_q(&x, train, Some(q), &prefix, &name);
                    name = prefix;
                }
                if tap == Some(k + 1) {
                    tapped = Some(x.shallow_clone());
                }
            }
            return ((x, tapped), name);
        }
        ((self.forward_plain(xs, train, tap)), String::new())
    }

    fn forward_plain(
        &self,
        xs: &Tensor,
        train: bool,
        tap: Option<usize>,
    ) -> (Tensor, Option<Tensor>) {
        let mut x = bn_t(&self.stem.forward_t(xs, train), &self.bn1, train)
            .relu()
            .max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
        let mut tapped = None;
        for (k, layer) in self.layers.iter().enumerate() {
            for block in layer {
                x = block.forward_t(&x, train);
            }
            if tap == Some(k + 1) {
                tapped = Some(x.shallow_clone());
            }
        }
        (x, tapped)
    }
}

impl ModuleT for ResNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_with_tap(xs, train, None).0
    }
}
