//! DANet's two attention modules, each in two interchangeable implementations
//! ([`AttentionImpl`]): as the paper writes them (matmul, softmax, matmul: PAM holds an
//! N x N matrix, N = H*W) or through libtorch's fused `scaled_dot_product_attention`
//! (SDPA), whose CPU flash kernel works on tiles and never materialises N x N.
//!
//! Fused forms (DESIGN.md "Fused-attention form"), both with scale 1 since DANet has no
//! 1/sqrt(d):
//! - PAM: attention(Q = (B,1,N,C/8), K = (B,1,N,C/8), V = (B,1,N,C)).
//! - CAM: attention(Q = -X, K = X, V = X), X = (B,1,C,N): softmax(-E) equals DANet's
//!   softmax(rowmax(E) - E) because softmax ignores a per-row constant.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::Conv;
use crate::qat::FakeQuant;

pub use segtool_model_spec::spec::AttentionImpl;

/// PyTorch's `SDPBackend::MATH`: the unfused composite, which materialises the matrix.
const SDP_BACKEND_MATH: i64 = 0;

/// How PAM's SDPA call is shaped; the result is the same, the kernel libtorch picks is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PamSdpaForm {
    /// One head, V wider than Q/K: (B,1,N,C/8), (B,1,N,C/8), (B,1,N,C). PyTorch's CPU
    /// flash kernel requires equal head sizes, so on CPU this form falls back to the
    /// math path (N x N materialised); CUDA's memory-efficient kernel accepts it.
    Direct,
    /// V split into h = C/d heads of d = C/8 channels, Q and K shared by every head
    /// (`expand`, no copy): all head sizes equal, so the CPU flash kernel takes it.
    /// Costs h x the Q K^T products (the softmax is recomputed per head) to save N^2
    /// memory.
    SplitHeads,
}

/// PAM through SDPA on token-major tensors: query and key (B,N,d), value (B,N,C) ->
/// (B,N,C). Picks [`PamSdpaForm::Direct`] when libtorch has a fused kernel for it on
/// these tensors, else [`PamSdpaForm::SplitHeads`].
pub fn pam_sdpa(query: &Tensor, key: &Tensor, value: &Tensor) -> Tensor {
    let (q, k, v) = (query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1));
    let choice =
        Tensor::internal_fused_sdp_choice(&q, &k, &v, None::<Tensor>, 0.0, false, 1.0, false);
    let form = if choice == SDP_BACKEND_MATH {
        PamSdpaForm::SplitHeads
    } else {
        PamSdpaForm::Direct
    };
    pam_sdpa_with(query, key, value, form)
}

/// [`pam_sdpa`] in a given form (tests check both against the explicit computation).
pub fn pam_sdpa_with(query: &Tensor, key: &Tensor, value: &Tensor, form: PamSdpaForm) -> Tensor {
    let (b, n, c) = value.size3().expect("PAM value is (B,N,C)");
    let d = query.size()[2];
    // The kernels want a unit stride on the last axis.
    let (q, k, v) = (query.contiguous(), key.contiguous(), value.contiguous());
    match form {
        PamSdpaForm::Direct => {
            sdpa(&q.unsqueeze(1), &k.unsqueeze(1), &v.unsqueeze(1)).reshape([b, n, c])
        }
        PamSdpaForm::SplitHeads => {
            let heads = (c + d - 1) / d;
            let pad = heads * d - c; // zero channels when C is not a multiple of d
            let v = if pad > 0 {
                v.constant_pad_nd([0, pad])
            } else {
                v
            };
            let v = v.view([b, n, heads, d]).transpose(1, 2);
            let q = q.unsqueeze(1).expand([b, heads, n, d], false);
            let k = k.unsqueeze(1).expand([b, heads, n, d], false);
            let out = sdpa(&q, &k, &v).transpose(1, 2).reshape([b, n, heads * d]);
            if pad > 0 {
                out.narrow(2, 0, c)
            } else {
                out
            }
        }
    }
}

/// CAM through SDPA: X (B,C,N) -> attention(-X, X, X) (B,C,N), C tokens of length N.
pub fn cam_sdpa(x: &Tensor) -> Tensor {
    let (b, c, n) = x.size3().expect("CAM input is (B,C,N)");
    let x = x.contiguous().unsqueeze(1);
    sdpa(&-&x, &x, &x).reshape([b, c, n])
}

/// `scaled_dot_product_attention` with scale 1, no mask, no dropout. fp16 and bf16 inputs
/// run in fp32, with autocast off (amp): without 1/sqrt(d) the energies overflow fp16
/// (CAM sums ~N products) and lose their differences in bf16's 8-bit mantissa.
fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
    let kind = q.kind();
    crate::amp::full_precision(|| {
        let up = crate::amp::at_least_fp32;
        let out = Tensor::scaled_dot_product_attention(
            &up(q),
            &up(k),
            &up(v),
            None::<Tensor>,
            0.0,
            false,
            1.0,
            false,
        );
        out.to_kind(kind)
    })
}

/// Softmax over the last axis in fp32 (fp16 energies overflow) or fp64 for fp64 input.
fn softmax_at_least_fp32(energy: &Tensor) -> Tensor {
    energy.softmax(
        -1,
        if energy.kind() == Kind::Double {
            Kind::Double
        } else {
            Kind::Float
        },
    )
}

/// Position attention: every position attends over all N = H*W positions.
#[derive(Debug)]
pub struct Pam {
    query_conv: Conv,
    key_conv: Conv,
    value_conv: Conv,
    pub gamma: Tensor,
    /// Switchable at any time: the parameters are the same for both.
    pub attention: AttentionImpl,
}

impl Pam {
    pub fn new(p: &nn::Path, channels: i64, qk_channels: i64) -> Self {
        Self::with_attention(p, channels, qk_channels, AttentionImpl::Explicit)
    }

    pub fn with_attention(
        p: &nn::Path,
        channels: i64,
        qk_channels: i64,
        attention: AttentionImpl,
    ) -> Self {
        let conv = |name: &str, out| super::conv_1x1(p / name, channels, out);
        Self {
            query_conv: conv("query_conv", qk_channels),
            key_conv: conv("key_conv", qk_channels),
            value_conv: conv("value_conv", channels),
            gamma: p.zeros("gamma", &[1]),
            attention,
        }
    }

    /// PAM with fake quantisation `q` (QAT) on the exported tensor `head.conv5a`: the
    /// explicit form, each op input read as the exported graph reads it.
    pub(crate) fn forward_quantised(&self, x: &Tensor, q: Option<&FakeQuant>) -> Tensor {
        let Some(q) = q else {
            return self.forward(x);
        };
        let p = "head.sa";
        let input = "head.conv5a";
        let (b, c, h, w) = x.size4().expect("PAM input is NCHW");
        let n = h * w;
        let proj =
            |conv: &Conv, name: &str| q.conv(&format!("{p}.{name}"), input, x, conv, None, false);
        let query = proj(&self.query_conv, "query_conv");
        let key = proj(&self.key_conv, "key_conv");
        let value = proj(&self.value_conv, "value_conv");
        let query = q
            .read("head.sa.query_flat", "head.sa.query_conv", &query)
            .view([b, -1, n])
            .permute([0, 2, 1]);
        let key = q
            .read("head.sa.key_flat", "head.sa.key_conv", &key)
            .view([b, -1, n]);
        let value = q
            .read("head.sa.value_flat", "head.sa.value_conv", &value)
            .view([b, -1, n]);
        let attention = softmax_at_least_fp32(&query.bmm(&key));
        let attention_t = attention.permute([0, 2, 1]);
        let attention_t = q.read("head.sa.matmul", "head.sa.attention_t", &attention_t);
        let value = q.read("head.sa.matmul", "head.sa.value_flat", &value);
        let out = value.bmm(&attention_t);
        let scaled = &self.gamma * out.reshape([b, c, h, w]);
        q.read(p, "head.sa.scaled", &scaled) + q.read(p, input, x)
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, h, w) = x.size4().expect("PAM input is NCHW");
        let n = h * w;
        let query = self
            .query_conv
            .forward(x)
            .view([b, -1, n])
            .permute([0, 2, 1]);
        let key = self.key_conv.forward(x).view([b, -1, n]);
        let value = self.value_conv.forward(x).view([b, -1, n]);
        let out = match self.attention {
            AttentionImpl::Explicit => {
                // No 1/sqrt(d): DANet's energies are raw dot products; keep them in fp32
                // (fp16/bf16 inputs upcast, autocast off).
                let attention = crate::amp::full_precision(|| {
                    let up = crate::amp::at_least_fp32;
                    softmax_at_least_fp32(&up(&query).bmm(&up(&key)))
                });
                value.bmm(&attention.to_kind(value.kind()).permute([0, 2, 1]))
            }
            AttentionImpl::Sdpa => {
                pam_sdpa(&query, &key.permute([0, 2, 1]), &value.permute([0, 2, 1]))
                    .permute([0, 2, 1])
            }
        };
        &self.gamma * out.reshape([b, c, h, w]) + x
    }
}

/// Channel attention: every channel attends over all C channels, no convolutions.
#[derive(Debug)]
pub struct Cam {
    pub gamma: Tensor,
    pub attention: AttentionImpl,
}

impl Cam {
    pub fn new(p: &nn::Path) -> Self {
        Self::with_attention(p, AttentionImpl::Explicit)
    }

    pub fn with_attention(p: &nn::Path, attention: AttentionImpl) -> Self {
        Self {
            gamma: p.zeros("gamma", &[1]),
            attention,
        }
    }

    /// CAM with fake quantisation `q` (QAT) on the exported tensor `head.conv5c`, the
    /// explicit form, each op input read as the exported graph reads it.
    pub(crate) fn forward_quantised(&self, x: &Tensor, q: Option<&FakeQuant>) -> Tensor {
        let Some(q) = q else {
            return self.forward(x);
        };
        let p = "head.sc";
        let input = "head.conv5c";
        let (b, c, h, w) = x.size4().expect("CAM input is NCHW");
        let flat = q.read("head.sc.flat", input, x).view([b, c, -1]);
        let energy = flat.bmm(&flat.permute([0, 2, 1]));
        let energy_new = energy.amax([-1].as_slice(), true).expand_as(&energy) - &energy;
        let attention = softmax_at_least_fp32(&energy_new);
        let attention = q.read("head.sc.matmul", "head.sc.attention", &attention);
        let out = attention.bmm(&q.read("head.sc.matmul", "head.sc.flat", &flat));
        let scaled = &self.gamma * out.reshape([b, c, h, w]);
        q.read(p, "head.sc.scaled", &scaled) + q.read(p, input, x)
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, h, w) = x.size4().expect("CAM input is NCHW");
        let query = x.view([b, c, -1]);
        let out = match self.attention {
            AttentionImpl::Explicit => {
                // Energies and softmax in fp32 (fp16/bf16 upcast, autocast off).
                let attention = crate::amp::full_precision(|| {
                    let q = crate::amp::at_least_fp32(&query);
                    let energy = q.bmm(&q.permute([0, 2, 1]));
                    // DANet's max-minus form: softmax(rowmax(E) - E).
                    let energy_new =
                        energy.amax([-1].as_slice(), true).expand_as(&energy) - &energy;
                    softmax_at_least_fp32(&energy_new)
                });
                attention.to_kind(query.kind()).bmm(&query)
            }
            AttentionImpl::Sdpa => cam_sdpa(&query),
        };
        &self.gamma * out.reshape([b, c, h, w]) + x
    }
}
