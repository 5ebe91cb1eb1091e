//! The writer stage of `segtool infer`: where results go ([`Sink`]: an output folder or
//! raw class maps on stdout), per-image access to a scored batch's results, and the
//! files written per image (`_mask.png`, `_overlay.png`, `_labels.png`, `_logits.npy`,
//! with [`npy_f32`] as the `.npy` encoder). Kept apart because output formats change
//! independently of how batches are produced and scored.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use image::{GrayImage, ImageBuffer, Luma, RgbImage};
use indicatif::ProgressBar;
use ndarray::{Array3, ArrayView3};
use rayon::prelude::*;
use segtool_model_spec::ModelSpec;
use segtool_runtime::{colorize, overlay, ClassMap, FlickerMeter, DEFAULT_ALPHA};

use super::pipeline::{Results, Scored};

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

/// Where results go.
#[derive(Clone)]
pub(super) enum Sink {
    Folder {
        out: PathBuf,
        overlay: bool,
        labels: bool,
        logits: bool,
    },
    /// Raw class maps, frame after frame: one byte a pixel for models of at most 256
    /// classes, two (little-endian) above.
    Stdout,
}

impl Sink {
    /// Where the results went, for the summary line.
    pub(super) fn target(&self) -> String {
        match self {
            Sink::Folder { out, .. } => out.display().to_string(),
            Sink::Stdout => "stdout".to_string(),
        }
    }

    /// Writes each image's files into the folder (in parallel); nothing for stdout.
    fn write_folder(
        &self,
        spec: &ModelSpec,
        names: &[String],
        images: &[RgbImage],
        logits_of: &[Option<Array3<f32>>],
        masks: &[ClassMap],
    ) -> Result<()> {
        let Sink::Folder {
            out,
            overlay,
            labels,
            logits,
        } = self
        else {
            return Ok(());
        };
        (0..names.len())
            .into_par_iter()
            .map(|i| -> Result<()> {
                let name = &names[i];
                let scores = match logits {
                    true => Some(logits_of[i].as_ref().with_context(|| {
                        format!("{name}: the model outputs no logits (--argmax export)")
                    })?),
                    false => None,
                };
                write_files(
                    out,
                    name,
                    spec,
                    &masks[i],
                    overlay.then_some(&images[i]),
                    *labels,
                    scores.as_ref().map(|s| s.view()),
                )
            })
            .collect()
    }
}

/// Raw class maps, one after the other, flushed per batch: `u8` ids, or `u16`
/// little-endian ones for a model of more than 256 classes.
fn write_raw(stdout: &mut impl Write, masks: &[ClassMap]) -> Result<()> {
    for mask in masks {
        let bytes = match mask.as_u8() {
            Some(ids) => std::borrow::Cow::Borrowed(ids.to_slice().expect("standard layout")),
            None => std::borrow::Cow::Owned(mask.to_le_bytes()),
        };
        stdout
            .write_all(&bytes)
            .context("writing class maps to stdout")?;
    }
    stdout.flush().context("writing class maps to stdout")
}

/// A scored batch's results, owned: per image its mask and, when asked for, its logits
/// (the pipeline's decoding stage, run here on the writer thread; a batch server's
/// answers, waited for in input order; or a card model's segmentations).
struct Answers {
    done: Vec<(ClassMap, Option<Array3<f32>>)>,
}

impl Answers {
    fn wait(results: Results, names: &[String]) -> Result<Self> {
        let done = match results {
            Results::Scored(scored) => scored
                .decode()?
                .into_iter()
                .map(|s| (s.mask, s.logits))
                .collect(),
            Results::Pending(handles) => handles
                .into_iter()
                .zip(names)
                .map(|(h, name)| {
                    h.wait()
                        .map(|o| (o.mask, o.logits))
                        .with_context(|| format!("segmenting {name}"))
                })
                .collect::<Result<_>>()?,
        };
        Ok(Self { done })
    }
}

/// Writes one image's files into `out`: `<name>_mask.png`, and `_overlay.png` (when
/// `overlay_on` is given), `_labels.png`, `_logits.npy` (when `logits` is given).
pub(super) fn write_files(
    out: &Path,
    name: &str,
    spec: &ModelSpec,
    mask: &ClassMap,
    overlay_on: Option<&RgbImage>,
    labels: bool,
    logits: Option<ArrayView3<f32>>,
) -> Result<()> {
    let write = |suffix: &str, bytes: &[u8]| -> Result<()> {
        let path = out.join(format!("{name}_{suffix}"));
        segtool_model_spec::io::write_atomic_unsynced(&path, bytes)
            .with_context(|| format!("writing {}", path.display()))
    };
    let png = |img: image::DynamicImage| segtool_core::dataset::encode_png(&img);
    write("mask.png", &png(colorize(mask, &spec.palette).into()))?;
    if let Some(img) = overlay_on {
        let o = overlay(img, mask, &spec.palette, DEFAULT_ALPHA);
        write("overlay.png", &png(o.into()))?;
    }
    if labels {
        write("labels.png", &png(labels_image(mask)))?;
    }
    if let Some(scores) = logits {
        write("logits.npy", &npy_f32(scores))?;
    }
    Ok(())
}

/// The class indices as a grey image: 8 bits a pixel for a model of at most 256 classes,
/// 16 above (what `_labels.png` holds).
pub(super) fn labels_image(mask: &ClassMap) -> image::DynamicImage {
    let (h, w) = mask.dim();
    match mask {
        ClassMap::U8(ids) => GrayImage::from_raw(w as u32, h as u32, ids.iter().copied().collect())
            .expect("mask size")
            .into(),
        ClassMap::U16(ids) => {
            ImageBuffer::<Luma<u16>, _>::from_raw(w as u32, h as u32, ids.iter().copied().collect())
                .expect("mask size")
                .into()
        }
    }
}

/// What the writer did: its busy time, and the masks' flicker (share of pixels whose
/// class changed between consecutive frames) when asked for.
pub(super) struct Written {
    pub(super) busy: Duration,
    pub(super) flicker: Option<FlickerMeter>,
}

/// `flicker`: measure the flicker of the masks in input order (a stream of frames).
pub(super) fn write_results(
    rx: Receiver<Scored>,
    spec: &ModelSpec,
    sink: &Sink,
    recycle: Option<Sender<Vec<u8>>>,
    bar: &ProgressBar,
    lines: bool,
    flicker: bool,
) -> Result<Written> {
    let mut busy = Duration::ZERO;
    let mut meter = flicker.then(FlickerMeter::new);
    let mut stdout = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let total = bar.length();
    let mut done = 0u64;
    for scored in rx {
        let t0 = Instant::now();
        let n = scored.images.len();
        let answers = Answers::wait(scored.results, &scored.names)?;
        let (masks, logits): (Vec<ClassMap>, Vec<Option<Array3<f32>>>) =
            answers.done.into_iter().unzip();
        if let Some(meter) = &mut meter {
            for mask in &masks {
                meter.observe(mask);
            }
        }
        match sink {
            Sink::Stdout => write_raw(&mut stdout, &masks)?,
            Sink::Folder { .. } => {
                sink.write_folder(spec, &scored.names, &scored.images, &logits, &masks)?
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
    Ok(Written {
        busy,
        flicker: meter,
    })
}
