//! `segtool eval`: a checkpoint's mIoU on a dataset split, under the paper's protocol
//! when asked (`--protocol danet --flip`, plus `--ms` for multi-scale; the default for
//! checkpoints trained from a DANet preset) or mmsegmentation's test pipeline
//! (`--protocol mmseg`; an imported mmseg checkpoint defaults to its config's resize and
//! whole/slide mode, `--ms --flip` is its TTA), with optional prediction PNGs and a
//! metrics JSON.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use image::GrayImage;
use segtool_core::config::RunConfig;
use segtool_core::dataset::encode_png;
use segtool_model_spec::io::{write_atomic, write_atomic_unsynced};
use segtool_model_spec::protocol::mmseg::{is_tta, TTA_SCALES};
use segtool_model_spec::spec::MmsegTestCfg;
use segtool_model_spec::ModelSpec;
use segtool_train::eval::{EvalOptions, EvalResult, Protocol, Tiling, MULTI_SCALES};
use segtool_train::run::CONFIG_KEY;
use segtool_train::{load_model, Checkpoint};

use crate::args::progress::Bar;
use crate::args::{open_dataset, DeviceArgs, ShapesArgs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
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
    /// danet: DANet's MultiEvalModule (the published numbers: long side resized to
    /// --base-size x scale, windows from 0 cut and padded at the edge, exp scores);
    /// mmseg: mmsegmentation 1.2.2's test pipeline (keep-ratio --resize of the uint8
    /// image as cv2 does, whole or edge-aligned unpadded windows, logits resized back
    /// with the model's align_corners; scales/flip: its TTA, the mean softmax).
    /// [default: the checkpoint's training preset's (danet for the DANet presets), else
    /// mmseg]
    #[arg(long, value_enum)]
    pub protocol: Option<ProtocolArg>,
    /// danet protocol: the long side at scale 1.0 [default: the checkpoint's preset's
    /// (2048 for Cityscapes), else each image's own long side].
    #[arg(long, value_name = "N")]
    pub base_size: Option<usize>,
    /// mmseg protocol: keep-ratio resize to fit LONG,SHORT before a single pass (mmseg's
    /// `Resize(scale=(LONG, SHORT), keep_ratio=True)`), or `none` [default: the
    /// checkpoint's mmseg test config (imported mmseg checkpoints), else none]. Not
    /// applied under TTA (--scales/--flip), whose ratios scale the original image.
    #[arg(long, value_name = "LONG,SHORT")]
    pub resize: Option<String>,
    /// whole or sliding windows [default: sliding for --protocol danet; mmseg: the
    /// checkpoint's mmseg test config, else whole].
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Sliding window side (default: the checkpoint's mmseg test config, else 768; 1024
    /// with --ms under mmseg).
    #[arg(long)]
    pub crop: Option<usize>,
    /// Sliding window stride (default: the checkpoint's mmseg test config, else danet
    /// int(crop * 2/3), mmseg 512).
    #[arg(long)]
    pub stride: Option<usize>,
    /// Also run each image's mirror (danet: exp of the summed logits; mmseg: TTA, the
    /// mean softmax of the unflipped and flipped passes).
    #[arg(long)]
    pub flip: bool,
    /// Comma-separated image scales (default 1.0): danet sums their scores; mmseg runs
    /// its TTA (each a keep-ratio scale factor of the original image, mean softmax).
    #[arg(long, value_delimiter = ',', conflicts_with = "ms")]
    pub scales: Vec<f64>,
    /// Multi-scale: danet 0.5,0.75,1.0,1.25,1.5,1.75,2.0,2.2 (and crop 1024 under a
    /// sliding mmseg default); mmseg its TTA ratios 0.5,0.75,1.0,1.25,1.5,1.75 (add
    /// --flip for mmseg's ms+flip).
    #[arg(long)]
    pub ms: bool,
    /// Folder for <name>.png (class indices, 8-bit gray) and <name>_color.png.
    #[arg(long)]
    pub predictions: Option<PathBuf>,
    /// JSON file for pixel_accuracy, mean_iou, per_class and the confusion matrix.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// libtorch intra-op threads (0: libtorch's default, one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    #[command(flatten)]
    pub shapes: ShapesArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    Danet,
    Mmseg,
}

impl From<ProtocolArg> for Protocol {
    fn from(p: ProtocolArg) -> Self {
        match p {
            ProtocolArg::Danet => Protocol::Danet,
            ProtocolArg::Mmseg => Protocol::Mmseg,
        }
    }
}

impl Args {
    /// Checks what the flags alone decide, before any file is read, so a bad flag is
    /// reported as such: everything but `--base-size` without `--protocol` (which a
    /// checkpoint trained with the danet protocol accepts).
    fn check_flags(&self) -> Result<()> {
        self.resolve(None, None, true).map(drop)
    }

    /// The protocol the flags describe, with defaults from `trained` (the checkpoint's
    /// run configuration, if it has one) and `test` (an imported mmseg checkpoint's test
    /// pipeline). `--crop`/`--stride` need `--mode sliding` or `--protocol danet`
    /// (whatever the checkpoint says), rather than being silently ignored.
    fn options(
        &self,
        trained: Option<&RunConfig>,
        test: Option<&MmsegTestCfg>,
    ) -> Result<EvalOptions> {
        self.resolve(trained, test, false)
    }

    fn resolve(
        &self,
        trained: Option<&RunConfig>,
        test: Option<&MmsegTestCfg>,
        lenient: bool,
    ) -> Result<EvalOptions> {
        let preset = trained.map(|c| &c.eval);
        let protocol = match self.protocol {
            Some(p) => p.into(),
            None => preset.map_or(Protocol::Mmseg, |e| e.protocol),
        };
        let base_size = match (self.base_size, protocol) {
            (Some(_), Protocol::Mmseg) if lenient && self.protocol.is_none() => None,
            (Some(_), Protocol::Mmseg) => {
                bail!("--base-size applies to the danet protocol (give --protocol danet)")
            }
            (Some(b), Protocol::Danet) => Some(b),
            (None, Protocol::Danet) => preset
                .filter(|e| e.protocol == Protocol::Danet)
                .and_then(|e| e.base_size)
                .map(|b| b as usize),
            (None, Protocol::Mmseg) => None,
        };
        // An imported mmseg checkpoint's test pipeline, under the mmseg protocol.
        let test = test.filter(|_| protocol == Protocol::Mmseg);
        let test_slide = test.and_then(|t| t.crop.zip(t.stride));
        let resize = match (self.resize.as_deref(), protocol) {
            (Some(_), Protocol::Danet) => {
                bail!("--resize applies to the mmseg protocol (give --protocol mmseg)")
            }
            (Some(text), Protocol::Mmseg) => parse_resize(text)?,
            (None, _) => test.map(|t| t.scale),
        };
        let explicit_sliding =
            self.mode == Some(ModeArg::Sliding) || self.protocol == Some(ProtocolArg::Danet);
        let sliding = match self.mode {
            Some(m) => m == ModeArg::Sliding,
            None => protocol == Protocol::Danet || test_slide.is_some(),
        };
        if (self.crop.is_some() || self.stride.is_some()) && !(explicit_sliding && sliding) {
            bail!("--crop and --stride need --mode sliding (or --protocol danet)");
        }
        let mode = if sliding {
            let default_crop = if self.ms && protocol == Protocol::Mmseg {
                1024
            } else {
                768
            };
            let (crop, stride) = protocol.window(self.crop, self.stride, test_slide, default_crop);
            Tiling::Sliding { crop, stride }
        } else {
            Tiling::Whole
        };
        let scales = match (self.ms, protocol) {
            (true, Protocol::Danet) => MULTI_SCALES.to_vec(),
            (true, Protocol::Mmseg) => TTA_SCALES.to_vec(),
            (false, _) if self.scales.is_empty() => vec![1.0],
            (false, _) => self.scales.clone(),
        };
        let opts = EvalOptions::new()
            .protocol(protocol)
            .base_size(base_size)
            .resize(resize)
            .tiling(mode)
            .flip(self.flip)
            .scales(scales)
            .batch_size(self.batch_size);
        opts.validate().map_err(anyhow::Error::msg)?;
        Ok(opts)
    }
}

/// `--resize LONG,SHORT` (or `none`).
fn parse_resize(text: &str) -> Result<Option<[usize; 2]>> {
    if text == "none" {
        return Ok(None);
    }
    let sides: Vec<usize> = text
        .split(',')
        .map(|v| v.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .ok()
        .filter(|v: &Vec<usize>| v.len() == 2 && !v.contains(&0))
        .with_context(|| format!("--resize {text:?}: want LONG,SHORT (two sides > 0) or none"))?;
    Ok(Some([sides[0], sides[1]]))
}

pub fn run(args: Args) -> Result<()> {
    args.check_flags()?;
    let device = args.device.resolve(None)?;
    if args.threads > 0 {
        tch::set_num_threads(args.threads);
    }
    let checkpoint = Checkpoint::read(&args.checkpoint)?;
    let trained = match checkpoint.info.get(CONFIG_KEY) {
        Some(text) => Some(RunConfig::from_toml_str(text).with_context(|| {
            format!("run configuration stored in {}", args.checkpoint.display())
        })?),
        None => None,
    };
    let opts = args.options(trained.as_ref(), checkpoint.spec.mmseg_test.as_ref())?;
    eprintln!("protocol: {}", describe(&opts));
    // A QAT checkpoint is evaluated as it trained (fake quantisation at its learned
    // ranges: what its INT8 file computes), not as the float weights alone.
    let (_vs, model) = match segtool_train::qat::load_model(&checkpoint, device)
        .with_context(|| format!("loading {}", args.checkpoint.display()))?
    {
        Some(qat) => {
            eprintln!("QAT checkpoint: evaluating its fake-quantised model (what its INT8 export computes)");
            qat
        }
        None => load_model(&checkpoint, device)
            .with_context(|| format!("loading {}", args.checkpoint.display()))?,
    };
    let dataset = open_dataset(&args.data, &args.split, &args.shapes)?;
    let spec = &checkpoint.spec;
    let started = Instant::now();
    let result = segtool_train::eval::evaluate_with(
        &model,
        dataset.as_ref(),
        &opts,
        device,
        None,
        &Bar::default(),
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
        let title = segtool_train::telemetry::title_of(&args.checkpoint);
        for chart in segtool_train::telemetry::write_eval_charts(
            path,
            &result.confusion,
            &spec.classes,
            &title,
        )? {
            println!("wrote {}", chart.display());
        }
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
    let (mode, crop, stride) = match opts.tiling {
        Tiling::Whole => ("whole", None, None),
        Tiling::Sliding { crop, stride } => ("sliding", Some(crop), Some(stride)),
    };
    json["images"] = result.images.into();
    json["protocol"] = serde_json::json!({
        "name": opts.protocol.name(), "base_size": opts.base_size, "resize": opts.resize,
        "mode": mode, "crop": crop, "stride": stride, "flip": opts.flip,
        "scales": opts.scales, "align_corners": spec.align_corners,
    });
    let bytes = serde_json::to_vec_pretty(&json)?;
    write_atomic(path, &bytes).with_context(|| format!("writing metrics {}", path.display()))
}

/// One line saying which protocol runs, so a number can be traced to how it was measured.
fn describe(opts: &EvalOptions) -> String {
    let tiling = match opts.tiling {
        Tiling::Whole => "whole images".to_string(),
        Tiling::Sliding { crop, stride } => format!("{crop} windows every {stride}"),
    };
    let base = match (opts.protocol, opts.base_size) {
        (Protocol::Danet, Some(b)) => format!(", long side {b} x scale"),
        (Protocol::Danet, None) => ", long side as the image's x scale".to_string(),
        (Protocol::Mmseg, _) if is_tta(opts) => ", TTA (keep-ratio scale factors of the \
            original image, mean softmax)"
            .to_string(),
        (Protocol::Mmseg, _) => match opts.resize {
            Some([long, short]) => format!(", keep-ratio resize to ({long}, {short})"),
            None => ", native resolution".to_string(),
        },
    };
    format!(
        "{}{base}, {tiling}, flip {}, scales {:?}",
        opts.protocol,
        if opts.flip { "on" } else { "off" },
        opts.scales
    )
}
