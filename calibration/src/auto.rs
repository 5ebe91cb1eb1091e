//! Accuracy-driven INT8 mix (`segtool calibrate --auto`): which layers to leave in float
//! so that the quantised model still meets a target measured on held-out images.
//!
//! 1. Calibrate once on the calibration images ([`crate::calibrate`]): the thresholds of
//!    every tensor of the full plan. Leaving nodes float only removes nodes from the
//!    plan, so any mix is a [`crate::qdq::rewrite`] with the same thresholds.
//! 2. Rank the quantised layers by their SNR against fp32 (the calibration report's
//!    ranking, on the calibration images); the `candidates` worst are the search space.
//! 3. Search on the search part of the validation images (never the calibration ones),
//!    measuring the target metric (argmax agreement with fp32, or mIoU against labels) of
//!    mixes that leave the k worst candidates float. An agreement target is met when the
//!    lower confidence bound of the mean per-image agreement meets it (`confidence`), so
//!    that the choice carries a margin for images the search did not see. All of them
//!    first, then bisection over k for the smallest k that meets it, then a refinement
//!    that returns the chosen layers to INT8, least harmful first, when the target still
//!    holds without them. At most [`search_bound`] evaluations: 1 + 2 ceil(log2 N) for N
//!    candidates, against a greedy search's N(N+1)/2. When even all candidates float
//!    miss, the same search runs over every quantised layer (all float, fp32's accuracy,
//!    is a valid answer); only if that misses too does no mix meet the target.
//! 4. The final check: the chosen mix on the validation images held out from the search
//!    (`final_check`, a fraction spread evenly over the list), reported beside the
//!    search's figure. It chooses nothing: it says whether the target held on images that
//!    had no say in the choice.
//! 5. Time fp32, all-INT8 and every step's model in ONNX Runtime (CPU), interleaved in
//!    rounds, medians.
//!
//! Everything but the latencies is deterministic: same images, options and thread count
//! give the same choice and the same model bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use prost::Message;
use segtool_onnx::proto::ModelProto;

mod evaluator;
mod search;
mod table;

pub use evaluator::lower_bound;
use evaluator::{Evaluator, Score};
pub use search::search_bound;
use search::{search_widening, Measured, Search};

use crate::report::CompareOptions;
use crate::session::OrtModel;
use crate::{calibrate, qdq, rewrite_with, trt_cache, CalibrationError, CalibrationOptions, Feed};

/// What the mix must reach on the validation images.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Fraction of pixels whose argmax equals fp32's, e.g. 0.995.
    MinAgreement(f64),
    /// Largest mIoU loss against fp32, in mIoU points (0.5: 0.5 points, i.e. 0.005),
    /// measured against labels.
    MaxMiouDrop(f64),
}

impl Target {
    pub fn metric_name(&self) -> &'static str {
        match self {
            Target::MinAgreement(_) => "agreement",
            Target::MaxMiouDrop(_) => "miou",
        }
    }

    /// Whether `agreement` (a figure or its lower bound), or the mIoU against fp32's on
    /// the same images, meets the target.
    pub fn met_by(&self, agreement: f64, miou: Option<f64>, miou_fp32: Option<f64>) -> bool {
        match *self {
            Target::MinAgreement(a) => agreement >= a,
            Target::MaxMiouDrop(p) => match (miou_fp32, miou) {
                (Some(f), Some(m)) => (f - m) * 100.0 <= p + 1e-12,
                _ => false,
            },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Target::MinAgreement(a) => format!("argmax agreement with fp32 >= {:.2}%", a * 100.0),
            Target::MaxMiouDrop(p) => format!("mIoU drop vs fp32 <= {p} points"),
        }
    }
}

/// Settings of [`auto_calibrate`].
#[derive(Clone, Debug)]
pub struct AutoOptions {
    pub target: Target,
    /// Masks of the validation images (`<image stem>.png`, class per pixel, 255
    /// ignored): mIoU in the table; required by [`Target::MaxMiouDrop`].
    pub labels: Option<PathBuf>,
    /// Worst layers by SNR searched (at most [`search_bound`]`(candidates)` evaluations
    /// after the all-INT8 one).
    pub candidates: usize,
    /// Validation images used (the first of the list).
    pub val_samples: usize,
    /// Fraction of those held out of the search for the final check (0: none).
    pub final_check: f64,
    /// One-sided confidence level of the per-image agreement bound an agreement target
    /// is measured by (0: the pooled agreement itself).
    pub confidence: f64,
    /// Calibration images the SNR ranking runs on.
    pub snr_samples: usize,
    /// Timed runs per model per round (0: no timing).
    pub latency_runs: usize,
    /// Rounds over all the table's models (medians over rounds x runs).
    pub latency_rounds: usize,
    /// Also require this speed-up over fp32 (ORT CPU) of the chosen mix.
    pub min_speedup: Option<f64>,
}

impl Default for AutoOptions {
    fn default() -> Self {
        Self {
            target: Target::MinAgreement(0.995),
            labels: None,
            candidates: 8,
            val_samples: 200,
            final_check: 0.25,
            confidence: 0.95,
            snr_samples: 8,
            latency_runs: 10,
            latency_rounds: 3,
            min_speedup: None,
        }
    }
}

/// Which model a table row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    Fp32,
    Int8,
    /// A mix the search measured: `k` layers float (the first step row is the chosen mix
    /// when one meets the target).
    Step(usize),
}

/// One row of the trade-off table.
#[derive(Clone, Debug)]
pub struct Row {
    pub kind: RowKind,
    /// Layers (node names) left in float (beyond `--keep-float`), in the order added.
    pub float_layers: Vec<String>,
    pub agreement: f64,
    /// Lower confidence bound of the mean per-image agreement (see [`AutoOptions`]).
    pub agreement_bound: f64,
    pub miou: Option<f64>,
    /// Median ORT CPU latency of one validation image (0 when not timed).
    pub latency_ms: f64,
    pub size_bytes: u64,
    pub meets_target: bool,
}

impl Row {
    pub fn label(&self) -> String {
        match self.kind {
            RowKind::Fp32 => "fp32".into(),
            RowKind::Int8 => "int8".into(),
            RowKind::Step(k) => match self.float_layers.last() {
                Some(last) if k > 1 => format!("{k} float: {}..{last}", self.float_layers[0]),
                Some(only) => format!("1 float: {only}"),
                None => "0 float".into(),
            },
        }
    }
}

/// One evaluation of the search, in order.
#[derive(Clone, Debug)]
pub struct Trial {
    /// 1-based evaluation number.
    pub step: usize,
    /// The mix measured (`"3 float"`, `"2 float, without conv_x"`).
    pub layer: String,
    pub agreement: f64,
    pub agreement_bound: f64,
    pub miou: Option<f64>,
}

/// The chosen mix measured on the validation images the search did not use.
#[derive(Clone, Debug)]
pub struct FinalCheck {
    pub images: usize,
    pub agreement: f64,
    pub miou: Option<f64>,
    /// fp32's mIoU on those images (the drop is measured against it).
    pub miou_fp32: Option<f64>,
    pub meets_target: bool,
}

/// A candidate layer: its node, its output and SNR in the all-INT8 model.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub node: String,
    pub output: String,
    pub snr_db: f64,
    pub cosine: f64,
}

/// Result of [`auto_calibrate`].
#[derive(Clone, Debug)]
pub struct AutoResult {
    /// The chosen mix (or, when none meets the target, the last step's), serialised.
    pub model: Vec<u8>,
    /// TensorRT calibration cache of the chosen mix's quantised tensors.
    pub trt_cache: String,
    /// fp32, int8, then each step.
    pub rows: Vec<Row>,
    /// Index in `rows` of the chosen point (None: no mix meets the target).
    pub chosen: Option<usize>,
    pub candidates: Vec<Candidate>,
    pub trials: Vec<Trial>,
    pub target: Target,
    pub min_speedup: Option<f64>,
    pub calibration_images: usize,
    /// Validation images the search measured on.
    pub validation_images: usize,
    /// The chosen mix (or the last step's) on held-out validation images; None when
    /// `final_check` is 0 or too few images were given to hold any out.
    pub final_check: Option<FinalCheck>,
    /// [`AutoOptions::confidence`].
    pub confidence: f64,
    pub quantised_layers: usize,
}

/// Splits the validation images into the search's and the final check's: `fraction` of
/// them, spread evenly over the list, are held out (at least one when `fraction > 0`
/// and there are two images or more; the search always keeps one).
pub fn final_check_split(images: &[PathBuf], fraction: f64) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let n = images.len();
    let f = fraction.clamp(0.0, 1.0);
    let held = if n < 2 || f == 0.0 {
        0
    } else {
        ((n as f64 * f).round() as usize).clamp(1, n - 1)
    };
    let mut search = Vec::new();
    let mut check = Vec::new();
    for (i, p) in images.iter().enumerate() {
        // Image i is held out when the running count of held-out images steps up.
        if (i + 1) * held / n > i * held / n {
            check.push(p.clone());
        } else {
            search.push(p.clone());
        }
    }
    (search, check)
}

/// The deterministic hold-out split used when no validation folder is given: of the
/// images in name order, those at odd positions are held out for validation, the rest
/// calibrate.
pub fn holdout_split(images: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut calib = Vec::new();
    let mut val = Vec::new();
    for (i, p) in images.iter().enumerate() {
        if i % 2 == 1 {
            val.push(p.clone());
        } else {
            calib.push(p.clone());
        }
    }
    (calib, val)
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The search (module docs). `calib_images` calibrate (the first `calib.samples`);
/// `val_images` measure (the first `auto.val_samples`); the two must not share a file.
pub fn auto_calibrate(
    model: &ModelProto,
    calib_images: &[PathBuf],
    val_images: &[PathBuf],
    calib: &CalibrationOptions,
    auto: &AutoOptions,
) -> Result<AutoResult, CalibrationError> {
    if calib_images.is_empty() || val_images.is_empty() {
        return Err(CalibrationError::Input(
            "--auto needs calibration images and held-out validation images (at least one each)"
                .into(),
        ));
    }
    let calib_set: std::collections::HashSet<PathBuf> =
        calib_images.iter().map(|p| canonical(p)).collect();
    if let Some(p) = val_images
        .iter()
        .find(|p| calib_set.contains(&canonical(p)))
    {
        return Err(CalibrationError::Input(format!(
            "{}: a validation image is also a calibration image (the target must be measured on held-out images)",
            p.display()
        )));
    }
    match auto.target {
        Target::MinAgreement(a) if !(0.0..=1.0).contains(&a) => {
            return Err(CalibrationError::Input(format!(
                "--min-agreement {a} is not a fraction in [0, 1]"
            )))
        }
        Target::MaxMiouDrop(p) if !(p >= 0.0) => {
            return Err(CalibrationError::Input(format!(
                "--max-miou-drop {p} must be >= 0 (mIoU points)"
            )))
        }
        Target::MaxMiouDrop(_) if auto.labels.is_none() => {
            return Err(CalibrationError::Input(
                "--max-miou-drop needs --labels (masks of the validation images)".into(),
            ))
        }
        _ => {}
    }
    if !(0.0..1.0).contains(&auto.final_check) || !(0.0..1.0).contains(&auto.confidence) {
        return Err(CalibrationError::Input(format!(
            "--final-check {} and --confidence {} must be fractions in [0, 1)",
            auto.final_check, auto.confidence
        )));
    }
    let feed = Feed::of_model(model, calib.card.as_ref())?;
    let fp32_bytes = model.encode_to_vec();
    let val_images = &val_images[..val_images.len().min(auto.val_samples.max(1))];
    let (val_images, check_images) = final_check_split(val_images, auto.final_check);
    let val_images = &val_images[..];

    // 1. One calibration: thresholds for every tensor of the full plan.
    let cal = calibrate(model, calib_images, calib)?;
    let g = qdq::graph(model)?;

    // 2. Candidates: the worst layers by SNR on the calibration images.
    let snr = crate::report::compare(
        model,
        &cal.model,
        &cal.plan.layer_outputs,
        calib_images,
        &feed,
        calib.method.name(),
        &CompareOptions {
            samples: auto.snr_samples.max(1),
            labels: None,
            latency_runs: 0,
            threads: calib.threads,
        },
    )?;
    let by_output: BTreeMap<&str, (f64, f64)> = snr
        .layers
        .iter()
        .map(|l| (l.name.as_str(), (l.snr_db, l.cosine)))
        .collect();
    let mut candidates: Vec<(usize, Candidate)> = cal
        .plan
        .nodes
        .iter()
        .zip(&cal.plan.layer_outputs)
        .enumerate()
        .map(|(order, (&idx, out))| {
            let (snr_db, cosine) = by_output.get(out.as_str()).copied().unwrap_or((200.0, 1.0));
            (
                order,
                Candidate {
                    node: g.node[idx].name.clone(),
                    output: out.clone(),
                    snr_db,
                    cosine,
                },
            )
        })
        .collect();
    candidates.sort_by(|(oa, a), (ob, b)| a.snr_db.total_cmp(&b.snr_db).then(oa.cmp(ob)));
    // Every quantised layer, worst first: the search widens to all of them when no mix
    // of the `auto.candidates` worst meets the target (all float is a valid answer).
    let every_layer: Vec<Candidate> = candidates.into_iter().map(|(_, c)| c).collect();
    let mut candidates: Vec<Candidate> =
        every_layer.iter().take(auto.candidates).cloned().collect();

    // 3. Search on the validation images.
    let evaluator = |images: &[PathBuf]| {
        Evaluator::new(
            &fp32_bytes,
            images,
            auto.labels.as_deref(),
            &feed,
            calib.threads,
            auto.confidence,
        )
    };
    let ev = evaluator(val_images)?;
    let meets = |s: &Score| auto.target.met_by(s.bound, s.miou, ev.miou_fp32);
    let metric = |s: &Score| match auto.target {
        Target::MinAgreement(_) => s.bound,
        Target::MaxMiouDrop(_) => s.miou.unwrap_or(f64::NEG_INFINITY),
    };
    let mix = |float: &[String]| -> Result<Vec<u8>, CalibrationError> {
        let mut keep = calib.keep_float.clone();
        keep.extend(float.iter().cloned());
        let plan = qdq::plan(model, &keep, calib.layout)?;
        Ok(rewrite_with(model, &plan, &cal.thresholds, calib, cal.samples, &keep)?.encode_to_vec())
    };

    let int8 = ev.evaluate(&cal.model)?;
    let mut rows = vec![
        Row {
            kind: RowKind::Fp32,
            float_layers: Vec::new(),
            agreement: 1.0,
            agreement_bound: 1.0,
            miou: ev.miou_fp32,
            latency_ms: 0.0,
            size_bytes: fp32_bytes.len() as u64,
            meets_target: true,
        },
        Row {
            kind: RowKind::Int8,
            float_layers: Vec::new(),
            agreement: int8.agreement,
            agreement_bound: int8.bound,
            miou: int8.miou,
            latency_ms: 0.0,
            size_bytes: cal.model.len() as u64,
            meets_target: meets(&int8),
        },
    ];
    let mut models: Vec<Vec<u8>> = vec![fp32_bytes.clone(), cal.model.clone()];
    let mut trials = Vec::new();
    let mut chosen = rows[1].meets_target.then_some(1);
    if chosen.is_none() && !candidates.is_empty() {
        let progress = &calib.progress;
        // At most: the candidates' search, then (widened) every layer's.
        let bound = search_bound(candidates.len())
            + match every_layer.len() > candidates.len() {
                true => search_bound(every_layer.len()),
                false => 0,
            };
        progress.start("search", bound as u64, 0);
        let started = Instant::now();
        let mut measure = |set: &[String], what: String| -> Result<Measured, CalibrationError> {
            let bytes = mix(set)?;
            let score = ev.evaluate(&bytes)?;
            let ok = meets(&score);
            trials.push(Trial {
                step: trials.len() + 1,
                layer: what.clone(),
                agreement: score.agreement,
                agreement_bound: score.bound,
                miou: score.miou,
            });
            let done = trials.len();
            let elapsed = started.elapsed().as_secs_f64();
            let left = elapsed / done as f64 * bound.saturating_sub(done) as f64;
            progress.advance(1);
            progress.message(format!(
                "{what}: {} {:.4}",
                auto.target.metric_name(),
                metric(&score)
            ));
            progress.line(format!(
                "evaluation {done} (at most {bound}): {what}, {} {:.4}{}; {elapsed:.0} s, at most ~{left:.0} s left",
                metric_label(auto),
                metric(&score),
                if ok { ", meets the target" } else { "" },
            ));
            Ok(Measured {
                float: set.to_vec(),
                agreement: score.agreement,
                agreement_bound: score.bound,
                miou: score.miou,
                ok,
                bytes,
            })
        };
        let nodes = |c: &[Candidate]| c.iter().map(|c| c.node.clone()).collect::<Vec<_>>();
        let widening = format!(
            "no mix of the {} worst layers meets {}: widening the search to all {} quantised \
             layers",
            candidates.len(),
            auto.target.describe(),
            every_layer.len()
        );
        let (found, widened) = search_widening(
            &nodes(&candidates),
            &nodes(&every_layer),
            &mut measure,
            &mut || progress.line(widening.clone()),
        )?;
        if widened {
            candidates = every_layer.clone();
        }
        let Search {
            measured,
            reachable,
        } = found;
        progress.finish(None);
        // Rows: the chosen mix first among the steps when one meets the target.
        for m in measured {
            rows.push(Row {
                kind: RowKind::Step(m.float.len()),
                float_layers: m.float,
                agreement: m.agreement,
                agreement_bound: m.agreement_bound,
                miou: m.miou,
                latency_ms: 0.0,
                size_bytes: m.bytes.len() as u64,
                meets_target: m.ok,
            });
            models.push(m.bytes);
        }
        chosen = reachable.then_some(2);
    }

    // 4. The final check of the chosen mix (or the most float one measured) on the
    // images the search did not use.
    let pick = chosen.unwrap_or(rows.len() - 1);
    let final_check = if check_images.is_empty() {
        None
    } else {
        let check = evaluator(&check_images)?;
        let s = check.evaluate(&models[pick])?;
        let meets_target = auto.target.met_by(s.agreement, s.miou, check.miou_fp32);
        Some(FinalCheck {
            images: check.len(),
            agreement: s.agreement,
            miou: s.miou,
            miou_fp32: check.miou_fp32,
            meets_target,
        })
    };

    // 5. Latency, interleaved over the models in rounds.
    if auto.latency_runs > 0 {
        let x = &ev.inputs[0];
        let mut sessions = models
            .iter()
            .map(|m| OrtModel::new(m, calib.threads))
            .collect::<Result<Vec<_>, _>>()?;
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); sessions.len()];
        for s in sessions.iter_mut() {
            for _ in 0..2 {
                s.run_discard(x.view())?;
            }
        }
        for _ in 0..auto.latency_rounds.max(1) {
            for (s, t) in sessions.iter_mut().zip(times.iter_mut()) {
                for _ in 0..auto.latency_runs {
                    let start = Instant::now();
                    s.run_discard(x.view())?;
                    t.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        for (row, mut t) in rows.iter_mut().zip(times) {
            t.sort_by(f64::total_cmp);
            row.latency_ms = t[t.len() / 2];
        }
    }

    // No mix meets the target: the most float one measured (all candidates) is written.
    let plan = qdq::plan(
        model,
        &{
            let mut k = calib.keep_float.clone();
            k.extend(rows[pick].float_layers.iter().cloned());
            k
        },
        calib.layout,
    )?;
    let kept_thresholds: BTreeMap<String, f32> = cal
        .thresholds
        .iter()
        .filter(|(t, _)| plan.activations.contains(t))
        .map(|(t, v)| (t.clone(), *v))
        .collect();
    let model_bytes = if pick == 0 {
        // Only possible with no candidates and a failing int8: keep the int8 model.
        models[1].clone()
    } else {
        models[pick].clone()
    };
    let trt_cache = trt_cache::cache_text(qdq::graph(model)?, &kept_thresholds)?;
    Ok(AutoResult {
        model: model_bytes,
        trt_cache,
        rows,
        chosen,
        candidates,
        trials,
        target: auto.target,
        min_speedup: auto.min_speedup,
        calibration_images: cal.samples,
        validation_images: val_images.len(),
        final_check,
        confidence: auto.confidence,
        quantised_layers: cal.plan.nodes.len(),
    })
}

/// What the search's log lines call the metric.
fn metric_label(auto: &AutoOptions) -> String {
    match auto.target {
        Target::MinAgreement(_) if auto.confidence > 0.0 => {
            format!("agreement ({:.0}% lower bound)", auto.confidence * 100.0)
        }
        t => t.metric_name().to_string(),
    }
}
