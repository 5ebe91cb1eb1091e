//! Accuracy-driven INT8 mix (`segtool calibrate --auto`): which layers to leave in float
//! so that the quantised model still meets a target measured on held-out images.
//!
//! 1. Calibrate once on the calibration images ([`crate::calibrate`]): the thresholds of
//!    every tensor of the full plan. Leaving nodes float only removes nodes from the
//!    plan, so any mix is a [`crate::qdq::rewrite`] with the same thresholds.
//! 2. Rank the quantised layers by what each costs: their SNR against fp32 (the
//!    calibration report's ranking, on the calibration images) orders the measurement,
//!    then each layer alone in INT8 is measured against fp32 on a few search images,
//!    within a time bound ([`AutoOptions::cost_budget_s`], `cost` module): layers that
//!    change pixels come first, most first. The `candidates` costliest are the search
//!    space.
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
//! 4. Time fp32, all-INT8 and every step's model, interleaved in rounds, medians. A mix
//!    that meets the target but runs slower than fp32 is not chosen: the fastest one that
//!    meets it and beats fp32 is, else fp32 itself.
//! 5. The final check: what is written, on the validation images held out from the
//!    search (`final_check`, a fraction spread evenly over the list), reported beside
//!    the search's figure. It chooses nothing: it says whether the target held on images
//!    that had no say in the choice.
//!
//! Every measurement (3 to 5) runs in the engine the model will ship on ([`MixEngine`]:
//! ONNX Runtime's CPU provider, or OpenVINO with the deployment's device and precision)
//! with the calibration's thread count. Everything but the latencies is deterministic:
//! same images, options, engine and thread count give the same choice and the same
//! model bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use prost::Message;
use segtool_onnx::proto::ModelProto;

mod cost;
mod engine;
mod evaluator;
mod search;
mod stages;
mod table;

pub use engine::MixEngine;
pub use evaluator::lower_bound;
use evaluator::Evaluator;
pub use search::search_bound;

use crate::{calibrate, qdq, trt_cache, CalibrationError, CalibrationOptions, Feed};

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
    /// Also require this speed-up over fp32 (in `engine`) of the chosen mix.
    pub min_speedup: Option<f64>,
    /// Where mixes are judged and timed: the engine the model ships on.
    pub engine: MixEngine,
    /// Search images each layer's cost is measured on (0: rank by SNR alone).
    pub cost_samples: usize,
    /// Seconds the cost ranking may take; layers not reached keep their SNR order after
    /// the ones measured.
    pub cost_budget_s: f64,
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
            engine: MixEngine::ort(),
            cost_samples: 8,
            cost_budget_s: 120.0,
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
    /// Median latency of one validation image in the search's engine (0 when not timed).
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
    /// Share of pixels whose fp32 decision changes when this layer alone is INT8 (None:
    /// not measured within [`AutoOptions::cost_budget_s`]).
    pub cost: Option<f64>,
}

/// How far the cost ranking got.
#[derive(Clone, Debug, PartialEq)]
pub struct CostRanking {
    /// Layers measured alone in INT8.
    pub measured: usize,
    /// Quantised layers in all.
    pub layers: usize,
    /// Images each was measured on.
    pub images: usize,
    pub seconds: f64,
    /// [`AutoOptions::cost_budget_s`].
    pub budget_s: f64,
}

impl CostRanking {
    /// `ranked by cost: 14 of 21 layers measured alone on 8 images in 58 s (bound 120 s);
    /// the rest by SNR`.
    pub fn describe(&self) -> String {
        if self.measured == 0 {
            return format!(
                "ranked by SNR alone (cost ranking: {} images, bound {:.0} s)",
                self.images, self.budget_s
            );
        }
        let rest = match self.measured < self.layers {
            true => "; the rest by SNR",
            false => "",
        };
        format!(
            "ranked by cost: {} of {} layers measured alone in INT8 on {} images in {:.1} s (bound {:.0} s){rest}",
            self.measured, self.layers, self.images, self.seconds, self.budget_s
        )
    }
}

/// A target the result misses ([`AutoResult::misses`]): any one withholds the model
/// unless the caller accepts the miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// No mix meets the accuracy target on the search images.
    Accuracy,
    /// The chosen point runs below [`AutoOptions::min_speedup`] over fp32.
    Speed,
    /// The model's final check on the held-out images misses the accuracy target.
    FinalCheck,
}

impl Miss {
    pub fn name(&self) -> &'static str {
        match self {
            Miss::Accuracy => "accuracy",
            Miss::Speed => "speed",
            Miss::FinalCheck => "final_check",
        }
    }
}

/// What became of [`AutoResult::model`]. The library writes nothing: the caller records
/// here what it did, so that the verdict says exactly that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Written {
    /// Nothing recorded (the verdict then only names the model the result holds).
    #[default]
    Undecided,
    /// Written to this path.
    To(PathBuf),
    /// Not written to this path, because of [`AutoResult::misses`].
    Withheld(PathBuf),
}

/// Result of [`auto_calibrate`].
#[derive(Clone, Debug)]
pub struct AutoResult {
    /// The chosen model (or, when none meets the target, the last step's), serialised:
    /// the float model itself when every mix that meets the target is slower.
    pub model: Vec<u8>,
    /// Index in `rows` of `model`: `chosen`, or the last step's when none was.
    pub model_row: usize,
    /// What the caller did with `model` (see [`Written`]).
    pub written: Written,
    /// TensorRT calibration cache of the chosen mix's quantised tensors.
    pub trt_cache: String,
    /// fp32, int8, then each step.
    pub rows: Vec<Row>,
    /// Index in `rows` of the chosen point (None: no mix meets the target; 0: fp32,
    /// because every mix that meets it runs slower).
    pub chosen: Option<usize>,
    /// The mix with the fewest float layers that meets the target, when it was passed
    /// over for running slower than fp32 (index in `rows`).
    pub slower_mix: Option<usize>,
    pub candidates: Vec<Candidate>,
    pub trials: Vec<Trial>,
    pub target: Target,
    pub min_speedup: Option<f64>,
    /// The engine, precision and threads the rows were measured with.
    pub engine: String,
    pub calibration_images: usize,
    /// Validation images the search measured on.
    pub validation_images: usize,
    /// The chosen mix (or the last step's) on held-out validation images; None when
    /// `final_check` is 0 or too few images were given to hold any out.
    pub final_check: Option<FinalCheck>,
    /// [`AutoOptions::confidence`].
    pub confidence: f64,
    pub quantised_layers: usize,
    /// How the layers were ranked for the search.
    pub cost_ranking: CostRanking,
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

/// The search (module docs). `calib_images` calibrate (the first `calib.samples`);
/// `val_images` measure (the first `auto.val_samples`); the two must not share a file.
pub fn auto_calibrate(
    model: &ModelProto,
    calib_images: &[PathBuf],
    val_images: &[PathBuf],
    calib: &CalibrationOptions,
    auto: &AutoOptions,
) -> Result<AutoResult, CalibrationError> {
    stages::check_inputs(calib_images, val_images, auto)?;
    // Weights written as Constant nodes are weights too (qdq::constants).
    let model = &*qdq::with_constants_as_initializers(model);
    let feed = Feed::of_model(model, calib.card.as_ref())?;
    let fp32 = model.encode_to_vec();
    let val_images = &val_images[..val_images.len().min(auto.val_samples.max(1))];
    let (val_images, check_images) = final_check_split(val_images, auto.final_check);

    // 1. One calibration: thresholds for every tensor of the full plan.
    let cal = calibrate(model, calib_images, calib)?;
    // 2. Every quantised layer, worst SNR on the calibration images first.
    let by_snr = stages::rank_layers(model, &cal, calib_images, &feed, calib, auto)?;
    let (every_layer, cost_ranking) =
        cost::rank_by_cost(by_snr, model, &cal, &val_images, &feed, calib, auto)?;
    // 3. The search, on the validation images, in the deployment's engine.
    let evaluator = |images: &[PathBuf]| {
        Evaluator::new(
            &fp32,
            images,
            auto.labels.as_deref(),
            &feed,
            &auto.engine,
            calib.threads,
            auto.confidence,
        )
    };
    let ev = evaluator(&val_images)?;
    let mut table = stages::Table::start(&ev, &fp32, &cal.model, auto)?;
    let (candidates, trials) = if table.chosen.is_none() {
        stages::search(&mut table, &ev, model, &cal, &every_layer, calib, auto)?
    } else {
        (
            every_layer.iter().take(auto.candidates).cloned().collect(),
            Vec::new(),
        )
    };
    // 4. Latency in the deployment's engine; a mix slower than fp32 is not chosen.
    if auto.latency_runs > 0 {
        table.time(&ev.inputs[0], &auto.engine, calib.threads, auto)?;
    }
    let slower_mix = table.prefer_faster_than_fp32();
    // 5. The final check of what is written, on images the search did not use.
    let pick = table.chosen.unwrap_or(table.rows.len() - 1);
    let final_check = match check_images.is_empty() {
        true => None,
        false => Some(stages::final_check(
            &evaluator(&check_images)?,
            &table.models[pick],
            auto,
        )?),
    };

    let plan = qdq::plan(
        model,
        &[&calib.keep_float[..], &table.rows[pick].float_layers[..]].concat(),
        calib.layout,
    )?;
    let kept_thresholds: BTreeMap<String, f32> = match pick {
        0 => BTreeMap::new(),
        _ => cal
            .thresholds
            .iter()
            .filter(|(t, _)| plan.activations.contains(t))
            .map(|(t, v)| (t.clone(), *v))
            .collect(),
    };
    let trt_cache = trt_cache::cache_text(qdq::graph(model)?, &kept_thresholds)?;
    Ok(AutoResult {
        model: table.models.swap_remove(pick),
        model_row: pick,
        written: Written::Undecided,
        trt_cache,
        rows: table.rows,
        chosen: table.chosen,
        slower_mix,
        candidates,
        trials,
        target: auto.target,
        min_speedup: auto.min_speedup,
        engine: stages::engine_label(&auto.engine, calib.threads),
        calibration_images: cal.samples,
        validation_images: val_images.len(),
        final_check,
        confidence: auto.confidence,
        quantised_layers: cal.plan.nodes.len(),
        cost_ranking,
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
