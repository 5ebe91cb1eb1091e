//! The two attention implementations compute the same function: outputs and gradients
//! of the explicit (matmul-softmax-matmul) and the SDPA forms agree within 1e-5 in fp32
//! on PAM and CAM alone (both SDPA shapes of PAM, V widths that are and are not a
//! multiple of the query width), and within 1e-10 in fp64 through a whole tiny DANet in
//! training mode. The whole network is checked in fp64 because there a scalar gradient
//! such as `head.sa.gamma` is a long sum with cancellation: its fp32 rounding depends on
//! the CPU's SIMD width (1.5e-5 relative on one CI machine), which would test the CPU,
//! not the implementations.
//!
//! Gradients are compared per tensor relative to the tensor's largest value (floor 1e-6),
//! except `head.sa.key_conv.bias`, whose gradient vanishes identically (softmax ignores
//! the per-row constant it adds): both must stay below 1e-6 of the largest gradient.

use crate::common;

use common::*;
use segtool_model_spec::BackboneSpec;
use segtool_train::model::attention::{cam_sdpa, pam_sdpa, pam_sdpa_with, PamSdpaForm};
use segtool_train::model::{AttentionImpl, Cam, Pam};
use tch::{nn, Kind, Tensor};

const TOL: f64 = 1e-5;
const TOL_F64: f64 = 1e-10;

fn max_abs(t: &Tensor) -> f64 {
    t.abs().max().double_value(&[])
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    max_abs(&(a - b))
}

/// max|a - b| / max(max|b|, 1e-6).
fn rel_diff(a: &Tensor, b: &Tensor) -> f64 {
    max_diff(a, b) / max_abs(b).max(1e-6)
}

/// Tests here seed libtorch's global RNG and compare two runs: run one at a time, on one
/// intra-op thread, so neither a neighbour test's draws nor a thread-count-dependent
/// reduction order changes the fixture (a ReLU flip then moves gradients by ~1e-2).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::set_num_threads(1);
    guard
}

fn opts() -> (Kind, tch::Device) {
    (Kind::Float, tch::Device::Cpu)
}

/// softmax(q k^T) v, token-major, in fp64: the definition both forms must meet.
fn attention_f64(q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
    let d = |t: &Tensor| t.to_kind(Kind::Double);
    d(q).bmm(&d(k).transpose(1, 2))
        .softmax(-1, Kind::Double)
        .bmm(&d(v))
}

#[test]
fn pam_sdpa_forms_match_the_definition() {
    let _serial = serial();
    tch::manual_seed(1);
    // (B, N, d, C): C = 8 d as DANet has it, and a C that is not a multiple of d (padding).
    for (b, n, d, c) in [(2, 48, 4, 32), (1, 35, 6, 20)] {
        let q = Tensor::randn([b, n, d], opts());
        let k = Tensor::randn([b, n, d], opts());
        let v = Tensor::randn([b, n, c], opts());
        let want = attention_f64(&q, &k, &v);
        for form in [PamSdpaForm::Direct, PamSdpaForm::SplitHeads] {
            let got = pam_sdpa_with(&q, &k, &v, form).to_kind(Kind::Double);
            let diff = max_diff(&got, &want);
            eprintln!("PAM {form:?} B{b} N{n} d{d} C{c}: {diff:.2e}");
            assert!(diff < TOL, "{form:?}: {diff}");
        }
        assert!(max_diff(&pam_sdpa(&q, &k, &v).to_kind(Kind::Double), &want) < TOL);
    }
}

#[test]
fn cam_sdpa_is_softmax_of_minus_energy() {
    let _serial = serial();
    tch::manual_seed(2);
    // Post-ReLU-like features: energies X X^T of order tens, as in the model.
    let x = Tensor::rand([2, 16, 40], opts());
    let xd = x.to_kind(Kind::Double);
    let energy = xd.bmm(&xd.transpose(1, 2));
    let max_minus = energy.amax([-1].as_slice(), true) - &energy;
    let want = max_minus.softmax(-1, Kind::Double).bmm(&xd);
    let diff = max_diff(&cam_sdpa(&x).to_kind(Kind::Double), &want);
    eprintln!("CAM SDPA vs definition: {diff:.2e}");
    assert!(diff < TOL);
}

/// Runs `f` with `attention`, returning its output and the gradients of `weights . out`
/// with respect to the input and every variable, then clears those gradients.
fn out_and_grads(
    vs: &nn::VarStore,
    x: &Tensor,
    weights: &Tensor,
    f: impl Fn(&Tensor) -> Tensor,
) -> (Tensor, Vec<(String, Tensor)>) {
    let x = x.detach().set_requires_grad(true);
    let out = f(&x);
    (&out * weights).sum(out.kind()).backward();
    let mut grads = vec![("input".to_string(), x.grad().copy())];
    let mut vars: Vec<_> = vs
        .variables()
        .into_iter()
        .filter(|(_, v)| v.requires_grad())
        .collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, v) in vars {
        grads.push((name, v.grad().copy()));
        let _ = v.grad().zero_();
    }
    (out.detach(), grads)
}

fn assert_same(
    what: &str,
    tol: f64,
    a: &(Tensor, Vec<(String, Tensor)>),
    b: &(Tensor, Vec<(String, Tensor)>),
) {
    let diff = max_diff(&a.0, &b.0);
    assert!(diff < tol, "{what} output: {diff}");
    let mut worst = (0f64, String::new());
    let global =
        b.1.iter()
            .filter(|(_, g)| g.defined())
            .map(|(_, g)| max_abs(g))
            .fold(0f64, f64::max);
    for ((name, ga), (_, gb)) in a.1.iter().zip(&b.1) {
        if !ga.defined() {
            assert!(
                !gb.defined(),
                "{what} {name}: gradient in one implementation only"
            );
            continue;
        }
        if name.ends_with("key_conv.bias") {
            let (ma, mb) = (max_abs(ga), max_abs(gb));
            assert!(
                ma.max(mb) < 1e-6 * global,
                "{what} {name} should vanish: {ma:.2e} {mb:.2e} (G {global:.2e})"
            );
            continue;
        }
        let rel = rel_diff(ga, gb);
        if rel > worst.0 {
            worst = (rel, name.clone());
        }
        assert!(rel < tol, "{what} {name}: gradient relative diff {rel:.3e}");
    }
    eprintln!(
        "{what}: output {diff:.2e}, worst gradient {:.2e} ({})",
        worst.0, worst.1
    );
}

#[test]
fn pam_and_cam_modules_agree_in_output_and_gradients() {
    let _serial = serial();
    tch::manual_seed(3);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let mut pam = Pam::new(&(vs.root() / "sa"), 32, 4);
    let mut cam = Cam::new(&(vs.root() / "sc"));
    tch::no_grad(|| {
        let _ = pam.gamma.fill_(0.7);
        let _ = cam.gamma.fill_(-0.4);
    });
    let x = Tensor::rand([2, 32, 6, 8], opts());
    let weights = Tensor::randn([2, 32, 6, 8], opts());
    let mut runs = Vec::new();
    for attention in [AttentionImpl::Explicit, AttentionImpl::Sdpa] {
        pam.attention = attention;
        cam.attention = attention;
        runs.push(out_and_grads(&vs, &x, &weights, |x| {
            pam.forward(x) + cam.forward(x)
        }));
    }
    assert_same("PAM+CAM", TOL, &runs[0], &runs[1]);
}

#[test]
fn tiny_danet_trains_identically_with_both_implementations() {
    let _serial = serial();
    let spec = spec(BackboneSpec::tiny(), 4);
    let (mut vs, mut model) = random_model(&spec, 4);
    vs.double();
    model.set_dropout(false);
    let f64_opts = (Kind::Double, tch::Device::Cpu);
    let x = Tensor::randn([2, 3, 48, 64], f64_opts);
    let weights = Tensor::randn([3, 2, 4, 48, 64], f64_opts);
    let mut runs = Vec::new();
    for attention in [AttentionImpl::Explicit, AttentionImpl::Sdpa] {
        model.set_attention(attention);
        assert_eq!(model.attention(), attention);
        // Training mode updates the running statistics: restore them between runs.
        let state: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .map(|(n, t)| (n, t.copy()))
            .collect();
        runs.push(out_and_grads(&vs, &x, &weights, |x| {
            let out = model.forward_all(x, true);
            Tensor::stack(&[out.fused, out.position, out.channel], 0)
        }));
        tch::no_grad(|| {
            for (name, mut var) in vs.variables() {
                let saved = &state.iter().find(|(n, _)| *n == name).unwrap().1;
                var.copy_(saved);
            }
        });
    }
    assert_same("tiny DANet (train mode, fp64)", TOL_F64, &runs[0], &runs[1]);
}
