//! `segtool train`: a run configured by a preset or TOML file plus `--set` overrides,
//! into a run directory (checkpoints, resolved config, metrics.jsonl, curves), resumable.
//! The run itself is `segtool_train::Run`; this module parses flags and prints.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use segtool_train::distributed::{DistEnv, LaunchConfig, SelfLaunch};
use segtool_train::session::{config_notes, resolve_config};

use crate::args::progress::Bar;
use crate::args::DeviceArgs;

#[derive(clap::Args)]
pub struct Args {
    /// A shipped preset (cityscapes-danet-r101, ade20k-danet-r101, voc-danet-r101,
    /// shapes-tiny; mmsegmentation's DANet recipes as mmseg-danet-r{50,101}-d8-<dataset>-
    /// <crop>-<schedule>, e.g. mmseg-danet-r50-d8-cityscapes-512x1024-80k) or a TOML file.
    /// Default: shapes-tiny.
    #[arg(long, value_name = "NAME|FILE")]
    pub config: Option<String>,
    /// Override one key of the configuration, e.g. `--set optim.lr=0.01` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Continue a run from its checkpoint (or run directory: its last.safetensors), with
    /// the configuration stored in it; `--set` still applies on top.
    #[arg(long, value_name = "CHECKPOINT|DIR")]
    pub resume: Option<PathBuf>,
    /// Quantisation-aware training for this layout (portable, ort-cpu, openvino): the same
    /// as `--set quant.layout=LAYOUT`; the other `[quant]` keys keep their defaults or
    /// the configuration's. Needs `model.init`, the trained model to fine-tune.
    #[arg(long, value_name = "LAYOUT")]
    pub qat: Option<String>,
    /// Stop with a checkpoint after this many iterations (the schedule still spans all).
    #[arg(long, value_name = "N")]
    pub stop_at: Option<usize>,
    /// Print the resolved configuration (TOML, to stdout) and the batch geometry, and
    /// exit; opens no dataset.
    #[arg(long)]
    pub print_config: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
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
/// SLURM_NTASKS, SLURM_LOCALID, ... (see `segtool_train::distributed::DistEnv`).
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
    #[arg(long, default_value_t = segtool_train::distributed::DEFAULT_BUCKET_MB, value_name = "MB")]
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

pub fn run(args: Args) -> Result<()> {
    let d = &args.dist;
    if d.nproc_per_node > 1 || d.nnodes > 1 {
        // dist: N `segtool train` processes with these arguments, supervised.
        let launch = LaunchConfig {
            nproc_per_node: d.nproc_per_node,
            nnodes: d.nnodes,
            node_rank: d.node_rank,
            master_addr: d.master_addr.clone(),
            master_port: d.master_port,
            ..LaunchConfig::default()
        };
        let launch = SelfLaunch::new(launch, &LAUNCH_FLAGS)?;
        let (n, node, nodes) = (d.nproc_per_node, d.node_rank, d.nnodes);
        eprintln!("launching {n} process(es) on node {node} of {nodes}");
        return launch.run();
    }
    let mut overrides = args.overrides.clone();
    if let Some(layout) = &args.qat {
        overrides.insert(0, format!("quant.layout={layout}"));
    }
    let (cfg, resume) = resolve_config(args.config.as_deref(), args.resume.as_deref(), &overrides)?;
    if args.print_config {
        // The configuration (stdout) and its batch geometry (stderr); no dataset opened.
        let world = DistEnv::from_env().ok().flatten();
        for note in config_notes(&cfg, world.map_or(1, |e| e.world_size))? {
            eprintln!("{note}");
        }
        print!("{}", cfg.to_toml_string());
        return Ok(());
    }
    // dist: the world is what torchrun's (or Slurm's) variables say (one process without).
    let dist = DistEnv::from_env()?;
    let device = args.device.resolve(dist.as_ref())?;
    let mut run = segtool_train::Run::new(cfg, device, dist.clone())
        .resume(resume)
        .threads(args.threads)
        .stop_at(args.stop_at)
        .dist_timeout(Duration::from_secs(d.dist_timeout))
        .bucket_mb(d.bucket_mb)
        .progress(Arc::new(Bar::default()))
        .on_event(|e| match e.is_output() {
            true => println!("{e}"),
            false => eprintln!("{e}"),
        });
    if dist.is_some() {
        run = run.dist_backend(d.dist_backend.parse()?);
    }
    let summary = run.execute()?;
    if summary.is_main() {
        for line in summary.closing_lines() {
            println!("{line}");
        }
    }
    Ok(())
}
