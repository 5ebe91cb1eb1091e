//! `segtool infer`: segment image files (paths, folders, globs) or raw rgb24 frames from
//! stdin with an exported model.
//!
//! Work runs as a three-stage pipeline so the engine is never waiting on PNG codecs:
//! a source thread decodes (rayon, one task per image) and normalises the next batch, the
//! calling thread runs the engine on the current one, and a sink thread does argmax and
//! encodes/writes the previous one (rayon again). Channels between stages hold one batch,
//! so at most a handful of batches are alive at once whatever the input length; in raw mode
//! frame buffers are recycled from the sink back to the reader.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::{GrayImage, RgbImage};
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{s, Array2, Array4, ArrayView3, Axis};
use rayon::prelude::*;
use segtool_core::ModelSpec;
use segtool_runtime::{
    argmax, colorize, normalise_batch, overlay, resize_nearest, Backend, Segmenter, DEFAULT_ALPHA,
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
            let mut options =
                segtool_runtime::OrtOptions::new().with_execution_providers(providers);
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

/// Images of one batch plus their normalised tensors, one per distinct size.
struct Batch {
    names: Vec<String>,
    images: Vec<RgbImage>,
    /// (indices into `images`, normalised `[n, 3, H, W]`).
    groups: Vec<(Vec<usize>, Array4<f32>)>,
}

/// A batch after the engine: per group, the logits instead of the input.
struct Scored {
    names: Vec<String>,
    images: Vec<RgbImage>,
    groups: Vec<(Vec<usize>, Array4<f32>)>,
}

#[derive(Default, Clone, Copy)]
struct Busy {
    decode: Duration,
    normalise: Duration,
    engine: Duration,
    post: Duration,
}

/// Same-size groups in order of first appearance, each normalised with
/// `segtool_runtime::normalise_batch` (the runtime's optimised code; this runs on the
/// source thread, overlapping the engine).
fn group_and_normalise(images: &[RgbImage], spec: &ModelSpec) -> Vec<(Vec<usize>, Array4<f32>)> {
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
                normalise_batch(images, spec)
            } else {
                // Mixed sizes in one batch (rare): copy this size's images together.
                let same: Vec<RgbImage> = members.iter().map(|&i| images[i].clone()).collect();
                normalise_batch(&same, spec)
            };
            (members, input.expect("non-empty group of one size"))
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

pub fn run(args: Args) -> Result<()> {
    let to_stdout = args.out.as_os_str() == "-";
    if to_stdout && args.raw.is_none() {
        bail!("--out - (raw class maps on stdout) needs --raw WxH");
    }
    let batch_size = args.batch_size.max(1);
    let files = match args.raw {
        Some(_) => Vec::new(),
        None => {
            let files = expand_inputs(&args.input)?;
            check_unique_stems(&files)?;
            files
        }
    };
    let mut seg = open_segmenter_with(&args.model, &args.engine, &args.providers, args.threads)?;
    eprintln!(
        "engine {} on {}{}",
        seg.engine().name(),
        seg.engine().provider(),
        seg.engine()
            .fallback_reason()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let spec = seg.spec().clone();
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
    // Stage channels hold one batch each; `recycle` returns raw frame buffers.
    let (batch_tx, batch_rx) = sync_channel::<Result<(Batch, Busy)>>(1);
    let (scored_tx, scored_rx) = sync_channel::<Scored>(1);
    let (recycle_tx, recycle_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let source = {
        let spec = spec.clone();
        match args.raw {
            Some((w, h)) => std::thread::Builder::new()
                .name("segtool-read".into())
                .spawn(move || read_raw(w, h, batch_size, &spec, batch_tx, recycle_rx))?,
            None => std::thread::Builder::new()
                .name("segtool-decode".into())
                .spawn(move || decode_files(files, batch_size, &spec, batch_tx))?,
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
        let (batch, b) = match item {
            Ok(x) => x,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        busy.decode += b.decode;
        busy.normalise += b.normalise;
        let t0 = Instant::now();
        let groups = match run_engine(&mut seg, &spec, batch.groups) {
            Ok(g) => g,
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
            groups,
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

    let wall = start.elapsed().as_secs_f64();
    let summary = format!(
        "{images} image(s) -> {} in {wall:.2} s ({:.1} img/s, {} on {}; busy s: decode {:.2}, \
         normalise {:.2}, engine {:.2}, post+write {:.2})",
        if to_stdout {
            "stdout".to_string()
        } else {
            args.out.display().to_string()
        },
        images as f64 / wall.max(1e-9),
        seg.engine().name(),
        seg.engine().provider(),
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

/// Engine runs of one batch's groups: logits `[n, classes, H, W]` per group.
fn run_engine(
    seg: &mut Segmenter,
    spec: &ModelSpec,
    groups: Vec<(Vec<usize>, Array4<f32>)>,
) -> Result<Vec<(Vec<usize>, Array4<f32>)>> {
    let mut out = Vec::with_capacity(groups.len());
    for (members, input) in groups {
        let logits = seg.engine_mut().run(input.view())?;
        let classes = logits.shape()[1];
        if classes != spec.num_classes() {
            bail!(
                "model output has {classes} classes, its spec says {}: logits {:?}",
                spec.num_classes(),
                logits.shape()
            );
        }
        drop(input);
        out.push((members, logits));
    }
    Ok(out)
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
    spec: &ModelSpec,
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
        let groups = group_and_normalise(&images, spec);
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
    spec: &ModelSpec,
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
            let groups = group_and_normalise(&images, spec);
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

/// The class map of image `j` of a group's logits, at the image's size.
fn mask_of(logits: &Array4<f32>, j: usize, img: &RgbImage) -> Array2<u8> {
    let one = logits.slice(s![j..j + 1, .., .., ..]);
    let mask = argmax(one).pop().expect("one image");
    let (w, h) = img.dimensions();
    if mask.dim() == (h as usize, w as usize) {
        mask
    } else {
        resize_nearest(mask.view(), h as usize, w as usize)
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
        // image index -> (group, position in group)
        let mut owner = vec![(0usize, 0usize); scored.images.len()];
        for (g, (members, _)) in scored.groups.iter().enumerate() {
            for (j, &i) in members.iter().enumerate() {
                owner[i] = (g, j);
            }
        }
        let n = scored.images.len();
        match sink {
            Sink::Stdout => {
                let masks: Vec<Array2<u8>> = (0..n)
                    .into_par_iter()
                    .map(|i| {
                        let (g, j) = owner[i];
                        mask_of(&scored.groups[g].1, j, &scored.images[i])
                    })
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
                        let (g, j) = owner[i];
                        let scores = &scored.groups[g].1;
                        let img = &scored.images[i];
                        let mask = mask_of(scores, j, img);
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
                            write("logits.npy", &npy_f32(scores.index_axis(Axis(0), j)))?;
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
