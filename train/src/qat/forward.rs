//! The model's side of fake quantisation: what each read and each Conv weight becomes
//! in a forward, in ONNX's arithmetic.

use std::sync::atomic::Ordering;

use tch::{Kind, Tensor};

use super::{FakeQuant, Mode, RangeLearning, Read, State, BN_EPS};
use crate::model::{bn_t, Bn, Conv};

impl FakeQuant {
    /// Called by the model at the start of each forward.
    pub(crate) fn begin_forward(&self, train: bool) {
        let mut s = self.lock();
        s.training = train;
        s.observed.iter_mut().for_each(|o| *o = false);
    }

    /// Input `input` of node `node` (ONNX names): fake-quantised when the plan quantises
    /// that read, as is otherwise; with the scale used.
    pub(crate) fn read_scaled(
        &self,
        node: &str,
        input: &str,
        x: &Tensor,
    ) -> (Tensor, Option<Tensor>) {
        let Some(r) = self.reads.get(&(node.to_string(), input.to_string())) else {
            return (x.shallow_clone(), None);
        };
        let mut s = self.lock();
        s.visited.insert((node.to_string(), input.to_string()));
        let observe = |s: &mut State| -> Option<Tensor> {
            let relu = r.observe?;
            if s.observed[r.source] {
                return None;
            }
            s.observed[r.source] = true;
            let v = x.detach();
            Some(if relu { v.relu() } else { v })
        };
        match &mut s.mode {
            Mode::Ranges(_) | Mode::Histograms(_) => {
                if let Some(v) = observe(&mut s) {
                    let v = Vec::<f32>::try_from(
                        v.to_device(tch::Device::Cpu)
                            .to_kind(Kind::Float)
                            .contiguous()
                            .view(-1),
                    )
                    .expect("f32");
                    match &mut s.mode {
                        Mode::Ranges(r2) => r2[r.source].update(&v),
                        Mode::Histograms(h) => h[r.source].add(&v),
                        Mode::Quantise => unreachable!(),
                    }
                }
                (x.shallow_clone(), None)
            }
            Mode::Quantise => {
                if self.options.ranges == RangeLearning::Ema && s.training {
                    if let Some(v) = observe(&mut s) {
                        let m = v.abs().max().double_value(&[]) as f32;
                        s.batch_max[r.source] = s.batch_max[r.source].max(m);
                    }
                }
                drop(s);
                let (scale, zp, qmin, qmax) = self.activation(r, x.numel() as i64);
                let y = fake_quant(x, &scale, zp, qmin, qmax);
                (y, Some(scale))
            }
        }
    }

    /// [`Self::read_scaled`] without the scale.
    pub(crate) fn read(&self, node: &str, input: &str, x: &Tensor) -> Tensor {
        self.read_scaled(node, input, x).0
    }

    /// Scale (a 0-dim f32 tensor), zero point and integer range of read `r`. The value
    /// of the scale is the QDQ rewrite's own ([`Layout::activation`] on the threshold);
    /// with LSQ it carries the threshold's gradient.
    fn activation(&self, r: &Read, numel: i64) -> (Tensor, f64, f64, f64) {
        let t = self.thresholds.get(r.source as i64);
        let tv = t.double_value(&[]) as f32;
        let (scale, zp) = self.options.layout.activation(tv, r.nonneg, "z");
        let (zp, qmin, qmax) = match (
            zp.data_type == segtool_export::proto::DataType::Uint8 as i32,
            zp.raw_data.first().copied().unwrap_or(0),
        ) {
            (true, z) => (z as f64, 0.0, 255.0),
            (false, z) => (z as i8 as f64, -128.0, 127.0),
        };
        let exact = Tensor::from(scale).to_device(self.thresholds.device());
        let scale = if self.options.ranges == RangeLearning::Lsq && tv > 0.0 {
            // d scale / d T, and LSQ's gradient scale 1 / sqrt(N * Qp), N over the
            // global batch (each rank sees 1/world of it).
            let k = (scale / tv) as f64;
            let world = self.world_size.load(Ordering::Relaxed) as f64;
            let n = numel.max(1) as f64 * world;
            let g = 1.0 / (n * (qmax - zp).max(1.0)).sqrt();
            // Value: the exact scale; gradient: d scale / d T times g (LSQ's grad_scale).
            let ts = &t * (k * g);
            exact + (&ts - ts.detach())
        } else {
            exact
        };
        (scale, zp, qmin, qmax)
    }

    /// Conv `node` reading `input` (ONNX names), with its BatchNorm when it has one: the
    /// export's BN-folded weight (and bias), fake-quantised as the plan says. Before the
    /// BN freeze, a training forward normalises with batch statistics as PyTorch's QAT
    /// ConvBn does (weight folded with the running statistics, the conv output scaled
    /// back, then BatchNorm).
    pub(crate) fn conv(
        &self,
        node: &str,
        input: &str,
        x: &Tensor,
        conv: &Conv,
        bn: Option<&Bn>,
        bn_train: bool,
    ) -> Tensor {
        let (xq, s_in) = self.read_scaled(node, input, x);
        let Some(&bias_quantised) = self.weights.get(node) else {
            return match bn {
                Some(bn) => bn_t(&xq.apply(conv), bn, bn_train),
                None => xq.apply(conv),
            };
        };
        let observing = !matches!(self.lock().mode, Mode::Quantise);
        let w = &conv.inner.ws;
        let bn_train = bn_train && !self.bn_frozen();
        match bn {
            Some(bn) if bn_train => {
                let (gamma, rv) = (bn.bn.ws.as_ref().expect("affine BN"), &bn.bn.running_var);
                let sf = gamma / (rv + BN_EPS).sqrt();
                let wf = w * sf.view([-1, 1, 1, 1]);
                let wq = if observing { wf } else { self.weight(&wf).0 };
                let y = conv.with(&xq, &wq, None) / sf.view([1, -1, 1, 1]);
                bn_t(&y, bn, true)
            }
            _ => {
                let (wf, bf) = match bn {
                    Some(bn) => fold(w, bn),
                    None => (
                        w.shallow_clone(),
                        conv.inner.bs.as_ref().expect("conv bias").shallow_clone(),
                    ),
                };
                if observing {
                    return conv.with(&xq, &wf, Some(&bf));
                }
                let (wq, s_w) = self.weight(&wf);
                let bq = match (bias_quantised, s_in) {
                    (true, Some(s_in)) => quantise_bias(&bf, &(s_in.detach() * s_w)),
                    _ => bf,
                };
                conv.with(&xq, &wq, Some(&bq))
            }
        }
    }

    /// Per-output-channel symmetric fake quantisation of a weight, as the rewrite
    /// quantises it; returns it and the scales.
    fn weight(&self, w: &Tensor) -> (Tensor, Tensor) {
        let max = self.options.weight_range.max() as f64;
        let absmax = w.detach().abs().amax([1, 2, 3].as_slice(), false);
        let s = absmax.divide_scalar(max);
        let ok = absmax.gt(0.0).logical_and(&absmax.isfinite());
        let s = s.where_self(&ok, &s.ones_like());
        let q = fake_quant(w, &s.view([-1, 1, 1, 1]), 0.0, -max, max);
        (q, s)
    }
}

/// `(clamp(round(x / s) + z, qmin, qmax) - z) * s`, rounding half to even and passing
/// gradients straight through the rounding.
pub fn fake_quant(x: &Tensor, s: &Tensor, zp: f64, qmin: f64, qmax: f64) -> Tensor {
    let v = x / s;
    let r = &v + (v.round() - &v).detach();
    ((r + zp).clamp(qmin, qmax) - zp) * s
}

/// The export's folding of `bn` into a bias-free conv weight `w` (f64, rounded once).
fn fold(w: &Tensor, bn: &Bn) -> (Tensor, Tensor) {
    let d = |t: &Tensor| t.to_kind(Kind::Double);
    let gamma = d(bn.bn.ws.as_ref().expect("affine BN"));
    let beta = d(bn.bn.bs.as_ref().expect("affine BN"));
    let scale = gamma / (d(&bn.bn.running_var) + BN_EPS).sqrt();
    let wf = (d(w) * scale.view([-1, 1, 1, 1])).to_kind(Kind::Float);
    let bf = ((-d(&bn.bn.running_mean)) * &scale + beta).to_kind(Kind::Float);
    (wf, bf)
}

/// A bias on the int32 grid of `scales` (one per output channel), as the rewrite's
/// `quantise_bias` (in f64) and DequantizeLinear (in f32).
fn quantise_bias(b: &Tensor, scales: &Tensor) -> Tensor {
    let v = b.to_kind(Kind::Double) / scales.to_kind(Kind::Double);
    let q = &v + (v.round() - &v).detach();
    q.to_kind(Kind::Float) * scales
}
