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
//! `segtool_runtime::batching::BatchServer` instead (one worker per session, dynamic batching with
//! `--max-batch` / `--max-wait-ms`); the writer waits for results in input order, so the
//! outputs are the same files in the same order.
//!
//! Accuracy mode (`--mode sliding --crop N --stride N --flip --scales .. / --ms`) runs the
//! evaluation protocol of `segtool_runtime::pipeline::accuracy` on one session.
//!
//! Models exported with `--preprocess` (uint8 NHWC input) and/or `--argmax` (class map
//! output) are driven by their contract (`Segmenter::contract`): raw pixels in, the
//!
//! Layout: this module holds the command-line [`Args`], [`run`] (which wires the stages
//! together) and the session openers other commands reuse; `inputs.rs` lists and decodes
//! image files, `raw.rs` reads stdin frames, `pipeline.rs` has the batch types and the
//! engine stage, `outputs.rs` the writer stage and output formats, `sessions.rs` the
//! accuracy options and the multi-session batch server.

mod inputs;
mod outputs;
mod pipeline;
mod raw;
mod sessions;
mod summary;

use std::path::PathBuf;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use crate::args::engine::{describe, EngineFlags};
use crate::args::size::Size;
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};

pub use inputs::expand_inputs;
// Still public at its old path `cmd::infer::npy_f32`, though only the writer uses it now.
#[allow(unused_imports)]
pub use outputs::npy_f32;

use inputs::{check_unique_stems, decode_files, DecodeOptions};
use outputs::{write_results, Sink};
use pipeline::{Batch, Busy, Failure, Prepare, Scored, Stage};
use raw::read_raw;
use sessions::{check_contract, cuda_attention_note, open_server};
use summary::{batching_note, skipped_summary, summary_line};

use segtool_runtime::expert::SegmenterExt;

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
    /// maps go to stdout as raw uint8 (WIDTH*HEIGHT bytes per frame, in order), or as
    /// uint16 little-endian (2*WIDTH*HEIGHT bytes) for a model of more than 256 classes;
    /// otherwise PNGs frame_000000_mask.png ... go to --out.
    #[arg(long, value_name = "WxH", value_parser = crate::args::size::wxh, conflicts_with = "input")]
    pub raw: Option<Size>,
    /// Output folder: <name>_mask.png (palette colours) and <name>_overlay.png, plus
    /// <name>_labels.png / <name>_logits.npy when asked. `-` (with --raw): raw class maps
    /// to stdout.
    #[arg(long, default_value = "segtool-out")]
    pub out: PathBuf,
    #[command(flatten)]
    pub engine: EngineFlags,
    /// Images per engine run (same-size images share a run).
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Also write <name>_logits.npy: float32 little-endian, shape [classes, H, W].
    #[arg(long)]
    pub logits: bool,
    /// Also write <name>_labels.png: grey PNG of class indices (8-bit; 16-bit for a model
    /// of more than 256 classes).
    #[arg(long)]
    pub labels: bool,
    /// Skip <name>_overlay.png.
    #[arg(long)]
    pub no_overlay: bool,
    /// No progress bar or progress lines.
    #[arg(long)]
    pub quiet: bool,
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
    /// Accuracy mode: the evaluation protocol, `danet` (DANet's MultiEvalModule: long
    /// side resized to --base-size x scale, windows from 0 cut and padded at the edge, exp
    /// scores; sliding by default) or `mmseg` (edge-aligned windows, logits averaged).
    /// [default: mmseg]
    #[arg(long, value_parser = ["danet", "mmseg"])]
    pub protocol: Option<String>,
    /// Accuracy mode, danet protocol: the long side at scale 1.0 [default: each image's
    /// own long side].
    #[arg(long, value_name = "N")]
    pub base_size: Option<usize>,
    /// Accuracy mode (the evaluation protocol): `whole` image or `sliding` windows.
    /// Single session only; needs a plain export (f32 input, logits output).
    #[arg(long, value_parser = ["whole", "sliding"])]
    pub mode: Option<String>,
    /// Sliding window size (implies --mode sliding) [default: 768].
    #[arg(long)]
    pub crop: Option<usize>,
    /// Sliding window stride [default: danet int(crop * 2/3), mmseg 512 (at most --crop)].
    #[arg(long)]
    pub stride: Option<usize>,
    /// Accuracy mode: also run the mirrored image (danet: exp of the summed logits; mmseg:
    /// logits averaged).
    #[arg(long)]
    pub flip: bool,
    /// Accuracy mode: scales whose logits are summed, e.g. 0.5,1.0,1.5.
    #[arg(long, value_delimiter = ',', conflicts_with = "ms")]
    pub scales: Option<Vec<f64>>,
    /// Accuracy mode: DANet's multi-scale list (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.2).
    #[arg(long)]
    pub ms: bool,
    /// Keep the model's symbolic height/width. By default, when every input has one size
    /// (always with --raw), ONNX Runtime sessions are built for that size, which lets its
    /// memory planner reuse buffers in place (ResNet-50 DANet at 512x1024: 25% less peak
    /// memory, same masks).
    #[arg(long)]
    pub dynamic_shapes: bool,
    /// Image inputs: an image that cannot be read (corrupt, truncated, unreadable) is
    /// reported on stderr with its reason and skipped; every other image is still written,
    /// and the exit status is non-zero at the end, with the counts. Without it the first
    /// such image stops the run.
    #[arg(long, conflicts_with = "raw")]
    pub keep_going: bool,
    /// With --raw: live camera mode (newest frame wins). Frames are read as fast as
    /// stdin gives them and never wait for the model; a frame not started when a newer
    /// one arrives is dropped (counted). Masks are written only for the frames answered,
    /// named by their index (frame_000042_mask.png); with --out -, each class map is
    /// preceded by its frame index as 8 bytes little-endian. One session (--providers).
    #[arg(long, requires = "raw", conflicts_with_all = ["devices", "cpu_sessions"])]
    pub live: bool,
    /// With --live: frames that may wait unstarted; a newer frame replaces the oldest.
    #[arg(long, default_value_t = 1, requires = "live")]
    pub slot: usize,
    /// With --live: drop a frame not started within this many milliseconds of arrival.
    #[arg(long, value_name = "MS", requires = "live")]
    pub deadline_ms: Option<f64>,
    /// With --live: temporal smoothing of the logits across answered frames, an
    /// exponential moving average with this weight of the history in [0, 1) (e.g. 0.6),
    /// before the argmax. Needs a model with logits output (not exported with --argmax).
    #[arg(long, value_name = "WEIGHT", requires = "live")]
    pub smooth: Option<f32>,
}

impl Args {
    /// Where the results go: raw class maps on stdout for `--out -`, else the folder.
    fn sink(&self) -> Sink {
        match self.out.as_os_str() == "-" {
            true => Sink::Stdout,
            false => Sink::Folder {
                out: self.out.clone(),
                overlay: !self.no_overlay,
                labels: self.labels,
                logits: self.logits,
            },
        }
    }

    /// The one input size every image (or raw frame) has, `(height, width)`, when sessions
    /// may be fixed to it: ONNX Runtime, no accuracy mode (its windows and scales vary the
    /// size), no --dynamic-shapes. Files are sized from their headers; one that cannot be
    /// read leaves the shape dynamic (decoding reports it properly later), except with
    /// --keep-going, where it is left out of the vote (decoding reports and skips it).
    fn fixed_input_size(&self, files: &[PathBuf], accuracy: bool) -> Option<(usize, usize)> {
        if self.dynamic_shapes || accuracy || !self.engine.onnx_runtime() {
            return None;
        }
        if let Some(size) = self.raw {
            return Some(size.hw());
        }
        let mut sizes = files
            .iter()
            .filter_map(|f| match image::image_dimensions(f) {
                Ok(size) => Some(Some(size)),
                Err(_) if self.keep_going => None,
                Err(_) => Some(None),
            });
        let first = sizes.next()??;
        sizes
            .all(|s| s == Some(first))
            .then_some((first.1 as usize, first.0 as usize))
    }
}

pub fn run(args: Args) -> Result<()> {
    // Every model is driven by its card: resolved (or refused, saying what is missing)
    // before anything else. Accuracy mode is refused where the card says the protocol
    // cannot run the model (Segmenter::with_accuracy, naming why).
    let card = segtool_runtime::card::resolve(&args.model, &args.engine.card.request())?;
    if args.live {
        return raw::run_live(&args);
    }
    let batch_size = args.batch_size.max(1);
    let (accuracy_opts, batched) = check_modes(&args)?;
    let files = input_files(&args)?;
    // A card's resize or padding decides the tensor's size, not the images'.
    let fixed_size = match card.segtool_export {
        true => args.fixed_input_size(&files, accuracy_opts.is_some()),
        false => None,
    };
    let (mut stage, spec, prepare, engine_desc) =
        open_stage(&args, batched, fixed_size, accuracy_opts)?;
    let sink = args.sink();

    let bar = progress(
        args.raw.is_none().then_some(files.len() as u64),
        !args.quiet,
    );
    let start = Instant::now();
    let in_flight = results_in_flight(&stage, batch_size);
    let (batch_tx, batch_rx) = sync_channel::<Result<(Batch, Busy)>>(1);
    let (scored_tx, scored_rx) = sync_channel::<Scored>(in_flight);
    let (recycle_tx, recycle_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let source = {
        let prepare = prepare.clone();
        let opts = DecodeOptions {
            batch_size,
            keep_going: args.keep_going,
            fixed_size,
        };
        spawn_source(args.raw, files, opts, prepare, batch_tx, recycle_rx)?
    };
    let recycle = args.raw.is_some().then_some(recycle_tx);
    let writer = spawn_writer(&args, scored_rx, &spec, &sink, &bar, recycle)?;

    let Scoring {
        mut busy,
        images,
        failure,
        skipped,
    } = score_batches(&batch_rx, &mut stage, &bar, &scored_tx);
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
    let written = written?;
    busy.post = written.busy;
    let flicker = written
        .flicker
        .and_then(|m| m.flicker())
        .map(|f| format!("; flicker {:.2}% of pixels per frame", 100.0 * f))
        .unwrap_or_default();
    drop(batch_rx);
    source
        .join()
        .map_err(|_| anyhow::anyhow!("input thread panicked"))?;
    bar.finish_and_clear();
    let batching = batching_note(&stage);
    drop(stage);
    let summary = summary_line(
        images,
        &sink.target(),
        start.elapsed().as_secs_f64(),
        &format!("{engine_desc}{batching}"),
        &busy,
        &flicker,
    );
    // Masks on stdout keep the summary off it.
    match sink {
        Sink::Stdout => eprintln!("{summary}"),
        Sink::Folder { .. } => println!("{summary}"),
    }
    if !skipped.is_empty() {
        bail!("{}", skipped_summary(images, &skipped));
    }
    Ok(())
}

/// The writer stage's thread: results in input order into `sink`, buffers back to the
/// raw-frame reader through `recycle`.
fn spawn_writer(
    args: &Args,
    scored: std::sync::mpsc::Receiver<Scored>,
    spec: &segtool_model_spec::ModelSpec,
    sink: &Sink,
    bar: &ProgressBar,
    recycle: Option<std::sync::mpsc::Sender<Vec<u8>>>,
) -> Result<std::thread::JoinHandle<Result<outputs::Written>>> {
    let (spec, sink, bar) = (spec.clone(), sink.clone(), bar.clone());
    let lines = !args.quiet;
    // Raw frames are a stream: how much the masks flicker is reported.
    let flicker = args.raw.is_some();
    Ok(std::thread::Builder::new()
        .name("segtool-write".into())
        .spawn(move || write_results(scored, &spec, &sink, recycle, &bar, lines, flicker))?)
}

/// The input images in name order (none with `--raw`: frames come on stdin), refusing
/// two with the same stem (their outputs would collide).
fn input_files(args: &Args) -> Result<Vec<PathBuf>> {
    if args.raw.is_some() {
        return Ok(Vec::new());
    }
    let files = expand_inputs(&args.input)?;
    check_unique_stems(&files)?;
    Ok(files)
}

/// The run's accuracy mode and whether it batches over several sessions, refusing the
/// combinations that cannot run (raw maps on stdout without `--raw`, accuracy mode over
/// several sessions, `--max-batch` without them).
fn check_modes(args: &Args) -> Result<(Option<segtool_runtime::pipeline::accuracy::AccuracyOptions>, bool)> {
    if args.out.as_os_str() == "-" && args.raw.is_none() {
        bail!("--out - (raw class maps on stdout) needs --raw WxH");
    }
    let accuracy = args.accuracy()?;
    let batched = !args.devices.is_empty() || args.cpu_sessions.is_some();
    if accuracy.is_some() && batched {
        bail!(
            "accuracy mode (--protocol/--mode/--crop/--stride/--flip/--scales/--ms) runs on a single \
             session: drop --devices/--cpu-sessions, or drop the accuracy options to batch \
             over several sessions"
        );
    }
    if args.max_batch.is_some() && !batched {
        bail!("--max-batch applies to --devices / --cpu-sessions (use --batch-size otherwise)");
    }
    Ok((accuracy, batched))
}

/// The engine stage (a batch server, or one segmenter with its accuracy options), the
/// model's spec, how inputs are prepared, and a description for the summary line.
fn open_stage(
    args: &Args,
    batched: bool,
    fixed_size: Option<(usize, usize)>,
    accuracy_opts: Option<segtool_runtime::pipeline::accuracy::AccuracyOptions>,
) -> Result<(Stage, segtool_model_spec::ModelSpec, Prepare, String)> {
    let fixed_desc = fixed_size
        .map(|(h, w)| format!(", fixed {h}x{w}"))
        .unwrap_or_default();
    Ok(if batched {
        let (server, providers) = open_server(&args, args.logits, fixed_size)?;
        let spec = server.spec().clone();
        let desc = format!("{} session(s) on {providers}{fixed_desc}", server.workers());
        (Stage::Server(server), spec, None, desc)
    } else {
        let mut seg = args.engine.request(fixed_size).open(&args.model)?;
        eprintln!("{}", describe(&seg));
        if let Some(note) = cuda_attention_note(&seg) {
            eprintln!("note: {note}");
        }
        check_contract(&seg, &args)?;
        if let Some(opts) = accuracy_opts {
            seg = seg.with_accuracy(opts)?;
        }
        seg = seg.with_logits(args.logits);
        let spec = seg.spec().clone();
        let desc = format!(
            "{} on {}{fixed_desc}",
            seg.engine().name(),
            seg.engine().provider()
        );
        // The runtime's first stage, on the source thread (overlapping the engine).
        let prepare = Some(seg.preparer());
        let stage = Stage::Single(Box::new(seg));
        (stage, spec, prepare, desc)
    })
}

/// What the engine stage did with the batches it was handed.
#[derive(Default)]
struct Scoring {
    busy: Busy,
    images: usize,
    /// An input or engine error stops reading, but what was already scored is still
    /// written (frames before a truncated one, images before a corrupt one).
    failure: Option<anyhow::Error>,
    /// --keep-going: the inputs skipped, each reported as its batch arrives.
    skipped: Vec<Failure>,
}

/// Runs every batch the source sends through `stage` and hands the results to the
/// writer, until the source ends, an error stops it, or the writer goes away.
fn score_batches(
    batch_rx: &std::sync::mpsc::Receiver<Result<(Batch, Busy)>>,
    stage: &mut Stage,
    bar: &ProgressBar,
    scored_tx: &std::sync::mpsc::SyncSender<Scored>,
) -> Scoring {
    let mut done = Scoring::default();
    for item in batch_rx.iter() {
        let (mut batch, b) = match item {
            Ok(x) => x,
            Err(e) => {
                done.failure = Some(e);
                break;
            }
        };
        done.busy.decode += b.decode;
        done.busy.normalise += b.normalise;
        for f in std::mem::take(&mut batch.failures) {
            bar.suspend(|| eprintln!("skipped {}: {}", f.path.display(), f.reason));
            bar.inc(1);
            done.skipped.push(f);
        }
        if batch.images.is_empty() {
            continue;
        }
        let t0 = Instant::now();
        let results = match stage.run(&mut batch) {
            Ok(r) => r,
            Err(e) => {
                done.failure = Some(e);
                break;
            }
        };
        done.busy.engine += t0.elapsed();
        done.images += batch.images.len();
        let scored = Scored {
            names: batch.names,
            images: batch.images,
            results,
        };
        if scored_tx.send(scored).is_err() {
            break; // the writer failed: its error is reported below
        }
    }
    done
}

/// How many scored batches may wait for the writer: one, or a few with a batch server
/// (so that every session has work while the writer waits for the oldest).
fn results_in_flight(stage: &Stage, batch_size: usize) -> usize {
    match stage {
        Stage::Server(server) => {
            let per_batch = server.config().max_batch.max(1);
            (server.workers() * per_batch * 2)
                .div_ceil(batch_size)
                .max(1)
        }
        Stage::Single(_) => 1,
    }
}

/// The thread that reads the inputs into batches: raw frames from stdin (their buffers
/// come back through `recycle`), or image files decoded.
fn spawn_source(
    raw: Option<Size>,
    files: Vec<PathBuf>,
    opts: DecodeOptions,
    prepare: Prepare,
    batch_tx: std::sync::mpsc::SyncSender<Result<(Batch, Busy)>>,
    recycle: std::sync::mpsc::Receiver<Vec<u8>>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    match raw {
        Some(Size {
            width: w,
            height: h,
        }) => std::thread::Builder::new()
            .name("segtool-read".into())
            .spawn(move || read_raw(w, h, opts.batch_size, &prepare, batch_tx, recycle)),
        None => std::thread::Builder::new()
            .name("segtool-decode".into())
            .spawn(move || decode_files(files, opts, &prepare, batch_tx)),
    }
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
