//! Synchronised BatchNorm: in training, batch statistics over the global batch (every
//! rank's), exactly — the forward all-reduces per-channel (sum, sum of squares, count),
//! the backward all-reduces (sum dy, sum dy * (x - mean)), as `torch.nn.SyncBatchNorm`.
//! The autograd function lives in the C++ shim (tch has no custom autograd functions).
//!
//! The group is held by the model: [`crate::DaNet::set_sync_bn`] (or
//! [`crate::Trainer::enable_sync_bn`]) hands it to every BatchNorm layer, whose forward
//! calls [`batch_norm_t`] with it. Layers without a group use plain BatchNorm, so
//! single-process runs are unchanged, and two models in one process do not share a
//! setting. Evaluation (`train == false`) always uses the running statistics.

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::ProcessGroup;

/// `xs.apply_t(bn, train)`, synchronised across the ranks of `group` when one is given
/// and `train` is set. Panics when a collective fails (a peer died or timed out): the
/// forward of a module has no error path, and the rank cannot continue anyway.
pub fn batch_norm_t(
    xs: &Tensor,
    bn: &nn::BatchNorm,
    group: Option<&ProcessGroup>,
    train: bool,
) -> Tensor {
    if let (true, Some(group)) = (train, group) {
        // tch keeps a BatchNorm's config private; the model's are PyTorch's defaults
        // (crate::model::batch_norm), which these are.
        let defaults = nn::BatchNormConfig::default();
        return group
            .sync_batch_norm(
                xs,
                bn.ws.as_ref(),
                bn.bs.as_ref(),
                Some((&bn.running_mean, &bn.running_var)),
                defaults.momentum,
                defaults.eps,
            )
            .unwrap_or_else(|e| panic!("rank {}: {e:#}", group.rank()));
    }
    bn.forward_t(xs, train)
}

#[cfg(test)]
mod tests {
    //! SyncBN on half inputs against libtorch's own batch_norm (PyTorch's maths) on the same
    //! values widened to fp32. A one-rank gloo group runs the real shim path: the all-reduce
    //! of a single rank is the identity, so the reference needs no second process.
    use tch::{Device, Kind, Tensor};

    use crate::distributed::process_group::tests::gloo as group;

    const MOMENTUM: f64 = 0.1;
    const EPS: f64 = 1e-5;

    fn max_abs(t: &Tensor) -> f64 {
        t.abs().max().double_value(&[])
    }

    /// (output diff / max |output|, running_var relative diff, input-gradient diff / max |grad|).
    fn compare(kind: Kind) -> (f64, f64, f64) {
        tch::manual_seed(7);
        // Activations of a few hundred, as an un-normalised conv output under autocast:
        // x * x overflows fp16 (max 65504) for |x| > 256.
        let x32 = Tensor::randn([4, 3, 6, 6], (Kind::Float, Device::Cpu)) * 400.0 + 100.0;
        let x = x32.to_kind(kind).set_requires_grad(true);
        let weight = Tensor::from_slice(&[1.5f32, 0.5, 2.0]);
        let bias = Tensor::from_slice(&[0.1f32, -0.2, 0.3]);
        // A loss-scaled upstream gradient, as fp16 loss scaling makes it.
        let dy32 = Tensor::randn([4, 3, 6, 6], (Kind::Float, Device::Cpu)) * 1000.0;

        let (rm, rv) = (
            Tensor::zeros([3], (Kind::Float, Device::Cpu)),
            Tensor::ones([3], (Kind::Float, Device::Cpu)),
        );
        let g = group();
        let y = g
            .sync_batch_norm(
                &x,
                Some(&weight),
                Some(&bias),
                Some((&rm, &rv)),
                MOMENTUM,
                EPS,
            )
            .unwrap();
        assert_eq!(y.kind(), kind, "the output keeps the input's dtype");
        // d(sum(y * dy))/dy = dy: the upstream gradient, exactly, in y's dtype.
        (&y * dy32.to_kind(kind)).sum(Kind::Float).backward();

        // The reference: the same (rounded) values in fp32 through libtorch's batch_norm.
        let xr = x.detach().to_kind(Kind::Float).set_requires_grad(true);
        let (rm_ref, rv_ref) = (
            Tensor::zeros([3], (Kind::Float, Device::Cpu)),
            Tensor::ones([3], (Kind::Float, Device::Cpu)),
        );
        let yr = Tensor::batch_norm(
            &xr,
            Some(&weight),
            Some(&bias),
            Some(&rm_ref),
            Some(&rv_ref),
            true,
            MOMENTUM,
            EPS,
            false,
        );
        (&yr * dy32.to_kind(kind).to_kind(Kind::Float))
            .sum(Kind::Float)
            .backward();

        let out = max_abs(&(y.to_kind(Kind::Float) - &yr)) / max_abs(&yr);
        let var = max_abs(&((&rv - &rv_ref) / &rv_ref));
        let gx = x.grad().to_kind(Kind::Float);
        let grad = max_abs(&(&gx - xr.grad())) / max_abs(&xr.grad());
        assert!(
            max_abs(&(&rm - &rm_ref)) <= 1e-3 * max_abs(&rm_ref),
            "running_mean"
        );
        (out, var, grad)
    }

    // Tolerances: the output and gradient are rounded to the input dtype at the end, so
    // relative to their largest value they are off by at most its resolution (fp16 2^-11
    // = 4.9e-4, bf16 2^-8 = 3.9e-3), here allowed twice that; the statistics are fp32
    // sums of exact products, within 1e-5 (fp32 noise ~1e-7).
    #[test]
    fn fp16_statistics_do_not_overflow() {
        let (out, var, grad) = compare(Kind::Half);
        assert!(out.is_finite() && out <= 1e-3, "output off by {out} of max");
        assert!(
            var.is_finite() && var <= 1e-5,
            "running_var off by {var} (relative)"
        );
        assert!(
            grad.is_finite() && grad <= 1e-3,
            "input gradient off by {grad} of max"
        );
    }

    #[test]
    fn bf16_statistics_in_fp32() {
        let (out, var, grad) = compare(Kind::BFloat16);
        assert!(out <= 8e-3, "output off by {out} of max");
        // bf16 products (8-bit mantissa) would put the variance ~1e-3 off.
        assert!(var <= 1e-5, "running_var off by {var} (relative)");
        assert!(grad <= 8e-3, "input gradient off by {grad} of max");
    }
}
