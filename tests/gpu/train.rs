//! Training checks: CUDA step vs CPU, fp16 loss scaling, PAM memory, NCCL DDP + SyncBN.

use super::*;

fn tiny_spec(classes: usize) -> ModelSpec {
    ModelSpec::new(
        "tiny",
        BackboneSpec::tiny(),
        (0..classes).map(|c| format!("c{c}")).collect(),
    )
}

/// `n` images 3x32x32 and masks of 5 classes, the same in every process.
fn data(n: i64) -> (Tensor, Tensor) {
    tch::manual_seed(7);
    let images = Tensor::randn([n, 3, 32, 32], (Kind::Float, Device::Cpu));
    let masks = Tensor::randint(5, [n, 32, 32], (Kind::Int64, Device::Cpu));
    (images, masks)
}

fn sorted_vars(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<_> = vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.to_device(Device::Cpu).to_kind(Kind::Double)))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> Result<(f64, String)> {
    ensure!(a.len() == b.len(), "{} vs {} variables", a.len(), b.len());
    let mut worst = (0.0, String::new());
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        ensure!(na == nb, "variable {na} vs {nb}");
        let d = (ta - tb).abs().max().double_value(&[]);
        if d > worst.0 {
            worst = (d, na.clone());
        }
    }
    Ok(worst)
}

fn trainer(device: Device, batch: usize) -> Result<Trainer> {
    let cfg = TrainConfig {
        iterations: 10,
        batch_size: batch,
        lr: 0.01,
        progress: false,
        seed: 3,
        device,
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(&tiny_spec(5), cfg)?;
    t.model.head.dropout = false;
    Ok(t)
}

pub(super) fn cuda_train_step_matches_cpu() -> Result<Outcome> {
    gate!(gpus());
    set_cuda_allow_tf32(false)?;
    let mut cpu = trainer(Device::Cpu, 4)?;
    let mut gpu = trainer(Device::Cuda(0), 4)?;
    gpu.vs.copy(&cpu.vs)?;
    let (images, masks) = data(4);
    let (gi, gm) = (
        images.to_device(Device::Cuda(0)),
        masks.to_device(Device::Cuda(0)),
    );
    let mut worst_loss: f64 = 0.0;
    for it in 0..3 {
        let lc = cpu.step(&images, &masks, it)?;
        let lg = gpu.step(&gi, &gm, it)?;
        worst_loss = worst_loss.max((lc - lg).abs() / lc.abs());
    }
    let (d, name) = max_diff(&sorted_vars(&cpu.vs), &sorted_vars(&gpu.vs))?;
    ensure!(
        d < 1e-4,
        "CUDA and CPU variables differ by {d:.3e} at {name}"
    );
    ensure!(
        worst_loss < 1e-5,
        "losses differ by {worst_loss:.3e} (relative)"
    );
    Ok(Passed(format!(
        "3 steps: max |Δvariable| {d:.2e} ({name}), loss Δ {worst_loss:.2e} relative"
    )))
}

pub(super) fn fp16_amp_loss_scaling_on_cuda() -> Result<Outcome> {
    gate!(gpus());
    let cfg = TrainConfig {
        iterations: 10,
        batch_size: 2,
        lr: 0.01,
        progress: false,
        seed: 3,
        device: Device::Cuda(0),
        grad_clip_norm: Some(10.0),
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(&tiny_spec(5), cfg)?;
    t.model.head.dropout = false;
    // What the check must show: one overflow, then steps that are taken. The overflow is
    // forced by the initial scale: loss * f32::MAX is inf already in fp32. The scale it
    // backs off to must then keep every fp16 gradient finite, including the ones that
    // leave fp32 ops (CUDA autocast runs upsample_bilinear2d in fp32 and casts its input
    // gradient back to fp16). With loss weights 1 the tiny model's gradients are O(1)
    // (each loss is a mean over pixels), so 2^10 leaves a 64x margin below fp16's 65504;
    // the old 1000x weights at 2^17 overflowed there on correct code.
    let after_backoff = 2f64.powi(10);
    let amp = Amp::new(Precision::Fp16, Device::Cuda(0))?.force_scaler(GradScalerConfig {
        init_scale: f32::MAX as f64,
        backoff_factor: after_backoff / f32::MAX as f64,
        ..GradScalerConfig::default()
    });
    t.enable_amp(amp);
    let (images, masks) = data(2);
    let (images, masks) = (
        images.to_device(Device::Cuda(0)),
        masks.to_device(Device::Cuda(0)),
    );
    let before = sorted_vars(&t.vs);
    let s0 = t.step_accumulated(&[(&images, &masks)], 0)?;
    ensure!(s0.skipped, "step 0 with scale f32::MAX was applied: {s0:?}");
    ensure!(s0.loss.is_finite(), "the unscaled loss is finite: {s0:?}");
    let scale = s0.loss_scale.context("a loss scale")?;
    ensure!(
        (scale / after_backoff - 1.0).abs() < 1e-6,
        "the scale backed off to {scale}, not {after_backoff}"
    );
    let trainable: Vec<String> =
        t.vs.variables()
            .into_iter()
            .filter(|(_, v)| v.requires_grad())
            .map(|(n, _)| n)
            .collect();
    let after = sorted_vars(&t.vs);
    for ((n, a), (_, b)) in before.iter().zip(&after) {
        if trainable.contains(n) {
            ensure!(a.equal(b), "{n} changed on a skipped step");
        }
    }
    let mut losses = Vec::new();
    for it in 1..6 {
        let s = t.step_accumulated(&[(&images, &masks)], it)?;
        ensure!(!s.skipped, "step {it} skipped again: {s:?}");
        ensure!(s.loss.is_finite(), "step {it}: loss {}", s.loss);
        losses.push(s.loss);
    }
    let (d, _) = max_diff(&after, &sorted_vars(&t.vs))?;
    ensure!(d > 0.0, "the applied steps moved no weight");
    Ok(Passed(format!(
        "step 0 skipped (scale -> {scale:.3e}), steps 1-5 applied, losses {losses:.3?}"
    )))
}

pub(super) fn pam_sdpa_memory_on_cuda_768() -> Result<Outcome> {
    gate!(gpus());
    set_cuda_allow_tf32(false)?;
    let dev = Device::Cuda(0);
    // 768 crop, output stride 8: 96 x 96 positions; the head's inter channels 512.
    let (b, c, side) = (2i64, 512i64, 96i64);
    let n = side * side;
    let vs = nn::VarStore::new(dev);
    let mut pam = Pam::new(&vs.root(), c, c / 8);
    tch::no_grad(|| {
        let _ = pam.gamma.fill_(0.5);
    });
    tch::manual_seed(1);
    let x = Tensor::randn([b, c, side, side], (Kind::Float, dev)).set_requires_grad(true);
    let mut run = |attention: AttentionImpl| -> Result<(u64, Tensor)> {
        pam.attention = attention;
        tch::Cuda::synchronize(0);
        cuda_peak_allocated(0, true)?;
        let y = pam.forward(&x);
        y.sum(Kind::Float).backward();
        tch::Cuda::synchronize(0);
        let peak = cuda_peak_allocated(0, true)?;
        Ok((peak, y.detach().to_device(Device::Cpu)))
    };
    let (explicit, y_explicit) = run(AttentionImpl::Explicit)?;
    let (sdpa, y_sdpa) = run(AttentionImpl::Sdpa)?;
    let energy = (b * n * n * 4) as u64;
    let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
    ensure!(
        explicit >= energy,
        "the explicit form's peak {:.0} MiB is below its N x N energies ({:.0} MiB): \
         the measurement is off",
        mib(explicit),
        mib(energy)
    );
    let scale = y_explicit.abs().max().double_value(&[]);
    let diff = (&y_explicit - &y_sdpa).abs().max().double_value(&[]);
    ensure!(
        diff <= 1e-3 * scale,
        "SDPA and explicit PAM differ by {diff:.3e} (max |y| {scale:.3})"
    );
    ensure!(
        (sdpa as f64) <= explicit as f64 * 1.05,
        "SDPA peak {:.0} MiB above the explicit form's {:.0} MiB",
        mib(sdpa),
        mib(explicit)
    );
    Ok(Passed(format!(
        "peak explicit {:.0} MiB, SDPA {:.0} MiB ({:.2}x), energies alone {:.0} MiB, \
         outputs within {diff:.1e}",
        mib(explicit),
        mib(sdpa),
        explicit as f64 / sdpa.max(1) as f64,
        mib(energy)
    )))
}

const DDP_STEPS: usize = 5;

/// One rank of `nccl_ddp_syncbn_matches_one_process` (this binary, re-executed by the
/// launcher), or the single-process reference when no distributed environment is set.
pub(super) fn ddp_rank(out: &Path) -> Result<()> {
    set_cuda_allow_tf32(false)?;
    let dist = DistEnv::from_env()?;
    let (rank, world, local) = dist
        .as_ref()
        .map_or((0, 1, 0), |e| (e.rank, e.world_size, e.local_rank));
    let global: usize = std::env::var("SEGTOOL_GPU_GLOBAL_BATCH")?.parse()?;
    let dev = Device::Cuda(local);
    let mut t = trainer(dev, global / world)?;
    if let Some(env) = &dist {
        let group = Arc::new(segtool_train::distributed::ProcessGroup::new(
            &env.group_options(DistBackend::Nccl, Duration::from_secs(120))
                .on_device(dev),
        )?);
        t.enable_sync_bn(group.clone());
        t.enable_ddp(Ddp::new(group, 0.02))?;
    }
    let (images, masks) = data(global as i64);
    let per = (global / world) as i64;
    let mine = (
        images.narrow(0, rank as i64 * per, per).to_device(dev),
        masks.narrow(0, rank as i64 * per, per).to_device(dev),
    );
    let mut losses = Vec::new();
    for it in 0..DDP_STEPS {
        losses.push(t.step_accumulated(&[(&mine.0, &mine.1)], it)?.loss);
    }
    let name = if dist.is_some() {
        format!("rank{rank}")
    } else {
        "single".into()
    };
    t.vs.save(out.join(format!("{name}.safetensors")))?;
    std::fs::write(
        out.join(format!("{name}.losses")),
        serde_json::to_string(&losses)?,
    )?;
    Ok(())
}

fn child(out: &Path, global: usize) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.env(CHILD_VAR, "ddp")
        .env(OUT_VAR, out)
        .env("SEGTOOL_GPU_GLOBAL_BATCH", global.to_string());
    cmd
}

pub(super) fn nccl_ddp_syncbn_matches_one_process() -> Result<Outcome> {
    let n = gate!(gpus());
    if !DistBackend::Nccl.available() {
        return Ok(Skipped(
            "this build has no NCCL (SEGTOOL_NO_NCCL=1?)".into(),
        ));
    }
    // One rank would prove nothing: at world size 1 DDP averages nothing and SyncBN is
    // plain BatchNorm.
    if n < 2 {
        return Ok(Skipped(format!(
            "needs two or more GPUs (NCCL DDP + SyncBN against one process); {n} visible"
        )));
    }
    let dir = tempfile::tempdir()?;
    let global = 2 * n;
    let launcher = Launcher::new(LaunchConfig {
        nproc_per_node: n,
        ..LaunchConfig::default()
    })?;
    launcher.run(|_env| {
        let mut cmd = child(dir.path(), global);
        for var in [
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
            "LOCAL_RANK",
        ] {
            cmd.env_remove(var);
        }
        cmd
    })?;
    let mut single = child(dir.path(), global);
    for var in [
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
    ] {
        single.env_remove(var);
    }
    let status = single.status()?;
    ensure!(
        status.success(),
        "single-process reference failed: {status}"
    );
    let read = |name: &str| -> Result<Vec<(String, Tensor)>> {
        let mut v = Tensor::read_safetensors(dir.path().join(format!("{name}.safetensors")))?;
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v.into_iter()
            .map(|(n, t)| (n, t.to_kind(Kind::Double)))
            .collect())
    };
    let reference = read("single")?;
    let rank0 = read("rank0")?;
    for r in 1..n {
        let (d, name) = max_diff(&rank0, &read(&format!("rank{r}"))?)?;
        ensure!(
            d == 0.0,
            "rank {r} diverged from rank 0 by {d:.3e} at {name}"
        );
    }
    let (d, name) = max_diff(&reference, &rank0)?;
    ensure!(
        d < 1e-4,
        "NCCL DDP + SyncBN over {n} GPU(s) differs from one process by {d:.3e} at {name}"
    );
    Ok(Passed(format!(
        "{n} rank(s) x 2 images vs 1 process x {global}: max |Δ| {d:.2e} ({name}) after \
         {DDP_STEPS} steps"
    )))
}
