//! `segtool train`: a run configured by a preset or TOML file plus `--set` overrides,
//! into a run directory (checkpoints, resolved config, metrics.jsonl, curves), resumable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use segtool_core::config::{EvalMode, RunConfig};
use segtool_core::dataset::SegDataset;
use segtool_core::{BackboneSpec, ModelSpec};
use segtool_train::data::Augment;
use segtool_train::eval::{evaluate_with, EvalOptions};
use segtool_train::ohem::Ohem;
use segtool_train::run::{self, RunOptions, RunState, ValScore, CONFIG_KEY};
use segtool_train::{Checkpoint, DaNet, TrainConfig, Trainer};

use super::{dataset_classes, open_dataset, ShapesArgs};

#[derive(clap::Args)]
pub struct Args {
    /// A shipped preset (cityscapes-danet-r101, ade20k-danet-r101, voc-danet-r101,
    /// shapes-tiny) or a TOML file. Default: shapes-tiny.
    #[arg(long, value_name = "NAME|FILE")]
    pub config: Option<String>,
    /// Override one key of the configuration, e.g. `--set optim.lr=0.01` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Continue a run from its checkpoint (or run directory: its last.safetensors), with
    /// the configuration stored in it; `--set` still applies on top.
    #[arg(long, value_name = "CHECKPOINT|DIR")]
    pub resume: Option<PathBuf>,
    /// Stop with a checkpoint after this many iterations (the schedule still spans all).
    #[arg(long, value_name = "N")]
    pub stop_at: Option<usize>,
    /// Print the resolved configuration (TOML, to stdout) and the batch geometry, and
    /// exit; opens no dataset.
    #[arg(long)]
    pub print_config: bool,
    /// cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// libtorch intra-op threads (0: libtorch's default, one per core). Default: on
    /// --resume the count the checkpoint was trained with (resume is bit for bit only at
    /// the same count), else libtorch's.
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..))]
    pub threads: Option<i32>,
    #[command(flatten)]
    pub dist: DistArgs,
}

/// dist: data-parallel training, torchrun-compatible. A process started by torchrun (or
/// by `--nproc-per-node`) finds its rank in MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
/// LOCAL_RANK, LOCAL_WORLD_SIZE; one started by Slurm's srun in SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID, ... (see `segtool_train::dist::DistEnv`).
#[derive(clap::Args)]
pub struct DistArgs {
    /// Spawn and supervise this many training processes on this node (torchrun's
    /// --nproc-per-node); with 1 (and --nnodes 1), train in this process.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub nproc_per_node: usize,
    /// Nodes in the job.
    #[arg(long, default_value_t = 1, value_name = "M")]
    pub nnodes: usize,
    /// This node's index, 0..nnodes.
    #[arg(long, default_value_t = 0, value_name = "R")]
    pub node_rank: usize,
    /// Address of rank 0's node (hosts the rendezvous store).
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub master_addr: String,
    /// Rendezvous port (default: a free port on one node, 29500 on several).
    #[arg(long, value_name = "PORT")]
    pub master_port: Option<u16>,
    /// Collective backend: gloo (CPU) or nccl (CUDA; only in builds with NCCL).
    #[arg(long, default_value = "gloo")]
    pub dist_backend: String,
    /// Seconds a rendezvous or collective may take before the rank fails.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub dist_timeout: u64,
    /// Gradient all-reduce bucket size in MiB (PyTorch DDP's bucket_cap_mb).
    #[arg(long, default_value_t = segtool_train::dist::DEFAULT_BUCKET_MB, value_name = "MB")]
    pub bucket_mb: f64,
}

/// The launcher's own flags (with their values), removed from the children's arguments.
const LAUNCH_FLAGS: [&str; 5] = [
    "--nproc-per-node",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
];

/// dist: `--nproc-per-node N` spawns N `segtool train` processes with the same arguments
/// (less the launcher's) and torchrun's environment, and supervises them.
fn launch(args: &Args) -> Result<()> {
    use segtool_train::dist::{DistEnv, EnvSource, LaunchConfig, Launcher};
    let d = &args.dist;
    if let Some(env) = DistEnv::from_env()? {
        let vars = match env.source {
            EnvSource::Torchrun => "RANK/WORLD_SIZE are set",
            EnvSource::Slurm => "SLURM_PROCID/SLURM_NTASKS say this is one of several srun tasks",
        };
        bail!("--nproc-per-node/--nnodes inside a distributed job ({vars}): drop them");
    }
    let launcher = Launcher::new(LaunchConfig {
        nproc_per_node: d.nproc_per_node,
        nnodes: d.nnodes,
        node_rank: d.node_rank,
        master_addr: d.master_addr.clone(),
        master_port: d.master_port,
        ..LaunchConfig::default()
    })?;
    let exe = std::env::current_exe().context("locating the segtool binary")?;
    let mut child_args = Vec::new();
    let mut raw = std::env::args_os().skip(1);
    while let Some(arg) = raw.next() {
        let text = arg.to_string_lossy();
        if LAUNCH_FLAGS.contains(&text.as_ref()) {
            raw.next(); // its value
        } else if !LAUNCH_FLAGS
            .iter()
            .any(|f| text.starts_with(&format!("{f}=")))
        {
            child_args.push(arg);
        }
    }
    // As torchrun: N processes share the cores instead of each taking all of them.
    let threads = std::env::var("OMP_NUM_THREADS").unwrap_or_else(|_| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / d.nproc_per_node).max(1).to_string()
    });
    eprintln!(
        "launching {} process(es) on node {} of {}",
        d.nproc_per_node, d.node_rank, d.nnodes
    );
    launcher.run(|_env| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(&child_args).env("OMP_NUM_THREADS", &threads);
        cmd
    })
}

pub fn run(args: Args) -> Result<()> {
    if args.dist.nproc_per_node > 1 || args.dist.nnodes > 1 {
        return launch(&args);
    }
    let (mut cfg, resume) = resolve_config(&args)?;
    if args.print_config {
        return print_config(&cfg);
    }
    // dist: the world is what torchrun's (or Slurm's) variables say (one process without
    // them); say so rather than silently training with a different global batch than
    // configured.
    let dist_env = segtool_train::dist::DistEnv::from_env()?;
    let world = dist_env.as_ref().map_or(1, |e| e.world_size);
    let rank = dist_env.as_ref().map_or(0, |e| e.rank);
    if let Some(env) = &dist_env {
        eprintln!(
            "rank {} of {} (from {}), local rank {} of {}, rendezvous {}:{}",
            env.rank,
            env.world_size,
            env.source,
            env.local_rank,
            env.local_world_size,
            env.master_addr,
            env.master_port
        );
    }
    set_threads(&args, resume.as_ref(), rank == 0);
    let resume_from = resume.map(|r| r.path);
    if cfg.optim.world_size != world {
        if rank == 0 {
            eprintln!(
                "note: optim.world_size = {} but this run has {world} process(es); \
                 the global batch below is for {world}",
                cfg.optim.world_size
            );
        }
        cfg.optim.world_size = world;
    }
    cfg.validate()?;

    let shapes = shapes_args(&cfg);
    let (classes, palette) = dataset_classes(&cfg.data.dataset)?;
    let train_set: Arc<dyn SegDataset> =
        open_dataset(&cfg.data.dataset, &cfg.data.train_split, &shapes)?.into();
    let total = cfg.total_iterations(train_set.len()) as usize;
    if total == 0 {
        bail!(
            "no iterations to run: {} training images, global batch {}",
            train_set.len(),
            cfg.global_batch()
        );
    }
    if rank == 0 {
        eprintln!("{}", cfg.summary(Some(train_set.len())));
    }
    let val_set = match cfg.data.val_split.as_str() {
        "" => None,
        split => Some(
            open_dataset(&cfg.data.dataset, split, &shapes).with_context(|| {
                format!("validation split {split:?} (set data.val_split=\"\" to train without one)")
            })?,
        ),
    };

    let spec = model_spec(&cfg, classes, palette)?;
    let device = match &dist_env {
        // One GPU per local rank, as torch.cuda.set_device(local_rank).
        Some(env) if args.device == "cuda" => local_cuda_device(env.local_rank)?,
        _ => parse_device(&args.device)?,
    };
    let mut train_cfg = train_config(&cfg, total, device);
    train_cfg.progress = rank == 0;
    // amp: optim.precision (or optim.amp = true, fp16); fp16 is refused off CUDA here,
    // before any data is read.
    let amp = match cfg.optim.effective_precision() {
        segtool_core::config::Precision::Fp32 => None,
        p => Some(segtool_train::amp::Amp::new(p, device)?),
    };
    let mut trainer = Trainer::new(&spec, train_cfg)?;
    let run_dir = cfg.run_dir();
    let state = match &resume_from {
        Some(path) => {
            let checkpoint = Checkpoint::read(path)?;
            let state = run::resume(&mut trainer, &checkpoint, path)?;
            eprintln!(
                "resuming {} at iteration {}",
                path.display(),
                state.iteration
            );
            state
        }
        None => {
            if let Some(init) = &cfg.model.init {
                init_weights(&mut trainer, Path::new(init))?;
            }
            RunState::default()
        }
    };

    // dist: join the process group, rank 0's weights everywhere, SyncBN, DDP.
    let _sync_bn = match &dist_env {
        Some(env) => {
            use segtool_train::dist::{sync_bn, Backend, Ddp, ProcessGroup};
            let backend: Backend = args.dist.dist_backend.parse()?;
            if backend == Backend::Gloo && device != tch::Device::Cpu {
                bail!(
                    "the gloo backend trains on the CPU: use --device cpu (or --dist-backend nccl)"
                );
            }
            let timeout = std::time::Duration::from_secs(args.dist.dist_timeout.max(1));
            let group = std::sync::Arc::new(
                ProcessGroup::new(&env.group_options(backend, timeout))
                    .with_context(|| format!("rank {} joining the process group", env.rank))?,
            );
            let guard = cfg.optim.sync_bn.then(|| sync_bn::install(group.clone()));
            trainer.enable_ddp(Ddp::new(group, args.dist.bucket_mb))?;
            guard
        }
        None => None,
    };

    let opts = RunOptions {
        rank,
        world_size: world,
        checkpoint_every: cfg.checkpoint.every as usize,
        keep: cfg.checkpoint.keep,
        eval_every: cfg.eval.every as usize,
        log_every: cfg.log.every as usize,
        plot_every: cfg.log.plot_every as usize,
        tensorboard: cfg.log.tensorboard,
        workers: cfg.data.workers,
        prefetch: cfg.data.prefetch,
        config_text: cfg.to_toml_string(),
        stop_at: args.stop_at,
        ..RunOptions::new(&run_dir)
    };
    if let Some(mut amp) = amp {
        // Skipped steps (fp16 loss scaling) go to metrics.jsonl as "amp_skip" records.
        if rank == 0 {
            amp.log = Some(opts.out_dir.join("metrics.jsonl"));
        }
        trainer.enable_amp(amp);
        // The checkpoint's loss scale and skip count (read above, before AMP existed).
        run::restore_amp(&mut trainer, &state);
    }
    let eval_opts = eval_options(&cfg);
    let mut validate = |model: &DaNet| -> Result<ValScore> {
        let val = val_set
            .as_deref()
            .expect("validation only runs with a val split");
        let mut kept = Vec::new();
        let result = evaluate_with(model, val, &eval_opts, device, None, |i, labels| {
            segtool_train::telemetry::keep_prediction(&mut kept, i, labels)
        })?;
        // dist: every rank evaluates the whole split (same result); rank 0 reports.
        if rank == 0 {
            eprintln!(
                "  val mIoU {:.2}  pixel acc {:.2}",
                result.mean_iou() * 100.0,
                result.pixel_accuracy() * 100.0
            );
        }
        ValScore::from_eval(&result, model, val, &kept)
    };
    let validate: Option<&mut dyn FnMut(&DaNet) -> Result<ValScore>> =
        val_set.is_some().then_some(&mut validate as _);
    let state = run::run(&mut trainer, train_set, validate, &opts, state)?;
    if rank != 0 {
        return Ok(());
    }

    if let Some(amp) = &trainer.amp {
        match amp.scaler() {
            Some(scaler) => println!(
                "{}: {} step(s) skipped for inf/NaN gradients, loss scale {}",
                amp.precision().name(),
                amp.skipped_steps,
                scaler.scale()
            ),
            None => println!("trained with {} autocast", amp.precision().name()),
        }
    }
    println!("wrote {}", opts.last_path().display());
    if let (Some(miou), Some(it)) = (state.best_miou, state.best_iteration) {
        println!(
            "best val mIoU {:.2} at iteration {it}: {}",
            miou * 100.0,
            opts.best_path().display()
        );
    }
    Ok(())
}

/// `--print-config`: the resolved configuration (stdout) and its batch geometry
/// (stderr), as configured; no dataset is opened.
fn print_config(cfg: &RunConfig) -> Result<()> {
    cfg.validate()?;
    eprintln!("{}", cfg.summary(None));
    let o = &cfg.optim;
    let world = segtool_train::dist::DistEnv::from_env()
        .ok()
        .flatten()
        .map_or(1, |e| e.world_size);
    if world != o.world_size {
        eprintln!(
            "note: optim.world_size = {} but a run started like this one has {world} \
             process(es) and would train with a global batch of {}",
            o.world_size,
            o.batch_size * world * o.accumulation
        );
    }
    print!("{}", cfg.to_toml_string());
    Ok(())
}

/// The checkpoint a run resumes from.
struct Resume {
    path: PathBuf,
    /// The libtorch thread count it was trained with, when it records one.
    threads: Option<i32>,
}

/// libtorch's intra-op thread count: `--threads`, else on resume the checkpoint's, else
/// libtorch's default. Says so (on rank 0) when a resume cannot be bit for bit.
fn set_threads(args: &Args, resume: Option<&Resume>, report: bool) {
    use segtool_train::run::{choose_threads, ThreadSource};
    let recorded = resume.and_then(|r| r.threads);
    let choice = choose_threads(args.threads, recorded, tch::get_num_threads());
    if choice.source != ThreadSource::Default && choice.threads != tch::get_num_threads() {
        tch::set_num_threads(choice.threads);
    }
    let (Some(resume), true) = (resume, report) else {
        return;
    };
    let path = resume.path.display();
    match (choice.source, choice.recorded) {
        (ThreadSource::Checkpoint, _) => eprintln!(
            "{} libtorch thread(s), as {path} was trained with (--threads to change)",
            choice.threads
        ),
        (_, Some(recorded)) if choice.differs_from_checkpoint => eprintln!(
            "note: {path} was trained with {recorded} libtorch thread(s) and this run uses \
             {}: fp32 reductions split differently, so the resumed run will no longer \
             repeat the uninterrupted run bit for bit",
            choice.threads
        ),
        (_, Some(_)) => {}
        (_, None) => eprintln!(
            "note: {path} does not record the libtorch thread count it was trained with; \
             using {}: the resumed run repeats the uninterrupted one bit for bit only if \
             that is the same count (--threads N to choose)",
            choice.threads
        ),
    }
}

/// The configuration and, when resuming, the checkpoint to resume from.
fn resolve_config(args: &Args) -> Result<(RunConfig, Option<Resume>)> {
    let (mut cfg, resume) = match &args.resume {
        Some(path) => {
            if args.config.is_some() {
                bail!("--resume uses the configuration stored in the checkpoint; drop --config (use --set to change a key)");
            }
            let path = if path.is_dir() {
                path.join("last.safetensors")
            } else {
                path.clone()
            };
            let checkpoint = Checkpoint::read(&path)?;
            let text = checkpoint.info.get(CONFIG_KEY).with_context(|| {
                format!(
                    "{} has no stored run configuration: not a resumable checkpoint",
                    path.display()
                )
            })?;
            let mut cfg = RunConfig::from_toml_str(text)
                .with_context(|| format!("configuration stored in {}", path.display()))?;
            let threads = run::recorded_threads(&checkpoint.info)
                .with_context(|| path.display().to_string())?;
            // The run continues where its checkpoint is, wherever the run was started.
            cfg.out_dir = path.parent().map(Path::to_path_buf);
            (cfg, Some(Resume { path, threads }))
        }
        None => {
            let name = args.config.as_deref().unwrap_or("shapes-tiny");
            (RunConfig::preset_or_file(name)?, None)
        }
    };
    cfg.apply_overrides(&args.overrides)?;
    Ok((cfg, resume))
}

fn shapes_args(cfg: &RunConfig) -> ShapesArgs {
    ShapesArgs {
        size: cfg.data.shapes_size,
        seed: cfg.seed,
        train_count: cfg.data.shapes_train_count,
        val_count: cfg.data.shapes_val_count,
    }
}

fn model_spec(
    cfg: &RunConfig,
    classes: Vec<String>,
    palette: Option<Vec<[u8; 3]>>,
) -> Result<ModelSpec> {
    let backbone: BackboneSpec = cfg.backbone_spec()?;
    let mut spec = ModelSpec::new(&cfg.model.backbone, backbone, classes);
    if let Some(p) = palette {
        spec.palette = p;
    }
    spec.validate()?;
    Ok(spec)
}

fn train_config(cfg: &RunConfig, iterations: usize, device: tch::Device) -> TrainConfig {
    let (o, a) = (&cfg.optim, &cfg.augment);
    TrainConfig {
        iterations,
        batch_size: o.batch_size,
        lr: cfg.effective_lr(),
        head_lr_mult: o.head_lr_mult,
        momentum: o.momentum,
        weight_decay: o.weight_decay,
        nesterov: o.nesterov,
        poly_power: o.poly_power,
        warmup_iters: o.warmup_iters as usize,
        warmup_ratio: o.warmup_ratio,
        loss_weights: o.loss_weights,
        ohem: o.ohem.then_some(Ohem {
            thresh: o.ohem_thresh,
            min_kept: o.ohem_min_kept as usize,
        }),
        accumulation: o.accumulation,
        grad_clip_norm: o.grad_clip_norm,
        augment: Augment {
            flip: a.flip,
            scale: a.scale_range.map(|[lo, hi]| (lo, hi)),
            base_size: a.base_size,
            crop: a.crop_size,
            color_jitter: a.color_jitter,
            blur_prob: a.blur_prob,
            blur_sigma: (a.blur_sigma[0], a.blur_sigma[1]),
        },
        seed: cfg.seed,
        device,
        progress: true,
        attention: cfg.model.attention,
        freeze_bn: false,
    }
}

fn eval_options(cfg: &RunConfig) -> EvalOptions {
    let e = &cfg.eval;
    let base = EvalOptions::new()
        .protocol(e.protocol)
        .base_size(e.base_size.map(|b| b as usize))
        .flip(e.flip)
        .scales(e.scales.clone())
        .batch_size(e.batch_size)
        .progress(false);
    match (e.mode, e.crop_size, e.stride) {
        (EvalMode::Sliding, Some(crop), Some(stride)) => base.sliding(crop as i64, stride as i64),
        _ => base.whole(),
    }
}

/// Pretrained weights: torchvision ResNet names set the backbone only, DANet names the
/// whole model (see `segtool import`).
fn init_weights(trainer: &mut Trainer, path: &Path) -> Result<()> {
    let state = super::import::read(path)?;
    let mode = segtool_train::import::ImportMode::detect(&state);
    super::import::import(&mut trainer.vs, state, path, mode, false)?;
    Ok(())
}

pub fn parse_device(s: &str) -> Result<tch::Device> {
    match s {
        "cpu" => Ok(tch::Device::Cpu),
        "cuda" => cuda_device(0),
        other => match other.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(n)) => cuda_device(n),
            _ => bail!("unknown device {other:?} (cpu, cuda, cuda:N)"),
        },
    }
}

/// `--device cuda` in a distributed run: the local rank's GPU, or the only one visible
/// (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank).
fn local_cuda_device(local_rank: usize) -> Result<tch::Device> {
    if !tch::Cuda::is_available() {
        bail!("device cuda requested but libtorch sees no CUDA GPU (use --device cpu)");
    }
    match tch::Cuda::device_count() as usize {
        1 => Ok(tch::Device::Cuda(0)),
        n if local_rank < n => Ok(tch::Device::Cuda(local_rank)),
        n => bail!(
            "local rank {local_rank} needs its own GPU but only {n} are visible \
             (one per task: srun --gpus-per-task=1, or fewer tasks per node)"
        ),
    }
}

fn cuda_device(n: usize) -> Result<tch::Device> {
    if !tch::Cuda::is_available() {
        bail!("device cuda:{n} requested but libtorch sees no CUDA GPU (use --device cpu)");
    }
    if n >= tch::Cuda::device_count() as usize {
        bail!(
            "cuda:{n} requested but only {} GPU(s) visible",
            tch::Cuda::device_count()
        );
    }
    Ok(tch::Device::Cuda(n))
}

pub fn backbone_spec(name: &str, output_stride: i64) -> Result<BackboneSpec> {
    if name == "tiny" {
        return Ok(BackboneSpec {
            output_stride,
            ..BackboneSpec::tiny()
        });
    }
    let depth = name.strip_prefix("resnet").and_then(|d| d.parse().ok());
    match depth.and_then(|d| BackboneSpec::resnet(d, output_stride)) {
        Some(spec) => Ok(spec),
        None => bail!("unknown backbone {name:?} (tiny, resnet18/34/50/101/152)"),
    }
}

/// `<stem>.loss.png` (raw and smoothed) and `<stem>.loss.csv`.
pub fn write_loss_curve(stem: &Path, losses: &[(usize, f64)]) -> Result<()> {
    use segtool_core::plot::{LineChart, Series, COLOURS};
    let points: Vec<(f64, f64)> = losses.iter().map(|&(i, l)| (i as f64, l)).collect();
    let smooth = segtool_core::visual::smooth(&points, 25);
    let run = stem
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("run");
    let chart = LineChart {
        title: format!("{run}: training loss"),
        x_label: "iteration".into(),
        y_label: "loss (cross-entropy, 3 outputs)".into(),
        series: vec![
            Series::new("per iteration", points, COLOURS[0]).faint(),
            Series::new("mean of 25", smooth, COLOURS[0]),
        ],
        y_from_zero: true,
        y_range: None,
    };
    segtool_train::metrics_log::write_chart(&stem.with_extension("loss.png"), &chart)?;
    let csv: String = std::iter::once("iteration,loss\n".to_string())
        .chain(losses.iter().map(|(i, l)| format!("{i},{l}\n")))
        .collect();
    let csv_path = stem.with_extension("loss.csv");
    segtool_core::io::write_atomic(&csv_path, csv.as_bytes())
        .with_context(|| format!("writing {}", csv_path.display()))
}
