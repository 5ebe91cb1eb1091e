//! What a DANet costs, computed from its spec alone (no tensors): parameters, MACs and a
//! training-activation estimate per top-level module (names as in the state dict:
//! `pretrained.conv1`, `pretrained.layer3`, `head.sa`, ...), and the bytes PAM's and
//! CAM's attention hold under each [`AttentionImpl`].
//!
//! Shapes follow the model exactly (convolution arithmetic, stride and dilation per
//! block), so `module_costs`' parameter counts equal the VarStore's (a test checks it).
//! MACs count convolutions, attention matmuls and the bilinear upsampling (4 per output
//! value); BatchNorm/ReLU/softmax element-wise work is left out. The activation estimate
//! counts what autograd keeps alive for backward, in elements per image: each conv's
//! output (BatchNorm's saved input), each ReLU's output, the max-pool output, the
//! attention intermediates and the classifiers' dropout outputs and log-softmaxed logits.

use segtool_model_spec::{BackboneSpec, BlockKind, ModelSpec};

use super::AttentionImpl;

/// One top-level module's cost for one image at a given input size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleCost {
    pub name: String,
    /// Trainable parameters.
    pub params: u64,
    /// Non-trained state: BatchNorm running mean and variance.
    pub buffers: u64,
    /// Multiply-accumulates of the forward pass.
    pub macs: u64,
    /// Elements autograd keeps for backward (estimate; x4 for fp32 bytes).
    pub activations: u64,
}

/// Bytes of one image's attention matrices, fp32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionBytes {
    pub pam: u64,
    pub cam: u64,
}

fn conv_out(x: i64, kernel: i64, stride: i64, pad: i64, dilation: i64) -> i64 {
    (x + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1
}

/// Accumulates one module's cost while walking its layers.
struct Acc<'a> {
    cost: ModuleCost,
    size: &'a mut (i64, i64),
}

impl Acc<'_> {
    /// Bias-free conv (+ BN when `bn`), updating the running spatial size.
    fn conv(&mut self, cin: i64, cout: i64, k: i64, stride: i64, dilation: i64, bn: bool) -> i64 {
        let pad = if k == 3 {
            dilation
        } else if k == 7 {
            3
        } else {
            0
        };
        let (h, w) = *self.size;
        *self.size = (
            conv_out(h, k, stride, pad, dilation),
            conv_out(w, k, stride, pad, dilation),
        );
        let out = cout * self.size.0 * self.size.1;
        let weights = (cin * cout * k * k) as u64;
        self.cost.params += weights;
        self.cost.macs += weights * (self.size.0 * self.size.1) as u64;
        self.cost.activations += out as u64;
        if bn {
            self.cost.params += 2 * cout as u64;
            self.cost.buffers += 2 * cout as u64;
        }
        out
    }

    fn relu(&mut self, elements: i64) {
        self.cost.activations += elements as u64;
    }
}

fn module<'a>(name: &str, size: &'a mut (i64, i64)) -> Acc<'a> {
    Acc {
        cost: ModuleCost {
            name: name.into(),
            ..Default::default()
        },
        size,
    }
}

/// Spatial size of layer4's output (the head's input) for an `h` x `w` image.
pub fn feature_size(spec: &BackboneSpec, h: i64, w: i64) -> (i64, i64) {
    let mut size = (h, w);
    backbone_costs(spec, &mut size);
    size
}

fn backbone_costs(spec: &BackboneSpec, size: &mut (i64, i64)) -> Vec<ModuleCost> {
    let (w, stem) = (spec.width, spec.stem_channels());
    let mut out = Vec::new();
    let mut m = module("pretrained.conv1", size);
    if spec.deep_stem {
        let [w0, w1, _] = spec.stem_conv_widths();
        let e = m.conv(3, w0, 3, 2, 1, true);
        m.relu(e);
        let e = m.conv(w0, w1, 3, 1, 1, true);
        m.relu(e);
        m.conv(w1, stem, 3, 1, 1, false);
    } else {
        m.conv(3, w, 7, 2, 1, false);
    }
    out.push(m.cost);
    let mut m = module("pretrained.bn1", size);
    m.cost.params += 2 * stem as u64;
    m.cost.buffers += 2 * stem as u64;
    m.relu(stem * m.size.0 * m.size.1);
    let pool = |x| conv_out(x, 3, 2, 1, 1);
    *m.size = (pool(m.size.0), pool(m.size.1));
    m.relu(stem * m.size.0 * m.size.1); // the max-pool output
    out.push(m.cost);

    let mut in_ch = stem;
    for k in 1..=4 {
        let planes = w << (k - 1);
        let out_ch = spec.layer_channels(k);
        let mut m = module(&format!("pretrained.layer{k}"), size);
        for i in 0..spec.layers[k - 1] {
            let g = spec.block(k, i);
            let input = *m.size;
            if spec.has_downsample(k, i) {
                let mut ds = (input.0, input.1);
                let mut d = Acc {
                    cost: ModuleCost::default(),
                    size: &mut ds,
                };
                d.conv(in_ch, out_ch, 1, g.stride, 1, true);
                add(&mut m.cost, &d.cost);
            }
            let e = match spec.block {
                BlockKind::Basic => {
                    let e = m.conv(in_ch, planes, 3, g.stride, g.dilation, true);
                    m.relu(e);
                    m.conv(planes, planes, 3, 1, g.second_dilation, true)
                }
                BlockKind::Bottleneck => {
                    let e = m.conv(in_ch, planes, 1, 1, 1, true);
                    m.relu(e);
                    let e = m.conv(planes, planes, 3, g.stride, g.dilation, true);
                    m.relu(e);
                    m.conv(planes, out_ch, 1, 1, 1, true)
                }
            };
            m.relu(e); // relu(out + identity)
            in_ch = out_ch;
        }
        out.push(m.cost);
    }
    out
}

fn add(into: &mut ModuleCost, c: &ModuleCost) {
    into.params += c.params;
    into.buffers += c.buffers;
    into.macs += c.macs;
    into.activations += c.activations;
}

/// Per-module costs of one `h` x `w` image, in state-dict order: `pretrained.conv1`,
/// `pretrained.bn1`, `pretrained.layer1..4`, `head.conv5a`, `head.conv5c`, `head.sa`,
/// `head.sc`, `head.conv51`, `head.conv52`, `head.conv6`, `head.conv7`, `head.conv8`.
/// `attention` changes PAM/CAM's MACs (SDPA's split-head form repeats Q K^T per head) and
/// activations (no N x N kept).
pub fn module_costs(spec: &ModelSpec, h: i64, w: i64, attention: AttentionImpl) -> Vec<ModuleCost> {
    let mut size = (h, w);
    let mut out = backbone_costs(&spec.backbone, &mut size);
    let (fh, fw) = size;
    let n = (fh * fw) as u64;
    let (cin, inter, qk) = (
        spec.backbone.out_channels(),
        spec.inter_channels(),
        spec.qk_channels(),
    );
    let classes = spec.num_classes() as i64;
    let conv_bn_relu = |name: &str, cin: i64| {
        let mut s = size;
        let mut m = module(name, &mut s);
        let e = m.conv(cin, inter, 3, 1, 1, true);
        m.relu(e);
        m.cost
    };
    let (c, d) = (inter as u64, qk as u64);
    let sa = {
        let heads = c.div_ceil(d);
        let (qk_macs, kept) = match attention {
            AttentionImpl::Explicit => (n * n * d, n * n),
            // logsumexp per head; the q/k/v contiguous copies the kernel reads.
            AttentionImpl::Sdpa => (n * n * heads * d, heads * n + n * (2 * d + c)),
        };
        ModuleCost {
            name: "head.sa".into(),
            params: c * (2 * d + c) + 2 * d + c + 1,
            buffers: 0,
            macs: n * c * (2 * d + c) + qk_macs + n * n * c,
            // q, k, v conv outputs and the attention output (gamma's gradient needs it).
            activations: n * (2 * d + 2 * c) + kept,
        }
    };
    let sc = ModuleCost {
        name: "head.sc".into(),
        params: 1,
        buffers: 0,
        macs: 2 * c * c * n,
        activations: n * c
            + match attention {
                AttentionImpl::Explicit => c * c,
                AttentionImpl::Sdpa => c + n * c, // logsumexp and -X
            },
    };
    let classifier = |name: &str| {
        let (hw, k) = ((h * w) as u64, classes as u64);
        ModuleCost {
            name: name.into(),
            params: c * k + k,
            buffers: 0,
            macs: n * c * k + 4 * hw * k,
            activations: n * c + n * k + 2 * hw * k,
        }
    };
    out.extend([
        conv_bn_relu("head.conv5a", cin),
        conv_bn_relu("head.conv5c", cin),
        sa,
        sc,
        conv_bn_relu("head.conv51", inter),
        conv_bn_relu("head.conv52", inter),
        classifier("head.conv6"),
        classifier("head.conv7"),
        classifier("head.conv8"),
    ]);
    out
}

/// PyTorch's CPU flash kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) tiles
/// queries by 32/64/256 (sequence < 192, < 768, longer) and keys by 512. Forward holds,
/// per thread, a q-tile x k-tile score block, row max/sum and a q-tile x head-size
/// accumulator; backward two score-sized blocks. It saves one logsumexp per query row
/// for backward. Returns the larger of the two passes' buffers plus the logsumexp.
fn flash_cpu_bytes(heads: u64, lq: u64, lk: u64, head_dim: u64, threads: u64) -> u64 {
    let q_tile = (if lq >= 768 {
        256
    } else if lq >= 192 {
        64
    } else {
        32
    })
    .min(lq);
    let k_tile = lk.min(512);
    let forward = threads * (q_tile * k_tile + 2 * q_tile + q_tile * head_dim);
    let backward = threads * (2 * q_tile * k_tile + q_tile);
    4 * (forward.max(backward) + heads * lq)
}

/// Bytes of PAM's and CAM's attention for one `h` x `w` image in fp32.
///
/// Explicit: the matrices themselves, N x N (PAM) and C x C (CAM), N = feature H*W,
/// C = inter channels. Autograd keeps one of each (the softmax output) through backward,
/// and the forward/backward transiently hold two or three more of the same size.
///
/// SDPA: what PyTorch's CPU flash kernel allocates (see `flash_cpu_bytes`) for the form
/// [`super::attention::pam_sdpa`] uses on CPU (C/d heads of d = C/8 channels) with
/// libtorch's current thread count: O(threads x tile) + O(N) instead of O(N^2). CUDA's
/// kernels differ in detail but likewise never hold N x N.
pub fn pam_cam_attention_bytes(
    spec: &ModelSpec,
    h: i64,
    w: i64,
    attention: AttentionImpl,
) -> AttentionBytes {
    let (fh, fw) = feature_size(&spec.backbone, h, w);
    let (n, c, d) = (
        (fh * fw) as u64,
        spec.inter_channels() as u64,
        spec.qk_channels() as u64,
    );
    match attention {
        AttentionImpl::Explicit => AttentionBytes {
            pam: 4 * n * n,
            cam: 4 * c * c,
        },
        AttentionImpl::Sdpa => {
            let threads = tch::get_num_threads().max(1) as u64;
            AttentionBytes {
                pam: flash_cpu_bytes(c.div_ceil(d), n, n, d, threads),
                cam: flash_cpu_bytes(1, c, c, n, threads),
            }
        }
    }
}

/// [`pam_cam_attention_bytes`], PAM + CAM, for one image (x batch for a batch).
pub fn attention_matrix_bytes(spec: &ModelSpec, h: i64, w: i64, attention: AttentionImpl) -> u64 {
    let b = pam_cam_attention_bytes(spec, h, w, attention);
    b.pam + b.cam
}
