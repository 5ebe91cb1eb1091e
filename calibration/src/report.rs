//! INT8 vs fp32: per-layer cosine similarity and SNR of the quantised layers' outputs,
//! argmax agreement of the logits (and mIoU against labels), model sizes and ONNX Runtime
//! CPU latency.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use prost::Message;
use segtool_core::metrics::ConfusionMatrix;
use segtool_onnx::proto::ModelProto;

use crate::session::OrtModel;
use crate::similarity::Similarity;
use crate::{for_each_batch, qdq, CalibrationError, Feed};

/// One layer's agreement.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerStat {
    pub name: String,
    pub cosine: f64,
    /// `10 log10(sum fp32^2 / sum (fp32 - int8)^2)`, capped at 200 dB.
    pub snr_db: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub method: String,
    pub samples: usize,
    pub layers: Vec<LayerStat>,
    /// Fraction of pixels whose argmax matches fp32's.
    pub argmax_agreement: f64,
    pub miou_fp32: Option<f64>,
    pub miou_int8: Option<f64>,
    pub size_fp32: u64,
    pub size_int8: u64,
    pub latency_fp32_ms: f64,
    pub latency_int8_ms: f64,
}

pub(crate) fn median_ms(
    model: &mut OrtModel,
    x: ndarray::ArrayView4<f32>,
    runs: usize,
) -> Result<f64, CalibrationError> {
    for _ in 0..2 {
        model.run_discard(x)?;
    }
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        model.run_discard(x)?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Options of [`compare`].
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Images compared (the first of the list).
    pub samples: usize,
    /// Masks folder: `<image stem>.png`, class index per pixel, 255 ignored.
    pub labels: Option<PathBuf>,
    /// Timed runs per model (median reported); 0 skips timing.
    pub latency_runs: usize,
    pub threads: Option<usize>,
}

/// Runs both models on the first `opts.samples` images with `layers` exposed.
pub fn compare(
    fp32: &ModelProto,
    int8: &[u8],
    layers: &[String],
    images: &[PathBuf],
    feed: &Feed,
    method: &str,
    opts: &CompareOptions,
) -> Result<Report, CalibrationError> {
    let int8_model =
        ModelProto::decode(int8).map_err(|e| CalibrationError::Model(e.to_string()))?;
    let output = output_name(fp32, feed)?;
    let mut names: Vec<String> = layers.to_vec();
    names.push(output.clone());
    let mut a = OrtModel::new(
        &qdq::with_outputs(fp32, layers).encode_to_vec(),
        opts.threads,
    )?;
    let mut b = OrtModel::new(
        &qdq::with_outputs(&int8_model, layers).encode_to_vec(),
        opts.threads,
    )?;
    let images = &images[..images.len().min(opts.samples.max(1))];
    let mut acc: BTreeMap<String, Similarity> = layers
        .iter()
        .map(|l| (l.clone(), Similarity::default()))
        .collect();
    let (mut same, mut pixels) = (0u64, 0u64);
    let classes = feed.classes();
    let mut cm = (ConfusionMatrix::new(classes), ConfusionMatrix::new(classes));
    let mut index = 0usize;
    for_each_batch(images, feed, 1, |x, _| {
        let oa = a.run(x.view(), &names)?;
        let ob = b.run(x.view(), &names)?;
        for l in layers {
            if let (Some(u), Some(v)) = (oa.get(l), ob.get(l)) {
                acc.get_mut(l).unwrap().add(
                    u.as_slice().expect("standard layout"),
                    v.as_slice().expect("standard layout"),
                );
            }
        }
        if let (Some(u), Some(v)) = (oa.get(&output), ob.get(&output)) {
            let (ma, mb) = (feed.decisions(u), feed.decisions(v));
            same += ma.iter().zip(&mb).filter(|(p, q)| p == q).count() as u64;
            pixels += ma.len() as u64;
            if let Some(dir) = &opts.labels {
                let label = label_of(dir, &images[index], ma.len())?;
                cm.0.update(label.as_raw(), &ma, 255);
                cm.1.update(label.as_raw(), &mb, 255);
            }
        }
        index += 1;
        Ok(())
    })?;
    let layers = acc
        .into_iter()
        .map(|(name, s)| LayerStat {
            name,
            cosine: s.cosine(),
            snr_db: s.snr_db(),
        })
        .collect();
    // The sessions with exposed layers go first: one model in memory at a time.
    drop((a, b));
    let (lat_a, lat_b) = match opts.latency_runs {
        0 => (0.0, 0.0),
        _ => latencies(fp32, int8, &images[0], feed, opts)?,
    };
    Ok(Report {
        method: method.to_string(),
        samples: images.len(),
        layers,
        argmax_agreement: if pixels > 0 {
            same as f64 / pixels as f64
        } else {
            0.0
        },
        miou_fp32: opts.labels.as_ref().map(|_| cm.0.mean_iou()),
        miou_int8: opts.labels.as_ref().map(|_| cm.1.mean_iou()),
        size_fp32: fp32.encoded_len() as u64,
        size_int8: int8.len() as u64,
        latency_fp32_ms: lat_a,
        latency_int8_ms: lat_b,
    })
}

/// The output compared: the feed's (a model card's), else the graph's first.
fn output_name(fp32: &ModelProto, feed: &Feed) -> Result<String, CalibrationError> {
    match feed.output() {
        Some(name) => Ok(name.to_string()),
        None => qdq::graph(fp32)?
            .output
            .first()
            .map(|o| o.name.clone())
            .ok_or_else(|| CalibrationError::Model("the model has no output".into())),
    }
}

/// The mask `<image stem>.png` in `dir`, refused unless it has `pixels` pixels.
fn label_of(dir: &Path, image: &Path, pixels: usize) -> Result<image::GrayImage, CalibrationError> {
    let stem = image.file_stem().unwrap_or_default().to_string_lossy();
    let path = dir.join(format!("{stem}.png"));
    let label = crate::read_label(&path)?;
    if label.len() != pixels {
        return Err(CalibrationError::Input(format!(
            "{}: label size differs from the image's",
            path.display()
        )));
    }
    Ok(label)
}

/// Median ms of `opts.latency_runs` runs of each model on `image`, one session at a time.
fn latencies(
    fp32: &ModelProto,
    int8: &[u8],
    image: &Path,
    feed: &Feed,
    opts: &CompareOptions,
) -> Result<(f64, f64), CalibrationError> {
    let x = feed.tensor(&crate::read_image(image)?)?;
    let mut pa = OrtModel::new(&fp32.encode_to_vec(), opts.threads)?;
    let lat_a = median_ms(&mut pa, x.view(), opts.latency_runs)?;
    drop(pa);
    let mut pb = OrtModel::new(int8, opts.threads)?;
    let lat_b = median_ms(&mut pb, x.view(), opts.latency_runs)?;
    Ok((lat_a, lat_b))
}

impl Report {
    /// Layers by ascending SNR (worst first).
    pub fn worst(&self, n: usize) -> Vec<&LayerStat> {
        let mut v: Vec<&LayerStat> = self.layers.iter().collect();
        v.sort_by(|a, b| {
            a.snr_db
                .total_cmp(&b.snr_db)
                .then_with(|| a.name.cmp(&b.name))
        });
        v.truncate(n);
        v
    }

    pub fn to_json(&self) -> serde_json::Value {
        let layer = |l: &LayerStat| serde_json::json!({"name": l.name, "cosine": l.cosine, "snr_db": l.snr_db});
        serde_json::json!({
            "method": self.method,
            "samples": self.samples,
            "argmax_agreement": self.argmax_agreement,
            "miou_fp32": self.miou_fp32,
            "miou_int8": self.miou_int8,
            "size_fp32_bytes": self.size_fp32,
            "size_int8_bytes": self.size_int8,
            "latency_ms": {"fp32": self.latency_fp32_ms, "int8": self.latency_int8_ms, "provider": "cpu"},
            "layers": self.layers.iter().map(layer).collect::<Vec<_>>(),
            "worst_layers": self.worst(5).into_iter().map(layer).collect::<Vec<_>>(),
        })
    }

    pub fn to_text(&self) -> String {
        let mut s = format!(
            "calibration ({}) on {} image(s) compared: argmax agreement with fp32 {:.2}%\n",
            self.method,
            self.samples,
            self.argmax_agreement * 100.0
        );
        if let (Some(a), Some(b)) = (self.miou_fp32, self.miou_int8) {
            s += &format!("mIoU vs labels: fp32 {:.4}, int8 {:.4}\n", a, b);
        }
        s += &format!(
            "model size: fp32 {} bytes, int8 {} bytes ({:.2}x smaller)\n",
            self.size_fp32,
            self.size_int8,
            self.size_fp32 as f64 / self.size_int8.max(1) as f64
        );
        if self.latency_fp32_ms > 0.0 {
            s += &format!(
                "ORT CPU latency (median): fp32 {:.2} ms, int8 {:.2} ms\n",
                self.latency_fp32_ms, self.latency_int8_ms
            );
        }
        s += "worst layers (by SNR):\n";
        for l in self.worst(5) {
            s += &format!(
                "  {:<48} cosine {:.5}  SNR {:6.2} dB\n",
                l.name, l.cosine, l.snr_db
            );
        }
        s
    }
}
