//! The raw-frame source of `segtool infer --raw WxH`: packed rgb24 frames read from
//! stdin, batched and prepared on the source thread, with frame buffers recycled from the
//! writer. Separate from the file source because stdin framing has its own failure modes
//! (a truncated last frame, a wrong `--raw` size) and buffer reuse.
//!
//! `--live` (newest frame wins) is here too: a reader thread submits frames to a
//! `segtool_runtime::batching::LatestStream` as they come, and the calling thread writes the masks
//! of the frames answered, with the drop counts, latency and flicker in the summary.

use std::collections::HashMap;
use std::io::Write;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::RgbImage;
use segtool_model_spec::raw_frames::RawFrames;
use segtool_model_spec::size::Size;
use segtool_runtime::batching::{LatestStream, LiveOutcome};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{
    batching::{BatchConfig, BatchServer},
    FlickerMeter, OutputKind, Segmenter, TemporalSmoother,
};

use super::outputs::write_files;
use super::pipeline::{send_batch, Batch, Busy, Prepare};
use super::sessions::check_contract;
use super::Args;
use crate::args::engine::describe;

pub(super) fn read_raw(
    w: u32,
    h: u32,
    batch_size: usize,
    prepare: &Prepare,
    tx: SyncSender<Result<(Batch, Busy)>>,
    recycle: Receiver<Vec<u8>>,
) {
    let mut frames = match RawFrames::new(Size::new(h, w), std::io::stdin().lock()) {
        Ok(frames) => frames,
        Err(e) => {
            let _ = tx.send(Err(e.into()));
            return;
        }
    };
    loop {
        let t0 = Instant::now();
        let mut images = Vec::with_capacity(batch_size);
        let mut names = Vec::with_capacity(batch_size);
        let mut failure = None;
        let mut eof = false;
        while images.len() < batch_size {
            let index = frames.frames_read();
            match frames.next_frame(recycle.try_recv().unwrap_or_default()) {
                Ok(Some(img)) => {
                    images.push(img);
                    names.push(format!("frame_{index:06}"));
                }
                Ok(None) => {
                    eof = true;
                    break;
                }
                Err(e) => {
                    failure = Some(anyhow::Error::new(e));
                    break;
                }
            }
        }
        let read = t0.elapsed();
        if !images.is_empty() && !send_batch(&tx, names, images, Vec::new(), prepare, read) {
            return;
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

/// Reads frames from stdin into `stream` as fast as they come (a camera), keeping a copy
/// of each for overlays when `keep` is set; finishes the stream at EOF or on an error,
/// which it returns.
fn feed_live(
    w: u32,
    h: u32,
    stream: &LatestStream,
    keep: Option<&Mutex<HashMap<u64, RgbImage>>>,
) -> Result<()> {
    let outcome = (|| -> Result<()> {
        let mut frames = RawFrames::new(Size::new(h, w), std::io::stdin().lock())?;
        while let Some(img) = frames.next_frame(Vec::new())? {
            let copy = keep.map(|_| img.clone());
            let frame = stream.submit(img);
            if let (Some(keep), Some(copy)) = (keep, copy) {
                keep.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(frame, copy);
            }
        }
        Ok(())
    })();
    stream.finish();
    outcome
}

/// Nearest-rank percentile of sorted milliseconds.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `segtool infer --raw WxH --live`: one session behind a newest-frame stream; masks
/// for the answered frames only, named (or, on stdout, prefixed) with their index.
pub(super) fn run_live(args: &Args) -> Result<()> {
    let size = args.raw.context("--live needs --raw WxH")?;
    let (w, h) = (size.width, size.height);
    let to_stdout = args.out.as_os_str() == "-";
    if args.accuracy()?.is_some() {
        bail!("--live runs the plain model: drop the accuracy mode options");
    }
    let (seg, smoother, desc) = open_live(args, size)?;
    let spec = seg.spec().clone();
    let config = BatchConfig::live(args.slot, 1).with_logits(args.logits || smoother.is_some());
    let server = BatchServer::from_segmenters(config, vec![seg])?;
    let stream = live_stream(args, &server)?;
    if !to_stdout {
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("creating {}", args.out.display()))?;
    }
    let overlays = (!to_stdout && !args.no_overlay).then(|| Mutex::new(HashMap::new()));
    let mut smoother = smoother;
    let mut meter = FlickerMeter::new();
    let mut latencies = Vec::new();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let start = Instant::now();
    let stream = Arc::new(stream);
    let overlays = Arc::new(overlays);
    let reader = {
        let (stream, overlays) = (stream.clone(), overlays.clone());
        std::thread::Builder::new()
            .name("segtool-read".into())
            .spawn(move || feed_live(w, h, &stream, overlays.as_ref().as_ref()))?
    };
    let mut write = || -> Result<()> {
        while let Some(frame) = stream.next() {
            let image = overlays.as_ref().as_ref().and_then(|m| {
                m.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&frame.frame)
            });
            let out = match frame.outcome {
                LiveOutcome::Answered(out) => out,
                LiveOutcome::Dropped(_) => continue,
                LiveOutcome::Failed(e) => {
                    return Err(anyhow::Error::new(e).context(format!("frame {}", frame.frame)))
                }
            };
            let mask = match (&mut smoother, &out.logits) {
                (Some(sm), Some(logits)) => sm.mask(logits.view(), h as usize, w as usize),
                _ => out.mask,
            };
            latencies.push(frame.submitted.elapsed().as_secs_f64() * 1e3);
            meter.observe(mask.view());
            if to_stdout {
                stdout.write_all(&frame.frame.to_le_bytes())?;
                stdout.write_all(&mask.to_le_bytes())?;
                stdout.flush()?;
            } else {
                let logits = out.logits.as_ref().filter(|_| args.logits);
                let name = format!("frame_{:06}", frame.frame);
                let overlay = image.as_ref();
                let logits = logits.map(|l| l.view());
                write_files(&args.out, &name, &spec, &mask, overlay, args.labels, logits)?;
            }
        }
        Ok(())
    };
    // A failed write stops here; the reader may still be blocked on stdin: not joined.
    write().context("writing class maps")?;
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("input thread panicked"))??;
    let summary = live_summary(
        args,
        &stream,
        start.elapsed().as_secs_f64(),
        latencies,
        &meter,
        &desc,
    );
    if to_stdout {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    Ok(())
}

/// The newest-frame-wins stream over `server`: `--slot` frames waiting at most, and
/// `--deadline-ms` when given.
fn live_stream(args: &Args, server: &BatchServer) -> Result<LatestStream> {
    let stream = server.latest_stream(args.slot.max(1));
    let Some(ms) = args.deadline_ms else {
        return Ok(stream);
    };
    if !(ms > 0.0 && ms.is_finite()) {
        bail!("--deadline-ms must be a positive number of milliseconds");
    }
    Ok(stream.with_deadline(Duration::from_secs_f64(ms / 1e3)))
}

/// The live session: the model opened for frames of `size`, the smoother when asked
/// for, and the engine's description; refuses what live mode cannot run.
fn open_live(args: &Args, size: Size) -> Result<(Segmenter, Option<TemporalSmoother>, String)> {
    let smoother = args
        .smooth
        .map(TemporalSmoother::new)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--smooth: {e}"))?;
    let fixed = (!args.dynamic_shapes && args.engine.onnx_runtime()).then_some(size.hw());
    let seg = args.engine.request(fixed).open(&args.model)?;
    check_contract(&seg, args)?;
    if smoother.is_some() && seg.contract().output == OutputKind::Mask {
        bail!(
            "--smooth: {} outputs a class map (exported with --argmax), and smoothing needs \
             logits; export without --argmax, or drop --smooth",
            args.model.display()
        );
    }
    let desc = describe(&seg);
    eprintln!(
        "{desc}; live: newest frame wins (slot {})",
        args.slot.max(1)
    );
    let desc = desc.trim_start_matches("engine ").to_string();
    Ok((seg, smoother, desc))
}

/// The live run in one line: frames submitted, answered and dropped, where the masks
/// went, the answered rate, arrival-to-mask latency and flicker.
fn live_summary(
    args: &Args,
    stream: &LatestStream,
    wall: f64,
    mut latencies: Vec<f64>,
    meter: &FlickerMeter,
    desc: &str,
) -> String {
    let to_stdout = args.out.as_os_str() == "-";
    let stats = stream.stats();
    latencies.sort_by(f64::total_cmp);
    let latency = if latencies.is_empty() {
        String::new()
    } else {
        format!(
            "; arrival-to-mask ms p50 {:.1} p90 {:.1} p99 {:.1}",
            percentile(&latencies, 50.0),
            percentile(&latencies, 90.0),
            percentile(&latencies, 99.0)
        )
    };
    let flicker = meter
        .flicker()
        .map(|f| format!("; flicker {:.2}% of pixels per frame", 100.0 * f))
        .unwrap_or_default();
    let smoothing = args
        .smooth
        .map(|s| format!(", smoothed {s}"))
        .unwrap_or_default();
    format!(
        "live: {} frame(s) submitted, {} answered, {} dropped ({} replaced, {} past deadline) \
         -> {} in {wall:.2} s ({:.1} answered fps, {desc}{smoothing}){latency}{flicker}",
        stats.submitted,
        stats.answered,
        stats.dropped(),
        stats.replaced,
        stats.expired,
        if to_stdout {
            "stdout".to_string()
        } else {
            args.out.display().to_string()
        },
        stats.answered as f64 / wall.max(1e-9),
    )
}
