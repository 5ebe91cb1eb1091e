//! Batch-norm folding: inference BN is an affine map per channel, so it merges into the
//! preceding convolution and the exported graph has no BatchNormalization nodes (fewer
//! kernels, and no per-runtime differences in how BN's epsilon is applied).
//!
//! With s = gamma / sqrt(var + eps):  W'[o] = W[o] * s[o],  b'[o] = (b[o] - mean[o]) * s[o] + beta[o]
//! (b = 0 for the bias-free convs DANet uses). Computed in f64 and rounded once to f32,
//! which is closer to the exact value than PyTorch's own f32 conv-then-BN.

use crate::error::ExportError;
use crate::weights::Weights;

/// PyTorch's `BatchNorm2d` default, which DANet keeps.
pub const BN_EPS: f64 = 1e-5;

/// Running statistics and affine parameters of one BatchNorm2d.
pub struct BatchNorm {
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub mean: Vec<f32>,
    pub var: Vec<f32>,
}

impl BatchNorm {
    /// Loads `{prefix}.{weight,bias,running_mean,running_var}`, each of `[channels]`.
    /// (`num_batches_tracked` only matters for training and is not read.)
    pub fn load(w: &Weights<'_, '_>, prefix: &str, channels: usize) -> Result<Self, ExportError> {
        let get = |name: &str| w.f32(&format!("{prefix}.{name}"), &[channels]);
        Ok(Self {
            gamma: get("weight")?,
            beta: get("bias")?,
            mean: get("running_mean")?,
            var: get("running_var")?,
        })
    }
}

/// Folds `bn` into a conv with weight `weight` (out-channel-major, `[out, ...]`) and
/// optional bias; returns the new (weight, bias).
pub fn fold_bn(
    weight: &[f32],
    bias: Option<&[f32]>,
    bn: &BatchNorm,
    eps: f64,
) -> (Vec<f32>, Vec<f32>) {
    let out = bn.gamma.len();
    debug_assert!(out > 0 && weight.len().is_multiple_of(out));
    let per_out = weight.len() / out;
    let mut w = Vec::with_capacity(weight.len());
    let mut b = Vec::with_capacity(out);
    for o in 0..out {
        let scale = f64::from(bn.gamma[o]) / (f64::from(bn.var[o]) + eps).sqrt();
        w.extend(
            weight[o * per_out..(o + 1) * per_out]
                .iter()
                .map(|&v| (f64::from(v) * scale) as f32),
        );
        let b0 = bias.map_or(0.0, |b| f64::from(b[o]));
        b.push(((b0 - f64::from(bn.mean[o])) * scale + f64::from(bn.beta[o])) as f32);
    }
    (w, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bn(gamma: &[f32], beta: &[f32], mean: &[f32], var: &[f32]) -> BatchNorm {
        BatchNorm {
            gamma: gamma.into(),
            beta: beta.into(),
            mean: mean.into(),
            var: var.into(),
        }
    }

    #[test]
    fn hand_computed_values() {
        // var + eps = 4 => s = gamma / 2.
        let v = (4.0 - BN_EPS) as f32;
        let n = bn(&[3.0, -1.0], &[1.0, 0.5], &[0.5, 2.0], &[v, v]);
        let (w, b) = fold_bn(&[2.0, 4.0, 1.0, -6.0], None, &n, BN_EPS);
        // channel 0: s = 1.5: w = [3, 6], b = 1 - 0.5 * 1.5 = 0.25
        // channel 1: s = -0.5: w = [-0.5, 3], b = 0.5 - 2 * -0.5 = 1.5
        let close = |a: &[f32], e: &[f32]| a.iter().zip(e).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(close(&w, &[3.0, 6.0, -0.5, 3.0]), "{w:?}");
        assert!(close(&b, &[0.25, 1.5]), "{b:?}");
        // With a conv bias c: b' = (c - mean) * s + beta.
        let (_, b) = fold_bn(&[2.0, 4.0, 1.0, -6.0], Some(&[1.0, 2.0]), &n, BN_EPS);
        assert!(close(&b, &[1.75, 0.5]), "{b:?}");
    }

    /// Naive 3x3 conv (pad 1, one image) used to compare conv->BN with the folded conv.
    fn conv3x3(x: &[f32], cin: usize, h: usize, wd: usize, w: &[f32], b: &[f32]) -> Vec<f32> {
        let cout = b.len();
        let mut y = vec![0f32; cout * h * wd];
        for o in 0..cout {
            for i in 0..h {
                for j in 0..wd {
                    let mut acc = b[o];
                    for c in 0..cin {
                        for (ki, di) in (0..3).zip(-1i64..) {
                            for (kj, dj) in (0..3).zip(-1i64..) {
                                let (ii, jj) = (i as i64 + di, j as i64 + dj);
                                if ii < 0 || jj < 0 || ii >= h as i64 || jj >= wd as i64 {
                                    continue;
                                }
                                acc += w[((o * cin + c) * 3 + ki) * 3 + kj]
                                    * x[(c * h + ii as usize) * wd + jj as usize];
                            }
                        }
                    }
                    y[(o * h + i) * wd + j] = acc;
                }
            }
        }
        y
    }

    #[test]
    fn folded_conv_equals_conv_then_bn() {
        let (cin, cout, h, wd) = (2, 3, 4, 5);
        let x: Vec<f32> = (0..cin * h * wd)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let w: Vec<f32> = (0..cout * cin * 9)
            .map(|i| ((i * 13 % 7) as f32 - 3.0) / 5.0)
            .collect();
        let n = bn(
            &[0.7, -1.3, 2.0],
            &[0.1, -0.2, 0.3],
            &[0.4, -0.5, 1.1],
            &[0.9, 2.5, 0.01],
        );
        let y = conv3x3(&x, cin, h, wd, &w, &[0.0; 3]);
        let (wf, bf) = fold_bn(&w, None, &n, BN_EPS);
        let yf = conv3x3(&x, cin, h, wd, &wf, &bf);
        for o in 0..cout {
            let s = n.gamma[o] as f64 / (n.var[o] as f64 + BN_EPS).sqrt();
            for p in 0..h * wd {
                let reference =
                    (y[o * h * wd + p] as f64 - n.mean[o] as f64) * s + n.beta[o] as f64;
                let got = yf[o * h * wd + p] as f64;
                assert!(
                    (reference - got).abs() < 1e-4 * (1.0 + reference.abs()),
                    "{o} {p}: {reference} vs {got}"
                );
            }
        }
    }
}
