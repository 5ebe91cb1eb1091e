use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_export::{
    export_onnx, AttentionForm, ExportOptions, ExportProvider, ExportTarget, ExternalData,
    TargetRequest,
};

use crate::args::triton::TritonArgs;

use segtool_runtime::expert::SegmenterExt;

#[derive(clap::Args)]
pub struct Args {
    /// Checkpoint (.safetensors written by `segtool train`).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Output ONNX file (written atomically). A QAT checkpoint (trained with
    /// `[quant]` / `--qat`) is written as its INT8 QDQ file, with the learned ranges of
    /// the layout it was trained for: no calibration images.
    #[arg(long)]
    pub onnx: PathBuf,
    /// A QAT checkpoint: write the float model instead of its INT8 file (says what it
    /// drops).
    #[arg(long)]
    pub float: bool,
    /// Runtime the model is for; picks the attention forms and the opset.
    /// `legacy`: MatMul/Softmax/MatMul, opset 17, loads everywhere (ORT, TensorRT,
    /// tract). `ort`: shape hints for ORT's fusions; on the CPU (`--provider cpu`, its
    /// default) PAM in query blocks (in ORT's CPU kernels faster than its
    /// MultiHeadAttention inside the model, 1/16 of the N x N energy alive), CAM
    /// decomposed; with `--provider cuda` PAM as fused MultiHeadAttention.
    /// `tensorrt`: ONNX Attention (opset 23) for both modules. `tract`: PAM in query
    /// blocks (blocked), CAM decomposed, convs deeper than 2304 (in x k x k) split along
    /// their input channels (tract runs those faster), opset 17. `openvino`: both modules
    /// decomposed (in OpenVINO the forms measured within 3% in f32 and decomposed fastest
    /// in bf16), opset 17.
    /// Default: `legacy` (one file serves the ORT and the tract engine), or `ort` with
    /// `--provider` or Triton GPU instances (`--triton-gpus`).
    #[arg(long, value_parser = parse_target)]
    pub target: Option<ExportTarget>,
    /// ONNX Runtime execution provider an `ort` export is for: `cpu` (PAM in query
    /// blocks, as measured fastest there) or `cuda` (PAM as com.microsoft
    /// MultiHeadAttention: ORT's CUDA EP runs it fused, never materialising N x N; CAM
    /// decomposed). Implies `--target ort`. Default: `cuda` for a Triton repository with
    /// GPU instances, else `cpu`.
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<ExportProvider>,
    /// Override the target's attention form for both modules:
    /// decomposed | onnx (Attention-23) | ms-mha (com.microsoft MultiHeadAttention) |
    /// blocked (PAM decomposed in query blocks; CAM decomposed).
    #[arg(long, value_parser = parse_form)]
    pub attention: Option<AttentionForm>,
    /// Default-domain opset (13..=23); defaults to the target's (17, or 23 with Attention).
    #[arg(long)]
    pub opset: Option<i64>,
    /// Weights and compute in fp16; attention energies and softmax stay fp32 (Cast),
    /// the interface (input, logits) stays float32.
    #[arg(long)]
    pub fp16: bool,
    /// With --fp16: layers kept in fp32 (Casts around them), comma-separated checkpoint
    /// module names, e.g. `head.conv5c,pretrained.layer4.2`; a module selects every conv
    /// at or below it. A name matching no layer is an error listing close names.
    #[arg(long, value_delimiter = ',', requires = "fp16")]
    pub keep_fp32: Vec<String>,
    /// Output `mask`: ArgMax over classes at input resolution, uint8 [batch, H, W].
    #[arg(long)]
    pub argmax: bool,
    /// Also export the auxiliary FCN head of an mmsegmentation import as a second output,
    /// `aux_logits` (float32 [batch, classes, height, width]); training-only by default.
    #[arg(long)]
    pub aux: bool,
    /// Input `image`: uint8 NHWC RGB [batch, H, W, 3], normalised inside the graph.
    #[arg(long)]
    pub preprocess: bool,
    /// Static input size HxW (fixed dims instead of `height`/`width` symbols).
    #[arg(long, value_parser = parse_hw)]
    pub input_size: Option<(i64, i64)>,
    /// Static batch size (fixed dim instead of the `batch` symbol).
    #[arg(long)]
    pub batch: Option<i64>,
    /// Largest expected input HxW of a dynamic export: TensorRT profile hints
    /// (metadata `segtool.trt_profile`) and the attention memory budget.
    #[arg(long, value_parser = parse_hw, default_value = "1024x2048")]
    pub max_size: (i64, i64),
    /// Weights (initialisers of 1 KiB or more) in ONNX external data, one side file
    /// `<onnx>.data` next to the model: `auto` (the default) when the model would reach
    /// protobuf's 2 GiB limit, `always`, or `never` (fail over the limit). Keep the two
    /// files together; runtimes load the side file relative to the model's path.
    #[arg(long, default_value = "auto", value_parser = parse_external_data)]
    pub external_data: ExternalData,
    /// Run the export in ONNX Runtime and tract (where it loads) on random images of two
    /// sizes against the tch model built from the checkpoint; non-zero exit beyond
    /// tolerance (fp32: 1e-4 * max(1, max|logit|); fp16: argmax agreement >= 99.5%).
    #[arg(long)]
    pub verify: bool,
    #[command(flatten)]
    pub triton: TritonArgs,
}

/// `HxW` as the exporter's `(height, width)` dims (ONNX dims are int64).
fn parse_hw(s: &str) -> Result<(i64, i64), String> {
    let size = crate::args::size::hxw(s)?;
    Ok((i64::from(size.height), i64::from(size.width)))
}

fn parse_target(s: &str) -> Result<ExportTarget, String> {
    s.parse()
}

fn parse_provider(s: &str) -> Result<ExportProvider, String> {
    s.parse()
}

fn parse_form(s: &str) -> Result<AttentionForm, String> {
    s.parse()
}

fn parse_external_data(s: &str) -> Result<ExternalData, String> {
    s.parse()
}

impl Args {
    /// What `--target`, `--provider` and `--triton-gpus` ask for, before defaults.
    pub fn target_request(&self) -> TargetRequest {
        TargetRequest {
            target: self.target,
            provider: self.provider,
            gpu_serving: self.triton.triton.is_some() && !self.triton.triton_gpus.0.is_empty(),
        }
    }

    pub fn options(&self) -> ExportOptions {
        let mut opts = self.target_request().options();
        if let Some(form) = self.attention {
            opts = opts.with_attention(form);
        }
        if let Some(opset) = self.opset {
            opts = opts.with_opset(opset);
        }
        opts.with_fp16(self.fp16)
            .with_keep_fp32(self.keep_fp32.iter().cloned())
            .with_argmax(self.argmax)
            .with_aux(self.aux)
            .with_preprocess(self.preprocess)
            .with_input_size(self.input_size)
            .with_batch(self.batch)
            .with_max_size(self.max_size)
            .with_external_data(self.external_data)
    }
}

pub fn run(args: Args) -> Result<()> {
    let opts = args.options();
    #[cfg(feature = "ort")]
    if export_qat(&args, &opts)
        .with_context(|| format!("exporting {}", args.checkpoint.display()))?
    {
        return Ok(());
    }
    let report = export_onnx(&args.checkpoint, &args.onnx, &opts)
        .with_context(|| format!("exporting {}", args.checkpoint.display()))?;
    println!(
        "wrote {} (target {}{}, PAM {}, CAM {}, opset {}; {} nodes, {} initializers, {} BN folded, {:.1} MB)",
        args.onnx.display(),
        opts.target,
        opts.provider.map(|p| format!(" on {p}")).unwrap_or_default(),
        opts.pam,
        opts.cam,
        opts.opset,
        report.nodes,
        report.initializers,
        report.folded_bn,
        report.bytes as f64 / 1e6
    );
    if args.provider.is_none() && opts.provider == Some(ExportProvider::Cuda) {
        println!(
            "  attention for ONNX Runtime's CUDA EP (Triton GPU instances); --provider cpu keeps \
             the CPU forms"
        );
    }
    if let Some(ext) = &report.external {
        println!(
            "  external data: {} initializers in {} ({:.1} MB, next to the model)",
            ext.tensors,
            ext.location,
            ext.bytes as f64 / 1e6
        );
    }
    let mut flags = Vec::new();
    if opts.fp16 {
        flags.push("fp16 (attention fp32)".to_string());
    }
    if !opts.keep_fp32.is_empty() {
        flags.push(format!("fp32 layers: {}", opts.keep_fp32.join(", ")));
    }
    if opts.preprocess {
        flags.push("input uint8 NHWC RGB".into());
    }
    if opts.argmax {
        flags.push("output uint8 mask".into());
    }
    if let Some((h, w)) = opts.input_size {
        flags.push(format!("static {h}x{w}"));
    }
    if let Some(b) = opts.batch {
        flags.push(format!("static batch {b}"));
    }
    if !flags.is_empty() {
        println!("  {}", flags.join(", "));
    }
    if opts.input_size.is_none() {
        // Dynamic size: what attention costs at the largest expected input.
        let batch = opts.batch.unwrap_or(1);
        let (lines, warnings) =
            segtool_export::budget::report(&report.spec, &opts, opts.max_size, batch);
        for l in lines {
            println!("{l}");
        }
        for w in warnings {
            eprintln!("warning: {w}");
        }
    }
    if args.verify {
        verify(&args, &opts)?;
    }
    if args.triton.triton.is_some() {
        args.triton.write(&args.onnx, None)?;
        if !args.triton.triton_gpus.0.is_empty() {
            if let Some(note) = opts.attention_choice().cuda_note() {
                eprintln!("note: Triton GPU instances: {note}");
            }
        }
    }
    Ok(())
}

/// A QAT checkpoint: its INT8 file (true), or, with `--float`, a note of what the float
/// export drops (false: the float export follows). A float checkpoint: false.
#[cfg(feature = "ort")]
fn export_qat(args: &Args, opts: &ExportOptions) -> Result<bool> {
    use segtool_calibration::qat;
    let bytes = std::fs::read(&args.checkpoint)
        .with_context(|| format!("reading {}", args.checkpoint.display()))?;
    let Some(record) = qat::checkpoint_qat(&bytes)
        .with_context(|| format!("reading {}", args.checkpoint.display()))?
    else {
        return Ok(false);
    };
    if args.float {
        eprintln!("note: {}", qat::float_export_drops(&record));
        return Ok(false);
    }
    qat::check_target(&record.spec.layout, opts.target)?;
    // The QDQ graph is the one QAT planned and trained: the default export's.
    let (int8, record) = qat::export_qat(&bytes, &ExportOptions::default())?;
    segtool_calibration::write_atomic(&args.onnx, &int8)?;
    println!(
        "wrote {} (INT8 from QAT: layout {}, {} learned activation ranges, weights per channel {})",
        args.onnx.display(),
        record.spec.layout,
        record.thresholds.len(),
        record.spec.weight_range
    );
    Ok(true)
}

#[cfg(not(feature = "train"))]
fn verify(_: &Args, _: &ExportOptions) -> Result<()> {
    anyhow::bail!("--verify needs the tch model: build segtool with the `train` feature")
}

/// `--verify`: random images of two sizes through tch and through each engine that
/// loads the export; prints max |logit diff| and argmax agreement; errors beyond
/// tolerance.
#[cfg(feature = "train")]
fn verify(args: &Args, opts: &ExportOptions) -> Result<()> {
    use segtool_runtime::{EngineKind, Segmenter};
    if !opts.is_standard_interface() {
        println!(
            "verify: skipped: --argmax/--preprocess change the graph interface; verify the \
             same options without them (the deployment graph only adds Cast/Transpose/\
             Mul/Add in front and ArgMax behind)"
        );
        return Ok(());
    }
    let ckpt = segtool_train::Checkpoint::read(&args.checkpoint)?;
    let (_vs, model) = segtool_train::load_model(&ckpt, tch::Device::Cpu)?;
    let spec = ckpt.spec.clone();
    let sizes: Vec<(u32, u32)> = match opts.input_size {
        Some((h, w)) => vec![(w as u32, h as u32)],
        None => vec![(97, 75), (64, 128)],
    };
    let batch = opts.batch.unwrap_or(2) as u32;
    let inputs = reference_logits(&model, &spec, &sizes, batch)?;
    let mut backends: Vec<(&str, EngineKind)> = Vec::new();
    #[cfg(feature = "ort")]
    backends.push(("onnxruntime", EngineKind::Ort));
    #[cfg(feature = "tract")]
    if !opts.uses_ms_domain() {
        backends.push(("tract", EngineKind::Tract));
    } else {
        println!("verify: tract skipped (com.microsoft MultiHeadAttention is ONNX Runtime only)");
    }
    let classes = spec.num_classes();
    let mut failures = Vec::new();
    for (name, backend) in backends {
        let mut seg = match Segmenter::builder(&args.onnx).engine(backend).open() {
            Ok(s) => s.with_logits(true),
            Err(e) => {
                failures.push(format!("{name}: cannot load the export: {e}"));
                continue;
            }
        };
        for ((imgs, reference), &(w, h)) in inputs.iter().zip(&sizes) {
            let ours: Vec<f32> = seg
                .segment_batch(imgs)?
                .iter()
                .flat_map(|r| r.logits.as_ref().expect("logits kept").iter().copied())
                .collect();
            anyhow::ensure!(ours.len() == reference.len(), "{name}: logits size differs");
            let (diff, scale, agreement) =
                compare_logits(&ours, reference, classes, (w * h) as usize);
            let tol = 1e-4 * scale.max(1.0);
            let ok = if opts.fp16 {
                agreement >= 0.995
            } else {
                diff <= tol
            };
            println!(
                "verify: {name:11} {w}x{h} batch {}: max |logit - tch| {diff:.3e} (max |logit| \
                 {scale:.2}, tolerance {}), argmax agreement {:.3}% {}",
                imgs.len(),
                if opts.fp16 {
                    "argmax >= 99.5%".to_string()
                } else {
                    format!("{tol:.1e}")
                },
                agreement * 100.0,
                if ok { "ok" } else { "FAILED" }
            );
            if !ok {
                failures.push(format!("{name} at {w}x{h}"));
            }
        }
    }
    anyhow::ensure!(
        failures.is_empty(),
        "verification failed: {}",
        failures.join("; ")
    );
    println!("verify: ok");
    Ok(())
}

/// Smooth random images (random colours on a coarse grid, plus noise) of each size, and
/// tch's fused logits for them: the reference `--verify` compares each engine with.
#[cfg(feature = "train")]
fn reference_logits(
    model: &segtool_train::DaNet,
    spec: &segtool_model_spec::ModelSpec,
    sizes: &[(u32, u32)],
    batch: u32,
) -> Result<Vec<(Vec<image::RgbImage>, Vec<f32>)>> {
    let mut seed = 0x5eed_u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    let mut inputs = Vec::new();
    for &(w, h) in sizes {
        // Smooth random images (random colours on a coarse grid, plus noise).
        let imgs: Vec<image::RgbImage> = (0..batch)
            .map(|_| {
                let grid: Vec<[u8; 3]> = (0..64)
                    .map(|_| {
                        let r = rnd();
                        [r as u8, (r >> 8) as u8, (r >> 16) as u8]
                    })
                    .collect();
                image::RgbImage::from_fn(w, h, |x, y| {
                    let c = grid[((y * 8 / h) * 8 + x * 8 / w) as usize];
                    let n = (rnd() % 16) as u8;
                    image::Rgb([
                        c[0].saturating_add(n),
                        c[1].saturating_add(n),
                        c[2].saturating_add(n),
                    ])
                })
            })
            .collect();
        let t = segtool_train::data::images_to_tensor(
            &imgs.iter().collect::<Vec<_>>(),
            spec,
            tch::Device::Cpu,
        );
        let r = tch::no_grad(|| model.forward_all(&t, false).fused);
        let r = Vec::<f32>::try_from(&r.contiguous().view(-1))?;
        inputs.push((imgs, r));
    }
    Ok(inputs)
}

/// Max |ours - reference|, max |reference| and argmax agreement of two batches of
/// `classes` x `plane` logits (ties to the lower class).
#[cfg(feature = "train")]
fn compare_logits(
    ours: &[f32],
    reference: &[f32],
    classes: usize,
    plane: usize,
) -> (f32, f32, f64) {
    let diff = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let argmax = |v: &[f32], px: usize, plane: usize| {
        (0..classes)
            .max_by(|&a, &b| {
                v[a * plane + px]
                    .total_cmp(&v[b * plane + px])
                    .then(b.cmp(&a))
            })
            .unwrap()
    };
    let (mut agree, mut total) = (0usize, 0usize);
    for img in 0..ours.len() / (classes * plane) {
        let (a, b) = (
            &ours[img * classes * plane..(img + 1) * classes * plane],
            &reference[img * classes * plane..(img + 1) * classes * plane],
        );
        for px in 0..plane {
            agree += (argmax(a, px, plane) == argmax(b, px, plane)) as usize;
            total += 1;
        }
    }
    let agreement = agree as f64 / total as f64;
    (diff, scale, agreement)
}
