use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use segtool_core::{BackboneSpec, ModelSpec};
use segtool_train::checkpoint::{self, CheckpointInfo};
use segtool_train::{TrainConfig, Trainer};

use super::{dataset_classes, open_dataset, ShapesArgs};

#[derive(clap::Args)]
pub struct Args {
    /// `shapes` or a dataset folder (images/train, masks/train, classes.json).
    #[arg(long, default_value = "shapes")]
    pub data: String,
    /// tiny, resnet18, resnet34, resnet50, resnet101, resnet152.
    #[arg(long, default_value = "tiny")]
    pub backbone: String,
    #[arg(long, default_value_t = 8)]
    pub output_stride: i64,
    /// PyTorch-Encoding's deep_base stem (three 3x3 convs), as official DANet weights use.
    #[arg(long)]
    pub deep_stem: bool,
    /// Dilations of layer4's blocks, e.g. 4,8,16.
    #[arg(long, value_delimiter = ',')]
    pub multi_grid: Option<Vec<i64>>,
    /// Attention implementation: explicit (the paper's matmul-softmax-matmul) or sdpa
    /// (libtorch's fused kernel; never materialises PAM's N x N matrix on CPU).
    #[arg(long, default_value = "explicit")]
    pub attention: segtool_core::spec::AttentionImpl,
    /// Keep the backbone's BatchNorm layers frozen (running statistics, no affine updates).
    #[arg(long)]
    pub freeze_bn: bool,
    #[arg(long, default_value_t = 1000)]
    pub iterations: usize,
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Backbone learning rate (the head trains at 10x).
    #[arg(long, default_value_t = 0.003)]
    pub lr: f64,
    /// Output checkpoint (.safetensors); a loss curve PNG/CSV is written beside it.
    #[arg(long, default_value = "danet.safetensors")]
    pub out: PathBuf,
    /// cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// libtorch intra-op threads (0: libtorch's default, one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    /// Initial weights from PyTorch (.pth, .pth.tar, .safetensors): torchvision ResNet names
    /// set the backbone only, DANet names the whole model (see `segtool import`).
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    #[command(flatten)]
    pub shapes: ShapesArgs,
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

pub fn run(args: Args) -> Result<()> {
    if args.threads > 0 {
        tch::set_num_threads(args.threads);
    }
    let (classes, palette) = dataset_classes(&args.data)?;
    let mut backbone = backbone_spec(&args.backbone, args.output_stride)?;
    backbone.deep_stem = args.deep_stem;
    backbone.multi_grid = args.multi_grid.clone();
    let mut spec = ModelSpec::new(&args.backbone, backbone, classes);
    if let Some(p) = palette {
        spec.palette = p;
    }
    spec.validate()?;
    let dataset = open_dataset(&args.data, "train", &args.shapes)?;
    let config = TrainConfig {
        iterations: args.iterations,
        batch_size: args.batch_size,
        lr: args.lr,
        seed: args.shapes.seed,
        device: parse_device(&args.device)?,
        attention: args.attention,
        freeze_bn: args.freeze_bn,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, config)?;
    if let Some(path) = &args.init {
        let state = super::import::read(path)?;
        let mode = segtool_train::import::ImportMode::detect(&state);
        super::import::import(&mut trainer.vs, state, path, mode, false)?;
    }
    trainer.train(dataset.as_ref())?;
    let info = CheckpointInfo::from([("iterations".to_string(), args.iterations.to_string())]);
    checkpoint::save(&args.out, &trainer.vs, &spec, &info)?;
    write_loss_curve(&args.out.with_extension("loss"), &trainer.losses)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

/// `<stem>.loss.png` (raw and smoothed) and `<stem>.loss.csv`.
pub fn write_loss_curve(stem: &Path, losses: &[(usize, f64)]) -> Result<()> {
    let points: Vec<(f64, f64)> = losses.iter().map(|&(i, l)| (i as f64, l)).collect();
    let smooth = segtool_core::visual::smooth(&points, 25);
    let png = segtool_core::visual::line_plot(&[&points, &smooth], 640, 360);
    let png_path = stem.with_extension("loss.png");
    let bytes = segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(png));
    segtool_core::io::write_atomic(&png_path, &bytes)
        .with_context(|| format!("writing {}", png_path.display()))?;
    let csv: String = std::iter::once("iteration,loss\n".to_string())
        .chain(losses.iter().map(|(i, l)| format!("{i},{l}\n")))
        .collect();
    let csv_path = stem.with_extension("loss.csv");
    segtool_core::io::write_atomic(&csv_path, csv.as_bytes())
        .with_context(|| format!("writing {}", csv_path.display()))
}
