//! Quantisation-aware training: fake quantisation in the loop, placed exactly where the
//! INT8 file quantises.
//!
//! Placement is not written here. [`FakeQuant::new`] exports the model being trained to
//! its fp32 ONNX graph in memory (segtool-export, BatchNorm folded), asks the calibration
//! crate's QDQ plan which reads of which tensors go through a Q/DQ pair for the layout
//! ([`segtool_calibration::qdq::quantised_reads`]) and which Conv weights and biases are
//! quantised, and the tch model calls [`FakeQuant::read`] at every op input, named by
//! the ONNX node and tensor it becomes. A read the plan quantises and the model never
//! visits is refused ([`FakeQuant::check_coverage`]), so the two cannot drift apart.
//!
//! The arithmetic is ONNX's: an activation read is `(clamp(round(x / s) + z, qmin, qmax)
//! - z) * s` (round half to even, as QuantizeLinear), with the scale and zero point the
//! layout derives from the threshold T ([`Layout::activation`], the function the QDQ
//! rewrite calls); a Conv weight is the export's BN-folded weight (folded in f64, rounded
//! once to f32, as the export folds it), quantised per output channel, symmetric, over
//! the weight range; a quantised bias is rounded to the int32 grid of `s_in * s_w`.
//! Gradients pass rounding straight through (STE) and are zero where the clamp
//! saturates; with [`RangeLearning::Lsq`] they reach the thresholds too (LSQ).
//!
//! Thresholds start from a calibration of the float model on training images with the
//! calibration crate's statistics and calibrators ([`FakeQuant::calibrate`]), and live in
//! the checkpoint as [`QAT_THRESHOLDS_TENSOR`] beside a [`QatSpec`] (the contract, owned
//! by `segtool_model_spec::qat`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use prost::Message;
use segtool_calibration::qdq::{self, Layout, WeightRange};
use segtool_calibration::stats::{Histogram, Range, TensorStats, DEFAULT_BINS};
use segtool_calibration::Method;
use segtool_export::proto::ModelProto;
use segtool_model_spec::qat::{QatSpec, QAT_METADATA_KEY, QAT_THRESHOLDS_TENSOR};
use segtool_model_spec::ModelSpec;
use tch::{nn, Kind, Tensor};

use crate::model::{bn_t, Bn, Conv};

/// PyTorch's BatchNorm epsilon, which the export folds with.
const BN_EPS: f64 = 1e-5;

/// How thresholds move in training.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeLearning {
    /// A moving average of each batch's range (PyTorch's default QAT observers), the
    /// range of the global batch (the largest over the ranks); gradients through
    /// rounding by the straight-through estimator.
    Ema,
    /// Learned by gradient (LSQ, Esser et al. 2020), with LSQ's gradient scale over the
    /// global batch (so that data-parallel ranks train what one process would).
    Lsq,
}

impl RangeLearning {
    pub fn name(self) -> &'static str {
        match self {
            Self::Ema => "ema",
            Self::Lsq => "lsq",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        [Self::Ema, Self::Lsq].into_iter().find(|r| r.name() == s)
    }
}

/// QAT settings.
#[derive(Clone, Debug)]
pub struct QatOptions {
    pub layout: Layout,
    pub weight_range: WeightRange,
    pub ranges: RangeLearning,
    /// Calibrator of the initial thresholds (the calibration crate's).
    pub method: Method,
    pub percentile: f64,
    /// Iteration from which BatchNorm statistics are frozen (running statistics, the
    /// exported folding in the forward); `None`: never.
    pub freeze_bn_at: Option<usize>,
    /// EMA: weight of each batch's range.
    pub ema_momentum: f64,
    /// Training images the initial calibration sees (recorded in the [`QatSpec`]).
    pub init_samples: usize,
}

impl Default for QatOptions {
    fn default() -> Self {
        Self {
            layout: Layout::Portable,
            weight_range: WeightRange::for_this_cpu(),
            ranges: RangeLearning::Ema,
            method: Method::Entropy,
            percentile: 99.99,
            freeze_bn_at: None,
            ema_momentum: 0.01,
            init_samples: 32,
        }
    }
}

/// One quantised read as the tch model sees it.
#[derive(Clone, Debug)]
struct Read {
    /// Index into the thresholds.
    source: usize,
    nonneg: bool,
    /// Statistics of the source come from this read: `Some(false)` the value read,
    /// `Some(true)` its Relu (the read's source is the Relu of the tensor), `None` not
    /// from here.
    observe: Option<bool>,
}

enum Mode {
    Quantise,
    Ranges(Vec<Range>),
    Histograms(Vec<Histogram>),
}

struct State {
    mode: Mode,
    visited: HashSet<(String, String)>,
    /// Sources already observed in this forward.
    observed: Vec<bool>,
    /// EMA: the largest |x| of each source in this step.
    batch_max: Vec<f32>,
    /// The current forward is a training one.
    training: bool,
}

/// Fake quantisation of one model for one layout (see the module docs).
pub struct FakeQuant {
    pub options: QatOptions,
    /// Scale sources (ONNX tensor names), the order of `thresholds`.
    pub sources: Vec<String>,
    reads: HashMap<(String, String), Read>,
    /// Quantised Conv nodes -> whether their bias is quantised too.
    weights: HashMap<String, bool>,
    /// `qat.thresholds` in the VarStore.
    pub thresholds: Tensor,
    bn_frozen: AtomicBool,
    /// Data-parallel ranks: LSQ's gradient scale counts the global batch's elements.
    world_size: AtomicUsize,
    state: Mutex<State>,
}

// SAFETY: the thresholds tensor is a libtorch tensor like every model parameter (tch
// marks Tensor Send); forwards only read it, and writes (`set_thresholds`) happen between
// steps on the training thread, as for the parameters the optimiser updates. The rest of
// the state is behind a Mutex or atomic.
unsafe impl Send for FakeQuant {}
unsafe impl Sync for FakeQuant {}

impl std::fmt::Debug for FakeQuant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeQuant")
            .field("layout", &self.options.layout)
            .field("sources", &self.sources.len())
            .field("reads", &self.reads.len())
            .finish()
    }
}

impl QatOptions {
    /// The settings a QAT checkpoint's contract records (`spec`): what resumes it, or
    /// rebuilds its fake-quant model.
    pub fn from_spec(spec: &QatSpec) -> Result<Self> {
        let unknown = |what: &str, v: &str| anyhow::anyhow!("QAT spec: unknown {what} {v:?}");
        Ok(Self {
            layout: Layout::from_name(&spec.layout)
                .ok_or_else(|| unknown("layout", &spec.layout))?,
            weight_range: WeightRange::from_name(&spec.weight_range)
                .ok_or_else(|| unknown("weight range", &spec.weight_range))?,
            ranges: RangeLearning::from_name(&spec.ranges)
                .ok_or_else(|| unknown("range learning", &spec.ranges))?,
            method: spec.init_method.parse().map_err(anyhow::Error::msg)?,
            freeze_bn_at: spec.freeze_bn_at.map(|i| i as usize),
            init_samples: spec.init_samples,
            ..Self::default()
        })
    }
}

/// The model of a QAT checkpoint as it trained: its weights with fake quantisation at
/// its learned thresholds (eval mode gives what the INT8 file computes); `None` for a
/// float checkpoint.
pub fn load_model(
    checkpoint: &crate::Checkpoint,
    device: tch::Device,
) -> Result<Option<(nn::VarStore, crate::DaNet)>> {
    let Some(json) = checkpoint.info.get(QAT_METADATA_KEY) else {
        return Ok(None);
    };
    let spec = QatSpec::from_json(json).map_err(anyhow::Error::msg)?;
    let mut vs = nn::VarStore::new(device);
    let mut model = crate::DaNet::new(&vs.root(), &checkpoint.spec);
    let fq = FakeQuant::new(&vs, &checkpoint.spec, QatOptions::from_spec(&spec)?)?;
    if fq.sources != spec.sources {
        bail!(
            "the checkpoint's QAT quantises other tensors than its model's plan for layout {:?}",
            spec.layout
        );
    }
    checkpoint.load_into(&mut vs)?;
    fq.set_bn_frozen(true);
    model.set_qat(Some(std::sync::Arc::new(fq)));
    Ok(Some((vs, model)))
}

/// The fp32 ONNX graph `segtool export` writes for the variables of `vs`.
pub fn export_fp32(vs: &nn::VarStore, spec: &ModelSpec) -> Result<ModelProto> {
    let bytes = crate::checkpoint::to_bytes(vs, spec, &Default::default())?;
    let st = safetensors::SafeTensors::deserialize(&bytes)?;
    let (onnx, _) =
        segtool_export::export_onnx_bytes(&st, spec, &segtool_export::ExportOptions::default())
            .context("exporting the model to plan its quantisation")?;
    Ok(ModelProto::decode(onnx.as_slice())?)
}

impl FakeQuant {
    /// Plans fake quantisation of the model in `vs` for `options.layout` and adds the
    /// thresholds variable ([`QAT_THRESHOLDS_TENSOR`], zeros until [`Self::calibrate`] or
    /// a checkpoint fills it; trainable with LSQ) to `vs`.
    pub fn new(vs: &nn::VarStore, spec: &ModelSpec, options: QatOptions) -> Result<Self> {
        let model = export_fp32(vs, spec)?;
        let plan = qdq::plan(&model, &[], options.layout)?;
        let (reads, weights) = qdq::quantised_reads(&model, &plan)?;
        let g = qdq::graph(&model)?;
        let op: HashMap<&str, &str> = g
            .node
            .iter()
            .map(|n| (n.name.as_str(), n.op_type.as_str()))
            .collect();
        let relu_of: HashSet<(&str, &str)> = plan
            .outputs
            .iter()
            .filter(|(t, s)| t != s)
            .map(|(t, s)| (t.as_str(), s.as_str()))
            .collect();
        let mut sources: Vec<String> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut by_read = HashMap::new();
        for r in &reads {
            // A Shape reads only the dimensions: nothing to quantise in tch.
            if op.get(r.node.as_str()) == Some(&"Shape") {
                continue;
            }
            let source = *index.entry(r.scale_source.clone()).or_insert_with(|| {
                sources.push(r.scale_source.clone());
                sources.len() - 1
            });
            let observe = if r.tensor == r.scale_source {
                Some(false)
            } else if relu_of.contains(&(r.tensor.as_str(), r.scale_source.as_str())) {
                Some(true)
            } else {
                None
            };
            by_read.insert(
                (r.node.clone(), r.tensor.clone()),
                Read {
                    source,
                    nonneg: r.nonneg,
                    observe,
                },
            );
        }
        let weights = weights
            .into_iter()
            .map(|w| (w.node, w.bias.is_some()))
            .collect();
        let n = sources.len() as i64;
        let root = vs.root() / "qat";
        let name = QAT_THRESHOLDS_TENSOR
            .strip_prefix("qat.")
            .expect("the thresholds tensor lives under qat.");
        let thresholds = match options.ranges {
            RangeLearning::Lsq => root.zeros(name, &[n]),
            RangeLearning::Ema => root.zeros_no_train(name, &[n]),
        };
        Ok(Self {
            sources,
            reads: by_read,
            weights,
            thresholds,
            bn_frozen: AtomicBool::new(false),
            world_size: AtomicUsize::new(1),
            state: Mutex::new(State {
                mode: Mode::Quantise,
                visited: HashSet::new(),
                observed: vec![false; n as usize],
                batch_max: vec![0.0; n as usize],
                training: false,
            }),
            options,
        })
    }

    /// The contract written beside the thresholds in a checkpoint.
    pub fn spec(&self, init_samples: usize) -> QatSpec {
        QatSpec {
            layout: self.options.layout.name().into(),
            per_channel: true,
            weight_range: self.options.weight_range.name().into(),
            ranges: self.options.ranges.name().into(),
            init_method: self.options.method.name().into(),
            init_samples,
            freeze_bn_at: self.options.freeze_bn_at.map(|i| i as u64),
            sources: self.sources.clone(),
        }
    }

    /// Refuses to resume `spec` (a checkpoint's) with other settings: the layout, the
    /// weight granularity and range, or the quantised tensors.
    pub fn check_resume(&self, spec: &QatSpec) -> Result<()> {
        let mine = self.spec(spec.init_samples);
        let differ = |what: &str, a: &str, b: &str| -> Result<()> {
            if a != b {
                bail!("the checkpoint was trained with QAT {what} {b:?}; resuming it with {a:?} is refused (start a new QAT run from a float checkpoint)");
            }
            Ok(())
        };
        differ("layout", &mine.layout, &spec.layout)?;
        differ(
            "weight granularity",
            if mine.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            },
            if spec.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            },
        )?;
        differ("weight range", &mine.weight_range, &spec.weight_range)?;
        differ("range learning", &mine.ranges, &spec.ranges)?;
        if mine.sources != spec.sources {
            bail!("the checkpoint's QAT quantises other tensors than this model's plan for layout {:?}", mine.layout);
        }
        Ok(())
    }

    pub fn set_bn_frozen(&self, frozen: bool) {
        self.bn_frozen.store(frozen, Ordering::Relaxed);
    }

    /// Ranks training data-parallel (1: one process); set by the trainer.
    pub fn set_world_size(&self, world_size: usize) {
        self.world_size.store(world_size.max(1), Ordering::Relaxed);
    }

    pub fn bn_frozen(&self) -> bool {
        self.bn_frozen.load(Ordering::Relaxed)
    }

    /// The thresholds as f32, in [`Self::sources`] order.
    pub fn threshold_values(&self) -> Vec<f32> {
        Vec::<f32>::try_from(
            self.thresholds
                .detach()
                .to_device(tch::Device::Cpu)
                .to_kind(Kind::Float),
        )
        .expect("thresholds convert")
    }

    /// Thresholds by source name.
    pub fn thresholds_by_name(&self) -> BTreeMap<String, f32> {
        self.sources
            .iter()
            .cloned()
            .zip(self.threshold_values())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called by the model at the start of each forward.
    pub(crate) fn begin_forward(&self, train: bool) {
        let mut s = self.lock();
        s.training = train;
        s.observed.iter_mut().for_each(|o| *o = false);
    }

    /// Input `input` of node `node` (ONNX names): fake-quantised when the plan quantises
    /// that read, as is otherwise; with the scale used.
    pub(crate) fn read_scaled(
        &self,
        node: &str,
        input: &str,
        x: &Tensor,
    ) -> (Tensor, Option<Tensor>) {
        let Some(r) = self.reads.get(&(node.to_string(), input.to_string())) else {
            return (x.shallow_clone(), None);
        };
        let mut s = self.lock();
        s.visited.insert((node.to_string(), input.to_string()));
        let observe = |s: &mut State| -> Option<Tensor> {
            let relu = r.observe?;
            if s.observed[r.source] {
                return None;
            }
            s.observed[r.source] = true;
            let v = x.detach();
            Some(if relu { v.relu() } else { v })
        };
        match &mut s.mode {
            Mode::Ranges(_) | Mode::Histograms(_) => {
                if let Some(v) = observe(&mut s) {
                    let v = Vec::<f32>::try_from(
                        v.to_device(tch::Device::Cpu)
                            .to_kind(Kind::Float)
                            .contiguous()
                            .view(-1),
                    )
                    .expect("f32");
                    match &mut s.mode {
                        Mode::Ranges(r2) => r2[r.source].update(&v),
                        Mode::Histograms(h) => h[r.source].add(&v),
                        Mode::Quantise => unreachable!(),
                    }
                }
                (x.shallow_clone(), None)
            }
            Mode::Quantise => {
                if self.options.ranges == RangeLearning::Ema && s.training {
                    if let Some(v) = observe(&mut s) {
                        let m = v.abs().max().double_value(&[]) as f32;
                        s.batch_max[r.source] = s.batch_max[r.source].max(m);
                    }
                }
                drop(s);
                let (scale, zp, qmin, qmax) = self.activation(r, x.numel() as i64);
                let y = fake_quant(x, &scale, zp, qmin, qmax);
                (y, Some(scale))
            }
        }
    }

    /// [`Self::read_scaled`] without the scale.
    pub(crate) fn read(&self, node: &str, input: &str, x: &Tensor) -> Tensor {
        self.read_scaled(node, input, x).0
    }

    /// Scale (a 0-dim f32 tensor), zero point and integer range of read `r`. The value
    /// of the scale is the QDQ rewrite's own ([`Layout::activation`] on the threshold);
    /// with LSQ it carries the threshold's gradient.
    fn activation(&self, r: &Read, numel: i64) -> (Tensor, f64, f64, f64) {
        let t = self.thresholds.get(r.source as i64);
        let tv = t.double_value(&[]) as f32;
        let (scale, zp) = self.options.layout.activation(tv, r.nonneg, "z");
        let (zp, qmin, qmax) = match (
            zp.data_type == segtool_export::proto::DataType::Uint8 as i32,
            zp.raw_data.first().copied().unwrap_or(0),
        ) {
            (true, z) => (z as f64, 0.0, 255.0),
            (false, z) => (z as i8 as f64, -128.0, 127.0),
        };
        let exact = Tensor::from(scale).to_device(self.thresholds.device());
        let scale = if self.options.ranges == RangeLearning::Lsq && tv > 0.0 {
            // d scale / d T, and LSQ's gradient scale 1 / sqrt(N * Qp), N over the
            // global batch (each rank sees 1/world of it).
            let k = (scale / tv) as f64;
            let world = self.world_size.load(Ordering::Relaxed) as f64;
            let n = numel.max(1) as f64 * world;
            let g = 1.0 / (n * (qmax - zp).max(1.0)).sqrt();
            // Value: the exact scale; gradient: d scale / d T times g (LSQ's grad_scale).
            let ts = &t * (k * g);
            exact + (&ts - ts.detach())
        } else {
            exact
        };
        (scale, zp, qmin, qmax)
    }

    /// Conv `node` reading `input` (ONNX names), with its BatchNorm when it has one: the
    /// export's BN-folded weight (and bias), fake-quantised as the plan says. Before the
    /// BN freeze, a training forward normalises with batch statistics as PyTorch's QAT
    /// ConvBn does (weight folded with the running statistics, the conv output scaled
    /// back, then BatchNorm).
    pub(crate) fn conv(
        &self,
        node: &str,
        input: &str,
        x: &Tensor,
        conv: &Conv,
        bn: Option<&Bn>,
        bn_train: bool,
    ) -> Tensor {
        let (xq, s_in) = self.read_scaled(node, input, x);
        let Some(&bias_quantised) = self.weights.get(node) else {
            return match bn {
                Some(bn) => bn_t(&xq.apply(conv), bn, bn_train),
                None => xq.apply(conv),
            };
        };
        let observing = !matches!(self.lock().mode, Mode::Quantise);
        let w = &conv.inner.ws;
        let bn_train = bn_train && !self.bn_frozen();
        match bn {
            Some(bn) if bn_train => {
                let (gamma, rv) = (bn.bn.ws.as_ref().expect("affine BN"), &bn.bn.running_var);
                let sf = gamma / (rv + BN_EPS).sqrt();
                let wf = w * sf.view([-1, 1, 1, 1]);
                let wq = if observing { wf } else { self.weight(&wf).0 };
                let y = conv.with(&xq, &wq, None) / sf.view([1, -1, 1, 1]);
                bn_t(&y, bn, true)
            }
            _ => {
                let (wf, bf) = match bn {
                    Some(bn) => fold(w, bn),
                    None => (
                        w.shallow_clone(),
                        conv.inner.bs.as_ref().expect("conv bias").shallow_clone(),
                    ),
                };
                if observing {
                    return conv.with(&xq, &wf, Some(&bf));
                }
                let (wq, s_w) = self.weight(&wf);
                let bq = match (bias_quantised, s_in) {
                    (true, Some(s_in)) => quantise_bias(&bf, &(s_in.detach() * s_w)),
                    _ => bf,
                };
                conv.with(&xq, &wq, Some(&bq))
            }
        }
    }

    /// Per-output-channel symmetric fake quantisation of a weight, as the rewrite
    /// quantises it; returns it and the scales.
    fn weight(&self, w: &Tensor) -> (Tensor, Tensor) {
        let max = self.options.weight_range.max() as f64;
        let absmax = w.detach().abs().amax([1, 2, 3].as_slice(), false);
        let s = absmax.divide_scalar(max);
        let ok = absmax.gt(0.0).logical_and(&absmax.isfinite());
        let s = s.where_self(&ok, &s.ones_like());
        let q = fake_quant(w, &s.view([-1, 1, 1, 1]), 0.0, -max, max);
        (q, s)
    }

    /// Every read the plan quantises was visited by a forward since the last check.
    pub fn check_coverage(&self) -> Result<()> {
        let s = self.lock();
        let mut missing: Vec<_> = self
            .reads
            .keys()
            .filter(|k| !s.visited.contains(*k))
            .collect();
        missing.sort();
        if let Some((node, tensor)) = missing.first() {
            bail!(
                "the {} QDQ plan quantises {} read(s) the tch model never makes, e.g. node {node:?} reading {tensor:?}",
                self.options.layout.name(),
                missing.len()
            );
        }
        Ok(())
    }

    /// Initial thresholds: statistics of the float model (no fake quantisation) over
    /// `batches` (normalised images), in two passes as the calibration crate collects
    /// them (range, then a histogram of |x|), turned into thresholds by its calibrator.
    /// `forward` runs the model in eval mode on a batch. Checks that every quantised
    /// read was made.
    pub fn calibrate(&self, batches: &[Tensor], forward: impl Fn(&Tensor)) -> Result<()> {
        let n = self.sources.len();
        self.lock().mode = Mode::Ranges(vec![Range::default(); n]);
        self.lock().visited.clear();
        tch::no_grad(|| batches.iter().for_each(&forward));
        let ranges = match std::mem::replace(&mut self.lock().mode, Mode::Quantise) {
            Mode::Ranges(r) => r,
            _ => unreachable!(),
        };
        if let Some(i) = ranges.iter().position(|r| r.count == 0) {
            bail!(
                "no statistics for {:?}: the tch model never produced it",
                self.sources[i]
            );
        }
        let mut hists = None;
        if self.options.method.needs_histogram() {
            self.lock().mode = Mode::Histograms(
                ranges
                    .iter()
                    .map(|r| Histogram::new(DEFAULT_BINS, r.absmax()))
                    .collect(),
            );
            tch::no_grad(|| batches.iter().for_each(&forward));
            hists = match std::mem::replace(&mut self.lock().mode, Mode::Quantise) {
                Mode::Histograms(h) => Some(h),
                _ => unreachable!(),
            };
        }
        let values: Vec<f32> = ranges
            .into_iter()
            .enumerate()
            .map(|(i, range)| {
                let stats = TensorStats {
                    range,
                    hist: hists.as_ref().map(|h| h[i].clone()),
                };
                self.options
                    .method
                    .threshold(&stats, self.options.percentile)
            })
            .collect();
        self.set_thresholds(&values);
        self.check_coverage()
    }

    /// Sets the thresholds (e.g. from a checkpoint's values).
    pub fn set_thresholds(&self, values: &[f32]) {
        tch::no_grad(|| {
            let mut t = self.thresholds.shallow_clone();
            t.copy_(&Tensor::from_slice(values).to_device(t.device()));
        });
    }

    /// The end of a training step: EMA moves each threshold towards the step's range
    /// (`ranks_max` takes the largest of the per-source maxima over the ranks: the global
    /// batch's range, identical thresholds everywhere).
    pub fn end_step(&self, ranks_max: impl FnOnce(&[f64]) -> Result<Vec<f64>>) -> Result<()> {
        if self.options.ranges != RangeLearning::Ema {
            return Ok(());
        }
        let maxima: Vec<f64> = {
            let mut s = self.lock();
            let m = s.batch_max.iter().map(|&v| v as f64).collect();
            s.batch_max.iter_mut().for_each(|v| *v = 0.0);
            m
        };
        let maxima = ranks_max(&maxima)?;
        let c = self.options.ema_momentum;
        let next: Vec<f32> = self
            .threshold_values()
            .into_iter()
            .zip(maxima)
            .map(|(t, m)| {
                if m > 0.0 {
                    ((1.0 - c) * t as f64 + c * m) as f32
                } else {
                    t
                }
            })
            .collect();
        self.set_thresholds(&next);
        Ok(())
    }

    /// The checkpoint header entry ([`QAT_METADATA_KEY`], the [`QatSpec`] JSON).
    pub fn metadata(&self, init_samples: usize) -> (String, String) {
        (
            QAT_METADATA_KEY.to_string(),
            self.spec(init_samples).to_json(),
        )
    }
}

/// Refuses to fold BatchNorm for QAT when the initial weights did not set its statistics:
/// `missing` are the model variables the file left at their init (an import report's),
/// `file` names it. The error names the first BatchNorm statistic missing.
pub fn check_bn_statistics(missing: &[String], file: &str) -> Result<()> {
    let mut lacking: Vec<&String> = missing
        .iter()
        .filter(|n| n.ends_with(".running_mean") || n.ends_with(".running_var"))
        .collect();
    lacking.sort();
    if let Some(first) = lacking.first() {
        bail!(
            "QAT folds BatchNorm into the convolutions as the INT8 export does, but {file} has \
             no `{first}` ({} BatchNorm statistics missing): start QAT from a checkpoint \
             trained with its BatchNorm statistics",
            lacking.len()
        );
    }
    Ok(())
}

/// Minimum, median and maximum of a set of thresholds (zeros when empty).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThresholdSummary {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl ThresholdSummary {
    pub fn of(values: &[f32]) -> Self {
        let mut v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            min: v[0],
            median,
            max: v[n - 1],
        }
    }
}

/// How far thresholds moved from `from` to `to` (same sources, same order): the mean of
/// `|log(to / from)|` over the positive pairs, the relative movement of a typical range
/// (0.01: ranges moved about 1%).
pub fn threshold_movement(from: &[f32], to: &[f32]) -> f64 {
    let logs: Vec<f64> = from
        .iter()
        .zip(to)
        .filter(|(a, b)| **a > 0.0 && **b > 0.0)
        .map(|(&a, &b)| (b as f64 / a as f64).ln().abs())
        .collect();
    match logs.is_empty() {
        true => 0.0,
        false => logs.iter().sum::<f64>() / logs.len() as f64,
    }
}

/// `(clamp(round(x / s) + z, qmin, qmax) - z) * s`, rounding half to even and passing
/// gradients straight through the rounding.
pub fn fake_quant(x: &Tensor, s: &Tensor, zp: f64, qmin: f64, qmax: f64) -> Tensor {
    let v = x / s;
    let r = &v + (v.round() - &v).detach();
    ((r + zp).clamp(qmin, qmax) - zp) * s
}

/// The export's folding of `bn` into a bias-free conv weight `w` (f64, rounded once).
fn fold(w: &Tensor, bn: &Bn) -> (Tensor, Tensor) {
    let d = |t: &Tensor| t.to_kind(Kind::Double);
    let gamma = d(bn.bn.ws.as_ref().expect("affine BN"));
    let beta = d(bn.bn.bs.as_ref().expect("affine BN"));
    let scale = gamma / (d(&bn.bn.running_var) + BN_EPS).sqrt();
    let wf = (d(w) * scale.view([-1, 1, 1, 1])).to_kind(Kind::Float);
    let bf = ((-d(&bn.bn.running_mean)) * &scale + beta).to_kind(Kind::Float);
    (wf, bf)
}

/// A bias on the int32 grid of `scales` (one per output channel), as the rewrite's
/// `quantise_bias` (in f64) and DequantizeLinear (in f32).
fn quantise_bias(b: &Tensor, scales: &Tensor) -> Tensor {
    let v = b.to_kind(Kind::Double) / scales.to_kind(Kind::Double);
    let q = &v + (v.round() - &v).detach();
    q.to_kind(Kind::Float) * scales
}
