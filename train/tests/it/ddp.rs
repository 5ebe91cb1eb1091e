//! Distributed data-parallel training over c10d/gloo, with 2 processes on 127.0.0.1.
//!
//! The ranks are this test binary re-executed (`--exact ddp::child`) with
//! `SEGTOOL_DDP_CHILD=<scenario>` and torchrun's variables, mostly through
//! `segtool_train::distributed::Launcher`, which also gets tested that way:
//! * collectives: all_reduce (sum, avg, max), broadcast, all_gather, barrier;
//! * equivalence: 2 ranks x batch 2 with SyncBN + DDP == 1 process x batch 4 with BN
//!   (parameters and running statistics after 5 SGD steps), also with accumulation;
//! * failure: a rank that dies makes its peer fail with an error (no hang), a hung rank
//!   makes it fail after the timeout, and the launcher reports a failing rank.

use crate::common;

// segtool-testkit's skip helper, by path (this crate does not depend on testkit).
#[path = "../../../testkit/src/skip.rs"]
#[allow(dead_code)]
mod skip;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::spec;
use rand::{Rng, SeedableRng};
use segtool_model_spec::BackboneSpec;
use segtool_train::distributed::{
    launch::RankFailed, Backend, Ddp, DistEnv, GroupOptions, LaunchConfig, Launcher, ProcessGroup,
    ReduceOp,
};
use segtool_train::{TrainConfig, Trainer};
use tch::{Kind, Tensor};

const CHILD_VAR: &str = "SEGTOOL_DDP_CHILD";
const OUT_VAR: &str = "SEGTOOL_DDP_OUT";
const ACCUM_VAR: &str = "SEGTOOL_DDP_ACCUM";
/// Set: DDP with plain per-rank BatchNorm (the control that shows SyncBN matters).
const NO_SYNC_BN_VAR: &str = "SEGTOOL_DDP_NO_SYNC_BN";
/// `LAYOUT:RANGES` (e.g. `ort-cpu:ema`): the training is QAT, fake quantisation placed
/// and calibrated on the 4 images before the ranks join.
const QAT_VAR: &str = "SEGTOOL_DDP_QAT";

/// A command re-running this binary's `child` test in `scenario`.
fn child_command(scenario: &str, out: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "ddp::child", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, scenario)
        .env(OUT_VAR, out)
        .stdout(Stdio::null());
    for var in [
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `scenario` on 2 local ranks under the launcher.
fn launch2(scenario: &str, out: &Path, extra: &[(&str, &str)]) -> Result<()> {
    let launcher = Launcher::new(LaunchConfig {
        nproc_per_node: 2,
        ..LaunchConfig::default()
    })?;
    launcher.run(|_env| {
        let mut cmd = child_command(scenario, out);
        cmd.envs(extra.iter().copied());
        cmd
    })
}

/// The entry point of the child processes; a no-op in a normal test run.
#[test]
fn child() {
    let Ok(scenario) = std::env::var(CHILD_VAR) else {
        return;
    };
    tch::set_num_threads(1);
    let out = PathBuf::from(std::env::var(OUT_VAR).unwrap());
    let result = match scenario.as_str() {
        "collectives" => collectives(),
        "train" => train(&out),
        "die" => die(),
        "hang" => hang(),
        "fail" => fail(),
        "nan" => nan_on_rank_1(),
        other => panic!("unknown scenario {other}"),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("child error: {e:#}");
            std::process::exit(3)
        }
    }
}

fn join(timeout: Duration) -> Result<(DistEnv, ProcessGroup)> {
    let env = DistEnv::from_env()?.context("no torchrun environment")?;
    let group = ProcessGroup::new(&env.group_options(Backend::Gloo, timeout))?;
    Ok((env, group))
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).reshape([-1])).unwrap()
}

fn collectives() -> Result<()> {
    let (env, group) = join(Duration::from_secs(30))?;
    ensure!(group.rank() == env.rank && group.world_size() == 2);
    let r = env.rank as f32;
    let base = || Tensor::from_slice(&[r + 1.0, 10.0 * (r + 1.0), -r]);

    let mut t = base();
    group.all_reduce(&mut t, ReduceOp::Sum)?;
    ensure!(values(&t) == [3.0, 30.0, -1.0], "sum {:?}", values(&t));
    let mut t = base();
    group.all_reduce(&mut t, ReduceOp::Avg)?;
    ensure!(values(&t) == [1.5, 15.0, -0.5], "avg {:?}", values(&t));
    let mut t = base();
    group.all_reduce(&mut t, ReduceOp::Max)?;
    ensure!(values(&t) == [2.0, 20.0, 0.0], "max {:?}", values(&t));
    let mut t = Tensor::from_slice(&[env.rank as i64 + 5, 1 << 40]);
    group.all_reduce(&mut t, ReduceOp::Sum)?;
    ensure!(
        Vec::<i64>::try_from(&t)? == [11, 2 << 40],
        "int sum {:?}",
        t
    );
    let mut t = Tensor::from_slice(&[1i64]);
    let err = group.all_reduce(&mut t, ReduceOp::Avg).unwrap_err();
    ensure!(format!("{err}").contains("floating"), "{err}");

    let mut t = Tensor::full(
        [2, 3],
        (env.rank * 7) as f64,
        (Kind::Float, tch::Device::Cpu),
    );
    group.broadcast(&mut t, 1)?;
    ensure!(values(&t).iter().all(|v| *v == 7.0), "broadcast {:?}", t);

    let t =
        Tensor::arange(6, (Kind::Float, tch::Device::Cpu)).reshape([2, 3]) + f64::from(r) * 100.0;
    let gathered = group.all_gather(&t)?;
    ensure!(gathered.len() == 2);
    for (k, g) in gathered.iter().enumerate() {
        ensure!(g.size() == [2, 3]);
        let expect: Vec<f64> = (0..6).map(|i| i as f64 + 100.0 * k as f64).collect();
        ensure!(values(g) == expect, "all_gather[{k}] {:?}", values(g));
    }
    // A non-contiguous input is made contiguous by all_gather; all_reduce refuses one.
    let mut nc = Tensor::zeros([3, 2], (Kind::Float, tch::Device::Cpu)).transpose(0, 1);
    let err = group.all_reduce(&mut nc, ReduceOp::Sum).unwrap_err();
    ensure!(format!("{err}").contains("contiguous"), "{err}");
    for _ in 0..3 {
        group.barrier()?;
    }
    Ok(())
}

/// Deterministic data (no libtorch RNG: tests share it across threads): 4 images of
/// 3 x 32 x 32 and masks of 5 classes, no ignore label.
fn data() -> (Tensor, Tensor) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let n = 4 * 3 * 32 * 32;
    let images: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let masks: Vec<i64> = (0..4 * 32 * 32).map(|_| rng.gen_range(0..5)).collect();
    (
        Tensor::from_slice(&images).reshape([4, 3, 32, 32]),
        Tensor::from_slice(&masks).reshape([4, 32, 32]),
    )
}

const STEPS: usize = 5;

/// 5 SGD steps on the 4 images: as one process (batch 4, or accumulation 2 x 2), or
/// as rank r of 2 (SyncBN + DDP) on its share of each (micro-)batch. Writes the
/// variables and the losses to `out`.
fn train(out: &Path) -> Result<()> {
    let accum: usize = std::env::var(ACCUM_VAR)
        .ok()
        .map_or(1, |a| a.parse().unwrap());
    let dist = DistEnv::from_env()?;
    let (rank, world) = dist.as_ref().map_or((0, 1), |e| (e.rank, e.world_size));
    let cfg = TrainConfig {
        iterations: 20,
        batch_size: 4 / accum / world,
        lr: 0.01,
        accumulation: accum,
        progress: false,
        seed: 3,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec(BackboneSpec::tiny(), 5), cfg)?;
    // Dropout masks depend on the batch layout; the equivalence is about everything else.
    trainer.model.head.dropout = false;
    let (images, masks) = data();
    if let Ok(qat) = std::env::var(QAT_VAR) {
        start_qat(&mut trainer, &qat, &images)?;
    }
    if let Some(env) = &dist {
        let group = Arc::new(ProcessGroup::new(
            &env.group_options(Backend::Gloo, Duration::from_secs(60)),
        )?);
        if std::env::var_os(NO_SYNC_BN_VAR).is_none() {
            trainer.enable_sync_bn(group.clone());
        }
        // Small buckets: the tiny model's gradients travel in several.
        trainer.enable_ddp(Ddp::new(group, 0.02))?;
    }
    // Micro-batch k of the single process is images [k*4/accum, (k+1)*4/accum); rank r
    // takes the r-th contiguous part of it.
    let micro = 4 / accum;
    let per_rank = micro / world;
    let mut losses = Vec::new();
    for it in 0..STEPS {
        let batches: Vec<(Tensor, Tensor)> = (0..accum)
            .map(|k| {
                let start = (k * micro + rank * per_rank) as i64;
                (
                    images.narrow(0, start, per_rank as i64),
                    masks.narrow(0, start, per_rank as i64),
                )
            })
            .collect();
        let refs: Vec<(&Tensor, &Tensor)> = batches.iter().map(|(i, m)| (i, m)).collect();
        losses.push(trainer.step_accumulated(&refs, it)?.loss);
    }
    let name = if dist.is_some() {
        format!("rank{rank}")
    } else {
        "single".to_string()
    };
    trainer.vs.save(out.join(format!("{name}.safetensors")))?;
    std::fs::write(
        out.join(format!("{name}.losses")),
        serde_json::to_string(&losses)?,
    )?;
    Ok(())
}

/// QAT (`layout:ranges`) on `trainer`'s model, ranges calibrated on `images` (every rank
/// the same), BatchNorm frozen from step 3.
fn start_qat(trainer: &mut Trainer, qat: &str, images: &Tensor) -> Result<()> {
    use segtool_calibration::qdq::{Layout, WeightRange};
    use segtool_train::qat::{FakeQuant, QatOptions, RangeLearning};
    use tch::nn::ModuleT;
    let (layout, ranges) = qat.split_once(':').context("LAYOUT:RANGES")?;
    let options = QatOptions {
        layout: Layout::from_name(layout).context("layout")?,
        ranges: RangeLearning::from_name(ranges).context("ranges")?,
        weight_range: WeightRange::Full,
        freeze_bn_at: Some(3),
        ..QatOptions::default()
    };
    let fq = Arc::new(FakeQuant::new(&trainer.vs, &trainer.model.spec, options)?);
    trainer.model.set_qat(Some(fq.clone()));
    let model = &trainer.model;
    fq.calibrate(std::slice::from_ref(images), |x| {
        let _ = model.forward_t(x, false);
    })?;
    trainer.enable_qat(fq);
    Ok(())
}

/// DDP training where rank 1's batch turns NaN at step 2 (rank 0's stays finite).
fn nan_on_rank_1() -> Result<()> {
    let env = DistEnv::from_env()?.context("no torchrun environment")?;
    let cfg = TrainConfig {
        iterations: 10,
        batch_size: 2,
        lr: 0.01,
        progress: false,
        seed: 3,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec(BackboneSpec::tiny(), 5), cfg)?;
    // A timeout far above the test's bound: a rank left waiting would show as slow.
    let group = ProcessGroup::new(&env.group_options(Backend::Gloo, Duration::from_secs(60)))?;
    trainer.enable_ddp(Ddp::new(Arc::new(group), 0.02))?;
    let (images, masks) = data();
    let (images, masks) = (images.narrow(0, 0, 2), masks.narrow(0, 0, 2));
    for it in 0..4 {
        let x = if env.rank == 1 && it == 2 {
            images.full_like(f64::NAN)
        } else {
            images.shallow_clone()
        };
        trainer.step(&x, &masks, it)?;
    }
    Ok(())
}

/// Rank 1 dies abruptly after a few collectives; rank 0 keeps all-reducing.
fn die() -> Result<()> {
    let (env, group) = join(Duration::from_secs(20))?;
    let mut t = Tensor::ones([1000], (Kind::Float, tch::Device::Cpu));
    for i in 0..100_000 {
        if env.rank == 1 && i == 5 {
            std::process::abort();
        }
        group.all_reduce(&mut t, ReduceOp::Avg)?;
    }
    anyhow::bail!(
        "rank {} finished 100000 all-reduces with a dead peer",
        env.rank
    )
}

/// Rank 1 stops taking part (alive, silent); rank 0 must time out.
fn hang() -> Result<()> {
    let (env, group) = join(Duration::from_secs(3))?;
    let mut t = Tensor::ones([10], (Kind::Float, tch::Device::Cpu));
    group.all_reduce(&mut t, ReduceOp::Sum)?;
    if env.rank == 1 {
        std::thread::sleep(Duration::from_secs(60));
        return Ok(());
    }
    group.all_reduce(&mut t, ReduceOp::Sum)?;
    anyhow::bail!("rank 0's all_reduce completed without rank 1")
}

/// Rank 1 fails with a message; rank 0 would run for a minute.
fn fail() -> Result<()> {
    let env = DistEnv::from_env()?.context("no torchrun environment")?;
    if env.rank == 1 {
        eprintln!("rank 1 is about to fail: boom");
        std::process::exit(7);
    }
    std::thread::sleep(Duration::from_secs(60));
    Ok(())
}

fn read_vars(path: &Path) -> Vec<(String, Tensor)> {
    let mut vars = Tensor::read_safetensors(path).unwrap();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> (f64, String) {
    assert_eq!(a.len(), b.len());
    let mut worst = (0.0, String::new());
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        let d = (ta - tb).abs().max().double_value(&[]);
        if d > worst.0 {
            worst = (d, na.clone());
        }
    }
    worst
}

/// `train` on 2 ranks (DDP + SyncBN) and in one process, with `accum` micro-batches and
/// the `extra` scenario variables: the ranks end identical, and within `tolerance` of the
/// single process (weights, statistics, QAT thresholds; the losses too).
fn equivalence(accum: usize, extra: &[(&str, &str)], tolerance: f64) {
    let dir = tempfile::tempdir().unwrap();
    let accum_s = accum.to_string();
    let mut vars = vec![(ACCUM_VAR, accum_s.as_str())];
    vars.extend_from_slice(extra);
    launch2("train", dir.path(), &vars).unwrap();
    let status = child_command("train", dir.path())
        .envs(vars.iter().copied())
        .status()
        .unwrap();
    assert!(status.success(), "single-process reference: {status}");

    let single = read_vars(&dir.path().join("single.safetensors"));
    let rank0 = read_vars(&dir.path().join("rank0.safetensors"));
    let rank1 = read_vars(&dir.path().join("rank1.safetensors"));
    let initial = {
        // How far training moved the weights, to show the comparison is not vacuous.
        let mut moved = 0.0f64;
        for (_, t) in &single {
            moved = moved.max(t.abs().max().double_value(&[]));
        }
        moved
    };
    let (d01, n01) = max_diff(&rank0, &rank1);
    let (d, n) = max_diff(&single, &rank0);
    let losses = |name: &str| -> Vec<f64> {
        serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(format!("{name}.losses"))).unwrap(),
        )
        .unwrap()
    };
    let (ls, l0, l1) = (losses("single"), losses("rank0"), losses("rank1"));
    eprintln!(
        "accumulation {accum} {extra:?}: max |single - rank0| = {d:.3e} ({n}), max |rank0 - \
         rank1| = {d01:.3e} ({n01}), max |w| {initial:.3}\n  losses single {ls:?}\n  \
         losses rank0 {l0:?}"
    );
    assert_eq!(d01, 0.0, "ranks diverged at {n01}");
    assert!(
        d < tolerance,
        "DDP+SyncBN differs from one process by {d} at {n}"
    );
    assert_eq!(l0, l1, "the logged loss is the mean over ranks");
    for (a, b) in ls.iter().zip(&l0) {
        assert!((a - b).abs() < tolerance, "losses {ls:?} vs {l0:?}");
    }
    assert!(ls[STEPS - 1] < ls[0], "training moved: {ls:?}");
}

/// Without SyncBN the same run is measurably different: the equivalence above is not
/// vacuous.
#[test]
fn two_ranks_plain_bn_differ_from_one_process() {
    let dir = tempfile::tempdir().unwrap();
    launch2("train", dir.path(), &[(NO_SYNC_BN_VAR, "1")]).unwrap();
    assert!(child_command("train", dir.path())
        .status()
        .unwrap()
        .success());
    let single = read_vars(&dir.path().join("single.safetensors"));
    let rank0 = read_vars(&dir.path().join("rank0.safetensors"));
    let (d, n) = max_diff(&single, &rank0);
    eprintln!("plain BN: max |single - rank0| = {d:.3e} ({n})");
    assert!(d > 1e-4, "plain BN per rank matched one process: {d}");
}

#[test]
fn collectives_on_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    launch2("collectives", dir.path(), &[]).unwrap();
}

/// Float training: 2 ranks and one process agree to float summation order.
const FLOAT_TOLERANCE: f64 = 1e-5;

#[test]
fn two_ranks_syncbn_equal_one_process() {
    equivalence(1, &[], FLOAT_TOLERANCE);
}

#[test]
fn two_ranks_syncbn_equal_one_process_with_accumulation() {
    equivalence(2, &[], FLOAT_TOLERANCE);
}

/// QAT: the same, as long as no value sits at a rounding tie that the two summation
/// orders resolve differently (then one quantisation step of one value differs; none did
/// on these 5 steps).
const QAT_TOLERANCE: f64 = 1e-5;

#[test]
fn two_ranks_qat_equal_one_process() {
    for qat in ["ort-cpu:ema", "portable:lsq"] {
        equivalence(1, &[(QAT_VAR, qat)], QAT_TOLERANCE);
    }
}

/// Runs `scenario` on 2 ranks without the launcher; returns (rank 0's exit code, its
/// stderr, seconds until it exited).
fn run_without_launcher(scenario: &str) -> (Option<i32>, String, f64) {
    let dir = tempfile::tempdir().unwrap();
    let port = segtool_train::distributed::launch::free_port()
        .unwrap()
        .to_string();
    let spawn = |rank: usize| {
        child_command(scenario, dir.path())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("WORLD_SIZE", "2")
            .env("RANK", rank.to_string())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let start = Instant::now();
    let rank0 = spawn(0);
    let mut rank1 = spawn(1);
    // wait_with_output reads stderr while waiting; the test's own timeout is the
    // watchdog (a hang here is the failure this test exists for).
    let out = rank0.wait_with_output().unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    let _ = rank1.kill();
    let _ = rank1.wait();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed,
    )
}

#[test]
fn dead_rank_fails_its_peer() {
    let (code, stderr, secs) = run_without_launcher("die");
    eprintln!("rank 0 exited with {code:?} after {secs:.1} s:\n{stderr}");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("child error: all_reduce"), "{stderr}");
    assert!(secs < 30.0, "took {secs} s");
}

/// A NaN loss on one rank stops every rank at that step with the NaN error: rank 0, whose
/// own loss is finite, learns it from the averaged loss instead of waiting in the gradient
/// all-reduce for the (60 s) timeout.
#[test]
fn nan_loss_on_one_rank_stops_every_rank_together() {
    let (code, stderr, secs) = run_without_launcher("nan");
    eprintln!("rank 0 exited with {code:?} after {secs:.1} s:\n{stderr}");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("loss became NaN at iteration 2"),
        "{stderr}"
    );
    assert!(secs < 30.0, "took {secs} s");
}

#[test]
fn hung_rank_times_out() {
    let (code, stderr, secs) = run_without_launcher("hang");
    eprintln!("rank 0 exited with {code:?} after {secs:.1} s:\n{stderr}");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("child error: all_reduce"), "{stderr}");
    assert!(secs < 30.0, "took {secs} s");
}

#[test]
fn launcher_reports_the_failing_rank() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let err = launch2("fail", dir.path(), &[]).unwrap_err();
    let secs = start.elapsed().as_secs_f64();
    let failed = err
        .downcast_ref::<RankFailed>()
        .expect("a RankFailed error");
    eprintln!("{err:#} ({secs:.1} s)");
    assert_eq!(failed.rank, 1);
    assert_eq!(failed.status.code(), Some(7));
    assert!(
        failed.stderr_tail.iter().any(|l| l.contains("boom")),
        "{:?}",
        failed.stderr_tail
    );
    assert!(format!("{err}").contains("boom"));
    assert!(secs < 30.0, "rank 0 was not stopped: {secs} s");
}

/// NCCL is built in by default: without a GPU the error names the missing device (before
/// any rendezvous: port 1 is never contacted); a build without NCCL says so instead.
#[test]
fn nccl_without_nccl_or_gpu_is_a_clear_error() {
    if tch::Cuda::device_count() > 0 && Backend::Nccl.available() {
        return skip::skipped("a GPU and NCCL are present: `make test-gpu` checks NCCL");
    }
    let err = ProcessGroup::new(&GroupOptions {
        master_addr: "127.0.0.1".into(),
        master_port: 1,
        world_size: 1,
        rank: 0,
        timeout: Duration::from_secs(1),
        backend: Backend::Nccl,
        device: tch::Device::Cuda(0),
    })
    .unwrap_err();
    let expected = if Backend::Nccl.available() {
        "no CUDA device"
    } else {
        "no NCCL"
    };
    assert!(format!("{err}").contains(expected), "{err}");
}

#[test]
fn single_rank_group_works_alone() {
    let port = segtool_train::distributed::launch::free_port().unwrap();
    let group = ProcessGroup::new(&GroupOptions {
        master_addr: "127.0.0.1".into(),
        master_port: port,
        world_size: 1,
        rank: 0,
        timeout: Duration::from_secs(10),
        backend: Backend::Gloo,
        device: tch::Device::Cpu,
    })
    .unwrap();
    let mut t = Tensor::from_slice(&[1.0f32, 2.0]);
    group.all_reduce(&mut t, ReduceOp::Avg).unwrap();
    assert_eq!(values(&t), [1.0, 2.0]);
    group.barrier().unwrap();
}
