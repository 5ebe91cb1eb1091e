//! `segtool infer`: segment image files (paths, folders, globs) or raw rgb24 frames from
//! stdin with an exported model.
//!
//! Work runs as a three-stage pipeline so the engine is never waiting on PNG codecs:
//! a source thread decodes (rayon, one task per image) and normalises the next batch, the
//! calling thread runs the engine on the current one, and a sink thread does argmax and
//! encodes/writes the previous one (rayon again). Channels between stages hold one batch,
//! so at most a handful of batches are alive at once whatever the input length; in raw mode
//! frame buffers are recycled from the sink back to the reader.
//!
//! Several sessions (`--devices 0,1,..`: one ONNX Runtime CUDA session per GPU;
//! `--cpu-sessions N`: N CPU sessions of `--threads` intra-op threads each) run through a
//! `segtool_runtime::BatchServer` instead (one worker per session, dynamic batching with
//! `--max-batch` / `--max-wait-ms`); the writer waits for results in input order, so the
//! outputs are the same files in the same order.
//!
//! Accuracy mode (`--mode sliding --crop N --stride N --flip --scales .. / --ms`) runs the
//! evaluation protocol of `segtool_runtime::accuracy` on one session.
//!
//! Models exported with `--preprocess` (uint8 NHWC input) and/or `--argmax` (class map
//! output) are driven by their contract (`Segmenter::contract`): raw pixels in, the
//! graph's class map out.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::{GrayImage, RgbImage};
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array2, Array3, ArrayView3};
use rayon::prelude::*;
use segtool_core::ModelSpec;
use segtool_runtime::accuracy::{self, AccuracyOptions};
use segtool_runtime::batching::Handle;
use segtool_runtime::{
    colorize, overlay, Backend, BatchConfig, BatchServer, Engine, EngineOutput, EngineTensor,
    InputLayout, OutputKind, Segmenter, DEFAULT_ALPHA,
};

#[derive(clap::Args)]
pub struct Args {
    /// Exported model (.onnx from `segtool export`).
    #[arg(long)]
    pub model: PathBuf,
    /// Image files, folders of images (png, jpg; not recursive) or glob patterns
    /// ('frames/*.png', 'data/**/*.jpg'; quote them). Repeatable; several values may also
    /// follow one --input.
    #[arg(long, num_args = 1.., required_unless_present = "raw")]
    pub input: Vec<String>,
    /// Read raw rgb24 frames of WIDTHxHEIGHT from stdin until EOF (what
    /// `ffmpeg -i in.mp4 -f rawvideo -pix_fmt rgb24 -` writes). With `--out -` the class
    /// maps go to stdout as raw uint8 (WIDTH*HEIGHT bytes per frame, in order); otherwise
    /// PNGs frame_000000_mask.png ... go to --out.
    #[arg(long, value_name = "WxH", value_parser = parse_wxh, conflicts_with = "input")]
    pub raw: Option<(u32, u32)>,
    /// Output folder: <name>_mask.png (palette colours) and <name>_overlay.png, plus
    /// <name>_labels.png / <name>_logits.npy when asked. `-` (with --raw): raw class maps
    /// to stdout.
    #[arg(long, default_value = "segtool-out")]
    pub out: PathBuf,
    /// ort or tract.
    #[arg(long, default_value = "ort")]
    pub engine: String,
    /// ONNX Runtime execution providers in order of preference: cpu, cuda[:N],
    /// tensorrt[:N], tensorrt-fp16[:N]. Unavailable ones fall back to CPU (reported).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub providers: Vec<String>,
    /// Images per engine run (same-size images share a run).
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads (default: ONNX Runtime's choice, all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also write <name>_logits.npy: float32 little-endian, shape [classes, H, W].
    #[arg(long)]
    pub logits: bool,
    /// Also write <name>_labels.png: 8-bit grey PNG of class indices.
    #[arg(long)]
    pub labels: bool,
    /// Skip <name>_overlay.png.
    #[arg(long)]
    pub no_overlay: bool,
    /// No progress bar or progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// A requested execution provider that does not load (e.g. CUDA without a GPU) is an
    /// error instead of a reported fallback to CPU.
    #[arg(long)]
    pub strict: bool,
    /// One ONNX Runtime CUDA session per listed GPU (e.g. 0,1,2,3), fed by a dynamic
    /// batching server. Without a usable GPU each session falls back to CPU (reported),
    /// or fails with --strict.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["cpu_sessions", "providers"])]
    pub devices: Vec<i32>,
    /// N CPU sessions (each with --threads intra-op threads) fed by a dynamic batching
    /// server.
    #[arg(long, value_name = "N", conflicts_with = "providers")]
    pub cpu_sessions: Option<usize>,
    /// With --devices / --cpu-sessions: most images per engine run [default: --batch-size].
    #[arg(long)]
    pub max_batch: Option<usize>,
    /// With --devices / --cpu-sessions: how long the oldest image of a forming batch may
    /// wait for same-size company, in milliseconds.
    #[arg(long, default_value_t = 2.0)]
    pub max_wait_ms: f64,
    /// Accuracy mode (the evaluation protocol): `whole` image or `sliding` windows.
    /// Single session only; needs a plain export (f32 input, logits output).
    #[arg(long, value_parser = ["whole", "sliding"])]
    pub mode: Option<String>,
    /// Sliding window size (implies --mode sliding) [default: 768].
    #[arg(long)]
    pub crop: Option<usize>,
    /// Sliding window stride [default: 512, at most --crop].
    #[arg(long)]
    pub stride: Option<usize>,
    /// Accuracy mode: also run the mirrored image and average the logits.
    #[arg(long)]
    pub flip: bool,
    /// Accuracy mode: scales whose logits are summed, e.g. 0.5,1.0,1.5.
    #[arg(long, value_delimiter = ',', conflicts_with = "ms")]
    pub scales: Option<Vec<f64>>,
    /// Accuracy mode: DANet's multi-scale list (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.2).
    #[arg(long)]
    pub ms: bool,
}

impl Args {
    /// The accuracy protocol asked for, if any.
    fn accuracy(&self) -> Result<Option<AccuracyOptions>> {
        let wanted = self.mode.is_some()
            || self.crop.is_some()
            || self.stride.is_some()
            || self.flip
            || self.scales.is_some()
            || self.ms;
        if !wanted {
            return Ok(None);
        }
        let sliding = match self.mode.as_deref() {
            Some("sliding") => true,
            Some(_) => false,
            None => self.crop.is_some() || self.stride.is_some(),
        };
        let mut opts = AccuracyOptions::new()
            .flip(self.flip)
            .batch_size(self.batch_size.max(1));
        if sliding {
            let crop = self.crop.unwrap_or(768);
            let stride = self.stride.unwrap_or(512.min(crop));
            opts = opts.sliding(crop, stride);
        } else if self.crop.is_some() || self.stride.is_some() {
            bail!("--crop/--stride apply to --mode sliding, not --mode whole");
        }
        if self.ms {
            opts = opts.scales(accuracy::MULTI_SCALES.to_vec());
        } else if let Some(scales) = &self.scales {
            opts = opts.scales(scales.clone());
        }
        opts.validate()
            .map_err(|e| anyhow::anyhow!("accuracy mode options: {e}"))?;
        Ok(Some(opts))
    }
}

/// `WxH` (e.g. `1920x1080`) with both sides positive.
pub fn parse_wxh(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{s}`: expected WIDTHxHEIGHT with positive integers, e.g. 1920x1080");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let p = |v: &str| v.trim().parse::<u32>().ok().filter(|v| *v > 0);
    let (w, h) = (p(w).ok_or_else(bad)?, p(h).ok_or_else(bad)?);
    if u64::from(w) * u64::from(h) * 3 > isize::MAX as u64 / 4 {
        return Err(format!("`{s}`: frame too large"));
    }
    Ok((w, h))
}

pub fn open_segmenter(model: &Path, engine: &str, providers: &[String]) -> Result<Segmenter> {
    open_segmenter_with(model, engine, providers, None)
}

/// Like [`open_segmenter`], with ONNX Runtime's intra-op thread count (ignored by tract,
/// which says so on stderr).
pub fn open_segmenter_with(
    model: &Path,
    engine: &str,
    providers: &[String],
    threads: Option<usize>,
) -> Result<Segmenter> {
    open_segmenter_strict(model, engine, providers, threads, false)
}

/// Like [`open_segmenter_with`]; `strict`: no CPU fallback for the listed providers
/// (`OrtOptions::strict`; tract ignores it).
pub fn open_segmenter_strict(
    model: &Path,
    engine: &str,
    providers: &[String],
    threads: Option<usize>,
    strict: bool,
) -> Result<Segmenter> {
    let backend = match engine {
        #[cfg(feature = "ort")]
        "ort" => {
            let providers = providers
                .iter()
                .map(|p| {
                    p.parse::<segtool_runtime::Provider>()
                        .map_err(anyhow::Error::msg)
                })
                .collect::<Result<Vec<_>>>()?;
            let mut options = segtool_runtime::OrtOptions::new()
                .with_execution_providers(providers)
                .strict(strict);
            if let Some(n) = threads {
                options = options.with_intra_threads(n);
            }
            Backend::Ort(options)
        }
        "tract" => {
            if threads.is_some() {
                eprintln!("note: --threads applies to ONNX Runtime only; tract ignores it");
            }
            Backend::Tract
        }
        other => bail!("unknown engine {other:?} (ort, tract)"),
    };
    Ok(Segmenter::open(model, backend)?)
}

fn is_image(path: &Path) -> bool {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    matches!(ext.as_str(), "png" | "jpg" | "jpeg")
}

/// Every `--input` value expanded, in order (each pattern's or folder's matches sorted),
/// duplicates dropped. A value that names nothing is an error naming it.
pub fn expand_inputs(inputs: &[String]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        let path = Path::new(input);
        if path.is_file() {
            files.push(path.to_path_buf());
        } else if path.is_dir() {
            let found = segtool_core::dataset::list_images(path)
                .with_context(|| format!("reading input {}", path.display()))?;
            if found.is_empty() {
                bail!("no png/jpg images in {}", path.display());
            }
            files.extend(found);
        } else if has_wildcard(input) {
            let mut found: Vec<PathBuf> = glob(input)
                .with_context(|| format!("expanding input pattern {input:?}"))?
                .into_iter()
                .filter(|p| p.is_file() && is_image(p))
                .collect();
            found.sort();
            if found.is_empty() {
                bail!("input pattern {input:?} matches no png/jpg file");
            }
            files.extend(found);
        } else {
            bail!("input {}: no such file or folder", path.display());
        }
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    Ok(files)
}

fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Minimal glob: `*`, `?`, `[abc]`, `[a-z]`, `[!x]` within a path component, and `**` as a
/// whole component for any number of folders. Names starting with `.` only match patterns
/// that start with `.`.
fn glob(pattern: &str) -> std::io::Result<Vec<PathBuf>> {
    let absolute = pattern.starts_with('/');
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    let base = if absolute {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    };
    let mut out = Vec::new();
    glob_walk(&base, &parts, &mut out)?;
    Ok(out)
}

fn glob_walk(base: &Path, parts: &[&str], out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let Some((first, rest)) = parts.split_first() else {
        out.push(base.to_path_buf());
        return Ok(());
    };
    let dir = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    if *first == "**" {
        // Zero folders, then every (non-hidden) subfolder recursively.
        glob_walk(base, rest, out)?;
        for entry in read_dir_sorted(dir)? {
            let name = entry.to_string_lossy();
            let child = base.join(&entry);
            if !name.starts_with('.') && child.is_dir() {
                glob_walk(&child, parts, out)?;
            }
        }
        return Ok(());
    }
    if !has_wildcard(first) {
        let child = base.join(first);
        if rest.is_empty() || child.is_dir() {
            if child.exists() {
                glob_walk(&child, rest, out)?;
            }
        }
        return Ok(());
    }
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in read_dir_sorted(dir)? {
        let name = entry.to_string_lossy();
        if name.starts_with('.') && !first.starts_with('.') {
            continue;
        }
        if wildcard_match(first.as_bytes(), name.as_bytes()) {
            let child = base.join(&entry);
            if rest.is_empty() || child.is_dir() {
                glob_walk(&child, rest, out)?;
            }
        }
    }
    Ok(())
}

fn read_dir_sorted(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    Ok(names)
}

/// Glob match of one path component (bytes; `?` matches one byte).
fn wildcard_match(pat: &[u8], name: &[u8]) -> bool {
    match pat.first() {
        None => name.is_empty(),
        Some(b'*') => (0..=name.len()).any(|i| wildcard_match(&pat[1..], &name[i..])),
        Some(b'?') => !name.is_empty() && wildcard_match(&pat[1..], &name[1..]),
        Some(b'[') => {
            let Some(close) = pat.iter().skip(2).position(|&c| c == b']').map(|p| p + 2) else {
                // No closing bracket: a literal '['.
                return name.first() == Some(&b'[') && wildcard_match(&pat[1..], &name[1..]);
            };
            let Some(&c) = name.first() else { return false };
            let mut class = &pat[1..close];
            let negate = matches!(class.first(), Some(b'!' | b'^'));
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= (class[i]..=class[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && wildcard_match(&pat[close + 1..], &name[1..])
        }
        Some(&p) => name.first() == Some(&p) && wildcard_match(&pat[1..], &name[1..]),
    }
}

/// A `.npy` (format 1.0) holding `data` as little-endian float32 of shape `[K, H, W]`.
pub fn npy_f32(data: ArrayView3<f32>) -> Vec<u8> {
    let (k, h, w) = data.dim();
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({k}, {h}, {w}), }}");
    // magic (6) + version (2) + header length (2) + header, padded to 64 with '\n' last.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len() * 4);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match data.as_slice() {
        Some(flat) => flat
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        None => data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
    }
    out
}

/// Images of one batch plus their engine inputs, one per distinct size (none when the
/// batch goes through a `BatchServer`, which prepares its own).
struct Batch {
    names: Vec<String>,
    images: Vec<RgbImage>,
    /// (indices into `images`, the same-size images in the model's input layout).
    groups: Vec<(Vec<usize>, EngineTensor)>,
}

/// What the engine stage made of a batch.
enum Results {
    /// Per same-size group: the engine's output (logits or class maps).
    Groups(Vec<(Vec<usize>, EngineOutput)>),
    /// One handle per image, answered by the batch server.
    Pending(Vec<Handle>),
}

/// A batch after the engine.
struct Scored {
    names: Vec<String>,
    images: Vec<RgbImage>,
    results: Results,
}

#[derive(Default, Clone, Copy)]
struct Busy {
    decode: Duration,
    normalise: Duration,
    engine: Duration,
    post: Duration,
}

/// How the source thread prepares engine inputs: `None` when a batch server does it.
type Prepare = Option<(ModelSpec, InputLayout)>;

/// Same-size groups in order of first appearance, each in the model's input layout
/// (`segtool_runtime::normalise_batch` for f32 models; this runs on the source thread,
/// overlapping the engine).
fn group_and_prepare(
    images: &[RgbImage],
    prepare: &Prepare,
) -> Result<Vec<(Vec<usize>, EngineTensor)>> {
    let Some((spec, layout)) = prepare else {
        return Ok(Vec::new());
    };
    let mut groups: Vec<((u32, u32), Vec<usize>)> = Vec::new();
    for (i, img) in images.iter().enumerate() {
        match groups.iter_mut().find(|(d, _)| *d == img.dimensions()) {
            Some((_, members)) => members.push(i),
            None => groups.push((img.dimensions(), vec![i])),
        }
    }
    groups
        .into_par_iter()
        .map(|(_, members)| {
            let input = if members.len() == images.len() {
                EngineTensor::from_images(images, spec, *layout)
            } else {
                // Mixed sizes in one batch (rare): copy this size's images together.
                let same: Vec<RgbImage> = members.iter().map(|&i| images[i].clone()).collect();
                EngineTensor::from_images(&same, spec, *layout)
            };
            Ok((members, input?))
        })
        .collect()
}

/// Where results go.
#[derive(Clone)]
enum Sink {
    Folder {
        out: PathBuf,
        overlay: bool,
        labels: bool,
        logits: bool,
    },
    /// Raw uint8 class maps, frame after frame.
    Stdout,
}

/// The engine stage: one session (optionally in accuracy mode), or a batch server.
enum Stage {
    Single {
        seg: Box<Segmenter>,
        accuracy: Option<AccuracyOptions>,
    },
    Server(BatchServer),
}

impl Stage {
    fn run(&mut self, batch: &mut Batch, spec: &ModelSpec) -> Result<Results> {
        match self {
            Stage::Single { seg, accuracy } => {
                let groups = std::mem::take(&mut batch.groups);
                let mut out = Vec::with_capacity(groups.len());
                for (members, input) in groups {
                    let result = match (accuracy.as_ref(), &input) {
                        (None, _) => seg.run_prepared(input.view())?,
                        (Some(opts), EngineTensor::NchwF32(x)) => EngineOutput::Logits(
                            accuracy::predict(seg.engine_mut(), x.view(), spec, opts)?,
                        ),
                        (Some(_), EngineTensor::NhwcU8(_)) => {
                            unreachable!("accuracy mode is refused for uint8 models")
                        }
                    };
                    drop(input);
                    out.push((members, result));
                }
                Ok(Results::Groups(out))
            }
            Stage::Server(server) => Ok(Results::Pending(
                batch
                    .images
                    .iter()
                    .map(|img| server.submit(img.clone()))
                    .collect(),
            )),
        }
    }
}

/// `--devices` / `--cpu-sessions`: one session per device (or CPU session), each
/// reported with its provider and any fallback, behind a batch server.
fn open_server(args: &Args, keep_logits: bool) -> Result<(BatchServer, String)> {
    let sessions: Vec<(String, Backend)> = if !args.devices.is_empty() {
        #[cfg(feature = "ort")]
        {
            if args.engine != "ort" {
                bail!("--devices needs --engine ort (CUDA sessions of ONNX Runtime)");
            }
            args.devices
                .iter()
                .map(|&d| {
                    let mut options = segtool_runtime::OrtOptions::new()
                        .with_provider(segtool_runtime::Provider::Cuda { device_id: d })
                        .strict(args.strict);
                    if let Some(n) = args.threads {
                        options = options.with_intra_threads(n);
                    }
                    (format!("cuda:{d}"), Backend::Ort(options))
                })
                .collect()
        }
        #[cfg(not(feature = "ort"))]
        bail!("--devices needs the ort feature (ONNX Runtime CUDA sessions)");
    } else {
        let n = args.cpu_sessions.unwrap_or(1);
        if n == 0 {
            bail!("--cpu-sessions must be at least 1");
        }
        (0..n)
            .map(|_| {
                let backend = match args.engine.as_str() {
                    #[cfg(feature = "ort")]
                    "ort" => {
                        let mut options = segtool_runtime::OrtOptions::new()
                            .with_provider(segtool_runtime::Provider::Cpu);
                        if let Some(n) = args.threads {
                            options = options.with_intra_threads(n);
                        }
                        Ok(Backend::Ort(options))
                    }
                    "tract" => Ok(Backend::Tract),
                    other => Err(anyhow::anyhow!("unknown engine {other:?} (ort, tract)")),
                }?;
                Ok(("cpu".to_string(), backend))
            })
            .collect::<Result<_>>()?
    };
    let mut spec = None;
    let mut engines: Vec<Box<dyn Engine>> = Vec::with_capacity(sessions.len());
    let mut providers = Vec::new();
    for (i, (asked, backend)) in sessions.into_iter().enumerate() {
        let seg = Segmenter::open(&args.model, backend).with_context(|| {
            format!("opening session {i} ({asked}) of {}", args.model.display())
        })?;
        let (name, provider) = (seg.engine().name(), seg.engine().provider().to_string());
        match seg.engine().fallback_reason() {
            Some(reason) => eprintln!(
                "session {i}: {name} on {provider}: CPU fallback, {asked} unavailable ({reason}); \
                 use --strict to make this an error"
            ),
            None => eprintln!("session {i}: {name} on {provider}"),
        }
        if i == 0 {
            check_contract(&seg, args)?;
        }
        providers.push(provider);
        spec.get_or_insert_with(|| seg.spec().clone());
        engines.push(seg.into_plain_engine());
    }
    let spec = spec.expect("at least one session");
    let config = BatchConfig::new()
        .with_max_batch(args.max_batch.unwrap_or(args.batch_size).max(1))
        .with_max_wait(Duration::from_secs_f64(args.max_wait_ms.max(0.0) / 1e3))
        .with_queue_capacity((engines.len() * args.batch_size.max(1) * 4).max(64))
        .with_logits(keep_logits);
    let server = BatchServer::new(config, spec, engines)?;
    Ok((server, providers.join(",")))
}

/// Refuses what the model's contract cannot give.
fn check_contract(seg: &Segmenter, args: &Args) -> Result<()> {
    let contract = seg.contract();
    if args.logits && contract.output == OutputKind::Mask {
        bail!(
            "--logits: {} outputs a class map (exported with --argmax), not logits; export \
             without --argmax to get them",
            args.model.display()
        );
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    let to_stdout = args.out.as_os_str() == "-";
    if to_stdout && args.raw.is_none() {
        bail!("--out - (raw class maps on stdout) needs --raw WxH");
    }
    let batch_size = args.batch_size.max(1);
    let accuracy_opts = args.accuracy()?;
    let batched = !args.devices.is_empty() || args.cpu_sessions.is_some();
    if accuracy_opts.is_some() && batched {
        bail!(
            "accuracy mode (--mode/--crop/--stride/--flip/--scales/--ms) runs on a single \
             session: drop --devices/--cpu-sessions, or drop the accuracy options to batch \
             over several sessions"
        );
    }
    if args.max_batch.is_some() && !batched {
        bail!("--max-batch applies to --devices / --cpu-sessions (use --batch-size otherwise)");
    }
    let files = match args.raw {
        Some(_) => Vec::new(),
        None => {
            let files = expand_inputs(&args.input)?;
            check_unique_stems(&files)?;
            files
        }
    };
    let (mut stage, spec, prepare, engine_desc) = if batched {
        let (server, providers) = open_server(&args, args.logits)?;
        let spec = server.spec().clone();
        let desc = format!("{} session(s) on {providers}", server.workers());
        (Stage::Server(server), spec, None, desc)
    } else {
        let seg = open_segmenter_strict(
            &args.model,
            &args.engine,
            &args.providers,
            args.threads,
            args.strict,
        )?;
        eprintln!(
            "engine {} on {}{}",
            seg.engine().name(),
            seg.engine().provider(),
            seg.engine()
                .fallback_reason()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
        check_contract(&seg, &args)?;
        let contract = seg.contract();
        if accuracy_opts.is_some() && !contract.is_plain() {
            bail!(
                "accuracy mode needs a model with float32 normalised input and logits output; \
                 {} takes {contract} (exported with --preprocess and/or --argmax): export it \
                 without them for accuracy mode",
                args.model.display()
            );
        }
        let spec = seg.spec().clone();
        let desc = format!("{} on {}", seg.engine().name(), seg.engine().provider());
        let prepare = Some((spec.clone(), contract.input));
        let stage = Stage::Single {
            seg: Box::new(seg),
            accuracy: accuracy_opts,
        };
        (stage, spec, prepare, desc)
    };
    if spec.num_classes() > 256 {
        bail!("{} classes do not fit uint8 masks", spec.num_classes());
    }
    let sink = if to_stdout {
        Sink::Stdout
    } else {
        Sink::Folder {
            out: args.out.clone(),
            overlay: !args.no_overlay,
            labels: args.labels,
            logits: args.logits,
        }
    };

    let bar = progress(
        args.raw.is_none().then_some(files.len() as u64),
        !args.quiet,
    );
    let start = Instant::now();
    // Stage channels hold one batch each (a few with a batch server, so that every
    // session has work while the writer waits for the oldest); `recycle` returns raw
    // frame buffers.
    let in_flight = match &stage {
        Stage::Server(server) => {
            let per_batch = server.config().max_batch.max(1);
            (server.workers() * per_batch * 2)
                .div_ceil(batch_size)
                .max(1)
        }
        Stage::Single { .. } => 1,
    };
    let (batch_tx, batch_rx) = sync_channel::<Result<(Batch, Busy)>>(1);
    let (scored_tx, scored_rx) = sync_channel::<Scored>(in_flight);
    let (recycle_tx, recycle_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let source = {
        let prepare = prepare.clone();
        match args.raw {
            Some((w, h)) => std::thread::Builder::new()
                .name("segtool-read".into())
                .spawn(move || read_raw(w, h, batch_size, &prepare, batch_tx, recycle_rx))?,
            None => std::thread::Builder::new()
                .name("segtool-decode".into())
                .spawn(move || decode_files(files, batch_size, &prepare, batch_tx))?,
        }
    };
    let writer = {
        let (spec, sink, bar) = (spec.clone(), sink.clone(), bar.clone());
        let recycle = args.raw.is_some().then_some(recycle_tx);
        let lines = !args.quiet;
        std::thread::Builder::new()
            .name("segtool-write".into())
            .spawn(move || write_results(scored_rx, &spec, &sink, recycle, &bar, lines))?
    };

    let mut busy = Busy::default();
    let mut images = 0usize;
    // An input or engine error stops reading, but what was already scored is still
    // written (frames before a truncated one, images before a corrupt one).
    let mut failure: Option<anyhow::Error> = None;
    for item in batch_rx.iter() {
        let (mut batch, b) = match item {
            Ok(x) => x,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        busy.decode += b.decode;
        busy.normalise += b.normalise;
        let t0 = Instant::now();
        let results = match stage.run(&mut batch, &spec) {
            Ok(r) => r,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        busy.engine += t0.elapsed();
        images += batch.images.len();
        let scored = Scored {
            names: batch.names,
            images: batch.images,
            results,
        };
        if scored_tx.send(scored).is_err() {
            break; // the writer failed: its error is reported below
        }
    }
    drop(scored_tx);
    let written = writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer thread panicked"))?;
    bar.finish_and_clear();
    if let Some(e) = failure {
        // The source thread may still be blocked reading stdin: not joined.
        if let Err(w) = written {
            eprintln!("error: {w:#}");
        }
        return Err(e);
    }
    busy.post = written?;
    drop(batch_rx);
    source
        .join()
        .map_err(|_| anyhow::anyhow!("input thread panicked"))?;
    bar.finish_and_clear();
    let batching = match &stage {
        Stage::Server(server) => {
            let stats = server.stats();
            format!(
                "; {} batches, mean batch {:.2}",
                stats.batches(),
                stats.mean_batch_size()
            )
        }
        Stage::Single { .. } => String::new(),
    };
    drop(stage);

    let wall = start.elapsed().as_secs_f64();
    let summary = format!(
        "{images} image(s) -> {} in {wall:.2} s ({:.1} img/s, {engine_desc}{batching}; busy s: \
         decode {:.2}, normalise {:.2}, engine {:.2}, post+write {:.2})",
        if to_stdout {
            "stdout".to_string()
        } else {
            args.out.display().to_string()
        },
        images as f64 / wall.max(1e-9),
        busy.decode.as_secs_f64(),
        busy.normalise.as_secs_f64(),
        busy.engine.as_secs_f64(),
        busy.post.as_secs_f64(),
    );
    if to_stdout {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    Ok(())
}

/// Two inputs with the same file stem would overwrite each other's outputs.
fn check_unique_stems(files: &[PathBuf]) -> Result<()> {
    let mut seen = std::collections::HashMap::new();
    for f in files {
        let stem = f.file_stem().unwrap_or_default().to_os_string();
        if let Some(other) = seen.insert(stem, f) {
            bail!(
                "inputs {} and {} would both write {}_*.png to the output folder",
                other.display(),
                f.display(),
                f.file_stem().unwrap_or_default().to_string_lossy()
            );
        }
    }
    Ok(())
}

fn progress(len: Option<u64>, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    match len {
        Some(len) => {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template("[{bar:30}] {pos}/{len} {per_sec} ETA {eta} {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {pos} frames {per_sec} {elapsed}")
                    .expect("valid template"),
            );
            bar
        }
    }
}

fn decode_files(
    files: Vec<PathBuf>,
    batch_size: usize,
    prepare: &Prepare,
    tx: SyncSender<Result<(Batch, Busy)>>,
) {
    for chunk in files.chunks(batch_size) {
        let t0 = Instant::now();
        let decoded = chunk
            .par_iter()
            .map(|p| segtool_core::dataset::read_rgb(p).map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>();
        let images = match decoded {
            Ok(images) => images,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let t1 = Instant::now();
        let groups = match group_and_prepare(&images, prepare) {
            Ok(g) => g,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let busy = Busy {
            decode: t1 - t0,
            normalise: t1.elapsed(),
            ..Default::default()
        };
        let names = chunk
            .iter()
            .map(|p| {
                p.file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let batch = Batch {
            names,
            images,
            groups,
        };
        if tx.send(Ok((batch, busy))).is_err() {
            return;
        }
    }
}

/// Fills `buf` from `input`; returns the bytes read (less than `buf.len()` only at EOF).
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn read_raw(
    w: u32,
    h: u32,
    batch_size: usize,
    prepare: &Prepare,
    tx: SyncSender<Result<(Batch, Busy)>>,
    recycle: Receiver<Vec<u8>>,
) {
    let frame_bytes = w as usize * h as usize * 3;
    let mut stdin = std::io::stdin().lock();
    let mut index = 0u64;
    loop {
        let t0 = Instant::now();
        let mut images = Vec::with_capacity(batch_size);
        let mut names = Vec::with_capacity(batch_size);
        let mut failure = None;
        let mut eof = false;
        while images.len() < batch_size {
            let mut buf = recycle.try_recv().unwrap_or_default();
            buf.resize(frame_bytes, 0);
            match read_full(&mut stdin, &mut buf) {
                Ok(n) if n == frame_bytes => {
                    images.push(RgbImage::from_raw(w, h, buf).expect("buffer sized for frame"));
                    names.push(format!("frame_{index:06}"));
                    index += 1;
                }
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    failure = Some(anyhow::anyhow!(
                        "stdin ended inside frame {index}: {n} of {frame_bytes} bytes \
                         ({} bytes in all, not a multiple of the --raw {w}x{h} rgb24 frame \
                         size {w}*{h}*3 = {frame_bytes}; wrong --raw size or pixel format?)",
                        index * frame_bytes as u64 + n as u64
                    ));
                    break;
                }
                Err(e) => {
                    failure = Some(
                        anyhow::Error::new(e).context(format!("reading frame {index} from stdin")),
                    );
                    break;
                }
            }
        }
        let read = t0.elapsed();
        if !images.is_empty() {
            let t1 = Instant::now();
            let groups = match group_and_prepare(&images, prepare) {
                Ok(g) => g,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let busy = Busy {
                decode: read,
                normalise: t1.elapsed(),
                ..Default::default()
            };
            let batch = Batch {
                names,
                images,
                groups,
            };
            if tx.send(Ok((batch, busy))).is_err() {
                return;
            }
        }
        if let Some(e) = failure {
            let _ = tx.send(Err(e));
            return;
        }
        if eof {
            return;
        }
    }
}

/// Per image of a scored batch: where its result is.
enum Slot<'a> {
    /// Image `j` of a group's engine output.
    Group(&'a EngineOutput, usize),
    /// A batch server's answer.
    Done(&'a Array2<u8>, Option<&'a Array3<f32>>),
}

impl Slot<'_> {
    /// The class map at the image's size.
    fn mask(&self, img: &RgbImage) -> Array2<u8> {
        match self {
            Slot::Group(out, j) => out.mask(*j, img.height() as usize, img.width() as usize),
            Slot::Done(mask, _) => (*mask).clone(),
        }
    }

    /// Logits `(classes, h, w)`, when the model gives them.
    fn logits(&self) -> Option<std::borrow::Cow<'_, Array3<f32>>> {
        match self {
            Slot::Group(out, j) => out.logits(*j).map(std::borrow::Cow::Owned),
            Slot::Done(_, logits) => logits.map(std::borrow::Cow::Borrowed),
        }
    }
}

fn write_results(
    rx: Receiver<Scored>,
    spec: &ModelSpec,
    sink: &Sink,
    recycle: Option<Sender<Vec<u8>>>,
    bar: &ProgressBar,
    lines: bool,
) -> Result<Duration> {
    let mut busy = Duration::ZERO;
    let mut stdout = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let total = bar.length();
    let mut done = 0u64;
    for scored in rx {
        let t0 = Instant::now();
        let n = scored.images.len();
        // A batch server's answers, waited for in input order.
        let (groups, answers) = match scored.results {
            Results::Groups(groups) => (groups, Vec::new()),
            Results::Pending(handles) => {
                let answers: Vec<(Array2<u8>, Option<Array3<f32>>)> = handles
                    .into_iter()
                    .zip(&scored.names)
                    .map(|(h, name)| {
                        h.wait()
                            .map(|o| (o.mask, o.logits))
                            .with_context(|| format!("segmenting {name}"))
                    })
                    .collect::<Result<_>>()?;
                (Vec::new(), answers)
            }
        };
        let mut slots: Vec<Option<Slot<'_>>> = (0..n).map(|_| None).collect();
        for (members, out) in &groups {
            for (j, &i) in members.iter().enumerate() {
                slots[i] = Some(Slot::Group(out, j));
            }
        }
        for (i, (mask, logits)) in answers.iter().enumerate() {
            slots[i] = Some(Slot::Done(mask, logits.as_ref()));
        }
        let slots: Vec<Slot<'_>> = slots
            .into_iter()
            .map(|s| s.expect("every image has a result"))
            .collect();
        match sink {
            Sink::Stdout => {
                let masks: Vec<Array2<u8>> = (0..n)
                    .into_par_iter()
                    .map(|i| slots[i].mask(&scored.images[i]))
                    .collect();
                for mask in &masks {
                    let bytes = mask.as_slice().expect("standard layout");
                    stdout
                        .write_all(bytes)
                        .context("writing class maps to stdout")?;
                }
                stdout.flush().context("writing class maps to stdout")?;
            }
            Sink::Folder {
                out,
                overlay: want_overlay,
                labels,
                logits,
            } => {
                (0..n)
                    .into_par_iter()
                    .map(|i| -> Result<()> {
                        let img = &scored.images[i];
                        let mask = slots[i].mask(img);
                        let name = &scored.names[i];
                        let write = |suffix: &str, bytes: &[u8]| -> Result<()> {
                            let path = out.join(format!("{name}_{suffix}"));
                            segtool_core::io::write_atomic_unsynced(&path, bytes)
                                .with_context(|| format!("writing {}", path.display()))
                        };
                        let png =
                            |img: image::DynamicImage| segtool_core::dataset::encode_png(&img);
                        write(
                            "mask.png",
                            &png(colorize(mask.view(), &spec.palette).into()),
                        )?;
                        if *want_overlay {
                            let o = overlay(img, mask.view(), &spec.palette, DEFAULT_ALPHA);
                            write("overlay.png", &png(o.into()))?;
                        }
                        if *labels {
                            let (h, w) = mask.dim();
                            let gray = GrayImage::from_raw(
                                w as u32,
                                h as u32,
                                mask.as_slice().expect("standard layout").to_vec(),
                            )
                            .expect("mask size");
                            write("labels.png", &png(gray.into()))?;
                        }
                        if *logits {
                            let scores = slots[i].logits().with_context(|| {
                                format!("{name}: the model outputs no logits (--argmax export)")
                            })?;
                            write("logits.npy", &npy_f32(scores.view()))?;
                        }
                        Ok(())
                    })
                    .collect::<Result<()>>()?;
            }
        }
        busy += t0.elapsed();
        done += n as u64;
        bar.inc(n as u64);
        if let Some(total) = total.filter(|_| lines && bar.is_hidden()) {
            let step = (total / 10).max(1);
            if done / step != (done - n as u64) / step || done == total {
                // No terminal (logs, pipes): a line every 10% instead of the bar.
                eprintln!("  {done}/{total} images");
            }
        }
        if let Some(recycle) = &recycle {
            for img in scored.images {
                let _ = recycle.send(img.into_raw());
            }
        }
    }
    Ok(busy)
}
