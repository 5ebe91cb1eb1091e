//! `segtool eval`: a checkpoint's mIoU on a dataset split, under the paper's protocol
//! when asked (`--mode sliding --flip`, plus `--ms` for multi-scale), with optional
//! prediction PNGs and a metrics JSON.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use image::GrayImage;
use segtool_core::dataset::encode_png;
use segtool_core::io::{write_atomic, write_atomic_unsynced};
use segtool_core::ModelSpec;
use segtool_train::eval::{EvalOptions, EvalResult, Mode, MULTI_SCALES};
use segtool_train::{load_model, Checkpoint};

use super::{open_dataset, ShapesArgs};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ModeArg {
    /// Each (scaled) image in one forward pass.
    Whole,
    /// Crop windows `--stride` apart, as the published numbers were measured.
    Sliding,
}

#[derive(clap::Args)]
pub struct Args {
    /// Checkpoint (.safetensors from `segtool train` or `segtool import`).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// `shapes` or a dataset folder.
    #[arg(long, default_value = "shapes")]
    pub data: String,
    #[arg(long, default_value = "val")]
    pub split: String,
    /// Whole mode: images per forward pass; sliding mode: windows per forward pass.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// The paper's protocol is `--mode sliding --flip` (and `--ms` for multi-scale).
    #[arg(long, value_enum, default_value = "whole")]
    pub mode: ModeArg,
    /// Sliding window side (default 768, or 1024 with --ms).
    #[arg(long)]
    pub crop: Option<i64>,
    /// Sliding window stride (default 512).
    #[arg(long)]
    pub stride: Option<i64>,
    /// Average the logits of each image and its mirror.
    #[arg(long)]
    pub flip: bool,
    /// Comma-separated image scales whose logits are summed (default 1.0).
    #[arg(long, value_delimiter = ',', conflicts_with = "ms")]
    pub scales: Vec<f64>,
    /// Multi-scale: scales 0.5,0.75,1.0,1.25,1.5,1.75,2.0,2.2 (and crop 1024).
    #[arg(long)]
    pub ms: bool,
    /// Folder for <name>.png (class indices, 8-bit gray) and <name>_color.png.
    #[arg(long)]
    pub predictions: Option<PathBuf>,
    /// JSON file for pixel_accuracy, mean_iou, per_class and the confusion matrix.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// libtorch intra-op threads (0: libtorch's default, one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    #[command(flatten)]
    pub shapes: ShapesArgs,
}

impl Args {
    /// The protocol the flags describe; `--crop`/`--stride` without sliding mode is an
    /// error rather than silently ignored.
    fn options(&self) -> Result<EvalOptions> {
        let mode = match self.mode {
            ModeArg::Whole if self.crop.is_some() || self.stride.is_some() => {
                bail!("--crop and --stride need --mode sliding")
            }
            ModeArg::Whole => Mode::Whole,
            ModeArg::Sliding => Mode::Sliding {
                crop: self.crop.unwrap_or(if self.ms { 1024 } else { 768 }),
                stride: self.stride.unwrap_or(512),
            },
        };
        let scales = if self.ms {
            MULTI_SCALES.to_vec()
        } else if self.scales.is_empty() {
            vec![1.0]
        } else {
            self.scales.clone()
        };
        let opts = EvalOptions::new()
            .mode(mode)
            .flip(self.flip)
            .scales(scales)
            .batch_size(self.batch_size);
        opts.validate()?;
        Ok(opts)
    }
}

pub fn run(args: Args) -> Result<()> {
    let opts = args.options()?;
    let device = super::train::parse_device(&args.device)?;
    if args.threads > 0 {
        tch::set_num_threads(args.threads);
    }
    let checkpoint = Checkpoint::read(&args.checkpoint)?;
    let (_vs, model) = load_model(&checkpoint, device)
        .with_context(|| format!("loading {}", args.checkpoint.display()))?;
    let dataset = open_dataset(&args.data, &args.split, &args.shapes)?;
    let spec = &checkpoint.spec;
    let started = Instant::now();
    let result = segtool_train::eval::evaluate_with(
        &model,
        dataset.as_ref(),
        &opts,
        device,
        None,
        |i, labels| match &args.predictions {
            Some(dir) => write_prediction(dir, &dataset.name(i), labels, spec),
            None => Ok(()),
        },
    )?;
    let wall = started.elapsed().as_secs_f64();
    print!("{}", result.table(&spec.classes));
    println!(
        "pixAcc {:.2}  mIoU {:.2}  ({} images, {:.2} img/s in the network, {:.1} s total)",
        result.pixel_accuracy() * 100.0,
        result.mean_iou() * 100.0,
        result.images,
        result.images_per_second(),
        wall
    );
    if let Some(path) = &args.metrics {
        write_metrics(path, &result, spec, &opts)?;
    }
    Ok(())
}

/// `dir/<name>.png` (labels as 8-bit gray) and `dir/<name>_color.png` (spec palette).
fn write_prediction(dir: &Path, name: &str, labels: &tch::Tensor, spec: &ModelSpec) -> Result<()> {
    let (h, w) = labels.size2()?;
    let raw = Vec::<u8>::try_from(&labels.contiguous().view(-1))?;
    let color = {
        let view = ndarray::ArrayView2::from_shape((h as usize, w as usize), &raw)?;
        segtool_runtime::colorize(view, &spec.palette)
    };
    let gray = GrayImage::from_raw(w as u32, h as u32, raw).context("label buffer size")?;
    for (file, png) in [
        (format!("{name}.png"), encode_png(&gray.into())),
        (format!("{name}_color.png"), encode_png(&color.into())),
    ] {
        let path = dir.join(file);
        write_atomic_unsynced(&path, &png)
            .with_context(|| format!("writing prediction {}", path.display()))?;
    }
    Ok(())
}

/// The confusion matrix's JSON (see `ConfusionMatrix::to_json`) plus what produced it,
/// written atomically.
fn write_metrics(
    path: &Path,
    result: &EvalResult,
    spec: &ModelSpec,
    opts: &EvalOptions,
) -> Result<()> {
    let mut json = result.confusion.to_json(&spec.classes);
    let (mode, crop, stride) = match opts.mode {
        Mode::Whole => ("whole", None, None),
        Mode::Sliding { crop, stride } => ("sliding", Some(crop), Some(stride)),
    };
    json["images"] = result.images.into();
    json["protocol"] = serde_json::json!({
        "mode": mode, "crop": crop, "stride": stride, "flip": opts.flip, "scales": opts.scales,
    });
    let bytes = serde_json::to_vec_pretty(&json)?;
    write_atomic(path, &bytes).with_context(|| format!("writing metrics {}", path.display()))
}
